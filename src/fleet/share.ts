// While Redis is away, a process spends its share of the fleet's budget, not a budget of
// its own: the arithmetic, as pure functions (no clock: times come from the callers).
//
// Joined, the fleet holds one shared bucket (in Redis) and P leases (one per process).
// When a process falls back it takes what its lease holds (out of the lease: spent once)
// into a bucket of
// maxTokens / P + leaseTokens that refills at minPerSecond / P, plus the deposits of its
// own answered calls (as the in-process budget). Across P processes that is at most one
// budget: the leases, one floor, the fleet's deposits — never P budgets. It takes nothing
// from the shared bucket: the processes' views of it are up to a sync old, and shares
// taken from stale views could add up to more than the bucket held.
// When it rejoins, what it holds goes back to its lease (what does not fit, to the shared
// bucket); and it owes the refill it got, up to its part (1/P) of what the shared bucket's floor added
// meanwhile (Redis refilled the bucket too: counted twice otherwise). The budget script
// keeps the floor's running total for that. So the bound of docs/fleet.md holds through
// any number of fallbacks.

import { isAnswer, ratioDeposit, type BudgetObservation, type RatioBudgetSpec, type RetryBudget } from '../core/budget.js';

/** What a process takes when it falls back. */
export interface ShareStart {
  /** The most the share may hold: maxTokens / P + leaseTokens. */
  readonly capacity: number;
  /** Its floor: minPerSecond / P. */
  readonly ratePerSecond: number;
  /** Its tokens at the fallback: what it took out of its lease. */
  readonly tokens: number;
  /** What it owes back at the rejoin, refill aside (0, unless it never saw the fleet: then the bucket it assumed). */
  readonly owed: number;
  /** The processes its part of the shared floor is 1/ of (null: never seen; its refill is not owed). */
  readonly processes: number | null;
}

/**
 * The share of a process that falls back. `held`: what it took out of its lease; `shared`: the
 * shared bucket as last seen (null: never seen — a fresh bucket is full); `processes`:
 * the processes last seen (null: never seen — then the process has the whole budget, as
 * relent without a fleet, from the bucket as last seen: it cannot know how many others
 * there are; it owes it back when it joins).
 */
export function shareOnFallback(spec: RatioBudgetSpec, leaseTokens: number, held: number, shared: number | null, processes: number | null): ShareStart {
  if (processes === null || !Number.isFinite(processes) || processes < 1) {
    const bucket = shared === null || !Number.isFinite(shared) ? spec.maxTokens : Math.min(spec.maxTokens, Math.max(0, shared));
    return { capacity: spec.maxTokens, ratePerSecond: spec.minPerSecond, tokens: bucket, owed: bucket, processes: null };
  }
  const lease = Number.isFinite(held) && held > 0 ? held : 0;
  return {
    capacity: spec.maxTokens / processes + leaseTokens,
    ratePerSecond: spec.minPerSecond / processes,
    tokens: lease,
    owed: 0,
    processes,
  };
}

/**
 * What a process hands back when it rejoins (positive: tokens for its lease and the
 * shared bucket; negative: a debt), refill aside: what it holds, minus what it took.
 */
export function settleShare(remaining: number, owed: number): number {
  return remaining - owed;
}

/**
 * The refill a process that ran alone owes once it has read the shared floor's running
 * total again (`floorAfter`; `floorBefore`: as it last read it before the fallback): what
 * its own floor added, up to its part of what the shared floor added meanwhile.
 */
export function refillDebt(refilled: number, floorBefore: number | null, floorAfter: number, processes: number | null): number {
  if (processes === null || floorBefore === null || !(refilled > 0)) return 0;
  const added = floorAfter - floorBefore;
  return Math.min(refilled, added > 0 && Number.isFinite(added) ? added / processes : 0);
}

/** What the floor adds to a shared bucket at a visit (takeFromSharedBucket's refill): the budget script's running total grows by it. */
export function refillOf(bucket: { readonly tokens: number; readonly at: number } | null, now: number, spec: RatioBudgetSpec): number {
  if (bucket === null || !(now > bucket.at) || !(spec.minPerSecond > 0)) return 0;
  return Math.max(0, Math.min(spec.maxTokens, bucket.tokens + ((now - bucket.at) / 1000) * spec.minPerSecond) - bucket.tokens);
}

/** A share while the process runs alone: a ratio budget that starts from `start`. */
export interface ShareBudget extends RetryBudget {
  readonly start: ShareStart;
  /** Tokens held now (without the refill since the last call). */
  held(): number;
  /** Tokens the floor added so far. */
  refilled(): number;
}

export function createShareBudget(spec: RatioBudgetSpec, start: ShareStart): ShareBudget {
  let tokens = Math.min(start.tokens, start.capacity);
  let refilled = 0;
  let last: number | null = null;
  let answerAt: number | null = null;
  const refill = (now: number): void => {
    if (last !== null && now > last && start.ratePerSecond > 0 && tokens < start.capacity) {
      const add = Math.min(start.capacity - tokens, ((now - last) / 1000) * start.ratePerSecond);
      tokens += add;
      refilled += add;
    }
    if (last === null || now > last) last = now;
  };
  return {
    spec,
    start,
    observe(o: BudgetObservation, now: number) {
      refill(now);
      if (isAnswer(o)) answerAt = now;
      tokens = Math.min(start.capacity, tokens + ratioDeposit(spec, o));
    },
    tryAcquire(_o, now) {
      refill(now);
      if (tokens < 1) return false;
      tokens -= 1;
      return 1;
    },
    available(now) {
      refill(now);
      return tokens;
    },
    lastAnswerAt: () => answerAt,
    held: () => tokens,
    refilled: () => refilled,
  };
}

/** The processes drawing on one shared budget, as the budget script keeps them (process id → expiry, shared ms). */
export interface Members {
  readonly expiry: ReadonlyMap<string, number>;
  /** Expired members are removed at the first visit at or after this time. */
  readonly pruneAt: number;
}

/**
 * One process's visit to a shared budget's members at shared time `now`: its entry lives
 * `ttlMs` more; the expired ones are removed at most twice per ttlMs. Returns the members
 * and their count (the processes the fleet last saw; may count some that left less than
 * ttlMs / 2 ago). relent/fleet's budget script runs this in Redis.
 */
export function visitMembers(m: Members | null, id: string, now: number, ttlMs: number): { readonly members: Members; readonly count: number } {
  const expiry = new Map(m?.expiry ?? []);
  let pruneAt = m?.pruneAt ?? 0;
  expiry.set(id, now + ttlMs);
  if (now >= pruneAt) {
    for (const [k, t] of expiry) if (t <= now) expiry.delete(k);
    pruneAt = now + Math.floor(ttlMs / 2);
  }
  return { members: { expiry, pruneAt }, count: expiry.size };
}
