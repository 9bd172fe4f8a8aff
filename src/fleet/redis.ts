import { createHash, randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { hostname } from 'node:os';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import type * as IORedis from 'ioredis';
import { createCircuitBreaker, normalizeBreakerSpec, type BreakerOptions, type BreakerSpec, type CircuitBreaker } from '../core/breaker.js';
import { createRetryBudget, normalizeBudget, type BudgetSpec, type RetryBudget } from '../core/budget.js';
import type { Fleet } from '../core/fleet.js';
import { normalizeRateLimit, type RateLimitSpec, type TokenBucket } from '../core/token-bucket.js';
import { FleetBreaker, type Announcement, type FleetBreakerStats } from './breaker.js';
import { FleetBudget, type FleetBudgetStats } from './budget.js';
import { afterFailure, afterSuccess, initialHealth, probeDelay, syncDeadline, type Health, type HealthStep } from './health.js';
import type { Command, Link, Member } from './link.js';
import {
  checkCluster, checkRedisOptions, checkSentinels, checkUrl, invalid, resolveSettings, where, type FleetSettings, type SentinelAddress,
} from './options.js';
import { FleetRateLimit, type FleetRateStats } from './rate.js';
import { keySlot } from './slot.js';
import { ClusterStore, MAIN, SingleStore, type Store, type StoreListener, type StoreSettings } from './store.js';

/**
 * `createRedisFleet(options)`: where Redis is — exactly one of `url`, `cluster`,
 * `sentinels` (with `name`) and `client` — and every other field optional (see FLEET_DEFAULTS).
 */
export interface RedisFleetOptions {
  /**
   * `redis://[[user]:password@]host[:port][/db]` or `rediss://…` (TLS). A Redis Cluster
   * node works too: the fleet finds that it is one (INFO cluster) and uses the cluster.
   */
  readonly url?: string;
  /** The seed nodes of a Redis Cluster: `['redis://:password@h1:7000', 'redis://h2:7000', …]` (one scheme and password for all). */
  readonly cluster?: readonly string[];
  /** The Sentinels of a master, as ioredis takes them: `[{ host, port }, …]` (or `'host:port'`); with `name`. */
  readonly sentinels?: readonly (SentinelAddress | string)[];
  /** The master's name in the Sentinels' configuration (with `sentinels`). */
  readonly name?: string;
  /**
   * ioredis options for every connection the fleet opens (`password`, `username`, `tls`,
   * `sentinelPassword`, …). Not with `client`. The fleet's own connection settings win
   * (no offline queue, `connectTimeoutMs`, `reconnectMs`).
   */
  readonly redisOptions?: Readonly<Record<string, unknown>>;
  /**
   * An ioredis client (`Redis`, including one on Sentinels, or `Cluster`): the fleet opens
   * connections of its own with its settings (`duplicate()`), so that it can replace one
   * that stops answering; yours is never used for commands, changed or closed.
   */
  readonly client?: Redis | Cluster;
  /** Prefix of every key and channel. Default `relent:`; use one per environment. */
  readonly prefix?: string;
  /**
   * The shortest time a sync may take before it counts as failed, ms. Default 50. The
   * deadline follows the measured round trip (plus four deviations, as TCP's), up to
   * twice `connectTimeoutMs`; a joined node falls back after three failed syncs in a row.
   */
  readonly timeoutMs?: number;
  /** Deposits, counts and lease top-ups are handed in at least this often while there are any, ms. Default 1000. */
  readonly syncMs?: number;
  /** A breaker hands in its counts after this many failures, without waiting for syncMs. Default 10. */
  readonly syncEvery?: number;
  /** Tokens a process may hold of a shared budget. Default: a tenth of the budget's maxTokens, at least 1. */
  readonly leaseTokens?: number | null;
  /** Keys live this long after their last use, ms (a budget's bucket at least until it would have refilled). Default 600 000. */
  readonly keyTtlMs?: number;
  /** The longest wait between two reconnection attempts, ms. Default 250. */
  readonly reconnectMs?: number;
  /** How long a connection attempt may take, ms; twice this is the longest deadline of a sync. Default 1000. */
  readonly connectTimeoutMs?: number;
  /** Mode changes and other notices (see FleetEvent). */
  readonly onEvent?: ((event: FleetEvent) => void) | null;
  /** The wall clock the callers pass to breakers (default Date.now): Redis times are mapped onto it. */
  readonly clock?: { readonly wallNow: () => number } | null;
}

/** What the fleet tells about itself. */
export type FleetEvent =
  /** The process joined the fleet, or fell back to local state (`reason` says why). Once per change. */
  | { readonly type: 'fleet_mode'; readonly ts: number; readonly mode: 'fleet' | 'local'; readonly reason: string | null }
  /** A budget of a kind the fleet does not share: it stays per process. Once per dependency. */
  | { readonly type: 'fleet_budget_local'; readonly ts: number; readonly dependency: string; readonly kind: string; readonly reason: string }
  /** A listener (breaker state change or onEvent) threw; the error was caught. */
  | { readonly type: 'fleet_listener_error'; readonly ts: number; readonly during: string; readonly message: string };

/** What stats() tells of one Redis node (one for a single Redis; one per master of a cluster). */
export interface FleetNodeStats {
  /** `fleet`: syncs succeed; `local`: fell back (`reason`); `connecting`: not joined yet. */
  readonly mode: 'connecting' | 'fleet' | 'local';
  readonly reason: string | null;
  /** Dependencies whose keys this node serves. */
  readonly dependencies: number;
  /** The deadline of its next sync, ms. */
  readonly deadlineMs: number;
  /** Failed syncs or probes in a row. */
  readonly failures: number;
}

export interface FleetStats {
  /** `fleet`: shared state in use for every dependency; `local`: some or all run on this process's own share (see `nodes`). */
  readonly mode: 'fleet' | 'local';
  /** Why the mode is local (null in fleet mode). */
  readonly reason: string | null;
  /** When the mode last changed (wall clock ms). */
  readonly since: number;
  /** Where the fleet connects: `redis://host:port`, `cluster …`, `sentinel …` (never credentials). */
  readonly store: string;
  /** Commands can be sent (the connection is up; for a cluster, its slots are known). */
  readonly connected: boolean;
  /** The pub/sub connection is subscribed to breaker announcements. */
  readonly subscribed: boolean;
  /** Round trips sent: one per node a sync visits (however many dependencies it carries), and probes. */
  readonly roundTrips: number;
  /** Syncs or probes that failed or took longer than their deadline. */
  readonly syncFailures: number;
  /** Times the process fell back to local state, and joined again. */
  readonly fallbacks: number;
  readonly rejoins: number;
  /** Round-trip times of successful syncs, ms. */
  readonly rttMs: { readonly last: number | null; readonly avg: number | null; readonly max: number | null };
  /** The last error seen (connection or sync), without secrets. */
  readonly lastError: string | null;
  /** Each Redis node the fleet's keys live on (`main` for one node, `host:port` in a cluster). */
  readonly nodes: Readonly<Record<string, FleetNodeStats>>;
  readonly budgets: Readonly<Record<string, FleetBudgetStats>>;
  readonly breakers: Readonly<Record<string, FleetBreakerStats>>;
  readonly rateLimits: Readonly<Record<string, FleetRateStats>>;
}

export interface RedisFleet extends Fleet {
  /** The rate limit of `dependency` shared by the fleet: this process's share as a token bucket (see relent's createRateLimiter). */
  rateLimit(dependency: string, spec: RateLimitSpec): TokenBucket;
  /** `fleet` or `local` (see stats()). */
  readonly mode: 'fleet' | 'local';
  /**
   * Resolves true once the process has joined the fleet (syncs succeed on every node, and
   * breaker announcements arrive), false if it has not within `timeoutMs` (default 2000),
   * the fleet is closed, or its configuration cannot work (stats().reason says why). Never
   * rejects. Calls need not wait for it: until then they run on local state.
   */
  ready(timeoutMs?: number): Promise<boolean>;
  stats(): FleetStats;
  /** Hands in what is pending (bounded by the sync deadline), then ends the fleet's own connections. Budgets and breakers keep working, locally. */
  close(): Promise<void>;
}

let ioredisModule: typeof IORedis | null = null;
/** ioredis, loaded on first use: importing any other part of relent never needs it. */
function ioredis(): typeof IORedis {
  if (ioredisModule === null) {
    try {
      ioredisModule = createRequire(import.meta.url)('ioredis') as typeof IORedis;
    } catch (e) {
      throw new Error('relent/fleet needs the optional peer dependency `ioredis` (npm install ioredis)', { cause: e });
    }
  }
  return ioredisModule;
}

/** Dependencies shared by one fleet object; past this, new ones get in-process state (said once). */
const MAX_SHARED = 10_000;

/** Where Redis is, validated. */
type Target =
  | { readonly kind: 'url'; readonly url: URL; readonly redisOptions: Readonly<Record<string, unknown>> }
  | { readonly kind: 'cluster'; readonly urls: readonly URL[]; readonly redisOptions: Readonly<Record<string, unknown>> }
  | { readonly kind: 'sentinel'; readonly sentinels: readonly SentinelAddress[]; readonly name: string; readonly redisOptions: Readonly<Record<string, unknown>> }
  | { readonly kind: 'client'; readonly client: Redis | Cluster };

const KNOWN = ['url', 'cluster', 'sentinels', 'name', 'redisOptions', 'client', 'prefix', 'timeoutMs', 'syncMs', 'syncEvery', 'leaseTokens', 'keyTtlMs', 'reconnectMs', 'connectTimeoutMs', 'onEvent', 'clock'];

function resolveTarget(raw: Record<string, unknown>): Target {
  const given = (['url', 'cluster', 'sentinels', 'client'] as const).filter((k) => raw[k] !== undefined);
  if (given.length !== 1) {
    throw invalid(given[1] ?? 'url', `Expected exactly one of \`url\`, \`cluster\`, \`sentinels\` (with \`name\`) and \`client\`${given.length > 1 ? `, got ${given.join(' and ')}` : ''}`);
  }
  if (raw.name !== undefined && raw.sentinels === undefined) throw invalid('name', 'Expected `name` only with `sentinels` (the master\'s name in their configuration)');
  const redisOptions = raw.redisOptions === undefined ? {} : checkRedisOptions(raw.redisOptions);
  switch (given[0]) {
    case 'url':
      return { kind: 'url', url: checkUrl(raw.url), redisOptions };
    case 'cluster':
      return { kind: 'cluster', urls: checkCluster(raw.cluster), redisOptions };
    case 'sentinels': {
      const sentinels = checkSentinels(raw.sentinels);
      if (typeof raw.name !== 'string' || raw.name === '') throw invalid('name', 'Expected `name` (the master\'s name in the Sentinels\' configuration) with `sentinels`');
      return { kind: 'sentinel', sentinels, name: raw.name, redisOptions };
    }
    default: {
      const client = raw.client as Redis | Cluster;
      if (typeof client !== 'object' || client === null || typeof (client as { duplicate?: unknown }).duplicate !== 'function' || typeof (client as { defineCommand?: unknown }).defineCommand !== 'function') {
        throw invalid('client', 'Expected `client` to be an ioredis client (Redis or Cluster)');
      }
      if (raw.redisOptions !== undefined) throw invalid('redisOptions', 'Expected no `redisOptions` with `client` (the client carries its own)');
      return { kind: 'client', client };
    }
  }
}

/**
 * A fleet whose budgets and breakers are shared through Redis (one node, a master behind
 * Sentinels, or a Redis Cluster). Nothing a call does ever waits on Redis: budgets and
 * breakers answer from this process's state, and a background sync (one round trip per
 * Redis node for every dependency it serves) keeps that state in step. When a node is
 * away (its connection drops, or three syncs in a row fail or take longer than their
 * deadline) the dependencies it serves fall back to local state — each process spending
 * its share of the fleet's budget (share.ts) — said once, in a `fleet_mode` event and in
 * stats(); the fleet replaces a connection that stopped answering, probes the node, and
 * joins again after three good probes in a row.
 *
 * Bad options throw ERR_INVALID_INPUT here (never later, in a call). An unreachable URL
 * or a wrong password does not throw: the fleet stays local and says why.
 */
export function createRedisFleet(options: RedisFleetOptions): RedisFleet {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) throw invalid('options', 'Expected `options` to be an object with `url`, `cluster`, `sentinels` or `client`');
  const raw = options as Record<string, unknown>;
  for (const k of Object.keys(raw)) if (!KNOWN.includes(k)) throw invalid(k, `Unknown option \`${k}\` (createRedisFleet takes ${KNOWN.join(', ')})`);
  const target = resolveTarget(raw);
  const settings = resolveSettings(raw);
  const onEvent = raw.onEvent ?? null;
  if (onEvent !== null && typeof onEvent !== 'function') throw invalid('onEvent', 'Expected `onEvent` to be a function');
  const clock = raw.clock ?? null;
  if (clock !== null && (typeof clock !== 'object' || typeof (clock as { wallNow?: unknown }).wallNow !== 'function')) throw invalid('clock', 'Expected `clock` to have a wallNow() function');
  return new RedisFleetImpl(target, settings, onEvent as ((e: FleetEvent) => void) | null, (clock as { wallNow: () => number } | null) ?? { wallNow: Date.now });
}

/** One Redis node the fleet's keys live on (one for a single Redis; one per master of a cluster). */
class Lane {
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
class Route implements Link {
  local = true;
  lane: Lane | null = null;
  readonly members: Member[] = [];
  readonly syncEvery: number;
  readonly keyTtlMs: number;
  readonly channel: string;
  readonly id: string;

  constructor(private readonly fleet: RedisFleetImpl, readonly slot: number) {
    this.syncEvery = fleet.settings.syncEvery;
    this.keyTtlMs = fleet.settings.keyTtlMs;
    this.channel = fleet.channel;
    this.id = fleet.id;
  }

  soon(urgent?: boolean): void {
    this.fleet.soon(urgent);
  }

  wallNow(): number {
    return this.fleet.clock.wallNow();
  }

  toLocal(serverMs: number): number {
    return serverMs - (this.lane?.offset ?? 0);
  }

  swallow(during: string, error: unknown): void {
    this.fleet.swallow(during, error);
  }
}

type Mode = 'connecting' | 'fleet' | 'local';
type Outcome = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: unknown } | null;

class RedisFleetImpl implements RedisFleet {
  readonly channel: string;
  readonly id = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  private mode_: Mode = 'connecting';
  private reason: string | null = 'connecting';
  private since: number;
  private store: Store;
  private fatal: string | null = null;
  private readonly label: string;
  private readonly lanes = new Map<string, Lane>();
  private readonly routes = new Map<string, Route>();
  private readonly budgets = new Map<string, RetryBudget>();
  private readonly breakers = new Map<string, FleetBreaker>();
  private readonly rates = new Map<string, FleetRateLimit>();
  private readonly ratesByKey = new Map<string, FleetRateLimit>();
  private readonly keyNames = new Map<string, string>();
  private readonly byKey = new Map<string, FleetBreaker>();
  private readonly heard = new Map<string, Announcement>();
  private readonly timer: ReturnType<typeof setInterval>;
  private memberCount = 0;
  private soonArmed = false;
  private urgentArmed = false;
  private subPinging = false;
  private closed = false;
  private closing: Promise<void> | null = null;
  private roundTrips = 0;
  private syncFailures = 0;
  private fallbacks = 0;
  private rejoins = 0;
  private rttLast: number | null = null;
  private rttAvg: number | null = null;
  private rttMax: number | null = null;
  private lastError: string | null = null;
  private waiters: ((joined: boolean) => void)[] = [];
  private readonly secrets: string[];
  private readonly storeSettings: StoreSettings;
  private readonly listener: StoreListener;

  constructor(
    private readonly target: Target, readonly settings: FleetSettings,
    private readonly onEvent: ((e: FleetEvent) => void) | null, readonly clock: { readonly wallNow: () => number },
  ) {
    this.channel = `${settings.prefix}breaker`;
    this.since = clock.wallNow();
    this.secrets = secretsOf(target);
    this.label = labelOf(target);
    this.storeSettings = { connectTimeoutMs: settings.connectTimeoutMs, reconnectMs: settings.reconnectMs, channel: this.channel, clean: (e) => this.clean(e) };
    this.listener = {
      changed: () => this.changed(),
      lost: (lane, why) => this.lost(lane, why),
      error: (why) => this.connectionError(why),
      message: (m) => this.announcement(m),
      subscribed: () => this.changed(),
      cluster: (seed, o) => this.toCluster(seed, o),
      fatal: (why) => this.fail(why),
    };
    this.store = this.openStore();
    this.timer = setInterval(() => this.tick(), settings.syncMs);
    this.timer.unref();
  }

  get mode(): 'fleet' | 'local' {
    return this.mode_ === 'fleet' ? 'fleet' : 'local';
  }

  // --- connections -----------------------------------------------------------------

  private openStore(): Store {
    const t = this.target;
    const { Redis: RedisClass, Cluster: ClusterClass } = ioredis();
    const s = this.storeSettings;
    const l = this.listener;
    switch (t.kind) {
      case 'url':
        return new SingleStore('single', this.label, (own) => new RedisClass(t.url.href, { ...(t.redisOptions as RedisOptions), ...own }), s, l);
      case 'sentinel':
        return new SingleStore('sentinel', this.label, (own) => new RedisClass({ ...(t.redisOptions as RedisOptions), sentinels: [...t.sentinels], name: t.name, ...own }), s, l);
      case 'cluster': {
        const first = t.urls[0]!;
        const seeds = t.urls.map((u) => ({ host: u.hostname.replace(/^\[|\]$/g, ''), port: u.port === '' ? 6379 : Number(u.port) }));
        const redisOptions: RedisOptions = { ...credentials(first), ...(t.redisOptions as RedisOptions) };
        return new ClusterStore(this.label, (over) => new ClusterClass(seeds, { ...over, redisOptions: { ...redisOptions, ...ownNodeOptions(s) } }), ioredis(), s, l);
      }
      case 'client': {
        const c = t.client;
        if ((c as { isCluster?: unknown }).isCluster === true) {
          const cluster = c as Cluster;
          return new ClusterStore(this.label, (over) => cluster.duplicate([], { ...over, redisOptions: { ...(cluster.options.redisOptions ?? {}), ...ownNodeOptions(s) } }), ioredis(), s, l);
        }
        const redis = c as Redis;
        return new SingleStore(redis.options.sentinels ? 'sentinel' : 'single', this.label, (own) => redis.duplicate(own), s, l);
      }
    }
  }

  /** The URL's node is a cluster node: the cluster, seeded by it, with the same credentials and TLS. */
  private toCluster(seed: { readonly host: string; readonly port: number }, o: RedisOptions): void {
    if (this.closed || this.store.kind === 'cluster') return;
    const old = this.store;
    const { Cluster: ClusterClass } = ioredis();
    const s = this.storeSettings;
    const carried: RedisOptions = {};
    for (const k of ['username', 'password', 'tls', 'family', 'connectionName', 'keepAlive', 'noDelay'] as const) {
      if (o[k] !== undefined) (carried as Record<string, unknown>)[k] = o[k];
    }
    this.store = new ClusterStore(`cluster via ${this.label}`, (over) => new ClusterClass([seed], { ...over, redisOptions: { ...carried, ...ownNodeOptions(s) } }), ioredis(), s, this.listener);
    old.close();
    this.lanes.clear();
    for (const r of this.routes.values()) r.lane = null;
  }

  /** A configuration that cannot work: local for good, said once, ready() false. */
  private fail(why: string): void {
    this.fatal = why;
    this.lastError = why;
    this.store.close();
    this.setMode('local', why);
    for (const w of [...this.waiters]) w(false);
  }

  // --- Fleet ---------------------------------------------------------------------

  private route(name: string): Route {
    let r = this.routes.get(name);
    if (r === undefined) {
      r = new Route(this, keySlot(this.key(name, 'budget')));
      this.routes.set(name, r);
      this.place(r);
    }
    return r;
  }

  budget(dependency: string, spec: BudgetSpec): RetryBudget {
    const name = checkDependency(dependency);
    const known = this.budgets.get(name);
    if (known !== undefined) return known;
    const resolved = normalizeBudget(spec);
    let b: RetryBudget;
    if (resolved.kind !== 'ratio' || this.full()) {
      b = createRetryBudget(resolved);
      const reason = resolved.kind !== 'ratio'
        ? `a ${resolved.kind} budget follows one client's calls (as gRPC's and the AWS SDK's do); only ratio budgets are shared`
        : `more than ${MAX_SHARED} shared dependencies`;
      this.emit({ type: 'fleet_budget_local', ts: this.clock.wallNow(), dependency: name, kind: resolved.kind, reason });
    } else {
      const lease = this.settings.leaseTokens ?? Math.max(1, Math.round(resolved.maxTokens / 10));
      const route = this.route(name);
      const s = this.settings;
      const fb = new FleetBudget(route, [this.key(name, 'budget'), this.key(name, 'members')], resolved, Math.min(lease, resolved.maxTokens), {
        renewMs: 3 * s.syncMs, memberTtlMs: Math.max(10 * s.syncMs, 3 * s.syncMs + 2 * s.connectTimeoutMs),
      });
      this.join(route, fb);
      b = fb;
    }
    this.budgets.set(name, b);
    return b;
  }

  breaker(dependency: string, spec?: BreakerSpec | null, options: BreakerOptions = {}): CircuitBreaker {
    const name = checkDependency(dependency);
    let b = this.breakers.get(name);
    if (b === undefined) {
      const resolved = normalizeBreakerSpec(spec);
      // Past the limit a breaker is this process's own (rare: 10 000 dependencies).
      if (this.full()) return createCircuitBreaker(resolved, { ...options, name: options.name ?? name });
      const keyName = this.keyName(name);
      const route = this.route(name);
      b = new FleetBreaker(route, keyName, [this.key(name, 'breaker'), this.key(name, 'window'), this.key(name, 'trial')], resolved, options.name ?? name);
      this.breakers.set(name, b);
      this.byKey.set(keyName, b);
      const heard = this.heard.get(keyName);
      if (heard !== undefined) {
        this.heard.delete(keyName);
        b.announced(heard);
      }
      this.join(route, b);
    }
    b.addListener(options.onStateChange);
    return b;
  }

  rateLimit(dependency: string, spec: RateLimitSpec): TokenBucket {
    const name = checkDependency(dependency);
    const known = this.rates.get(name);
    if (known !== undefined) return known;
    const resolved = normalizeRateLimit(spec);
    const keyName = this.keyName(name);
    const route = this.route(name);
    const r = new FleetRateLimit(route, [this.key(name, 'rate-members'), this.key(name, 'rate')], resolved, this.settings.syncMs, keyName);
    if (!this.full()) {
      this.ratesByKey.set(keyName, r);
      this.join(route, r);
    }
    this.rates.set(name, r);
    return r;
  }

  private join(route: Route, m: Member): void {
    route.members.push(m);
    this.memberCount++;
    if (!route.local) this.soon();
  }

  ready(timeoutMs = 2000): Promise<boolean> {
    if (this.joined()) return Promise.resolve(true);
    if (this.closed || this.fatal !== null) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      const t = setTimeout(() => done(false), timeoutMs);
      const done = (joined: boolean): void => {
        clearTimeout(t);
        this.waiters = this.waiters.filter((w) => w !== done);
        resolve(joined);
      };
      this.waiters.push(done);
    });
  }

  stats(): FleetStats {
    const now = this.clock.wallNow();
    const budgets: Record<string, FleetBudgetStats> = {};
    for (const [k, b] of this.budgets) if (b instanceof FleetBudget) budgets[k] = b.stats();
    const breakers: Record<string, FleetBreakerStats> = {};
    for (const [k, b] of this.breakers) breakers[k] = b.stats(now);
    const rateLimits: Record<string, FleetRateStats> = {};
    for (const [k, r] of this.rates) rateLimits[k] = r.stats();
    const deps = new Map<Lane, number>();
    for (const r of this.routes.values()) if (r.lane !== null) deps.set(r.lane, (deps.get(r.lane) ?? 0) + 1);
    const nodes: Record<string, FleetNodeStats> = {};
    for (const lane of this.lanes.values()) {
      nodes[lane.key] = {
        mode: lane.health.mode, reason: lane.health.mode === 'fleet' ? null : lane.reason, dependencies: deps.get(lane) ?? 0,
        deadlineMs: Math.round(this.deadline(lane) * 1000) / 1000, failures: lane.health.failures,
      };
    }
    const r = (v: number | null): number | null => (v === null ? null : Math.round(v * 1000) / 1000);
    return {
      mode: this.mode, reason: this.mode_ === 'fleet' ? null : this.reason, since: this.since, store: this.store.describe(),
      connected: this.fatal === null && this.store.ready(), subscribed: this.store.subscribed(),
      roundTrips: this.roundTrips, syncFailures: this.syncFailures, fallbacks: this.fallbacks, rejoins: this.rejoins,
      rttMs: { last: r(this.rttLast), avg: r(this.rttAvg), max: r(this.rttMax) }, lastError: this.lastError, nodes, budgets, breakers, rateLimits,
    };
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      clearInterval(this.timer);
      for (const lane of this.lanes.values()) if (lane.probeTimer !== null) clearTimeout(lane.probeTimer);
      // Hand in what is pending, within the deadline; then no more syncs.
      if (this.fatal === null) await this.sync(false);
      this.closed = true;
      this.setMode('local', 'the fleet was closed');
      for (const r of this.routes.values()) r.local = true;
      for (const w of [...this.waiters]) w(false);
      this.store.close();
    })();
    return this.closing;
  }

  // --- what the shared objects call ----------------------------------------------

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

  swallow(during: string, error: unknown): void {
    this.emit({ type: 'fleet_listener_error', ts: this.clock.wallNow(), during, message: this.clean(error) });
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
  private place(r: Route): void {
    const key = this.fatal === null && !this.closed && this.store.ready() ? this.store.laneOf(r.slot) : null;
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
          this.lastError = this.clean(e);
        }
      }
    }
  }

  /** Topology, readiness or a node's mode changed: lanes, routes and the process's mode follow. */
  private changed(): void {
    if (this.closed) return;
    if (this.fatal === null && this.store.ready()) {
      const current = new Set(this.store.lanes());
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
    if (this.fatal !== null) return this.setMode('local', this.fatal);
    const lanes = [...this.lanes.values()];
    const fallen = lanes.find((l) => l.health.mode === 'local');
    if (fallen !== undefined) return this.setMode('local', this.laneReason(fallen));
    if (lanes.length > 0 && this.store.ready() && lanes.every((l) => l.health.mode === 'fleet')) return this.setMode('fleet', null);
    this.wake();
  }

  private laneReason(lane: Lane): string {
    const why = lane.reason ?? 'not joined';
    return lane.key === MAIN ? why : `Redis Cluster node ${lane.key}: ${why}`;
  }

  /** A node's connection closed: it falls back at once. */
  private lost(key: string | null, why: string): void {
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
      else this.scheduleProbe(lane, probeDelay(this.settings.syncMs));
      this.updateMode();
    }
  }

  private deadline(lane: Lane): number {
    return syncDeadline(lane.health, { timeoutMs: this.settings.timeoutMs, maxMs: 2 * this.settings.connectTimeoutMs });
  }

  // --- probes (a node not joined) --------------------------------------------------

  private scheduleProbe(lane: Lane, ms: number): void {
    if (this.closed || this.fatal !== null || lane.probing || lane.probeTimer !== null || lane.health.mode === 'fleet') return;
    lane.probeTimer = setTimeout(() => {
      lane.probeTimer = null;
      void this.probe(lane);
    }, ms);
    lane.probeTimer.unref();
  }

  /** TIME on a node that is not joined: good probes in a row join it again. */
  private async probe(lane: Lane): Promise<void> {
    if (this.closed || this.fatal !== null || lane.probing || this.lanes.get(lane.key) !== lane || lane.health.mode === 'fleet') return;
    const p = this.store.time(lane.key);
    if (p === null) {
      // No connection (yet): not a failure of the node's answers, but not a good probe either.
      if (lane.health.good > 0) lane.health = { ...lane.health, good: 0 };
      this.store.refresh();
      this.scheduleProbe(lane, probeDelay(this.settings.syncMs));
      return;
    }
    lane.probing = true;
    // The pub/sub connection may have stopped answering too (a partition): checked at the same pace.
    void this.pingSub();
    const deadline = this.deadline(lane);
    const wall0 = this.clock.wallNow();
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
      const why = outcome === null ? `${this.where(lane)} did not answer within ${round(deadline)} ms` : outcome.ok ? 'an unexpected reply to TIME' : this.clean(outcome.error);
      this.syncFailures++;
      this.lastError = why;
      // A connection that stopped answering is replaced: a new one does not wait out TCP's backoff.
      if (outcome === null) this.store.replace(lane.key);
      this.store.refresh();
      this.observe(lane, afterFailure(lane.health, false), why);
    }
    this.scheduleProbe(lane, probeDelay(this.settings.syncMs));
  }

  // --- syncs (nodes joined) --------------------------------------------------------

  private tick(): void {
    if (this.closed || this.fatal !== null) return;
    this.changed();
    void this.sync(false);
    const now = performance.now();
    // An idle node is asked the time now and then: a dead one is noticed, its clock followed.
    for (const lane of this.lanes.values()) {
      if (lane.health.mode === 'fleet' && lane.inFlight === 0 && now - lane.lastExchange >= 2 * this.settings.syncMs) void this.sync(true, false, lane, true);
    }
    void this.pingSub();
  }

  /** PING on the subscriber connection; one that stopped answering is replaced. */
  private async pingSub(): Promise<void> {
    if (this.subPinging) return;
    const p = this.store.pingSub();
    if (p === null) return;
    this.subPinging = true;
    const main = this.lanes.values().next().value as Lane | undefined;
    const deadline = main === undefined ? this.settings.connectTimeoutMs : this.deadline(main);
    const outcome = (await bounded([p], Math.max(deadline, this.settings.timeoutMs)))[0] ?? null;
    this.subPinging = false;
    if (outcome === null && !this.closed) {
      this.lastError = `the pub/sub connection did not answer a PING within ${round(deadline)} ms`;
      this.store.replaceSub();
    }
  }

  /**
   * One round trip per joined node: the commands of every dependency it serves (`all`:
   * also those with nothing to hand in, to read the fleet's state; `timeOnly`: just its
   * clock). One sync at a time per node (a stalled node gets one batch, not a pile); an
   * urgent one may pass a sync in flight. Never throws.
   */
  private async sync(all: boolean, urgent = false, only: Lane | null = null, timeOnly = false): Promise<void> {
    if (this.closed || this.fatal !== null) return;
    if (!this.store.ready()) return;
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
          this.lastError = this.clean(e);
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
    const wall0 = this.clock.wallNow();
    const t0 = performance.now();
    const calls: (Promise<unknown> | null)[] = cmds.length === 0 ? [this.store.time(lane.key)] : cmds.map((c) => this.store.call(c.script, c.keys, c.args));
    const outcomes = await bounded(calls, deadline);
    const rtt = performance.now() - t0;
    lane.inFlight--;
    lane.lastExchange = performance.now();
    this.roundTrips++;
    try {
      this.settle(lane, cmds, outcomes, deadline, wall0, rtt);
    } catch (e) {
      this.lastError = this.clean(e);
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
      else if (!o.ok) error ??= this.clean(o.error);
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
    if (timedOut && step.change === 'local') this.store.replace(lane.key);
    if (step.change === null && lane.health.mode === 'fleet') {
      // Tried again soon: a node is judged by syncs in a row, not by the next tick.
      const t = setTimeout(() => void this.sync(true, false, lane), probeDelay(this.settings.syncMs));
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
    return lane.key === MAIN ? `Redis (${this.store.describe()})` : `Redis Cluster node ${lane.key}`;
  }

  private announcement(message: string): void {
    let m: { d?: unknown; s?: unknown; n?: unknown; a?: unknown; u?: unknown; r?: unknown; rate?: unknown };
    try {
      m = JSON.parse(message) as typeof m;
    } catch {
      return;
    }
    // A starving member of a shared rate limit: the members holding more visit at once.
    if (typeof m === 'object' && m !== null && typeof m.rate === 'string') {
      this.ratesByKey.get(m.rate)?.announced();
      return;
    }
    if (typeof m !== 'object' || m === null || typeof m.d !== 'string') return;
    const n = Number(m.n);
    if (!Number.isFinite(n)) return;
    const a: Announcement = { s: String(m.s), n, a: m.a === undefined ? undefined : Number(m.a), u: m.u === undefined ? undefined : Number(m.u), r: typeof m.r === 'string' ? m.r : undefined };
    const b = this.byKey.get(m.d);
    if (b !== undefined) {
      b.announced(a);
      return;
    }
    // A dependency this process has not called yet: remembered, so that its breaker starts
    // in the fleet's state instead of learning it at its first sync.
    const known = this.heard.get(m.d);
    if (known !== undefined && known.n > n) return;
    this.heard.delete(m.d);
    if (this.heard.size >= MAX_SHARED) this.heard.delete(this.heard.keys().next().value as string);
    this.heard.set(m.d, a);
  }

  // --- modes, events, errors -----------------------------------------------------

  private setMode(mode: Mode, reason: string | null): void {
    if (this.mode_ === mode) {
      if (mode === 'local') this.reason = reason;
      this.wake();
      return;
    }
    this.mode_ = mode;
    this.reason = reason;
    this.since = this.clock.wallNow();
    this.emit({ type: 'fleet_mode', ts: this.since, mode: mode === 'fleet' ? 'fleet' : 'local', reason });
    this.wake();
  }

  /** Joined: every node's syncs succeed and announcements arrive. */
  private joined(): boolean {
    return this.mode_ === 'fleet' && this.store.subscribed() && !this.closed;
  }

  private wake(): void {
    if (this.joined()) for (const w of [...this.waiters]) w(true);
  }

  private connectionError(why: string): void {
    this.lastError = why;
    // Said once: the first failure to connect (later ones only update stats()).
    if (this.mode_ === 'connecting') {
      for (const lane of this.lanes.values()) {
        if (lane.health.mode === 'connecting') lane.health = { ...lane.health, mode: 'local' };
        lane.reason = `cannot use Redis at ${this.store.describe()}: ${why}`;
      }
      this.setMode('local', `cannot use Redis at ${this.store.describe()}: ${why}`);
    }
  }

  private emit(e: FleetEvent): void {
    if (this.onEvent === null) return;
    try {
      this.onEvent(e);
    } catch {
      // An event listener cannot break the fleet (nor be reported through itself).
    }
  }

  /** An error as one line, without passwords. */
  private clean(e: unknown): string {
    const code = typeof (e as { code?: unknown })?.code === 'string' ? `${(e as { code: string }).code}: ` : '';
    let msg = e instanceof Error ? e.message : String(e);
    for (const secret of this.secrets) msg = msg.split(secret).join('***');
    msg = `${msg.startsWith(code) ? '' : code}${msg}`.replace(/\s+/g, ' ').trim();
    return msg.length > 300 ? `${msg.slice(0, 297)}...` : msg;
  }

  // --- keys ----------------------------------------------------------------------

  private full(): boolean {
    return this.memberCount >= 2 * MAX_SHARED;
  }

  /** The dependency as it appears in keys and announcements (long names are hashed). */
  private keyName(name: string): string {
    let k = this.keyNames.get(name);
    if (k === undefined) {
      k = name.length <= 200 ? name : `sha1:${createHash('sha1').update(name).digest('hex')}`;
      this.keyNames.set(name, k);
    }
    return k;
  }

  /** `{prefix}{dependency}:what`: one hash tag per dependency, so a cluster keeps a dependency's keys in one slot. */
  private key(name: string, what: string): string {
    return `${this.settings.prefix}{${this.keyName(name)}}:${what}`;
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
      p.then((value) => {
        if (done) return;
        out[i] = { ok: true, value };
        if (--left === 0) finish();
      }, (error: unknown) => {
        if (done) return;
        out[i] = { ok: false, error };
        if (--left === 0) finish();
      });
    });
    if (calls.length === 0) finish();
  });
  return out;
}

function round(ms: number): number {
  return Math.round(ms);
}

/** What every node connection of a cluster gets from the fleet (ioredis sets the rest: pool connections have their own queue and no reconnection). */
function ownNodeOptions(s: { readonly connectTimeoutMs: number }): RedisOptions {
  return { connectTimeout: s.connectTimeoutMs, maxRetriesPerRequest: 0, reconnectOnError: () => false, enableAutoPipelining: false };
}

/** Credentials and TLS of a URL, as ioredis options. */
function credentials(u: URL): RedisOptions {
  const o: RedisOptions = {};
  if (u.username !== '') o.username = decodeURIComponent(u.username);
  if (u.password !== '') o.password = decodeURIComponent(u.password);
  if (u.protocol === 'rediss:') o.tls = {};
  return o;
}

function secretsOf(t: Target): string[] {
  const out: string[] = [];
  const add = (v: unknown): void => {
    if (typeof v === 'string' && v.length > 0) out.push(v);
  };
  if (t.kind === 'url') add(decodeURIComponent(t.url.password));
  if (t.kind === 'cluster') for (const u of t.urls) add(decodeURIComponent(u.password));
  if (t.kind !== 'client') {
    add(t.redisOptions.password);
    add(t.redisOptions.sentinelPassword);
  } else {
    const o = (t.client as { options?: { password?: unknown; sentinelPassword?: unknown; redisOptions?: { password?: unknown } } }).options;
    add(o?.password);
    add(o?.sentinelPassword);
    add(o?.redisOptions?.password);
  }
  return [...new Set(out)];
}

function labelOf(t: Target): string {
  switch (t.kind) {
    case 'url':
      return where(t.url);
    case 'cluster':
      return `cluster ${where(t.urls[0]!)}${t.urls.length > 1 ? ` (+${t.urls.length - 1} seed${t.urls.length > 2 ? 's' : ''})` : ''}`;
    case 'sentinel':
      return `sentinel master "${t.name}" via ${t.sentinels.map((s) => `${s.host}:${s.port}`).join(', ')}`;
    case 'client':
      return (t.client as { isCluster?: unknown }).isCluster === true ? 'the given cluster client' : 'the given client';
  }
}

function checkDependency(d: unknown): string {
  if (typeof d !== 'string' || d.length === 0) throw invalid('dependency', 'Expected `dependency` to be a non-empty string (e.g. the origin or a service name)');
  return d;
}


