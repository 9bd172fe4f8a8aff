// Where the fleet's Redis is (a URL, seed nodes of a cluster, Sentinels, or a client to
// take settings from), validated once, and the store (store.ts) it opens: connections of
// the fleet's own, whatever was given.
import { createRequire } from 'node:module';
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import type * as IORedis from 'ioredis';
import { checkCluster, checkRedisOptions, checkSentinels, checkUrl, invalid, where, type SentinelAddress } from './options.js';
import { ClusterStore, SingleStore, type Store, type StoreListener, type StoreSettings } from './store.js';

let ioredisModule: typeof IORedis | null = null;
/** ioredis, loaded on first use: importing any other part of relent never needs it. */
export function ioredis(): typeof IORedis {
  if (ioredisModule === null) {
    try {
      ioredisModule = createRequire(import.meta.url)('ioredis') as typeof IORedis;
    } catch (e) {
      throw new Error('relent/fleet needs the optional peer dependency `ioredis` (npm install ioredis@6; 5 works too)', { cause: e });
    }
  }
  return ioredisModule;
}

/** Where Redis is, validated. */
export type Target =
  | { readonly kind: 'url'; readonly url: URL; readonly redisOptions: Readonly<Record<string, unknown>> }
  | { readonly kind: 'cluster'; readonly urls: readonly URL[]; readonly redisOptions: Readonly<Record<string, unknown>> }
  | {
      readonly kind: 'sentinel';
      readonly sentinels: readonly SentinelAddress[];
      readonly name: string;
      readonly redisOptions: Readonly<Record<string, unknown>>;
    }
  | { readonly kind: 'client'; readonly client: Redis | Cluster };

export const KNOWN = [
  'url',
  'cluster',
  'sentinels',
  'name',
  'redisOptions',
  'client',
  'prefix',
  'timeoutMs',
  'syncMs',
  'syncEvery',
  'leaseTokens',
  'keyTtlMs',
  'reconnectMs',
  'connectTimeoutMs',
  'onEvent',
  'clock',
];

export function resolveTarget(raw: Record<string, unknown>): Target {
  const given = (['url', 'cluster', 'sentinels', 'client'] as const).filter((k) => raw[k] !== undefined);
  if (given.length !== 1) {
    throw invalid(
      given[1] ?? 'url',
      `Expected exactly one of \`url\`, \`cluster\`, \`sentinels\` (with \`name\`) and \`client\`${given.length > 1 ? `, got ${given.join(' and ')}` : ''}`,
    );
  }
  if (raw.name !== undefined && raw.sentinels === undefined)
    throw invalid('name', "Expected `name` only with `sentinels` (the master's name in their configuration)");
  const redisOptions = raw.redisOptions === undefined ? {} : checkRedisOptions(raw.redisOptions);
  switch (given[0]) {
    case 'url':
      return { kind: 'url', url: checkUrl(raw.url), redisOptions };
    case 'cluster':
      return { kind: 'cluster', urls: checkCluster(raw.cluster), redisOptions };
    case 'sentinels': {
      const sentinels = checkSentinels(raw.sentinels);
      if (typeof raw.name !== 'string' || raw.name === '')
        throw invalid('name', "Expected `name` (the master's name in the Sentinels' configuration) with `sentinels`");
      return { kind: 'sentinel', sentinels, name: raw.name, redisOptions };
    }
    default: {
      const client = raw.client as Redis | Cluster;
      if (
        typeof client !== 'object' ||
        client === null ||
        typeof (client as { duplicate?: unknown }).duplicate !== 'function' ||
        typeof (client as { defineCommand?: unknown }).defineCommand !== 'function'
      ) {
        throw invalid('client', 'Expected `client` to be an ioredis client (Redis or Cluster)');
      }
      if (raw.redisOptions !== undefined) throw invalid('redisOptions', 'Expected no `redisOptions` with `client` (the client carries its own)');
      return { kind: 'client', client };
    }
  }
}

/** The store of a target: connections of the fleet's own (a given client is only a template). */
export function openStore(t: Target, label: string, s: StoreSettings, l: StoreListener): Store {
  const { Redis: RedisClass, Cluster: ClusterClass } = ioredis();
  switch (t.kind) {
    case 'url':
      return new SingleStore('single', label, (own) => new RedisClass(t.url.href, { ...(t.redisOptions as RedisOptions), ...own }), s, l);
    case 'sentinel':
      return new SingleStore(
        'sentinel',
        label,
        (own) => new RedisClass({ ...(t.redisOptions as RedisOptions), sentinels: [...t.sentinels], name: t.name, ...own }),
        s,
        l,
      );
    case 'cluster': {
      const first = t.urls[0]!;
      const seeds = t.urls.map((u) => ({ host: u.hostname.replace(/^\[|\]$/g, ''), port: u.port === '' ? 6379 : Number(u.port) }));
      const redisOptions: RedisOptions = { ...credentials(first), ...(t.redisOptions as RedisOptions) };
      return new ClusterStore(label, (over) => new ClusterClass(seeds, { ...over, redisOptions: { ...redisOptions, ...ownNodeOptions(s) } }), ioredis(), s, l);
    }
    case 'client': {
      const c = t.client;
      if ((c as { isCluster?: unknown }).isCluster === true) {
        const cluster = c as Cluster;
        return new ClusterStore(
          label,
          (over) => cluster.duplicate([], { ...over, redisOptions: { ...(cluster.options.redisOptions ?? {}), ...ownNodeOptions(s) } }),
          ioredis(),
          s,
          l,
        );
      }
      const redis = c as Redis;
      return new SingleStore(redis.options.sentinels ? 'sentinel' : 'single', label, (own) => redis.duplicate(own), s, l);
    }
  }
}

/** The cluster a single-node URL turned out to be part of: seeded by that node, with the same credentials and TLS. */
export function clusterOfNode(
  label: string,
  seed: { readonly host: string; readonly port: number },
  o: RedisOptions,
  s: StoreSettings,
  l: StoreListener,
): Store {
  const { Cluster: ClusterClass } = ioredis();
  const carried: RedisOptions = {};
  for (const k of ['username', 'password', 'tls', 'family', 'connectionName', 'keepAlive', 'noDelay'] as const) {
    if (o[k] !== undefined) (carried as Record<string, unknown>)[k] = o[k];
  }
  return new ClusterStore(
    `cluster via ${label}`,
    (over) => new ClusterClass([seed], { ...over, redisOptions: { ...carried, ...ownNodeOptions(s) } }),
    ioredis(),
    s,
    l,
  );
}

/** What every node connection of a cluster gets from the fleet (ioredis sets the rest: pool connections have their own queue and no reconnection). */
export function ownNodeOptions(s: { readonly connectTimeoutMs: number }): RedisOptions {
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

export function secretsOf(t: Target): string[] {
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

export function labelOf(t: Target): string {
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
