/**
 * Load shedding for one destination: a rate limit that a destination's quota can be
 * written as ("50,000 requests per minute"). Pure: time is passed in. (The concurrency
 * limit that shrinks when a destination says it is overloaded is the core's AIMD,
 * core/concurrency.ts, shared with the HTTP client.)
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

  constructor(
    readonly requests: number,
    readonly perMs: number,
  ) {
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
