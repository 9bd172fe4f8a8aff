import type { BreakerOptions, BreakerSpec, CircuitBreaker } from './breaker.js';
import type { RateLimitSpec, TokenBucket } from './token-bucket.js';
import { isAnswer, ratioDeposit, type BudgetSpec, type RatioBudgetSpec, type RetryBudget } from './budget.js';
import { invalidPolicy } from './errors.js';

/**
 * State shared by every process that calls one dependency: what a driver needs from a
 * fleet (relent/fleet's `createRedisFleet()` makes one). The objects it hands out are
 * ordinary `RetryBudget`s and `CircuitBreaker`s, synchronous and never waiting on the
 * network, so `decide()` and the executor use them as they use the in-process ones.
 * A driver that takes a `fleet` asks it once per dependency and keeps the object.
 */
export interface Fleet {
  /**
   * The retry budget of `dependency`, shared by the fleet (the same object for the same
   * dependency in one process). Kinds the fleet does not share come back as an
   * in-process budget.
   */
  budget(dependency: string, spec: BudgetSpec): RetryBudget;
  /** The circuit breaker of `dependency`: one state for the whole fleet. */
  breaker(dependency: string, spec?: BreakerSpec | null, options?: BreakerOptions): CircuitBreaker;
  /**
   * The rate limit of `dependency` (or of a key) shared by the fleet: this process's share
   * of `spec.ratePerSecond`, as a token bucket that answers without waiting on the
   * network (the share is renegotiated in the background). The same object for the same
   * name in one process. Optional: a fleet without it gives each process its own bucket.
   */
  rateLimit?(dependency: string, spec: RateLimitSpec): TokenBucket;
}

/**
 * A `ratio` budget's share of a fleet-wide bucket: the tokens this process holds (its
 * lease, at most `leaseTokens`), spent without asking anyone, and the deposits that did
 * not fit in the lease, waiting to be handed to the shared bucket. Deposits follow the
 * in-process budget's rule (`ratioDeposit`); time adds nothing here (the shared bucket
 * refills, on the shared clock). Pure arithmetic: the driver moves tokens between this
 * and the shared bucket (`takePending`, `wanted`, `grant`).
 *
 * A new lease starts full, on credit: its pending deposits start at −leaseTokens, a debt
 * that the first visit to the shared bucket pays (the bucket may go below zero for it),
 * so a process's first retries need not wait for a round trip.
 *
 * Invariant: held() ≤ leaseTokens, and a debt is at most leaseTokens. So across P
 * processes the fleet spends at most what one budget would allow plus P leases
 * (docs/fleet.md).
 */
export interface LeasedBudget extends RetryBudget {
  readonly leaseTokens: number;
  /** Tokens in the lease. */
  held(): number;
  /** Whole tokens the lease has room for (what to ask the shared bucket for). */
  wanted(): number;
  /** Deposits that did not fit in the lease and are not yet handed over (negative: a debt to pay). */
  pending(): number;
  /** Returns the pending deposits and forgets them (deposits are handed over at most once). */
  takePending(): number;
  /** Takes back a debt that `takePending()` returned and that could not be handed over (debts are never forgotten). */
  keepDebt(taken: number): void;
  /** Adds tokens taken from the shared bucket; what does not fit becomes pending again. */
  grant(tokens: number): void;
  /** Retries paid from the lease so far. */
  spent(): number;
}

export function createLeasedBudget(spec: RatioBudgetSpec, leaseTokens: number): LeasedBudget {
  if (typeof leaseTokens !== 'number' || !(leaseTokens >= 1) || !Number.isFinite(leaseTokens))
    throw invalidPolicy('leaseTokens', 'a finite number >= 1', leaseTokens);
  let lease = leaseTokens;
  let pending = -leaseTokens;
  let spent = 0;
  let answerAt: number | null = null;
  const add = (tokens: number): void => {
    const room = leaseTokens - lease;
    if (tokens <= room) lease += tokens;
    else {
      lease = leaseTokens;
      pending += tokens - room;
    }
  };
  return {
    spec,
    leaseTokens,
    observe(o, now) {
      if (isAnswer(o)) answerAt = now;
      const d = ratioDeposit(spec, o);
      if (d > 0) add(d);
    },
    tryAcquire() {
      if (lease < 1) return false;
      lease -= 1;
      spent++;
      return 1;
    },
    available: () => lease,
    lastAnswerAt: () => answerAt,
    held: () => lease,
    wanted: () => Math.max(0, Math.floor(leaseTokens - lease)),
    pending: () => pending,
    takePending() {
      const p = pending;
      pending = 0;
      return p;
    },
    keepDebt(taken) {
      if (taken < 0) pending += taken;
    },
    grant(tokens) {
      if (tokens > 0 && Number.isFinite(tokens)) add(tokens);
    },
    spent: () => spent,
  };
}

/** The shared bucket of a `ratio` budget as stored (tokens, and the shared clock's ms of its last refill). */
export interface SharedBucket {
  readonly tokens: number;
  readonly at: number;
}

/**
 * One visit to the shared bucket at shared time `now` (ms): refill `minPerSecond` per
 * second since the last visit (capped at maxTokens, as the in-process budget), add the
 * handed-over deposits (capped; a negative deposit is a lease's debt and may take the
 * bucket below zero), then take up to `want` whole tokens. An absent bucket starts
 * full, as an in-process budget does. This is the arithmetic relent/fleet's Lua
 * script runs atomically in Redis, on Redis's clock; it is written here so that it can
 * be tested on a test clock and against the script.
 */
export function takeFromSharedBucket(
  bucket: SharedBucket | null,
  now: number,
  spec: RatioBudgetSpec,
  deposit: number,
  want: number,
): { readonly bucket: SharedBucket; readonly granted: number } {
  let tokens = bucket === null ? spec.maxTokens : bucket.tokens;
  let at = bucket === null ? now : bucket.at;
  if (now > at) {
    if (spec.minPerSecond > 0) tokens = Math.min(spec.maxTokens, tokens + ((now - at) / 1000) * spec.minPerSecond);
    at = now;
  }
  if (deposit !== 0) tokens = Math.min(spec.maxTokens, tokens + deposit);
  const granted = Math.max(0, Math.min(Math.floor(want), Math.floor(tokens)));
  return { bucket: { tokens: tokens - granted, at }, granted };
}

/**
 * This process's fair share of a rate limit the fleet shares (calls per second): max-min
 * fair shares of `rate` over the members' demands (water-filling: the smallest demands
 * are met in full, the rest split what is left equally), and whatever is left when every
 * demand is met is split equally, so that a member whose demand grows finds room at once.
 * `demands[mine]` is this process's own. The shares add up to `rate`. What a member is
 * granted is its fair share within what the others hold (`fleetRateGrant`). This is the
 * arithmetic relent/fleet's rate script runs in Redis (Doorman, YouTube's global rate
 * limiter, hands out capacity the same way: fair shares, granted within what is free).
 */
export function fleetRateShare(demands: readonly number[], mine: number, rate: number): number {
  const n = demands.length;
  if (n === 0 || !(rate > 0)) return 0;
  const clean = (d: number | undefined): number => (d !== undefined && d > 0 && Number.isFinite(d) ? d : 0);
  const order = demands.map((d, i) => [clean(d), i] as const).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let left = rate;
  let own = 0;
  for (let k = 0; k < n; k++) {
    const [d, i] = order[k]!;
    const give = Math.min(d, left / (n - k));
    left -= give;
    if (i === mine) own = give;
  }
  return own + left / n;
}

/** A shared rate limit's state as stored (times on the shared clock, ms). */
export interface SharedRateState {
  /** Nobody's bucket refills before this (a server's wait, seen by one member). */
  readonly pausedUntil: number;
  /** The fleet's rate factor at `factorAt`, growing back linearly to 1 over recoverMs. */
  readonly factor: number;
  readonly factorAt: number;
  /** When the rate was last lowered (at most once a second). */
  readonly lastDecrease: number;
}

/**
 * One member's visit to a shared rate limit at shared time `now`: when it reports a
 * throttling answer (`waitMs` ≥ 0: the server's wait, 0 when none was said) the fleet's
 * rate is lowered by `decrease` (at most once a second, never below `minFactor`) and every
 * member pauses until the server's wait is over — the same rule as one process's bucket
 * (core/token-bucket.ts), kept once for the whole fleet. Returns the new state and the
 * factor on the configured rate now. relent/fleet's rate script runs this in Redis.
 */
export function stepSharedRate(
  state: SharedRateState | null,
  now: number,
  spec: { readonly decrease: number; readonly recoverMs: number; readonly minFactor: number },
  waitMs: number,
): { readonly state: SharedRateState; readonly factor: number } {
  let pausedUntil = state?.pausedUntil ?? 0;
  let factor = state?.factor ?? 1;
  let factorAt = state?.factorAt ?? now;
  let lastDecrease = state?.lastDecrease ?? -1e15;
  let f = factor < 1 ? Math.min(1, factor + (now - factorAt) / spec.recoverMs) : 1;
  if (waitMs >= 0) {
    if (waitMs > 0 && now + waitMs > pausedUntil) pausedUntil = now + waitMs;
    if (spec.decrease < 1 && now - lastDecrease >= 1000) {
      f = Math.max(Math.min(1, spec.minFactor), f * spec.decrease);
      factor = f;
      factorAt = now;
      lastDecrease = now;
    }
  }
  return { state: { pausedUntil, factor, factorAt, lastDecrease }, factor: f };
}

/**
 * What a member is granted: its fair share, but never more than the rate the other live
 * members do not hold (their grants until they visit again), so the grants in force never
 * add up to more than `rate` — a member whose fair share shrank keeps its old grant until
 * its next visit, and a newcomer gets the rest until then.
 */
export function fleetRateGrant(demands: readonly number[], mine: number, rate: number, othersGranted: number): number {
  const fair = fleetRateShare(demands, mine, rate);
  const free = rate - (othersGranted > 0 ? othersGranted : 0);
  return Math.max(0, Math.min(fair, free));
}
