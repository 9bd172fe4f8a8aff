import { createTokenBucket, type ResolvedRateLimitSpec, type TokenBucket, type TokenBucketState } from '../core/token-bucket.js';
import type { Command, Link, Member } from './link.js';

/** What stats() tells of one shared rate limit. */
export interface FleetRateStats {
  /** This process's share of the fleet's rate, calls/s (null before the first sync). */
  readonly share: number | null;
  /** Members of the fleet calling it, at the last sync (null before the first). */
  readonly members: number | null;
  /** The demand this process last reported, calls/s. */
  readonly demand: number;
  /** The factor the fleet's rate is lowered by after throttling answers (1: not lowered). */
  readonly factor: number;
}

/**
 * A rate limit shared by the fleet, answered from this process's state: a token bucket
 * of this process (core/token-bucket.ts) whose rate is its grant of the fleet's rate.
 * No call waits on Redis: every syncMs (and at once when it starves, or when a server
 * throttled it) a sync hands in this process's demand and takes its grant — its max-min
 * fair share over the members' demands (core/fleet.ts fleetRateShare; a member that had
 * to wait reports at least twice its share, so saturated members split the rate
 * equally), within what the other members hold (fleetRateGrant), so the grants in force
 * never add up to more than the rate. A member whose fair share shrank keeps its grant
 * until its next sync: a newcomer reaches its fair share within one syncMs. A throttling
 * answer seen by one member lowers the fleet's rate and pauses every member until the
 * server's wait is over (stepSharedRate). A RateLimit quota is split by share.
 *
 * Round trips: one per syncMs per process, whatever the number of calls. While Redis is
 * away (local mode) the process keeps its last grant (the whole rate, before the first).
 * A member that dies holds its grant until its entry expires (3 × syncMs).
 */
export class FleetRateLimit implements TokenBucket, Member {
  readonly spec: ResolvedRateLimitSpec;
  private readonly local: TokenBucket;
  private readonly keys: readonly string[];
  private arrivals = 0;
  private waited = 0;
  private demand: number | null = null;
  private share: number | null = null;
  private members: number | null = null;
  private factor = 1;
  private pending: { share: number; pauseMs: number } | null = null;
  private throttleWait: number | null = null;
  private lastWrite = -Infinity;
  private asked = false;

  constructor(
    private readonly link: Link,
    keys: readonly string[],
    spec: ResolvedRateLimitSpec,
    private readonly syncMs: number,
    private readonly keyName: string,
  ) {
    this.spec = spec;
    this.keys = keys;
    // Empty: a member earns its burst at its share, it does not start with the fleet's.
    this.local = createTokenBucket(spec, 'rateLimit', true);
  }

  /** Applies the last sync's answer on the caller's clock (the sync itself has none). */
  private apply(now: number): void {
    const p = this.pending;
    if (p === null) return;
    this.pending = null;
    this.local.setRate(now, p.share > 0 ? p.share : this.spec.ratePerSecond * 1e-6);
    if (p.pauseMs > 0) this.local.throttled(now, p.pauseMs, false);
  }

  arrived(now: number): void {
    this.apply(now);
    this.arrivals++;
  }

  tryTake(now: number): boolean {
    this.apply(now);
    if (this.local.tryTake(now)) return true;
    this.waited++;
    // Starving (a new member of a busy fleet, or demand that grew): ask for a share at once.
    if (!this.asked && !this.link.local && this.starving()) {
      this.asked = true;
      this.link.soon();
    }
    return false;
  }

  readyAt(now: number, ahead?: number): number {
    this.apply(now);
    return this.local.readyAt(now, ahead);
  }

  throttled(now: number, waitMs: number | null, lower = true): boolean {
    this.apply(now);
    if (this.link.local) return this.local.throttled(now, waitMs, lower);
    // The fleet lowers its rate once for everyone; this process pauses at once.
    this.local.throttled(now, waitMs, false);
    if (lower) {
      this.throttleWait = Math.max(this.throttleWait ?? 0, waitMs !== null && waitMs > 0 ? waitMs : 0);
      this.link.soon(true);
    }
    return false;
  }

  quota(now: number, remaining: number, windowMs: number): void {
    this.apply(now);
    const fleetRate = this.spec.ratePerSecond * this.factor;
    const fraction = this.link.local || this.share === null || !(fleetRate > 0) ? 1 : Math.min(1, this.share / fleetRate);
    this.local.quota(now, remaining * fraction, windowMs);
  }

  setRate(now: number, ratePerSecond: number): void {
    this.local.setRate(now, ratePerSecond);
  }

  state(now: number): TokenBucketState {
    this.apply(now);
    return this.local.state(now);
  }

  private starving(): boolean {
    if (this.share === null || this.members === null) return false;
    return this.share < (this.spec.ratePerSecond * this.factor) / (2 * Math.max(1, this.members)) && this.link.wallNow() - this.lastWrite >= 50;
  }

  // --- Member ----------------------------------------------------------------------

  /** A starving member was announced (a newcomer to a busy fleet): visit at once, to give back what is not this process's fair share. */
  announced(): void {
    if (this.link.local || this.asked) return;
    this.asked = true;
    this.link.soon();
  }

  dirty(): boolean {
    // At least every syncMs, whatever the phase of the fleet's tick.
    return this.throttleWait !== null || this.asked || this.link.wallNow() - this.lastWrite >= this.syncMs * 0.5;
  }

  write(out: Command[]): void {
    const now = this.link.wallNow();
    const elapsed = Number.isFinite(this.lastWrite) ? Math.max(1, now - this.lastWrite) : null;
    let rate = elapsed === null ? 0 : (this.arrivals * 1000) / elapsed;
    // A member whose calls had to wait could use more than it has: at least twice its share.
    if (this.waited > 0) rate = Math.max(rate, 2 * (this.share ?? this.spec.ratePerSecond));
    const demand = elapsed === null ? rate : this.demand === null ? rate : 0.5 * this.demand + 0.5 * rate;
    this.demand = demand;
    this.arrivals = 0;
    this.waited = 0;
    this.lastWrite = now;
    const wait = this.throttleWait;
    this.throttleWait = null;
    this.asked = false;
    const s = this.spec;
    out.push({
      script: 'rate',
      keys: this.keys,
      args: [
        this.link.id,
        demand,
        3 * this.syncMs,
        s.ratePerSecond,
        s.decrease,
        s.recoverMs,
        s.minRatePerSecond / s.ratePerSecond,
        wait ?? -1,
        Math.max(this.link.keyTtlMs, 3 * this.syncMs),
        this.link.channel,
        this.keyName,
      ],
      onReply: (r) => {
        const serverMs = Number(r[0]) / 1000;
        const share = Number(r[1]);
        const paused = Number(r[2]);
        if (!Number.isFinite(share)) return;
        this.share = share;
        this.members = Number(r[3]);
        this.factor = Number(r[4]);
        this.pending = { share, pauseMs: Number.isFinite(paused) && Number.isFinite(serverMs) ? paused - serverMs : 0 };
      },
      // A throttling answer not handed in is handed in at the next sync.
      onFail: () => {
        if (wait !== null) this.throttleWait = Math.max(this.throttleWait ?? 0, wait);
      },
    });
  }

  stats(): FleetRateStats {
    return { share: this.share, members: this.members, demand: this.demand ?? 0, factor: this.factor };
  }
}
