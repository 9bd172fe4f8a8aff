// The fleet's connections to Redis: one node (a URL, or a master found through Sentinel)
// or a Redis Cluster. The fleet sees "lanes" — the master nodes serving the key space,
// one for a single node — and sends each command through the connection that serves its
// keys. The fleet always opens connections of its own (from the URL, the seed nodes, the
// Sentinels, or a duplicate of a given client), so that it can set what it needs (no
// offline queue, bounded connection attempts) and replace a connection that stops
// answering without touching anyone else's.
//
// Scripts are ioredis custom commands: the first use on each connection sends the script
// itself (EVAL), later ones its SHA (EVALSHA), and a NOSCRIPT (a restarted node, or a
// replica promoted to master, has an empty script cache) sends it again — on every node,
// whatever its history.
//
// Pub/sub: breaker announcements are PUBLISHed from the scripts; in a Cluster, Redis
// forwards a PUBLISH to every node, so one subscription to any node hears them all. The
// subscriber follows the cluster: when its node fails or stops answering it moves to
// another node.
import type { Cluster, ClusterOptions, Redis, RedisOptions } from 'ioredis';
import type * as IORedis from 'ioredis';
import { BREAKER_SYNC_SCRIPT, BREAKER_TRIAL_SCRIPT, BUDGET_SCRIPT, RATE_SCRIPT } from './scripts.js';

export type ScriptName = 'budget' | 'breakerSync' | 'breakerTrial' | 'rate';

/** The scripts as custom commands (the names are the fleet's own: its connections are its own). */
const COMMANDS: Readonly<Record<ScriptName, { readonly name: string; readonly lua: string; readonly keys: number }>> = Object.freeze({
  budget: { name: 'relentFleetBudget', lua: BUDGET_SCRIPT, keys: 2 },
  breakerSync: { name: 'relentFleetBreakerSync', lua: BREAKER_SYNC_SCRIPT, keys: 3 },
  breakerTrial: { name: 'relentFleetBreakerTrial', lua: BREAKER_TRIAL_SCRIPT, keys: 3 },
  rate: { name: 'relentFleetRate', lua: RATE_SCRIPT, keys: 2 },
});

/** The lane of a store that has one node. */
export const MAIN = 'main';

/** What the store tells the fleet. */
export interface StoreListener {
  /** Readiness or topology changed: the fleet looks at its lanes again. */
  changed(): void;
  /** A lane's connection closed (null: every lane's). */
  lost(lane: string | null, why: string): void;
  /** A connection error (without secrets). */
  error(why: string): void;
  /** A message on the fleet's channel. */
  message(text: string): void;
  /** The subscription is up, or down. */
  subscribed(on: boolean): void;
  /** The URL's node is a Redis Cluster node: use the cluster (seeded by that node). */
  cluster(seed: { readonly host: string; readonly port: number }, options: RedisOptions): void;
  /** A configuration that cannot work (said at ready() and in stats()). */
  fatal(why: string): void;
}

export interface StoreSettings {
  readonly connectTimeoutMs: number;
  readonly reconnectMs: number;
  readonly channel: string;
  /** An error as one line without secrets. */
  readonly clean: (e: unknown) => string;
}

export interface Store {
  readonly kind: 'single' | 'sentinel' | 'cluster';
  /** Where it connects, for messages and stats (never credentials). */
  describe(): string;
  /** Commands can be sent (the connection is up; for a cluster, its slots are known). */
  ready(): boolean;
  /** The master nodes serving the key space now (empty while unknown). */
  lanes(): readonly string[];
  /** The lane of a hash slot, or null when no node serves it (or it is not known yet). */
  laneOf(slot: number): string | null;
  /** Runs a script, routed by its keys. */
  call(script: ScriptName, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown>;
  /** TIME on a lane's node (a probe), or null when there is no connection to it. */
  time(lane: string): Promise<unknown> | null;
  /** The lane's connection stopped answering: a new one. */
  replace(lane: string): void;
  /** Reads the cluster's topology again (a no-op for one node). */
  refresh(): void;
  /** PING on the subscriber connection, or null when it is not subscribed. */
  pingSub(): Promise<unknown> | null;
  /** The subscriber connection stopped answering: a new one. */
  replaceSub(): void;
  /** Whether the subscriber connection is up and subscribed. */
  subscribed(): boolean;
  close(): void;
}

/** What every connection of the fleet's own gets (the caller's address, credentials and TLS aside). */
export function connectionOptions(s: { readonly connectTimeoutMs: number; readonly reconnectMs: number }): RedisOptions {
  return {
    // Nothing waits for a connection: a command while Redis is away fails at once.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    connectTimeout: s.connectTimeoutMs,
    retryStrategy: (times: number) => Math.min(s.reconnectMs, 20 * 2 ** Math.min(times, 12)),
    reconnectOnError: () => false,
    lazyConnect: false,
    enableAutoPipelining: false,
    autoResubscribe: true,
  };
}

function define(client: Redis | Cluster): void {
  for (const c of Object.values(COMMANDS)) client.defineCommand(c.name, { numberOfKeys: c.keys, lua: c.lua });
}

function send(client: Redis | Cluster, script: ScriptName, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
  const fn = (client as unknown as Record<string, (...a: (string | number)[]) => Promise<unknown>>)[COMMANDS[script].name]!;
  return fn.call(client, ...keys, ...args);
}

/** Listens to the subscriber connection's events (shared by both kinds of store). */
function wireSub(sub: Redis, s: StoreSettings, l: StoreListener, state: { subscribed: boolean }): void {
  sub.on('error', (e: unknown) => l.error(s.clean(e)));
  sub.on('ready', () => {
    sub.subscribe(s.channel).then(
      () => {
        state.subscribed = true;
        l.subscribed(true);
      },
      (e: unknown) => l.error(s.clean(e)),
    );
  });
  sub.on('close', () => {
    if (state.subscribed) {
      state.subscribed = false;
      l.subscribed(false);
    }
  });
  sub.on('message', (_channel: string, message: string) => l.message(message));
}

/**
 * One node: a URL (cluster mode detected on connect), a duplicate of a given client, or a
 * master found through Sentinel (ioredis asks the Sentinels again on every reconnection).
 */
export class SingleStore implements Store {
  private readonly cmd: Redis;
  private readonly sub: Redis;
  private readonly subState = { subscribed: false };
  /** The node was asked whether it is a cluster node, and is not. */
  private checked = false;
  private closed = false;

  constructor(
    readonly kind: 'single' | 'sentinel',
    private readonly label: string,
    make: (override: RedisOptions) => Redis,
    private readonly s: StoreSettings,
    private readonly l: StoreListener,
  ) {
    const own = connectionOptions(s);
    this.cmd = make(own);
    define(this.cmd);
    this.sub = this.cmd.duplicate(own);
    this.cmd.on('error', (e: unknown) => l.error(s.clean(e)));
    this.cmd.on('ready', () => this.check());
    this.cmd.on('close', () => {
      this.checked = false;
      if (!this.closed) l.lost(MAIN, `the connection to Redis (${this.label}) closed`);
    });
    wireSub(this.sub, s, l, this.subState);
  }

  /** A URL may name a cluster node: asked once per connection (INFO cluster), before any script runs. */
  private check(): void {
    if (this.kind === 'sentinel') {
      this.checked = true;
      this.l.changed();
      return;
    }
    this.cmd.info('cluster').then(
      (info: string) => {
        if (this.closed) return;
        if (/cluster_enabled:1/.test(info)) {
          const o = this.cmd.options;
          if ((o.db ?? 0) !== 0) {
            this.l.fatal(`${this.label} is a Redis Cluster node, and a cluster has only database 0: remove the database number from \`url\``);
            return;
          }
          this.l.cluster({ host: o.host ?? '127.0.0.1', port: o.port ?? 6379 }, o);
          return;
        }
        this.checked = true;
        this.l.changed();
      },
      (e: unknown) => {
        // A server without INFO cluster (or a proxy in front of one) is a single node.
        this.l.error(this.s.clean(e));
        this.checked = true;
        this.l.changed();
      },
    );
  }

  describe(): string {
    return this.label;
  }

  ready(): boolean {
    return this.cmd.status === 'ready' && this.checked;
  }

  lanes(): readonly string[] {
    return [MAIN];
  }

  laneOf(): string {
    return MAIN;
  }

  call(script: ScriptName, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    return send(this.cmd, script, keys, args);
  }

  time(): Promise<unknown> | null {
    return this.ready() ? this.cmd.time() : null;
  }

  replace(): void {
    // A new socket at once (ioredis reconnects; the stalled one is dropped with its replies).
    if (this.cmd.status === 'ready' || this.cmd.status === 'connect') this.cmd.disconnect(true);
  }

  refresh(): void {}

  pingSub(): Promise<unknown> | null {
    return this.subState.subscribed && this.sub.status === 'ready' ? this.sub.ping() : null;
  }

  replaceSub(): void {
    if (this.sub.status === 'ready' || this.sub.status === 'connect') this.sub.disconnect(true);
  }

  subscribed(): boolean {
    return this.subState.subscribed;
  }

  close(): void {
    this.closed = true;
    this.sub.disconnect();
    this.cmd.disconnect();
  }
}

/**
 * A Redis Cluster through ioredis's Cluster client (it follows MOVED and ASK, finds the
 * new master after a failover, and refreshes its slot map). Lanes are the masters in
 * that map; the subscriber is a connection of the fleet's own to one of the nodes.
 */
export class ClusterStore implements Store {
  readonly kind = 'cluster' as const;
  private readonly cluster: Cluster;
  private sub: Redis | null = null;
  private subKey: string | null = null;
  private readonly subState = { subscribed: false };
  private subTimer: ReturnType<typeof setTimeout> | null = null;
  private lanesCache: string[] | null = null;
  private closed = false;

  constructor(
    private readonly label: string,
    make: (override: ClusterOptions) => Cluster,
    private readonly ioredis: typeof IORedis,
    private readonly s: StoreSettings,
    private readonly l: StoreListener,
  ) {
    const own = connectionOptions(s);
    this.cluster = make({
      enableOfflineQueue: false,
      enableReadyCheck: true,
      scaleReads: 'master',
      retryDelayOnFailover: 100,
      retryDelayOnClusterDown: 100,
      retryDelayOnTryAgain: 100,
      slotsRefreshTimeout: Math.min(1000, s.connectTimeoutMs),
      clusterRetryStrategy: own.retryStrategy as (times: number) => number,
      enableAutoPipelining: false,
      lazyConnect: false,
    });
    define(this.cluster);
    const topology = (): void => {
      this.lanesCache = null;
      if (this.sub === null) this.pickSub(0);
      l.changed();
    };
    this.cluster.on('ready', topology);
    this.cluster.on('refresh', topology);
    this.cluster.on('+node', topology);
    this.cluster.on('-node', (redis: Redis) => {
      this.lanesCache = null;
      const key = nodeKey(redis);
      if (!this.closed && this.lanes().includes(key)) l.lost(key, `the connection to Redis Cluster node ${key} closed`);
      l.changed();
    });
    this.cluster.on('error', (e: unknown) => l.error(s.clean(e)));
    this.cluster.on('node error', (e: unknown, key: unknown) => l.error(`${String(key)}: ${s.clean(e)}`));
    for (const event of ['close', 'end']) {
      this.cluster.on(event, () => {
        this.lanesCache = null;
        if (!this.closed) l.lost(null, `the connections to the Redis Cluster (${this.label}) closed`);
      });
    }
  }

  describe(): string {
    return this.label;
  }

  ready(): boolean {
    return this.cluster.status === 'ready' && this.cluster.slots.length > 0;
  }

  lanes(): readonly string[] {
    if (this.lanesCache === null) {
      const seen = new Set<string>();
      for (const nodes of this.cluster.slots) if (nodes !== undefined && nodes[0] !== undefined) seen.add(nodes[0]);
      this.lanesCache = [...seen].sort();
    }
    return this.lanesCache;
  }

  laneOf(slot: number): string | null {
    return this.cluster.slots[slot]?.[0] ?? null;
  }

  call(script: ScriptName, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    return send(this.cluster, script, keys, args);
  }

  private node(lane: string): Redis | undefined {
    return this.cluster.nodes('master').find((n) => nodeKey(n) === lane);
  }

  time(lane: string): Promise<unknown> | null {
    if (!this.ready()) return null;
    const n = this.node(lane);
    return n === undefined ? null : n.time();
  }

  replace(lane: string): void {
    // The pool drops the node's connection; the next topology read makes a new one.
    this.node(lane)?.disconnect();
    this.refresh();
  }

  refresh(): void {
    if (this.cluster.status === 'ready') this.cluster.refreshSlotsCache();
  }

  /** Subscribes on one of the cluster's nodes (the `n`th choice: after a failure, another one). */
  private pickSub(n: number): void {
    if (this.closed || this.sub !== null) return;
    const nodes = this.cluster.nodes('all');
    if (nodes.length === 0) return; // at the next topology change
    const ready = nodes.filter((x) => x.status === 'ready');
    const pool = ready.length > 0 ? ready : nodes;
    const others = pool.filter((x) => nodeKey(x) !== this.subKey);
    const chosen = (others.length > 0 ? others : pool)[n % Math.max(1, (others.length > 0 ? others : pool).length)]!;
    const { host, port } = chosen.options;
    const sub = new this.ioredis.Redis({
      ...(this.cluster.options.redisOptions ?? {}),
      ...connectionOptions(this.s),
      host,
      port,
      // A node that is gone is left for another one, not retried.
      retryStrategy: () => null,
    });
    this.sub = sub;
    this.subKey = nodeKey(sub);
    wireSub(sub, this.s, this.l, this.subState);
    sub.on('end', () => {
      if (this.sub !== sub) return;
      this.sub = null;
      if (this.closed) return;
      this.subTimer = setTimeout(
        () => {
          this.subTimer = null;
          this.pickSub(n + 1);
        },
        Math.min(100, this.s.reconnectMs),
      );
      this.subTimer.unref();
    });
  }

  pingSub(): Promise<unknown> | null {
    if (this.sub === null) this.pickSub(0);
    return this.subState.subscribed && this.sub?.status === 'ready' ? this.sub.ping() : null;
  }

  replaceSub(): void {
    this.sub?.disconnect();
  }

  subscribed(): boolean {
    return this.subState.subscribed;
  }

  close(): void {
    this.closed = true;
    if (this.subTimer !== null) clearTimeout(this.subTimer);
    this.sub?.disconnect();
    this.cluster.disconnect();
  }
}

function nodeKey(r: Redis): string {
  return `${r.options.host ?? '127.0.0.1'}:${r.options.port ?? 6379}`;
}
