import { invalidPolicy } from './errors.js';
import { createLatencyEstimator, type LatencyEstimator } from './latency.js';

/**
 * Adaptive concurrency limits: how many calls to one dependency may be in flight,
 * found from what the calls observe (Netflix's concurrency-limits, Envoy's adaptive
 * concurrency filter), so that a dependency that loses capacity queues its callers'
 * excess on the callers instead of in itself.
 *
 * - `aimd`: additive increase, multiplicative decrease (TCP congestion avoidance). A
 *   drop — the dependency said it is overloaded (429, 503), a call timed out or was
 *   refused, or a call took longer than `slowMs` — multiplies the limit by `decrease`,
 *   at most once per wave: answers to calls started before the last decrease do not
 *   count again, so one burst of 429s halves the limit once, not to the floor. The
 *   limit grows by 1 after `limit` answers in a row while it is used (calls in flight
 *   at least half of it): about one step per round trip of a full window.
 * - `gradient`: compares the latency of the last window (its median) with the
 *   dependency's latency without queueing (the baseline) and moves the limit by their
 *   ratio: `limit × clamp(tolerance × baseline / median, 0.5, 2) + √limit / 2` (Envoy's
 *   gradient controller; Netflix's Gradient). Queueing at the dependency raises the
 *   median, so the limit falls until the queue is gone, within a few windows; while the
 *   dependency keeps up the limit grows (only while it is used). The baseline is the
 *   lowest window median seen since the last probe; every `probeIntervalMs` the limit
 *   drops to `probeLimit` for `probeSamples` calls to measure the baseline again
 *   without queueing (Envoy's minRTT recalculation), so a dependency that became
 *   slower for good is not taken for a queue forever. Drops halve the limit as in aimd.
 *
 * Pure state machines: the driver passes every time (`now`, the call's start) and keeps
 * the calls in flight; one algorithm object per dependency.
 */
export type LimitSpec = AimdLimitSpec | GradientLimitSpec;

export interface AimdLimitSpec {
  readonly kind: 'aimd';
  /** The limit at the start. Default 10. */
  readonly initial?: number;
  /** Default 1. */
  readonly min?: number;
  /** Default 1000. */
  readonly max?: number;
  /** Multiplier on a drop, in [0.05, 0.95]. Default 0.5. */
  readonly decrease?: number;
  /** A call slower than this (ms) counts as a drop; null: latency alone never does. Default null. */
  readonly slowMs?: number | null;
}

export interface GradientLimitSpec {
  readonly kind: 'gradient';
  /** Default 10. */
  readonly initial?: number;
  /** Default 1. */
  readonly min?: number;
  /** Default 1000. */
  readonly max?: number;
  /** Queueing accepted before the limit falls: the median may reach tolerance × baseline. In [1, 10], default 1.25. */
  readonly tolerance?: number;
  /** A window lasts at least this long (ms)… Default 250. */
  readonly windowMs?: number;
  /** …and holds at least this many answers. Default 10. */
  readonly minWindowSamples?: number;
  /** The baseline is measured again this often (ms); 0: never (it only ever falls). Default 60 000. */
  readonly probeIntervalMs?: number;
  /** Calls at the probe's limit that measure the baseline. Default 20. */
  readonly probeSamples?: number;
  /** The limit while probing. Default 3 (at least min). */
  readonly probeLimit?: number;
}

export type ResolvedLimitSpec = Required<AimdLimitSpec> | Required<GradientLimitSpec>;

export const AIMD_LIMIT_DEFAULTS = Object.freeze({ kind: 'aimd' as const, initial: 10, min: 1, max: 1000, decrease: 0.5, slowMs: null as number | null });
export const GRADIENT_LIMIT_DEFAULTS = Object.freeze({
  kind: 'gradient' as const,
  initial: 10,
  min: 1,
  max: 1000,
  tolerance: 1.25,
  windowMs: 250,
  minWindowSamples: 10,
  probeIntervalMs: 60_000,
  probeSamples: 20,
  probeLimit: 3,
});

/** What a driver tells the algorithm about one call when it ends. */
export interface LimitSample {
  /** When the call started (the driver's monotonic ms). */
  readonly startedAt: number;
  /** When it ended. */
  readonly now: number;
  /** Calls in flight when it ended, itself included. */
  readonly inFlight: number;
  /** The algorithm's `generation` when the call started. */
  readonly generation: number;
  /** The dependency signalled overload: a throttling status, a timeout, a refused connection. */
  readonly dropped: boolean;
}

/**
 * The one rule of what an adaptive limit hears as overload ("dropped"): a throttling
 * status of the policy (429 by default) or 503, or a refused connection. A driver with a
 * rule of its own (the delivery worker's `concurrency.backoffOn`) passes it instead.
 */
export function limitDropped(throttleStatuses: { has(status: number): boolean }, status: number | null, errorClass: string | null): boolean {
  return status !== null ? throttleStatuses.has(status) || status === 503 : errorClass === 'connect_refused';
}

/** Why the limit changed. */
export type LimitChange = 'decrease' | 'increase' | 'gradient' | 'probe' | 'probe_end';

export interface LimitAlgorithm {
  readonly spec: ResolvedLimitSpec;
  /** Calls allowed in flight now (an integer in [min, max]). */
  readonly limit: number;
  /** Counts decreases: a call started in an earlier generation cannot decrease the limit again. */
  readonly generation: number;
  /** The latency without queueing the gradient compares with, ms (null for aimd, and before the first window). */
  readonly baselineMs: number | null;
  /** One call ended. Returns why the limit changed, or null when it did not. */
  sample(s: LimitSample): LimitChange | null;
}

const KINDS = ['aimd', 'gradient'];

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function int(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw invalidPolicy(field, `an integer in [${min}, ${max}]`, v);
  return v;
}

function num(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) throw invalidPolicy(field, `a number in [${min}, ${max}]`, v);
  return v;
}

/** Validates a limit spec and fills every default; errors name the field under `field` (e.g. `concurrencyLimit.max`). */
export function normalizeLimitSpec(input: unknown, field = 'concurrencyLimit'): ResolvedLimitSpec {
  if (!isObject(input)) throw invalidPolicy(field, `an object with \`kind\` (${KINDS.join(' or ')})`, input);
  const kind = input.kind;
  if (kind !== 'aimd' && kind !== 'gradient') throw invalidPolicy(`${field}.kind`, KINDS.map((k) => `"${k}"`).join(' or '), kind);
  const d = kind === 'aimd' ? AIMD_LIMIT_DEFAULTS : GRADIENT_LIMIT_DEFAULTS;
  for (const k of Object.keys(input)) {
    if (!(k in d)) throw invalidPolicy(`${field}.${k}`, `absent (a ${kind} limit takes ${Object.keys(d).join(', ')})`, input[k]);
  }
  const max = int(input.max ?? d.max, `${field}.max`, 1, 1_000_000);
  const min = int(input.min ?? Math.min(d.min, max), `${field}.min`, 1, max);
  const initial = int(input.initial ?? Math.min(Math.max(d.initial, min), max), `${field}.initial`, min, max);
  if (kind === 'aimd') {
    const decrease = num(input.decrease ?? AIMD_LIMIT_DEFAULTS.decrease, `${field}.decrease`, 0.05, 0.95);
    const slowIn = input.slowMs === undefined ? AIMD_LIMIT_DEFAULTS.slowMs : input.slowMs;
    const slowMs = slowIn === null ? null : num(slowIn, `${field}.slowMs`, 1, 2 ** 31 - 1);
    return Object.freeze({ kind, initial, min, max, decrease, slowMs });
  }
  const g = GRADIENT_LIMIT_DEFAULTS;
  return Object.freeze({
    kind,
    initial,
    min,
    max,
    tolerance: num(input.tolerance ?? g.tolerance, `${field}.tolerance`, 1, 10),
    windowMs: num(input.windowMs ?? g.windowMs, `${field}.windowMs`, 1, 3_600_000),
    minWindowSamples: int(input.minWindowSamples ?? g.minWindowSamples, `${field}.minWindowSamples`, 1, 1_000_000),
    probeIntervalMs: num(input.probeIntervalMs ?? g.probeIntervalMs, `${field}.probeIntervalMs`, 0, 86_400_000),
    probeSamples: int(input.probeSamples ?? g.probeSamples, `${field}.probeSamples`, 1, 1_000_000),
    probeLimit: int(input.probeLimit ?? Math.min(Math.max(g.probeLimit, min), max), `${field}.probeLimit`, min, max),
  });
}

class Aimd implements LimitAlgorithm {
  private value: number;
  private credit = 0;
  generation = 0;
  readonly baselineMs = null;

  constructor(readonly spec: Required<AimdLimitSpec>) {
    this.value = spec.initial;
  }

  get limit(): number {
    return Math.floor(this.value);
  }

  sample(s: LimitSample): LimitChange | null {
    const spec = this.spec;
    if (s.dropped || (spec.slowMs !== null && s.now - s.startedAt > spec.slowMs)) {
      // Once per wave: an answer to a call started before the last decrease does not count again.
      if (s.generation !== this.generation) return null;
      const before = this.limit;
      this.value = Math.max(spec.min, Math.floor(this.value * spec.decrease));
      this.generation++;
      this.credit = 0;
      return this.limit !== before ? 'decrease' : null;
    }
    if (this.value >= spec.max) return null;
    // Only a limit in use grows (calls in flight at least half of it): an idle client learns nothing.
    if (s.inFlight * 2 < this.value) return null;
    if (++this.credit < this.limit) return null;
    this.credit = 0;
    this.value = Math.min(spec.max, this.value + 1);
    return 'increase';
  }
}

class Gradient implements LimitAlgorithm {
  private value: number;
  generation = 0;
  baselineMs: number | null = null;
  private readonly window: LatencyEstimator = createLatencyEstimator({ window: 1e9 });
  private windowStart: number | null = null;
  private maxInFlight = 0;
  private probing = false;
  private beforeProbe = 0;
  private nextProbeAt: number | null = null;

  constructor(readonly spec: Required<GradientLimitSpec>) {
    this.value = spec.initial;
  }

  get limit(): number {
    return this.probing ? this.spec.probeLimit : Math.floor(this.value);
  }

  sample(s: LimitSample): LimitChange | null {
    const spec = this.spec;
    const now = s.now;
    if (s.dropped) {
      if (s.generation !== this.generation) return null;
      const before = this.limit;
      this.value = Math.max(spec.min, Math.floor(this.value * 0.5));
      this.generation++;
      this.startWindow(now);
      return this.limit !== before ? 'decrease' : null;
    }
    const rtt = s.now - s.startedAt;
    if (this.windowStart === null) this.startWindow(now);
    if (this.nextProbeAt === null && spec.probeIntervalMs > 0) this.nextProbeAt = now + spec.probeIntervalMs;
    this.window.record(rtt >= 0 ? rtt : 0);
    if (s.inFlight > this.maxInFlight) this.maxInFlight = s.inFlight;

    if (this.probing) {
      if (this.window.count < spec.probeSamples) return null;
      this.baselineMs = this.window.quantile(0.5);
      this.probing = false;
      this.value = this.beforeProbe;
      this.nextProbeAt = now + spec.probeIntervalMs;
      this.startWindow(now);
      return 'probe_end';
    }
    if (now - this.windowStart! < spec.windowMs || this.window.count < spec.minWindowSamples) return null;

    const median = this.window.quantile(0.5)!;
    const used = this.maxInFlight * 2 >= this.value;
    this.startWindow(now);
    if (this.baselineMs === null || median < this.baselineMs) this.baselineMs = median;
    if (this.nextProbeAt !== null && now >= this.nextProbeAt) {
      this.probing = true;
      this.beforeProbe = this.value;
      return 'probe';
    }
    const base = this.baselineMs;
    let gradient = median > 0 ? (spec.tolerance * base) / median : 2;
    if (!(gradient >= 0.5)) gradient = 0.5;
    else if (gradient > 2) gradient = 2;
    // An idle client learns nothing about capacity: its limit does not grow.
    if (gradient >= 1 && !used) return null;
    const before = this.limit;
    const next = this.value * gradient + Math.sqrt(this.value) / 2;
    this.value = Math.min(spec.max, Math.max(spec.min, next));
    return this.limit !== before ? 'gradient' : null;
  }

  private startWindow(now: number): void {
    this.window.reset();
    this.windowStart = now;
    this.maxInFlight = 0;
  }
}

/** One algorithm object per dependency (not shared between dependencies). */
export function createLimitAlgorithm(spec: LimitSpec | ResolvedLimitSpec, field = 'concurrencyLimit'): LimitAlgorithm {
  const r = normalizeLimitSpec(spec, field);
  return r.kind === 'aimd' ? new Aimd(r) : new Gradient(r);
}

/** For messages: what a limit spec looks like. */
export function describeLimit(spec: ResolvedLimitSpec): string {
  return spec.kind === 'aimd'
    ? `aimd ${spec.min}-${spec.max}, ×${spec.decrease} on a drop${spec.slowMs !== null ? `, slow over ${spec.slowMs} ms` : ''}`
    : `gradient ${spec.min}-${spec.max}, tolerance ${spec.tolerance}`;
}
