// The delivery worker: it claims batches from the store, delivers them with the core's
// decisions, and writes their outcomes, fenced. Its parts, one responsibility each:
// worker-claims.ts (the claim loop), worker-deliver.ts (one batch's delivery),
// worker-outcomes.ts (outcome writes), worker-leases.ts (renewals and retention),
// worker-store-link.ts (the store's health), worker-shed.ts (load shedding).
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { createRetryBudget } from '../core/budget.js';
import { createLimitAlgorithm } from '../core/concurrency.js';
import type { Fleet } from '../core/fleet.js';
import type { Clock, Random } from '../core/types.js';
import type { Instrumentation } from '../run/run.js';
import { clockOption, systemClock, systemRandom } from '../shared/clock.js';
import { resolveDestinations, resolveWorkerSettings, type DestinationOptions, type ResolvedDestination, type WorkerSettings } from './config.js';
import { DeliveryError } from './errors.js';
import type { DeliveryEvent } from './events.js';
import { SlidingWindowLimiter } from './limits.js';
import { createHttpTransport, type Transport } from './transport.js';
import type { DeliveryStore } from './types.js';
import { ClaimLoop } from './worker-claims.js';
import { BatchDelivery } from './worker-deliver.js';
import { LeaseKeeper } from './worker-leases.js';
import { OutcomeWriter } from './worker-outcomes.js';
import { newDest, type Dest, type Held, type WorkerCore, type WorkerCounters } from './worker-state.js';
import { StoreLink } from './worker-store-link.js';

export type { DeliveryAttemptEvent, DeliveryEvent } from './events.js';
export type { WorkerCounters } from './worker-state.js';
export { classifyThrown } from './worker-deliver.js';

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

export function createWorker(options: WorkerOptions): DeliveryWorker {
  return new Worker(options);
}

class Worker implements DeliveryWorker, WorkerCore {
  readonly id: string;
  readonly store: DeliveryStore;
  readonly clock: Clock;
  readonly random: Random;
  readonly transport: Transport;
  private readonly ownTransport: boolean;
  readonly settings: Required<WorkerSettings>;
  readonly dests = new Map<string, Dest>();
  readonly held = new Map<number, Held>();
  private readonly onEvent: ((e: DeliveryEvent) => void) | null;
  readonly instrumentation: Instrumentation | null;
  readonly aheadPerSlot: number;
  readonly c: WorkerCounters = {
    attempts: 0,
    deliveredBatches: 0,
    deliveredItems: 0,
    deferredBatches: 0,
    droppedBatches: 0,
    droppedItems: 0,
    inflight: 0,
    leaseLost: 0,
    storeErrors: 0,
  };
  isRunning = false;
  stopping = false;
  private unsubscribe: (() => Promise<void>) | null = null;
  private idleWaiters: (() => void)[] = [];
  readonly link: StoreLink = new StoreLink(this);
  readonly outcomes: OutcomeWriter = new OutcomeWriter(this);
  readonly leases: LeaseKeeper = new LeaseKeeper(this);
  readonly loop: ClaimLoop = new ClaimLoop(this);
  readonly delivery: BatchDelivery = new BatchDelivery(this);

  constructor(o: WorkerOptions) {
    this.store = o.store;
    this.clock = clockOption(o.clock) ?? systemClock;
    this.random = o.random ?? systemRandom;
    this.ownTransport = o.transport === undefined;
    this.transport = o.transport ?? createHttpTransport();
    this.onEvent = o.onEvent ?? null;
    this.instrumentation = o.instrumentation ?? null;
    this.aheadPerSlot = this.store.kind === 'sqlite' ? 10 : 4;
    this.settings = resolveWorkerSettings(
      {
        ...(o.leaseMs !== undefined ? { leaseMs: o.leaseMs } : {}),
        ...(o.pollMs !== undefined ? { pollMs: o.pollMs } : {}),
        ...(o.claimChunk !== undefined ? { claimChunk: o.claimChunk } : {}),
        ...(o.stopTimeoutMs !== undefined ? { stopTimeoutMs: o.stopTimeoutMs } : {}),
        ...(o.retainDeliveredMs !== undefined ? { retainDeliveredMs: o.retainDeliveredMs } : {}),
        ...(o.retainDroppedMs !== undefined ? { retainDroppedMs: o.retainDroppedMs } : {}),
        ...(o.storeTimeoutMs !== undefined ? { storeTimeoutMs: o.storeTimeoutMs } : {}),
      },
      'worker',
    );
    this.id = o.workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    const resolved = o.destinations instanceof Map ? (o.destinations as ReadonlyMap<string, ResolvedDestination>) : resolveDestinations(o.destinations);
    if (o.budget !== undefined && o.budget !== 'none' && o.budget !== 'policy') {
      throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`budget\` to be "none" or "policy", got ${JSON.stringify(o.budget)}`, { field: 'budget' });
    }
    const fleet = o.fleet ?? null;
    if (fleet !== null && (typeof fleet !== 'object' || typeof fleet.budget !== 'function')) {
      throw new DeliveryError('ERR_INVALID_CONFIG', 'Expected `fleet` to be a fleet (relent/fleet createRedisFleet())', { field: 'fleet' });
    }
    const budgets = o.budget === 'policy';
    for (const d of resolved.values()) {
      const sharedRate =
        d.rateLimit && d.rateLimit.scope === 'shared' ? { requests: d.rateLimit.requests, perMs: d.rateLimit.perMs + d.rateLimit.marginMs } : null;
      const sharedConcurrency = d.concurrency.scope === 'shared';
      this.dests.set(
        d.name,
        newDest(
          d,
          createLimitAlgorithm(
            { kind: 'aimd', initial: d.concurrency.initial, min: d.concurrency.min, max: d.concurrency.max, decrease: d.concurrency.decrease },
            `destinations.${d.name}.concurrency`,
          ),
          d.rateLimit && d.rateLimit.scope === 'worker' ? new SlidingWindowLimiter(d.rateLimit.requests, d.rateLimit.perMs) : null,
          sharedRate || sharedConcurrency ? { rate: sharedRate, concurrency: sharedConcurrency } : null,
          budgets && d.policy.budget ? (fleet !== null ? fleet.budget(d.name, d.policy.budget) : createRetryBudget(d.policy.budget)) : null,
        ),
      );
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

  emit(e: DeliveryEvent): void {
    if (this.onEvent) this.onEvent(e);
  }

  notifyIdle(): void {
    const w = this.idleWaiters;
    this.idleWaiters = [];
    for (const f of w) f();
  }

  storeError(during: string, e: unknown): void {
    this.c.storeErrors++;
    const error = DeliveryError.is(e) ? e : new DeliveryError('ERR_STORE', `${during}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    if (error.code === 'ERR_STORE_UNAVAILABLE') this.link.markDown();
    this.emit({ type: 'store_error', during, error });
  }

  start(): void {
    if (this.isRunning) return;
    this.isRunning = true;
    this.stopping = false;
    this.loop.start(this.clock.now());
    this.leases.start();
    // Wake-ups from other processes (PostgreSQL LISTEN/NOTIFY): new items, requeues, a resume.
    if (this.store.subscribe) {
      this.store
        .subscribe((destination) => {
          const dest = this.dests.get(destination);
          if (dest) this.loop.look(dest);
        })
        .then(
          (unsubscribe) => {
            if (this.isRunning && !this.stopping) this.unsubscribe = unsubscribe;
            else void unsubscribe().catch(() => {});
          },
          (e: unknown) => this.storeError('listening for new work', e),
        );
    }
  }

  wake(destinations?: Iterable<string>): void {
    if (!this.isRunning || this.stopping) return;
    if (destinations === undefined) {
      for (const dest of this.dests.values()) this.loop.look(dest);
      return;
    }
    for (const name of destinations) {
      const dest = this.dests.get(name);
      if (dest !== undefined) this.loop.look(dest);
    }
  }

  async stop(): Promise<{ released: number; abandoned: number }> {
    if (!this.isRunning) return { released: 0, abandoned: 0 };
    this.stopping = true;
    this.loop.stopTimers();
    this.leases.stop();
    this.link.stopProbing();
    const unsubscribe = this.unsubscribe;
    this.unsubscribe = null;
    await unsubscribe?.().catch(() => {});
    // Claim rounds under way end; batches claimed ahead and not started are given back below, untouched.
    await this.loop.stopRounds();
    await this.waitForRequests();
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
      await this.loop.reclaimOrphans(dest).catch((e: unknown) => this.storeError('looking for leases of unknown claims while stopping', e));
    }
    await this.outcomes.drain();
    const leases = [...this.held.values()].filter((h) => !h.settled).map((h) => ({ id: h.id, token: h.token }));
    try {
      released = await this.store.release(leases, this.clock.wallNow());
    } catch (e) {
      this.storeError('releasing claims while stopping', e);
    }
    this.held.clear();
    this.outcomes.clear();
    this.delivery.clear();
    this.isRunning = false;
    this.link.clear();
    if (this.ownTransport) await (this.transport as ReturnType<typeof createHttpTransport>).close().catch(() => {});
    return { released, abandoned };
  }

  /** Waits for requests in flight (their outcomes are still recorded), at most stopTimeoutMs. */
  private async waitForRequests(): Promise<void> {
    const inFlight = (): number => {
      let n = 0;
      for (const h of this.held.values()) if (h.started && !h.settled) n++;
      return n;
    };
    if (inFlight() === 0 || this.settings.stopTimeoutMs <= 0) return;
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
}
