// `relent exchange-bench`: the exchange's load test. It runs `relent exchange --workers N`
// (a primary and N workers, as in production) on a configuration whose partners are
// pointed at simulated bidders on loopback (one fast, one slow, one that hangs, one that
// fails, one that declines with nbr…), drives it open-loop at a target rate from another
// process, and prints auctions/s, answer time p50/p99 (at the source and in the exchange),
// answers written more than 5 ms after their deadline, and the exchange's memory over
// time. `--find-max` looks for the highest rate that keeps the p99 target, then runs at
// 80 % of it; `--workers 1,2` compares worker counts. The child processes are in
// exchange-bench-roles.ts, `--cold-starts` in exchange-bench-cold.ts.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { RelentError } from '../core/errors.js';
import type { BidderConfig, ExchangeConfig, ResolvedExchangeConfig } from '../rtb/config.js';
import type { ExchangeStats } from '../rtb/exchange.js';
import { EXIT, parseDuration, parseFlags, type Io } from './args.js';
import { startCluster, type ProcessMemory } from './exchange-cluster.js';
import { forkRole, next, ROLE_ENV, runBidders, runLoadgen, STAND_IN_NICE, type LoadResult } from './exchange-bench-roles.js';
import { loadExchangeConfig, partnerTable } from './exchange.js';

export { STAND_IN_NICE, type LoadResult } from './exchange-bench-roles.js';
export { COLD_START_BIDDERS, formatColdStarts, runColdStarts, type ColdStart, type ColdStartResult } from './exchange-bench-cold.js';
import { formatColdStarts, runColdStarts, type ColdStartResult } from './exchange-bench-cold.js';

export const EXCHANGE_BENCH_HELP = `relent exchange-bench [options]

The exchange's load test. Runs \`relent exchange --workers N\` (a primary and N worker
processes, as in production) with a configuration whose partners are simulated
bidders on loopback, in their own process: the partners take, in order, the
behaviours fast, slow, hangs (never answers), failing (500s and resets), nbr
(declines with nbr), medium. A load generator in a third process sends bid
requests open-loop (at fixed times, whatever the answers) at the target rate.
Prints auctions/s, answer time p50/p99 at the source and in the exchange, answers
written more than 5 ms after their auction's deadline, and the exchange's memory
over the run.

  --config FILE      the exchange configuration to measure (default: a built-in one,
                     5 partners, deadline 100 ms, tmax 150); its partner URLs are replaced
  --workers N[,M…]   exchange worker processes (default: one per core); a list compares them
  --rate N           auctions per second to send (default 200)
  --find-max         search the highest rate whose p99 at the source stays within --p99
                     with no answer after its deadline + 5 ms, then run at 80 % of it
  --p99 MS           the p99 target of --find-max (default: the requests' tmax)
  --duration D       the measured run (default 60s)
  --step D           each rate tried by --find-max (default 5s)
  --tmax MS          the requests' tmax (default: the config's defaultTmaxMs)
  --connections N    connections of the load generator (default 256)
  --json             one JSON object with every figure instead of the tables

  --cold-starts N    instead: start N fresh exchange processes one after another and hit
                     each with 16 auctions at once (tmax --tmax, default 90) the moment it
                     says it is ready: answer times, answers after deadline + 5 ms, and
                     whether a partner that answers in 20 ms got its bid in
  --no-warmup        (with --cold-starts) the same with the warm-up off, to compare

The machine's load average is printed with the figures: the exchange, the bidders
and the load generator share its cores, so compare figures of the same run.
`;

/** The simulated partners' behaviours, in the order partners take them. */
export const BENCH_BIDDERS: readonly (BidderConfig & { readonly name: string })[] = Object.freeze([
  { name: 'fast', latency: { kind: 'lognormal', medianMs: 8, p99Ms: 25 }, price: { kind: 'uniform', min: 0.5, max: 2 }, noBidRate: 0.2 },
  { name: 'slow', latency: { kind: 'lognormal', medianMs: 40, p99Ms: 120 }, price: { kind: 'uniform', min: 1, max: 3 } },
  { name: 'hangs', failures: { hang: 1 } },
  { name: 'failing', latency: { kind: 'fixed', ms: 3 }, failures: { error500: 0.8, reset: 0.1 } },
  { name: 'nbr', latency: { kind: 'uniform', minMs: 2, maxMs: 20 }, noBidRate: 0.8, nbrShare: 1, nbr: [2, 5, 8] },
  { name: 'medium', latency: { kind: 'lognormal', medianMs: 20, p99Ms: 50 }, price: { kind: 'uniform', min: 0.8, max: 2 }, noBidRate: 0.2 },
]);

/** The configuration measured when none is given. */
export const BENCH_CONFIG: ExchangeConfig = Object.freeze({
  auctionTimeoutMs: 100,
  reserveMs: 15,
  defaultTmaxMs: 150,
  notices: { win: 'source' as const, billing: 'on-win' as const },
  partners: [
    { name: 'fast', url: 'http://127.0.0.1:1/bid', timeoutMs: 60, maxConcurrency: 512 },
    { name: 'slow', url: 'http://127.0.0.1:1/bid', timeoutMs: 90, maxConcurrency: 512 },
    { name: 'hangs', url: 'http://127.0.0.1:1/bid', timeoutMs: 80, maxConcurrency: 512 },
    { name: 'failing', url: 'http://127.0.0.1:1/bid', timeoutMs: 80, maxConcurrency: 512 },
    { name: 'nbr', url: 'http://127.0.0.1:1/bid', timeoutMs: 60, maxConcurrency: 512 },
  ].map((p) => ({ ...p, breaker: { minimumThroughput: 200, windowMs: 5_000, openMs: 2_000 } })),
});

// ─── the measurement ─────────────────────────────────────────────────────────

/** How long --find-max runs the starting rate before the search (not judged). */
const SETTLE_MS = 5_000;

export interface MemorySample {
  /** Seconds into the measured run. */
  readonly atS: number;
  /** All the exchange's processes. */
  readonly rssMB: number;
  readonly heapMB: number;
  /** Each: the primary, then the workers. */
  readonly each: readonly { readonly role: string; readonly rssMB: number; readonly heapMB: number }[];
  /** Answers written more than 5 ms after their deadline since the run began (as the workers last reported, once a second). */
  readonly late: number;
}

/** CPU time each part of the bench used during a step, ms (the exchange's from its processes' last reports). */
export interface CpuUse {
  readonly wallMs: number;
  readonly workers: number;
  readonly primary: number;
  readonly bidders: number;
  readonly loadgen: number;
}

export interface StepResult {
  readonly load: LoadResult;
  /** CPU used during the step (null where it could not be read). */
  readonly cpu: CpuUse | null;
  /** Auctions the exchange answered during the step, and those written more than 5 ms after their deadline. */
  readonly auctions: number;
  readonly afterDeadline: number;
  readonly pass: boolean;
}

export interface WorkersResult {
  readonly workers: number;
  readonly readyMs: number;
  /** The first seconds at the starting rate before the search (--find-max), not judged; null without. */
  readonly settle: StepResult | null;
  /** The search (--find-max): each rate tried. */
  readonly steps: readonly StepResult[];
  /** The highest rate that kept the target (null without --find-max). */
  readonly maxRate: number | null;
  /** The measured run. */
  readonly run: StepResult;
  readonly exchange: ExchangeStats;
  readonly memory: readonly MemorySample[];
  readonly loadAverage: readonly number[];
}

export interface BenchOptions {
  /** The configuration to measure (default BENCH_CONFIG); its partner URLs are replaced, its notices go to a temporary store unless `memory`. */
  readonly config: ExchangeConfig | null;
  readonly workers: readonly number[];
  readonly rate: number;
  readonly findMax: boolean;
  readonly p99Ms: number | null;
  readonly durationMs: number;
  readonly stepMs: number;
  readonly tmaxMs: number | null;
  readonly connections: number;
  /** Progress lines (stderr). */
  readonly log: (line: string) => void;
}

export interface BenchResult {
  readonly tmaxMs: number;
  readonly p99TargetMs: number;
  readonly bidders: readonly { readonly partner: string; readonly behaviour: string }[];
  readonly results: readonly WorkersResult[];
  readonly cores: number;
  readonly node: string;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const mb = (b: number): number => Math.round(b / 1048576);

function memorySample(m: ProcessMemory, atS: number, late: number): MemorySample {
  return {
    atS,
    rssMB: mb(m.rssBytes),
    heapMB: mb(m.heapUsedBytes),
    each: m.each.map((x) => ({ role: x.role, rssMB: mb(x.rssBytes), heapMB: mb(x.heapUsedBytes) })),
    late,
  };
}

/** Runs the load test; the caller prints it. */
export async function runExchangeBench(o: BenchOptions): Promise<BenchResult> {
  const dir = mkdtempSync(join(tmpdir(), 'relent-exchange-bench-'));
  const base: ExchangeConfig = o.config ?? BENCH_CONFIG;
  const partners = base.partners;
  const bidderConfigs = partners.map((_, i) => BENCH_BIDDERS[i % BENCH_BIDDERS.length]!);
  const bidders = forkRole('bidders', { RELENT_BENCH_BIDDERS: JSON.stringify(bidderConfigs) });
  try {
    const { urls } = await next<{ urls: string[] }>(bidders, 'urls');
    // The configuration measured: the partners pointed at the bidders; notices in a temporary store unless `memory`.
    const notices = base.notices ?? {};
    const config: ExchangeConfig = {
      ...base,
      partners: partners.map((p, i) => ({ ...p, url: urls[i]! })),
      notices: { ...notices, store: notices.store ?? `sqlite:${join(dir, 'notices.db')}` },
    };
    const configPath = join(dir, 'exchange.json');
    writeFileSync(configPath, JSON.stringify(config));
    const { config: resolved } = await loadExchangeConfig(configPath);
    const tmaxMs = o.tmaxMs ?? resolved.defaultTmaxMs;
    const p99TargetMs = o.p99Ms ?? tmaxMs;
    const results: WorkersResult[] = [];
    for (const workers of o.workers) results.push(await measure(o, workers, configPath, resolved, tmaxMs, p99TargetMs, bidders));
    return {
      tmaxMs,
      p99TargetMs,
      bidders: partners.map((p, i) => ({ partner: p.name, behaviour: bidderConfigs[i]!.name })),
      results,
      cores: availableParallelism(),
      node: process.version,
    };
  } finally {
    bidders.send({ t: 'stop' });
    await new Promise<void>((resolve) => {
      if (bidders.exitCode !== null) resolve();
      else bidders.once('exit', () => resolve());
    });
    rmSync(dir, { recursive: true, force: true });
  }
}

async function measure(
  o: BenchOptions,
  workers: number,
  configPath: string,
  resolved: ResolvedExchangeConfig,
  tmaxMs: number,
  p99TargetMs: number,
  bidders: ChildProcess,
): Promise<WorkersResult> {
  o.log(`exchange-bench: starting ${workers} worker${workers === 1 ? '' : 's'}…`);
  const ex = await startCluster({
    config: resolved,
    argv: ['--config', configPath, '--port', '0', '--host', '127.0.0.1', '--workers', String(workers), '--quiet'],
    workers,
    log: o.log,
  });
  const loadgen = forkRole('loadgen', { RELENT_BENCH_URL: ex.url, RELENT_BENCH_TMAX: String(tmaxMs), RELENT_BENCH_CONNECTIONS: String(o.connections) });
  try {
    await next(loadgen, 'ready');
    const step = async (rate: number, durationMs: number, warmupMs: number, memory: MemorySample[] | null): Promise<StepResult> => {
      await sleep(1_200); // the workers' last report of the step before
      const before = ex.stats();
      const cpuBefore = await cpuOf(ex.memory(), bidders);
      const wall0 = performance.now();
      let sampler: ReturnType<typeof setInterval> | null = null;
      const t0 = performance.now() + warmupMs;
      const atS = (): number => Math.max(0, Math.round((performance.now() - t0) / 100) / 10);
      if (memory !== null) {
        const every = Math.max(1_000, Math.round(durationMs / 12));
        const sample = (): void => {
          const late = ex.stats().auctions.afterDeadline - before.auctions.afterDeadline;
          memory.push(memorySample(ex.memory(), atS(), late));
        };
        setTimeout(() => {
          sample();
          sampler = setInterval(sample, every);
        }, warmupMs);
      }
      loadgen.send({ t: 'run', run: { rate, durationMs, warmupMs } });
      const { result: load } = await next<{ result: LoadResult }>(loadgen, 'result');
      if (sampler !== null) clearInterval(sampler);
      await sleep(1_200);
      const after = ex.stats();
      const cpuAfter = await cpuOf(ex.memory(), bidders);
      const cpu: CpuUse | null =
        cpuBefore === null || cpuAfter === null
          ? null
          : {
              wallMs: Math.round(performance.now() - wall0),
              workers: Math.round(cpuAfter.workers.reduce((n, x, i) => n + Math.max(0, x - (cpuBefore.workers[i] ?? 0)), 0) / 1000),
              primary: Math.round((cpuAfter.primary - cpuBefore.primary) / 1000),
              bidders: Math.round((cpuAfter.bidders - cpuBefore.bidders) / 1000),
              loadgen: load.cpuMs,
            };
      // At the time it is taken (a run that fell behind its schedule ends after durationMs).
      if (memory !== null) memory.push(memorySample(ex.memory(), atS(), after.auctions.afterDeadline - before.auctions.afterDeadline));
      const auctions = after.auctions.total - before.auctions.total;
      const afterDeadline = after.auctions.afterDeadline - before.auctions.afterDeadline;
      const pass = load.achieved >= 0.95 * rate && load.p99Ms <= p99TargetMs && afterDeadline === 0 && load.errors === 0 && load.shed === 0;
      return { load, cpu, auctions, afterDeadline, pass };
    };
    const steps: StepResult[] = [];
    let maxRate: number | null = null;
    let settle: StepResult | null = null;
    if (o.findMax) {
      // The search measures a running exchange: its first seconds (breakers not yet open on
      // the hanging and failing partners, every call to them a new connection) are run
      // once at the starting rate and not judged; --cold-starts measures a fresh process.
      settle = await step(o.rate, SETTLE_MS, 1_000, null);
      o.log(`exchange-bench: ${workers}w settling at ${o.rate}/s for ${SETTLE_MS / 1000} s (not judged): after deadline ${settle.afterDeadline}`);
      // Grow by half until the target breaks, then halve the gap three times.
      let lo = 0;
      let hi = 0;
      let rate = o.rate;
      for (let i = 0; i < 30; i++) {
        const s = await step(rate, o.stepMs, 1_000, null);
        steps.push(s);
        o.log(`exchange-bench: ${workers}w ${rate}/s → ${s.load.achieved}/s, p99 ${s.load.p99Ms} ms, after deadline ${s.afterDeadline}${s.pass ? '' : ' ✗'}`);
        if (s.pass) lo = rate;
        else hi = rate;
        if (hi === 0) rate = Math.round((rate * 1.5) / 10) * 10;
        else {
          if (hi - lo <= Math.max(10, lo * 0.05) || steps.filter((x) => !x.pass).length > 3) break;
          rate = Math.round((lo + hi) / 2 / 10) * 10 || Math.round(hi / 2);
        }
        if (rate > 50_000) break;
      }
      maxRate = lo;
    }
    const runRate = maxRate !== null ? Math.max(10, Math.round((maxRate * 0.8) / 10) * 10) : o.rate;
    o.log(`exchange-bench: ${workers}w measured run at ${runRate}/s for ${o.durationMs / 1000} s…`);
    const memory: MemorySample[] = [];
    const run = await step(runRate, o.durationMs, 2_000, memory);
    return {
      workers,
      readyMs: ex.readyMs,
      settle,
      steps,
      maxRate,
      run,
      exchange: ex.stats(),
      memory,
      loadAverage: loadavg().map((x) => Math.round(x * 100) / 100),
    };
  } finally {
    loadgen.send({ t: 'stop' });
    await ex.close();
  }
}

/** The CPU time used so far by the exchange's processes (µs, as last reported) and the bidders'. */
async function cpuOf(m: ProcessMemory, bidders: ChildProcess): Promise<{ primary: number; workers: number[]; bidders: number } | null> {
  const primary = m.each.find((x) => x.role === 'primary' || x.role === 'single');
  if (primary === undefined || !bidders.connected) return null;
  const reply = next<{ us: number }>(bidders, 'cpu');
  bidders.send({ t: 'cpu' });
  const { us } = await reply;
  return { primary: primary.cpuMicros, workers: m.each.filter((x) => x.role === 'worker').map((x) => x.cpuMicros), bidders: us };
}

// ─── the command ─────────────────────────────────────────────────────────────

function positive(v: string | undefined, flag: string, max: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > max)
    throw new RelentError('ERR_INVALID_INPUT', `${flag}: expected a whole number 1–${max}, got ${JSON.stringify(v)}`, { field: flag });
  return n;
}

/** Where the machine's CPU went during a run: cores used, and ms of CPU per auction, by part. */
export function cpuLine(c: CpuUse, auctions: number, cores: number): string {
  const parts: [string, number][] = [
    ['exchange workers', c.workers],
    ['primary (notices, statistics)', c.primary],
    ['bidders', c.bidders],
    ['load generator', c.loadgen],
  ];
  const total = parts.reduce((n, [, ms]) => n + ms, 0);
  const per = (ms: number): string => (auctions > 0 ? (ms / auctions).toFixed(2) : '-');
  return `CPU (cores used; ms per auction): ${parts.map(([name, ms]) => `${name} ${(ms / c.wallMs).toFixed(2)} (${per(ms)})`).join(' · ')} · all ${(total / c.wallMs).toFixed(2)} of ${cores} (${per(total)})`;
}

/** The figures as tables. */
export function formatBench(r: BenchResult): string {
  const lines: string[] = [];
  lines.push(`relent exchange-bench — tmax ${r.tmaxMs} ms · ${r.cores} cores · node ${r.node}`);
  lines.push(`partners → simulated bidders: ${r.bidders.map((b) => `${b.partner}=${b.behaviour}`).join(' ')}`);
  lines.push(`the bidders and the load generator stand in for other machines: they run at nice ${STAND_IN_NICE}, below the exchange`);
  for (const w of r.results) {
    lines.push('');
    lines.push(`── ${w.workers} worker${w.workers === 1 ? '' : 's'} (ready after ${w.readyMs} ms; load average at the end ${w.loadAverage.join(' ')}) ──`);
    if (w.steps.length > 0) {
      if (w.settle !== null)
        lines.push(
          `first ${SETTLE_MS / 1000} s at ${w.settle.load.rate}/s, not judged (breakers settling): p99 ${w.settle.load.p99Ms.toFixed(1)} ms, after deadline ${w.settle.afterDeadline}`,
        );
      lines.push(`search (p99 ≤ ${r.p99TargetMs} ms at the source, 0 answers after deadline + 5 ms):`);
      lines.push('  rate/s  answered/s  p50 ms  p99 ms  after deadline  ok');
      for (const s of w.steps) {
        lines.push(
          `  ${String(s.load.rate).padStart(6)}  ${String(s.load.achieved).padStart(10)}  ${s.load.p50Ms.toFixed(1).padStart(6)}  ${s.load.p99Ms.toFixed(1).padStart(6)}  ${String(s.afterDeadline).padStart(14)}  ${s.pass ? 'yes' : 'no'}`,
        );
      }
      lines.push(`maximum: ${w.maxRate} auctions/s`);
    }
    const run = w.run;
    const l = run.load;
    const a = w.exchange.auctions;
    lines.push(`run at ${l.rate}/s${w.maxRate !== null ? ' (80 % of the maximum)' : ''} for ${l.seconds} s:`);
    lines.push(
      `  auctions/s ${l.achieved} (${l.answered} answered of ${l.sent} sent${l.errors ? `, ${l.errors} transport errors` : ''}${l.shed ? `, ${l.shed} not sent` : ''})`,
    );
    lines.push(
      `  at the source: p50 ${l.p50Ms.toFixed(1)} ms · p99 ${l.p99Ms.toFixed(1)} ms · max ${l.maxMs} ms · over tmax ${l.overTmax} · ${Object.entries(l.statuses)
        .map(([k, v]) => `${k}×${v}`)
        .join(' ')}`,
    );
    lines.push(`  in the exchange: p50 ${a.answerMs.p50Ms} ms · p99 ${a.answerMs.p99Ms} ms (all auctions of this exchange)`);
    lines.push(`  answers after deadline + 5 ms: ${run.afterDeadline} of ${run.auctions} in the run (${a.afterDeadline} of ${a.total} since start)`);
    lines.push(
      `  memory of the exchange's ${w.workers + 1} processes (RSS / heap used, MB): ${w.memory.map((m) => `${m.atS}s ${m.rssMB}/${m.heapMB}`).join(' · ')}`,
    );
    if (w.memory.length > 0) lines.push(`  answers after deadline + 5 ms so far, at the same times: ${w.memory.map((m) => `${m.atS}s ${m.late}`).join(' · ')}`);
    const first = w.memory[0];
    const last = w.memory[w.memory.length - 1];
    if (first !== undefined && last !== undefined) {
      lines.push(`  RSS per process, start → end (MB): ${first.each.map((x, i) => `${x.role} ${x.rssMB} → ${last.each[i]?.rssMB ?? '?'}`).join(', ')}`);
    }
    if (run.cpu !== null) lines.push(`  ${cpuLine(run.cpu, run.auctions, r.cores)}`);
    lines.push(
      partnerTable(w.exchange)
        .trimEnd()
        .split('\n')
        .map((x) => `  ${x}`)
        .join('\n'),
    );
  }
  if (r.results.length > 1) {
    const first = r.results[0]!;
    lines.push('');
    for (const w of r.results.slice(1)) {
      const ratio = (x: number | null, y: number | null): string => (x && y ? `${(y / x).toFixed(2)}x` : '-');
      lines.push(
        `${w.workers} worker${w.workers === 1 ? '' : 's'} vs ${first.workers}: maximum ${ratio(first.maxRate, w.maxRate)} (${w.maxRate ?? '-'} vs ${first.maxRate ?? '-'}/s); measured run ${ratio(first.run.load.achieved, w.run.load.achieved)}`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

export async function exchangeBenchCommand(argv: string[], io: Io): Promise<number> {
  const role = process.env[ROLE_ENV];
  if (role === 'bidders') {
    await runBidders();
    return await new Promise<number>(() => {}); // runs until told to stop
  }
  if (role === 'loadgen') {
    await runLoadgen();
    return await new Promise<number>(() => {});
  }
  const { values } = parseFlags({
    args: argv,
    options: {
      config: { type: 'string' },
      workers: { type: 'string' },
      rate: { type: 'string' },
      'find-max': { type: 'boolean' },
      p99: { type: 'string' },
      duration: { type: 'string' },
      step: { type: 'string' },
      tmax: { type: 'string' },
      connections: { type: 'string' },
      json: { type: 'boolean' },
      'cold-starts': { type: 'string' },
      'no-warmup': { type: 'boolean' },
    },
  });
  let workers = [availableParallelism()];
  if (values.workers !== undefined) {
    const list = values.workers.split(',').map((x) => x.trim());
    if (list.length === 0 || list.some((x) => !/^\d{1,3}$/.test(x) || Number(x) < 1 || Number(x) > 256)) {
      throw new RelentError('ERR_INVALID_INPUT', `--workers: expected a number of processes 1–256, or a list like 1,2, got ${JSON.stringify(values.workers)}`, {
        field: '--workers',
      });
    }
    workers = list.map(Number);
  }
  const coldStarts = positive(values['cold-starts'], '--cold-starts', 1_000);
  if (coldStarts !== undefined) {
    const runs: ColdStartResult[] = [];
    for (const w of workers) {
      runs.push(
        await runColdStarts({
          starts: coldStarts,
          burst: 16,
          tmaxMs: positive(values.tmax, '--tmax', 60_000) ?? 90,
          workers: w,
          warmup: values['no-warmup'] !== true,
          log: (l) => io.err(`${l}\n`),
        }),
      );
    }
    io.out(values.json ? `${JSON.stringify(runs)}\n` : formatColdStarts(runs));
    return EXIT.ok;
  }
  let config: ExchangeConfig | null = null;
  if (values.config !== undefined) {
    // Validated as `relent exchange` would; its notice store is not touched (the bench's notices go to a temporary one).
    const raw = (await loadExchangeConfig(values.config)).raw as ExchangeConfig;
    config = { ...raw, notices: { ...raw.notices, store: raw.notices?.store === 'memory' ? 'memory' : undefined } };
  }
  const durationMs = values.duration === undefined ? 60_000 : parseDuration(values.duration, '--duration');
  const stepMs = values.step === undefined ? 5_000 : parseDuration(values.step, '--step');
  if (durationMs < 1_000) throw new RelentError('ERR_INVALID_INPUT', '--duration: at least 1s', { field: '--duration' });
  if (stepMs < 1_000) throw new RelentError('ERR_INVALID_INPUT', '--step: at least 1s', { field: '--step' });
  const result = await runExchangeBench({
    config,
    workers,
    rate: positive(values.rate, '--rate', 100_000) ?? 200,
    findMax: values['find-max'] === true,
    p99Ms: positive(values.p99, '--p99', 60_000) ?? null,
    durationMs,
    stepMs,
    tmaxMs: positive(values.tmax, '--tmax', 60_000) ?? null,
    connections: positive(values.connections, '--connections', 10_000) ?? 256,
    log: (l) => io.err(`${l}\n`),
  });
  io.out(values.json ? `${JSON.stringify(result)}\n` : formatBench(result));
  return EXIT.ok;
}
