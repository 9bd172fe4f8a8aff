// What the parts of a delivery worker share: its destinations, the batches it holds, its
// settings and counters. The parts (worker-*.ts) each own one responsibility and reach
// the others through WorkerCore.
import type { RetryBudget } from '../core/budget.js';
import type { LimitAlgorithm } from '../core/concurrency.js';
import type { Clock, Random } from '../core/types.js';
import type { Instrumentation } from '../run/run.js';
import type { ResolvedDestination, WorkerSettings } from './config.js';
import type { DeliveryEvent } from './events.js';
import type { SlidingWindowLimiter } from './limits.js';
import type { Transport } from './transport.js';
import type { ClaimedBatch, DeliveryStore } from './types.js';
import type { ClaimLoop } from './worker-claims.js';
import type { BatchDelivery } from './worker-deliver.js';
import type { LeaseKeeper } from './worker-leases.js';
import type { OutcomeWriter } from './worker-outcomes.js';
import type { StoreLink } from './worker-store-link.js';

export interface WorkerCounters {
  attempts: number;
  deliveredBatches: number;
  deliveredItems: number;
  deferredBatches: number;
  droppedBatches: number;
  droppedItems: number;
  inflight: number;
  leaseLost: number;
  storeErrors: number;
}

/** One destination as a worker drives it. */
export interface Dest {
  readonly d: ResolvedDestination;
  /** The destination's concurrency limit: the shared AIMD (core/concurrency.ts), fixed at `initial` when not adaptive. */
  readonly aimd: LimitAlgorithm;
  /** The destination's rate limit when it is this process's alone (`rateLimit.scope: "worker"`). */
  readonly rate: SlidingWindowLimiter | null;
  /** Limits kept in the store, shared by every worker of the destination (null: none). */
  readonly shared: { readonly rate: { readonly requests: number; readonly perMs: number } | null; readonly concurrency: boolean } | null;
  readonly budget: RetryBudget | null;
  /** Requests started and not finished. */
  inflight: number;
  /** A throttling answer with Retry-After paused the destination until then (wall ms). */
  pausedUntil: number;
  /** Claimed batches not started yet, oldest due first (the claim-ahead buffer). */
  readonly ready: ClaimedBatch[];
  /** A claim round trip is under way. */
  claiming: boolean;
  /** The current claim round (a round the store's return made stale is let go: see StoreLink.back) and when it began (monotonic). */
  claimGen: number;
  claimSince: number;
  /**
   * A claim failed in a way that leaves its outcome unknown (the store was out of reach:
   * it may have leased batches to this worker and lost the answer). The next claim round
   * first asks the store for leases of this worker it does not know of (`reclaim`).
   */
  orphans: boolean;
  /** Look again as soon as the claim under way ends. */
  again: boolean;
  /**
   * The last claim found less than it asked for: nothing more is due now, so finishing
   * requests do not claim again; a timer, a wake-up or a retry falling due does.
   */
  dry: boolean;
  /**
   * Pending items may need sealing into batches: set by a timer, a wake-up or a form that
   * left more to seal; cleared by a form that sealed everything due. Claims that follow
   * finishing requests do not look for new items.
   */
  formDue: boolean;
  /**
   * Claim due batches (retries, released or expired leases) before sealing new ones: set by
   * a timer, a wake-up, or a claim that found as many as it asked for. A worker that seals
   * and leases in one write looks for due batches at least every pollMs.
   */
  dueLook: boolean;
  dueLookedAt: number;
  cancelTimer: (() => void) | null;
  timerAt: number;
  /** not_before times this worker stored and has not reached yet: the destination is looked at then, not a poll later. */
  readonly wakeTimes: Set<number>;
  /** Completions since `sampleAt` (monotonic) and their smoothed rate per ms; with the claim time, how far to claim ahead. */
  done: number;
  sampleAt: number;
  rateEwma: number;
  claimMsEwma: number;
}

/** A destination's starting state. */
export function newDest(
  d: ResolvedDestination,
  aimd: LimitAlgorithm,
  rate: SlidingWindowLimiter | null,
  shared: Dest['shared'],
  budget: RetryBudget | null,
): Dest {
  return {
    d,
    aimd,
    rate,
    shared,
    budget,
    inflight: 0,
    pausedUntil: 0,
    ready: [],
    claiming: false,
    claimGen: 0,
    claimSince: 0,
    orphans: false,
    again: false,
    dry: false,
    formDue: true,
    dueLook: true,
    dueLookedAt: 0,
    cancelTimer: null,
    timerAt: Number.POSITIVE_INFINITY,
    wakeTimes: new Set(),
    done: 0,
    sampleAt: 0,
    rateEwma: 0,
    claimMsEwma: 0,
  };
}

/** A claim's entry in a shared rate window: it counts until the last of its requests is answered. */
export interface Permit {
  readonly id: number;
  left: number;
  end: number;
}

/**
 * A batch this worker holds under a claim. One per batch: when the worker claims a batch it
 * already holds (its lease ran out while the store was out of reach, and the batch fell
 * due again), the entry takes the new claim's token — the request already made, or its
 * outcome waiting to be written, belongs to the new claim — so a late answer about the old
 * claim never cancels the new one, and the batch is not sent again.
 */
export interface Held {
  readonly id: number;
  /** The fencing token of the newest claim: every write about the batch carries it. */
  token: number;
  readonly dest: Dest;
  /** The shared rate permit this batch's claim took (null: no shared rate limit). */
  readonly permit: Permit | null;
  readonly abort: AbortController;
  /** The request went out (false: claimed ahead, waiting in `ready`). */
  started: boolean;
  /** Set when stop() gave up waiting: the result is not recorded, the claim is released. */
  abandoned: boolean;
  /** The outcome is waiting to be written. */
  settled: boolean;
  /** The attempt timeout fired. */
  timedOut: boolean;
}

/** A newly claimed batch as held (not started). */
export function newHeld(id: number, token: number, dest: Dest, permit: Permit | null): Held {
  return { id, token, dest, permit, abort: new AbortController(), started: false, abandoned: false, settled: false, timedOut: false };
}

/**
 * On SQLite, how long a finished attempt's outcome waits for others to be written with it
 * (group commit): a worker killed meanwhile loses at most the outcomes of that long, plus
 * the write under way, and those batches are delivered again with the same key.
 */
export const OUTCOME_GROUP_MS = 20;

/** While the store cannot be reached: how often it is pinged, and how long a ping may take (ms). */
export const PROBE_EVERY_MS = 500;
export const PROBE_TIMEOUT_MS = 2_000;
/** The longest wait before a failed claim or outcome write is tried again (ms): the pause doubles from pollMs up to this. */
export const STORE_RETRY_MAX_MS = 2_000;
/** A claim round under way longer than this when the store is back is not waited for: a new one starts beside it. */
export const STALE_CLAIM_MS = 1_000;

/** What the parts of a worker see of it and of each other. */
export interface WorkerCore {
  readonly id: string;
  readonly store: DeliveryStore;
  readonly clock: Clock;
  readonly random: Random;
  readonly transport: Transport;
  readonly settings: Required<WorkerSettings>;
  readonly dests: ReadonlyMap<string, Dest>;
  /** The batches this worker holds under a claim, by id. */
  readonly held: Map<number, Held>;
  readonly c: WorkerCounters;
  readonly instrumentation: Instrumentation | null;
  /** Batches held claimed ahead per slot of concurrency, at least (see ClaimLoop.ahead). */
  readonly aheadPerSlot: number;
  readonly isRunning: boolean;
  readonly stopping: boolean;
  emit(e: DeliveryEvent): void;
  /** Wakes what waits for the worker to go idle (stop() waiting for requests in flight). */
  notifyIdle(): void;
  /** A store call failed: counted, reported (store_error), and a store out of reach is watched until it answers. */
  storeError(during: string, e: unknown): void;
  readonly link: StoreLink;
  readonly outcomes: OutcomeWriter;
  readonly leases: LeaseKeeper;
  readonly loop: ClaimLoop;
  readonly delivery: BatchDelivery;
}
