import { invalidPolicy } from './errors.js';

/**
 * Observed latency of one dependency in constant memory: what a hedge's `delayMs: "p95"`
 * and the gradient concurrency limit read.
 *
 * A log-bucketed histogram (the shape of HdrHistogram and DDSketch): bucket edges are
 * 2^(i/16) ms, so a quantile is known to within ±2.2 % (relative) of the true value,
 * from 2^-6 ms (16 µs) to 2^31 ms; smaller values share the lowest bucket, larger ones
 * the highest. Recent samples count most: once the histogram holds `2 × window` samples
 * every count is halved, so it describes about the last `window`–`2 × window` samples
 * whatever the traffic, in the same ~600 counters. Quantiles are clamped to the smallest
 * and largest sample of the last two halvings, so on a fixed input they are exact.
 *
 * Pure: no clock (the decay counts samples, not time), no allocation after creation.
 */
export interface LatencyEstimator {
  /** Records one latency, ms. Negative, NaN or infinite values are ignored (never poison the estimate). */
  record(ms: number): void;
  /** The `q`-quantile (0 ≤ q ≤ 1) of the recent samples, ms; null before the first sample. Never NaN. */
  quantile(q: number): number | null;
  /** Samples the histogram weighs now (after halvings, so at most 2 × window). */
  readonly count: number;
  /** Samples recorded since creation (or the last reset). */
  readonly total: number;
  /** Forgets every sample. */
  reset(): void;
}

export interface LatencyEstimatorOptions {
  /** About how many recent samples the estimate describes (halving every `window` samples past `window`). Default 1000. */
  readonly window?: number;
}

export const LATENCY_DEFAULTS = Object.freeze({ window: 1000 });

/** Buckets per doubling. */
const SUB = 16;
/** The lowest bucket's edge: 2^-6 ms. */
const LOW_OCTAVE = -6;
const HIGH_OCTAVE = 31;
const BUCKETS = (HIGH_OCTAVE - LOW_OCTAVE) * SUB;
/** A bucket's representative value: its geometric middle. */
const MID = 2 ** (0.5 / SUB);

function bucketOf(ms: number): number {
  if (!(ms > 2 ** LOW_OCTAVE)) return 0;
  const i = Math.floor((Math.log2(ms) - LOW_OCTAVE) * SUB);
  return i >= BUCKETS ? BUCKETS - 1 : i;
}

function valueOf(bucket: number): number {
  return 2 ** (bucket / SUB + LOW_OCTAVE) * MID;
}

class Histogram implements LatencyEstimator {
  private readonly counts = new Float64Array(BUCKETS);
  count = 0;
  total = 0;
  private lo = Infinity;
  private hi = -Infinity;
  private loPrev = Infinity;
  private hiPrev = -Infinity;
  /** One cached answer: quantile `cachedQ` as of `cachedAt` samples. */
  private cachedQ = -1;
  private cachedAt = -1;
  private cached = 0;

  constructor(private readonly window: number) {}

  record(ms: number): void {
    if (!(ms >= 0) || ms === Infinity) return;
    this.counts[bucketOf(ms)]! += 1;
    this.count += 1;
    this.total += 1;
    if (ms < this.lo) this.lo = ms;
    if (ms > this.hi) this.hi = ms;
    if (this.count >= 2 * this.window) this.halve();
  }

  private halve(): void {
    const c = this.counts;
    for (let i = 0; i < BUCKETS; i++) if (c[i] !== 0) c[i] = c[i]! * 0.5;
    this.count *= 0.5;
    this.loPrev = this.lo;
    this.hiPrev = this.hi;
    this.lo = Infinity;
    this.hi = -Infinity;
  }

  quantile(q: number): number | null {
    if (this.count === 0) return null;
    const p = q >= 0 ? (q <= 1 ? q : 1) : 0; // NaN → 0
    // Recomputed after 1/64 of the window's new samples (and at least every 16): the walk costs ~600 reads.
    if (p === this.cachedQ && this.total - this.cachedAt < Math.min(16, Math.max(1, this.window >> 6))) return this.cached;
    const target = p * this.count;
    const c = this.counts;
    let seen = 0;
    let i = 0;
    for (; i < BUCKETS - 1; i++) {
      seen += c[i]!;
      if (seen >= target && seen > 0) break;
    }
    let v = valueOf(i);
    const lo = Math.min(this.lo, this.loPrev);
    const hi = Math.max(this.hi, this.hiPrev);
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    this.cachedQ = p;
    this.cachedAt = this.total;
    this.cached = v;
    return v;
  }

  reset(): void {
    this.counts.fill(0);
    this.count = 0;
    this.total = 0;
    this.lo = this.loPrev = Infinity;
    this.hi = this.hiPrev = -Infinity;
    this.cachedQ = -1;
  }
}

export function createLatencyEstimator(options: LatencyEstimatorOptions = {}): LatencyEstimator {
  if (typeof options !== 'object' || options === null) throw invalidPolicy('latency', 'an object', options);
  const window = options.window ?? LATENCY_DEFAULTS.window;
  if (typeof window !== 'number' || !Number.isInteger(window) || window < 1 || window > 1e9) throw invalidPolicy('window', 'an integer in [1, 1e9]', window);
  return new Histogram(window);
}

/** The histogram's number of counters, whatever it is fed (for tests of its memory). */
export const LATENCY_BUCKETS = BUCKETS;
