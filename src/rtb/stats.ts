// Counters and latency histograms of the exchange (metrics that tell whether the
// partners, their timeouts and their breakers are set right). Fixed memory: a histogram
// is 4 001 counters of 0.25 ms up to 1 s, plus one overflow counter with the maximum.

const RESOLUTION = 4; // buckets per ms
const BUCKETS = 4000; // 1 000 ms

/** A latency histogram with 0.25 ms buckets up to 1 s and an exact maximum. */
export class Histogram {
  private readonly counts = new Uint32Array(BUCKETS + 1);
  count = 0;
  sum = 0;
  max = 0;

  record(ms: number): void {
    const v = ms > 0 && Number.isFinite(ms) ? ms : 0;
    const b = Math.floor(v * RESOLUTION);
    this.counts[b < BUCKETS ? b : BUCKETS]!++;
    this.count++;
    this.sum += v;
    if (v > this.max) this.max = v;
  }

  /** The q-quantile (0–1), ms, to the bucket's upper edge (the maximum beyond 1 s); 0 when empty. */
  quantile(q: number): number {
    if (this.count === 0) return 0;
    const rank = Math.max(1, Math.ceil(q * this.count));
    let seen = 0;
    for (let i = 0; i <= BUCKETS; i++) {
      seen += this.counts[i]!;
      if (seen >= rank) return i === BUCKETS ? this.max : Math.min(this.max, (i + 1) / RESOLUTION);
    }
    return this.max;
  }

  /** The non-empty buckets as [bucket, count, …], with count, sum and max: what another process needs to merge this histogram. */
  toSparse(): SparseHistogram {
    const buckets: number[] = [];
    for (let i = 0; i <= BUCKETS; i++) if (this.counts[i] !== 0) buckets.push(i, this.counts[i]!);
    return { buckets, count: this.count, sum: this.sum, max: this.max };
  }

  /** Adds another histogram's counts (from toSparse()). */
  addSparse(h: SparseHistogram): void {
    for (let i = 0; i + 1 < h.buckets.length; i += 2) {
      const b = h.buckets[i]!;
      if (b >= 0 && b <= BUCKETS) this.counts[b]! += h.buckets[i + 1]!;
    }
    this.count += h.count;
    this.sum += h.sum;
    if (h.max > this.max) this.max = h.max;
  }

  reset(): void {
    this.counts.fill(0);
    this.count = 0;
    this.sum = 0;
    this.max = 0;
  }

  toJSON(): LatencySummary {
    return {
      count: this.count,
      p50Ms: this.quantile(0.5),
      p90Ms: this.quantile(0.9),
      p99Ms: this.quantile(0.99),
      maxMs: round(this.max),
      meanMs: this.count === 0 ? 0 : round(this.sum / this.count),
    };
  }
}

/** A histogram in a form that crosses processes (JSON). */
export interface SparseHistogram {
  readonly buckets: readonly number[];
  readonly count: number;
  readonly sum: number;
  readonly max: number;
}

export interface LatencySummary {
  readonly count: number;
  readonly p50Ms: number;
  readonly p90Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  readonly meanMs: number;
}

export const round = (ms: number): number => Math.round(ms * 100) / 100;

/** Adds `n` to a counter in a record of counters. */
export function bump(rec: Record<string, number>, key: string, n = 1): void {
  rec[key] = (rec[key] ?? 0) + n;
}
