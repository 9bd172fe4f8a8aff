import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { createRetryBudget, type RetryBudget } from '../core/budget.js';
import type { Fleet } from '../core/fleet.js';
import { createOperation, restoreOperation, type Command, type Operation } from '../core/operation.js';
import { errorClassOfCode } from '../core/error-codes.js';
import type { Clock, Decision, DecisionResult, DecisionWhy, ErrorClass, Observation, Random, TerminalReason } from '../core/types.js';
import { injectedObservation, type InjectedKind } from '../core/chaos.js';
import { appendPropagation } from '../core/propagation.js';
import { classifyWireError } from '../core/wire.js';
import { formatIdempotencyKey } from '../shared/idempotency.js';
import { systemClock, systemRandom } from '../shared/clock.js';
import type { Instrumentation, OperationScope } from '../run/run.js';
import { encodeBatch } from './batching.js';
import { resolveDestinations, resolveWorkerSettings, type DestinationOptions, type ResolvedDestination, type WorkerSettings } from './config.js';
import { DeliveryError } from './errors.js';
import { SlidingWindowLimiter } from './limits.js';
import { createLimitAlgorithm, type LimitAlgorithm } from '../core/concurrency.js';
import { PURGE_CHUNK } from './store-common.js';
import { createHttpTransport, type DeliveryRequest, type Transport, type TransportResult } from './transport.js';
import type { AttemptRecord, ClaimedBatch, DeliveryStore, Lease, Outcome } from './types.js';

/** Fields every delivery event carries. */
interface BatchRef {
  readonly destination: string;
  readonly batchId: number;
  /** The batch's idempotency key (also the operationId of its attempts). */
  readonly key: string;
  readonly items: number;
}

/**
 * One event per attempt (the fields of every attempt event; the operation is the batch, its id the batch's
 * idempotency key), then what happened to the batch. No payload, header or query
 * string ever appears in an event.
 */
export type DeliveryEvent =
  | (BatchRef & {
      readonly type: 'attempt';
      readonly operationId: string;
      readonly requestId: string;
      readonly round: number;
      readonly attempt: number;
      readonly method: string;
      readonly endpoint: string;
      readonly status: number | null;
      readonly errorClass: ErrorClass | null;
      readonly elapsedMs: number;
      readonly remainingMs: number;
      readonly decision: Decision;
      readonly why: DecisionWhy;
      readonly delayMs: number | null;
      readonly retryAfterMs: number | null;
      readonly retryAfterValid: boolean | null;
      /** When the attempt was decided (wall-clock epoch ms, the worker's clock). */
      readonly ts: number;
      /** Present only on an attempt the destination policy's chaos injected into (docs/chaos.md). */
      readonly injected?: InjectedKind;
    })
  | (BatchRef & { readonly type: 'delivered'; readonly attempts: number; readonly ts: number })
  | (BatchRef & { readonly type: 'deferred'; readonly notBefore: number; readonly delayMs: number; readonly ts: number })
  | (BatchRef & {
      readonly type: 'dropped';
      readonly reason: Decision;
      readonly why: DecisionWhy | null;
      readonly status: number | null;
      readonly errorClass: ErrorClass | null;
      readonly attempts: number;
      readonly ts: number;
    })
  /** The lease expired and another worker claimed the batch: this worker's result was not written. */
  | { readonly type: 'lease_lost'; readonly destination: string; readonly batchId: number }
  | { readonly type: 'concurrency'; readonly destination: string; readonly limit: number; readonly cause: 'throttled' | 'recovered' }
  /** A throttling answer with Retry-After paused the destination. */
  | { readonly type: 'paused'; readonly destination: string; readonly untilMs: number }
  | { readonly type: 'store_error'; readonly during: string; readonly error: DeliveryError };

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

export interface WorkerOptions extends WorkerSettings {
  readonly store: DeliveryStore;
  readonly destinations: ReadonlyMap<string, ResolvedDestination> | Readonly<Record<string, DestinationOptions>>;
  /** Time: wall clock for what is stored (not_before, leases), monotonic for elapsed times. */
  readonly clock?: Clock;
  readonly random?: Random;
  /** How a request goes out; default undici over a keep-alive Agent. */
  readonly transport?: Transport;
  readonly onEvent?: (event: DeliveryEvent) => void;
  /** The name written into leases and attempt history (default host:pid:random). */
  readonly workerId?: string;
  /**
   * `none` (default): the policy's in-process retry budget is not applied — a durable
   * retry refused by a budget would be dropped, and the queue bounds load with the
   * destination's rate limit and adaptive concurrency instead. `policy`: one budget per
   * destination from the policy (an exhausted budget drops the batch: budget_exhausted).
   * With `fleet`, `policy` budgets are the fleet's, one per destination.
   */
  readonly budget?: 'none' | 'policy';
  /** Share each destination's budget with every worker that delivers to it (relent/fleet; the destination's name is the dependency). */
  readonly fleet?: Fleet | null;
  /**
   * Spans and metrics (relent/otel): a span per batch delivery (`relent delivery batch`,
   * `relent.driver: "delivery"`, with the destination, batch id, items and round) and
   * under it the HTTP attempt's span, with the transport running in its context.
   */
  readonly instrumentation?: Instrumentation | null;
}

export interface DeliveryWorker {
  readonly id: string;
  /** Starts claiming and delivering. */
  start(): void;
  /**
   * Looks for work now (enqueue in the same process calls it): at the given destinations
   * (those just enqueued to; unknown names are ignored), or at every one.
   */
  wake(destinations?: Iterable<string>): void;
  /**
   * Stops claiming, waits up to stopTimeoutMs for requests in flight, records their
   * outcomes, aborts the rest and gives their claims back (they are due again at once).
   */
  stop(): Promise<{ released: number; abandoned: number }>;
  counters(): Readonly<WorkerCounters>;
  /** The current concurrency limit of a destination. */
  concurrency(destination: string): number;
  readonly running: boolean;
}

interface Dest {
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
  /** The current claim round (a round the store's return made stale is let go: see storeBack) and when it began (monotonic). */
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

/** A claim's entry in a shared rate window: it counts until the last of its requests is answered. */
interface Permit {
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
interface Held {
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

/**
 * On SQLite, how long a finished attempt's outcome waits for others to be written with it
 * (group commit): a worker killed meanwhile loses at most the outcomes of that long, plus
 * the write under way, and those batches are delivered again with the same key.
 */
const OUTCOME_GROUP_MS = 20;

/** While the store cannot be reached: how often it is pinged, and how long a ping may take (ms). */
const PROBE_EVERY_MS = 500;
const PROBE_TIMEOUT_MS = 2_000;
/** The longest wait before a failed claim or outcome write is tried again (ms): the pause doubles from pollMs up to this. */
const STORE_RETRY_MAX_MS = 2_000;
/** A claim round under way longer than this when the store is back is not waited for: a new one starts beside it. */
const STALE_CLAIM_MS = 1_000;

const CONNECT_PHASE: ReadonlySet<ErrorClass> = new Set(['connect_refused', 'dns', 'connect_timeout', 'tls']);

/**
 * Turns what a transport threw into an observation. The class comes from the error's
 * code (src/core/wire.ts's table); undici's `request` does not say whether request
 * bytes were written, so failures of the connect phase (refused, DNS, connect timeout,
 * TLS) count as not sent and everything else as unknown. Every batch carries an
 * idempotency key, so the decision does not depend on it.
 */
export function classifyThrown(error: unknown): { errorClass: ErrorClass; sent: 'not_sent' | 'unknown' } {
  const cls = errorClassOfCode(error);
  const wire = classifyWireError(error, cls !== null && CONNECT_PHASE.has(cls) ? 'before_request' : 'after_request');
  return { errorClass: wire.errorClass, sent: wire.sent === 'not_sent' ? 'not_sent' : 'unknown' };
}

function endpointOf(url: URL): string {
  return `${url.protocol}//${url.host}${url.pathname}`;
}

export function createWorker(options: WorkerOptions): DeliveryWorker {
  return new Worker(options);
}

class Worker implements DeliveryWorker {
  readonly id: string;
  private readonly store: DeliveryStore;
  private readonly clock: Clock;
  private readonly random: Random;
  private readonly transport: Transport;
  private readonly ownTransport: boolean;
  private readonly settings: Required<WorkerSettings>;
  private readonly dests = new Map<string, Dest>();
  private readonly held = new Map<number, Held>();
  private readonly onEvent: ((e: DeliveryEvent) => void) | null;
  private readonly instrumentation: Instrumentation | null;
  /** Batches held claimed ahead per slot of concurrency, at least (see ahead()). */
  private readonly aheadPerSlot: number;
  /** Outcomes waiting to be written; one write (one transaction) takes all that have gathered: group commit. */
  private outcomes: Outcome[] = [];
  private flushing: Promise<void> | null = null;
  private cancelFlushRetry: (() => void) | null = null;
  private cancelFlushWait: (() => void) | null = null;
  /** The pending write waits OUTCOME_GROUP_MS for more outcomes (see groupWaitMs). */
  private groupWaiting = false;
  private readonly c: WorkerCounters = {
    attempts: 0, deliveredBatches: 0, deliveredItems: 0, deferredBatches: 0, droppedBatches: 0, droppedItems: 0, inflight: 0, leaseLost: 0, storeErrors: 0,
  };
  private isRunning = false;
  private stopping = false;
  /** Claim round trips under way (stop() waits for them). */
  private readonly claims = new Set<Promise<void>>();
  private cancelRenew: (() => void) | null = null;
  private cancelPurge: (() => void) | null = null;
  private unsubscribe: (() => Promise<void>) | null = null;
  private storeFailures = 0;
  /** Store calls under way (claim rounds, outcome writes, renewals), since when (monotonic), and when last reported as unanswered. */
  private readonly calls = new Map<number, { readonly during: string; readonly since: number; reported: number }>();
  private callSeq = 0;
  private cancelWatchdog: (() => void) | null = null;
  /** The store cannot be reached: a call failed so, or did not answer within storeTimeoutMs. Pinged until it answers. */
  private storeDown = false;
  private cancelProbe: (() => void) | null = null;
  /** When storeBack last acted (monotonic). */
  private backAt = Number.NEGATIVE_INFINITY;
  private renewing = false;
  /**
   * Outcomes refused by the fence while a claim of this worker (under way, or of unknown
   * outcome) may hold their batch under a token it has not seen yet: written again, under
   * the newest token known, when that claim round ends (or after `reclaim`).
   */
  private parked: Outcome[] = [];
  /** How often each batch's outcome was parked (a claim under way parks it at most 3 times). */
  private readonly parks = new Map<number, number>();
  /** Attempt deadlines (monotonic), swept by one timer instead of a timer per request. */
  private readonly deadlines = new Map<Held, number>();
  private cancelSweep: (() => void) | null = null;
  private sweepAt = Number.POSITIVE_INFINITY;
  private idleWaiters: (() => void)[] = [];

  constructor(o: WorkerOptions) {
    this.store = o.store;
    this.clock = o.clock ?? systemClock;
    this.random = o.random ?? systemRandom;
    this.ownTransport = o.transport === undefined;
    this.transport = o.transport ?? createHttpTransport();
    this.onEvent = o.onEvent ?? null;
    this.instrumentation = o.instrumentation ?? null;
    this.aheadPerSlot = this.store.kind === 'sqlite' ? 10 : 4;
    this.settings = resolveWorkerSettings({
      ...(o.leaseMs !== undefined ? { leaseMs: o.leaseMs } : {}),
      ...(o.pollMs !== undefined ? { pollMs: o.pollMs } : {}),
      ...(o.claimChunk !== undefined ? { claimChunk: o.claimChunk } : {}),
      ...(o.stopTimeoutMs !== undefined ? { stopTimeoutMs: o.stopTimeoutMs } : {}),
      ...(o.retainDeliveredMs !== undefined ? { retainDeliveredMs: o.retainDeliveredMs } : {}),
      ...(o.retainDroppedMs !== undefined ? { retainDroppedMs: o.retainDroppedMs } : {}),
      ...(o.storeTimeoutMs !== undefined ? { storeTimeoutMs: o.storeTimeoutMs } : {}),
    }, 'worker');
    this.id = o.workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    const resolved = o.destinations instanceof Map ? o.destinations as ReadonlyMap<string, ResolvedDestination> : resolveDestinations(o.destinations);
    if (o.budget !== undefined && o.budget !== 'none' && o.budget !== 'policy') {
      throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`budget\` to be "none" or "policy", got ${JSON.stringify(o.budget)}`, { field: 'budget' });
    }
    const fleet = o.fleet ?? null;
    if (fleet !== null && (typeof fleet !== 'object' || typeof fleet.budget !== 'function')) {
      throw new DeliveryError('ERR_INVALID_CONFIG', 'Expected `fleet` to be a fleet (relent/fleet createRedisFleet())', { field: 'fleet' });
    }
    const budgets = o.budget === 'policy';
    for (const d of resolved.values()) {
      const sharedRate = d.rateLimit && d.rateLimit.scope === 'shared' ? { requests: d.rateLimit.requests, perMs: d.rateLimit.perMs + d.rateLimit.marginMs } : null;
      const sharedConcurrency = d.concurrency.scope === 'shared';
      this.dests.set(d.name, {
        d,
        aimd: createLimitAlgorithm({ kind: 'aimd', initial: d.concurrency.initial, min: d.concurrency.min, max: d.concurrency.max, decrease: d.concurrency.decrease }, `destinations.${d.name}.concurrency`),
        rate: d.rateLimit && d.rateLimit.scope === 'worker' ? new SlidingWindowLimiter(d.rateLimit.requests, d.rateLimit.perMs) : null,
        shared: sharedRate || sharedConcurrency ? { rate: sharedRate, concurrency: sharedConcurrency } : null,
        budget: budgets && d.policy.budget ? (fleet !== null ? fleet.budget(d.name, d.policy.budget) : createRetryBudget(d.policy.budget)) : null,
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
      });
    }
  }

  get running(): boolean {
    return this.isRunning;
  }

  counters(): Readonly<WorkerCounters> {
    let inflight = 0;
    for (const h of this.held.values()) if (h.started) inflight++;
    return { ...this.c, inflight };
  }

  concurrency(destination: string): number {
    return this.dests.get(destination)?.aimd.limit ?? 0;
  }

  private emit(e: DeliveryEvent): void {
    if (this.onEvent) this.onEvent(e);
  }

  start(): void {
    if (this.isRunning) return;
    this.isRunning = true;
    this.stopping = false;
    const now = this.clock.now();
    for (const dest of this.dests.values()) {
      dest.sampleAt = now;
      this.arm(dest, 0);
    }
    this.armRenew();
    this.armPurge();
    // Wake-ups from other processes (PostgreSQL LISTEN/NOTIFY): new items, requeues, a resume.
    if (this.store.subscribe) {
      this.store.subscribe((destination) => {
        const dest = this.dests.get(destination);
        if (dest) this.look(dest);
      }).then((unsubscribe) => {
        if (this.isRunning && !this.stopping) this.unsubscribe = unsubscribe;
        else void unsubscribe().catch(() => {});
      }, (e: unknown) => this.storeError('listening for new work', e));
    }
  }

  wake(destinations?: Iterable<string>): void {
    if (!this.isRunning || this.stopping) return;
    if (destinations === undefined) {
      for (const dest of this.dests.values()) this.look(dest);
      return;
    }
    for (const name of destinations) {
      const dest = this.dests.get(name);
      if (dest !== undefined) this.look(dest);
    }
  }

  /** Looks at `dest` again after `ms` (an earlier request wins). */
  private arm(dest: Dest, ms: number): void {
    if (!this.isRunning || this.stopping) return;
    const due = this.clock.now() + ms;
    if (dest.cancelTimer && dest.timerAt <= due) return;
    dest.cancelTimer?.();
    dest.timerAt = due;
    dest.cancelTimer = this.clock.setTimer(() => {
      dest.cancelTimer = null;
      dest.timerAt = Number.POSITIVE_INFINITY;
      this.look(dest);
    }, ms);
  }

  private notifyIdle(): void {
    const w = this.idleWaiters;
    this.idleWaiters = [];
    for (const f of w) f();
  }

  private storeError(during: string, e: unknown): void {
    this.c.storeErrors++;
    const error = DeliveryError.is(e) ? e : new DeliveryError('ERR_STORE', `${during}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    if (error.code === 'ERR_STORE_UNAVAILABLE') this.markDown();
    this.emit({ type: 'store_error', during, error });
  }

  /**
   * A store call begins (`during` says what it is for the watchdog's report); the function
   * returned ends it: `true` when it succeeded (a store thought down is back).
   */
  private track(during: string): (ok: boolean) => void {
    const id = ++this.callSeq;
    this.calls.set(id, { during, since: this.clock.now(), reported: 0 });
    if (this.cancelWatchdog === null && this.isRunning) this.armWatchdog(this.settings.storeTimeoutMs);
    return (ok) => {
      this.calls.delete(id);
      if (ok && this.storeDown) this.storeBack();
    };
  }

  /**
   * The watchdog: a store call that has not answered for storeTimeoutMs is a store_error
   * (ERR_STORE_UNAVAILABLE), repeated every storeTimeoutMs while it waits. The worker
   * still waits for it: an answer that comes late is used.
   */
  private armWatchdog(ms: number): void {
    this.cancelWatchdog = this.clock.setTimer(() => {
      this.cancelWatchdog = null;
      if (!this.isRunning) return;
      const limit = this.settings.storeTimeoutMs;
      const now = this.clock.now();
      let oldest: { during: string; since: number; reported: number } | null = null;
      let waiting = 0;
      let next = Number.POSITIVE_INFINITY;
      for (const c of this.calls.values()) {
        const due = Math.max(c.since, c.reported) + limit;
        if (due <= now) {
          waiting++;
          c.reported = now;
          if (oldest === null || c.since < oldest.since) oldest = c;
        }
        next = Math.min(next, Math.max(c.since, c.reported) + limit);
      }
      if (oldest !== null) {
        const secs = ((now - oldest.since) / 1000).toFixed(1);
        this.storeError(oldest.during, new DeliveryError('ERR_STORE_UNAVAILABLE',
          `${this.store.description}: no answer from the store for ${secs} s (storeTimeoutMs ${limit}; ${waiting} call${waiting === 1 ? '' : 's'} waiting); still waiting, nothing stored earlier is lost`));
      }
      if (next !== Number.POSITIVE_INFINITY) this.armWatchdog(Math.max(1, next - now));
    }, ms);
  }

  /** The store cannot be reached: ask it (ping) every PROBE_EVERY_MS until it answers. */
  private markDown(): void {
    if (this.storeDown || !this.isRunning) return;
    this.storeDown = true;
    if (this.store.ping !== undefined) this.armProbe();
  }

  private armProbe(): void {
    this.cancelProbe = this.clock.setTimer(() => {
      this.cancelProbe = null;
      if (!this.storeDown || !this.isRunning || this.stopping) return;
      this.store.ping!(PROBE_TIMEOUT_MS).then(() => this.storeBack(), () => {});
      this.armProbe();
    }, PROBE_EVERY_MS);
  }

  /**
   * The store answers again: outcomes waiting are written and leases renewed now, and
   * every destination is looked at now, without waiting for a claim that a partition
   * stalled (it ends by its own timeout; what it claimed, if anything, is still used).
   */
  private storeBack(): void {
    if (!this.storeDown) return;
    this.storeDown = false;
    this.cancelProbe?.();
    this.cancelProbe = null;
    this.storeFailures = 0;
    if (!this.isRunning || this.stopping) return;
    // At most once per PROBE_EVERY_MS (a store that fails some calls and answers others must not make a loop of it).
    const at = this.clock.now();
    if (at - this.backAt < PROBE_EVERY_MS) return;
    this.backAt = at;
    if (this.cancelFlushRetry !== null) {
      this.cancelFlushRetry();
      this.cancelFlushRetry = null;
      this.kickFlush();
    }
    this.renewNow();
    const now = this.clock.now();
    for (const dest of this.dests.values()) {
      if (dest.claiming && now - dest.claimSince > STALE_CLAIM_MS) {
        dest.claimGen++;
        dest.claiming = false;
      }
      this.look(dest);
    }
  }

  /**
   * How many batches to hold claimed ahead of free slots, so a finishing request is
   * followed at once by the next one instead of by a store round trip, and claims come
   * in chunks: four claim round trips' worth of the destination's recent completion
   * rate (a claim starts when half is left, so two round trips' worth, which covers a
   * claim that takes twice as long as usual on a busy machine), at least four times its
   * concurrency (so a claim brings at least twice the concurrency: fewer transactions
   * per item where claims are quick) — ten times on SQLite, whose claims are messages to
   * the store's process: a process that waits for a CPU on a busy machine now and then takes
   * far longer than its usual claim time, and fewer, larger claims cost the worker's
   * thread less — at most claimChunk. Nothing is claimed ahead
   * for a destination that has not completed anything lately, when claims take no time
   * (a test clock), or when the destination's limits are shared through the store
   * (there the claim is the permit).
   */
  private ahead(dest: Dest): number {
    if (dest.shared || dest.rate || dest.rateEwma === 0 || dest.claimMsEwma === 0) return 0;
    return Math.min(this.settings.claimChunk, Math.max(Math.round(4 * dest.rateEwma * dest.claimMsEwma), this.aheadPerSlot * dest.aimd.limit));
  }

  /** Something may have fallen due or arrived for `dest` (a timer, a wake-up): look for it. */
  private look(dest: Dest): void {
    dest.formDue = true;
    dest.dueLook = true;
    this.pump(dest, true);
  }

  /**
   * Starts what the limits allow from the claimed batches, and claims more when there is
   * room. `fresh`: claim even if the last claim came back short.
   */
  private pump(dest: Dest, fresh = false): void {
    if (!this.isRunning || this.stopping) return;
    if (fresh) dest.dry = false;
    const now = this.clock.wallNow();
    if (dest.pausedUntil > now) {
      this.arm(dest, dest.pausedUntil - now);
      return;
    }
    while (dest.ready.length > 0 && dest.inflight < dest.aimd.limit) {
      const b = dest.ready.shift()!;
      const h = this.held.get(b.id);
      if (h && !h.started) void this.deliver(dest, b, h);
    }
    const room = dest.aimd.limit - dest.inflight - dest.ready.length + this.ahead(dest);
    if (room <= 0) return; // a finishing request looks again
    if (dest.claiming) {
      if (fresh) dest.again = true;
      return;
    }
    if (dest.dry) return;
    // With a buffer to draw from, claim in chunks: wait until half of it is used.
    if (dest.ready.length > 0 && room < Math.max(1, this.ahead(dest) >> 1)) return;
    const round = this.claimRound(dest, room).finally(() => this.claims.delete(round));
    this.claims.add(round);
  }

  /** One claim round trip for `dest`: seal due batches, lease up to `room`, start them; then decide when to look again. */
  private async claimRound(dest: Dest, room: number): Promise<void> {
    const d = dest.d;
    const gen = ++dest.claimGen;
    dest.claiming = true;
    dest.claimSince = this.clock.now();
    dest.again = false;
    const done = this.track('claiming batches');
    let wait = this.settings.pollMs;
    let more = false;
    try {
      if (dest.orphans) await this.reclaimOrphans(dest);
      const now = this.clock.wallNow();
      const t0 = this.clock.now();
      for (const at of dest.wakeTimes) {
        if (at <= now) dest.wakeTimes.delete(at); // due: this round claims it
        else if (at - now < wait) wait = at - now;
      }
      let want = Math.min(room, this.settings.claimChunk);
      if (dest.rate) {
        const allowed = dest.rate.available(now);
        if (allowed <= 0) {
          wait = Math.min(wait, Math.max(1, dest.rate.nextAt(now) - now));
          want = 0;
        }
        want = Math.min(want, allowed);
      }
      // A partial batch falls due by age: look again exactly then (or at once if more can be sealed now).
      const formed = (nextAt: number | null): void => {
        dest.formDue = nextAt !== null && nextAt <= now;
        if (nextAt !== null) {
          if (nextAt <= now) more = true;
          else wait = Math.min(wait, nextAt - now);
        }
      };
      // A store that seals and leases in one write (PostgreSQL) does so after the due batches are claimed,
      // for a destination whose limits are its own: a new batch is written once, not sealed and then claimed.
      const formAndClaim = dest.shared === null ? this.store.formAndClaim?.bind(this.store) : undefined;
      if (want > 0) {
        if (dest.formDue && formAndClaim === undefined) {
          formed((await this.store.formBatches(d.name, d.batch, now, this.settings.claimChunk)).nextAt);
        }
        let claimed: ClaimedBatch[];
        let permit: Permit | null = null;
        if (dest.shared) {
          const limits = { rate: dest.shared.rate, concurrency: dest.shared.concurrency ? dest.aimd.limit : null };
          const r = await this.store.claimLimited(d.name, want, limits, now, this.settings.leaseMs, this.id);
          claimed = r.claimed;
          if (r.permit !== null) permit = { id: r.permit, left: claimed.length, end: 0 };
          if (r.retryAt !== null) wait = Math.min(wait, Math.max(1, r.retryAt - now));
        } else {
          claimed = [];
          const t = this.clock.now();
          const lookDue = formAndClaim === undefined || !dest.formDue || dest.dueLook || t - dest.dueLookedAt >= this.settings.pollMs;
          // Both steps in one store call where the store has it (SQLite: one message to its thread, one transaction).
          const claimThenForm = lookDue && formAndClaim !== undefined && dest.formDue ? this.store.claimThenForm?.bind(this.store) : undefined;
          if (claimThenForm !== undefined) {
            const r = await claimThenForm(d.name, d.batch, now, want, this.settings.leaseMs, this.id);
            dest.dueLook = r.due === want;
            dest.dueLookedAt = t;
            if (r.formed) formed(r.nextAt);
            claimed = r.claimed;
          } else if (lookDue) {
            claimed = await this.store.claim(d.name, want, now, this.settings.leaseMs, this.id);
            dest.dueLook = claimed.length === want;
            dest.dueLookedAt = t;
          }
          if (claimThenForm === undefined && formAndClaim !== undefined && dest.formDue && claimed.length < want) {
            const r = await formAndClaim(d.name, d.batch, now, want - claimed.length, this.settings.leaseMs, this.id);
            formed(r.nextAt);
            if (r.claimed.length > 0) claimed = claimed.length === 0 ? r.claimed : claimed.concat(r.claimed);
          }
        }
        const t1 = this.clock.now();
        dest.claimMsEwma = dest.claimMsEwma === 0 ? t1 - t0 : 0.8 * dest.claimMsEwma + 0.2 * (t1 - t0);
        if (t1 - dest.sampleAt >= 20) {
          const rate = dest.done / (t1 - dest.sampleAt);
          dest.rateEwma = dest.rateEwma === 0 ? rate : 0.7 * dest.rateEwma + 0.3 * rate;
          dest.done = 0;
          dest.sampleAt = t1;
        }
        dest.rate?.take(claimed.length, now);
        if (claimed.length === want && want > 0) more = true;
        for (const b of claimed) {
          const old = this.held.get(b.id);
          if (old !== undefined) {
            // Ours already: its lease ran out while the store was out of reach. Same batch, newer claim.
            this.adopt(old, b.token);
            if (permit !== null) this.permitUsed(dest, permit); // no request goes out for it under this claim
            continue;
          }
          this.held.set(b.id, { id: b.id, token: b.token, dest, permit, abort: new AbortController(), started: false, abandoned: false, settled: false, timedOut: false });
          dest.ready.push(b);
        }
      }
      this.storeFailures = 0;
      done(true);
    } catch (e) {
      done(false);
      if (DeliveryError.is(e) && e.code === 'ERR_STORE_UNAVAILABLE' && this.store.reclaim !== undefined) dest.orphans = true;
      // A round let go when the store came back (a newer one runs): its failure is old news.
      if (gen !== dest.claimGen) return;
      this.storeError('claiming batches', e);
      // Back off while the store fails (full disk, database down), up to STORE_RETRY_MAX_MS (a ping brings it forward).
      this.storeFailures++;
      wait = Math.min(STORE_RETRY_MAX_MS, this.settings.pollMs * 2 ** Math.min(this.storeFailures, 10));
      more = false;
    } finally {
      if (gen === dest.claimGen) dest.claiming = false;
    }
    if (!dest.orphans) this.unpark(dest);
    if (gen !== dest.claimGen) {
      this.pump(dest); // what it claimed is held and ready: start it
      return;
    }
    dest.dry = !more;
    this.arm(dest, wait);
    this.pump(dest, more || dest.again); // start what was claimed, and claim again if more may be due
    this.notifyIdle();
  }

  /**
   * Writes finished outcomes (fenced): one store call, one transaction, for all that
   * have gathered — those of the same turn of the event loop, and those that finish
   * while the previous write is under way (group commit). One write at a time.
   */
  private kickFlush(): void {
    if (this.flushing || this.cancelFlushRetry || this.outcomes.length === 0) return;
    let cancelled = false;
    const wait = this.groupWaitMs();
    this.groupWaiting = wait > 0;
    const run = new Promise<void>((resolve) => {
      const cancel = this.clock.setTimer(resolve, wait);
      this.cancelFlushWait = () => {
        cancelled = true;
        cancel();
        resolve();
      };
    }).then(() => {
      this.cancelFlushWait = null;
      this.groupWaiting = false;
      return cancelled ? undefined : this.flush();
    }).then(() => {
      this.flushing = null;
      this.kickFlush();
    }, (e: unknown) => {
      this.flushing = null;
      this.storeError('recording outcomes', e);
      // Kept; written again after a pause, or as soon as the store answers a ping (or the leases expire and the batches are delivered again).
      this.storeFailures++;
      this.cancelFlushRetry = this.clock.setTimer(() => {
        this.cancelFlushRetry = null;
        this.kickFlush();
      }, Math.min(STORE_RETRY_MAX_MS, this.settings.pollMs * 2 ** Math.min(this.storeFailures, 10)));
    });
    this.flushing = run;
  }

  /**
   * How long the first outcome of a group waits for others before the write starts. On
   * SQLite every write is a transaction and a message to and from the store's process, whatever
   * its size, so outcomes gather for OUTCOME_GROUP_MS; on PostgreSQL the previous write's
   * round trip gathers them. An outcome of a destination whose limits are kept in the store
   * is written at the end of the turn: its lease counts against the shared limit until then.
   */
  private groupWaitMs(): number {
    if (this.store.kind !== 'sqlite') return 0;
    for (const o of this.outcomes) if (this.held.get(o.id)?.dest.shared) return 0;
    return OUTCOME_GROUP_MS;
  }

  private async flush(): Promise<void> {
    if (this.outcomes.length === 0) return;
    const batch = this.outcomes;
    this.outcomes = [];
    let res;
    const done = this.track('recording outcomes');
    try {
      res = await this.store.complete(batch);
      done(true);
    } catch (e) {
      done(false);
      // (an outcome claimed again meanwhile carries its newest token: see adopt)
      this.outcomes = batch.map((o) => {
        const h = this.held.get(o.id);
        return h !== undefined && h.token > o.token ? { ...o, token: h.token } : o;
      }).concat(this.outcomes);
      throw e;
    }
    // A destination whose limits live in the store counted these leases until now: there may be room again.
    const freed = new Set<Dest>();
    const tokenOf = new Map(batch.map((o) => [o.id, o.token]));
    for (const id of res.applied) {
      const h = this.held.get(id);
      if (h === undefined || h.token !== tokenOf.get(id)) continue;
      if (h.dest.shared) freed.add(h.dest);
      this.held.delete(id);
      this.parks.delete(id);
    }
    for (const id of res.lost) {
      const h = this.held.get(id);
      const written = batch.find((o) => o.id === id)!;
      if (h !== undefined && h.token !== written.token) {
        // Claimed again by this worker while the write was under way: written again under the new claim.
        this.outcomes.push({ ...written, token: h.token });
        continue;
      }
      if (h === undefined) continue; // (a renewal already found it lost)
      const parks = this.parks.get(id) ?? 0;
      if (h.dest.orphans || (h.dest.claiming && parks < 3)) {
        // Perhaps claimed again by this worker, in a claim whose answer is still on its way or was lost:
        // written again once that claim round (or reclaimOrphans) has said (unpark). A few times at most.
        this.parks.set(id, parks + 1);
        this.parked.push(written);
        continue;
      }
      this.parks.delete(id);
      this.held.delete(id);
      this.c.leaseLost++;
      this.emit({ type: 'lease_lost', destination: h?.dest.d.name ?? '', batchId: id });
    }
    for (const dest of freed) this.pump(dest, true);
    this.notifyIdle();
  }

  private armRenew(): void {
    const every = Math.max(1, Math.floor(this.settings.leaseMs / 3));
    this.cancelRenew = this.clock.setTimer(() => {
      this.cancelRenew = null;
      this.renewNow();
    }, every);
  }

  /** Renews every lease held now (one renewal at a time), then arms the next one. */
  private renewNow(): void {
    if (!this.isRunning || this.renewing) return;
    this.cancelRenew?.();
    this.cancelRenew = null;
    this.renewing = true;
    const leases = [...this.held.values()].filter((h) => !h.abandoned).map((h) => ({ id: h.id, token: h.token }));
    const sent = new Map(leases.map((l) => [l.id, l.token]));
    const done = this.track('renewing leases');
    this.store.renew(leases, this.clock.wallNow(), this.settings.leaseMs).then((lost) => {
      done(true);
      for (const id of lost) {
        const h = this.held.get(id);
        // (claimed again by this worker meanwhile: the renewal of the old claim says nothing about it;
        // answered already: the outcome's write says whether the lease held, or whether this worker's own write landed)
        // (a claim of this worker under way, or of unknown outcome, may have it under a newer token)
        if (!h || h.token !== sent.get(id) || h.settled || h.dest.claiming || h.dest.orphans) continue;
        // Another worker has it now: stop caring; our result would be refused by the fence anyway.
        this.held.delete(id);
        this.c.leaseLost++;
        this.emit({ type: 'lease_lost', destination: h.dest.d.name, batchId: id });
      }
    }, (e: unknown) => {
      done(false);
      this.storeError('renewing leases', e);
    }).finally(() => {
      this.renewing = false;
      if (this.isRunning && !this.stopping && this.cancelRenew === null) this.armRenew();
    });
  }

  /**
   * Retention: delivered batches older than retainDeliveredMs and dropped ones older than
   * retainDroppedMs are deleted, in small chunks (one short transaction each), every
   * minute, so a large backlog of old rows never holds a long lock.
   */
  private armPurge(): void {
    const every = Math.min(60_000, Math.max(1_000, this.settings.retainDeliveredMs));
    this.cancelPurge = this.clock.setTimer(() => {
      this.cancelPurge = null;
      if (!this.isRunning) return;
      void this.purge().finally(() => {
        if (this.isRunning) this.armPurge();
      });
    }, every);
  }

  private async purge(): Promise<void> {
    const now = this.clock.wallNow();
    const passes: ['delivered' | 'dropped', number][] = [['delivered', now - this.settings.retainDeliveredMs]];
    if (this.settings.retainDroppedMs !== null) passes.push(['dropped', now - this.settings.retainDroppedMs]);
    try {
      for (const [state, before] of passes) {
        // Chunks until a short one; at most 100 a pass (the next pass carries on).
        for (let i = 0; i < 100 && this.isRunning && !this.stopping; i++) {
          const n = await this.store.purge(state, before, PURGE_CHUNK);
          if (n < PURGE_CHUNK) break;
        }
      }
    } catch (e) {
      this.storeError('purging finished batches', e);
    }
  }

  /**
   * The core's operation of a claimed batch and its first command at `now`: a new
   * operation on its first attempt (of a round), else the stored one, whose wait is over.
   */
  private operationOf(dest: Dest, b: ClaimedBatch, now: number): { op: Operation; cmd: Command } {
    const d = dest.d;
    const o = { method: d.method, idempotencyKey: b.key, budget: dest.budget, random: this.random, durable: true };
    if (b.attempt === 0 || b.opStartedAt === null || b.opDeadlineAt === null) {
      const op = createOperation(d.policy, o);
      return { op, cmd: op.start(now) };
    }
    const op = restoreOperation(d.policy, {
      attempt: b.attempt, startedAt: b.opStartedAt, deadlineAt: b.opDeadlineAt, prevDelayMs: b.prevDelayMs, throttled: b.opThrottled,
    }, o);
    return { op, cmd: op.timerFired(now) };
  }

  private async deliver(dest: Dest, b: ClaimedBatch, h: Held): Promise<void> {
    const d = dest.d;
    h.started = true;
    dest.inflight++;
    const ref: BatchRef = { destination: d.name, batchId: b.id, key: b.key, items: b.items.length };
    // Tracing: this delivery of the batch is one operation span (ended once, whatever happens).
    let scope: OperationScope | null = null;
    let attempts = 0;
    const endScope = (reason: TerminalReason, status: number | null, errorClass: ErrorClass | null): void => {
      if (scope === null) return;
      scope.end({ type: 'result', operationId: b.key, status, errorClass, reason, attempts, ts: Math.round(this.clock.wallNow()) });
      scope = null;
    };
    try {
      const startWall = this.clock.wallNow();
      const { op, cmd } = this.operationOf(dest, b, startWall);
      attempts = op.attempt;
      if (this.instrumentation !== null) {
        scope = this.instrumentation.operation({
          operationId: b.key, method: d.method, endpoint: endpointOf(d.url), driver: 'delivery',
          attributes: { 'relent.delivery.destination': d.name, 'relent.delivery.batch_id': b.id, 'relent.delivery.items': b.items.length, 'relent.delivery.round': b.round },
        });
      }
      const base = { id: b.id, token: b.token, opStartedAt: op.startedAt, opDeadlineAt: op.deadlineAt };
      if (cmd.kind === 'end') {
        endScope(cmd.reason, null, null);
        // The operation's deadline passed while the batch waited: no call; kept as dropped.
        const why = cmd.why ?? 'deadline_spent';
        this.settle(h, {
          ...base, state: 'dropped', notBefore: b.notBefore, attempt: op.attempt, prevDelayMs: op.prevDelayMs, opThrottled: op.throttled ?? 0,
          lastStatus: null, lastErrorClass: null, lastDecision: cmd.reason, lastWhy: why, finishedAt: startWall, record: null,
        });
        this.countDrop(ref, cmd.reason, why, null, null, op.attempt);
        return;
      }
      // (A durable operation never waits for a budget or checks state before a call.)
      if (cmd.kind !== 'call') throw new DeliveryError('ERR_STORE', `internal: a ${cmd.kind} before a call`);
      const attempt = cmd.attempt;
      attempts = attempt;
      const remainingMs = cmd.remainingMs;
      const timeoutMs = Math.max(1, cmd.timeoutMs);
      const { body, contentType } = encodeBatch(d.format, b.key, b.items);
      const operationId = b.key;
      const requestId = b.round > 1 ? `${b.key}/round-${b.round}/attempt-${attempt}` : `${b.key}/attempt-${attempt}`;
      const headers: Record<string, string> = { ...d.headers, 'content-type': contentType, 'idempotency-key': formatIdempotencyKey(b.key), 'x-request-id': requestId };
      if (d.propagate.names.length > 0) {
        const pairs = appendPropagation([], d.propagate, attempt, timeoutMs);
        for (let i = 0; i < pairs.length; i += 2) headers[pairs[i]!] = pairs[i + 1]!;
      }
      const generation = dest.aimd.generation;
      const t0 = this.clock.now();
      this.watch(h, t0 + timeoutMs);
      let result: TransportResult;
      const aScope = scope === null ? null : (scope as OperationScope).attempt(attempt, { requestId, remainingMs, timeoutMs });
      const inject = cmd.inject;
      try {
        const req: DeliveryRequest = {
          destination: d, url: d.url, method: d.method, headers, body, batchKey: b.key, attempt, items: b.items,
          signal: h.abort.signal, timeoutMs,
        };
        if (inject !== undefined && inject.kind !== 'latency') {
          // Chaos: the injected fault or outcome is the attempt's answer; nothing is sent.
          const o = injectedObservation(inject);
          result = o.status !== null && o.status !== undefined ? (o.headers ? { status: o.status, headers: o.headers } : { status: o.status }) : { errorClass: o.errorClass!, sent: o.sent! };
        } else {
          // Chaos: a latency delays the send within the attempt's time (its timeout cuts the wait too).
          if (inject !== undefined) await this.injectedDelay(h, inject.delayMs);
          result = h.timedOut ? { errorClass: 'timeout', sent: 'unknown' } : await (aScope !== null ? aScope.run(this.transport, req) : this.transport(req));
        }
      } catch (e) {
        result = h.timedOut ? { errorClass: 'timeout', sent: 'unknown' } : classifyThrown(e);
      } finally {
        this.deadlines.delete(h);
      }
      if (h.abandoned || this.held.get(b.id) !== h) {
        // Stopped meanwhile, or the lease was lost: nothing is recorded; the span says so.
        aScope?.end({
          type: 'attempt', operationId, requestId, attempt, method: d.method, endpoint: endpointOf(d.url), status: null, errorClass: 'aborted',
          elapsedMs: Math.max(0, Math.round(this.clock.now() - t0)), remainingMs, decision: 'cancelled', delayMs: null, retryAfterMs: null, retryAfterValid: null,
          ts: Math.round(this.clock.wallNow()),
        });
        return;
      }
      const elapsedMs = Math.max(0, Math.round(this.clock.now() - t0));
      if (h.timedOut && !('status' in result)) result = { errorClass: 'timeout', sent: 'unknown' };
      const obs: Observation = 'status' in result
        ? { status: result.status, ...(result.headers ? { headers: result.headers } : {}), elapsedMs }
        : { errorClass: result.errorClass, ...(result.sent ? { sent: result.sent } : {}), elapsedMs };
      const now = this.clock.wallNow();
      const next = op.answered(obs, now, now);
      const res: DecisionResult = op.decision!;
      this.c.attempts++;
      const status = obs.status ?? null;
      const errorClass = obs.errorClass ?? null;
      const ev = {
        type: 'attempt' as const, ...ref, operationId, requestId, round: b.round, attempt, method: d.method, endpoint: endpointOf(d.url),
        status, errorClass, elapsedMs, remainingMs, decision: res.decision, why: res.why, delayMs: res.delayMs,
        retryAfterMs: res.retryAfterMs, retryAfterValid: res.retryAfterValid, ts: Math.round(now),
        ...(inject !== undefined ? { injected: inject.kind } : {}),
      };
      aScope?.end(ev);
      // A retry the queue stores is, for this process, a deferral.
      endScope(res.decision === 'retry' ? 'defer' : res.decision as TerminalReason, status, errorClass);
      this.emit(ev);
      this.shed(dest, status, res, generation, t0, now);
      const whole = (v: number | null): number | null => (v === null ? null : Math.round(v));
      const record: AttemptRecord = {
        round: b.round, attempt, at: Math.round(now), status, errorClass, elapsedMs, decision: res.decision, why: res.why,
        delayMs: whole(res.delayMs), retryAfterMs: whole(res.retryAfterMs), worker: this.id,
      };
      const last = { lastStatus: status, lastErrorClass: errorClass, lastDecision: res.decision, lastWhy: res.why, record };
      if (next.kind === 'end' && next.reason === 'return') {
        this.settle(h, { ...base, ...last, state: 'delivered', notBefore: b.notBefore, attempt, prevDelayMs: op.prevDelayMs,
          opThrottled: op.throttled ?? 0, finishedAt: now });
        this.c.deliveredBatches++;
        this.c.deliveredItems += b.items.length;
        this.emit({ type: 'delivered', ...ref, attempts: attempt, ts: Math.round(now) });
      } else if (next.kind === 'wait') {
        // The core chose the wait; the queue only stores it (seconds to hours), with the
        // operation's snapshot (a 429 that did not count is remembered).
        const snap = op.snapshot();
        const notBefore = Math.round(now + next.delayMs);
        this.settle(h, {
          ...base, ...last, state: 'queued', notBefore, attempt: snap.attempt, prevDelayMs: snap.prevDelayMs, opThrottled: snap.throttled, finishedAt: null,
        });
        this.c.deferredBatches++;
        this.emit({ type: 'deferred', ...ref, notBefore, delayMs: next.delayMs, ts: Math.round(now) });
        this.wakeAt(dest, notBefore);
      } else {
        this.settle(h, {
          ...base, ...last, state: 'dropped', notBefore: b.notBefore, attempt, prevDelayMs: op.prevDelayMs, opThrottled: op.throttled ?? 0, finishedAt: now,
        });
        this.countDrop(ref, res.decision, res.why, status, errorClass, attempt);
      }
    } catch (e) {
      // Not expected (encoding, a throwing onEvent): the claim is left to expire, so the batch comes back.
      this.storeError(`delivering batch ${b.id}`, e);
    } finally {
      endScope('cancelled', null, null); // stopped meanwhile, the lease lost, or an unexpected error
      dest.inflight--;
      dest.done++;
      if (h.permit) this.permitUsed(dest, h.permit);
      this.notifyIdle();
      this.pump(dest);
    }
  }

  /**
   * One request of a shared-rate permit is over (answered, failed, timed out or never
   * sent): once all are, the permit's window starts from now — the destination saw every
   * one of them by then, however late a request left or arrived.
   */
  private permitUsed(dest: Dest, p: Permit): void {
    p.left--;
    p.end = Math.max(p.end, Math.round(this.clock.wallNow()));
    if (p.left > 0) return;
    this.store.endPermit(p.id, p.end).then(() => this.pump(dest, true), (e: unknown) => this.storeError('ending a rate permit', e));
  }

  /** Makes sure `dest` is looked at at wall time `at` (a retry this worker scheduled falls due). */
  private wakeAt(dest: Dest, at: number): void {
    if (dest.wakeTimes.size < 10_000) dest.wakeTimes.add(at); // past that, polling finds the rest
    this.arm(dest, Math.max(0, at - this.clock.wallNow()));
  }

  /** An injected latency: waits `ms`, or less when the attempt is aborted meanwhile (its timeout, a stop). */
  private injectedDelay(h: Held, ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (h.abort.signal.aborted) return resolve();
      const done = (): void => {
        cancel();
        h.abort.signal.removeEventListener('abort', done);
        resolve();
      };
      const cancel = this.clock.setTimer(done, ms);
      h.abort.signal.addEventListener('abort', done);
    });
  }

  /** Aborts the attempt of `h` at `due` (monotonic ms). */
  private watch(h: Held, due: number): void {
    this.deadlines.set(h, due);
    if (due < this.sweepAt) this.armSweep(due);
  }

  private armSweep(due: number): void {
    this.cancelSweep?.();
    this.sweepAt = due;
    this.cancelSweep = this.clock.setTimer(() => {
      this.cancelSweep = null;
      this.sweepAt = Number.POSITIVE_INFINITY;
      const now = this.clock.now();
      let next = Number.POSITIVE_INFINITY;
      for (const [held, at] of this.deadlines) {
        if (at <= now) {
          this.deadlines.delete(held);
          held.timedOut = true;
          held.abort.abort(new Error('relent: attempt timeout'));
        } else if (at < next) next = at;
      }
      if (next !== Number.POSITIVE_INFINITY) this.armSweep(next);
    }, Math.max(0, due - this.clock.now()));
  }

  /**
   * After a claim of unknown outcome: the store's leases of `dest` held by this worker that
   * it does not know of are taken in (a batch held under an older token adopts the newer
   * one; others wait in the ready buffer like a claim's), and outcomes parked meanwhile are
   * written again under the tokens now known.
   */
  private async reclaimOrphans(dest: Dest): Promise<void> {
    const known: Lease[] = [];
    for (const h of this.held.values()) if (h.dest === dest) known.push({ id: h.id, token: h.token });
    const back = await this.store.reclaim!(dest.d.name, this.id, known, this.clock.wallNow(), this.settings.leaseMs);
    dest.orphans = false;
    for (const b of back) {
      const old = this.held.get(b.id);
      if (old !== undefined) this.adopt(old, b.token);
      else {
        this.held.set(b.id, { id: b.id, token: b.token, dest, permit: null, abort: new AbortController(), started: false, abandoned: false, settled: false, timedOut: false });
        dest.ready.push(b);
      }
    }
    this.unpark(dest);
  }

  /** Outcomes of `dest` parked by the fence are written again, under the tokens now known. */
  private unpark(dest: Dest): void {
    const parked = this.parked.filter((o) => this.held.get(o.id)?.dest === dest);
    if (parked.length === 0) return;
    this.parked = this.parked.filter((o) => this.held.get(o.id)?.dest !== dest);
    for (const o of parked) this.outcomes.push({ ...o, token: this.held.get(o.id)!.token });
    this.kickFlush();
  }

  /**
   * `h` was claimed again (token `token`): what it has — a request in flight, a batch waiting
   * to start, an outcome waiting to be written — now belongs to the new claim.
   */
  private adopt(h: Held, token: number): void {
    if (token <= h.token) return;
    h.token = token;
    const i = this.outcomes.findIndex((o) => o.id === h.id);
    if (i >= 0) this.outcomes[i] = { ...this.outcomes[i]!, token };
  }

  private settle(h: Held, o: Outcome): void {
    h.settled = true;
    this.outcomes.push(o.token === h.token ? o : { ...o, token: h.token });
    // A shared limit counts this lease until the outcome is written: end a group's wait now (the write starts at the end of the turn).
    if (h.dest.shared !== null && this.groupWaiting && this.cancelFlushWait !== null) {
      this.groupWaiting = false;
      this.cancelFlushWait();
    } else this.kickFlush();
  }

  private countDrop(ref: BatchRef, reason: Decision, why: DecisionWhy | null, status: number | null, errorClass: ErrorClass | null, attempts: number): void {
    this.c.droppedBatches++;
    this.c.droppedItems += ref.items;
    this.emit({ type: 'dropped', ...ref, reason, why, status, errorClass, attempts, ts: Math.round(this.clock.wallNow()) });
  }

  /** Load shedding: a throttling answer halves the destination's concurrency (once per wave) and may pause it. */
  private shed(dest: Dest, status: number | null, res: DecisionResult, generation: number, startedAt: number, now: number): void {
    const d = dest.d;
    const adaptive = d.concurrency.adaptive;
    if (status !== null && d.concurrency.backoffOn.includes(status)) {
      if (adaptive && dest.aimd.sample({ startedAt, now: this.clock.now(), inFlight: dest.inflight, generation, dropped: true }) !== null) {
        this.emit({ type: 'concurrency', destination: d.name, limit: dest.aimd.limit, cause: 'throttled' });
      }
      if (d.maxPauseMs > 0 && res.retryAfterMs !== null && res.retryAfterValid !== false && res.retryAfterMs > 0) {
        const until = now + Math.min(res.retryAfterMs, d.maxPauseMs);
        if (until > dest.pausedUntil) {
          dest.pausedUntil = until;
          this.emit({ type: 'paused', destination: d.name, untilMs: until });
        }
      }
    } else if (res.decision === 'return') {
      if (adaptive && dest.aimd.sample({ startedAt, now: this.clock.now(), inFlight: dest.inflight, generation, dropped: false }) !== null) {
        this.emit({ type: 'concurrency', destination: d.name, limit: dest.aimd.limit, cause: 'recovered' });
      }
    }
  }

  async stop(): Promise<{ released: number; abandoned: number }> {
    if (!this.isRunning) return { released: 0, abandoned: 0 };
    this.stopping = true;
    for (const dest of this.dests.values()) {
      dest.cancelTimer?.();
      dest.cancelTimer = null;
      dest.timerAt = Number.POSITIVE_INFINITY;
    }
    this.cancelRenew?.();
    this.cancelRenew = null;
    this.cancelPurge?.();
    this.cancelPurge = null;
    this.cancelProbe?.();
    this.cancelProbe = null;
    const unsubscribe = this.unsubscribe;
    this.unsubscribe = null;
    await unsubscribe?.().catch(() => {});
    await Promise.all([...this.claims]);
    // Batches claimed ahead and not started are given back below, untouched.
    for (const dest of this.dests.values()) dest.ready.length = 0;
    // Wait for requests in flight (their outcomes are still recorded), at most stopTimeoutMs.
    const inFlight = (): number => {
      let n = 0;
      for (const h of this.held.values()) if (h.started && !h.settled) n++;
      return n;
    };
    if (inFlight() > 0 && this.settings.stopTimeoutMs > 0) {
      await new Promise<void>((resolve) => {
        const cancel = this.clock.setTimer(() => finish(), this.settings.stopTimeoutMs);
        const check = (): void => {
          if (inFlight() === 0) finish();
          else this.idleWaiters.push(check);
        };
        let done = false;
        const finish = (): void => {
          if (done) return;
          done = true;
          cancel();
          resolve();
        };
        check();
      });
    }
    let abandoned = 0;
    for (const h of this.held.values()) {
      if (!h.settled && h.started) {
        h.abandoned = true;
        abandoned++;
        h.abort.abort(new DeliveryError('ERR_STORE_CLOSED', 'the worker is stopping'));
      }
    }
    let released = 0;
    // Leases a claim of unknown outcome may have given this worker: taken in, so they are written or given back below.
    for (const dest of this.dests.values()) {
      if (!dest.orphans) continue;
      await this.reclaimOrphans(dest).catch((e: unknown) => this.storeError('looking for leases of unknown claims while stopping', e));
    }
    this.cancelFlushRetry?.();
    this.cancelFlushRetry = null;
    this.cancelFlushWait?.();
    if (this.flushing) await this.flushing;
    // Parked outcomes whose batch no claim of this worker holds any more: written (and found lost) below.
    this.outcomes.push(...this.parked);
    this.parked = [];
    try {
      // (an outcome refused for an older claim of a batch claimed again is written again: a second pass)
      for (let pass = 0; pass < 3 && this.outcomes.length > 0; pass++) await this.flush();
    } catch (e) {
      this.storeError('recording outcomes while stopping', e);
    }
    const leases = [...this.held.values()].filter((h) => !h.settled).map((h) => ({ id: h.id, token: h.token }));
    try {
      released = await this.store.release(leases, this.clock.wallNow());
    } catch (e) {
      this.storeError('releasing claims while stopping', e);
    }
    this.held.clear();
    this.parks.clear();
    this.deadlines.clear();
    this.cancelSweep?.();
    this.cancelSweep = null;
    this.sweepAt = Number.POSITIVE_INFINITY;
    this.isRunning = false;
    this.cancelWatchdog?.();
    this.cancelWatchdog = null;
    this.calls.clear();
    this.storeDown = false;
    if (this.ownTransport) await (this.transport as ReturnType<typeof createHttpTransport>).close().catch(() => {});
    return { released, abandoned };
  }
}
