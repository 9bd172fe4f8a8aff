/**
 * Load shedding for one destination: a rate limit that a destination's quota can
 * be written as ("50,000 requests per minute"), and a concurrency limit that shrinks
 * when the destination says it is overloaded and grows back slowly. Pure state
 * machines: time is passed in.
 */

/**
 * At most `requests` starts in any window of `perMs` ms (a sliding log: exact, not an
 * approximation, so a destination that counts per minute never sees more than its
 * limit from this process). Memory: one number per allowed request.
 */
export class SlidingWindowLimiter {
  private readonly log: Float64Array;
  private head = 0;
  private size = 0;

  constructor(readonly requests: number, readonly perMs: number) {
    this.log = new Float64Array(requests);
  }

  private expire(now: number): void {
    while (this.size > 0 && this.log[this.head]! <= now - this.perMs) {
      this.head = (this.head + 1) % this.requests;
      this.size--;
    }
  }

  /** How many requests may start now. */
  available(now: number): number {
    this.expire(now);
    return this.requests - this.size;
  }

  /** Records `n` starts at `now` (n <= available(now)). */
  take(n: number, now: number): void {
    this.expire(now);
    for (let i = 0; i < n && this.size < this.requests; i++) {
      this.log[(this.head + this.size) % this.requests] = now;
      this.size++;
    }
  }

  /** When the next request may start (now, when one may). */
  nextAt(now: number): number {
    this.expire(now);
    return this.size < this.requests ? now : this.log[this.head]! + this.perMs;
  }
}

export interface AimdOptions {
  readonly initial: number;
  readonly min: number;
  readonly max: number;
  /** Multiplier on a throttling answer (0.5 halves the limit). */
  readonly decrease: number;
  /** false: the limit stays at `initial`. */
  readonly adaptive: boolean;
}

/**
 * Additive increase, multiplicative decrease (TCP's congestion avoidance): the limit
 * is multiplied by `decrease` on a throttling answer (429, 503), at most once per
 * "generation" — answers to requests started before the last decrease do not count
 * again, so a burst of 429s from one wave halves the limit once, not to the floor —
 * and grows by 1 after `limit` successes in a row of generations (about one step per
 * round trip of a full window): slow recovery, fast backing off.
 */
export class AimdLimiter {
  private value: number;
  private generation = 0;
  private credit = 0;

  constructor(private readonly o: AimdOptions) {
    this.value = o.initial;
  }

  /** Requests that may be in flight. */
  get limit(): number {
    return Math.max(this.o.min, Math.min(this.o.max, Math.floor(this.value)));
  }

  /** The generation a request belongs to (call when it starts). */
  start(): number {
    return this.generation;
  }

  /** A throttling answer to a request of `generation`. Returns true if the limit shrank. */
  throttled(generation: number): boolean {
    if (!this.o.adaptive || generation !== this.generation) return false;
    const before = this.limit;
    this.value = Math.max(this.o.min, Math.floor(this.value * this.o.decrease));
    this.generation++;
    this.credit = 0;
    return this.limit !== before;
  }

  /** A successful answer. Returns true if the limit grew. */
  succeeded(): boolean {
    if (!this.o.adaptive || this.value >= this.o.max) return false;
    this.credit++;
    if (this.credit < this.limit) return false;
    this.credit = 0;
    this.value = Math.min(this.o.max, this.value + 1);
    return true;
  }
}
