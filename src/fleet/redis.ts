import { createHash, randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { hostname } from 'node:os';
import type { ChainableCommander, Redis, RedisOptions } from 'ioredis';
import type * as IORedis from 'ioredis';
import { createCircuitBreaker, normalizeBreakerSpec, type BreakerOptions, type BreakerSpec, type CircuitBreaker } from '../core/breaker.js';
import { createRetryBudget, normalizeBudget, type BudgetSpec, type RetryBudget } from '../core/budget.js';
import type { Fleet } from '../core/fleet.js';
import { normalizeRateLimit, type RateLimitSpec, type TokenBucket } from '../core/token-bucket.js';
import { FleetBreaker, type Announcement, type FleetBreakerStats } from './breaker.js';
import { FleetBudget, type FleetBudgetStats } from './budget.js';
import { FleetRateLimit, type FleetRateStats } from './rate.js';
import type { Command, Link, Member } from './link.js';
import { checkUrl, invalid, resolveSettings, where, type FleetSettings } from './options.js';
import { BREAKER_SYNC_SCRIPT, BREAKER_TRIAL_SCRIPT, BUDGET_SCRIPT, RATE_SCRIPT } from './scripts.js';

/** `createRedisFleet(options)`: `url` or `client`; every other field optional (see FLEET_DEFAULTS). */
export interface RedisFleetOptions {
  /** `redis://[[user]:password@]host[:port][/db]` or `rediss://…` (TLS). */
  readonly url?: string;
  /**
   * An ioredis client to send commands through (not closed by `close()`); the fleet
   * opens one more connection (`client.duplicate()`) for pub/sub. Give it
   * `enableOfflineQueue: false` so that nothing queues while Redis is away.
   */
  readonly client?: Redis;
  /** Prefix of every key and channel. Default `relent:`; use one per environment. */
  readonly prefix?: string;
  /** The longest a sync's round trip may take before Redis counts as away, ms. Default 10. */
  readonly timeoutMs?: number;
  /** Deposits, counts and lease top-ups are handed in at least this often while there are any, ms. Default 1000. */
  readonly syncMs?: number;
  /** A breaker hands in its counts after this many failures, without waiting for syncMs. Default 10. */
  readonly syncEvery?: number;
  /** Tokens a process may hold of a shared budget. Default: a tenth of the budget's maxTokens, at least 1. */
  readonly leaseTokens?: number | null;
  /** Keys live this long after their last use, ms (a budget's bucket at least until it would have refilled). Default 600 000. */
  readonly keyTtlMs?: number;
  /** The longest wait between two reconnection attempts, ms. Default 500. */
  readonly reconnectMs?: number;
  /** How long a connection attempt may take, ms. Default 2000. */
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

export interface FleetStats {
  /** `fleet`: shared state in use; `local`: every budget and breaker runs on this process's own state. */
  readonly mode: 'fleet' | 'local';
  /** Why the mode is local (null in fleet mode). */
  readonly reason: string | null;
  /** When the mode last changed (wall clock ms). */
  readonly since: number;
  /** The command connection is up. */
  readonly connected: boolean;
  /** The pub/sub connection is subscribed to breaker announcements. */
  readonly subscribed: boolean;
  /** Syncs sent (each one round trip, however many dependencies it carries). */
  readonly roundTrips: number;
  /** Syncs that failed or took longer than timeoutMs. */
  readonly syncFailures: number;
  /** Times the process fell back to local state, and joined again. */
  readonly fallbacks: number;
  readonly rejoins: number;
  /** Round-trip times of successful syncs, ms. */
  readonly rttMs: { readonly last: number | null; readonly avg: number | null; readonly max: number | null };
  /** The last error seen (connection or sync), without secrets. */
  readonly lastError: string | null;
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
   * Resolves true once the process has joined the fleet (syncs succeed, and breaker
   * announcements arrive), false if it has not within `timeoutMs` (default 2000) or the
   * fleet is closed. Never rejects. Calls need not wait for it: until then they run on local state.
   */
  ready(timeoutMs?: number): Promise<boolean>;
  stats(): FleetStats;
  /** Hands in what is pending (bounded by timeoutMs), then ends the fleet's own connections. Budgets and breakers keep working, locally. */
  close(): Promise<void>;
}

let ioredisModule: typeof IORedis | null = null;
/** ioredis, loaded on first use: importing any other part of relent never needs it. */
function ioredis(): typeof IORedis {
  if (ioredisModule === null) {
    try {
      ioredisModule = createRequire(import.meta.url)('ioredis') as typeof IORedis;
    } catch (e) {
      throw new Error('relent/fleet needs the optional peer dependency `ioredis` (npm install ioredis@6; 5 works too)', { cause: e });
    }
  }
  return ioredisModule;
}

const SCRIPTS = { budget: BUDGET_SCRIPT, breakerSync: BREAKER_SYNC_SCRIPT, breakerTrial: BREAKER_TRIAL_SCRIPT, rate: RATE_SCRIPT } as const;
const SHA: Readonly<Record<keyof typeof SCRIPTS, string>> = Object.freeze({
  budget: createHash('sha1').update(BUDGET_SCRIPT).digest('hex'),
  breakerSync: createHash('sha1').update(BREAKER_SYNC_SCRIPT).digest('hex'),
  breakerTrial: createHash('sha1').update(BREAKER_TRIAL_SCRIPT).digest('hex'),
  rate: createHash('sha1').update(RATE_SCRIPT).digest('hex'),
});
const SCRIPT_COUNT = Object.keys(SCRIPTS).length;

/** Dependencies shared by one fleet object; past this, new ones get in-process state (said once). */
const MAX_SHARED = 10_000;

/**
 * A fleet whose budgets and breakers are shared through Redis. Nothing a call does ever
 * waits on Redis: budgets and breakers answer from this process's state, and a
 * background sync (one pipelined round trip for every dependency) keeps that state in
 * step. When a sync fails or takes longer than `timeoutMs`, or the connection drops,
 * the process falls back to local state (said once, in a `fleet_mode` event and in
 * stats()), reconnects by itself and joins again.
 *
 * Bad options throw ERR_INVALID_INPUT here (never later, in a call). An unreachable URL
 * or a wrong password does not throw: the fleet stays local and says why.
 */
export function createRedisFleet(options: RedisFleetOptions): RedisFleet {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) throw invalid('options', 'Expected `options` to be an object with `url` or `client`');
  const raw = options as Record<string, unknown>;
  const known = ['url', 'client', 'prefix', 'timeoutMs', 'syncMs', 'syncEvery', 'leaseTokens', 'keyTtlMs', 'reconnectMs', 'connectTimeoutMs', 'onEvent', 'clock'];
  for (const k of Object.keys(raw)) if (!known.includes(k)) throw invalid(k, `Unknown option \`${k}\` (createRedisFleet takes ${known.join(', ')})`);
  if ((raw.url === undefined) === (raw.client === undefined)) throw invalid('url', 'Expected exactly one of `url` and `client`');
  const url = raw.url !== undefined ? checkUrl(raw.url) : null;
  const client = raw.client as Redis | undefined;
  if (client !== undefined && (typeof client !== 'object' || client === null || typeof client.pipeline !== 'function' || typeof client.duplicate !== 'function')) {
    throw invalid('client', 'Expected `client` to be an ioredis client');
  }
  const settings = resolveSettings(raw);
  const onEvent = raw.onEvent ?? null;
  if (onEvent !== null && typeof onEvent !== 'function') throw invalid('onEvent', 'Expected `onEvent` to be a function');
  const clock = raw.clock ?? null;
  if (clock !== null && (typeof clock !== 'object' || typeof (clock as { wallNow?: unknown }).wallNow !== 'function')) throw invalid('clock', 'Expected `clock` to have a wallNow() function');
  return new RedisFleetImpl(url, client ?? null, settings, onEvent as ((e: FleetEvent) => void) | null, (clock as { wallNow: () => number } | null) ?? { wallNow: Date.now });
}

type Mode = 'connecting' | 'fleet' | 'local';

class RedisFleetImpl implements RedisFleet, Link {
  local = true;
  readonly syncEvery: number;
  readonly keyTtlMs: number;
  readonly channel: string;
  readonly id = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  private mode_: Mode = 'connecting';
  private reason: string | null = 'connecting';
  private since: number;
  private readonly redis: Redis;
  private readonly sub: Redis;
  private readonly ownsClient: boolean;
  private readonly members: Member[] = [];
  private readonly budgets = new Map<string, RetryBudget>();
  private readonly breakers = new Map<string, FleetBreaker>();
  private readonly rates = new Map<string, FleetRateLimit>();
  private readonly ratesByKey = new Map<string, FleetRateLimit>();
  private readonly keyNames = new Map<string, string>();
  private readonly byKey = new Map<string, FleetBreaker>();
  private readonly heard = new Map<string, Announcement>();
  private readonly timer: ReturnType<typeof setInterval>;
  private scriptsLoaded = false;
  private inFlight = 0;
  private again = false;
  private againAll = false;
  private soonArmed = false;
  private urgentArmed = false;
  private retry: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private closing: Promise<void> | null = null;
  private subscribed = false;
  private offset = 0;
  private roundTrips = 0;
  private syncFailures = 0;
  private fallbacks = 0;
  private rejoins = 0;
  private rttLast: number | null = null;
  private rttAvg: number | null = null;
  private rttMax: number | null = null;
  private lastError: string | null = null;
  private waiters: ((joined: boolean) => void)[] = [];
  private readonly secret: string | null;
  /** What the fleet listens to on the command connection (taken off a caller's client at close()). */
  private readonly listeners: Record<'error' | 'ready' | 'close', (...args: unknown[]) => void>;

  constructor(
    url: URL | null, client: Redis | null, private readonly settings: FleetSettings,
    private readonly onEvent: ((e: FleetEvent) => void) | null, private readonly clock: { readonly wallNow: () => number },
  ) {
    this.syncEvery = settings.syncEvery;
    this.keyTtlMs = settings.keyTtlMs;
    this.channel = `${settings.prefix}breaker`;
    this.since = clock.wallNow();
    this.secret = url !== null && url.password !== '' ? decodeURIComponent(url.password) : null;
    const { Redis: RedisClass } = ioredis();
    const connection: RedisOptions = {
      // Nothing waits for a connection: a command while Redis is away fails at once.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      connectTimeout: settings.connectTimeoutMs,
      // A backstop for replies that never come (the fleet stops waiting after timeoutMs).
      commandTimeout: Math.max(1000, 20 * settings.timeoutMs),
      retryStrategy: (times: number) => Math.min(settings.reconnectMs, 20 * 2 ** Math.min(times, 12)),
      reconnectOnError: () => false,
      lazyConnect: false,
    };
    if (client !== null) {
      this.redis = client;
      this.ownsClient = false;
      this.sub = client.duplicate(connection);
    } else {
      this.redis = new RedisClass(url!.href, connection);
      this.ownsClient = true;
      this.sub = new RedisClass(url!.href, connection);
    }
    const label = url !== null ? where(url) : 'the given client';
    this.listeners = {
      error: (e: unknown) => this.connectionError(e, label),
      ready: () => {
        this.scriptsLoaded = false;
        void this.sync(true);
      },
      close: () => {
        if (this.mode_ !== 'local') this.setMode('local', this.lastError ?? `the connection to Redis (${label}) closed`);
      },
    };
    for (const [event, fn] of Object.entries(this.listeners)) this.redis.on(event, fn);
    this.sub.on('error', (e: unknown) => {
      this.lastError = this.clean(e);
    });
    this.sub.on('ready', () => {
      this.sub.subscribe(this.channel).then(() => {
        this.subscribed = true;
        this.wake();
      }, (e: unknown) => {
        this.lastError = this.clean(e);
      });
    });
    this.sub.on('close', () => {
      this.subscribed = false;
    });
    this.sub.on('message', (_channel: string, message: string) => this.announcement(message));
    this.timer = setInterval(() => this.tick(), settings.syncMs);
    this.timer.unref();
    if (this.redis.status === 'ready') void this.sync(true);
  }

  get mode(): 'fleet' | 'local' {
    return this.local ? 'local' : 'fleet';
  }

  // --- Fleet ---------------------------------------------------------------------

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
      const fb = new FleetBudget(this, this.key(name, 'budget'), resolved, Math.min(lease, resolved.maxTokens));
      this.members.push(fb);
      b = fb;
      if (!this.local) this.soon();
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
      b = new FleetBreaker(this, keyName, [this.key(name, 'breaker'), this.key(name, 'window'), this.key(name, 'trial')], resolved, options.name ?? name);
      this.breakers.set(name, b);
      this.byKey.set(keyName, b);
      const heard = this.heard.get(keyName);
      if (heard !== undefined) {
        this.heard.delete(keyName);
        b.announced(heard);
      }
      this.members.push(b);
      if (!this.local) this.soon();
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
    const r = new FleetRateLimit(this, [this.key(name, 'rate-members'), this.key(name, 'rate')], resolved, this.settings.syncMs, keyName);
    if (!this.full()) {
      this.members.push(r);
      this.ratesByKey.set(keyName, r);
      if (!this.local) this.soon();
    }
    this.rates.set(name, r);
    return r;
  }

  ready(timeoutMs = 2000): Promise<boolean> {
    if (this.joined()) return Promise.resolve(true);
    if (this.closed) return Promise.resolve(false);
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
    const r = (v: number | null): number | null => (v === null ? null : Math.round(v * 1000) / 1000);
    return {
      mode: this.mode, reason: this.local ? this.reason : null, since: this.since, connected: this.redis.status === 'ready', subscribed: this.subscribed,
      roundTrips: this.roundTrips, syncFailures: this.syncFailures, fallbacks: this.fallbacks, rejoins: this.rejoins,
      rttMs: { last: r(this.rttLast), avg: r(this.rttAvg), max: r(this.rttMax) }, lastError: this.lastError, budgets, breakers, rateLimits,
    };
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      clearInterval(this.timer);
      if (this.retry !== null) clearTimeout(this.retry);
      // Hand in what is pending, within timeoutMs; then no more syncs.
      if (!this.local) await this.sync(false);
      this.closed = true;
      this.setMode('local', 'the fleet was closed');
      for (const w of [...this.waiters]) w(false);
      this.sub.disconnect();
      if (this.ownsClient) this.redis.disconnect();
      else for (const [event, fn] of Object.entries(this.listeners)) this.redis.off(event, fn);
    })();
    return this.closing;
  }

  // --- Link ----------------------------------------------------------------------

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

  wallNow(): number {
    return this.clock.wallNow();
  }

  toLocal(serverMs: number): number {
    return serverMs - this.offset;
  }

  swallow(during: string, error: unknown): void {
    this.emit({ type: 'fleet_listener_error', ts: this.clock.wallNow(), during, message: this.clean(error) });
  }

  // --- syncing -------------------------------------------------------------------

  private tick(): void {
    if (this.closed) return;
    // In local mode every tick tries to join again (when the connection is up).
    void this.sync(this.local);
  }

  /** One round trip: every member's commands in one pipeline. Never throws. */
  private async sync(all: boolean, urgent = false): Promise<void> {
    if (this.closed) return;
    // One sync at a time (a stalled Redis gets one pipeline, not a pile); an urgent one may pass a sync in flight.
    if (this.inFlight >= (urgent && !this.local ? 2 : 1)) {
      this.again = true;
      this.againAll ||= all;
      return;
    }
    const redis = this.redis;
    if (redis.status !== 'ready') {
      if (this.mode_ === 'fleet') this.setMode('local', this.lastError ?? 'not connected to Redis');
      return;
    }
    const cmds: Command[] = [];
    try {
      for (const m of this.members) if (all || m.dirty()) m.write(cmds, all);
    } catch (e) {
      this.lastError = this.clean(e);
    }
    if (cmds.length === 0 && !all) return;
    this.inFlight++;
    const loading = !this.scriptsLoaded;
    const wall0 = this.clock.wallNow();
    const t0 = performance.now();
    let res: [Error | null, unknown][] | Error;
    try {
      const pipeline = redis.pipeline();
      if (loading) for (const src of Object.values(SCRIPTS)) pipeline.script('LOAD', src);
      if (cmds.length === 0) pipeline.time();
      for (const c of cmds) pipeline.evalsha(SHA[c.script], c.keys.length, ...c.keys, ...c.args);
      // Joining (scripts to load, a cold connection) may take longer than a steady sync.
      res = await this.bounded(pipeline, this.local ? Math.max(this.settings.timeoutMs, this.settings.connectTimeoutMs) : this.settings.timeoutMs);
    } catch (e) {
      res = e instanceof Error ? e : new Error(String(e));
    }
    const rtt = performance.now() - t0;
    this.inFlight--;
    this.roundTrips++;
    try {
      this.settle(res, cmds, loading, wall0, rtt);
    } catch (e) {
      this.lastError = this.clean(e);
    }
    if (this.again && !this.closed && this.inFlight === 0) {
      const again = this.againAll;
      this.again = false;
      this.againAll = false;
      if (again) void this.sync(true);
      else this.soon();
    }
  }

  private settle(res: [Error | null, unknown][] | Error, cmds: Command[], loading: boolean, wall0: number, rtt: number): void {
    if (!Array.isArray(res)) {
      for (const c of cmds) c.onFail();
      return this.failed(this.clean(res));
    }
    let i = 0;
    let error: string | null = null;
    if (loading) {
      for (let k = 0; k < SCRIPT_COUNT; k++, i++) if (res[i]?.[0]) error ??= this.clean(res[i]![0]);
      if (error === null) this.scriptsLoaded = true;
    }
    // Redis's clock, from the first reply: { µs, … } of a script or TIME's [seconds, µs].
    const first = res[i]?.[1];
    if (Array.isArray(first) && res[i]?.[0] === null) {
      const serverMs = cmds.length === 0 ? Number(first[0]) * 1000 + Number(first[1]) / 1000 : Number(first[0]) / 1000;
      if (Number.isFinite(serverMs)) this.offset = serverMs - (wall0 + rtt / 2);
    }
    if (cmds.length === 0) i++;
    const results = cmds.map((_, k) => res[i + k]);
    for (const r of results) {
      if (r === undefined || r[0] !== null || !Array.isArray(r[1])) error ??= r?.[0] ? this.clean(r[0]) : 'an unexpected reply from Redis';
      if (r?.[0] && /NOSCRIPT/.test(String((r[0] as Error).message))) this.scriptsLoaded = false;
    }
    if (error === null && !this.closed) {
      this.rttLast = rtt;
      this.rttAvg = this.rttAvg === null ? rtt : this.rttAvg * 0.9 + rtt * 0.1;
      this.rttMax = this.rttMax === null ? rtt : Math.max(this.rttMax, rtt);
      if (this.local) {
        for (const m of this.members) m.rejoined?.();
        this.setMode('fleet', null);
      }
    }
    cmds.forEach((c, k) => {
      const r = results[k];
      if (r !== undefined && r[0] === null && Array.isArray(r[1])) c.onReply(r[1] as unknown[]);
      else c.onFail();
    });
    if (error !== null) this.failed(error);
  }

  private failed(reason: string): void {
    this.syncFailures++;
    this.lastError = reason;
    if (this.mode_ !== 'local') this.setMode('local', reason);
    // Try to join again soon (a reconnection joins at once by itself).
    if (this.retry === null && !this.closed) {
      this.retry = setTimeout(() => {
        this.retry = null;
        if (this.local) void this.sync(true);
      }, this.settings.reconnectMs);
      this.retry.unref();
    }
  }

  /** The pipeline's replies, or an Error when it failed or took longer than timeoutMs. */
  private bounded(pipeline: ChainableCommander, timeoutMs: number): Promise<[Error | null, unknown][] | Error> {
    return new Promise((resolve) => {
      let done = false;
      const finish = (v: [Error | null, unknown][] | Error): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        resolve(v);
      };
      // The verdict waits one more turn of the event loop: a reply that has arrived while
      // this process was busy is read (poll phase) before a late timer calls it lost.
      const timer = setTimeout(() => setImmediate(() => finish(new Error(`Redis did not answer within ${timeoutMs} ms`))), timeoutMs);
      timer.unref();
      pipeline.exec().then((r) => finish((r ?? []) as [Error | null, unknown][]), (e: unknown) => finish(e instanceof Error ? e : new Error(String(e))));
    });
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
    if (this.mode_ === mode) return;
    const before = this.mode_;
    this.mode_ = mode;
    this.local = mode !== 'fleet';
    this.reason = reason;
    this.since = this.clock.wallNow();
    if (mode === 'local') this.fallbacks += before === 'fleet' ? 1 : 0;
    if (mode === 'fleet') {
      if (before === 'local') this.rejoins++;
      this.wake();
    }
    this.emit({ type: 'fleet_mode', ts: this.since, mode: mode === 'fleet' ? 'fleet' : 'local', reason });
  }

  /** Joined: syncs succeed and announcements arrive. */
  private joined(): boolean {
    return !this.local && this.subscribed;
  }

  private wake(): void {
    if (this.joined()) for (const w of [...this.waiters]) w(true);
  }

  private connectionError(e: unknown, label: string): void {
    const why = this.clean(e);
    this.lastError = why;
    // Said once: the first failure to connect (later ones only update stats()).
    if (this.mode_ === 'connecting') this.setMode('local', `cannot use Redis at ${label}: ${why}`);
  }

  private emit(e: FleetEvent): void {
    if (this.onEvent === null) return;
    try {
      this.onEvent(e);
    } catch {
      // An event listener cannot break the fleet (nor be reported through itself).
    }
  }

  /** An error as one line, without the password. */
  private clean(e: unknown): string {
    const code = typeof (e as { code?: unknown })?.code === 'string' ? `${(e as { code: string }).code}: ` : '';
    let msg = e instanceof Error ? e.message : String(e);
    if (this.secret !== null && this.secret.length > 0) msg = msg.split(this.secret).join('***');
    msg = `${msg.startsWith(code) ? '' : code}${msg}`.replace(/\s+/g, ' ').trim();
    return msg.length > 300 ? `${msg.slice(0, 297)}...` : msg;
  }

  // --- keys ----------------------------------------------------------------------

  private full(): boolean {
    return this.members.length >= 2 * MAX_SHARED;
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

  /** `{prefix}{dependency}:what`: one hash tag per dependency, so a cluster keeps a dependency's keys together. */
  private key(name: string, what: string): string {
    return `${this.settings.prefix}{${this.keyName(name)}}:${what}`;
  }
}

function checkDependency(d: unknown): string {
  if (typeof d !== 'string' || d.length === 0) throw invalid('dependency', 'Expected `dependency` to be a non-empty string (e.g. the origin or a service name)');
  return d;
}
