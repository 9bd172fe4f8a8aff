import { invalidPolicy } from './errors.js';
import { MAX_TIMER_MS, type Observation } from './types.js';

/**
 * A circuit breaker per dependency, as a pure state machine: it reads no clock
 * and arms no timer. Every call takes `now` (ms, any time base that all calls of one
 * breaker share), and the move from open to half-open happens when a call sees that
 * `openMs` has passed, so it works in a serverless function that sleeps between
 * invocations (cockatiel #111, opossum #719).
 *
 * closed ──(failure ratio ≥ failureRatio over windowMs, at least minimumThroughput calls)──▶ open
 * open ──(openMs passed)──▶ half_open: at most `halfOpenTrials` trial calls at a time
 * half_open ──(successThreshold trial successes)──▶ closed (window cleared)
 * half_open ──(a trial failure)──▶ open (for another openMs)
 *
 * Time base: the executor passes the wall clock (`clock.wallNow()`), so that a snapshot
 * (`toJSON()`) still means something after a restart or on another host. A clock that
 * jumps never keeps the circuit open longer than `openMs` past the jump: an open period
 * ends when |now − openedAt| ≥ openMs.
 */

export type BreakerState = 'closed' | 'open' | 'half_open';

/** What one call tells the breaker; `ignored` (e.g. the caller cancelled) counts for nothing. */
export type BreakerOutcome = 'success' | 'failure' | 'ignored';

/** Why the breaker changed state (a closed set). */
export type BreakerTransitionReason =
  | 'failure_ratio' // closed → open: too many failures in the window
  | 'open_elapsed' // open → half_open: openMs passed
  | 'trial_failure' // half_open → open
  | 'trial_success'; // half_open → closed: successThreshold trials succeeded

/** The options of a breaker; every field is optional (see BREAKER_DEFAULTS). */
export interface BreakerSpec {
  /** Open when failures / calls in the window reach this share, in (0, 1]. */
  readonly failureRatio?: number;
  /** Calls (successes + failures) the window must hold before the ratio counts. */
  readonly minimumThroughput?: number;
  /** The sliding window over which the ratio is measured, ms. */
  readonly windowMs?: number;
  /** The window is kept as this many buckets (memory is O(buckets)); it slides one bucket at a time. */
  readonly buckets?: number;
  /** How long the circuit stays open before trial calls are let through, ms. */
  readonly openMs?: number;
  /** Trial calls admitted at the same time while half-open. */
  readonly halfOpenTrials?: number;
  /** Trial successes needed to close again. */
  readonly successThreshold?: number;
}

export type ResolvedBreakerSpec = { readonly [K in keyof BreakerSpec]-?: number };

/** relent's breaker defaults, written once. */
export const BREAKER_DEFAULTS: ResolvedBreakerSpec = Object.freeze({
  failureRatio: 0.5,
  minimumThroughput: 10,
  windowMs: 30_000,
  buckets: 10,
  openMs: 5_000,
  halfOpenTrials: 1,
  successThreshold: 1,
});

/** One state change, handed to `onStateChange`. */
export interface BreakerStateChange {
  /** The breaker's name (e.g. the dependency's origin), null when unnamed. */
  readonly name: string | null;
  readonly from: BreakerState;
  readonly to: BreakerState;
  /** `now` of the call that saw the change. */
  readonly at: number;
  readonly reason: BreakerTransitionReason;
}

/** The JSON form of a breaker's state (`toJSON()`), for `initialState`. Plain data. */
export interface BreakerSnapshot {
  readonly version: 1;
  /** The state as of the last call (an open circuit whose openMs has passed is still `open` here). */
  readonly state: BreakerState;
  /** When the circuit last opened (same time base as `now`); null while closed. */
  readonly openedAt: number | null;
  /** Trial successes counted so far (half-open). Trials in flight are not kept. */
  readonly trialSuccesses: number;
  /** Bucket width the window was kept with; buckets of another width are dropped on hydrate. */
  readonly bucketMs: number;
  /** Non-empty buckets: [bucket number = floor(now / bucketMs), successes, failures]. */
  readonly buckets: ReadonlyArray<readonly [number, number, number]>;
}

export interface BreakerOptions {
  /** Names the breaker in state-change events (e.g. `https://api.example.com`). */
  readonly name?: string | null;
  /** A snapshot from `toJSON()` to start from (after a restart or a cold start). */
  readonly initialState?: BreakerSnapshot | null;
  /** Called after every state change (the new state is already in effect). */
  readonly onStateChange?: ((change: BreakerStateChange) => void) | null;
}

export interface CircuitBreaker {
  readonly name: string | null;
  readonly spec: ResolvedBreakerSpec;
  /**
   * Asks to make one call at `now`. false → fail fast, make no call. true → make the
   * call and `record()` its outcome (also `ignored` when it never ran), since while
   * half-open a true admits one of the limited trial calls.
   */
  tryPass(now: number): boolean;
  /** Reports one call's outcome at `now`. */
  record(outcome: BreakerOutcome, now: number): void;
  /** The state at `now` (moves open → half_open when openMs has passed). */
  state(now: number): BreakerState;
  /** Successes and failures in the window at `now` (read-only; for dashboards and tests). */
  window(now: number): { readonly successes: number; readonly failures: number };
  /** The state as plain JSON (for `initialState`). */
  toJSON(): BreakerSnapshot;
}

const SPEC_KEYS = Object.keys(BREAKER_DEFAULTS) as (keyof BreakerSpec)[];

/** Validates a breaker spec and fills the defaults; errors name the field. */
export function normalizeBreakerSpec(input: BreakerSpec | undefined | null = {}, field = 'breaker'): ResolvedBreakerSpec {
  const raw = (input ?? {}) as Record<string, unknown>;
  if (typeof raw !== 'object' || Array.isArray(raw)) throw invalidPolicy(field, 'an object', input);
  for (const k of Object.keys(raw)) {
    if (!(SPEC_KEYS as string[]).includes(k)) throw invalidPolicy(`${field}.${k}`, `absent (a breaker takes ${SPEC_KEYS.join(', ')})`, raw[k]);
  }
  const d = BREAKER_DEFAULTS;
  const num = (key: keyof BreakerSpec, min: number, max: number, integer: boolean, minOpen = false): number => {
    const v = raw[key] === undefined ? d[key] : raw[key];
    const ok = typeof v === 'number' && Number.isFinite(v) && (minOpen ? v > min : v >= min) && v <= max && (!integer || Number.isInteger(v));
    if (!ok) {
      const range = `${minOpen ? '(' : '['}${min}, ${max}]`;
      throw invalidPolicy(`${field}.${key}`, integer ? `an integer in ${range}` : `a finite number in ${range}`, v);
    }
    return v;
  };
  const spec = {
    failureRatio: num('failureRatio', 0, 1, false, true),
    minimumThroughput: num('minimumThroughput', 1, 1e9, true),
    windowMs: num('windowMs', 1, MAX_TIMER_MS, false),
    buckets: num('buckets', 1, 1000, true),
    openMs: num('openMs', 1, MAX_TIMER_MS, false),
    halfOpenTrials: num('halfOpenTrials', 1, 1e6, true),
    successThreshold: num('successThreshold', 1, 1e6, true),
  };
  return Object.freeze(spec);
}

/**
 * What a breaker learns from one observation: the caller's own abort is `ignored`; an
 * error class (no response) is a `failure`; 5xx, 429 and 408 are failures; every other
 * status (2xx, 3xx, 4xx, a no-bid) is a `success` — the dependency answered.
 */
export function breakerOutcome(obs: Observation): BreakerOutcome {
  const s = obs.status;
  if (s !== undefined && s !== null) return (s >= 500 && s < 600) || s === 429 || s === 408 ? 'failure' : 'success';
  const e = obs.errorClass;
  if (e === undefined || e === null || e === 'aborted') return 'ignored';
  return 'failure';
}

/**
 * The closed → open rule: the window holds at least `minimumThroughput` calls and the
 * failures' share reaches `failureRatio`. (relent/fleet's Lua script applies the same
 * rule to the fleet's window.)
 */
export function windowTrips(spec: ResolvedBreakerSpec, successes: number, failures: number): boolean {
  const calls = successes + failures;
  return calls >= spec.minimumThroughput && failures / calls >= spec.failureRatio;
}

/** Creates a breaker (closed, or in the state of `opts.initialState`). Validates at construction. */
export function createCircuitBreaker(spec?: BreakerSpec | null, opts: BreakerOptions = {}): CircuitBreaker {
  const resolved = normalizeBreakerSpec(spec);
  const name = opts.name ?? null;
  if (name !== null && typeof name !== 'string') throw invalidPolicy('name', 'a string or null', name);
  const listener = opts.onStateChange ?? null;
  if (listener !== null && typeof listener !== 'function') throw invalidPolicy('onStateChange', 'a function', listener);
  const b = new Breaker(resolved, name, listener);
  if (opts.initialState !== undefined && opts.initialState !== null) b.hydrate(opts.initialState);
  return b;
}

class Breaker implements CircuitBreaker {
  readonly name: string | null;
  readonly spec: ResolvedBreakerSpec;
  private st: BreakerState = 'closed';
  private openedAt = 0;
  /** Trial calls admitted and not yet reported (half-open). */
  private trials = 0;
  private trialSuccesses = 0;
  /** When the latest trial was admitted: trials unreported for openMs are presumed lost. */
  private lastTrialAt = 0;
  /** The last finite `now` seen, used in place of a non-finite one. */
  private lastNow = 0;
  private readonly bucketMs: number;
  private readonly n: number;
  private readonly epochs: Float64Array;
  private readonly successes: Float64Array;
  private readonly failures: Float64Array;
  private readonly listener: ((change: BreakerStateChange) => void) | null;

  constructor(spec: ResolvedBreakerSpec, name: string | null, listener: ((change: BreakerStateChange) => void) | null) {
    this.spec = spec;
    this.name = name;
    this.listener = listener;
    this.n = spec.buckets;
    this.bucketMs = spec.windowMs / spec.buckets;
    this.epochs = new Float64Array(this.n).fill(NaN);
    this.successes = new Float64Array(this.n);
    this.failures = new Float64Array(this.n);
  }

  tryPass(now: number): boolean {
    if (this.st === 'closed') return true;
    const t = this.time(now);
    if (this.st === 'open') {
      if (!this.openElapsed(t)) return false;
      this.transition('half_open', t, 'open_elapsed');
    }
    if (this.trials >= this.spec.halfOpenTrials) {
      // Every admitted trial is still out. Presume them lost once the newest is openMs old
      // (Polly admits one probe per break duration in the same way), so a trial that never
      // reports cannot wedge the breaker half-open.
      const since = t - this.lastTrialAt;
      if (since < this.spec.openMs && since > -this.spec.openMs) return false;
      this.trials = 0;
    }
    this.trials++;
    this.lastTrialAt = t;
    return true;
  }

  record(outcome: BreakerOutcome, now: number): void {
    if (outcome !== 'success' && outcome !== 'failure') {
      // ignored (or anything unknown): a half-open trial slot is handed back, nothing counts.
      if (this.st === 'half_open' && this.trials > 0) this.trials--;
      return;
    }
    const t = this.time(now);
    switch (this.st) {
      case 'closed':
        this.add(outcome, t);
        if (outcome === 'failure') this.evaluate(t);
        return;
      case 'open':
        // The late result of a call admitted before the circuit opened: it changes nothing.
        return;
      case 'half_open':
        if (this.trials > 0) this.trials--;
        if (outcome === 'failure') this.open(t, 'trial_failure');
        else if (++this.trialSuccesses >= this.spec.successThreshold) this.close(t);
        return;
    }
  }

  state(now: number): BreakerState {
    if (this.st === 'open') {
      const t = this.time(now);
      if (this.openElapsed(t)) this.transition('half_open', t, 'open_elapsed');
    }
    return this.st;
  }

  window(now: number): { readonly successes: number; readonly failures: number } {
    const cur = Math.floor(this.time(now) / this.bucketMs);
    let s = 0;
    let f = 0;
    for (let i = 0; i < this.n; i++) {
      const e = this.epochs[i]!;
      if (e > cur - this.n && e <= cur) {
        s += this.successes[i]!;
        f += this.failures[i]!;
      }
    }
    return { successes: s, failures: f };
  }

  toJSON(): BreakerSnapshot {
    const buckets: [number, number, number][] = [];
    for (let i = 0; i < this.n; i++) {
      const e = this.epochs[i]!;
      if (e === e && this.successes[i]! + this.failures[i]! > 0) buckets.push([e, this.successes[i]!, this.failures[i]!]);
    }
    buckets.sort((a, b) => a[0] - b[0]);
    return {
      version: 1,
      state: this.st,
      openedAt: this.st === 'closed' ? null : this.openedAt,
      trialSuccesses: this.st === 'half_open' ? this.trialSuccesses : 0,
      bucketMs: this.bucketMs,
      buckets,
    };
  }

  /** Loads a snapshot (validated; errors name the field under `initialState`). */
  hydrate(snap: BreakerSnapshot): void {
    const f = 'initialState';
    if (typeof snap !== 'object' || snap === null || Array.isArray(snap)) throw invalidPolicy(f, 'a snapshot from toJSON()', snap);
    if (snap.version !== 1) throw invalidPolicy(`${f}.version`, '1', snap.version);
    const st = snap.state;
    if (st !== 'closed' && st !== 'open' && st !== 'half_open') throw invalidPolicy(`${f}.state`, '"closed", "open" or "half_open"', st);
    if (st !== 'closed' && (typeof snap.openedAt !== 'number' || !Number.isFinite(snap.openedAt))) {
      throw invalidPolicy(`${f}.openedAt`, 'a finite number when the state is not closed', snap.openedAt);
    }
    const ts = snap.trialSuccesses ?? 0;
    if (typeof ts !== 'number' || !Number.isInteger(ts) || ts < 0) throw invalidPolicy(`${f}.trialSuccesses`, 'an integer >= 0', ts);
    const buckets = snap.buckets ?? [];
    if (!Array.isArray(buckets)) throw invalidPolicy(`${f}.buckets`, 'an array of [bucket, successes, failures]', buckets);
    buckets.forEach((b: unknown, i: number) => {
      const ok = Array.isArray(b) && b.length === 3 && b.every((x) => typeof x === 'number' && Number.isFinite(x)) && b[1] >= 0 && b[2] >= 0;
      if (!ok) throw invalidPolicy(`${f}.buckets[${i}]`, 'a [bucket, successes, failures] triple of finite numbers', b);
    });
    this.st = st;
    this.openedAt = st === 'closed' ? 0 : snap.openedAt!;
    this.trialSuccesses = st === 'half_open' ? ts : 0;
    this.trials = 0; // trials in flight died with the process that admitted them
    if (snap.bucketMs === this.bucketMs) {
      // A window kept with another bucket width cannot be mapped: it is dropped (the state is kept).
      for (const [e, s, fl] of buckets) {
        const slot = this.slot(e);
        if (this.epochs[slot] === e) {
          this.successes[slot]! += s;
          this.failures[slot]! += fl;
        } else if (!(this.epochs[slot]! > e)) {
          this.epochs[slot] = e;
          this.successes[slot] = s;
          this.failures[slot] = fl;
        }
      }
    }
    if (st !== 'closed') this.lastNow = this.openedAt;
  }

  private time(now: number): number {
    if (typeof now === 'number' && Number.isFinite(now)) {
      this.lastNow = now;
      return now;
    }
    return this.lastNow;
  }

  private openElapsed(t: number): boolean {
    const d = t - this.openedAt;
    return d >= this.spec.openMs || d <= -this.spec.openMs;
  }

  private slot(epoch: number): number {
    const r = epoch % this.n;
    return r < 0 ? r + this.n : r;
  }

  private add(outcome: 'success' | 'failure', t: number): void {
    const e = Math.floor(t / this.bucketMs);
    const i = this.slot(e);
    if (this.epochs[i] !== e) {
      this.epochs[i] = e;
      this.successes[i] = 0;
      this.failures[i] = 0;
    }
    if (outcome === 'success') this.successes[i]!++;
    else this.failures[i]!++;
  }

  private evaluate(t: number): void {
    const { successes, failures } = this.window(t);
    if (windowTrips(this.spec, successes, failures)) this.open(t, 'failure_ratio');
  }

  private open(t: number, reason: BreakerTransitionReason): void {
    this.openedAt = t;
    this.transition('open', t, reason);
  }

  private close(t: number): void {
    this.epochs.fill(NaN);
    this.successes.fill(0);
    this.failures.fill(0);
    this.transition('closed', t, 'trial_success');
  }

  private transition(to: BreakerState, at: number, reason: BreakerTransitionReason): void {
    const from = this.st;
    this.st = to;
    this.trials = 0;
    this.trialSuccesses = 0;
    // The new state is in effect before anyone hears of it; a listener that throws
    // cannot leave the breaker half-changed (its error reaches the caller).
    if (this.listener !== null) this.listener({ name: this.name, from, to, at, reason });
  }
}
