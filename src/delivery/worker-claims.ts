// A worker's claim loop, one per destination: it starts what the destination's limits
// allow from the batches it holds, and claims more from the store (sealing pending items
// into batches on the way) when there is room, in chunks, ahead of need.
import { DeliveryError } from './errors.js';
import type { ClaimedBatch, DeliveryStore, Lease } from './types.js';
import { newHeld, STALE_CLAIM_MS, type Dest, type Held, type Permit, type WorkerCore } from './worker-state.js';

/** What one claim round decides as it goes: when to look again, and whether more may be due now. */
interface Round {
  now: number;
  wait: number;
  more: boolean;
}

type FormAndClaim = NonNullable<DeliveryStore['formAndClaim']>;

/** What a claim leased, and the shared rate permit it took (null: none). */
interface Claimed {
  readonly claimed: ClaimedBatch[];
  readonly permit: Permit | null;
}

export class ClaimLoop {
  /** Claim round trips under way (stop() waits for them). */
  private readonly rounds = new Set<Promise<void>>();

  constructor(private readonly w: WorkerCore) {}

  /** The worker starts: every destination is looked at now. */
  start(now: number): void {
    for (const dest of this.w.dests.values()) {
      dest.sampleAt = now;
      this.arm(dest, 0);
    }
  }

  /** The worker is stopping: no timer looks at a destination again. */
  stopTimers(): void {
    for (const dest of this.w.dests.values()) {
      dest.cancelTimer?.();
      dest.cancelTimer = null;
      dest.timerAt = Number.POSITIVE_INFINITY;
    }
  }

  /** The worker is stopping: the claim rounds under way end, and batches claimed ahead and not started are let go (given back with the rest). */
  async stopRounds(): Promise<void> {
    await Promise.all([...this.rounds]);
    for (const dest of this.w.dests.values()) dest.ready.length = 0;
  }

  /** The store answers again: every destination is looked at now, beside a claim a partition stalled. */
  restart(): void {
    const now = this.w.clock.now();
    for (const dest of this.w.dests.values()) {
      if (dest.claiming && now - dest.claimSince > STALE_CLAIM_MS) {
        dest.claimGen++;
        dest.claiming = false;
      }
      this.look(dest);
    }
  }

  /** Looks at `dest` again after `ms` (an earlier request wins). */
  arm(dest: Dest, ms: number): void {
    const w = this.w;
    if (!w.isRunning || w.stopping) return;
    const due = w.clock.now() + ms;
    if (dest.cancelTimer && dest.timerAt <= due) return;
    dest.cancelTimer?.();
    dest.timerAt = due;
    dest.cancelTimer = w.clock.setTimer(() => {
      dest.cancelTimer = null;
      dest.timerAt = Number.POSITIVE_INFINITY;
      this.look(dest);
    }, ms);
  }

  /** Makes sure `dest` is looked at at wall time `at` (a retry this worker scheduled falls due). */
  wakeAt(dest: Dest, at: number): void {
    if (dest.wakeTimes.size < 10_000) dest.wakeTimes.add(at); // past that, polling finds the rest
    this.arm(dest, Math.max(0, at - this.w.clock.wallNow()));
  }

  /**
   * How many batches to hold claimed ahead of free slots, so a finishing request is
   * followed at once by the next one instead of by a store round trip, and claims come
   * in chunks: four claim round trips' worth of the destination's recent completion
   * rate (a claim starts when half is left, so two round trips' worth, which covers a
   * claim that takes twice as long as usual on a busy machine), at least four times its
   * concurrency (so a claim brings at least twice the concurrency: fewer transactions
   * per item where claims are quick) — ten times on SQLite, whose claims are messages to
   * the store's process: a process that waits for a CPU on a busy machine now and then takes
   * far longer than its usual claim time, and fewer, larger claims cost the worker's
   * thread less — at most claimChunk. Nothing is claimed ahead
   * for a destination that has not completed anything lately, when claims take no time
   * (a test clock), or when the destination's limits are shared through the store
   * (there the claim is the permit).
   */
  private ahead(dest: Dest): number {
    if (dest.shared || dest.rate || dest.rateEwma === 0 || dest.claimMsEwma === 0) return 0;
    return Math.min(this.w.settings.claimChunk, Math.max(Math.round(4 * dest.rateEwma * dest.claimMsEwma), this.w.aheadPerSlot * dest.aimd.limit));
  }

  /** Something may have fallen due or arrived for `dest` (a timer, a wake-up): look for it. */
  look(dest: Dest): void {
    dest.formDue = true;
    dest.dueLook = true;
    this.pump(dest, true);
  }

  /**
   * Starts what the limits allow from the claimed batches, and claims more when there is
   * room. `fresh`: claim even if the last claim came back short.
   */
  pump(dest: Dest, fresh = false): void {
    const w = this.w;
    if (!w.isRunning || w.stopping) return;
    if (fresh) dest.dry = false;
    const now = w.clock.wallNow();
    if (dest.pausedUntil > now) {
      this.arm(dest, dest.pausedUntil - now);
      return;
    }
    while (dest.ready.length > 0 && dest.inflight < dest.aimd.limit) {
      const b = dest.ready.shift()!;
      const h = w.held.get(b.id);
      if (h && !h.started) void w.delivery.deliver(dest, b, h);
    }
    const room = dest.aimd.limit - dest.inflight - dest.ready.length + this.ahead(dest);
    if (room <= 0) return; // a finishing request looks again
    if (dest.claiming) {
      if (fresh) dest.again = true;
      return;
    }
    if (dest.dry) return;
    // With a buffer to draw from, claim in chunks: wait until half of it is used.
    if (dest.ready.length > 0 && room < Math.max(1, this.ahead(dest) >> 1)) return;
    const round = this.claimRound(dest, room).finally(() => this.rounds.delete(round));
    this.rounds.add(round);
  }

  /** One claim round trip for `dest`: seal due batches, lease up to `room`, start them; then decide when to look again. */
  private async claimRound(dest: Dest, room: number): Promise<void> {
    const w = this.w;
    const gen = ++dest.claimGen;
    dest.claiming = true;
    dest.claimSince = w.clock.now();
    dest.again = false;
    const done = w.link.track('claiming batches');
    const r: Round = { now: 0, wait: w.settings.pollMs, more: false };
    try {
      if (dest.orphans) await this.reclaimOrphans(dest);
      r.now = w.clock.wallNow();
      const t0 = w.clock.now();
      for (const at of dest.wakeTimes) {
        if (at <= r.now)
          dest.wakeTimes.delete(at); // due: this round claims it
        else if (at - r.now < r.wait) r.wait = at - r.now;
      }
      const want = this.want(dest, room, r);
      if (want > 0) {
        const { claimed, permit } = await this.claim(dest, want, r);
        this.sample(dest, t0);
        dest.rate?.take(claimed.length, r.now);
        if (claimed.length === want && want > 0) r.more = true;
        this.hold(dest, claimed, permit);
      }
      w.link.failures = 0;
      done(true);
    } catch (e) {
      done(false);
      if (DeliveryError.is(e) && e.code === 'ERR_STORE_UNAVAILABLE' && w.store.reclaim !== undefined) dest.orphans = true;
      // A round let go when the store came back (a newer one runs): its failure is old news.
      if (gen !== dest.claimGen) return;
      w.storeError('claiming batches', e);
      // Back off while the store fails (full disk, database down), up to STORE_RETRY_MAX_MS (a ping brings it forward).
      w.link.failures++;
      r.wait = w.link.retryMs();
      r.more = false;
    } finally {
      if (gen === dest.claimGen) dest.claiming = false;
    }
    if (!dest.orphans) w.outcomes.unpark(dest);
    if (gen !== dest.claimGen) {
      this.pump(dest); // what it claimed is held and ready: start it
      return;
    }
    dest.dry = !r.more;
    this.arm(dest, r.wait);
    this.pump(dest, r.more || dest.again); // start what was claimed, and claim again if more may be due
    w.notifyIdle();
  }

  /** How many batches the round asks for: the room, at most claimChunk, within the worker's own rate limit. */
  private want(dest: Dest, room: number, r: Round): number {
    let want = Math.min(room, this.w.settings.claimChunk);
    if (dest.rate) {
      const allowed = dest.rate.available(r.now);
      if (allowed <= 0) {
        r.wait = Math.min(r.wait, Math.max(1, dest.rate.nextAt(r.now) - r.now));
        want = 0;
      }
      want = Math.min(want, allowed);
    }
    return want;
  }

  /** A seal told when pending items must be looked at again: a partial batch falls due by age, look again exactly then (or at once if more can be sealed now). */
  private formed(dest: Dest, r: Round, nextAt: number | null): void {
    dest.formDue = nextAt !== null && nextAt <= r.now;
    if (nextAt !== null) {
      if (nextAt <= r.now) r.more = true;
      else r.wait = Math.min(r.wait, nextAt - r.now);
    }
  }

  /** Seals due batches (where the store does not seal and lease in one write) and leases up to `want` of them. */
  private async claim(dest: Dest, want: number, r: Round): Promise<Claimed> {
    const w = this.w;
    // A store that seals and leases in one write (PostgreSQL) does so after the due batches are claimed,
    // for a destination whose limits are its own: a new batch is written once, not sealed and then claimed.
    const formAndClaim = dest.shared === null ? w.store.formAndClaim?.bind(w.store) : undefined;
    if (dest.formDue && formAndClaim === undefined) {
      this.formed(dest, r, (await w.store.formBatches(dest.d.name, dest.d.batch, r.now, w.settings.claimChunk)).nextAt);
    }
    if (dest.shared) {
      const limits = { rate: dest.shared.rate, concurrency: dest.shared.concurrency ? dest.aimd.limit : null };
      const res = await w.store.claimLimited(dest.d.name, want, limits, r.now, w.settings.leaseMs, w.id);
      if (res.retryAt !== null) r.wait = Math.min(r.wait, Math.max(1, res.retryAt - r.now));
      return { claimed: res.claimed, permit: res.permit !== null ? { id: res.permit, left: res.claimed.length, end: 0 } : null };
    }
    return { claimed: await this.claimOwn(dest, want, r, formAndClaim), permit: null };
  }

  /**
   * A claim for a destination whose limits are this worker's own: due batches first
   * (at least every pollMs), then new batches sealed and leased in one write where the
   * store can — both in one call where the store has it (SQLite: one message to its
   * process, one transaction).
   */
  private async claimOwn(dest: Dest, want: number, r: Round, formAndClaim: FormAndClaim | undefined): Promise<ClaimedBatch[]> {
    const w = this.w;
    const d = dest.d;
    let claimed: ClaimedBatch[] = [];
    const t = w.clock.now();
    const lookDue = formAndClaim === undefined || !dest.formDue || dest.dueLook || t - dest.dueLookedAt >= w.settings.pollMs;
    const claimThenForm = lookDue && formAndClaim !== undefined && dest.formDue ? w.store.claimThenForm?.bind(w.store) : undefined;
    if (claimThenForm !== undefined) {
      const res = await claimThenForm(d.name, d.batch, r.now, want, w.settings.leaseMs, w.id);
      dest.dueLook = res.due === want;
      dest.dueLookedAt = t;
      if (res.formed) this.formed(dest, r, res.nextAt);
      claimed = res.claimed;
    } else if (lookDue) {
      claimed = await w.store.claim(d.name, want, r.now, w.settings.leaseMs, w.id);
      dest.dueLook = claimed.length === want;
      dest.dueLookedAt = t;
    }
    if (claimThenForm === undefined && formAndClaim !== undefined && dest.formDue && claimed.length < want) {
      const res = await formAndClaim(d.name, d.batch, r.now, want - claimed.length, w.settings.leaseMs, w.id);
      this.formed(dest, r, res.nextAt);
      if (res.claimed.length > 0) claimed = claimed.length === 0 ? res.claimed : claimed.concat(res.claimed);
    }
    return claimed;
  }

  /** The claim took `t0`…now (monotonic): the claim time's and the completion rate's moving averages follow. */
  private sample(dest: Dest, t0: number): void {
    const t1 = this.w.clock.now();
    dest.claimMsEwma = dest.claimMsEwma === 0 ? t1 - t0 : 0.8 * dest.claimMsEwma + 0.2 * (t1 - t0);
    if (t1 - dest.sampleAt >= 20) {
      const rate = dest.done / (t1 - dest.sampleAt);
      dest.rateEwma = dest.rateEwma === 0 ? rate : 0.7 * dest.rateEwma + 0.3 * rate;
      dest.done = 0;
      dest.sampleAt = t1;
    }
  }

  /** Claimed batches are held and wait in the ready buffer; one this worker holds already takes the newer claim. */
  private hold(dest: Dest, claimed: readonly ClaimedBatch[], permit: Permit | null): void {
    for (const b of claimed) {
      const old = this.w.held.get(b.id);
      if (old !== undefined) {
        // Ours already: its lease ran out while the store was out of reach. Same batch, newer claim.
        this.w.outcomes.adopt(old, b.token);
        if (permit !== null) this.permitUsed(dest, permit); // no request goes out for it under this claim
        continue;
      }
      this.w.held.set(b.id, newHeld(b.id, b.token, dest, permit));
      dest.ready.push(b);
    }
  }

  /**
   * One request of a shared-rate permit is over (answered, failed, timed out or never
   * sent): once all are, the permit's window starts from now — the destination saw every
   * one of them by then, however late a request left or arrived.
   */
  permitUsed(dest: Dest, p: Permit): void {
    p.left--;
    p.end = Math.max(p.end, Math.round(this.w.clock.wallNow()));
    if (p.left > 0) return;
    this.w.store.endPermit(p.id, p.end).then(
      () => this.pump(dest, true),
      (e: unknown) => this.w.storeError('ending a rate permit', e),
    );
  }

  /**
   * After a claim of unknown outcome: the store's leases of `dest` held by this worker that
   * it does not know of are taken in (a batch held under an older token adopts the newer
   * one; others wait in the ready buffer like a claim's), and outcomes parked meanwhile are
   * written again under the tokens now known.
   */
  async reclaimOrphans(dest: Dest): Promise<void> {
    const w = this.w;
    const known: Lease[] = [];
    for (const h of w.held.values()) if (h.dest === dest) known.push({ id: h.id, token: h.token });
    const back = await w.store.reclaim!(dest.d.name, w.id, known, w.clock.wallNow(), w.settings.leaseMs);
    dest.orphans = false;
    for (const b of back) {
      const old: Held | undefined = w.held.get(b.id);
      if (old !== undefined) w.outcomes.adopt(old, b.token);
      else {
        w.held.set(b.id, newHeld(b.id, b.token, dest, null));
        dest.ready.push(b);
      }
    }
    w.outcomes.unpark(dest);
  }
}
