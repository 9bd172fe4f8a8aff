// The protections of one dependency as components (Polly v8's "a strategy is a
// component"): each is asked before an attempt (enter: granted, or refused with its
// reason; some may wait for their turn) and told how the attempt ended (exit). A guard
// holds them in the one gate order — breaker, rate limit, slot (bulkhead or adaptive
// concurrency limit) — and is made by one factory, which owns the fleet-or-local choice.
// The executor iterates the guard; no driver lists protections by hand. The retry budget
// and hedging are the core operation's own (decide() charges the budget, the machine
// decides hedges); the guard carries them for the operation.
import {
  breakerOutcome,
  createCircuitBreaker,
  type BreakerOutcome,
  type BreakerSnapshot,
  type BreakerSpec,
  type BreakerStateChange,
  type CircuitBreaker,
} from '../core/breaker.js';
import { createRetryBudget, type BudgetSpec, type RetryBudget } from '../core/budget.js';
import { limitDropped } from '../core/concurrency.js';
import { describe, RelentError, type RelentErrorCode } from '../core/errors.js';
import type { Fleet } from '../core/fleet.js';
import type { HedgeState } from '../core/hedge.js';
import type { SlotRefusal } from '../core/operation.js';
import type { Policy } from '../core/policy.js';
import { createTokenBucket, observeRateAnswer, type RateLimitSpec } from '../core/token-bucket.js';
import type { Clock, DecisionResult, Observation } from '../core/types.js';
import type { Bulkhead } from './bulkhead.js';
import type { ConcurrencyLimit } from './concurrency-limit.js';
import { createRateLimiter, type RateLimiter } from './rate-limiter.js';

/** How an attempt a protection let through ended (one object per operation, reused: read it at once). */
export interface AttemptExit {
  /** What it observed; null when it was never made (refused further on) or was cut (the caller's cancel, a hedge that lost). */
  obs: Observation | null;
  /** The attempt was cut: a limit learns nothing from it. */
  cut: boolean;
  /** The core's decision on it (null when there is none). */
  decision: DecisionResult | null;
  /** The executor's clock when it started, and now. */
  startedAt: number;
  now: number;
  /** Wall-clock ms (only read by protections that keep wall time: the breaker). */
  wallNow: number;
  /** What the protection noted when the attempt entered (the adaptive limit's generation). */
  note: number;
  policy: Policy;
  /** The driver's own breaker verdict for this operation, if it gave one (see BreakerVerdict). */
  verdict: BreakerVerdict | null;
}

/**
 * A driver's own verdict on an answer for the breaker, in place of the core's generic
 * `breakerOutcome` (an exchange counts a malformed 200 as a failure): undefined keeps the
 * core's. It may decide later (an answer may still arrive in a grace period): return
 * `'later'` and call `later(outcome, wallNow)` once, with the wall clock of that moment.
 */
export type BreakerVerdict = (
  obs: Observation,
  outcome: BreakerOutcome,
  later: (outcome: BreakerOutcome, wallNow: number) => void,
) => BreakerOutcome | 'later' | undefined;

/** One protection of a dependency. */
export interface Protection {
  /** What a refusal of this protection ends the operation with. */
  readonly refusal: SlotRefusal;
  /** The error code of its queue being full, when it has a queue (waits end with it). */
  readonly code: RelentErrorCode | null;
  /** Enter now: true (a slot or a token is held), false (refused, or its turn must be waited for). */
  tryEnter(now: number, wallNow: number): boolean;
  /** The note exit() gets back for the attempt that just entered (0 when there is nothing to note). */
  note(): number;
  /**
   * Waits for its turn (the slow path, abortable): resolves when entered, rejects with a
   * RelentError of `code` when its queue is full or the turn cannot come within
   * `remainingMs`. null: this protection never waits (tryEnter false is a refusal).
   */
  readonly wait: ((now: number, remainingMs: number, signal: AbortSignal) => Promise<void>) | null;
  /** The attempt it let through has ended (or will never be made: `e.obs` null). */
  exit(e: AttemptExit): void;
}

/** The breaker as a protection: asked before each attempt, told each outcome (a driver's verdict first). */
export function breakerProtection(b: CircuitBreaker): Protection {
  return {
    refusal: 'circuit_open',
    code: null,
    tryEnter: (_now, wallNow) => b.tryPass(wallNow),
    note: () => 0,
    wait: null,
    exit(e) {
      if (e.obs === null) return b.record('ignored', e.wallNow); // not made: a half-open trial goes back
      const outcome = breakerOutcome(e.obs);
      if (e.verdict === null) return b.record(outcome, e.wallNow);
      const v = e.verdict(e.obs, outcome, (later, wallNow) => b.record(later, wallNow));
      if (v !== 'later') b.record(v ?? outcome, e.wallNow);
    },
  };
}

/** The rate limit as a protection: a token before each attempt (waited for in line); throttling answers lower it. */
export function rateProtection(r: RateLimiter): Protection {
  return {
    refusal: 'rate_limited',
    code: 'ERR_RATE_LIMITED',
    tryEnter: (now) => r.tryAcquire(now),
    note: () => 0,
    wait: (now, remainingMs, signal) => r.acquire(now, remainingMs, signal),
    exit(e) {
      const status = e.obs?.status;
      if (status !== undefined && status !== null)
        observeRateAnswer(r.bucket, e.now, status, e.obs!.headers, e.decision?.retryAfterMs ?? null, e.policy.throttleStatuses);
    },
  };
}

/** A fixed bulkhead as a protection: a slot per attempt, waited for in its queue. */
export function bulkheadProtection(b: Bulkhead): Protection {
  return {
    refusal: 'bulkhead_full',
    code: 'ERR_BULKHEAD_FULL',
    tryEnter: () => b.tryAcquire(),
    note: () => 0,
    wait: (_now, _remainingMs, signal) => b.acquire(signal),
    exit: () => b.release(),
  };
}

/**
 * The adaptive concurrency limit as a protection: a slot per attempt; the limit learns
 * from how each ended (`dropped`: the core's limitDropped, or the driver's own rule).
 */
export function limitProtection(l: ConcurrencyLimit, dropped: ((obs: Observation) => boolean) | null = null): Protection {
  return {
    refusal: 'concurrency_limited',
    code: 'ERR_CONCURRENCY_LIMITED',
    tryEnter: () => l.tryAcquire(),
    note: () => l.generation,
    wait: (_now, _remainingMs, signal) => l.acquire(signal),
    exit(e) {
      const obs = e.obs;
      if (obs === null || e.cut) return l.release(null);
      const d = dropped !== null ? dropped(obs) : limitDropped(e.policy.throttleStatuses, obs.status ?? null, obs.errorClass ?? null);
      l.release({ startedAt: e.startedAt, now: e.now, generation: e.note, dropped: d });
    },
  };
}

/** The protections of one dependency, in the gate order, with its budget and hedging state. */
export class Guard {
  /** breaker → rate limit → slot: the one gate order. */
  readonly protections: readonly Protection[];
  /** Whether a protection keeps wall time (the executor reads the wall clock for it). */
  readonly wall: boolean;

  constructor(
    readonly budget: RetryBudget | null,
    readonly breaker: CircuitBreaker | null,
    readonly rateLimiter: RateLimiter | null,
    readonly bulkhead: Bulkhead | null,
    readonly concurrencyLimit: ConcurrencyLimit | null,
    /** The driver's own rule of what the concurrency limit hears as overload (null: the core's limitDropped). */
    dropped: ((obs: Observation) => boolean) | null = null,
  ) {
    if (bulkhead !== null && concurrencyLimit !== null) {
      throw new RelentError('ERR_INVALID_INPUT', 'Expected one of `bulkhead` and `concurrencyLimit` (an adaptive limit replaces the fixed bulkhead)', {
        field: 'concurrencyLimit',
      });
    }
    const ps: Protection[] = [];
    if (breaker !== null) ps.push(breakerProtection(breaker));
    if (rateLimiter !== null) ps.push(rateProtection(rateLimiter));
    if (bulkhead !== null) ps.push(bulkheadProtection(bulkhead));
    if (concurrencyLimit !== null) ps.push(limitProtection(concurrencyLimit, dropped));
    this.protections = ps;
    this.wall = breaker !== null;
  }

  /** Nothing guards the dependency: a call may take the success path. */
  get open(): boolean {
    return this.protections.length === 0;
  }

  /**
   * Admission before an operation starts, for a driver that skips a dependency rather
   * than start an operation it would refuse (an exchange's fan-out): enters every
   * protection now, without waiting, or hands back what it took and says which refused.
   * An admitted operation is run with `admitted: true` (its first attempt does not enter again).
   */
  admit(now: number, wallNow: number): SlotRefusal | null {
    const ps = this.protections;
    for (let i = 0; i < ps.length; i++) {
      if (ps[i]!.tryEnter(now, wallNow)) continue;
      for (let j = i - 1; j >= 0; j--) ps[j]!.exit(notMade(now, wallNow));
      return ps[i]!.refusal;
    }
    return null;
  }
}

/** The exit of an attempt that was never made. */
function notMade(now: number, wallNow: number): AttemptExit {
  return { obs: null, cut: false, decision: null, startedAt: now, now, wallNow, note: 0, policy: null as unknown as Policy, verdict: null };
}

/** What a guard is made of: objects to share, or specs to make them from (with a fleet, shared by the fleet). */
export interface GuardOptions {
  /** The dependency's name (required with a fleet: the key of its shared state). */
  readonly dependency?: string | null;
  readonly fleet?: Fleet | null;
  /** A budget, a spec (the fleet's budget of the dependency with a fleet), or null for none. */
  readonly budget?: RetryBudget | BudgetSpec | null;
  /** A breaker, a spec (or true: the defaults; with a fleet, the fleet's breaker), or null for none. */
  readonly breaker?: CircuitBreaker | BreakerSpec | true | null;
  /** The name of a breaker made here (its state changes carry it). Default: the dependency's name. */
  readonly breakerName?: string | null;
  /** For a breaker made here: its snapshot to start from (local only) and its state changes. */
  readonly breakerState?: BreakerSnapshot | null;
  readonly onBreakerStateChange?: ((change: BreakerStateChange) => void) | null;
  /** A rate limiter, or a spec (with a fleet, this process's share of the fleet's rate). */
  readonly rateLimit?: RateLimiter | RateLimitSpec | null;
  readonly bulkhead?: Bulkhead | null;
  readonly concurrencyLimit?: ConcurrencyLimit | null;
  /** The driver's own rule of what the concurrency limit hears as overload. */
  readonly dropped?: ((obs: Observation) => boolean) | null;
  /** The clock a rate limiter made here waits on. */
  readonly clock: Clock;
}

/** The dependency's name, required with a fleet (its shared state is kept by name). */
export function dependencyOf(o: Pick<GuardOptions, 'dependency'>): string {
  if (typeof o.dependency !== 'string' || o.dependency.length === 0) {
    throw new RelentError('ERR_INVALID_INPUT', 'Expected `dependency` (the name of what is called, e.g. "payments") with `fleet`', { field: 'dependency' });
  }
  return o.dependency;
}

/**
 * The one factory of a dependency's guard: the fleet-or-local choice is made here — a
 * spec with a fleet takes the fleet's shared state of the dependency, without one a
 * state of this process; an object passed in is used as it is.
 */
export function createGuard(o: GuardOptions): Guard {
  const fleet = o.fleet ?? null;
  if (fleet !== null && (typeof fleet !== 'object' || typeof fleet.budget !== 'function' || typeof fleet.breaker !== 'function')) {
    throw new RelentError('ERR_INVALID_INPUT', 'Expected `fleet` to be a fleet (relent/fleet createRedisFleet())', { field: 'fleet' });
  }
  const b = o.budget ?? null;
  const budget = b === null ? null : isBudget(b) ? b : fleet !== null ? fleet.budget(dependencyOf(o), b) : createRetryBudget(b);
  const br = o.breaker ?? null;
  let breaker: CircuitBreaker | null = null;
  if (br !== null) {
    if (typeof (br as CircuitBreaker).tryPass === 'function') breaker = br as CircuitBreaker;
    else {
      const spec = br === true ? null : (br as BreakerSpec);
      const name = o.breakerName ?? (typeof o.dependency === 'string' && o.dependency.length > 0 ? o.dependency : null);
      breaker =
        fleet !== null
          ? fleet.breaker(dependencyOf(o), spec, { name, onStateChange: o.onBreakerStateChange ?? null })
          : createCircuitBreaker(spec ?? {}, { name, initialState: o.breakerState ?? null, onStateChange: o.onBreakerStateChange ?? null });
    }
  }
  const r = o.rateLimit ?? null;
  let rate: RateLimiter | null = null;
  if (r !== null) {
    if (typeof (r as RateLimiter).tryAcquire === 'function') rate = r as RateLimiter;
    else {
      const spec = r as RateLimitSpec;
      // With a fleet the dependency's rate is shared (this process's share); without one, this process's own bucket.
      const bucket = fleet !== null && typeof fleet.rateLimit === 'function' ? fleet.rateLimit(dependencyOf(o), spec) : createTokenBucket(spec);
      rate = createRateLimiter(bucket, o.clock);
    }
  }
  checkShared('bulkhead', o.bulkhead, 'createBulkhead');
  checkShared('concurrencyLimit', o.concurrencyLimit, 'createConcurrencyLimit');
  checkShared('rateLimiter', rate, 'createRateLimiter');
  return new Guard(budget, breaker, rate, o.bulkhead ?? null, o.concurrencyLimit ?? null, o.dropped ?? null);
}

function isBudget(b: RetryBudget | BudgetSpec): b is RetryBudget {
  return typeof (b as RetryBudget).tryAcquire === 'function';
}

/**
 * The limits are objects made once per dependency and shared (createBulkhead,
 * createConcurrencyLimit, createRateLimiter); their options given instead would fail at
 * the first call with a TypeError: refused at once, naming the field.
 */
export function checkShared(field: string, v: unknown, maker: string): void {
  if (v === undefined || v === null) return;
  const x = v as { tryAcquire?: unknown; acquire?: unknown; release?: unknown };
  if (typeof x.tryAcquire !== 'function' || typeof x.acquire !== 'function' || (field !== 'rateLimiter' && typeof x.release !== 'function')) {
    throw new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be made by ${maker}() (shared per dependency), got ${describe(v)}`, { field });
  }
}

/** A hedging state kept with the guard's dependency (made when a policy that hedges first calls it). */
export type HedgingSlot = { hedging: HedgeState | null };
