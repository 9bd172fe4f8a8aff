import { readFile, writeFile } from 'node:fs/promises';
import { basename, extname } from 'node:path';
import { RelentError } from '../core/errors.js';
import { BROOKER_STRATEGIES, type BrookerConfig } from '../sim/brooker.js';
import { parseScenario, parseScenarioText, parseSimPolicy, runScenario, SCENARIO_NAMES, type Scenario } from '../sim/config.js';
import { formatResult } from '../sim/format.js';
import { OVERLOAD_DEFAULTS, type OverloadConfig } from '../sim/overload.js';
import { CAPACITY_DEFAULTS } from '../sim/capacity.js';
import { TAIL_DEFAULTS } from '../sim/tail.js';
import { QUOTA_DEFAULTS } from '../sim/quota.js';
import type { SimPolicy } from '../sim/policies.js';
import { EXIT, fsReason, parseFlags, processIo, type Io } from './args.js';
import { colorEnabled, NO_PAINT, paintFor, paintTables } from './io.js';
import { createProgress } from './progress.js';

export const SIMULATE_HELP = `relent simulate SCENARIO [options]

Runs a fleet of simulated clients whose every retry decision is relent's decide(),
in virtual time, and prints tables (or JSON).

Scenarios:
  brooker    Brooker's optimistic-concurrency experiment: work and completion time
             of none / exponential / full / equal / decorrelated backoff, 10…190 clients
  overload   a fleet against a dependency whose capacity drops for 10 s: load
             amplification, success, latency and recovery of the peers' defaults and
             relent's, calibrated against measurements of the real libraries
  layers     three layers each retrying 4 times against an overloaded database,
             with and without retry budgets; and the fleet case: every layer P
             processes, a budget per process or one shared, with and without the
             servers' "don't retry"
  capacity   a dependency whose capacity drops 5x for 20 s: calls in flight, its
             latency and the failures under relent's adaptive limits (gradient,
             AIMD), fixed bulkheads and no limit
  tail       a dependency with a slow tail (2 % of requests 500 ms), then failing:
             latency and extra requests with and without hedging, hedges in the
             failing window
  quota      a dependency with a published quota (100/s, 429 with Retry-After past
             it) asked 150/s: 429s, successes and latency without and with a
             client rate limit
  FILE.json  a scenario file: {"scenario": "overload", …settings} (docs/simulator.md)

Options:
  --policy P     add a policy: a preset or contender name (p-retry, relent, http-429…),
                 a JSON policy object, or @FILE; repeatable. brooker: an extra
                 strategy; overload: an extra contender; layers: the layers' policy
  --runs N       runs per cell (brooker default 100, overload 3, layers 1)
  --seed S       seed (number or text); the same seed prints the same numbers
  --clients L    brooker only: client counts, e.g. 10,50,100
  --processes P  layers only: processes per layer in the fleet rows (default 10)
  --json         JSON on stdout instead of tables
  --html FILE    also write the tables and charts as one self-contained HTML page
  -q, --quiet    no progress on standard error (by default: a bar on a terminal,
                 else a line every 5 s while the simulation runs)
`;

async function readText(path: string, what: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (e) {
    throw new RelentError('ERR_INVALID_INPUT', `${what} ${path}: cannot read (${fsReason(e, String(e))})`, { field: what });
  }
}

/** A --policy value: a name, inline JSON, or @FILE. */
async function policyArg(value: string, index: number, count: number): Promise<SimPolicy> {
  const field = count > 1 ? `--policy #${index + 1}` : '--policy';
  const fallback = count > 1 ? `custom-${index + 1}` : 'custom';
  const trimmed = value.trim();
  let text: string | null = null;
  let name = fallback;
  if (trimmed.startsWith('@')) {
    const path = trimmed.slice(1);
    text = await readText(path, '--policy');
    name = basename(path, extname(path)) || fallback;
  } else if (trimmed.startsWith('{')) {
    text = trimmed;
  }
  if (text === null) return parseSimPolicy(trimmed, field, trimmed);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw new RelentError('ERR_INVALID_INPUT', `${field}: invalid JSON (${e instanceof Error ? e.message : String(e)})`, { field });
  }
  return parseSimPolicy(parsed, field, name);
}

function withPolicies(s: Scenario, extra: SimPolicy[]): Scenario {
  if (extra.length === 0) return s;
  switch (s.scenario) {
    case 'brooker':
      return { scenario: 'brooker', config: { ...s.config, strategies: [...(s.config.strategies ?? BROOKER_STRATEGIES), ...extra] } };
    case 'overload':
      return { scenario: 'overload', config: { ...s.config, policies: [...(s.config.policies ?? OVERLOAD_DEFAULTS.policies), ...extra] } };
    case 'layers':
      if (extra.length > 1)
        throw new RelentError('ERR_INVALID_INPUT', '--policy: the layers scenario takes one policy (every layer runs it)', { field: '--policy' });
      return { scenario: 'layers', config: { ...s.config, policy: extra[0]! } };
    case 'quota':
      return {
        scenario: 'quota',
        config: { ...s.config, contenders: [...(s.config.contenders ?? QUOTA_DEFAULTS.contenders), ...extra.map((p) => ({ name: p.name, policy: p.policy }))] },
      };
    case 'tail':
      return {
        scenario: 'tail',
        config: { ...s.config, contenders: [...(s.config.contenders ?? TAIL_DEFAULTS.contenders), ...extra.map((p) => ({ name: p.name, policy: p.policy }))] },
      };
    case 'capacity':
      throw new RelentError('ERR_INVALID_INPUT', '--policy: the capacity scenario compares limits, not retry policies (give `contenders` in a scenario file)', {
        field: '--policy',
      });
  }
}

export async function simulateCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseFlags({
    args: argv,
    allowPositionals: true,
    options: {
      policy: { type: 'string', multiple: true },
      runs: { type: 'string' },
      seed: { type: 'string' },
      clients: { type: 'string' },
      processes: { type: 'string' },
      json: { type: 'boolean' },
      html: { type: 'string' },
      quiet: { type: 'boolean', short: 'q' },
    },
  });
  if (positionals.length !== 1) {
    io.err(`relent simulate: ${positionals.length === 0 ? 'missing' : 'one'} SCENARIO (${SCENARIO_NAMES.join(', ')} or a scenario file)\n`);
    return EXIT.usage;
  }
  if (values.html !== undefined && values.html.trim() === '') throw new RelentError('ERR_INVALID_INPUT', '--html: expected a file name', { field: '--html' });
  const target = positionals[0]!;
  let scenario: Scenario;
  if ((SCENARIO_NAMES as readonly string[]).includes(target)) {
    scenario = parseScenario({ scenario: target });
  } else if (target.endsWith('.json') || target.includes('/')) {
    scenario = parseScenarioText(await readText(target, 'scenario file'), target);
  } else {
    io.err(`relent simulate: unknown scenario ${JSON.stringify(target)} (known: ${SCENARIO_NAMES.join(', ')}, or a .json scenario file)\n`);
    return EXIT.usage;
  }

  const overrides: Record<string, unknown> = {};
  if (values.runs !== undefined) {
    if (scenario.scenario === 'capacity' || scenario.scenario === 'tail' || scenario.scenario === 'quota')
      throw new RelentError('ERR_INVALID_INPUT', `--runs: the ${scenario.scenario} scenario runs each contender once (change \`seed\` for another draw)`, {
        field: '--runs',
      });
    const runs = Number(values.runs);
    if (!Number.isInteger(runs) || runs < 1 || runs > 100_000)
      throw new RelentError('ERR_INVALID_INPUT', `--runs: expected an integer from 1 to 100000, got ${JSON.stringify(values.runs)}`, { field: '--runs' });
    overrides.runs = runs;
  }
  if (values.seed !== undefined) {
    const s = values.seed.trim();
    if (s.length === 0) throw new RelentError('ERR_INVALID_INPUT', '--seed: expected a number or a word', { field: '--seed' });
    overrides.seed = /^\d+$/.test(s) && Number(s) <= 2 ** 32 - 1 ? Number(s) : s;
  }
  if (values.clients !== undefined) {
    if (scenario.scenario !== 'brooker')
      throw new RelentError('ERR_INVALID_INPUT', '--clients: only the brooker scenario takes client counts', { field: '--clients' });
    const list = values.clients.split(',').map((x) => Number(x.trim()));
    if (list.length === 0 || list.some((n) => !Number.isInteger(n) || n < 1 || n > 10_000)) {
      throw new RelentError('ERR_INVALID_INPUT', `--clients: expected client counts like 10,50,100 (integers 1–10000), got ${JSON.stringify(values.clients)}`, {
        field: '--clients',
      });
    }
    overrides.clients = list;
  }
  if (values.processes !== undefined) {
    if (scenario.scenario !== 'layers')
      throw new RelentError('ERR_INVALID_INPUT', '--processes: only the layers scenario takes processes per layer', { field: '--processes' });
    const p = Number(values.processes);
    if (!Number.isInteger(p) || p < 1 || p > 1000)
      throw new RelentError('ERR_INVALID_INPUT', `--processes: expected an integer from 1 to 1000, got ${JSON.stringify(values.processes)}`, {
        field: '--processes',
      });
    overrides.fleetProcesses = p;
  }
  scenario = { scenario: scenario.scenario, config: { ...scenario.config, ...overrides } } as Scenario;
  const extra: SimPolicy[] = [];
  const given = values.policy ?? [];
  for (let i = 0; i < given.length; i++) extra.push(await policyArg(given[i]!, i, given.length));
  scenario = withPolicies(scenario, extra);
  checkNames(scenario);

  const progress = createProgress({ name: 'relent simulate', io, quiet: values.quiet === true });
  const result = runScenario(scenario, (done, total, label) => progress.update(done, total, `(${done} of ${total}) ${label}`));
  progress.clear();
  if (values.html !== undefined) {
    const { renderSimulationHtml } = await import('../sim/html.js');
    try {
      await writeFile(values.html, renderSimulationHtml(result, header(scenario)));
    } catch (e) {
      throw new RelentError('ERR_INVALID_INPUT', `--html ${values.html}: cannot write (${fsReason(e, String(e), 'no such directory')})`, { field: '--html' });
    }
  }

  if (values.json) {
    io.out(JSON.stringify({ rows: result.result.rows }) + '\n');
    return EXIT.ok;
  }
  io.out(header(scenario) + '\n' + paintTables(formatResult(result), io === processIo ? paintFor(colorEnabled('stdout')) : NO_PAINT));
  return EXIT.ok;
}

/** Two contenders with one name would make the tables ambiguous. */
function checkNames(s: Scenario): void {
  const list =
    s.scenario === 'brooker'
      ? s.config.strategies
      : s.scenario === 'overload'
        ? s.config.policies
        : s.scenario === 'tail' || s.scenario === 'quota'
          ? s.config.contenders
          : undefined;
  if (!list) return;
  const seen = new Set<string>();
  for (const p of list) {
    if (seen.has(p.name))
      throw new RelentError(
        'ERR_INVALID_INPUT',
        `--policy: a policy named ${JSON.stringify(p.name)} is already in the scenario; give yours another name ({"name": …, "policy": …})`,
        { field: '--policy' },
      );
    seen.add(p.name);
  }
}

const runs = (n: number): string => `${n} run${n === 1 ? '' : 's'}`;

function header(s: Scenario): string {
  switch (s.scenario) {
    case 'brooker': {
      const c: Partial<BrookerConfig> = s.config;
      return `relent simulate brooker — optimistic concurrency on one row, network |N(${c.network?.meanMs ?? 10}, ${c.network?.sdMs ?? 2})| ms, base 5, cap 2000; ${runs(c.runs ?? 100)} per cell, seed ${String(c.seed ?? 1)}\n`;
    }
    case 'overload': {
      const c: Partial<OverloadConfig> = s.config;
      const d = { ...OVERLOAD_DEFAULTS.dependency, ...c.dependency };
      const f = (c.faults ?? OVERLOAD_DEFAULTS.faults)[0];
      return (
        `relent simulate overload — ${c.arrivalsPerSec ?? OVERLOAD_DEFAULTS.arrivalsPerSec} operations/s from ${c.clients ?? OVERLOAD_DEFAULTS.clients} clients, capacity ${d.capacityPerSec}/s` +
        (f ? ` cut to ${f.capacityPerSec}/s from ${f.startMs / 1000} s to ${f.endMs / 1000} s` : '') +
        `, ${d.rejectStatus} over capacity, ${(c.deadlineMs ?? OVERLOAD_DEFAULTS.deadlineMs) / 1000} s deadline; ${runs(c.runs ?? OVERLOAD_DEFAULTS.runs)}, seed ${String(c.seed ?? 1)}\n`
      );
    }
    case 'capacity': {
      const c = { ...CAPACITY_DEFAULTS, ...s.config };
      return `relent simulate capacity — ${c.arrivalsPerSec} operations/s, ${c.capacity} workers of ${c.serviceMs} ms cut to ${c.degraded} from ${c.dropAtMs / 1000} s for ${c.dropForMs / 1000} s, ${c.deadlineMs / 1000} s deadline, no retries; seed ${String(c.seed)}\n`;
    }
    case 'quota': {
      const c = { ...QUOTA_DEFAULTS, ...s.config };
      return `relent simulate quota — ${c.arrivalsPerSec} operations/s against a quota of ${c.quotaPerSec}/s (burst ${c.quotaBurst}; 429 with Retry-After: ${c.retryAfterSec} past it), ${c.durationMs / 1000} s; seed ${String(c.seed)}\n`;
    }
    case 'tail': {
      const c = { ...TAIL_DEFAULTS, ...s.config };
      return `relent simulate tail — ${c.arrivalsPerSec} GETs/s, requests ${c.fastMs} ms (± ${Math.round(c.fastJitter * 100)} %), ${Math.round(c.slowShare * 1000) / 10} % of them ${c.slowMs} ms, independent; ${c.durationMs / 1000} s; seed ${String(c.seed)}\n`;
    }
    case 'layers':
      return `relent simulate layers — ${s.config.layers ?? 3} layers each retrying, the database overloaded (503); fleet rows: ${s.config.fleetProcesses ?? 10} processes per layer; ${runs(s.config.runs ?? 1)}, seed ${String(s.config.seed ?? 1)}\n`;
  }
}
