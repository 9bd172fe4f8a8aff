/** One bucket of the load-vs-retries series: attempts whose time (or line) is in [start, start + width). */
export interface SeriesBucket {
  readonly start: number;
  /** Every attempt sent: the load on the dependencies. */
  readonly attempts: number;
  /** Attempts number 1: operations started. */
  readonly firstAttempts: number;
  /** Attempts number 2 and up: the load that retries added. */
  readonly retries: number;
  /** Attempts whose decision was not `return` (the attempt did not end its operation with an answer). */
  readonly failures: number;
}

/** Widths of a time series (ms): each a whole multiple of the one before, so buckets merge exactly. */
const TIME_WIDTHS = [
  1, 2, 10, 20, 100, 200, 1000, 2000, 10_000, 20_000, 60_000, 120_000, 600_000, 1_200_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000, 86_400_000,
];

/** The next, coarser bucket width: 1, 2, 10, 20, 100 … for lines; round durations for time. */
export function nextWidth(width: number, unit: 'ms' | 'lines'): number {
  if (unit === 'ms') {
    const i = TIME_WIDTHS.indexOf(width);
    if (i >= 0 && i + 1 < TIME_WIDTHS.length) return TIME_WIDTHS[i + 1]!;
    return width * 2;
  }
  // 1 → 2 → 10 → 20 → 100 …
  const lead = width / 10 ** Math.floor(Math.log10(width) + 1e-9);
  return Math.round(lead) === 1 ? width * 2 : width * 5;
}

/**
 * A time series with a fixed number of buckets whatever the length of the log: when a
 * point falls beyond the last bucket (or before the first), the buckets widen to the
 * next width and merge. Memory is 4 × maxBuckets numbers.
 */
export class AdaptiveSeries {
  private width = 1;
  private origin: number | null = null;
  private used = 0;
  private a: Float64Array;
  private f: Float64Array;
  private r: Float64Array;
  private x: Float64Array;

  constructor(
    readonly unit: 'ms' | 'lines',
    private readonly maxBuckets = 120,
  ) {
    if (!Number.isInteger(maxBuckets) || maxBuckets < 10) throw new RangeError('AdaptiveSeries: maxBuckets must be an integer ≥ 10');
    this.a = new Float64Array(maxBuckets);
    this.f = new Float64Array(maxBuckets);
    this.r = new Float64Array(maxBuckets);
    this.x = new Float64Array(maxBuckets);
  }

  /** Counts one attempt at `at` (ms or line number). */
  add(at: number, attempt: number, failed: boolean): void {
    if (!Number.isFinite(at)) return;
    if (this.origin === null) this.origin = Math.floor(at / this.width) * this.width;
    for (;;) {
      if (at < this.origin) {
        const newOrigin = Math.floor(at / this.width) * this.width;
        const shift = Math.round((this.origin - newOrigin) / this.width);
        if (this.used + shift <= this.maxBuckets) {
          this.shiftRight(shift);
          this.origin = newOrigin;
          continue;
        }
        this.widen();
        continue;
      }
      const i = Math.floor((at - this.origin) / this.width);
      if (i >= this.maxBuckets) {
        this.widen();
        continue;
      }
      this.a[i]!++;
      if (attempt <= 1) this.f[i]!++;
      else this.r[i]!++;
      if (failed) this.x[i]!++;
      if (i + 1 > this.used) this.used = i + 1;
      return;
    }
  }

  /** The bucket width (ms or lines). */
  get bucketWidth(): number {
    return this.width;
  }

  buckets(): SeriesBucket[] {
    const out: SeriesBucket[] = [];
    if (this.origin === null) return out;
    for (let k = 0; k < this.used; k++) {
      out.push({ start: this.origin + k * this.width, attempts: this.a[k]!, firstAttempts: this.f[k]!, retries: this.r[k]!, failures: this.x[k]! });
    }
    return out;
  }

  private shiftRight(shift: number): void {
    if (shift <= 0) return;
    for (const arr of [this.a, this.f, this.r, this.x]) {
      arr.copyWithin(shift, 0, this.used);
      arr.fill(0, 0, shift);
    }
    this.used += shift;
  }

  private widen(): void {
    const w = this.width;
    const W = nextWidth(w, this.unit);
    const origin = this.origin!;
    const newOrigin = Math.floor(origin / W) * W;
    const next: Float64Array[] = [
      new Float64Array(this.maxBuckets),
      new Float64Array(this.maxBuckets),
      new Float64Array(this.maxBuckets),
      new Float64Array(this.maxBuckets),
    ];
    const old: Float64Array[] = [this.a, this.f, this.r, this.x];
    let used = 0;
    for (let k = 0; k < this.used; k++) {
      const j = Math.floor((origin + k * w - newOrigin) / W);
      for (let s = 0; s < 4; s++) next[s]![j]! += old[s]![k]!;
      if (j + 1 > used) used = j + 1;
    }
    [this.a, this.f, this.r, this.x] = next as [Float64Array, Float64Array, Float64Array, Float64Array];
    this.width = W;
    this.origin = newOrigin;
    this.used = used;
  }
}
