import { invalidPolicy } from './errors.js';
import { createLatencyEstimator, type LatencyEstimator } from './latency.js';

/**
 * Hedged requests ("The Tail at Scale", Dean and Barroso, CACM 2013; gRPC's hedging
 * policy; Finagle's BackupRequestFilter): when an attempt of an idempotent operation has
 * not answered after `delayMs`, another is sent while the first still runs, and the first
 * acceptable answer wins; the others are aborted.
 *
 * `delayMs` is a number of ms, or a percentile of the dependency's observed latency
 * written "p90" … "p99" (the 95th percentile, as the paper, is the usual choice: about
 * 5 % of operations then hedge). Hedges are bounded three ways: `maxHedges` per
 * operation; `maxExtraLoad`, the fraction of extra calls over the operations (every
 * operation earns `maxExtraLoad` of a hedge, a hedge spends one; it starts empty, so
 * hedges never exceed maxExtraLoad × operations); and the retry budget, which pays for
 * every hedge as for a retry. When the dependency is failing rather than slow (more than
 * HEDGE_FAILURE_RATIO of recent attempts failed in a way the policy retries, or the
 * server said not to retry), no hedge is sent: a hedge cannot help a failing dependency
 * and would only add load (gRPC stops hedging on a fatal status or a "don't retry"
 * pushback, and throttles hedges with retries).
 */
export interface HedgeSpec {
  /** After how long without an answer another attempt goes: ms, or "p90" … "p99" of the observed latency. */
  readonly delayMs: number | HedgePercentile;
  /** Hedges per operation at most (attempts beyond the first in flight at once), 1–4. Default 1. */
  readonly maxHedges?: number;
  /** Extra calls hedging may add, as a fraction of operations, in (0, 1]. Default 0.05. */
  readonly maxExtraLoad?: number;
}

export type HedgePercentile = `p${90 | 91 | 92 | 93 | 94 | 95 | 96 | 97 | 98 | 99}`;

export interface ResolvedHedgeSpec {
  /** The spec as written (a number of ms or "pNN"). */
  readonly delayMs: number | HedgePercentile;
  /** The quantile in (0, 1) when delayMs is a percentile, else null. */
  readonly quantile: number | null;
  readonly maxHedges: number;
  readonly maxExtraLoad: number;
}

export const HEDGE_DEFAULTS = Object.freeze({ maxHedges: 1, maxExtraLoad: 0.05 });

/** A percentile delay is used once this many attempts have been observed (until then: no hedge). */
export const HEDGE_MIN_SAMPLES = 20;
/** Hedging stops while more than this fraction of recent attempts failed (failing, not slow). */
export const HEDGE_FAILURE_RATIO = 0.1;
/** Hedges a dependency may save up in quiet times (the extra-load bucket's size). */
export const HEDGE_MAX_SAVED = 10;
/** Weight of one attempt in the recent failure ratio (about the last 20 attempts). */
const FAILURE_WEIGHT = 1 / 20;

const PERCENTILE = /^p(9[0-9])$/;

/** Validates a policy's `hedge` field; errors name the field (`hedge.delayMs`, …). */
export function normalizeHedge(input: unknown, field = 'hedge'): ResolvedHedgeSpec {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw invalidPolicy(field, 'an object like { "delayMs": "p95" } or null', input);
  const o = input as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (k !== 'delayMs' && k !== 'maxHedges' && k !== 'maxExtraLoad')
      throw invalidPolicy(`${field}.${k}`, 'absent (hedge takes delayMs, maxHedges, maxExtraLoad)', o[k]);
  }
  const d = o.delayMs;
  let quantile: number | null = null;
  if (typeof d === 'string') {
    const m = PERCENTILE.exec(d);
    if (m === null) throw invalidPolicy(`${field}.delayMs`, 'a number of ms or a percentile "p90" … "p99"', d);
    quantile = Number(m[1]) / 100;
  } else if (typeof d !== 'number' || !Number.isFinite(d) || d < 0 || d > 2 ** 31 - 1) {
    throw invalidPolicy(`${field}.delayMs`, 'a number of ms in [0, 2147483647] or a percentile "p90" … "p99"', d);
  }
  const maxHedges = o.maxHedges ?? HEDGE_DEFAULTS.maxHedges;
  if (typeof maxHedges !== 'number' || !Number.isInteger(maxHedges) || maxHedges < 1 || maxHedges > 4)
    throw invalidPolicy(`${field}.maxHedges`, 'an integer in [1, 4]', maxHedges);
  const maxExtraLoad = o.maxExtraLoad ?? HEDGE_DEFAULTS.maxExtraLoad;
  if (typeof maxExtraLoad !== 'number' || !Number.isFinite(maxExtraLoad) || maxExtraLoad <= 0 || maxExtraLoad > 1) {
    throw invalidPolicy(`${field}.maxExtraLoad`, 'a fraction in (0, 1] (0.05: at most 5 % more calls)', maxExtraLoad);
  }
  return Object.freeze({ delayMs: d as number | HedgePercentile, quantile, maxHedges, maxExtraLoad });
}

/** What hedging has done for one dependency. */
export interface HedgeStats {
  /** Operations started that could hedge. */
  readonly operations: number;
  /** Hedges sent. */
  readonly hedges: number;
  /** Operations whose answer came from a hedge. */
  readonly won: number;
  /** Hedges not sent because the extra-load budget was empty, the dependency was failing, or the retry budget refused. */
  readonly skipped: number;
  /** The recent failure ratio of attempts. */
  readonly failureRatio: number;
}

/**
 * What hedging keeps per dependency, shared by its operations (as a retry budget is):
 * the observed latency, the extra-load bucket, the recent failure ratio. The operation
 * state machine reads and updates it; drivers only make one per dependency and hand it
 * to every operation of that dependency.
 */
export interface HedgeState {
  readonly latency: LatencyEstimator;
  /** An operation that may hedge started: it earns `maxExtraLoad` of a hedge. */
  started(spec: ResolvedHedgeSpec): void;
  /** The wait before the next hedge, ms, or null when none may be planned (percentile not known yet). */
  delayMs(spec: ResolvedHedgeSpec): number | null;
  /** Whether a hedge may go now (the extra-load bucket holds one, the dependency is not failing). */
  mayHedge(): boolean;
  /** A hedge goes: it spends its share of the extra load. */
  hedged(): void;
  /** One attempt ended after `elapsedMs` (answered, failed, timed out, or aborted as a loser: its latency is at least that). */
  observe(elapsedMs: number, failure: boolean): void;
  /** The server said not to retry: no hedges until attempts answer again. */
  noRetry(): void;
  /** An operation's answer came from a hedge. */
  won(): void;
  /** A hedge was due but not sent. */
  skipped(): void;
  stats(): HedgeStats;
}

class State implements HedgeState {
  readonly latency: LatencyEstimator = createLatencyEstimator();
  private tokens = 0;
  private failure = 0;
  private ops = 0;
  private sent = 0;
  private wins = 0;
  private skips = 0;

  started(spec: ResolvedHedgeSpec): void {
    this.ops++;
    this.tokens = Math.min(HEDGE_MAX_SAVED * spec.maxHedges, this.tokens + spec.maxExtraLoad);
  }

  delayMs(spec: ResolvedHedgeSpec): number | null {
    if (spec.quantile === null) return spec.delayMs as number;
    if (this.latency.total < HEDGE_MIN_SAMPLES) return null;
    return this.latency.quantile(spec.quantile);
  }

  mayHedge(): boolean {
    return this.failure <= HEDGE_FAILURE_RATIO && this.tokens >= 1;
  }

  hedged(): void {
    this.tokens -= 1;
    this.sent++;
  }

  observe(elapsedMs: number, failure: boolean): void {
    this.latency.record(elapsedMs);
    this.failure += ((failure ? 1 : 0) - this.failure) * FAILURE_WEIGHT;
  }

  noRetry(): void {
    this.failure = 1;
  }

  won(): void {
    this.wins++;
  }

  skipped(): void {
    this.skips++;
  }

  stats(): HedgeStats {
    return { operations: this.ops, hedges: this.sent, won: this.wins, skipped: this.skips, failureRatio: this.failure };
  }
}

/** The hedging state of one dependency (one per dependency, shared by its operations). */
export function createHedgeState(): HedgeState {
  return new State();
}
