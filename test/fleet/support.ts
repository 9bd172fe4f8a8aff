// Shared helpers of the fleet tests: the shared Redis (required in CI, skipped with a
// message elsewhere), unique key prefixes, and private Redis servers for the tests that
// kill, stall or partition Redis (never the shared one): one redis-server, a Redis Cluster
// of 3 masters + 3 replicas, a redis-server in a network namespace (servers.mjs, shared
// with the fleet-faults benchmark), a master with a replica and a Sentinel (here).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { freePort, ownRedis, sleep, type OwnCluster, type OwnRedis } from './servers.mjs';

export { freePort, namespacedRedis, namespacesUnavailable, ownCluster, ownRedis, sleep } from './servers.mjs';
export type { ClusterNode, NamespacedRedis, OwnCluster, OwnRedis } from './servers.mjs';

export const REDIS_URL = process.env.RELENT_TEST_REDIS ?? 'redis://127.0.0.1:6379';
export const IN_CI = process.env.CI === 'true';

let probe: Promise<string | null> | null = null;

/** null when the shared Redis answers; otherwise why not. */
export function redisUnavailable(): Promise<string | null> {
  probe ??= (async () => {
    const r = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 2000, enableOfflineQueue: false });
    r.on('error', () => {});
    try {
      await r.connect();
      await r.ping();
      return null;
    } catch (e) {
      return e instanceof Error ? e.message : String(e);
    } finally {
      r.disconnect();
    }
  })();
  return probe;
}

/** Whether the Redis tests run: in CI always (and they fail if Redis is missing); elsewhere skipped, with a message, when it does not answer. */
export async function redisEnabled(): Promise<boolean> {
  const why = await redisUnavailable();
  if (why === null || IN_CI) return true;
  process.stderr.write(`\n[relent fleet tests] Redis at ${REDIS_URL} is unreachable (${why}): skipping the Redis tests (they run in CI)\n`);
  return false;
}

/**
 * Whether the tests that run a redis-server of their own (to kill or stall it) run: in CI
 * always (they fail if the binary is missing); elsewhere skipped, with a message, without it.
 */
export async function ownRedisEnabled(): Promise<boolean> {
  const found = await new Promise<boolean>((resolve) => {
    const p = spawn('redis-server', ['--version'], { stdio: 'ignore' });
    p.on('error', () => resolve(false));
    p.on('exit', (code) => resolve(code === 0));
  });
  if (found || IN_CI) return true;
  process.stderr.write('\n[relent fleet tests] no redis-server binary: skipping the tests that start, kill or stall their own Redis (they run in CI)\n');
  return false;
}

/** A key prefix no other test run uses. */
export function uniquePrefix(tag: string): string {
  return `relent-test:${tag}:${process.pid}:${randomBytes(3).toString('hex')}:`;
}

/** Deletes every key under a prefix (the shared Redis stays clean). */
export async function dropPrefix(prefix: string, url = REDIS_URL): Promise<void> {
  const r = new Redis(url, { maxRetriesPerRequest: 1 });
  r.on('error', () => {});
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await r.del(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
}

/** Waits until `check()` is true (polling every 5 ms), or fails after `ms`. */
export async function until(check: () => boolean, ms = 2000, what = 'the condition'): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(5);
  }
}

/** A name whose fleet keys (`{prefix}{name}:…`) a given master serves, for each master: dependencies on different masters. */
export async function namesOnMasters(cluster: OwnCluster, prefix: string): Promise<Map<number, string>> {
  const { keySlot } = await import('../../src/fleet/slot.js');
  const masters = await cluster.masters();
  const slots = (await cluster.node(masters[0]!).cluster('SLOTS')) as unknown as [number, number, [string, number]][];
  const out = new Map<number, string>();
  for (let i = 0; out.size < masters.length && i < 10_000; i++) {
    const name = `dep-${i}`;
    const slot = keySlot(`${prefix}{${name}}:budget`);
    const port = slots.map(([a, b, m]) => (slot >= a && slot <= b ? Number(m[1]) : null)).find((x) => x !== null);
    if (port !== undefined && port !== null && !out.has(port)) out.set(port, name);
  }
  return out;
}

/** A master, a replica and a Sentinel of the test's own (quorum 1). */
export interface OwnSentinel {
  readonly name: string;
  readonly sentinelPort: number;
  readonly master: OwnRedis;
  readonly replica: OwnRedis;
  /** The master's port as the Sentinel sees it now. */
  masterPort(): Promise<number>;
  stop(): Promise<void>;
}

export async function ownSentinel(name = 'relent-test'): Promise<OwnSentinel> {
  const { mkdtempSync, rmSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const master = await ownRedis();
  const replica = await ownRedis(['--replicaof', '127.0.0.1', String(master.port)]);
  const dir = mkdtempSync(join(tmpdir(), 'relent-sentinel-'));
  const sentinelPort = await freePort();
  const conf = join(dir, 'sentinel.conf');
  writeFileSync(
    conf,
    [
      `port ${sentinelPort}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${name} 127.0.0.1 ${master.port} 1`,
      `sentinel down-after-milliseconds ${name} 1000`,
      `sentinel failover-timeout ${name} 3000`,
      `sentinel parallel-syncs ${name} 1`,
      '',
    ].join('\n'),
  );
  const proc = spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
  const client = new Redis({ port: sentinelPort, host: '127.0.0.1', maxRetriesPerRequest: 0, retryStrategy: () => 50, lazyConnect: false });
  client.on('error', () => {});
  const replicaClient = new Redis(replica.url, { maxRetriesPerRequest: 0, retryStrategy: () => 50 });
  replicaClient.on('error', () => {});
  const masterPort = async (): Promise<number> => {
    const r = (await client.call('SENTINEL', 'get-master-addr-by-name', name)) as [string, string] | null;
    return r === null ? 0 : Number(r[1]);
  };
  const stop = async (): Promise<void> => {
    client.disconnect();
    replicaClient.disconnect();
    await new Promise<void>((resolve) => {
      if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
      proc.once('exit', () => resolve());
      proc.kill('SIGKILL');
    });
    await master.stop();
    await replica.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const deadline = Date.now() + 15_000;
    for (;;) {
      try {
        const info = await replicaClient.info('replication');
        // The replica follows the master, and the Sentinel knows both.
        const replicas = (await client.call('SENTINEL', 'replicas', name)) as unknown[];
        if (/master_link_status:up/.test(info) && (await masterPort()) === master.port && replicas.length > 0) break;
      } catch {
        // not yet
      }
      if (Date.now() > deadline) throw new Error('the Sentinel did not find its master and replica');
      await sleep(100);
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return { name, sentinelPort, master, replica, masterPort, stop };
}
