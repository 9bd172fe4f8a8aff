import type { Decision, DecisionWhy, ErrorClass } from '../core/types.js';

/**
 * The store contract: what the worker, the queue and the CLI need from a database.
 * Two implementations keep it, SQLite (embedded default) and PostgreSQL (many workers),
 * and one test suite (test/delivery/store-contract.test.ts) runs against both.
 *
 * Time is always passed in (`now`, epoch ms from the caller's clock), never read by a
 * store: the contract is driven by the test clock, and every worker of a fleet agrees
 * on what "due" means as far as their clocks agree (keep them NTP-synced; the lease
 * is far longer than any sane skew).
 */

/** A batch's lifecycle. `queued` covers waiting, deferred and in flight (a live lease). */
export type BatchState = 'queued' | 'delivered' | 'dropped';

/** What `queue ls --state` filters on (derived from state, lease and not_before). */
export type ListState = BatchState | 'ready' | 'inflight' | 'deferred';

export interface NewItem {
  readonly destination: string;
  /** Unique per destination while the item is retained: enqueueing a known key is a no-op. */
  readonly key: string;
  /** The payload as JSON text (validated by the queue). */
  readonly payload: string;
}

export interface EnqueueResult {
  readonly id: number;
  readonly key: string;
  /** True when an item with this key was already queued (nothing new was stored). */
  readonly duplicate: boolean;
}

/** Aggregation limits: a batch is sealed at maxItems or maxBytes, or when its oldest item is maxAgeMs old. */
export interface BatchLimits {
  readonly maxItems: number;
  readonly maxBytes: number;
  readonly maxAgeMs: number;
}

export interface FormResult {
  readonly formed: number;
  /** When pending items of the destination must be looked at again; null: none waits. */
  readonly nextAt: number | null;
}

/** What `formAndClaim` sealed and leased, and when pending items must be looked at again. */
export interface FormAndClaimResult {
  readonly claimed: ClaimedBatch[];
  /** As `FormResult.nextAt`. */
  readonly nextAt: number | null;
}

/** What `claimThenForm` did: the due batches it leased first, then the batches it sealed and leased. */
export interface ClaimThenFormResult extends FormAndClaimResult {
  /** How many of `claimed` (the first ones) were due batches. */
  readonly due: number;
  /** Whether it looked for items to seal (false: the due batches filled `want`; `nextAt` is then null and means nothing). */
  readonly formed: boolean;
}

/** A claimed lease: the fencing token must match on every later write. */
export interface Lease {
  readonly id: number;
  readonly token: number;
}

export interface BatchItem {
  readonly key: string;
  readonly payload: string;
}

/** A batch handed to a worker by `claim`, with what the core needs to resume its operation. */
export interface ClaimedBatch extends Lease {
  readonly destination: string;
  /** The batch's idempotency key: the same on every attempt, sent as `Idempotency-Key`. */
  readonly key: string;
  /** 1 + the number of requeues. */
  readonly round: number;
  /** Attempts made in this round (the core's OperationState.attempt). */
  readonly attempt: number;
  readonly opStartedAt: number | null;
  readonly opDeadlineAt: number | null;
  readonly prevDelayMs: number | null;
  /** Throttled attempts of this round that did not count against maxAttempts (the core's OperationState.throttled). */
  readonly opThrottled: number;
  readonly createdAt: number;
  readonly notBefore: number;
  readonly bytes: number;
  readonly items: readonly BatchItem[];
}

/** One attempt as kept in a batch's history. */
export interface AttemptRecord {
  readonly round: number;
  readonly attempt: number;
  /** Epoch ms when the attempt ended. */
  readonly at: number;
  readonly status: number | null;
  readonly errorClass: ErrorClass | null;
  readonly elapsedMs: number;
  readonly decision: Decision;
  readonly why: DecisionWhy | null;
  /** The wait chosen by the core (retry), ms. */
  readonly delayMs: number | null;
  /** What the server asked for (Retry-After or a RateLimit field), ms. */
  readonly retryAfterMs: number | null;
  /** The worker that made the attempt. */
  readonly worker: string | null;
}

/** The core's decision for a claimed batch, written only if the lease still holds. */
export interface Outcome extends Lease {
  readonly state: BatchState;
  /** For `queued`: when the next attempt may start (now + the core's delayMs). */
  readonly notBefore: number;
  readonly attempt: number;
  readonly opStartedAt: number | null;
  readonly opDeadlineAt: number | null;
  readonly prevDelayMs: number | null;
  /** The core's OperationState.throttled after this attempt (0 when the policy counts every 429). */
  readonly opThrottled: number;
  readonly lastStatus: number | null;
  readonly lastErrorClass: ErrorClass | null;
  readonly lastDecision: Decision;
  readonly lastWhy: DecisionWhy | null;
  readonly finishedAt: number | null;
  /** The attempt's history row; null when no call was made (the deadline had passed). */
  readonly record: AttemptRecord | null;
}

export interface CompleteResult {
  /** Outcomes written. */
  readonly applied: readonly number[];
  /** Outcomes refused by the fence: the lease had expired and the batch was claimed again (or requeued). */
  readonly lost: readonly number[];
}

export interface BatchSummary {
  readonly id: number;
  readonly destination: string;
  readonly key: string;
  readonly state: BatchState;
  readonly items: number;
  readonly bytes: number;
  readonly createdAt: number;
  readonly notBefore: number;
  readonly round: number;
  readonly attempt: number;
  /** Times the batch was claimed (claims > attempts reveals a lease lost mid-delivery). */
  readonly claims: number;
  readonly leaseOwner: string | null;
  readonly leaseUntil: number;
  readonly lastStatus: number | null;
  readonly lastErrorClass: ErrorClass | null;
  readonly lastDecision: Decision | null;
  readonly lastWhy: DecisionWhy | null;
  readonly finishedAt: number | null;
}

export interface StoredItem {
  readonly id: number;
  readonly key: string;
  readonly payload: string;
  readonly enqueuedAt: number;
}

export interface BatchDetail extends BatchSummary {
  readonly itemList: readonly StoredItem[];
  /** Every attempt of every round, oldest first. */
  readonly attempts: readonly AttemptRecord[];
}

export interface ListFilter {
  readonly state?: ListState;
  readonly destination?: string;
  /** Dropped batches whose last decision is this (max_attempts, not_retryable, …). */
  readonly reason?: string;
  readonly limit?: number;
  /** Only ids greater than this (paging). */
  readonly afterId?: number;
}

export interface RequeueFilter {
  readonly ids?: readonly number[];
  readonly destination?: string;
  readonly reason?: string;
  /** At most this many batches (oldest first); default 1000. */
  readonly limit?: number;
}

export interface DestinationStats {
  readonly destination: string;
  /** Items enqueued and not yet aggregated into a batch. */
  readonly pendingItems: number;
  /** Batches due now and not leased. */
  readonly readyBatches: number;
  readonly readyItems: number;
  readonly inflightBatches: number;
  readonly inflightItems: number;
  /** Batches waiting for a retry (not_before in the future after at least one attempt). */
  readonly deferredBatches: number;
  readonly deferredItems: number;
  readonly deliveredBatches: number;
  readonly deliveredItems: number;
  readonly droppedBatches: number;
  readonly droppedItems: number;
  /** Paused by `queue pause` (workers claim nothing for it until `resume`). */
  readonly paused: boolean;
  /** When the oldest item not yet delivered or dropped was enqueued (epoch ms); null: none waits. */
  readonly oldestEnqueuedAt: number | null;
}

export interface DropStat {
  readonly destination: string;
  readonly reason: string;
  readonly why: string | null;
  readonly lastStatus: number | null;
  readonly lastErrorClass: string | null;
  readonly batches: number;
  readonly items: number;
}

/** Limits a claim honours together with every other worker of the destination (kept in the store). */
export interface SharedLimits {
  /** At most `requests` claims in any window of `perMs` (each claimed batch is one request), across workers. */
  readonly rate: { readonly requests: number; readonly perMs: number } | null;
  /** At most this many live leases of the destination across workers (requests in flight). */
  readonly concurrency: number | null;
}

export interface LimitedClaim {
  readonly claimed: ClaimedBatch[];
  /** When the shared rate limit allows the next claim (null: it did not stop this one). */
  readonly retryAt: number | null;
  /**
   * Under a shared rate limit, the claimed requests' entry in the window: it counts until
   * `endPermit` says when the last of them was answered (at the latest now + leaseMs), so
   * the window runs from when the destination last saw them, not from the claim. null:
   * no rate limit, or nothing claimed.
   */
  readonly permit: number | null;
}

/** What `purge` deletes: delivered or dropped batches, with their items and attempt history. */
export type FinishedState = 'delivered' | 'dropped';

export interface DeliveryStore {
  readonly kind: 'sqlite' | 'postgres';
  /** Where the store is, for messages (never a password). */
  readonly description: string;
  /** Creates the tables if needed (idempotent). */
  init(): Promise<void>;
  /** Stores items (one transaction: all or none). Known keys come back with `duplicate: true`. */
  enqueue(items: readonly NewItem[], now: number): Promise<EnqueueResult[]>;
  /**
   * Seals due batches of a destination's pending items (at most `maxBatches`): how many,
   * and when to look again (see `CutResult.nextAt`: null when no item is left waiting).
   */
  formBatches(destination: string, limits: BatchLimits, now: number, maxBatches: number): Promise<FormResult>;
  /**
   * Optional: seals batches like `formBatches` (at most `maxBatches`, none while the
   * destination is paused) and leases them to `owner` in the same transaction, so a new
   * batch is written once instead of sealed and then claimed. A worker calls it after a
   * `claim` that found fewer due batches than it has room for.
   */
  formAndClaim?(destination: string, limits: BatchLimits, now: number, maxBatches: number, leaseMs: number, owner: string): Promise<FormAndClaimResult>;
  /**
   * Optional, with `formAndClaim`: `claim(destination, want, …)`, then, when that found fewer
   * than `want` due batches, `formAndClaim` for the rest — in one call and one transaction,
   * where a call has a cost of its own (the SQLite store's own process: one message each way).
   */
  claimThenForm?(destination: string, limits: BatchLimits, now: number, want: number, leaseMs: number, owner: string): Promise<ClaimThenFormResult>;
  /**
   * Leases up to `limit` due batches of a destination (`queued`, not_before <= now, no live
   * lease), oldest due first. Every claim increments the batch's fencing token.
   */
  claim(destination: string, limit: number, now: number, leaseMs: number, owner: string): Promise<ClaimedBatch[]>;
  /**
   * Like `claim`, within limits shared by every worker of the destination: claims of the
   * destination are serialised through the store, the shared rate window and the live
   * leases are counted, and at most what both allow is claimed.
   */
  claimLimited(destination: string, want: number, limits: SharedLimits, now: number, leaseMs: number, owner: string): Promise<LimitedClaim>;
  /** The requests of a `claimLimited` permit have all been answered (or given up) at `at`: the window counts them until then. */
  endPermit(permit: number, at: number): Promise<void>;
  /** Extends live leases; returns the ids whose lease was lost (fence mismatch). */
  renew(leases: readonly Lease[], now: number, leaseMs: number): Promise<number[]>;
  /** Writes the core's decisions, each only if its lease token still matches (fenced). */
  complete(outcomes: readonly Outcome[]): Promise<CompleteResult>;
  /** Gives leases back (graceful stop): due again at their not_before. Fenced. Returns how many. */
  release(leases: readonly Lease[], now: number): Promise<number>;
  /** Per destination and state, from counters the writes keep (and a few index reads): fast on any number of rows. */
  stats(now: number): Promise<DestinationStats[]>;
  /** Rebuilds the counters behind `stats` from the tables (after workers of an older relent wrote to the store). */
  recount(): Promise<void>;
  list(filter: ListFilter, now: number): Promise<BatchSummary[]>;
  get(id: number): Promise<BatchDetail | null>;
  /** Puts dropped batches back (new round, fresh attempts, history kept, same key). Returns how many. */
  requeue(filter: RequeueFilter, now: number): Promise<number>;
  dropStats(): Promise<DropStat[]>;
  /** Deletes delivered batches finished before `before` (with their items and history), at most 10,000 a call. Returns batches deleted. */
  purgeDelivered(before: number): Promise<number>;
  /** Deletes up to `limit` batches in `state` finished before `before`, with their items and history, in one short transaction. Returns how many. */
  purge(state: FinishedState, before: number, limit: number): Promise<number>;
  /** Pauses (workers claim nothing for it; requests in flight finish) or resumes a destination. Returns whether that changed anything. */
  setPaused(destination: string, paused: boolean, now: number): Promise<boolean>;
  /**
   * Calls `listener` with a destination's name when another process may have made work
   * for it (enqueue, requeue, resume); resolves to a function that stops listening.
   * Optional: a store without it is polled.
   */
  subscribe?(listener: (destination: string) => void): Promise<() => Promise<void>>;
  /**
   * Optional: the live leases of `destination` held by `owner` that the owner does not know
   * of — every one but those in `known` with the same token: what a claim whose answer was
   * lost with its connection leased to it. They are extended to now + leaseMs and handed
   * back with their tokens unchanged. A worker asks after a claim of unknown outcome.
   */
  reclaim?(destination: string, owner: string, known: readonly Lease[], now: number, leaseMs: number): Promise<ClaimedBatch[]>;
  /**
   * Optional: resolves when the store answers within `timeoutMs` over a fresh connection
   * (none a partition may have stalled), rejects otherwise. A worker whose store calls fail
   * because the store cannot be reached asks every half second, and starts again (claims,
   * outcome writes, renewals) as soon as it answers.
   */
  ping?(timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}
