import {
  createCircuitBreaker,
  type BreakerOutcome,
  type BreakerSnapshot,
  type BreakerState,
  type BreakerStateChange,
  type BreakerTransitionReason,
  type CircuitBreaker,
  type ResolvedBreakerSpec,
} from '../core/breaker.js';
import type { Command, Link, Member } from './link.js';
import { BreakerCode } from './scripts.js';

/** What stats() tells of one shared breaker. */
export interface FleetBreakerStats {
  /** The state this process acts on now. */
  readonly state: BreakerState;
  /** The fleet's window at the last sync (closed circuit), plus what this process has not handed in yet. */
  readonly window: { readonly successes: number; readonly failures: number };
}

type Listener = (change: BreakerStateChange) => void;

/** The shortest life of a half-open trial's claim in Redis, ms. */
export const TRIAL_CLAIM_MIN_MS = 10_000;

/** A pub/sub announcement: { s: 'open' | 'closed', n: Redis µs, a, u: open times (Redis ms), r: reason }. */
export interface Announcement {
  readonly s: string;
  readonly n: number;
  readonly a?: number | undefined;
  readonly u?: number | undefined;
  readonly r?: string | undefined;
}
type Trial = 'none' | 'asking' | 'held' | 'out';

/**
 * A circuit breaker whose state is the fleet's. Calls are answered from this process's
 * view of the fleet's state, synchronously:
 * - closed: every call passes; outcomes are counted and handed in at the next sync
 *   (after `syncEvery` failures at once), where a Lua script adds them to the fleet's
 *   time-bucketed window and opens the circuit when the fleet's window trips the rule.
 *   This process's own in-process breaker sees the same outcomes: when it trips on this
 *   process's evidence alone, the process opens at once and announces it.
 * - open: refused until the open-until time (Redis's clock, mapped onto this process's).
 *   An open is announced on pub/sub, so every process opens within one round trip.
 * - half-open: a refused call asks Redis for the period's one trial (SET NX PX); the
 *   process that gets it lets its next call through; its outcome closes the circuit
 *   (after successThreshold trials in a row) or opens it again, for the whole fleet.
 * In local mode (Redis away) the in-process breaker decides alone; it was kept in the
 * fleet's state, so the fallback starts where the fleet was.
 */
export class FleetBreaker implements CircuitBreaker, Member {
  readonly name: string | null;
  readonly spec: ResolvedBreakerSpec;
  private own: CircuitBreaker;
  private view: 'closed' | 'open' = 'closed';
  private openedAt = 0;
  private openUntil = 0;
  /** The open period's start on Redis's clock (NaN when it was opened here and Redis has not confirmed it yet). */
  private openedAtShared = NaN;
  /** Redis time (µs) of the information the view comes from. */
  private heardAt = -Infinity;
  /** Bumped by every change this process makes on its own; replies to syncs sent before it are stale. */
  private epoch = 0;
  private trial: Trial = 'none';
  private heldUntil = 0;
  private trialResult: BreakerOutcome | null = null;
  private askAfter = -Infinity;
  private successes = 0;
  private failures = 0;
  private failuresSince = 0;
  private announce = false;
  private fleetWindow = { successes: 0, failures: 0 };
  private reported: BreakerState = 'closed';
  private readonly listeners: Listener[] = [];
  /** Nothing heard from the fleet yet: the first sync reads its state. */
  private fresh = true;
  private readonly keys: readonly string[];
  private readonly bucketMs: number;

  constructor(
    private readonly link: Link,
    private readonly dependency: string,
    keys: readonly string[],
    spec: ResolvedBreakerSpec,
    name: string | null,
  ) {
    this.name = name;
    this.spec = spec;
    this.keys = keys;
    this.bucketMs = spec.windowMs / spec.buckets;
    this.own = this.makeOwn('closed');
  }

  addListener(fn: Listener | null | undefined): void {
    if (typeof fn === 'function' && !this.listeners.includes(fn)) this.listeners.push(fn);
  }

  tryPass(now: number): boolean {
    if (this.link.local) return this.own.tryPass(now);
    if (this.view === 'closed') return true;
    if (!this.elapsed(now)) return false;
    this.report('half_open', now, 'open_elapsed');
    if (this.trial === 'held') {
      if (now < this.heldUntil) {
        this.trial = 'out';
        return true;
      }
      this.trial = 'none'; // our claim has expired in Redis: ask again
    }
    if (this.trial === 'none' && now >= this.askAfter) {
      this.trial = 'asking';
      this.link.soon(true);
    }
    return false;
  }

  record(outcome: BreakerOutcome, now: number): void {
    if (this.trial === 'out') {
      // The result of this process's trial call.
      this.trial = 'none';
      this.trialResult = outcome === 'success' || outcome === 'failure' ? outcome : 'ignored';
      this.epoch++;
      if (outcome === 'failure') {
        this.setOpen(now, now + this.spec.openMs);
        this.openedAtShared = NaN;
        this.report('open', now, 'trial_failure');
      } else if (outcome === 'success' && this.spec.successThreshold <= 1) {
        this.setClosed();
        this.report('closed', now, 'trial_success');
      }
      this.link.soon(true);
      return;
    }
    if (this.link.local) {
      this.own.record(outcome, now);
      return;
    }
    if (this.view !== 'closed') return; // a late result of a call made before the circuit opened
    if (outcome === 'success') this.successes++;
    else if (outcome === 'failure') {
      this.failures++;
      if (++this.failuresSince >= this.link.syncEvery) {
        this.failuresSince = 0;
        this.link.soon();
      }
    }
    this.own.record(outcome, now); // may trip on this process's evidence (onOwn)
  }

  state(now: number): BreakerState {
    if (this.link.local) return this.own.state(now);
    if (this.view === 'closed') return 'closed';
    if (!this.elapsed(now)) return 'open';
    this.report('half_open', now, 'open_elapsed');
    return 'half_open';
  }

  window(now: number): { readonly successes: number; readonly failures: number } {
    if (this.link.local) return this.own.window(now);
    return { successes: this.fleetWindow.successes + this.successes, failures: this.fleetWindow.failures + this.failures };
  }

  toJSON(): BreakerSnapshot {
    return this.own.toJSON();
  }

  stats(now: number): FleetBreakerStats {
    return { state: this.state(now), window: this.window(now) };
  }

  /** After a rejoin: whatever the fleet says now is news (Redis may have restarted, on another clock). */
  rejoined(): void {
    this.heardAt = -Infinity;
    this.fresh = true;
  }

  dirty(): boolean {
    return this.fresh || this.trialResult !== null || this.trial === 'asking' || this.successes > 0 || this.failures > 0 || this.announce;
  }

  write(out: Command[], all: boolean): void {
    const { keys, link, spec } = this;
    if (this.trialResult !== null) {
      const result = this.trialResult;
      this.trialResult = null;
      const epoch = this.epoch;
      out.push({
        script: 'breakerTrial',
        keys,
        args: [result, link.id, spec.openMs, spec.successThreshold, link.channel, this.dependency, this.stateTtl(), this.claimMs()],
        onReply: (r) => this.heard(r, epoch, 'trial'),
        onFail: () => {},
      });
    }
    if (this.trial === 'asking') {
      const epoch = this.epoch;
      out.push({
        script: 'breakerTrial',
        keys,
        args: ['probe', link.id, spec.openMs, spec.successThreshold, link.channel, this.dependency, this.stateTtl(), this.claimMs()],
        onReply: (r) => {
          if (this.trial !== 'asking') return;
          this.trial = 'none';
          const code = Number(r[1]);
          const now = link.wallNow();
          if (code === BreakerCode.Granted) {
            this.trial = 'held';
            this.heldUntil = now + this.claimMs();
          } else if (code === BreakerCode.HalfOpen) {
            // Someone else holds this period's trial: its outcome is announced; ask again only if it is lost.
            this.askAfter = now + this.claimMs();
          } else if (code === BreakerCode.Open) {
            this.askAfter = now + 2; // this clock runs a little ahead of Redis's
          }
          this.heard(r, epoch, 'probe');
        },
        onFail: () => {
          if (this.trial === 'asking') this.trial = 'none';
        },
      });
    }
    if (all || this.fresh || this.successes > 0 || this.failures > 0 || this.announce) {
      this.fresh = false;
      const s = this.successes;
      const f = this.failures;
      this.successes = 0;
      this.failures = 0;
      this.failuresSince = 0;
      const announce = this.announce && this.own.state(link.wallNow()) !== 'closed' ? 1 : 0;
      const epoch = this.epoch;
      out.push({
        script: 'breakerSync',
        keys,
        args: [
          s,
          f,
          announce,
          spec.windowMs,
          spec.buckets,
          spec.failureRatio,
          spec.minimumThroughput,
          spec.openMs,
          link.channel,
          this.dependency,
          this.stateTtl(),
        ],
        onReply: (r) => {
          if (announce === 1) this.announce = false;
          this.fleetWindow = { successes: Number(r[4]), failures: Number(r[5]) };
          this.heard(r, epoch, 'sync');
        },
        // Counts are handed in at most once; an announcement is tried again.
        onFail: () => {},
      });
    }
  }

  /** A pub/sub announcement. */
  announced(m: Announcement): void {
    if (m.s === 'open' && typeof m.a === 'number' && typeof m.u === 'number') this.apply('open', m.n, m.a, m.u, reasonOf(m.r));
    else if (m.s === 'closed') {
      if (this.announce) return; // this process has just opened on its own evidence; Redis will settle it
      this.apply('closed', m.n, 0, 0, 'trial_success');
    }
  }

  /** A script's reply: { µs, code, openedAt, openUntil, ... }. Replies to syncs sent before a change of our own are stale. */
  private heard(r: unknown[], epoch: number, what: 'sync' | 'probe' | 'trial'): void {
    if (epoch !== this.epoch && what !== 'trial') return;
    const code = Number(r[1]);
    if (code === BreakerCode.Closed) {
      if (this.announce) return;
      this.apply('closed', Number(r[0]), 0, 0, 'trial_success');
    } else {
      this.apply('open', Number(r[0]), Number(r[2]), Number(r[3]), what === 'trial' ? 'trial_failure' : 'failure_ratio');
    }
  }

  private apply(state: 'open' | 'closed', at: number, openedAtMs: number, openUntilMs: number, reason: BreakerTransitionReason): void {
    if (!(at >= this.heardAt)) return;
    this.heardAt = at;
    const now = this.link.wallNow();
    if (state === 'closed') {
      if (this.view === 'closed') return;
      this.setClosed();
      this.report('closed', now, reason);
      return;
    }
    this.announce = false;
    // The same open period as we know (compared on Redis's clock: the mapping moves a little with every round trip).
    if (this.view === 'open' && openedAtMs === this.openedAtShared) return;
    this.openedAtShared = openedAtMs;
    const openedAt = this.link.toLocal(openedAtMs);
    const openUntil = this.link.toLocal(openUntilMs);
    const wasHalfOpen = this.view === 'open' && this.elapsed(now);
    const wasClosed = this.view === 'closed';
    this.setOpen(openedAt, openUntil);
    if (wasClosed || wasHalfOpen || this.reported !== 'open') {
      this.report('open', now, wasHalfOpen || this.reported === 'half_open' ? 'trial_failure' : reason);
    }
    if (this.elapsed(now)) this.report('half_open', now, 'open_elapsed');
  }

  private setOpen(openedAt: number, openUntil: number): void {
    this.view = 'open';
    this.openedAt = openedAt;
    this.openUntil = openUntil;
    this.successes = 0;
    this.failures = 0;
    if (this.trial !== 'out') this.trial = 'none';
    this.askAfter = -Infinity;
    this.own = this.makeOwn('open');
  }

  private setClosed(): void {
    this.view = 'closed';
    this.openedAtShared = NaN;
    this.trial = 'none';
    this.askAfter = -Infinity;
    this.own = this.makeOwn('closed');
  }

  private elapsed(now: number): boolean {
    // As the in-process breaker: a clock that jumps back never keeps the circuit open past openMs.
    return now >= this.openUntil || now <= this.openedAt - this.spec.openMs;
  }

  /**
   * How long a trial's claim lasts: openMs, and at least TRIAL_CLAIM_MIN_MS, so that a
   * slow trial call is not presumed lost (and a second one sent) while it is still out.
   */
  private claimMs(): number {
    return Math.max(this.spec.openMs, TRIAL_CLAIM_MIN_MS);
  }

  private stateTtl(): number {
    return Math.ceil(Math.max(this.link.keyTtlMs, 3 * this.spec.openMs, 2 * this.claimMs()));
  }

  /** The in-process breaker, in the fleet's state (a window of its own starts empty). */
  private makeOwn(state: 'open' | 'closed'): CircuitBreaker {
    const snap: BreakerSnapshot = {
      version: 1,
      state,
      openedAt: state === 'open' ? this.openedAt : null,
      trialSuccesses: 0,
      bucketMs: this.bucketMs,
      buckets: [],
    };
    return createCircuitBreaker(this.spec, { name: this.name, initialState: snap, onStateChange: this.onOwn });
  }

  /** The in-process breaker changed state on its own. */
  private readonly onOwn = (c: BreakerStateChange): void => {
    if (this.link.local) {
      if (c.to === 'open' && c.from === 'closed') this.announce = true;
      else if (c.to === 'closed') this.announce = false;
      this.report(c.to, c.at, c.reason);
      return;
    }
    // In fleet mode the in-process breaker only counts: it trips on this process's own evidence.
    if (c.to === 'open' && this.view === 'closed') {
      this.epoch++;
      this.announce = true;
      this.view = 'open';
      this.openedAt = c.at;
      this.openUntil = c.at + this.spec.openMs;
      this.openedAtShared = NaN;
      this.report('open', c.at, c.reason);
      this.link.soon(true);
    }
  };

  private report(to: BreakerState, at: number, reason: BreakerTransitionReason): void {
    const from = this.reported;
    if (from === to) return;
    this.reported = to;
    for (const fn of this.listeners) {
      try {
        fn({ name: this.name, from, to, at, reason });
      } catch (e) {
        this.link.swallow('a breaker state listener', e);
      }
    }
  }
}

function reasonOf(r: unknown): BreakerTransitionReason {
  return r === 'trial_failure' ? 'trial_failure' : 'failure_ratio';
}
