// While Redis is away, a process spends its share of the fleet's budget, not a budget of
// its own: the arithmetic, as pure functions (no clock: times come from the callers).
//
// Joined, the fleet holds one shared bucket (in Redis) and P leases (one per process).
// When a process falls back it takes:
//   - what its lease holds, and its share of the shared bucket as it last saw it
//     (shared / P, P being the processes it last saw), as its starting tokens;
//   - a bucket of maxTokens / P + leaseTokens that refills at minPerSecond / P, and
//     the deposits of its own answered calls, as the in-process budget does.
// Across P processes that is one budget: what the fleet held, its floor, and its
// deposits, never P budgets. When it rejoins it settles: what it holds then, minus what
// it took (its lease, its share, and the refill it got — at most its share of what the
// shared bucket could have refilled meanwhile, since Redis refilled that too): more goes
// back to its lease and the shared bucket, less is a debt the shared bucket pays.
// So the bound of docs/fleet.md holds through any number of fallbacks.

import { isAnswer, ratioDeposit, type BudgetObservation, type RatioBudgetSpec, type RetryBudget } from '../core/budget.js';

/** What a process takes when it falls back. */
export interface ShareStart {
  /** The most the share may hold: maxTokens / P + leaseTokens. */
  readonly capacity: number;
  /** Its floor: minPerSecond / P. */
  readonly ratePerSecond: number;
  /** Its tokens at the fallback: its lease plus its share of the shared bucket. */
  readonly tokens: number;
  /** What it owes back at the rejoin, refill aside (= tokens). */
  readonly owed: number;
  /** The most of its refill it owes back: its share of what the shared bucket had room to refill. */
  readonly refillOwedMax: number;
}

/**
 * The share of a process that falls back. `held`: its lease's tokens; `shared`: the
 * shared bucket as last seen (null: never seen — a fresh bucket is full); `processes`:
 * the processes last seen (null: never seen — then the process has the whole budget, as
 * relent without a fleet: it cannot know how many others there are).
 */
export function shareOnFallback(spec: RatioBudgetSpec, leaseTokens: number, held: number, shared: number | null, processes: number | null): ShareStart {
  const bucket = shared === null || !Number.isFinite(shared) ? spec.maxTokens : Math.min(spec.maxTokens, Math.max(0, shared));
  if (processes === null || !Number.isFinite(processes) || processes < 1) {
    return { capacity: spec.maxTokens, ratePerSecond: spec.minPerSecond, tokens: bucket, owed: bucket, refillOwedMax: spec.maxTokens - bucket };
  }
  const p = processes;
  const lease = Number.isFinite(held) && held > 0 ? held : 0;
  const share = bucket / p;
  return {
    capacity: spec.maxTokens / p + leaseTokens,
    ratePerSecond: spec.minPerSecond / p,
    tokens: lease + share,
    owed: lease + share,
    refillOwedMax: (spec.maxTokens - bucket) / p,
  };
}

/**
 * What a process hands back when it rejoins (positive: tokens for its lease and the
 * shared bucket; negative: a debt): what it holds, minus what it took.
 */
export function settleShare(remaining: number, owed: number, refilled: number, refillOwedMax: number): number {
  return remaining - owed - Math.min(Math.max(0, refilled), Math.max(0, refillOwedMax));
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
