import { createRetryBudget, type BudgetObservation, type RatioBudgetSpec, type RetryBudget } from '../core/budget.js';
import { createLeasedBudget, type LeasedBudget } from '../core/fleet.js';
import type { Command, Link, Member } from './link.js';

/** What stats() tells of one shared budget. */
export interface FleetBudgetStats {
  /** Tokens this process holds (its lease). */
  readonly lease: number;
  /** Deposits waiting for the next sync. */
  readonly pending: number;
  /** The shared bucket's tokens at the last sync (null before the first). */
  readonly shared: number | null;
  /** Retries paid from the lease. */
  readonly spentFromLease: number;
}

/**
 * A `ratio` budget shared by the fleet. Every call is answered from this process's
 * state, synchronously: in fleet mode from its lease (core/fleet.ts's LeasedBudget),
 * which a sync tops up from the shared bucket in Redis and into which deposits go first
 * (what does not fit is handed to the shared bucket at the next sync); in local mode
 * from an in-process budget of the same spec, which has followed this process's own
 * calls all along (so a fallback behaves as relent does without a fleet).
 *
 * Syncs: at once when a retry finds the lease dry (unless the last visit found the
 * shared bucket short: then at the next tick, so an outage costs one round trip per
 * syncMs); after `syncEvery` observations while the fleet is drawing on the shared
 * bucket; else every syncMs while there is something to hand in or the lease has room
 * (a lease emptied by a retry is often refilled by this process's own deposits first).
 */
export class FleetBudget implements RetryBudget, Member {
  readonly spec: RatioBudgetSpec;
  private readonly lease: LeasedBudget;
  private readonly own: RetryBudget;
  private readonly keys: readonly string[];
  private asking = true; // a new lease (on credit) pays its debt at once
  private short = false;
  private events = 0;
  private shared: number | null = null;

  constructor(private readonly link: Link, key: string, spec: RatioBudgetSpec, leaseTokens: number) {
    this.spec = spec;
    this.keys = [key];
    this.lease = createLeasedBudget(spec, leaseTokens);
    this.own = createRetryBudget(spec);
  }

  observe(o: BudgetObservation, now: number): void {
    this.own.observe(o, now);
    this.lease.observe(o, now);
    // Deposits wait for the tick, unless the fleet is drawing on the shared bucket.
    if (this.shared !== null && this.shared < this.spec.maxTokens && ++this.events >= this.link.syncEvery && this.lease.pending() > 0) {
      this.events = 0;
      this.link.soon();
    }
  }

  tryAcquire(o: { readonly throttled: boolean; readonly timeout: boolean }, now: number): number | false {
    if (this.link.local) return this.own.tryAcquire(o, now);
    const paid = this.lease.tryAcquire(o, now);
    // The in-process budget is charged too, so that a fallback starts from what this process spent.
    if (paid !== false) this.own.tryAcquire(o, now);
    else if (!this.asking && !this.short) {
      this.asking = true;
      this.link.soon();
    }
    return paid;
  }

  available(now: number): number {
    return this.link.local ? this.own.available(now) : this.lease.held();
  }

  lastAnswerAt(): number | null {
    return this.lease.lastAnswerAt();
  }

  dirty(): boolean {
    return this.asking || this.lease.pending() !== 0 || this.lease.wanted() > 0;
  }

  write(out: Command[]): void {
    const deposit = this.lease.takePending();
    const want = this.lease.wanted();
    const { maxTokens, minPerSecond } = this.spec;
    // Unused keys vanish, but never before the bucket would have refilled anyway.
    const ttl = Math.ceil(Math.max(this.link.keyTtlMs, minPerSecond > 0 ? (maxTokens / minPerSecond) * 1000 : 0));
    out.push({
      script: 'budget',
      keys: this.keys,
      args: [maxTokens, minPerSecond, deposit, want, ttl],
      onReply: (r) => {
        const granted = Number(r[1]);
        this.lease.grant(granted);
        this.shared = Number(r[2]);
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
      },
    });
  }

  stats(): FleetBudgetStats {
    return { lease: this.lease.held(), pending: this.lease.pending(), shared: this.shared, spentFromLease: this.lease.spent() };
  }
}
