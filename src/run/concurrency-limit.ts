import { createLimitAlgorithm, type LimitAlgorithm, type LimitChange, type LimitSpec, type ResolvedLimitSpec } from '../core/concurrency.js';
import { invalidPolicy, RelentError } from '../core/errors.js';
import { WaiterQueue, type Waiter } from './waiters.js';

/**
 * An adaptive concurrency limit for one dependency: the calls in flight stay within a
 * limit the algorithm (core/concurrency.ts: `aimd` or `gradient`) moves from what the
 * calls observe; calls over the limit wait in a bounded FIFO queue (within their
 * deadline: the executor gives up a wait when the deadline passes) or, when the queue is
 * full, are refused at once (`ERR_CONCURRENCY_LIMITED`, terminal `concurrency_limited`).
 *
 * It is a bulkhead whose size moves: the executor, the HTTP client, the interceptor, the
 * exchange's partners and the delivery worker use it in place of a fixed cap. Share one
 * per dependency.
 */
export type ConcurrencyLimitOptions = LimitSpec & {
  /** Calls allowed to wait for a slot; 0: refused as soon as the limit is reached. Default 100. */
  readonly maxQueue?: number;
};

export const CONCURRENCY_LIMIT_DEFAULTS = Object.freeze({ maxQueue: 100 });

/** What the limit tells about itself: every change of the limit, with the calls in flight then. */
export interface LimitEvent {
  readonly type: 'limit';
  /** Wall-clock epoch ms (from the clock given at creation). */
  readonly ts: number;
  /** The name given at creation (e.g. the dependency), or null. */
  readonly name: string | null;
  readonly limit: number;
  readonly inFlight: number;
  readonly queued: number;
  readonly cause: LimitChange;
}

/** How one call ended, for the algorithm (what the executor passes to release()). */
export interface LimitOutcome {
  /** When the call started and ended (the same monotonic clock). */
  readonly startedAt: number;
  readonly now: number;
  /** The limit's `generation` when the call started. */
  readonly generation: number;
  /** The dependency signalled overload (throttling status, refused connection). */
  readonly dropped: boolean;
}

export interface ConcurrencyLimit {
  readonly spec: ResolvedLimitSpec;
  readonly maxQueue: number;
  readonly algorithm: LimitAlgorithm;
  /** Calls allowed in flight now. */
  readonly limit: number;
  /** Calls in flight. */
  readonly active: number;
  /** Calls waiting for a slot. */
  readonly queued: number;
  /** Read when a call starts, passed back in its outcome. */
  readonly generation: number;
  /** Takes a slot and returns true, or returns false (nothing queued, nothing allocated). */
  tryAcquire(): boolean;
  /**
   * Resolves when the caller holds a slot. Rejects at once with `ERR_CONCURRENCY_LIMITED`
   * when the queue is full, and with the signal's reason when it aborts first.
   */
  acquire(signal?: AbortSignal | null): Promise<void>;
  /** Gives a slot back; with the call's outcome the algorithm learns from it (null: the call told nothing, e.g. cancelled). */
  release(outcome?: LimitOutcome | null): void;
}

const RESOLVED: Promise<void> = Promise.resolve();

export interface ConcurrencyLimitContext {
  /** Named in events and errors (e.g. the dependency). */
  readonly name?: string | null;
  /** Every change of the limit. */
  readonly onEvent?: ((event: LimitEvent) => void) | null;
  /** The wall clock for events' `ts`. Default Date.now. */
  readonly wallNow?: () => number;
  /** Field name in error messages (default `concurrencyLimit`). */
  readonly field?: string;
}

/** Validates the options (errors name the field) and makes the limit. */
export function createConcurrencyLimit(options: ConcurrencyLimitOptions, context: ConcurrencyLimitContext = {}): ConcurrencyLimit {
  const field = context.field ?? 'concurrencyLimit';
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw invalidPolicy(field, 'an object with `kind` ("aimd" or "gradient")', options);
  const { maxQueue: mq, ...spec } = options as ConcurrencyLimitOptions & Record<string, unknown>;
  const maxQueue = mq ?? CONCURRENCY_LIMIT_DEFAULTS.maxQueue;
  if (typeof maxQueue !== 'number' || !Number.isInteger(maxQueue) || maxQueue < 0 || maxQueue > 1e9)
    throw invalidPolicy(`${field}.maxQueue`, 'an integer in [0, 1e9]', maxQueue);
  const algorithm = createLimitAlgorithm(spec as LimitSpec, field);
  return new Limit(algorithm, maxQueue, context);
}

/** Whether a value is a concurrency limit made by createConcurrencyLimit (not options). */
export function isConcurrencyLimit(v: unknown): v is ConcurrencyLimit {
  return v instanceof Limit;
}

class Limit implements ConcurrencyLimit {
  active = 0;
  private readonly waiters = new WaiterQueue<Waiter>();
  get queued(): number {
    return this.waiters.size;
  }
  private readonly name: string | null;
  private readonly onEvent: ((event: LimitEvent) => void) | null;
  private readonly wallNow: () => number;

  constructor(
    readonly algorithm: LimitAlgorithm,
    readonly maxQueue: number,
    context: ConcurrencyLimitContext,
  ) {
    this.name = context.name ?? null;
    this.onEvent = context.onEvent ?? null;
    this.wallNow = context.wallNow ?? Date.now;
  }

  get spec(): ResolvedLimitSpec {
    return this.algorithm.spec;
  }

  get limit(): number {
    return this.algorithm.limit;
  }

  get generation(): number {
    return this.algorithm.generation;
  }

  tryAcquire(): boolean {
    if (this.active < this.algorithm.limit) {
      this.active++;
      return true;
    }
    return false;
  }

  acquire(signal?: AbortSignal | null): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.waiters.head === null && this.active < this.algorithm.limit) {
      this.active++;
      return RESOLVED;
    }
    if (this.queued >= this.maxQueue) {
      return Promise.reject(
        new RelentError(
          'ERR_CONCURRENCY_LIMITED',
          `The concurrency limit${this.name ? ` of ${this.name}` : ''} is reached (${this.active} of ${this.algorithm.limit} calls in flight, ${this.queued} of ${this.maxQueue} queued)`,
        ),
      );
    }
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = { prev: null, next: null, resolve, reject, signal: signal ?? null, onAbort: null };
      this.waiters.push(w);
    });
  }

  release(outcome?: LimitOutcome | null): void {
    if (this.active === 0) throw new RelentError('ERR_INVALID_INPUT', 'ConcurrencyLimit.release() called without a slot held');
    if (outcome) {
      const change = this.algorithm.sample({
        startedAt: outcome.startedAt,
        now: outcome.now,
        inFlight: this.active,
        generation: outcome.generation,
        dropped: outcome.dropped,
      });
      if (change !== null && this.onEvent !== null) {
        try {
          this.onEvent({
            type: 'limit',
            ts: this.wallNow(),
            name: this.name,
            limit: this.algorithm.limit,
            inFlight: this.active - 1,
            queued: this.queued,
            cause: change,
          });
        } catch {
          // A listener cannot break the limit.
        }
      }
    }
    this.active--;
    // Hand free slots to the longest waiters (the limit may have grown).
    while (this.waiters.head !== null && this.active < this.algorithm.limit) {
      const w = this.waiters.head;
      this.waiters.remove(w);
      this.active++;
      w.resolve();
    }
  }
}
