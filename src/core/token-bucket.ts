import { invalidPolicy } from './errors.js';
import type { StatusSet } from './policy.js';
import { parseRateLimit } from './ratelimit.js';

/**
 * A rate limit on the calls to one dependency (or one key): a token bucket that fills at
 * `ratePerSecond` up to `burst` tokens, one token per call. It honours what the
 * dependency says about its own limits:
 * - a throttling answer (429, or 503 with a wait) pauses the bucket for the server's
 *   wait (Retry-After, or a RateLimit field's reset) and lowers the rate by `decrease`
 *   — at most once a second, so one burst of 429s lowers it once; the rate then grows
 *   back linearly to its configured value over `recoverMs` (slow recovery, fast backing
 *   off, as TCP and the delivery worker's concurrency do);
 * - a `RateLimit` field's remaining quota (`r`) within its window (`t`) caps the calls
 *   until the window ends, whatever the bucket holds.
 *
 * Pure arithmetic on the caller's clock (`now`, ms); O(1) memory. Waiting callers are the
 * driver's (relent's executor keeps them in a FIFO queue and wakes only the first).
 * relent/fleet's shared limit is one of these per process, whose rate is this process's
 * share of the fleet's.
 */
export interface RateLimitSpec {
  /** The long-run rate, calls per second, > 0. */
  readonly ratePerSecond: number;
  /** Calls that may go at once after a quiet spell (the bucket's size), >= 1. Default: one second's worth (at least 1). */
  readonly burst?: number;
  /** The longest a call waits for a token (never past its deadline); 0: refused at once. Default 1000. */
  readonly maxWaitMs?: number;
  /** The rate's multiplier on a throttling answer, in [0.05, 1] (1: never lowered). Default 0.5. */
  readonly decrease?: number;
  /** A lowered rate grows back to ratePerSecond over this long, ms. Default 30 000. */
  readonly recoverMs?: number;
  /** The rate is never lowered below this, calls per second. Default ratePerSecond / 100. */
  readonly minRatePerSecond?: number;
}

export type ResolvedRateLimitSpec = Required<RateLimitSpec>;

export const RATE_LIMIT_DEFAULTS = Object.freeze({ maxWaitMs: 1000, decrease: 0.5, recoverMs: 30_000 });

/** Decreases at most this often (a burst of 429s lowers the rate once). */
export const RATE_DECREASE_GAP_MS = 1000;

const KEYS = ['ratePerSecond', 'burst', 'maxWaitMs', 'decrease', 'recoverMs', 'minRatePerSecond'];

function num(v: unknown, field: string, min: number, max: number, minExclusive = false): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || (minExclusive ? v <= min : v < min) || v > max) {
    throw invalidPolicy(field, `a number in ${minExclusive ? '(' : '['}${min}, ${max}]`, v);
  }
  return v;
}

/** Validates a rate limit spec and fills every default; errors name the field under `field`. */
export function normalizeRateLimit(input: unknown, field = 'rateLimit'): ResolvedRateLimitSpec {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw invalidPolicy(field, 'an object with `ratePerSecond`', input);
  const o = input as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!KEYS.includes(k)) throw invalidPolicy(`${field}.${k}`, `absent (a rate limit takes ${KEYS.join(', ')})`, o[k]);
  const ratePerSecond = num(o.ratePerSecond, `${field}.ratePerSecond`, 0, 1e9, true);
  const burst = num(o.burst ?? Math.max(1, ratePerSecond), `${field}.burst`, 1, 1e12);
  const maxWaitMs = num(o.maxWaitMs ?? RATE_LIMIT_DEFAULTS.maxWaitMs, `${field}.maxWaitMs`, 0, 2 ** 31 - 1);
  const decrease = num(o.decrease ?? RATE_LIMIT_DEFAULTS.decrease, `${field}.decrease`, 0.05, 1);
  const recoverMs = num(o.recoverMs ?? RATE_LIMIT_DEFAULTS.recoverMs, `${field}.recoverMs`, 1, 86_400_000);
  const minRatePerSecond = num(o.minRatePerSecond ?? ratePerSecond / 100, `${field}.minRatePerSecond`, 0, ratePerSecond, true);
  return Object.freeze({ ratePerSecond, burst, maxWaitMs, decrease, recoverMs, minRatePerSecond });
}

/** What the rate limit knows now (for events, stats and tests). */
export interface TokenBucketState {
  /** Tokens in the bucket (fractions accrue). */
  readonly tokens: number;
  /** The rate now, calls per second (lowered after throttling, growing back). */
  readonly ratePerSecond: number;
  /** The bucket refills from here on (a server's wait), null when not paused. */
  readonly pausedUntil: number | null;
  /** Calls the server's quota still allows before `quotaUntil`, null when no quota is known. */
  readonly quotaLeft: number | null;
  readonly quotaUntil: number | null;
}

export interface TokenBucket {
  readonly spec: ResolvedRateLimitSpec;
  /** A call arrives (once per call, before it asks for a token): a fleet's share follows the demand. */
  arrived(now: number): void;
  /** Takes a token for one call now; false when none is there (nothing changes then). */
  tryTake(now: number): boolean;
  /**
   * When `ahead + 1` tokens will have been available (`ahead` calls are waiting before this
   * one): now when a token is there for the first in line. An estimate made at the rate
   * now; the first in line asks `tryTake` again when it is due.
   */
  readyAt(now: number, ahead?: number): number;
  /**
   * A throttling answer: pause for `waitMs` (the server's; null: none said) and, unless
   * `lower` is false, lower the rate (at most once a second). Returns true if the rate fell.
   */
  throttled(now: number, waitMs: number | null, lower?: boolean): boolean;
  /** The server's quota: `remaining` calls until `windowMs` from now (a RateLimit field's r and t). */
  quota(now: number, remaining: number, windowMs: number): void;
  /**
   * Sets the rate (relent/fleet: this process's share of the fleet's rate, lowered there
   * already): it replaces the configured rate and any lowering; the burst scales with it.
   */
  setRate(now: number, ratePerSecond: number): void;
  state(now: number): TokenBucketState;
}

class Bucket implements TokenBucket {
  private tokens: number;
  private at: number | null = null;
  /** The configured rate (per ms) and burst (this process's share in a fleet). */
  private base: number;
  private burst: number;
  /** Lowered: the factor on the base rate at `lowAt`, growing linearly to 1 over recoverMs. */
  private lowFactor = 1;
  private lowAt = 0;
  private lastDecreaseAt = -Infinity;
  private pausedUntil = -Infinity;
  private quotaLeft = Infinity;
  private quotaUntil = -Infinity;

  constructor(
    readonly spec: ResolvedRateLimitSpec,
    full: boolean,
  ) {
    this.base = spec.ratePerSecond / 1000;
    this.burst = spec.burst;
    this.tokens = full ? spec.burst : 0;
  }

  /** The factor on the base rate at t. */
  private factor(t: number): number {
    if (this.lowFactor >= 1) return 1;
    const f = this.lowFactor + (t - this.lowAt) / this.spec.recoverMs;
    return f >= 1 ? 1 : f;
  }

  /** Tokens earned between a and b (a ≤ b): the rate's integral. */
  private earned(a: number, b: number): number {
    if (!(b > a)) return 0;
    if (this.lowFactor >= 1) return (b - a) * this.base;
    const full = this.lowAt + (1 - this.lowFactor) * this.spec.recoverMs; // the factor reaches 1 here
    let sum = 0;
    const mid = Math.min(b, full);
    if (mid > a) sum += ((this.factor(a) + this.factor(mid)) / 2) * (mid - a);
    if (b > full) sum += b - Math.max(a, full);
    if (b >= full) this.lowFactor = 1; // fully recovered: forget it
    return sum * this.base;
  }

  private refill(now: number): void {
    const at = this.at;
    if (at === null) {
      this.at = now;
      return;
    }
    if (!(now > at)) return;
    const from = at > this.pausedUntil ? at : this.pausedUntil;
    if (now > from) this.tokens = Math.min(this.burst, this.tokens + this.earned(from, now));
    this.at = now;
  }

  private quotaActive(now: number): boolean {
    if (this.quotaUntil === -Infinity) return false;
    if (now >= this.quotaUntil) {
      this.quotaLeft = Infinity;
      this.quotaUntil = -Infinity;
      return false;
    }
    return true;
  }

  arrived(): void {
    // This process's own bucket does not follow demand.
  }

  tryTake(now: number): boolean {
    this.refill(now);
    if (now < this.pausedUntil || this.tokens < 1) return false;
    if (this.quotaActive(now)) {
      if (this.quotaLeft < 1) return false;
      this.quotaLeft -= 1;
    }
    this.tokens -= 1;
    return true;
  }

  readyAt(now: number, ahead = 0): number {
    this.refill(now);
    const n = ahead + 1;
    let start = now > this.pausedUntil ? now : this.pausedUntil;
    if (this.quotaActive(now) && this.quotaLeft < n) start = Math.max(start, this.quotaUntil);
    const need = n - this.tokens;
    if (need <= 0) return start;
    const rate = this.base * this.factor(start);
    return start + need / rate;
  }

  throttled(now: number, waitMs: number | null, lower = true): boolean {
    this.refill(now);
    if (waitMs !== null && waitMs > 0 && Number.isFinite(waitMs)) {
      this.pausedUntil = Math.max(this.pausedUntil, now + waitMs);
      if (this.tokens > 0) this.tokens = 0;
    }
    if (!lower || this.spec.decrease >= 1 || now - this.lastDecreaseAt < RATE_DECREASE_GAP_MS) return false;
    const minFactor = this.spec.minRatePerSecond / 1000 / this.base;
    const f = Math.max(Math.min(1, minFactor), this.factor(now) * this.spec.decrease);
    this.lowFactor = f;
    this.lowAt = now;
    this.lastDecreaseAt = now;
    return true;
  }

  quota(now: number, remaining: number, windowMs: number): void {
    if (!(remaining >= 0) || !(windowMs > 0) || !Number.isFinite(windowMs)) return;
    this.refill(now);
    this.quotaLeft = remaining;
    this.quotaUntil = now + windowMs;
  }

  setRate(now: number, ratePerSecond: number): void {
    if (!(ratePerSecond > 0) || !Number.isFinite(ratePerSecond)) return;
    this.refill(now);
    const r = ratePerSecond / 1000;
    this.burst = Math.max(1, this.spec.burst * (ratePerSecond / this.spec.ratePerSecond));
    if (this.tokens > this.burst) this.tokens = this.burst;
    this.base = r;
    this.lowFactor = 1;
  }

  state(now: number): TokenBucketState {
    this.refill(now);
    const quota = this.quotaActive(now);
    return {
      tokens: this.tokens,
      ratePerSecond: this.base * 1000 * this.factor(now),
      pausedUntil: now < this.pausedUntil ? this.pausedUntil : null,
      quotaLeft: quota ? this.quotaLeft : null,
      quotaUntil: quota ? this.quotaUntil : null,
    };
  }
}

/** A token bucket; it starts full unless `empty` (a fleet member's share starts empty: it has not earned a burst yet). */
export function createTokenBucket(spec: RateLimitSpec | ResolvedRateLimitSpec, field = 'rateLimit', empty = false): TokenBucket {
  return new Bucket(normalizeRateLimit(spec, field), !empty);
}

/**
 * What one answer tells a rate limit (drivers call this after every attempt that got a
 * status, with what the core decided): a throttling status (the policy's
 * throttleStatuses, 429 by default), or a 503 with a wait, lowers the rate and pauses the
 * bucket for the server's wait (`retryAfterMs`, the decision's: Retry-After or a
 * RateLimit reset); a `RateLimit` field (draft-ietf-httpapi-ratelimit-headers) caps the
 * calls to its remaining quota until its window ends (the most restrictive of its
 * items). A response served from a cache (`Age` > 0) says nothing about quota.
 */
export function observeRateAnswer(
  bucket: TokenBucket,
  now: number,
  status: number,
  headers: Readonly<Record<string, string>> | undefined,
  retryAfterMs: number | null,
  throttleStatuses: StatusSet,
): void {
  if (throttleStatuses.has(status) || (status === 503 && retryAfterMs !== null)) bucket.throttled(now, retryAfterMs);
  const field = headers?.['ratelimit'];
  if (field === undefined) return;
  const age = headers!['age'];
  if (age !== undefined && /^\s*[0-9]+\s*$/.test(age) && Number(age) > 0) return;
  const parsed = parseRateLimit(field);
  if (!parsed.present || !parsed.valid) return;
  let best: { remaining: number; windowMs: number } | null = null;
  for (const it of parsed.items) {
    if (it.windowSeconds === null || it.windowSeconds <= 0) continue;
    const windowMs = it.windowSeconds * 1000;
    // The most restrictive item: the lowest rate of what is left.
    if (best === null || it.remaining / windowMs < best.remaining / best.windowMs) best = { remaining: it.remaining, windowMs };
  }
  if (best !== null) bucket.quota(now, best.remaining, best.windowMs);
}
