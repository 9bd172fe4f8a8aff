// The fleet's syncs, node by node: which Redis node (lane) serves each dependency (route),
// when a node counts as joined (health.ts), probing a node that is not, and the round
// trips of a node that is — its dependencies' commands, one batch per node — with their
// deadlines and what their answers (or their silence) change.
import { afterFailure, afterSuccess, initialHealth, probeDelay, syncDeadline, type Health, type HealthStep } from './health.js';
import type { Command, Link, Member } from './link.js';
import type { FleetSettings } from './options.js';
import { MAIN, type Store } from './store.js';

/** What the syncs need from the fleet that runs them. */
export interface SyncHost {
  readonly settings: FleetSettings;
  readonly clock: { readonly wallNow: () => number };
  readonly channel: string;
  readonly id: string;
  /** The store in use (replaced when a URL turns out to name a cluster node). */
  store(): Store;
  /** Why the configuration cannot work (nothing is sent then), or null. */
  fatal(): string | null;
  clean(e: unknown): string;
  swallow(during: string, error: unknown): void;
  /** The process's mode (or the reason of its local mode) changed. */
  setMode(mode: 'fleet' | 'local', reason: string | null): void;
  /** Resolves the ready() waiters once joined. */
  wake(): void;
}

type Outcome = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: unknown } | null;

/** One Redis node the fleet's keys live on (one for a single Redis; one per master of a cluster). */
export class Lane {
  health: Health = initialHealth();
  reason: string | null = 'connecting';
  /** Redis's clock minus this process's wall clock, ms (each node has its own clock). */
  offset = 0;
  inFlight = 0;
  again = false;
  againAll = false;
  probing = false;
  probeTimer: ReturnType<typeof setTimeout> | null = null;
  /** performance.now() of the last exchange with the node. */
  lastExchange = -Infinity;
  constructor(readonly key: string) {}
}

/**
 * A dependency as its shared objects see the fleet: local or not by the node that serves
 * its keys (one hash slot: the keys share the hash tag `{name}`), Redis times mapped with
 * that node's clock.
 */
export class Route implements Link {
  local = true;
  lane: Lane | null = null;
  readonly members: Member[] = [];
  readonly syncEvery: number;
  readonly keyTtlMs: number;
  readonly channel: string;
  readonly id: string;

  constructor(
    private readonly fleet: Sync,
    readonly slot: number,
  ) {
    this.syncEvery = fleet.host.settings.syncEvery;
    this.keyTtlMs = fleet.host.settings.keyTtlMs;
    this.channel = fleet.host.channel;
    this.id = fleet.host.id;
  }

  soon(urgent?: boolean): void {
    this.fleet.soon(urgent);
  }

  wallNow(): number {
    return this.fleet.host.clock.wallNow();
  }

  toLocal(serverMs: number): number {
    return serverMs - (this.lane?.offset ?? 0);
  }

  swallow(during: string, error: unknown): void {
    this.fleet.host.swallow(during, error);
  }
}

/** The fleet's syncs with every node its keys live on. */
export class Sync {
  readonly lanes = new Map<string, Lane>();
  readonly routes = new Map<string, Route>();
  roundTrips = 0;
  syncFailures = 0;
  fallbacks = 0;
  rejoins = 0;
  rttLast: number | null = null;
  rttAvg: number | null = null;
  rttMax: number | null = null;
  lastError: string | null = null;
  closed = false;
  private soonArmed = false;
  private urgentArmed = false;
  private subPinging = false;

  constructor(readonly host: SyncHost) {}

  /** The route of a dependency (its keys' hash slot), placed on the node serving it. */
  route(name: string, slot: number): Route {
    let r = this.routes.get(name);
    if (r === undefined) {
      r = new Route(this, slot);
      this.routes.set(name, r);
      this.place(r);
    }
    return r;
  }

  /** A shared object joins its dependency's route; a joined route syncs it soon. */
  join(route: Route, m: Member): void {
    route.members.push(m);
    if (!route.local) this.soon();
  }

  /** Every node not joined yet takes this reason (the first failure to connect). */
  refuseAll(reason: string): void {
    for (const lane of this.lanes.values()) {
      if (lane.health.mode === 'connecting') lane.health = { ...lane.health, mode: 'local' };
      lane.reason = reason;
    }
  }

  /** The store was replaced: every route is placed again. */
  reset(): void {
    for (const lane of this.lanes.values()) if (lane.probeTimer !== null) clearTimeout(lane.probeTimer);
    this.lanes.clear();
    for (const r of this.routes.values()) r.lane = null;
  }

  /** Ends the syncs: every route local, no more probes. */
  end(): void {
    this.closed = true;
    for (const lane of this.lanes.values()) if (lane.probeTimer !== null) clearTimeout(lane.probeTimer);
    for (const r of this.routes.values()) r.local = true;
  }

  /** What stats() tells of each node. */
  nodes(): Record<string, { mode: Health['mode']; reason: string | null; dependencies: number; deadlineMs: number; failures: number }> {
    const deps = new Map<Lane, number>();
    for (const r of this.routes.values()) if (r.lane !== null) deps.set(r.lane, (deps.get(r.lane) ?? 0) + 1);
    const nodes: Record<string, { mode: Health['mode']; reason: string | null; dependencies: number; deadlineMs: number; failures: number }> = {};
    for (const lane of this.lanes.values()) {
      nodes[lane.key] = {
        mode: lane.health.mode,
        reason: lane.health.mode === 'fleet' ? null : lane.reason,
        dependencies: deps.get(lane) ?? 0,
        deadlineMs: Math.round(this.deadline(lane) * 1000) / 1000,
        failures: lane.health.failures,
      };
    }
    return nodes;
  }

  // --- lanes and routes ------------------------------------------------------------

  private lane(key: string): Lane {
    let lane = this.lanes.get(key);
    if (lane === undefined) {
      lane = new Lane(key);
      this.lanes.set(key, lane);
    }
    return lane;
  }

  /** Puts a route on the node that serves its slot now; says when it becomes local or shared. */
  place(r: Route): void {
    const key = this.host.fatal() === null && !this.closed && this.host.store().ready() ? this.host.store().laneOf(r.slot) : null;
    const lane = key === null ? null : this.lane(key);
    r.lane = lane;
    const local = this.closed || lane === null || lane.health.mode !== 'fleet';
    if (local === r.local) return;
    r.local = local;
    if (!local) {
      // Shared again (or for the first time): whatever the fleet says now is news.
      for (const m of r.members) {
        try {
          m.rejoined?.();
        } catch (e) {
          this.lastError = this.host.clean(e);
        }
      }
    }
  }

  /** Topology, readiness or a node's mode changed: lanes, routes and the process's mode follow. */
  changed(): void {
    if (this.closed) return;
    if (this.host.fatal() === null && this.host.store().ready()) {
      const current = new Set(this.host.store().lanes());
      for (const key of current) this.lane(key);
      // A node that serves nothing any more (a failed master replaced by its replica) is forgotten.
      for (const [key, lane] of this.lanes) {
        if (!current.has(key)) {
          if (lane.probeTimer !== null) clearTimeout(lane.probeTimer);
          this.lanes.delete(key);
        }
      }
    }
    for (const r of this.routes.values()) this.place(r);
    for (const lane of this.lanes.values()) if (lane.health.mode !== 'fleet') this.scheduleProbe(lane, 0);
    this.updateMode();
  }

  /** The process's mode: fleet when every node is joined (and the store is up); local as soon as one has fallen back. */
  private updateMode(): void {
    if (this.closed) return;
    if (this.host.fatal() !== null) return this.host.setMode('local', this.host.fatal());
    const lanes = [...this.lanes.values()];
    const fallen = lanes.find((l) => l.health.mode === 'local');
    if (fallen !== undefined) return this.host.setMode('local', this.laneReason(fallen));
    if (lanes.length > 0 && this.host.store().ready() && lanes.every((l) => l.health.mode === 'fleet')) return this.host.setMode('fleet', null);
    this.host.wake();
  }

  private laneReason(lane: Lane): string {
    const why = lane.reason ?? 'not joined';
    return lane.key === MAIN ? why : `Redis Cluster node ${lane.key}: ${why}`;
  }

  /** A node's connection closed: it falls back at once. */
  lost(key: string | null, why: string): void {
    if (this.closed) return;
    this.lastError ??= why;
    const lanes = key === null ? [...this.lanes.values()] : [this.lanes.get(key)].filter((l): l is Lane => l !== undefined);
    for (const lane of lanes) this.observe(lane, afterFailure(lane.health, true), this.lastError ?? why);
    this.changed();
  }

  /** Applies a health step to a node. */
  private observe(lane: Lane, step: HealthStep, reason: string | null): void {
    const before = lane.health.mode;
    lane.health = step.health;
    if (step.health.mode !== 'fleet') lane.reason = reason ?? lane.reason;
    if (step.change === 'local' && before === 'fleet') this.fallbacks++;
    if (step.change === 'fleet' && before === 'local') this.rejoins++;
    if (step.change !== null) {
      for (const r of this.routes.values()) if (r.lane === lane) this.place(r);
      if (step.change === 'fleet') void this.sync(true, false, lane);
      else this.scheduleProbe(lane, probeDelay(this.host.settings.syncMs));
      this.updateMode();
    }
  }

  deadline(lane: Lane): number {
    return syncDeadline(lane.health, { timeoutMs: this.host.settings.timeoutMs, maxMs: 2 * this.host.settings.connectTimeoutMs });
  }

  // --- probes (a node not joined) --------------------------------------------------

  private scheduleProbe(lane: Lane, ms: number): void {
    if (this.closed || this.host.fatal() !== null || lane.probing || lane.probeTimer !== null || lane.health.mode === 'fleet') return;
    lane.probeTimer = setTimeout(() => {
      lane.probeTimer = null;
      void this.probe(lane);
    }, ms);
    lane.probeTimer.unref();
  }

  /** TIME on a node that is not joined: good probes in a row join it again. */
  private async probe(lane: Lane): Promise<void> {
    if (this.closed || this.host.fatal() !== null || lane.probing || this.lanes.get(lane.key) !== lane || lane.health.mode === 'fleet') return;
    const p = this.host.store().time(lane.key);
    if (p === null) {
      // No connection (yet): not a failure of the node's answers, but not a good probe either.
      if (lane.health.good > 0) lane.health = { ...lane.health, good: 0 };
      this.host.store().refresh();
      this.scheduleProbe(lane, probeDelay(this.host.settings.syncMs));
      return;
    }
    lane.probing = true;
    // The pub/sub connection may have stopped answering too (a partition): checked at the same pace.
    void this.pingSub();
    const deadline = this.deadline(lane);
    const wall0 = this.host.clock.wallNow();
    const t0 = performance.now();
    const outcome = (await bounded([p], deadline))[0] ?? null;
    const rtt = performance.now() - t0;
    lane.probing = false;
    lane.lastExchange = performance.now();
    this.roundTrips++;
    if (this.closed || this.lanes.get(lane.key) !== lane) return;
    if (outcome?.ok === true && Array.isArray(outcome.value)) {
      const [sec, us] = outcome.value as [string, string];
      const serverMs = Number(sec) * 1000 + Number(us) / 1000;
      if (Number.isFinite(serverMs)) lane.offset = serverMs - (wall0 + rtt / 2);
      this.good(rtt);
      this.observe(lane, afterSuccess(lane.health, rtt), null);
    } else {
      const why =
        outcome === null
          ? `${this.where(lane)} did not answer within ${round(deadline)} ms`
          : outcome.ok
            ? 'an unexpected reply to TIME'
            : this.host.clean(outcome.error);
      this.syncFailures++;
      this.lastError = why;
      // A connection that stopped answering is replaced: a new one does not wait out TCP's backoff.
      if (outcome === null) this.host.store().replace(lane.key);
      this.host.store().refresh();
      this.observe(lane, afterFailure(lane.health, false), why);
    }
    this.scheduleProbe(lane, probeDelay(this.host.settings.syncMs));
  }

  // --- syncs (nodes joined) --------------------------------------------------------

  tick(): void {
    if (this.closed || this.host.fatal() !== null) return;
    this.changed();
    void this.sync(false);
    const now = performance.now();
    // An idle node is asked the time now and then: a dead one is noticed, its clock followed.
    for (const lane of this.lanes.values()) {
      if (lane.health.mode === 'fleet' && lane.inFlight === 0 && now - lane.lastExchange >= 2 * this.host.settings.syncMs)
        void this.sync(true, false, lane, true);
    }
    void this.pingSub();
  }

  /** PING on the subscriber connection; one that stopped answering is replaced. */
  private async pingSub(): Promise<void> {
    if (this.subPinging) return;
    const p = this.host.store().pingSub();
    if (p === null) return;
    this.subPinging = true;
    const main = this.lanes.values().next().value as Lane | undefined;
    const deadline = main === undefined ? this.host.settings.connectTimeoutMs : this.deadline(main);
    const outcome = (await bounded([p], Math.max(deadline, this.host.settings.timeoutMs)))[0] ?? null;
    this.subPinging = false;
    if (outcome === null && !this.closed) {
      this.lastError = `the pub/sub connection did not answer a PING within ${round(deadline)} ms`;
      this.host.store().replaceSub();
    }
  }

  /**
   * One round trip per joined node: the commands of every dependency it serves (`all`:
   * also those with nothing to hand in, to read the fleet's state; `timeOnly`: just its
   * clock). One sync at a time per node (a stalled node gets one batch, not a pile); an
   * urgent one may pass a sync in flight. Never throws.
   */
  async sync(all: boolean, urgent = false, only: Lane | null = null, timeOnly = false): Promise<void> {
    if (this.closed || this.host.fatal() !== null) return;
    if (!this.host.store().ready()) return;
    const byLane = new Map<Lane, Route[]>();
    for (const r of this.routes.values()) {
      this.place(r);
      if (r.lane === null || r.local || (only !== null && r.lane !== only)) continue;
      let list = byLane.get(r.lane);
      if (list === undefined) byLane.set(r.lane, (list = []));
      list.push(r);
    }
    const work: Promise<void>[] = [];
    const lanes = only !== null ? [only] : [...this.lanes.values()];
    for (const lane of lanes) {
      if (lane.health.mode !== 'fleet' || this.lanes.get(lane.key) !== lane) continue;
      if (lane.inFlight >= (urgent ? 2 : 1)) {
        lane.again = true;
        lane.againAll ||= all;
        continue;
      }
      const cmds: Command[] = [];
      if (!timeOnly) {
        try {
          for (const r of byLane.get(lane) ?? []) for (const m of r.members) if (all || m.dirty()) m.write(cmds, all);
        } catch (e) {
          this.lastError = this.host.clean(e);
        }
      }
      if (cmds.length === 0 && !all) continue;
      work.push(this.send(lane, cmds));
    }
    await Promise.all(work);
  }

  private async send(lane: Lane, cmds: Command[]): Promise<void> {
    lane.inFlight++;
    const deadline = this.deadline(lane);
    const wall0 = this.host.clock.wallNow();
    const t0 = performance.now();
    const calls: (Promise<unknown> | null)[] =
      cmds.length === 0 ? [this.host.store().time(lane.key)] : cmds.map((c) => this.host.store().call(c.script, c.keys, c.args));
    const outcomes = await bounded(calls, deadline);
    const rtt = performance.now() - t0;
    lane.inFlight--;
    lane.lastExchange = performance.now();
    this.roundTrips++;
    try {
      this.settle(lane, cmds, outcomes, deadline, wall0, rtt);
    } catch (e) {
      this.lastError = this.host.clean(e);
    }
    if (lane.again && !this.closed && lane.inFlight === 0) {
      const again = lane.againAll;
      lane.again = false;
      lane.againAll = false;
      void this.sync(again, false, lane);
    }
  }

  private settle(lane: Lane, cmds: Command[], outcomes: Outcome[], deadline: number, wall0: number, rtt: number): void {
    let error: string | null = null;
    let timedOut = false;
    for (const o of outcomes) {
      if (o === null) timedOut = true;
      else if (!o.ok) error ??= this.host.clean(o.error);
      else if (!Array.isArray(o.value)) error ??= 'an unexpected reply from Redis';
    }
    if (timedOut) error = `${this.where(lane)} did not answer within ${round(deadline)} ms`;
    // Redis's clock, from the first reply: { µs, … } of a script or TIME's [seconds, µs].
    const first = outcomes[0];
    if (first?.ok === true && Array.isArray(first.value)) {
      const v = first.value as unknown[];
      const serverMs = cmds.length === 0 ? Number(v[0]) * 1000 + Number(v[1]) / 1000 : Number(v[0]) / 1000;
      if (Number.isFinite(serverMs)) lane.offset = serverMs - (wall0 + rtt / 2);
    }
    cmds.forEach((c, k) => {
      const o = outcomes[k];
      if (o?.ok === true && Array.isArray(o.value)) c.onReply(o.value as unknown[]);
      else c.onFail();
    });
    if (this.closed) return;
    if (error === null) {
      this.good(rtt);
      this.observe(lane, afterSuccess(lane.health, rtt), null);
      return;
    }
    this.syncFailures++;
    this.lastError = error;
    const step = afterFailure(lane.health, false);
    // The fallback's connection stopped answering: a new one (the old one may sit in TCP's backoff).
    if (timedOut && step.change === 'local') this.host.store().replace(lane.key);
    if (step.change === null && lane.health.mode === 'fleet') {
      // Tried again soon: a node is judged by syncs in a row, not by the next tick.
      const t = setTimeout(() => void this.sync(true, false, lane), probeDelay(this.host.settings.syncMs));
      t.unref();
    }
    this.observe(lane, step, error);
  }

  private good(rtt: number): void {
    this.rttLast = rtt;
    this.rttAvg = this.rttAvg === null ? rtt : this.rttAvg * 0.9 + rtt * 0.1;
    this.rttMax = this.rttMax === null ? rtt : Math.max(this.rttMax, rtt);
  }

  private where(lane: Lane): string {
    return lane.key === MAIN ? `Redis (${this.host.store().describe()})` : `Redis Cluster node ${lane.key}`;
  }

  soon(urgent = false): void {
    if (this.closed) return;
    if (urgent) {
      if (this.urgentArmed) return;
      this.urgentArmed = true;
      setImmediate(() => {
        this.urgentArmed = false;
        void this.sync(false, true);
      });
      return;
    }
    if (this.soonArmed) return;
    this.soonArmed = true;
    setImmediate(() => {
      this.soonArmed = false;
      void this.sync(false);
    });
  }
}

/** Waits for every call, or until `ms`; a call not answered by then is null (as is a call that could not be sent: an error). */
async function bounded(calls: readonly (Promise<unknown> | null)[], ms: number): Promise<Outcome[]> {
  const out: Outcome[] = calls.map(() => null);
  let left = calls.length;
  await new Promise<void>((resolve) => {
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve();
    };
    // The verdict waits one more turn of the event loop: a reply that has arrived while
    // this process was busy is read (poll phase) before a late timer calls it lost.
    const timer = setTimeout(() => setImmediate(finish), ms);
    timer.unref();
    calls.forEach((p, i) => {
      if (p === null) {
        out[i] = { ok: false, error: new Error('not connected') };
        if (--left === 0) finish();
        return;
      }
      p.then(
        (value) => {
          if (done) return;
          out[i] = { ok: true, value };
          if (--left === 0) finish();
        },
        (error: unknown) => {
          if (done) return;
          out[i] = { ok: false, error };
          if (--left === 0) finish();
        },
      );
    });
    if (calls.length === 0) finish();
  });
  return out;
}

function round(ms: number): number {
  return Math.round(ms);
}
