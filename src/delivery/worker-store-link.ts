// A worker's view of its store's health: every store call is tracked; one that does not
// answer within storeTimeoutMs is reported; a store out of reach is pinged until it
// answers, and then the worker starts again at once.
import { DeliveryError } from './errors.js';
import { PROBE_EVERY_MS, PROBE_TIMEOUT_MS, STORE_RETRY_MAX_MS, type WorkerCore } from './worker-state.js';

interface Call {
  readonly during: string;
  readonly since: number;
  reported: number;
}

export class StoreLink {
  /** Store calls under way (claim rounds, outcome writes, renewals), since when (monotonic), and when last reported as unanswered. */
  private readonly calls = new Map<number, Call>();
  private callSeq = 0;
  private cancelWatchdog: (() => void) | null = null;
  /** The store cannot be reached: a call failed so, or did not answer within storeTimeoutMs. Pinged until it answers. */
  private down = false;
  private cancelProbe: (() => void) | null = null;
  /** When back() last acted (monotonic). */
  private backAt = Number.NEGATIVE_INFINITY;
  /** Store calls that failed in a row (claims, outcome writes): the pause before the next try doubles with them. */
  failures = 0;

  constructor(private readonly w: WorkerCore) {}

  /** The pause before a failed claim or outcome write is tried again: doubling from pollMs, up to STORE_RETRY_MAX_MS. */
  retryMs(): number {
    return Math.min(STORE_RETRY_MAX_MS, this.w.settings.pollMs * 2 ** Math.min(this.failures, 10));
  }

  /**
   * A store call begins (`during` says what it is for the watchdog's report); the function
   * returned ends it: `true` when it succeeded (a store thought down is back).
   */
  track(during: string): (ok: boolean) => void {
    const id = ++this.callSeq;
    this.calls.set(id, { during, since: this.w.clock.now(), reported: 0 });
    if (this.cancelWatchdog === null && this.w.isRunning) this.armWatchdog(this.w.settings.storeTimeoutMs);
    return (ok) => {
      this.calls.delete(id);
      if (ok && this.down) this.back();
    };
  }

  /**
   * The watchdog: a store call that has not answered for storeTimeoutMs is a store_error
   * (ERR_STORE_UNAVAILABLE), repeated every storeTimeoutMs while it waits. The worker
   * still waits for it: an answer that comes late is used.
   */
  private armWatchdog(ms: number): void {
    this.cancelWatchdog = this.w.clock.setTimer(() => {
      this.cancelWatchdog = null;
      if (!this.w.isRunning) return;
      const limit = this.w.settings.storeTimeoutMs;
      const now = this.w.clock.now();
      let oldest: Call | null = null;
      let waiting = 0;
      let next = Number.POSITIVE_INFINITY;
      for (const c of this.calls.values()) {
        const due = Math.max(c.since, c.reported) + limit;
        if (due <= now) {
          waiting++;
          c.reported = now;
          if (oldest === null || c.since < oldest.since) oldest = c;
        }
        next = Math.min(next, Math.max(c.since, c.reported) + limit);
      }
      if (oldest !== null) {
        const secs = ((now - oldest.since) / 1000).toFixed(1);
        this.w.storeError(
          oldest.during,
          new DeliveryError(
            'ERR_STORE_UNAVAILABLE',
            `${this.w.store.description}: no answer from the store for ${secs} s (storeTimeoutMs ${limit}; ${waiting} call${waiting === 1 ? '' : 's'} waiting); still waiting, nothing stored earlier is lost`,
          ),
        );
      }
      if (next !== Number.POSITIVE_INFINITY) this.armWatchdog(Math.max(1, next - now));
    }, ms);
  }

  /** The store cannot be reached: ask it (ping) every PROBE_EVERY_MS until it answers. */
  markDown(): void {
    if (this.down || !this.w.isRunning) return;
    this.down = true;
    if (this.w.store.ping !== undefined) this.armProbe();
  }

  private armProbe(): void {
    this.cancelProbe = this.w.clock.setTimer(() => {
      this.cancelProbe = null;
      if (!this.down || !this.w.isRunning || this.w.stopping) return;
      this.w.store.ping!(PROBE_TIMEOUT_MS).then(
        () => this.back(),
        () => {},
      );
      this.armProbe();
    }, PROBE_EVERY_MS);
  }

  /**
   * The store answers again: outcomes waiting are written and leases renewed now, and
   * every destination is looked at now, without waiting for a claim that a partition
   * stalled (it ends by its own timeout; what it claimed, if anything, is still used).
   */
  private back(): void {
    if (!this.down) return;
    this.down = false;
    this.cancelProbe?.();
    this.cancelProbe = null;
    this.failures = 0;
    if (!this.w.isRunning || this.w.stopping) return;
    // At most once per PROBE_EVERY_MS (a store that fails some calls and answers others must not make a loop of it).
    const at = this.w.clock.now();
    if (at - this.backAt < PROBE_EVERY_MS) return;
    this.backAt = at;
    this.w.outcomes.retryNow();
    this.w.leases.renewNow();
    this.w.loop.restart();
  }

  /** The worker is stopping: no more pings. */
  stopProbing(): void {
    this.cancelProbe?.();
    this.cancelProbe = null;
  }

  /** The worker has stopped: nothing is watched any more. */
  clear(): void {
    this.cancelWatchdog?.();
    this.cancelWatchdog = null;
    this.calls.clear();
    this.down = false;
  }
}
