// A worker's lease bookkeeping: every lease it holds is renewed a third of a lease before
// it would run out (one renewal at a time), and finished batches past retention are
// deleted in small chunks.
import { PURGE_CHUNK } from './store-common.js';
import type { WorkerCore } from './worker-state.js';

export class LeaseKeeper {
  private cancelRenew: (() => void) | null = null;
  private renewing = false;
  private cancelPurge: (() => void) | null = null;

  constructor(private readonly w: WorkerCore) {}

  start(): void {
    this.armRenew();
    this.armPurge();
  }

  stop(): void {
    this.cancelRenew?.();
    this.cancelRenew = null;
    this.cancelPurge?.();
    this.cancelPurge = null;
  }

  private armRenew(): void {
    const every = Math.max(1, Math.floor(this.w.settings.leaseMs / 3));
    this.cancelRenew = this.w.clock.setTimer(() => {
      this.cancelRenew = null;
      this.renewNow();
    }, every);
  }

  /** Renews every lease held now (one renewal at a time), then arms the next one. */
  renewNow(): void {
    const w = this.w;
    if (!w.isRunning || this.renewing) return;
    this.cancelRenew?.();
    this.cancelRenew = null;
    this.renewing = true;
    const leases = [...w.held.values()].filter((h) => !h.abandoned).map((h) => ({ id: h.id, token: h.token }));
    const sent = new Map(leases.map((l) => [l.id, l.token]));
    const done = w.link.track('renewing leases');
    w.store
      .renew(leases, w.clock.wallNow(), w.settings.leaseMs)
      .then(
        (lost) => {
          done(true);
          for (const id of lost) {
            const h = w.held.get(id);
            // (claimed again by this worker meanwhile: the renewal of the old claim says nothing about it;
            // answered already: the outcome's write says whether the lease held, or whether this worker's own write landed)
            // (a claim of this worker under way, or of unknown outcome, may have it under a newer token)
            if (!h || h.token !== sent.get(id) || h.settled || h.dest.claiming || h.dest.orphans) continue;
            // Another worker has it now: stop caring; our result would be refused by the fence anyway.
            w.held.delete(id);
            w.c.leaseLost++;
            w.emit({ type: 'lease_lost', destination: h.dest.d.name, batchId: id });
          }
        },
        (e: unknown) => {
          done(false);
          w.storeError('renewing leases', e);
        },
      )
      .finally(() => {
        this.renewing = false;
        if (w.isRunning && !w.stopping && this.cancelRenew === null) this.armRenew();
      });
  }

  /**
   * Retention: delivered batches older than retainDeliveredMs and dropped ones older than
   * retainDroppedMs are deleted, in small chunks (one short transaction each), every
   * minute, so a large backlog of old rows never holds a long lock.
   */
  private armPurge(): void {
    const every = Math.min(60_000, Math.max(1_000, this.w.settings.retainDeliveredMs));
    this.cancelPurge = this.w.clock.setTimer(() => {
      this.cancelPurge = null;
      if (!this.w.isRunning) return;
      void this.purge().finally(() => {
        if (this.w.isRunning) this.armPurge();
      });
    }, every);
  }

  private async purge(): Promise<void> {
    const w = this.w;
    const now = w.clock.wallNow();
    const passes: ['delivered' | 'dropped', number][] = [['delivered', now - w.settings.retainDeliveredMs]];
    if (w.settings.retainDroppedMs !== null) passes.push(['dropped', now - w.settings.retainDroppedMs]);
    try {
      for (const [state, before] of passes) {
        // Chunks until a short one; at most 100 a pass (the next pass carries on).
        for (let i = 0; i < 100 && w.isRunning && !w.stopping; i++) {
          const n = await w.store.purge(state, before, PURGE_CHUNK);
          if (n < PURGE_CHUNK) break;
        }
      }
    } catch (e) {
      w.storeError('purging finished batches', e);
    }
  }
}
