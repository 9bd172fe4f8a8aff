// Load shedding for a server: a concurrency limit, a bounded queue with a queue timeout,
// and priority for first attempts (SRE book ch. 21–22: under overload, shed retries
// before first attempts). Time comes from the injected clock; nothing here does I/O.
import type { Clock } from '../core/types.js';

/** Why a request was shed (answered 503 without being served). */
export type ShedReason = 'queue_full' | 'queue_timeout' | 'evicted';

/** One request waiting for (or holding) a slot. */
export interface Ticket {
  /** A retry (attempt > 1): queued behind first attempts and evicted first. */
  readonly retry: boolean;
  /** Monotonic ms when the caller stops waiting (Infinity: no deadline). */
  readonly deadlineAt: number;
  /** Monotonic ms when it arrived. */
  readonly arrivedAt: number;
  /** Gets the slot (the caller must call `release()` once, when the request is done). */
  admit(queuedMs: number): void;
  /** Shed: answer 503. */
  shed(reason: ShedReason): void;
  /** Its deadline passed while it waited in the queue. */
  expire(): void;
}

interface Waiting {
  readonly t: Ticket;
  cancelTimer: (() => void) | null;
}

export interface AdmissionLimits {
  /** Requests served at once; null: no limit (nothing is ever queued or shed). */
  readonly maxConcurrent: number | null;
  /** Requests waiting for a slot; beyond it, a request is shed (or a queued retry evicted for a first attempt). */
  readonly maxQueue: number;
  /** The longest a request waits in the queue. */
  readonly queueTimeoutMs: number;
}

export class Admission {
  inFlight = 0;
  private readonly firsts: Waiting[] = [];
  private readonly retries: Waiting[] = [];

  constructor(
    private readonly limits: AdmissionLimits,
    private readonly clock: Clock,
  ) {}

  get queued(): number {
    return this.firsts.length + this.retries.length;
  }

  /**
   * A request arrives: it gets a slot now, waits in the queue, or is shed. Returns a
   * function that withdraws it from the queue (the caller went away); a no-op once admitted.
   */
  arrive(t: Ticket, now: number): () => void {
    const max = this.limits.maxConcurrent;
    if (max === null || (this.inFlight < max && this.queued === 0)) {
      this.inFlight++;
      t.admit(0);
      return NOOP;
    }
    if (this.queued >= this.limits.maxQueue) {
      // Full. A first attempt takes the place of the newest queued retry; anything else is shed.
      if (t.retry || this.retries.length === 0) {
        t.shed('queue_full');
        return NOOP;
      }
      const evicted = this.retries.pop()!;
      evicted.cancelTimer?.();
      evicted.t.shed('evicted');
    }
    const w: Waiting = { t, cancelTimer: null };
    (t.retry ? this.retries : this.firsts).push(w);
    // The timer knows which limit it was armed for: Node's timers may fire up to a
    // millisecond before performance.now() reaches their due time, so reading the clock
    // again here would call a spent deadline a queue timeout (503 instead of 504).
    const toDeadline = t.deadlineAt - now;
    const byDeadline = toDeadline <= this.limits.queueTimeoutMs;
    w.cancelTimer = this.clock.setTimer(
      () => {
        w.cancelTimer = null;
        if (!this.remove(w)) return;
        if (byDeadline) t.expire();
        else t.shed('queue_timeout');
      },
      Math.max(0, byDeadline ? toDeadline : this.limits.queueTimeoutMs),
      now,
    );
    return () => {
      if (this.remove(w)) w.cancelTimer?.();
    };
  }

  /** A served request is done: its slot goes to the next waiting one (first attempts first). */
  release(): void {
    this.inFlight--;
    const now = this.clock.now();
    // A handler that throws while being admitted must not leave the others waiting: the
    // loop goes on and the first error is thrown afterwards (as it would be without relent).
    let failure: { error: unknown } | null = null;
    while (this.inFlight < (this.limits.maxConcurrent ?? Infinity)) {
      const w = this.firsts.shift() ?? this.retries.shift();
      if (w === undefined) break;
      w.cancelTimer?.();
      w.cancelTimer = null;
      try {
        if (w.t.deadlineAt <= now) {
          w.t.expire();
          continue;
        }
        this.inFlight++;
        w.t.admit(now - w.t.arrivedAt);
      } catch (error) {
        failure ??= { error };
      }
    }
    if (failure !== null) throw failure.error;
  }

  private remove(w: Waiting): boolean {
    const q = w.t.retry ? this.retries : this.firsts;
    const i = q.indexOf(w);
    if (i < 0) return false;
    q.splice(i, 1);
    return true;
  }
}

const NOOP = (): void => {};
