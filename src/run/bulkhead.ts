import { invalidPolicy, RelentError } from '../core/errors.js';
import { WaiterQueue, type Waiter } from './waiters.js';

/**
 * A bulkhead: a cap on the calls in flight to one dependency, with a bounded
 * FIFO queue behind it, so a slow dependency cannot tie up the caller. A free slot is
 * taken synchronously without allocating (`tryAcquire`); a full queue rejects at once
 * with `ERR_BULKHEAD_FULL`; a queued caller whose signal aborts leaves the queue.
 */
export interface BulkheadOptions {
  /** Calls allowed in flight at the same time. */
  readonly maxConcurrent?: number;
  /** Callers allowed to wait for a slot; 0 → reject as soon as every slot is taken. */
  readonly maxQueue?: number;
}

export type ResolvedBulkheadOptions = { readonly [K in keyof BulkheadOptions]-?: number };

/** relent's bulkhead defaults (a queue of 0, as in Polly and cockatiel: overflow is rejected, not delayed). */
export const BULKHEAD_DEFAULTS: ResolvedBulkheadOptions = Object.freeze({ maxConcurrent: 10, maxQueue: 0 });

export interface Bulkhead {
  readonly options: ResolvedBulkheadOptions;
  /** Slots in use. */
  readonly active: number;
  /** Callers waiting for a slot. */
  readonly queued: number;
  /** Takes a free slot and returns true, or returns false (nothing queued, nothing allocated). */
  tryAcquire(): boolean;
  /**
   * Resolves when the caller holds a slot (at once when one is free). Rejects at once
   * with RelentError `ERR_BULKHEAD_FULL` when the queue is full, and with the signal's
   * reason when it aborts before a slot was handed over (the caller leaves the queue).
   */
  acquire(signal?: AbortSignal | null): Promise<void>;
  /** Gives a slot back; the longest-waiting caller gets it. */
  release(): void;
}

const RESOLVED: Promise<void> = Promise.resolve();

const MAX = 1e9;

export function createBulkhead(options: BulkheadOptions = {}): Bulkhead {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) throw invalidPolicy('bulkhead', 'an object', options);
  for (const k of Object.keys(options)) {
    if (k !== 'maxConcurrent' && k !== 'maxQueue')
      throw invalidPolicy(`bulkhead.${k}`, 'absent (a bulkhead takes maxConcurrent, maxQueue)', (options as Record<string, unknown>)[k]);
  }
  const int = (key: keyof BulkheadOptions, min: number): number => {
    const v = options[key] ?? BULKHEAD_DEFAULTS[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > MAX) throw invalidPolicy(key, `an integer in [${min}, ${MAX}]`, v);
    return v;
  };
  const resolved = Object.freeze({ maxConcurrent: int('maxConcurrent', 1), maxQueue: int('maxQueue', 0) });
  return new Semaphore(resolved);
}

class Semaphore implements Bulkhead {
  readonly options: ResolvedBulkheadOptions;
  active = 0;
  private readonly max: number;
  private readonly maxQueue: number;
  private readonly waiters = new WaiterQueue<Waiter>();
  get queued(): number {
    return this.waiters.size;
  }

  constructor(options: ResolvedBulkheadOptions) {
    this.options = options;
    this.max = options.maxConcurrent;
    this.maxQueue = options.maxQueue;
  }

  tryAcquire(): boolean {
    if (this.active < this.max) {
      this.active++;
      return true;
    }
    return false;
  }

  acquire(signal?: AbortSignal | null): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.active < this.max) {
      this.active++;
      return RESOLVED;
    }
    if (this.queued >= this.maxQueue) {
      return Promise.reject(
        new RelentError('ERR_BULKHEAD_FULL', `The bulkhead is full (${this.active} of ${this.max} calls in flight, ${this.queued} of ${this.maxQueue} queued)`),
      );
    }
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = { prev: null, next: null, resolve, reject, signal: signal ?? null, onAbort: null };
      this.waiters.push(w);
    });
  }

  release(): void {
    const w = this.waiters.head;
    if (w !== null) {
      // Hand the slot straight to the longest waiter: `active` does not change.
      this.waiters.remove(w);
      w.resolve();
      return;
    }
    if (this.active === 0) throw new RelentError('ERR_INVALID_INPUT', 'Bulkhead.release() called without a slot held');
    this.active--;
  }
}
