import { invalidPolicy, RelentError } from '../core/errors.js';
import { createTokenBucket, type RateLimitSpec, type ResolvedRateLimitSpec, type TokenBucket, type TokenBucketState } from '../core/token-bucket.js';
import type { Clock } from '../core/types.js';
import { systemClock } from '../shared/clock.js';
import { WaiterQueue, type Waiter } from './waiters.js';

/**
 * A rate limit on the calls to one dependency, as the executor uses it: a call takes a
 * token (core/token-bucket.ts) before it is made; when none is there it waits in a FIFO
 * queue — only the first in line has a timer, set for when its token comes — for at most
 * `maxWaitMs` and never past its deadline. A call that could not get its token in time
 * is refused at once, before it waits (`ERR_RATE_LIMITED`, terminal `rate_limited`): the
 * wait is known in advance from the rate and the calls ahead of it.
 *
 * The bucket may be this process's own (createTokenBucket) or its share of a fleet's
 * (relent/fleet `fleet.rateLimit()`). Share one per dependency or per key.
 */
export interface RateLimiter {
  readonly spec: ResolvedRateLimitSpec;
  readonly bucket: TokenBucket;
  /** Calls waiting for a token. */
  readonly queued: number;
  /** Takes a token now if one is there and nobody waits for one. */
  tryAcquire(now: number): boolean;
  /**
   * Resolves when the caller holds a token. Rejects at once with `ERR_RATE_LIMITED` when
   * its token would come later than `min(maxWaitMs, remainingMs)` from now (the queue
   * ahead included), later with `ERR_RATE_LIMITED` if a server's wait pushed it past that,
   * and with the signal's reason when it aborts first.
   */
  acquire(now: number, remainingMs: number, signal?: AbortSignal | null): Promise<void>;
  state(now: number): TokenBucketState & { readonly queued: number };
}

interface RateWaiter extends Waiter {
  /** The latest monotonic time this caller may still get its token. */
  until: number;
}

/** Makes a rate limiter from a spec (a bucket of this process) or around a bucket (e.g. a fleet's share). */
export function createRateLimiter(spec: RateLimitSpec | TokenBucket, clock: Clock = systemClock, field = 'rateLimit'): RateLimiter {
  if (typeof spec !== 'object' || spec === null) throw invalidPolicy(field, 'an object with `ratePerSecond`', spec);
  const bucket = isBucket(spec) ? spec : createTokenBucket(spec, field);
  return new Limiter(bucket, clock);
}

function isBucket(v: object): v is TokenBucket {
  return typeof (v as TokenBucket).tryTake === 'function' && typeof (v as TokenBucket).readyAt === 'function';
}

class Limiter implements RateLimiter {
  private readonly waiters = new WaiterQueue<RateWaiter>();
  get queued(): number {
    return this.waiters.size;
  }
  private cancelTimer: (() => void) | null = null;
  private timerAt = Infinity;

  constructor(
    readonly bucket: TokenBucket,
    private readonly clock: Clock,
  ) {}

  get spec(): ResolvedRateLimitSpec {
    return this.bucket.spec;
  }

  tryAcquire(now: number): boolean {
    this.bucket.arrived(now);
    return this.waiters.head === null && this.bucket.tryTake(now);
  }

  acquire(now: number, remainingMs: number, signal?: AbortSignal | null): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    const bound = Math.min(this.bucket.spec.maxWaitMs, remainingMs);
    const at = this.bucket.readyAt(now, this.queued);
    if (at - now > bound) return Promise.reject(this.refusal(at - now, bound));
    return new Promise<void>((resolve, reject) => {
      const w: RateWaiter = { prev: null, next: null, until: now + bound, resolve, reject, signal: signal ?? null, onAbort: null };
      this.waiters.push(w, () => this.arm(this.clock.now()));
      this.arm(now);
    });
  }

  private refusal(waitMs: number, bound: number): RelentError {
    const s = this.bucket.spec;
    return new RelentError(
      'ERR_RATE_LIMITED',
      `The rate limit (${Math.round(this.bucket.state(this.clock.now()).ratePerSecond * 100) / 100} calls/s of ${s.ratePerSecond}) has no token for ${Math.ceil(waitMs)} ms, longer than the call may wait (${Math.floor(bound)} ms; ${this.queued} waiting)`,
    );
  }

  /** Serves the first in line as far as tokens allow, then sets one timer for the next. */
  private arm(now: number): void {
    while (this.waiters.head !== null) {
      const w = this.waiters.head;
      if (this.bucket.tryTake(now)) {
        this.waiters.remove(w);
        w.resolve();
        continue;
      }
      const at = this.bucket.readyAt(now, 0);
      if (at > w.until) {
        // A server's wait (or a lowered share) pushed its token past what it may wait.
        this.waiters.remove(w);
        w.reject(this.refusal(at - now, w.until - now));
        continue;
      }
      if (this.cancelTimer !== null && this.timerAt <= at) return;
      this.cancelTimer?.();
      this.timerAt = at;
      // At least 1 ms: a token due "now" that tryTake refused (fractions) comes within it.
      this.cancelTimer = this.clock.setTimer(() => this.fire(), Math.max(1, Math.ceil(at - now)), now);
      return;
    }
    if (this.cancelTimer !== null) {
      this.cancelTimer();
      this.cancelTimer = null;
      this.timerAt = Infinity;
    }
  }

  private fire(): void {
    this.cancelTimer = null;
    this.timerAt = Infinity;
    this.arm(this.clock.now());
  }

  state(now: number): TokenBucketState & { readonly queued: number } {
    return { ...this.bucket.state(now), queued: this.queued };
  }
}
