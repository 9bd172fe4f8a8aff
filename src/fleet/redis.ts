import { createHash, randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { createCircuitBreaker, normalizeBreakerSpec, type BreakerOptions, type BreakerSpec, type CircuitBreaker } from '../core/breaker.js';
import { createRetryBudget, normalizeBudget, type BudgetSpec, type RetryBudget } from '../core/budget.js';
import type { Fleet } from '../core/fleet.js';
import { normalizeRateLimit, type RateLimitSpec, type TokenBucket } from '../core/token-bucket.js';
import { FleetBreaker, type Announcement, type FleetBreakerStats } from './breaker.js';
import { FleetBudget, type FleetBudgetStats } from './budget.js';
import type { Member } from './link.js';
import { invalid, resolveSettings, type FleetSettings, type SentinelAddress } from './options.js';
import { FleetRateLimit, type FleetRateStats } from './rate.js';
import { keySlot } from './slot.js';
import type { Store, StoreListener, StoreSettings } from './store.js';
import { Sync, type Route, type SyncHost } from './sync.js';
import { clusterOfNode, KNOWN, labelOf, openStore, resolveTarget, secretsOf, type Target } from './target.js';

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

/** Dependencies shared by one fleet object; past this, new ones get in-process state (said once). */
const MAX_SHARED = 10_000;

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
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw invalid('options', 'Expected `options` to be an object with `url`, `cluster`, `sentinels` or `client`');
  const raw = options as Record<string, unknown>;
  for (const k of Object.keys(raw)) if (!KNOWN.includes(k)) throw invalid(k, `Unknown option \`${k}\` (createRedisFleet takes ${KNOWN.join(', ')})`);
  const target = resolveTarget(raw);
  const settings = resolveSettings(raw);
  const onEvent = raw.onEvent ?? null;
  if (onEvent !== null && typeof onEvent !== 'function') throw invalid('onEvent', 'Expected `onEvent` to be a function');
  const clock = raw.clock ?? null;
  if (clock !== null && (typeof clock !== 'object' || typeof (clock as { wallNow?: unknown }).wallNow !== 'function'))
    throw invalid('clock', 'Expected `clock` to have a wallNow() function');
  return new RedisFleetImpl(
    target,
    settings,
    onEvent as ((e: FleetEvent) => void) | null,
    (clock as { wallNow: () => number } | null) ?? { wallNow: Date.now },
  );
}

type Mode = 'connecting' | 'fleet' | 'local';

class RedisFleetImpl implements RedisFleet, SyncHost {
  readonly channel: string;
  readonly id = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  private mode_: Mode = 'connecting';
  private reason: string | null = 'connecting';
  private since: number;
  private store_: Store;
  private fatal_: string | null = null;
  private readonly label: string;
  private readonly sync: Sync;
  private readonly budgets = new Map<string, RetryBudget>();
  private readonly breakers = new Map<string, FleetBreaker>();
  private readonly rates = new Map<string, FleetRateLimit>();
  private readonly ratesByKey = new Map<string, FleetRateLimit>();
  private readonly keyNames = new Map<string, string>();
  private readonly byKey = new Map<string, FleetBreaker>();
  private readonly heard = new Map<string, Announcement>();
  private readonly timer: ReturnType<typeof setInterval>;
  private memberCount = 0;
  private closing: Promise<void> | null = null;
  private waiters: ((joined: boolean) => void)[] = [];
  private readonly secrets: string[];
  private readonly storeSettings: StoreSettings;
  private readonly listener: StoreListener;

  constructor(
    target: Target,
    readonly settings: FleetSettings,
    private readonly onEvent: ((e: FleetEvent) => void) | null,
    readonly clock: { readonly wallNow: () => number },
  ) {
    this.channel = `${settings.prefix}breaker`;
    this.since = clock.wallNow();
    this.secrets = secretsOf(target);
    this.label = labelOf(target);
    this.sync = new Sync(this);
    this.storeSettings = { connectTimeoutMs: settings.connectTimeoutMs, reconnectMs: settings.reconnectMs, channel: this.channel, clean: (e) => this.clean(e) };
    this.listener = {
      changed: () => this.sync.changed(),
      lost: (lane, why) => this.sync.lost(lane, why),
      error: (why) => this.connectionError(why),
      message: (m) => this.announcement(m),
      subscribed: () => this.sync.changed(),
      cluster: (seed, o) => this.toCluster(seed, o),
      fatal: (why) => this.fail(why),
    };
    this.store_ = openStore(target, this.label, this.storeSettings, this.listener);
    this.timer = setInterval(() => this.sync.tick(), settings.syncMs);
    this.timer.unref();
  }

  get mode(): 'fleet' | 'local' {
    return this.mode_ === 'fleet' ? 'fleet' : 'local';
  }

  // --- SyncHost --------------------------------------------------------------------

  store(): Store {
    return this.store_;
  }

  fatal(): string | null {
    return this.fatal_;
  }

  swallow(during: string, error: unknown): void {
    this.emit({ type: 'fleet_listener_error', ts: this.clock.wallNow(), during, message: this.clean(error) });
  }

  setMode(mode: 'fleet' | 'local', reason: string | null): void {
    if (this.mode_ === mode) {
      if (mode === 'local') this.reason = reason;
      this.wake();
      return;
    }
    this.mode_ = mode;
    this.reason = reason;
    this.since = this.clock.wallNow();
    this.emit({ type: 'fleet_mode', ts: this.since, mode, reason });
    this.wake();
  }

  wake(): void {
    if (this.joined()) for (const w of [...this.waiters]) w(true);
  }

  /** An error as one line, without passwords. */
  clean(e: unknown): string {
    const code = typeof (e as { code?: unknown })?.code === 'string' ? `${(e as { code: string }).code}: ` : '';
    let msg = e instanceof Error ? e.message : String(e);
    for (const secret of this.secrets) msg = msg.split(secret).join('***');
    msg = `${msg.startsWith(code) ? '' : code}${msg}`.replace(/\s+/g, ' ').trim();
    return msg.length > 300 ? `${msg.slice(0, 297)}...` : msg;
  }

  // --- connections -----------------------------------------------------------------

  /** The URL's node is a cluster node: the cluster, seeded by it, with the same credentials and TLS. */
  private toCluster(seed: { readonly host: string; readonly port: number }, o: RedisOptions): void {
    if (this.sync.closed || this.store_.kind === 'cluster') return;
    const old = this.store_;
    this.store_ = clusterOfNode(this.label, seed, o, this.storeSettings, this.listener);
    old.close();
    this.sync.reset();
  }

  /** A configuration that cannot work: local for good, said once, ready() false. */
  private fail(why: string): void {
    this.fatal_ = why;
    this.sync.lastError = why;
    this.store_.close();
    this.setMode('local', why);
    for (const w of [...this.waiters]) w(false);
  }

  private connectionError(why: string): void {
    this.sync.lastError = why;
    // Said once: the first failure to connect (later ones only update stats()).
    if (this.mode_ === 'connecting') {
      const reason = `cannot use Redis at ${this.store_.describe()}: ${why}`;
      this.sync.refuseAll(reason);
      this.setMode('local', reason);
    }
  }

  // --- Fleet ---------------------------------------------------------------------

  private route(name: string): Route {
    return this.sync.route(name, keySlot(this.key(name, 'budget')));
  }

  budget(dependency: string, spec: BudgetSpec): RetryBudget {
    const name = checkDependency(dependency);
    const known = this.budgets.get(name);
    if (known !== undefined) return known;
    const resolved = normalizeBudget(spec);
    let b: RetryBudget;
    if (resolved.kind !== 'ratio' || this.full()) {
      b = createRetryBudget(resolved);
      const reason =
        resolved.kind !== 'ratio'
          ? `a ${resolved.kind} budget follows one client's calls (as gRPC's and the AWS SDK's do); only ratio budgets are shared`
          : `more than ${MAX_SHARED} shared dependencies`;
      this.emit({ type: 'fleet_budget_local', ts: this.clock.wallNow(), dependency: name, kind: resolved.kind, reason });
    } else {
      const lease = this.settings.leaseTokens ?? Math.max(1, Math.round(resolved.maxTokens / 10));
      const route = this.route(name);
      const s = this.settings;
      const fb = new FleetBudget(route, [this.key(name, 'budget'), this.key(name, 'members')], resolved, Math.min(lease, resolved.maxTokens), {
        renewMs: 3 * s.syncMs,
        memberTtlMs: Math.max(10 * s.syncMs, 3 * s.syncMs + 2 * s.connectTimeoutMs),
      });
      this.joinRoute(route, fb);
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
      this.joinRoute(route, b);
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
      this.joinRoute(route, r);
    }
    this.rates.set(name, r);
    return r;
  }

  private joinRoute(route: Route, m: Member): void {
    this.memberCount++;
    this.sync.join(route, m);
  }

  ready(timeoutMs = 2000): Promise<boolean> {
    if (this.joined()) return Promise.resolve(true);
    if (this.sync.closed || this.fatal_ !== null) return Promise.resolve(false);
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
    const s = this.sync;
    const r = (v: number | null): number | null => (v === null ? null : Math.round(v * 1000) / 1000);
    return {
      mode: this.mode,
      reason: this.mode_ === 'fleet' ? null : this.reason,
      since: this.since,
      store: this.store_.describe(),
      connected: this.fatal_ === null && this.store_.ready(),
      subscribed: this.store_.subscribed(),
      roundTrips: s.roundTrips,
      syncFailures: s.syncFailures,
      fallbacks: s.fallbacks,
      rejoins: s.rejoins,
      rttMs: { last: r(s.rttLast), avg: r(s.rttAvg), max: r(s.rttMax) },
      lastError: s.lastError,
      nodes: s.nodes(),
      budgets,
      breakers,
      rateLimits,
    };
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      clearInterval(this.timer);
      // Hand in what is pending, within the deadline; then no more syncs.
      if (this.fatal_ === null) await this.sync.sync(false);
      this.sync.end();
      this.setMode('local', 'the fleet was closed');
      for (const w of [...this.waiters]) w(false);
      this.store_.close();
    })();
    return this.closing;
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
    const a: Announcement = {
      s: String(m.s),
      n,
      a: m.a === undefined ? undefined : Number(m.a),
      u: m.u === undefined ? undefined : Number(m.u),
      r: typeof m.r === 'string' ? m.r : undefined,
    };
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

  /** Joined: every node's syncs succeed and announcements arrive. */
  private joined(): boolean {
    return this.mode_ === 'fleet' && this.store_.subscribed() && !this.sync.closed;
  }

  private emit(e: FleetEvent): void {
    if (this.onEvent === null) return;
    try {
      this.onEvent(e);
    } catch {
      // An event listener cannot break the fleet (nor be reported through itself).
    }
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

function checkDependency(d: unknown): string {
  if (typeof d !== 'string' || d.length === 0)
    throw invalid('dependency', 'Expected `dependency` to be a non-empty string (e.g. the origin or a service name)');
  return d;
}
