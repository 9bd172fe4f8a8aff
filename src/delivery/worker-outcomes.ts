// A worker's outcome writes: the core's decisions for the batches it holds, written fenced
// (only while the lease token still matches), many in one transaction (group commit), one
// write at a time; outcomes the fence refused while a claim of this worker may hold the
// batch under a newer token are parked and written again once that claim has said.
import type { Outcome } from './types.js';
import { OUTCOME_GROUP_MS, type Dest, type Held, type WorkerCore } from './worker-state.js';

export class OutcomeWriter {
  /** Outcomes waiting to be written; one write (one transaction) takes all that have gathered: group commit. */
  private queue: Outcome[] = [];
  private flushing: Promise<void> | null = null;
  private cancelFlushRetry: (() => void) | null = null;
  private cancelFlushWait: (() => void) | null = null;
  /** The pending write waits OUTCOME_GROUP_MS for more outcomes (see groupWaitMs). */
  private groupWaiting = false;
  /**
   * Outcomes refused by the fence while a claim of this worker (under way, or of unknown
   * outcome) may hold their batch under a token it has not seen yet: written again, under
   * the newest token known, when that claim round ends (or after `reclaim`).
   */
  private parked: Outcome[] = [];
  /** How often each batch's outcome was parked (a claim under way parks it at most 3 times). */
  private readonly parks = new Map<number, number>();

  constructor(private readonly w: WorkerCore) {}

  /** A held batch's outcome is decided: written with the next group. */
  settle(h: Held, o: Outcome): void {
    h.settled = true;
    this.queue.push(o.token === h.token ? o : { ...o, token: h.token });
    // A shared limit counts this lease until the outcome is written: end a group's wait now (the write starts at the end of the turn).
    if (h.dest.shared !== null && this.groupWaiting && this.cancelFlushWait !== null) {
      this.groupWaiting = false;
      this.cancelFlushWait();
    } else this.kick();
  }

  /**
   * `h` was claimed again (token `token`): what it has — a request in flight, a batch waiting
   * to start, an outcome waiting to be written — now belongs to the new claim.
   */
  adopt(h: Held, token: number): void {
    if (token <= h.token) return;
    h.token = token;
    const i = this.queue.findIndex((o) => o.id === h.id);
    if (i >= 0) this.queue[i] = { ...this.queue[i]!, token };
  }

  /** Outcomes of `dest` parked by the fence are written again, under the tokens now known. */
  unpark(dest: Dest): void {
    const held = this.w.held;
    const parked = this.parked.filter((o) => held.get(o.id)?.dest === dest);
    if (parked.length === 0) return;
    this.parked = this.parked.filter((o) => held.get(o.id)?.dest !== dest);
    for (const o of parked) this.queue.push({ ...o, token: held.get(o.id)!.token });
    this.kick();
  }

  /** The store answers again: a write waiting for its retry starts now. */
  retryNow(): void {
    if (this.cancelFlushRetry !== null) {
      this.cancelFlushRetry();
      this.cancelFlushRetry = null;
      this.kick();
    }
  }

  /**
   * Writes finished outcomes (fenced): one store call, one transaction, for all that
   * have gathered — those of the same turn of the event loop, and those that finish
   * while the previous write is under way (group commit). One write at a time.
   */
  private kick(): void {
    if (this.flushing || this.cancelFlushRetry || this.queue.length === 0) return;
    let cancelled = false;
    const wait = this.groupWaitMs();
    this.groupWaiting = wait > 0;
    const run = new Promise<void>((resolve) => {
      const cancel = this.w.clock.setTimer(resolve, wait);
      this.cancelFlushWait = () => {
        cancelled = true;
        cancel();
        resolve();
      };
    })
      .then(() => {
        this.cancelFlushWait = null;
        this.groupWaiting = false;
        return cancelled ? undefined : this.flush();
      })
      .then(
        () => {
          this.flushing = null;
          this.kick();
        },
        (e: unknown) => {
          this.flushing = null;
          this.w.storeError('recording outcomes', e);
          // Kept; written again after a pause, or as soon as the store answers a ping (or the leases expire and the batches are delivered again).
          this.w.link.failures++;
          this.cancelFlushRetry = this.w.clock.setTimer(() => {
            this.cancelFlushRetry = null;
            this.kick();
          }, this.w.link.retryMs());
        },
      );
    this.flushing = run;
  }

  /**
   * How long the first outcome of a group waits for others before the write starts. On
   * SQLite every write is a transaction and a message to and from the store's process, whatever
   * its size, so outcomes gather for OUTCOME_GROUP_MS; on PostgreSQL the previous write's
   * round trip gathers them. An outcome of a destination whose limits are kept in the store
   * is written at the end of the turn: its lease counts against the shared limit until then.
   */
  private groupWaitMs(): number {
    if (this.w.store.kind !== 'sqlite') return 0;
    for (const o of this.queue) if (this.w.held.get(o.id)?.dest.shared) return 0;
    return OUTCOME_GROUP_MS;
  }

  private async flush(): Promise<void> {
    if (this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    let res;
    const done = this.w.link.track('recording outcomes');
    try {
      res = await this.w.store.complete(batch);
      done(true);
    } catch (e) {
      done(false);
      // (an outcome claimed again meanwhile carries its newest token: see adopt)
      this.queue = batch
        .map((o) => {
          const h = this.w.held.get(o.id);
          return h !== undefined && h.token > o.token ? { ...o, token: h.token } : o;
        })
        .concat(this.queue);
      throw e;
    }
    // A destination whose limits live in the store counted these leases until now: there may be room again.
    const freed = new Set<Dest>();
    const tokenOf = new Map(batch.map((o) => [o.id, o.token]));
    for (const id of res.applied) {
      const h = this.w.held.get(id);
      if (h === undefined || h.token !== tokenOf.get(id)) continue;
      if (h.dest.shared) freed.add(h.dest);
      this.w.held.delete(id);
      this.parks.delete(id);
    }
    for (const id of res.lost)
      this.lost(
        id,
        batch.find((o) => o.id === id)!,
      );
    for (const dest of freed) this.w.loop.pump(dest, true);
    this.w.notifyIdle();
  }

  /** The fence refused `written`: claimed again by this worker (written again), perhaps so (parked), or another worker's now. */
  private lost(id: number, written: Outcome): void {
    const h = this.w.held.get(id);
    if (h !== undefined && h.token !== written.token) {
      // Claimed again by this worker while the write was under way: written again under the new claim.
      this.queue.push({ ...written, token: h.token });
      return;
    }
    if (h === undefined) return; // (a renewal already found it lost)
    const parks = this.parks.get(id) ?? 0;
    if (h.dest.orphans || (h.dest.claiming && parks < 3)) {
      // Perhaps claimed again by this worker, in a claim whose answer is still on its way or was lost:
      // written again once that claim round (or reclaimOrphans) has said (unpark). A few times at most.
      this.parks.set(id, parks + 1);
      this.parked.push(written);
      return;
    }
    this.parks.delete(id);
    this.w.held.delete(id);
    this.w.c.leaseLost++;
    this.w.emit({ type: 'lease_lost', destination: h?.dest.d.name ?? '', batchId: id });
  }

  /**
   * Stopping: the write under way ends, and everything left — parked outcomes too, whose
   * batch no claim of this worker holds any more (written, and found lost) — is written now.
   */
  async drain(): Promise<void> {
    this.cancelFlushRetry?.();
    this.cancelFlushRetry = null;
    this.cancelFlushWait?.();
    if (this.flushing) await this.flushing;
    this.queue.push(...this.parked);
    this.parked = [];
    try {
      // (an outcome refused for an older claim of a batch claimed again is written again: a second pass)
      for (let pass = 0; pass < 3 && this.queue.length > 0; pass++) await this.flush();
    } catch (e) {
      this.w.storeError('recording outcomes while stopping', e);
    }
  }

  /** The worker has stopped. */
  clear(): void {
    this.parks.clear();
  }
}
