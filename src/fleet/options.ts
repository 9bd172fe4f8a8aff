import { RelentError } from '../core/errors.js';

/** The defaults of createRedisFleet(), written once. */
export const FLEET_DEFAULTS = Object.freeze({
  prefix: 'relent:',
  timeoutMs: 50,
  syncMs: 1000,
  syncEvery: 10,
  leaseTokens: null,
  keyTtlMs: 600_000,
  reconnectMs: 250,
  connectTimeoutMs: 1000,
});

/** Fleet options after validation (connection fields aside). */
export interface FleetSettings {
  readonly prefix: string;
  readonly timeoutMs: number;
  readonly syncMs: number;
  readonly syncEvery: number;
  readonly leaseTokens: number | null;
  readonly keyTtlMs: number;
  readonly reconnectMs: number;
  readonly connectTimeoutMs: number;
}

export function invalid(field: string, message: string): RelentError {
  return new RelentError('ERR_INVALID_INPUT', message, { field });
}

function num(raw: Record<string, unknown>, field: keyof typeof FLEET_DEFAULTS, min: number, max: number, integer = false): number {
  const v = raw[field] ?? FLEET_DEFAULTS[field];
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max || (integer && !Number.isInteger(v))) {
    throw invalid(
      field,
      `Expected \`${field}\` to be ${integer ? 'an integer' : 'a number'} in [${min}, ${max}], got ${typeof v === 'number' ? String(v) : typeof v}`,
    );
  }
  return v;
}

/** Validates the fleet's tuning options; every error names the field. */
export function resolveSettings(raw: Record<string, unknown>): FleetSettings {
  const prefix = raw.prefix ?? FLEET_DEFAULTS.prefix;
  if (typeof prefix !== 'string' || prefix.length === 0 || prefix.length > 200 || hasSpaceOrControl(prefix)) {
    throw invalid('prefix', 'Expected `prefix` to be a non-empty string of up to 200 characters without spaces or control characters');
  }
  const lease = raw.leaseTokens ?? null;
  if (lease !== null && (typeof lease !== 'number' || !Number.isFinite(lease) || lease < 1 || lease > 1e6)) {
    throw invalid('leaseTokens', "Expected `leaseTokens` to be a number in [1, 1000000], or null for a tenth of the budget's maxTokens");
  }
  return {
    prefix,
    timeoutMs: num(raw, 'timeoutMs', 1, 60_000),
    syncMs: num(raw, 'syncMs', 10, 3_600_000),
    syncEvery: num(raw, 'syncEvery', 1, 1e6, true),
    leaseTokens: lease,
    keyTtlMs: num(raw, 'keyTtlMs', 1000, 30 * 86_400_000),
    reconnectMs: num(raw, 'reconnectMs', 10, 60_000),
    connectTimeoutMs: num(raw, 'connectTimeoutMs', 10, 600_000),
  };
}

function hasSpaceOrControl(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c <= 0x20 || c === 0x7f) return true;
  }
  return false;
}

/** Checks a Redis URL without ever echoing it (it may hold a password). */
export function checkUrl(url: unknown, field = 'url'): URL {
  const f = `\`${field}\``;
  if (typeof url !== 'string') throw invalid(field, `Expected ${f} to be a string like redis://host:6379`);
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw invalid(field, `Expected ${f} to be a redis:// or rediss:// URL (the value is not shown: it may hold a password)`);
  }
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') {
    throw invalid(field, `Expected ${f} to start with redis:// or rediss://, got ${u.protocol}// (the rest is not shown: it may hold a password)`);
  }
  if (u.hostname === '') throw invalid(field, `Expected ${f} to name a host (redis://host:6379)`);
  const db = u.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d{1,5}$/.test(db)) throw invalid(field, `Expected the path of ${f} to be a database number (redis://host:6379/0)`);
  return u;
}

/** host:port of a URL, for messages (never userinfo, path or query). */
export function where(u: URL): string {
  return `${u.protocol}//${u.host}`;
}

/** A Sentinel's address as ioredis takes it. */
export interface SentinelAddress {
  readonly host: string;
  readonly port: number;
}

/** `{ host, port }`, `'host:port'` or `'redis://host:port'` → `{ host, port }` (credentials belong in `redisOptions`). */
export function checkSentinels(v: unknown): SentinelAddress[] {
  if (!Array.isArray(v) || v.length === 0) throw invalid('sentinels', 'Expected `sentinels` to be a non-empty array of { host, port } (or "host:port")');
  return v.map((s: unknown, i) => {
    if (typeof s === 'object' && s !== null && typeof (s as { host?: unknown }).host === 'string' && (s as { host: string }).host !== '') {
      const port = (s as { port?: unknown }).port ?? 26379;
      if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535)
        throw invalid('sentinels', `Expected \`sentinels[${i}].port\` to be a port number`);
      return { host: (s as { host: string }).host, port };
    }
    if (typeof s === 'string') {
      const m = /^(?:redis:\/\/)?([^:/@\s]+|\[[0-9a-fA-F:]+\]):(\d{1,5})\/?$/.exec(s);
      if (m !== null && Number(m[2]) >= 1 && Number(m[2]) <= 65535) return { host: m[1]!.replace(/^\[|\]$/g, ''), port: Number(m[2]) };
    }
    throw invalid('sentinels', `Expected \`sentinels[${i}]\` to be { host, port } or "host:port" (credentials go in \`redisOptions\`: sentinelPassword)`);
  });
}

/** The seed nodes of a cluster: redis:// or rediss:// URLs, one scheme and one set of credentials for all. */
export function checkCluster(v: unknown): URL[] {
  if (!Array.isArray(v) || v.length === 0) throw invalid('cluster', 'Expected `cluster` to be a non-empty array of redis:// URLs (seed nodes of the cluster)');
  const urls = v.map((u: unknown) => checkUrl(u, 'cluster'));
  for (const u of urls) {
    const db = u.pathname.replace(/^\//, '');
    if (db !== '' && db !== '0') throw invalid('cluster', 'Expected the URLs of `cluster` to name no database: a Redis Cluster has only database 0');
    if (u.protocol !== urls[0]!.protocol) throw invalid('cluster', 'Expected every URL of `cluster` to use the same scheme (redis:// or rediss://)');
  }
  return urls;
}

/** Options for every connection the fleet opens: a plain object (never a client). */
export function checkRedisOptions(v: unknown): Readonly<Record<string, unknown>> {
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw invalid('redisOptions', 'Expected `redisOptions` to be an object of ioredis options (password, username, tls, sentinelPassword, …)');
  return v as Record<string, unknown>;
}
