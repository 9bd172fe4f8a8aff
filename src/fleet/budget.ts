import { isAnswer, type BudgetObservation, type RatioBudgetSpec, type RetryBudget } from '../core/budget.js';
import { createLeasedBudget, type LeasedBudget } from '../core/fleet.js';
import type { Command, Link, Member } from './link.js';
import { createShareBudget, refillDebt, settleShare, shareOnFallback, type ShareBudget } from './share.js';

const NO_RETRY = { throttled: false, timeout: false };

/** What stats() tells of one shared budget. */
export interface FleetBudgetStats {
  /** `fleet`: answered from the lease; `local`: from this process's share (Redis away). */
  readonly mode: 'fleet' | 'local';
  /** Tokens this process holds (its lease). */
  readonly lease: number;
  /** Deposits waiting for the next sync (negative: a debt). */
  readonly pending: number;
  /** The shared bucket's tokens at the last sync (null before the first). */
  readonly shared: number | null;
  /** The processes drawing on the budget at the last sync (null before the first): a fallback takes 1/processes of it. */
  readonly processes: number | null;
  /** Tokens of this process's share while local (null in fleet mode). */
  readonly share: number | null;
  /** Retries paid from the lease. */
  readonly spentFromLease: number;
}

/** How a process stays counted among those drawing on a budget. */
export interface Membership {
  /** A budget visits Redis at least this often (it counts the processes), ms. */
  readonly renewMs: number;
  /** A process not seen for this long is no longer counted, ms. */
  readonly memberTtlMs: number;
}

/**
 * A `ratio` budget shared by the fleet. Every call is answered from this process's
 * state, synchronously:
 * - fleet mode: from its lease (core/fleet.ts's LeasedBudget), which a sync tops up from
 *   the shared bucket in Redis and into which deposits go first (what does not fit is
 *   handed to the shared bucket at the next sync);
 * - local mode (the node that holds the bucket is away): from its share of the fleet's
 *   budget (share.ts): its lease plus 1/P of the shared bucket as last seen, a floor of
 *   minPerSecond / P, its own deposits — P being the processes the budget script counted
 *   at the last sync. Back in fleet mode it settles: what is left goes back to the lease
 *   and the shared bucket, what it took beyond them is a debt the shared bucket pays.
 *
 * Syncs: at once when a retry finds the lease dry (unless the last visit found the
 * shared bucket short: then at the next tick, so an outage costs one round trip per
 * syncMs); after `syncEvery` observations while the fleet is drawing on the shared
 * bucket; else every syncMs while there is something to hand in or the lease has room,
 * and at least every `renewMs` (to stay counted).
 */
export class FleetBudget implements RetryBudget, Member {
  readonly spec: RatioBudgetSpec;
  private readonly lease: LeasedBudget;
  private share: ShareBudget | null = null;
  private readonly keys: readonly string[];
  private asking = true; // a new lease (on credit) pays its debt at once
  private short = false;
  private events = 0;
  private shared: number | null = null;
  private processes: number | null = null;
  private lastVisit = -Infinity;
  private answerAt: number | null = null;
  /** Lease tokens moved into shares (not retries paid from the lease). */
  private moved = 0;
  /** The shared floor's running total at the last visit (null before the first). */
  private floor: number | null = null;
  /** The floor this process's shares added while it ran alone, to repay once the shared floor's total is read again. */
  private refill: { refilled: number; floorBefore: number | null; processes: number | null } | null = null;

  constructor(
    private readonly link: Link,
    keys: readonly [string, string],
    spec: RatioBudgetSpec,
    private readonly leaseTokens: number,
    private readonly membership: Membership,
  ) {
    this.spec = spec;
    this.keys = keys;
    this.lease = createLeasedBudget(spec, leaseTokens);
  }

  /** Whether the budget runs locally now; takes its share on a fallback and settles it on a rejoin. */
  private isLocal(): boolean {
    const local = this.link.local;
    if (local) {
      if (this.share === null) {
        // The lease's whole tokens move into the share (spent once, here or there); a fraction stays in the lease.
        let moved = 0;
        if (this.processes !== null) while (this.lease.tryAcquire(NO_RETRY, 0) !== false) moved++;
        this.moved += moved;
        this.share = createShareBudget(this.spec, shareOnFallback(this.spec, this.leaseTokens, moved, this.shared, this.processes));
        this.refill ??= { refilled: 0, floorBefore: this.floor, processes: this.processes };
      }
    } else if (this.share !== null) {
      const s = this.share;
      this.share = null;
      const net = settleShare(s.held(), s.start.owed);
      if (net > 0) this.lease.grant(net);
      else if (net < 0) this.lease.keepDebt(net);
      if (this.refill !== null) this.refill.refilled += s.refilled();
      this.asking = true;
    }
    return local;
  }

  observe(o: BudgetObservation, now: number): void {
    if (isAnswer(o)) this.answerAt = now;
    if (this.isLocal()) {
      this.share!.observe(o, now);
      return;
    }
    this.lease.observe(o, now);
    // Deposits wait for the tick, unless the fleet is drawing on the shared bucket.
    if (this.shared !== null && this.shared < this.spec.maxTokens && ++this.events >= this.link.syncEvery && this.lease.pending() > 0) {
      this.events = 0;
      this.link.soon();
    }
  }

  tryAcquire(o: { readonly throttled: boolean; readonly timeout: boolean }, now: number): number | false {
    if (this.isLocal()) return this.share!.tryAcquire(o, now);
    const paid = this.lease.tryAcquire(o, now);
    if (paid === false && !this.asking && !this.short) {
      this.asking = true;
      this.link.soon();
    }
    return paid;
  }

  available(now: number): number {
    return this.isLocal() ? this.share!.available(now) : this.lease.held();
  }

  lastAnswerAt(): number | null {
    return this.answerAt;
  }

  rejoined(): void {
    this.isLocal();
  }

  dirty(): boolean {
    if (this.isLocal()) return false;
    return this.asking || this.lease.pending() !== 0 || this.lease.wanted() > 0 || this.link.wallNow() - this.lastVisit >= this.membership.renewMs;
  }

  write(out: Command[]): void {
    if (this.isLocal()) return;
    const deposit = this.lease.takePending();
    const want = this.lease.wanted();
    const { maxTokens, minPerSecond } = this.spec;
    // Unused keys vanish, but never before the bucket would have refilled anyway.
    const ttl = Math.ceil(Math.max(this.link.keyTtlMs, minPerSecond > 0 ? (maxTokens / minPerSecond) * 1000 : 0));
    this.lastVisit = this.link.wallNow();
    out.push({
      script: 'budget',
      keys: this.keys,
      args: [maxTokens, minPerSecond, deposit, want, ttl, this.link.id, Math.ceil(this.membership.memberTtlMs)],
      onReply: (r) => {
        const granted = Number(r[1]);
        this.lease.grant(granted);
        this.shared = Number(r[2]);
        const p = Number(r[3]);
        if (Number.isFinite(p) && p >= 1) this.processes = p;
        const floor = Number(r[4]);
        if (Number.isFinite(floor)) {
          // Back from running alone: the refill it got is owed, up to its part of what the shared floor added meanwhile.
          if (this.refill !== null && this.share === null) {
            const debt = refillDebt(this.refill.refilled, this.refill.floorBefore, floor, this.refill.processes);
            this.refill = null;
            if (debt > 0) {
              this.lease.keepDebt(-debt);
              this.link.soon();
            }
          }
          this.floor = floor;
        }
        this.short = granted < want;
        this.asking = false;
        this.events = 0;
      },
      // Deposits are handed over at most once: a lost reply loses them (the bound stays);
      // a debt is kept until it is paid.
      onFail: () => {
        this.lease.keepDebt(deposit);
        this.asking = false;
        this.short = true;
        this.lastVisit = -Infinity;
      },
    });
  }

  stats(): FleetBudgetStats {
    const local = this.link.local;
    return {
      mode: local ? 'local' : 'fleet',
      lease: this.lease.held(),
      pending: this.lease.pending(),
      shared: this.shared,
      processes: this.processes,
      share: local && this.share !== null ? this.share.held() : null,
      spentFromLease: this.lease.spent() - this.moved,
    };
  }
}
