import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { createRetryBudget, type RetryBudget } from '../core/budget.js';
import type { Fleet } from '../core/fleet.js';
import {
  afterRetry, attemptBudgetMs, beginAttempt, decide, isIdempotent, preflight, startOperation, type OperationState,
} from '../core/decide.js';
import { errorClassOfCode } from '../core/error-codes.js';
import type { Clock, Decision, DecisionResult, DecisionWhy, ErrorClass, Observation, Random } from '../core/types.js';
import { classifyWireError } from '../http/classify.js';
import { formatIdempotencyKey } from '../http/idempotency.js';
import { systemClock, systemRandom } from '../run/clock.js';
import { encodeBatch } from './batching.js';
import { resolveDestinations, resolveWorkerSettings, type DestinationOptions, type ResolvedDestination, type WorkerSettings } from './config.js';
import { DeliveryError } from './errors.js';
import { AimdLimiter, SlidingWindowLimiter } from './limits.js';
import { createHttpTransport, type Transport, type TransportResult } from './transport.js';
import type { AttemptRecord, ClaimedBatch, DeliveryStore, Outcome } from './types.js';

/** Fields every delivery event carries. */
interface BatchRef {
  readonly destination: string;
  readonly batchId: number;
  /** The batch's idempotency key (also the operationId of its attempts). */
  readonly key: string;
  readonly items: number;
}

/**
 * One event per attempt (R13's fields; the operation is the batch, its id the batch's
 * idempotency key), then what happened to the batch. No payload, header or query
 * string ever appears in an event (R14).
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
}

export interface DeliveryWorker {
  readonly id: string;
  /** Starts claiming and delivering. */
  start(): void;
  /** Looks for work now (enqueue in the same process calls it). */
  wake(): void;
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
  readonly aimd: AimdLimiter;
  readonly rate: SlidingWindowLimiter | null;
  readonly budget: RetryBudget | null;
  inflight: number;
  pausedUntil: number;
}

interface Held {
  readonly id: number;
  readonly token: number;
  readonly dest: Dest;
  readonly abort: AbortController;
  /** Set when stop() gave up waiting: the result is not recorded, the claim is released. */
  abandoned: boolean;
  /** The outcome is waiting to be written. */
  settled: boolean;
  /** The attempt timeout fired. */
  timedOut: boolean;
}

const CONNECT_PHASE: ReadonlySet<ErrorClass> = new Set(['connect_refused', 'dns', 'connect_timeout', 'tls']);

/**
 * Turns what a transport threw into an observation. The class comes from the error's
 * code (src/http/classify.ts's table); undici's `request` does not say whether request
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
  private outcomes: Outcome[] = [];
  private readonly c: WorkerCounters = {
    attempts: 0, deliveredBatches: 0, deliveredItems: 0, deferredBatches: 0, droppedBatches: 0, droppedItems: 0, inflight: 0, leaseLost: 0, storeErrors: 0,
  };
  private isRunning = false;
  private stopping = false;
  private cycling: Promise<void> | null = null;
  private again = false;
  private cancelCycle: (() => void) | null = null;
  private cycleDue = Number.POSITIVE_INFINITY;
  private cancelRenew: (() => void) | null = null;
  private cancelPurge: (() => void) | null = null;
  private storeFailures = 0;
  /** not_before times this worker stored and has not reached yet: a cycle runs at each, not a poll later. */
  private readonly wakeTimes = new Set<number>();
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
    this.settings = resolveWorkerSettings({
      ...(o.leaseMs !== undefined ? { leaseMs: o.leaseMs } : {}),
      ...(o.pollMs !== undefined ? { pollMs: o.pollMs } : {}),
      ...(o.claimChunk !== undefined ? { claimChunk: o.claimChunk } : {}),
      ...(o.stopTimeoutMs !== undefined ? { stopTimeoutMs: o.stopTimeoutMs } : {}),
      ...(o.retainDeliveredMs !== undefined ? { retainDeliveredMs: o.retainDeliveredMs } : {}),
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
      this.dests.set(d.name, {
        d,
        aimd: new AimdLimiter(d.concurrency),
        rate: d.rateLimit ? new SlidingWindowLimiter(d.rateLimit.requests, d.rateLimit.perMs) : null,
        budget: budgets && d.policy.budget ? (fleet !== null ? fleet.budget(d.name, d.policy.budget) : createRetryBudget(d.policy.budget)) : null,
        inflight: 0,
        pausedUntil: 0,
      });
    }
  }

  get running(): boolean {
    return this.isRunning;
  }

  counters(): Readonly<WorkerCounters> {
    return { ...this.c, inflight: this.held.size };
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
    this.schedule(0);
    this.armRenew();
    this.armPurge();
  }

  wake(): void {
    if (this.isRunning && !this.stopping) this.schedule(0);
  }

  /** Runs a cycle after `ms` (an earlier request wins; a cycle in progress runs again at its end). */
  private schedule(ms: number): void {
    if (!this.isRunning || this.stopping) return;
    if (this.cycling) {
      if (ms === 0) this.again = true;
      return;
    }
    const due = this.clock.now() + ms;
    if (this.cancelCycle && this.cycleDue <= due) return;
    this.cancelCycle?.();
    this.cycleDue = due;
    this.cancelCycle = this.clock.setTimer(() => {
      this.cancelCycle = null;
      this.cycleDue = Number.POSITIVE_INFINITY;
      this.runCycle();
    }, ms);
  }

  private runCycle(): void {
    if (this.cycling || !this.isRunning) return;
    this.again = false;
    this.cycling = this.cycle().then(
      (next) => {
        this.cycling = null;
        this.storeFailures = 0;
        this.schedule(this.again ? 0 : next);
        this.notifyIdle();
      },
      (e: unknown) => {
        this.cycling = null;
        this.storeError('a delivery cycle', e);
        // Back off while the store fails (full disk, database down), up to 5 s.
        this.storeFailures++;
        this.schedule(Math.min(5_000, this.settings.pollMs * 2 ** Math.min(this.storeFailures, 10)));
        this.notifyIdle();
      },
    );
  }

  private notifyIdle(): void {
    const w = this.idleWaiters;
    this.idleWaiters = [];
    for (const f of w) f();
  }

  private storeError(during: string, e: unknown): void {
    this.c.storeErrors++;
    const error = DeliveryError.is(e) ? e : new DeliveryError('ERR_STORE', `${during}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    this.emit({ type: 'store_error', during, error });
  }

  /** One pass: write finished outcomes, form due batches, claim what the limits allow, start deliveries. Returns ms to the next pass. */
  private async cycle(): Promise<number> {
    await this.flush();
    if (this.stopping) return this.settings.pollMs;
    const now = this.clock.wallNow();
    let wait = this.settings.pollMs;
    for (const at of this.wakeTimes) {
      if (at <= now) this.wakeTimes.delete(at); // due: this cycle claims it
      else if (at - now < wait) wait = at - now;
    }
    let more = false;
    for (const dest of this.dests.values()) {
      if (this.stopping) break;
      const d = dest.d;
      if (dest.pausedUntil > now) {
        wait = Math.min(wait, dest.pausedUntil - now);
        continue;
      }
      let room = dest.aimd.limit - dest.inflight;
      if (room <= 0) continue; // a finishing delivery wakes the worker
      if (dest.rate) {
        const allowed = dest.rate.available(now);
        if (allowed <= 0) {
          wait = Math.min(wait, Math.max(1, dest.rate.nextAt(now) - now));
          continue;
        }
        room = Math.min(room, allowed);
      }
      room = Math.min(room, this.settings.claimChunk);
      const formed = await this.store.formBatches(d.name, d.batch, now, this.settings.claimChunk);
      // A partial batch falls due by age: look again exactly then (or at once if more can be sealed now).
      if (formed.nextAt !== null) {
        if (formed.nextAt <= now) more = true;
        else wait = Math.min(wait, formed.nextAt - now);
      }
      const claimed = await this.store.claim(d.name, room, now, this.settings.leaseMs, this.id);
      if (claimed.length === 0) continue;
      dest.rate?.take(claimed.length, now);
      if (claimed.length === room) more = true;
      for (const b of claimed) void this.deliver(dest, b);
    }
    return more ? 0 : wait;
  }

  /** Writes finished outcomes (fenced). On a store error they stay queued for the next cycle. */
  private async flush(): Promise<void> {
    if (this.outcomes.length === 0) return;
    const batch = this.outcomes;
    this.outcomes = [];
    let res;
    try {
      res = await this.store.complete(batch);
    } catch (e) {
      this.outcomes = batch.concat(this.outcomes);
      throw e;
    }
    for (const id of res.applied) this.held.delete(id);
    for (const id of res.lost) {
      const h = this.held.get(id);
      this.held.delete(id);
      this.c.leaseLost++;
      this.emit({ type: 'lease_lost', destination: h?.dest.d.name ?? '', batchId: id });
    }
  }

  private armRenew(): void {
    const every = Math.max(1, Math.floor(this.settings.leaseMs / 3));
    this.cancelRenew = this.clock.setTimer(() => {
      this.cancelRenew = null;
      if (!this.isRunning) return;
      const leases = [...this.held.values()].filter((h) => !h.abandoned).map((h) => ({ id: h.id, token: h.token }));
      this.store.renew(leases, this.clock.wallNow(), this.settings.leaseMs).then((lost) => {
        for (const id of lost) {
          const h = this.held.get(id);
          if (!h) continue;
          // Another worker has it now: stop caring; our result would be refused by the fence anyway.
          this.held.delete(id);
          this.c.leaseLost++;
          this.emit({ type: 'lease_lost', destination: h.dest.d.name, batchId: id });
        }
      }, (e: unknown) => this.storeError('renewing leases', e)).finally(() => {
        if (this.isRunning) this.armRenew();
      });
    }, every);
  }

  private armPurge(): void {
    const every = 600_000;
    this.cancelPurge = this.clock.setTimer(() => {
      this.cancelPurge = null;
      if (!this.isRunning) return;
      this.store.purgeDelivered(this.clock.wallNow() - this.settings.retainDeliveredMs)
        .catch((e: unknown) => this.storeError('purging delivered batches', e))
        .finally(() => {
          if (this.isRunning) this.armPurge();
        });
    }, every);
  }

  /** The core's operation state of a claimed batch: new on its first attempt (of a round), else as stored. */
  private operationOf(d: ResolvedDestination, b: ClaimedBatch, now: number): OperationState {
    if (b.attempt === 0 || b.opStartedAt === null || b.opDeadlineAt === null) {
      return startOperation(d.policy, { now, method: d.method, idempotencyKey: b.key });
    }
    return {
      attempt: b.attempt,
      startedAt: b.opStartedAt,
      deadlineAt: b.opDeadlineAt,
      idempotent: isIdempotent(d.policy, { method: d.method, idempotencyKey: b.key }),
      prevDelayMs: b.prevDelayMs,
      lastBudgetCost: 0,
      throttled: b.opThrottled,
    };
  }

  private async deliver(dest: Dest, b: ClaimedBatch): Promise<void> {
    const d = dest.d;
    const h: Held = { id: b.id, token: b.token, dest, abort: new AbortController(), abandoned: false, settled: false, timedOut: false };
    this.held.set(b.id, h);
    dest.inflight++;
    const ref: BatchRef = { destination: d.name, batchId: b.id, key: b.key, items: b.items.length };
    try {
      const startWall = this.clock.wallNow();
      let state = this.operationOf(d, b, startWall);
      const base = { id: b.id, token: b.token, opStartedAt: state.startedAt, opDeadlineAt: state.deadlineAt };
      const refused = preflight(state, startWall);
      if (refused) {
        // The operation's deadline passed while the batch waited: no call; kept as dropped.
        this.settle(h, {
          ...base, state: 'dropped', notBefore: b.notBefore, attempt: state.attempt, prevDelayMs: state.prevDelayMs, opThrottled: state.throttled ?? 0,
          lastStatus: null, lastErrorClass: null, lastDecision: refused.decision, lastWhy: refused.why, finishedAt: startWall, record: null,
        });
        this.countDrop(ref, refused.decision, refused.why, null, null, state.attempt);
        return;
      }
      state = beginAttempt(state);
      const remainingMs = Math.max(0, state.deadlineAt - startWall);
      const timeoutMs = Math.max(1, attemptBudgetMs(d.policy, state, startWall));
      const { body, contentType } = encodeBatch(d.format, b.key, b.items);
      const operationId = b.key;
      const requestId = b.round > 1 ? `${b.key}/round-${b.round}/attempt-${state.attempt}` : `${b.key}/attempt-${state.attempt}`;
      const headers = { ...d.headers, 'content-type': contentType, 'idempotency-key': formatIdempotencyKey(b.key), 'x-request-id': requestId };
      const generation = dest.aimd.start();
      const t0 = this.clock.now();
      this.watch(h, t0 + timeoutMs);
      let result: TransportResult;
      try {
        result = await this.transport({
          destination: d, url: d.url, method: d.method, headers, body, batchKey: b.key, attempt: state.attempt, items: b.items,
          signal: h.abort.signal, timeoutMs,
        });
      } catch (e) {
        result = h.timedOut ? { errorClass: 'timeout', sent: 'unknown' } : classifyThrown(e);
      } finally {
        this.deadlines.delete(h);
      }
      if (h.abandoned || !this.held.has(b.id)) return; // stopped meanwhile, or the lease was lost
      const elapsedMs = Math.max(0, Math.round(this.clock.now() - t0));
      if (h.timedOut && !('status' in result)) result = { errorClass: 'timeout', sent: 'unknown' };
      const obs: Observation = 'status' in result
        ? { status: result.status, ...(result.headers ? { headers: result.headers } : {}), elapsedMs }
        : { errorClass: result.errorClass, ...(result.sent ? { sent: result.sent } : {}), elapsedMs };
      const now = this.clock.wallNow();
      const res: DecisionResult = decide(d.policy, state, obs, { now, wallNow: now, random: this.random, budget: dest.budget, durable: true });
      this.c.attempts++;
      const status = obs.status ?? null;
      const errorClass = obs.errorClass ?? null;
      this.emit({
        type: 'attempt', ...ref, operationId, requestId, round: b.round, attempt: state.attempt, method: d.method, endpoint: endpointOf(d.url),
        status, errorClass, elapsedMs, remainingMs, decision: res.decision, why: res.why, delayMs: res.delayMs,
        retryAfterMs: res.retryAfterMs, retryAfterValid: res.retryAfterValid, ts: Math.round(now),
      });
      this.shed(dest, status, res, generation, now);
      const whole = (v: number | null): number | null => (v === null ? null : Math.round(v));
      const record: AttemptRecord = {
        round: b.round, attempt: state.attempt, at: Math.round(now), status, errorClass, elapsedMs, decision: res.decision, why: res.why,
        delayMs: whole(res.delayMs), retryAfterMs: whole(res.retryAfterMs), worker: this.id,
      };
      const last = { lastStatus: status, lastErrorClass: errorClass, lastDecision: res.decision, lastWhy: res.why, record };
      if (res.decision === 'return') {
        this.settle(h, { ...base, ...last, state: 'delivered', notBefore: b.notBefore, attempt: state.attempt, prevDelayMs: state.prevDelayMs,
          opThrottled: state.throttled ?? 0, finishedAt: now });
        this.c.deliveredBatches++;
        this.c.deliveredItems += b.items.length;
        this.emit({ type: 'delivered', ...ref, attempts: state.attempt, ts: Math.round(now) });
      } else if ((res.decision === 'retry' || res.decision === 'defer') && res.delayMs !== null) {
        // The core chose the wait; the queue only stores it (seconds to hours), with the
        // operation state afterRetry() gives (a 429 that did not count is remembered).
        const next = afterRetry(state, res);
        const notBefore = Math.round(now + res.delayMs);
        this.settle(h, {
          ...base, ...last, state: 'queued', notBefore, attempt: next.attempt, prevDelayMs: next.prevDelayMs, opThrottled: next.throttled ?? 0, finishedAt: null,
        });
        this.c.deferredBatches++;
        this.emit({ type: 'deferred', ...ref, notBefore, delayMs: res.delayMs, ts: Math.round(now) });
        this.wakeAt(notBefore);
      } else {
        this.settle(h, {
          ...base, ...last, state: 'dropped', notBefore: b.notBefore, attempt: state.attempt, prevDelayMs: state.prevDelayMs, opThrottled: state.throttled ?? 0, finishedAt: now,
        });
        this.countDrop(ref, res.decision, res.why, status, errorClass, state.attempt);
      }
    } catch (e) {
      // Not expected (encoding, a throwing onEvent): the claim is left to expire, so the batch comes back.
      this.storeError(`delivering batch ${b.id}`, e);
    } finally {
      dest.inflight--;
      this.notifyIdle();
      this.schedule(0);
    }
  }

  /** Makes sure a cycle runs at wall time `at` (a retry this worker scheduled falls due). */
  private wakeAt(at: number): void {
    if (this.wakeTimes.size < 10_000) this.wakeTimes.add(at); // past that, polling finds the rest
    if (!this.cycling) this.schedule(Math.max(0, at - this.clock.wallNow()));
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

  private settle(h: Held, o: Outcome): void {
    h.settled = true;
    this.outcomes.push(o);
  }

  private countDrop(ref: BatchRef, reason: Decision, why: DecisionWhy | null, status: number | null, errorClass: ErrorClass | null, attempts: number): void {
    this.c.droppedBatches++;
    this.c.droppedItems += ref.items;
    this.emit({ type: 'dropped', ...ref, reason, why, status, errorClass, attempts, ts: Math.round(this.clock.wallNow()) });
  }

  /** Load shedding: a throttling answer halves the destination's concurrency (once per wave) and may pause it. */
  private shed(dest: Dest, status: number | null, res: DecisionResult, generation: number, now: number): void {
    const d = dest.d;
    if (status !== null && d.concurrency.backoffOn.includes(status)) {
      if (dest.aimd.throttled(generation)) this.emit({ type: 'concurrency', destination: d.name, limit: dest.aimd.limit, cause: 'throttled' });
      if (d.maxPauseMs > 0 && res.retryAfterMs !== null && res.retryAfterValid !== false && res.retryAfterMs > 0) {
        const until = now + Math.min(res.retryAfterMs, d.maxPauseMs);
        if (until > dest.pausedUntil) {
          dest.pausedUntil = until;
          this.emit({ type: 'paused', destination: d.name, untilMs: until });
        }
      }
    } else if (res.decision === 'return') {
      if (dest.aimd.succeeded()) this.emit({ type: 'concurrency', destination: d.name, limit: dest.aimd.limit, cause: 'recovered' });
    }
  }

  async stop(): Promise<{ released: number; abandoned: number }> {
    if (!this.isRunning) return { released: 0, abandoned: 0 };
    this.stopping = true;
    this.cancelCycle?.();
    this.cancelCycle = null;
    this.cancelRenew?.();
    this.cancelRenew = null;
    this.cancelPurge?.();
    this.cancelPurge = null;
    if (this.cycling) await this.cycling.catch(() => {});
    // Wait for requests in flight (their outcomes are still recorded), at most stopTimeoutMs.
    const inFlight = (): number => [...this.held.values()].filter((h) => !h.settled).length;
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
      if (!h.settled) {
        h.abandoned = true;
        abandoned++;
        h.abort.abort(new DeliveryError('ERR_STORE_CLOSED', 'the worker is stopping'));
      }
    }
    let released = 0;
    try {
      await this.flush();
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
    this.deadlines.clear();
    this.cancelSweep?.();
    this.cancelSweep = null;
    this.sweepAt = Number.POSITIVE_INFINITY;
    this.isRunning = false;
    if (this.ownTransport) await (this.transport as ReturnType<typeof createHttpTransport>).close().catch(() => {});
    return { released, abandoned };
  }
}
