import { createSeededRandom } from '../core/random.js';
import type { Random } from '../core/types.js';

/**
 * The discrete-event engine of `relent/sim`: virtual time (ms, a float) and a binary
 * min-heap of pending events. No wall clock, no timers, no Math.random: a run is a pure
 * function of its configuration and seed.
 *
 * Allocation-light by design: an event is (time, kind, id) kept in parallel typed
 * arrays, so pushing and popping allocate nothing (the arrays double when full).
 * Scenarios keep their per-entity state in their own arrays and switch on `kind`.
 * Events at the same time pop in the order they were pushed (FIFO tie-break).
 */
export class EventQueue {
  private times: Float64Array;
  private seqs: Float64Array;
  private kinds: Int32Array;
  private ids: Int32Array;
  private n = 0;
  private seq = 0;
  /** The popped event's time, kind and id (valid after `pop()` returned true). */
  time = 0;
  kind = 0;
  id = 0;

  constructor(capacity = 1024) {
    const c = Math.max(16, capacity | 0);
    this.times = new Float64Array(c);
    this.seqs = new Float64Array(c);
    this.kinds = new Int32Array(c);
    this.ids = new Int32Array(c);
  }

  /** Pending events. */
  get size(): number {
    return this.n;
  }

  /** Drops every pending event (keeps the storage). */
  clear(): void {
    this.n = 0;
    this.seq = 0;
    this.time = 0;
  }

  /** The time of the next event, or Infinity when none is pending. */
  peekTime(): number {
    return this.n > 0 ? this.times[0]! : Infinity;
  }

  /** Schedules event `kind` for entity `id` at virtual time `time`. */
  push(time: number, kind: number, id: number): void {
    if (!(time >= 0) || time === Infinity) throw new RangeError(`EventQueue.push: time must be a finite number >= 0, got ${time}`);
    if (this.n === this.times.length) this.grow();
    const times = this.times;
    const seqs = this.seqs;
    const kinds = this.kinds;
    const ids = this.ids;
    const s = this.seq++;
    let i = this.n++;
    // Sift up: move parents down until the slot fits.
    while (i > 0) {
      const p = (i - 1) >> 1;
      const pt = times[p]!;
      if (pt < time || (pt === time && seqs[p]! < s)) break;
      times[i] = pt;
      seqs[i] = seqs[p]!;
      kinds[i] = kinds[p]!;
      ids[i] = ids[p]!;
      i = p;
    }
    times[i] = time;
    seqs[i] = s;
    kinds[i] = kind;
    ids[i] = id;
  }

  /** Removes the earliest event into `time`/`kind`/`id`; false when none is pending. */
  pop(): boolean {
    const n = this.n;
    if (n === 0) return false;
    const times = this.times;
    const seqs = this.seqs;
    const kinds = this.kinds;
    const ids = this.ids;
    this.time = times[0]!;
    this.kind = kinds[0]!;
    this.id = ids[0]!;
    const last = n - 1;
    this.n = last;
    if (last === 0) return true;
    const t = times[last]!;
    const s = seqs[last]!;
    const k = kinds[last]!;
    const d = ids[last]!;
    let i = 0;
    // Sift down the former last element from the root.
    for (;;) {
      let c = 2 * i + 1;
      if (c >= last) break;
      const r = c + 1;
      if (r < last) {
        const ct = times[c]!;
        const rt = times[r]!;
        if (rt < ct || (rt === ct && seqs[r]! < seqs[c]!)) c = r;
      }
      const ct = times[c]!;
      if (t < ct || (t === ct && s < seqs[c]!)) break;
      times[i] = ct;
      seqs[i] = seqs[c]!;
      kinds[i] = kinds[c]!;
      ids[i] = ids[c]!;
      i = c;
    }
    times[i] = t;
    seqs[i] = s;
    kinds[i] = k;
    ids[i] = d;
    return true;
  }

  private grow(): void {
    const c = this.times.length * 2;
    const times = new Float64Array(c);
    const seqs = new Float64Array(c);
    const kinds = new Int32Array(c);
    const ids = new Int32Array(c);
    times.set(this.times);
    seqs.set(this.seqs);
    kinds.set(this.kinds);
    ids.set(this.ids);
    this.times = times;
    this.seqs = seqs;
    this.kinds = kinds;
    this.ids = ids;
  }
}

// Ziggurat tables for the standard normal (Marsaglia & Tsang, "The Ziggurat Method for
// Generating Random Variables", J. Stat. Software 5(8), 2000): 128 layers of equal area.
const ZIG_R = 3.442619855899;
const ZIG_V = 9.91256303526217e-3;
const ZIG_M = 2 ** 31;
const ZK = new Float64Array(128);
const ZW = new Float64Array(128);
const ZF = new Float64Array(128);
{
  let d = ZIG_R;
  let t = d;
  const q = ZIG_V / Math.exp(-0.5 * d * d);
  ZK[0] = (d / q) * ZIG_M;
  ZK[1] = 0;
  ZW[0] = q / ZIG_M;
  ZW[127] = d / ZIG_M;
  ZF[0] = 1;
  ZF[127] = Math.exp(-0.5 * d * d);
  for (let i = 126; i >= 1; i--) {
    d = Math.sqrt(-2 * Math.log(ZIG_V / d + Math.exp(-0.5 * d * d)));
    ZK[i + 1] = (d / t) * ZIG_M;
    t = d;
    ZF[i] = Math.exp(-0.5 * d * d);
    ZW[i] = d / ZIG_M;
  }
}

/**
 * Seeded random variates on top of the core's seeded uniform source. Each stream is
 * named (`seed:purpose:…`), so one scenario cell gives the same numbers whichever other
 * cells run with it, and two policies compared in one scenario see the same arrivals.
 */
export class Sampler {
  readonly uniform: Random;

  constructor(seed: number | string) {
    this.uniform = createSeededRandom(seed);
  }

  /** A signed 32-bit integer from the uniform source. */
  private int32(): number {
    return (this.uniform() * 4294967296) | 0;
  }

  /** A standard normal variate (ziggurat: one uniform and one comparison ~99 % of the time). */
  standardNormal(): number {
    let hz = this.int32();
    let iz = hz & 127;
    if (Math.abs(hz) < ZK[iz]!) return hz * ZW[iz]!;
    for (;;) {
      const x = hz * ZW[iz]!;
      if (iz === 0) {
        // The tail beyond R.
        let tx: number;
        let ty: number;
        do {
          tx = -Math.log(1 - this.uniform()) / ZIG_R;
          ty = -Math.log(1 - this.uniform());
        } while (ty + ty < tx * tx);
        return hz > 0 ? ZIG_R + tx : -ZIG_R - tx;
      }
      if (ZF[iz]! + this.uniform() * (ZF[iz - 1]! - ZF[iz]!) < Math.exp(-0.5 * x * x)) return x;
      hz = this.int32();
      iz = hz & 127;
      if (Math.abs(hz) < ZK[iz]!) return hz * ZW[iz]!;
    }
  }

  /** A normal variate. */
  normal(mean: number, sd: number): number {
    return mean + sd * this.standardNormal();
  }

  /** |N(mean, sd)|: Brooker's network delay. */
  absNormal(mean: number, sd: number): number {
    return Math.abs(mean + sd * this.standardNormal());
  }

  /** An exponential variate with the given mean (Poisson inter-arrival times). */
  exponential(mean: number): number {
    return -mean * Math.log(1 - this.uniform());
  }
}

/** A stable seed string for one named stream of a scenario cell. */
export function streamSeed(seed: number | string, ...parts: (string | number)[]): string {
  return `${String(seed)}:${parts.join(':')}`;
}

/** The q-quantile of sorted values (NaN when none): the smallest value with at least q of them at or below it. */
export function sortedQuantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/** Rounded to two decimals for the tables (NaN and Infinity kept). */
export const round2 = (v: number): number => (Number.isFinite(v) ? Math.round(v * 100) / 100 : v);

/** Timed callbacks in time order (then insertion order): a binary heap. */
export class Timeline {
  private readonly h: { t: number; s: number; f: () => void }[] = [];
  private seq = 0;
  get size(): number {
    return this.h.length;
  }
  push(t: number, f: () => void): void {
    const h = this.h;
    const e = { t, s: this.seq++, f };
    let i = h.length;
    h.push(e);
    while (i > 0) {
      const p = (i - 1) >> 1;
      const a = h[p]!;
      if (a.t < t || (a.t === t && a.s < e.s)) break;
      h[i] = a;
      i = p;
    }
    h[i] = e;
  }
  pop(): { t: number; f: () => void } {
    const h = this.h;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1,
          r = l + 1;
        let m = -1;
        let best = last;
        if (l < h.length && (h[l]!.t < best.t || (h[l]!.t === best.t && h[l]!.s < best.s))) {
          m = l;
          best = h[l]!;
        }
        if (r < h.length && (h[r]!.t < best.t || (h[r]!.t === best.t && h[r]!.s < best.s))) {
          m = r;
          best = h[r]!;
        }
        if (m < 0) break;
        h[i] = h[m]!;
        i = m;
      }
      h[i] = last;
    }
    return top;
  }
}
