import { normalizeBackoff } from '../core/backoff.js';
import { normalizeBudget } from '../core/budget.js';
import { RelentError, describe } from '../core/errors.js';
import { QUOTA_DEFAULTS, runQuota, type QuotaConfig, type QuotaContender, type QuotaResult } from './quota.js';
import { normalizeRateLimit, type RateLimitSpec } from '../core/token-bucket.js';
import { runTail, TAIL_DEFAULTS, type TailConfig, type TailContender, type TailResult } from './tail.js';
import { CAPACITY_DEFAULTS, runCapacity, type CapacityConfig, type CapacityContender, type CapacityResult } from './capacity.js';
import { normalizeLimitSpec, type LimitSpec } from '../core/concurrency.js';
import { BROOKER_BACKOFFS, BROOKER_DEFAULTS, BROOKER_STRATEGIES, brookerPolicySpec, runBrooker, type BrookerConfig, type BrookerResult } from './brooker.js';
import { resolveSimPolicy, type ProgressFn } from './common.js';
import { LAYERS_DEFAULTS, runLayers, type LayersConfig, type LayersResult, type LayersVariant } from './layers.js';
import { DEPENDENCY_DEFAULTS, runOverload, type DependencyModel, type Fault, type OverloadConfig, type OverloadResult } from './overload.js';
import { PEER_POLICIES, RELENT_POLICIES, type SimPolicy } from './policies.js';
import type { PolicySpec } from '../core/policy.js';

/**
 * Scenario files: JSON objects naming a `scenario` (brooker, overload, layers) and any
 * of its settings; everything left out keeps the scenario's default. Validated field
 * by field; an error names the field (`faults[0].endMs`, `policies[1].policy.backoff.capMs`).
 */
export type Scenario =
  | { readonly scenario: 'brooker'; readonly config: Partial<BrookerConfig> }
  | { readonly scenario: 'overload'; readonly config: Partial<OverloadConfig> }
  | { readonly scenario: 'layers'; readonly config: Partial<LayersConfig> }
  | { readonly scenario: 'capacity'; readonly config: Partial<CapacityConfig> }
  | { readonly scenario: 'tail'; readonly config: Partial<TailConfig> }
  | { readonly scenario: 'quota'; readonly config: Partial<QuotaConfig> };

export type ScenarioName = Scenario['scenario'];
export const SCENARIO_NAMES: readonly ScenarioName[] = Object.freeze(['brooker', 'overload', 'layers', 'capacity', 'tail', 'quota']);

export type ScenarioResult =
  | { readonly scenario: 'brooker'; readonly result: BrookerResult }
  | { readonly scenario: 'overload'; readonly result: OverloadResult }
  | { readonly scenario: 'layers'; readonly result: LayersResult }
  | { readonly scenario: 'capacity'; readonly result: CapacityResult }
  | { readonly scenario: 'tail'; readonly result: TailResult }
  | { readonly scenario: 'quota'; readonly result: QuotaResult };

function invalid(field: string, expected: string, got: unknown): RelentError {
  return new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be ${expected}, got ${describe(got)}`, { field });
}

type Obj = Record<string, unknown>;

/** A value validated by the core (a backoff, a budget): its errors become input errors that keep the field's full path. */
function byCore<T>(validate: () => T): T {
  try {
    return validate();
  } catch (e) {
    if (RelentError.is(e)) throw new RelentError('ERR_INVALID_INPUT', e.message, { field: e.field, cause: e });
    throw e;
  }
}

function object(v: unknown, field: string, keys: readonly string[]): Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid(field, 'an object', v);
  for (const k of Object.keys(v)) {
    if (!keys.includes(k))
      throw new RelentError('ERR_INVALID_INPUT', `Unknown field \`${join(field, k)}\` (known: ${keys.join(', ')})`, { field: join(field, k) });
  }
  return v as Obj;
}

function join(field: string, key: string): string {
  return field ? `${field}.${key}` : key;
}

function number(v: unknown, field: string, min: number, max: number, integer = false): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max || (integer && !Number.isInteger(v))) {
    throw invalid(field, `${integer ? 'an integer' : 'a number'} in [${min}, ${max}]`, v);
  }
  return v;
}

function string(v: unknown, field: string): string {
  if (typeof v !== 'string' || v.length === 0 || v.length > 200) throw invalid(field, 'a non-empty string', v);
  return v;
}

function seed(v: unknown, field: string): number | string {
  if (typeof v === 'string' && v.length > 0 && v.length <= 200) return v;
  return number(v, field, 0, 2 ** 32 - 1, true);
}

function array(v: unknown, field: string, max: number): unknown[] {
  if (!Array.isArray(v) || v.length === 0 || v.length > max) throw invalid(field, `a non-empty array (at most ${max} items)`, v);
  return v;
}

/** Sets `out[key]` from `raw[key]` when present. */
function opt<T>(out: Record<string, unknown>, raw: Obj, key: string, parse: (v: unknown, field: string) => T, field: string): void {
  if (raw[key] !== undefined) out[key] = parse(raw[key], join(field, key));
}

/**
 * A policy entry: a name of the built-in contenders (`p-retry`, `relent`, …) or of a
 * preset, a policy spec object, or `{ "name", "policy", "budget"? }`.
 */
export function parseSimPolicy(v: unknown, field: string, fallbackName: string): SimPolicy {
  let entry: SimPolicy;
  if (typeof v === 'string') {
    const builtin = [...PEER_POLICIES, ...RELENT_POLICIES].find((p) => p.name === v);
    entry = builtin ?? { name: v, policy: v, budget: true };
  } else if (typeof v === 'object' && v !== null && !Array.isArray(v) && 'policy' in v) {
    const raw = object(v, field, ['name', 'policy', 'budget', 'summary']);
    const policy = raw.policy;
    if (typeof policy !== 'string' && (typeof policy !== 'object' || policy === null || Array.isArray(policy))) {
      throw invalid(join(field, 'policy'), 'a preset name or a policy object', policy);
    }
    if (raw.budget !== undefined && typeof raw.budget !== 'boolean') throw invalid(join(field, 'budget'), 'a boolean', raw.budget);
    entry = {
      name: raw.name === undefined ? fallbackName : string(raw.name, join(field, 'name')),
      policy: policy as string | PolicySpec,
      budget: (raw.budget as boolean | undefined) ?? true,
      ...(raw.summary !== undefined ? { summary: string(raw.summary, join(field, 'summary')) } : {}),
    };
    field = join(field, 'policy');
  } else if (typeof v === 'object' && v !== null && !Array.isArray(v)) {
    entry = { name: fallbackName, policy: v as PolicySpec, budget: true };
  } else {
    throw invalid(field, 'a policy name, a policy object, or {"name", "policy", "budget"}', v);
  }
  resolveSimPolicy(entry, field); // validates now, so errors name the field
  return entry;
}

function uniqueNames(list: readonly { name: string }[], field: string): void {
  const seen = new Set<string>();
  list.forEach((p, i) => {
    if (seen.has(p.name))
      throw new RelentError('ERR_INVALID_INPUT', `\`${field}[${i}].name\` ${JSON.stringify(p.name)} is used twice`, { field: `${field}[${i}].name` });
    seen.add(p.name);
  });
}

function parseBrooker(raw: Obj): Partial<BrookerConfig> {
  object(raw, '', ['scenario', 'seed', 'runs', 'clients', 'network', 'strategies']);
  const out: Record<string, unknown> = {};
  opt(out, raw, 'seed', seed, '');
  opt(out, raw, 'runs', (v, f) => number(v, f, 1, 100_000, true), '');
  opt(out, raw, 'clients', (v, f) => array(v, f, 1000).map((n, i) => number(n, `${f}[${i}]`, 1, 10_000, true)), '');
  opt(
    out,
    raw,
    'network',
    (v, f) => {
      const n = object(v, f, ['meanMs', 'sdMs']);
      return {
        meanMs: n.meanMs === undefined ? BROOKER_DEFAULTS.network.meanMs : number(n.meanMs, `${f}.meanMs`, 0, 1e6),
        sdMs: n.sdMs === undefined ? BROOKER_DEFAULTS.network.sdMs : number(n.sdMs, `${f}.sdMs`, 0, 1e6),
      };
    },
    '',
  );
  opt(
    out,
    raw,
    'strategies',
    (v, f) => {
      const list = array(v, f, 100).map((s, i): SimPolicy => {
        const field = `${f}[${i}]`;
        if (typeof s === 'string') {
          const builtin = BROOKER_STRATEGIES.find((b) => b.name === s);
          if (!builtin) throw invalid(field, `one of ${Object.keys(BROOKER_BACKOFFS).join(', ')}, or {"name", "backoff"} or {"name", "policy"}`, s);
          return builtin;
        }
        if (typeof s === 'object' && s !== null && !Array.isArray(s) && 'backoff' in s) {
          const b = object(s, field, ['name', 'backoff']);
          const backoff = byCore(() => normalizeBackoff(b.backoff, `${field}.backoff`));
          return { name: string(b.name, `${field}.name`), policy: brookerPolicySpec(backoff), budget: false };
        }
        return parseSimPolicy(s, field, `custom-${i + 1}`);
      });
      uniqueNames(list, f);
      return list;
    },
    '',
  );
  return out as Partial<BrookerConfig>;
}

function parseDependency(v: unknown, f: string): DependencyModel {
  const d = object(v, f, Object.keys(DEPENDENCY_DEFAULTS));
  const out: Record<string, unknown> = { ...DEPENDENCY_DEFAULTS };
  opt(out, d, 'capacityPerSec', (x, g) => number(x, g, 0, 1e7), f);
  opt(out, d, 'burst', (x, g) => number(x, g, 1, 1e7), f);
  opt(out, d, 'queueLimit', (x, g) => number(x, g, 0, 1e7, true), f);
  opt(out, d, 'serviceMs', (x, g) => number(x, g, 0, 1e6), f);
  opt(out, d, 'rejectMs', (x, g) => number(x, g, 0, 1e6), f);
  opt(out, d, 'overheadMs', (x, g) => number(x, g, 0, 1e4), f);
  opt(out, d, 'networkMs', (x, g) => number(x, g, 0, 1e6), f);
  opt(out, d, 'rejectStatus', (x, g) => number(x, g, 400, 599, true), f);
  if (d.retryAfterSec !== undefined) out.retryAfterSec = d.retryAfterSec === null ? null : number(d.retryAfterSec, `${f}.retryAfterSec`, 0, 86_400);
  return out as unknown as DependencyModel;
}

function parseOverload(raw: Obj): Partial<OverloadConfig> {
  object(raw, '', [
    'scenario',
    'seed',
    'runs',
    'durationMs',
    'arrivalsPerSec',
    'arrival',
    'clients',
    'deadlineMs',
    'method',
    'dependency',
    'faults',
    'afterMs',
    'policies',
  ]);
  const out: Record<string, unknown> = {};
  opt(out, raw, 'seed', seed, '');
  opt(out, raw, 'runs', (v, f) => number(v, f, 1, 10_000, true), '');
  opt(out, raw, 'durationMs', (v, f) => number(v, f, 1000, 3_600_000), '');
  opt(out, raw, 'arrivalsPerSec', (v, f) => number(v, f, 0.001, 1e5), '');
  opt(
    out,
    raw,
    'arrival',
    (v, f) => {
      if (v !== 'poisson' && v !== 'uniform') throw invalid(f, '"poisson" or "uniform"', v);
      return v;
    },
    '',
  );
  opt(out, raw, 'clients', (v, f) => number(v, f, 1, 100_000, true), '');
  opt(out, raw, 'deadlineMs', (v, f) => number(v, f, 1, 2 ** 31 - 1), '');
  opt(out, raw, 'method', (v, f) => string(v, f).toUpperCase(), '');
  opt(out, raw, 'dependency', parseDependency, '');
  opt(out, raw, 'afterMs', (v, f) => number(v, f, 0, 3_600_000), '');
  opt(
    out,
    raw,
    'faults',
    (v, f) => {
      if (!Array.isArray(v) || v.length > 100) throw invalid(f, 'an array of {startMs, endMs, capacityPerSec} (at most 100)', v);
      const faults = v.map((x, i): Fault => {
        const g = `${f}[${i}]`;
        const o = object(x, g, ['startMs', 'endMs', 'capacityPerSec']);
        const startMs = number(o.startMs, `${g}.startMs`, 0, 3_600_000);
        const endMs = number(o.endMs, `${g}.endMs`, 0, 3_600_000);
        if (endMs <= startMs) throw invalid(`${g}.endMs`, `greater than startMs (${startMs})`, endMs);
        return { startMs, endMs, capacityPerSec: number(o.capacityPerSec, `${g}.capacityPerSec`, 0, 1e7) };
      });
      const sorted = [...faults].sort((a, b) => a.startMs - b.startMs);
      for (let i = 1; i < sorted.length; i++) {
        if (sorted[i]!.startMs < sorted[i - 1]!.endMs)
          throw new RelentError(
            'ERR_INVALID_INPUT',
            `\`${f}\`: faults must not overlap (one starts at ${sorted[i]!.startMs} before another ends at ${sorted[i - 1]!.endMs})`,
            { field: f },
          );
      }
      return faults;
    },
    '',
  );
  opt(
    out,
    raw,
    'policies',
    (v, f) => {
      const list = array(v, f, 100).map((p, i) => parseSimPolicy(p, `${f}[${i}]`, `custom-${i + 1}`));
      uniqueNames(list, f);
      return list;
    },
    '',
  );
  return out as Partial<OverloadConfig>;
}

function parseLayers(raw: Obj): Partial<LayersConfig> {
  object(raw, '', [
    'scenario',
    'seed',
    'runs',
    'arrivalsPerSec',
    'durationMs',
    'layers',
    'hopMs',
    'dbMs',
    'dbFailureShare',
    'deadlineMs',
    'policy',
    'variants',
    'fleetProcesses',
  ]);
  const out: Record<string, unknown> = {};
  opt(out, raw, 'fleetProcesses', (v, f) => number(v, f, 1, 1000, true), '');
  opt(out, raw, 'seed', seed, '');
  opt(out, raw, 'runs', (v, f) => number(v, f, 1, 10_000, true), '');
  opt(out, raw, 'arrivalsPerSec', (v, f) => number(v, f, 0.001, 1e5), '');
  opt(out, raw, 'durationMs', (v, f) => number(v, f, 1000, 3_600_000), '');
  opt(out, raw, 'layers', (v, f) => number(v, f, 1, 10, true), '');
  opt(out, raw, 'hopMs', (v, f) => number(v, f, 0, 1e5), '');
  opt(out, raw, 'dbMs', (v, f) => number(v, f, 0, 1e5), '');
  opt(out, raw, 'dbFailureShare', (v, f) => number(v, f, 0, 1), '');
  opt(out, raw, 'deadlineMs', (v, f) => number(v, f, 1, 2 ** 31 - 1), '');
  opt(out, raw, 'policy', (v, f) => parseSimPolicy(v, f, 'layer'), '');
  opt(
    out,
    raw,
    'variants',
    (v, f) => {
      const list = array(v, f, 20).map((x, i): LayersVariant => {
        const g = `${f}[${i}]`;
        const o = object(x, g, ['name', 'budget', 'giveUpStatus', 'processes', 'sharedBudget', 'noRetry']);
        if (typeof o.budget !== 'boolean' && (typeof o.budget !== 'object' || o.budget === null || Array.isArray(o.budget))) {
          throw invalid(`${g}.budget`, 'a boolean or a budget object ({"kind": "ratio", …})', o.budget);
        }
        const budget = typeof o.budget === 'boolean' ? o.budget : byCore(() => normalizeBudget(o.budget, `${g}.budget`));
        const flag = (k: 'sharedBudget' | 'noRetry'): boolean => {
          if (o[k] === undefined) return false;
          if (typeof o[k] !== 'boolean') throw invalid(`${g}.${k}`, 'a boolean', o[k]);
          return o[k] as boolean;
        };
        return {
          name: string(o.name, `${g}.name`),
          budget,
          giveUpStatus: o.giveUpStatus === undefined ? 503 : number(o.giveUpStatus, `${g}.giveUpStatus`, 100, 599, true),
          processes: o.processes === undefined ? 1 : o.processes === 'fleet' ? 'fleet' : number(o.processes, `${g}.processes`, 1, 1000, true),
          sharedBudget: flag('sharedBudget'),
          noRetry: flag('noRetry'),
        };
      });
      uniqueNames(list, f);
      return list;
    },
    '',
  );
  const arrivals = (out.arrivalsPerSec as number | undefined) ?? LAYERS_DEFAULTS.arrivalsPerSec;
  const duration = (out.durationMs as number | undefined) ?? LAYERS_DEFAULTS.durationMs;
  if (arrivals * (duration / 1000) > 1e6)
    throw new RelentError('ERR_INVALID_INPUT', '`arrivalsPerSec` × `durationMs`: at most 1,000,000 user actions per run', { field: 'arrivalsPerSec' });
  return out as Partial<LayersConfig>;
}

function parseCapacity(raw: Obj): Partial<CapacityConfig> {
  object(raw, '', [
    'scenario',
    'seed',
    'arrivalsPerSec',
    'serviceMs',
    'capacity',
    'degraded',
    'dropAtMs',
    'dropForMs',
    'durationMs',
    'deadlineMs',
    'minAttemptMs',
    'contenders',
  ]);
  const out: Record<string, unknown> = {};
  opt(out, raw, 'seed', seed, '');
  opt(out, raw, 'arrivalsPerSec', (v, f) => number(v, f, 0.001, 1e5), '');
  opt(out, raw, 'serviceMs', (v, f) => number(v, f, 0.001, 1e5), '');
  opt(out, raw, 'capacity', (v, f) => number(v, f, 1, 1e5, true), '');
  opt(out, raw, 'degraded', (v, f) => number(v, f, 0, 1e5, true), '');
  opt(out, raw, 'dropAtMs', (v, f) => number(v, f, 0, 3_600_000), '');
  opt(out, raw, 'dropForMs', (v, f) => number(v, f, 0, 3_600_000), '');
  opt(out, raw, 'durationMs', (v, f) => number(v, f, 1000, 3_600_000), '');
  opt(out, raw, 'deadlineMs', (v, f) => number(v, f, 1, 3_600_000), '');
  opt(out, raw, 'minAttemptMs', (v, f) => number(v, f, 0, 3_600_000), '');
  opt(
    out,
    raw,
    'contenders',
    (v, f) => {
      const list = array(v, f, 50).map((x, i): CapacityContender => {
        const g = `${f}[${i}]`;
        const o = object(x, g, ['name', 'limit', 'fixed']);
        const name = string(o.name, `${g}.name`);
        if (o.limit !== undefined && o.fixed !== undefined)
          throw invalid(`${g}.fixed`, 'absent with `limit` (a contender has an adaptive limit, a fixed cap, or neither)', o.fixed);
        if (o.limit !== undefined) return { name, limit: byCore(() => normalizeLimitSpec(o.limit, `${g}.limit`)) as LimitSpec };
        if (o.fixed !== undefined) return { name, fixed: number(o.fixed, `${g}.fixed`, 1, 1e6, true) };
        return { name };
      });
      uniqueNames(list, f);
      return list;
    },
    '',
  );
  const rate = (out.arrivalsPerSec as number | undefined) ?? CAPACITY_DEFAULTS.arrivalsPerSec;
  const duration = (out.durationMs as number | undefined) ?? CAPACITY_DEFAULTS.durationMs;
  if (rate * (duration / 1000) > 2e6)
    throw new RelentError('ERR_INVALID_INPUT', '`arrivalsPerSec` × `durationMs`: at most 2,000,000 operations per contender', { field: 'arrivalsPerSec' });
  return out as Partial<CapacityConfig>;
}

function parseTail(raw: Obj): Partial<TailConfig> {
  object(raw, '', [
    'scenario',
    'seed',
    'arrivalsPerSec',
    'durationMs',
    'fastMs',
    'fastJitter',
    'slowMs',
    'slowShare',
    'failAtMs',
    'failForMs',
    'failShare',
    'contenders',
  ]);
  const out: Record<string, unknown> = {};
  opt(out, raw, 'seed', seed, '');
  opt(out, raw, 'arrivalsPerSec', (v, f) => number(v, f, 0.001, 1e5), '');
  opt(out, raw, 'durationMs', (v, f) => number(v, f, 1000, 3_600_000), '');
  opt(out, raw, 'fastMs', (v, f) => number(v, f, 0, 1e5), '');
  opt(out, raw, 'fastJitter', (v, f) => number(v, f, 0, 1), '');
  opt(out, raw, 'slowMs', (v, f) => number(v, f, 0, 1e6), '');
  opt(out, raw, 'slowShare', (v, f) => number(v, f, 0, 1), '');
  opt(out, raw, 'failAtMs', (v, f) => number(v, f, 0, 3_600_000), '');
  opt(out, raw, 'failForMs', (v, f) => number(v, f, 0, 3_600_000), '');
  opt(out, raw, 'failShare', (v, f) => number(v, f, 0, 1), '');
  opt(
    out,
    raw,
    'contenders',
    (v, f) => {
      const list = array(v, f, 50).map((x, i): TailContender => {
        const g = `${f}[${i}]`;
        const o = object(x, g, ['name', 'policy']);
        const name = string(o.name, `${g}.name`);
        const policy = o.policy;
        if (typeof policy !== 'string' && (typeof policy !== 'object' || policy === null || Array.isArray(policy)))
          throw invalid(`${g}.policy`, 'a preset name or a policy object', policy);
        resolveSimPolicy({ name, policy: policy as string | PolicySpec, budget: false }, `${g}.policy`);
        return { name, policy: policy as string | PolicySpec };
      });
      uniqueNames(list, f);
      return list;
    },
    '',
  );
  const rate = (out.arrivalsPerSec as number | undefined) ?? TAIL_DEFAULTS.arrivalsPerSec;
  const duration = (out.durationMs as number | undefined) ?? TAIL_DEFAULTS.durationMs;
  if (rate * (duration / 1000) > 1e6)
    throw new RelentError('ERR_INVALID_INPUT', '`arrivalsPerSec` × `durationMs`: at most 1,000,000 operations per contender', { field: 'arrivalsPerSec' });
  return out as Partial<TailConfig>;
}

function parseQuota(raw: Obj): Partial<QuotaConfig> {
  object(raw, '', ['scenario', 'seed', 'arrivalsPerSec', 'durationMs', 'quotaPerSec', 'quotaBurst', 'retryAfterSec', 'serviceMs', 'contenders']);
  const out: Record<string, unknown> = {};
  opt(out, raw, 'seed', seed, '');
  opt(out, raw, 'arrivalsPerSec', (v, f) => number(v, f, 0.001, 1e5), '');
  opt(out, raw, 'durationMs', (v, f) => number(v, f, 1000, 3_600_000), '');
  opt(out, raw, 'quotaPerSec', (v, f) => number(v, f, 0.001, 1e5), '');
  opt(out, raw, 'quotaBurst', (v, f) => number(v, f, 1, 1e6), '');
  opt(out, raw, 'retryAfterSec', (v, f) => number(v, f, 0, 3600), '');
  opt(out, raw, 'serviceMs', (v, f) => number(v, f, 0, 1e5), '');
  opt(
    out,
    raw,
    'contenders',
    (v, f) => {
      const list = array(v, f, 50).map((x, i): QuotaContender => {
        const g = `${f}[${i}]`;
        const o = object(x, g, ['name', 'policy', 'rateLimit']);
        const name = string(o.name, `${g}.name`);
        const policy = o.policy ?? { preset: 'http-429', deadlineMs: 10_000 };
        if (typeof policy !== 'string' && (typeof policy !== 'object' || policy === null || Array.isArray(policy)))
          throw invalid(`${g}.policy`, 'a preset name or a policy object', policy);
        resolveSimPolicy({ name, policy: policy as string | PolicySpec, budget: false }, `${g}.policy`);
        const rateLimit =
          o.rateLimit === undefined || o.rateLimit === null ? null : (byCore(() => normalizeRateLimit(o.rateLimit, `${g}.rateLimit`)) as RateLimitSpec);
        return { name, policy: policy as string | PolicySpec, rateLimit };
      });
      uniqueNames(list, f);
      return list;
    },
    '',
  );
  const rate = (out.arrivalsPerSec as number | undefined) ?? QUOTA_DEFAULTS.arrivalsPerSec;
  const duration = (out.durationMs as number | undefined) ?? QUOTA_DEFAULTS.durationMs;
  if (rate * (duration / 1000) > 1e6)
    throw new RelentError('ERR_INVALID_INPUT', '`arrivalsPerSec` × `durationMs`: at most 1,000,000 operations per contender', { field: 'arrivalsPerSec' });
  return out as Partial<QuotaConfig>;
}

/** Validates a parsed scenario file (or object). */
export function parseScenario(input: unknown): Scenario {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw invalid('scenario file', 'a JSON object with a `scenario` field', input);
  const raw = input as Obj;
  switch (raw.scenario) {
    case 'brooker':
      return { scenario: 'brooker', config: parseBrooker(raw) };
    case 'overload':
      return { scenario: 'overload', config: parseOverload(raw) };
    case 'layers':
      return { scenario: 'layers', config: parseLayers(raw) };
    case 'capacity':
      return { scenario: 'capacity', config: parseCapacity(raw) };
    case 'tail':
      return { scenario: 'tail', config: parseTail(raw) };
    case 'quota':
      return { scenario: 'quota', config: parseQuota(raw) };
    default:
      throw invalid('scenario', `one of ${SCENARIO_NAMES.join(', ')}`, raw.scenario);
  }
}

/** Parses and validates the text of a scenario file; JSON syntax errors say where. */
export function parseScenarioText(text: string, name = 'scenario file'): Scenario {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new RelentError('ERR_INVALID_INPUT', `${name}: invalid JSON (${e instanceof Error ? e.message : String(e)})`, { field: name });
  }
  try {
    return parseScenario(value);
  } catch (e) {
    if (RelentError.is(e)) throw new RelentError('ERR_INVALID_INPUT', `${name}: ${e.message}`, { field: e.field, cause: e });
    throw e;
  }
}

/** Runs a scenario. */
export function runScenario(s: Scenario, onProgress?: ProgressFn): ScenarioResult {
  switch (s.scenario) {
    case 'brooker':
      return { scenario: 'brooker', result: runBrooker(s.config, onProgress) };
    case 'overload':
      return { scenario: 'overload', result: runOverload(s.config, onProgress) };
    case 'layers':
      return { scenario: 'layers', result: runLayers(s.config, onProgress) };
    case 'capacity':
      return { scenario: 'capacity', result: runCapacity(s.config, onProgress) };
    case 'tail':
      return { scenario: 'tail', result: runTail(s.config, onProgress) };
    case 'quota':
      return { scenario: 'quota', result: runQuota(s.config, onProgress) };
  }
}
