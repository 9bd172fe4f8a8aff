/** Sub-buckets per doubling: bucket edges are 2^(i/16), so every value is known to ±2.2 %. */
export const SKETCH_SUB_BUCKETS = 16;
/** Whole numbers below this are counted exactly (relent's waits are whole milliseconds). */
export const SKETCH_EXACT_BELOW = 4096;
/** Values from 1 up to 2^40 (ms: 35 years) get a bucket; larger ones share one. */
const OCTAVES = 40;
const SIZE = OCTAVES * SKETCH_SUB_BUCKETS;

/** A summary of the values a sketch has seen (all null when it saw none). */
export interface SketchSummary {
  readonly count: number;
  readonly min: number | null;
  readonly max: number | null;
  readonly mean: number | null;
  readonly p50: number | null;
  readonly p90: number | null;
  readonly p99: number | null;
}

/**
 * One bar of a coarse histogram with round edges (0, < 1, 1–2, 2–5, 5–10, 10–20, …):
 * values in [lo, hi); `lo === hi === 0` is exactly zero; `hi === null` is everything
 * from 2^40 up.
 */
export interface SketchBin {
  readonly lo: number;
  readonly hi: number | null;
  readonly count: number;
}

/** The 1-2-5 bin of v ≥ 1: 0 → [1, 2), 1 → [2, 5), 2 → [5, 10), 3 → [10, 20) … */
function roundBin(v: number): number {
  let d = Math.floor(Math.log10(v));
  if (10 ** (d + 1) <= v) d++;
  else if (10 ** d > v) d--;
  const m = v / 10 ** d;
  return 3 * d + (m < 2 ? 0 : m < 5 ? 1 : 2);
}

function roundEdge(k: number): number {
  const d = Math.floor(k / 3);
  return [1, 2, 5][k % 3]! * 10 ** d;
}

/**
 * A fixed-size histogram of non-negative numbers (≈ 4 700 counters, whatever the number
 * of values): exact count, min, max and mean; whole numbers below 4096 counted exactly
 * (so the quantiles of whole-millisecond waits are exact), other values in log buckets
 * 2^(i/16) wide, so quantiles are within ±2.2 % (relative) of the true value. Zero has
 * its own bucket (a wait of 0 ms means "retry at once").
 */
export class LogSketch {
  private readonly exact = new Float64Array(SKETCH_EXACT_BELOW);
  private readonly counts = new Float64Array(SIZE);
  private belowOne = 0;
  private over = 0;
  private n = 0;
  private sum = 0;
  private lo = Number.POSITIVE_INFINITY;
  private hi = Number.NEGATIVE_INFINITY;

  /** Adds a value; negative, NaN and infinite values are ignored (the caller validates). */
  add(v: number): void {
    if (!(v >= 0) || v === Number.POSITIVE_INFINITY) return;
    this.n++;
    this.sum += v;
    if (v < this.lo) this.lo = v;
    if (v > this.hi) this.hi = v;
    if (v < SKETCH_EXACT_BELOW && Number.isInteger(v)) this.exact[v]!++;
    else if (v < 1) this.belowOne++;
    else {
      const i = Math.floor(Math.log2(v) * SKETCH_SUB_BUCKETS);
      if (i >= SIZE) this.over++;
      else this.counts[i]!++;
    }
  }

  get count(): number {
    return this.n;
  }

  /**
   * Visits the counts in increasing order of value: (value estimate, count). Whole
   * numbers in a bucket's range come before its other values when below the bucket's
   * middle, after them otherwise.
   */
  private walk(visit: (value: number, count: number, exact: boolean) => boolean): void {
    if (this.exact[0]! > 0 && visit(0, this.exact[0]!, true)) return;
    if (this.belowOne > 0 && visit(this.clamp(0.5), this.belowOne, false)) return;
    let k = 1;
    for (let i = 0; i < SIZE; i++) {
      const top = 2 ** ((i + 1) / SKETCH_SUB_BUCKETS);
      const mid = 2 ** ((i + 0.5) / SKETCH_SUB_BUCKETS);
      for (; k < SKETCH_EXACT_BELOW && k <= mid; k++) if (this.exact[k]! > 0 && visit(k, this.exact[k]!, true)) return;
      const c = this.counts[i]!;
      if (c > 0 && visit(this.clamp(mid), c, false)) return;
      for (; k < SKETCH_EXACT_BELOW && k < top; k++) if (this.exact[k]! > 0 && visit(k, this.exact[k]!, true)) return;
    }
    if (this.over > 0) visit(this.hi, this.over, false);
  }

  /** The q-quantile (0 ≤ q ≤ 1) by nearest rank, or null without values. */
  quantile(q: number): number | null {
    if (this.n === 0) return null;
    const rank = Math.max(1, Math.ceil(Math.min(1, Math.max(0, q)) * this.n));
    if (rank === 1) return this.lo;
    if (rank === this.n) return this.hi;
    let seen = 0;
    let out = this.hi;
    this.walk((value, c) => {
      seen += c;
      if (rank <= seen) {
        out = value;
        return true;
      }
      return false;
    });
    return out;
  }

  private clamp(v: number): number {
    return Math.min(this.hi, Math.max(this.lo, v));
  }

  summary(): SketchSummary {
    if (this.n === 0) return { count: 0, min: null, max: null, mean: null, p50: null, p90: null, p99: null };
    return { count: this.n, min: this.lo, max: this.hi, mean: this.sum / this.n, p50: this.quantile(0.5), p90: this.quantile(0.9), p99: this.quantile(0.99) };
  }

  /**
   * The values in bins with round edges, from the smallest value to the largest: `0`
   * (exactly zero), `[0, 1)`, `[1, 2)`, `[2, 5)`, `[5, 10)`, `[10, 20)` … Whole numbers
   * below 4096 fall in their bin exactly; other values by their bucket's middle, so a
   * value within 2.2 % below an edge may be counted in the bin above it. Empty bins
   * between filled ones are kept (a chart shows the gap).
   */
  bins(): SketchBin[] {
    if (this.n === 0) return [];
    const out: SketchBin[] = [];
    if (this.exact[0]! > 0) out.push({ lo: 0, hi: 0, count: this.exact[0]! });
    if (this.belowOne > 0) out.push({ lo: 0, hi: 1, count: this.belowOne });
    const byBin = new Map<number, number>();
    const add = (bin: number, c: number): void => {
      byBin.set(bin, (byBin.get(bin) ?? 0) + c);
    };
    for (let k = 1; k < SKETCH_EXACT_BELOW; k++) if (this.exact[k]! > 0) add(roundBin(k), this.exact[k]!);
    for (let i = 0; i < SIZE; i++) if (this.counts[i]! > 0) add(roundBin(2 ** ((i + 0.5) / SKETCH_SUB_BUCKETS)), this.counts[i]!);
    if (byBin.size > 0) {
      const keys = [...byBin.keys()];
      const first = this.belowOne > 0 ? 0 : Math.min(...keys);
      const last = Math.max(...keys);
      for (let b = first; b <= last; b++) out.push({ lo: roundEdge(b), hi: roundEdge(b + 1), count: byBin.get(b) ?? 0 });
    }
    if (this.over > 0) out.push({ lo: 2 ** OCTAVES, hi: null, count: this.over });
    return out;
  }
}
