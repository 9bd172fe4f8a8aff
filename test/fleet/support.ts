// Shared helpers of the fleet tests: the shared Redis (required in CI, skipped with a
// message elsewhere), unique key prefixes, and private redis-server instances for the
// tests that kill or lock Redis (never the shared one).
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';

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

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** A redis-server of the test's own, on a free port; `stop()` kills it (SIGKILL), `start()` starts it again on the same port. */
export interface OwnRedis {
  readonly port: number;
  readonly url: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** SIGSTOP / SIGCONT: Redis stops answering without closing its connections (as in a partition). */
  pause(): void;
  resume(): void;
}

export async function ownRedis(extra: string[] = []): Promise<OwnRedis> {
  const port = await freePort();
  let proc: ChildProcess | null = null;
  const start = async (): Promise<void> => {
    proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extra], { stdio: 'ignore' });
    const deadline = Date.now() + 10_000;
    for (;;) {
      const r = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false, enableReadyCheck: false });
      // A server with a password answers NOAUTH: it is up. ioredis 6 says so on connect (its HELLO), 5 on the PING.
      let noAuth = false;
      r.on('error', (e: Error) => {
        if (/NOAUTH/.test(e.message)) noAuth = true;
      });
      try {
        await r.connect();
        await r.ping().catch((e: Error) => {
          if (!/NOAUTH/.test(e.message)) throw e;
        });
        return;
      } catch {
        if (noAuth) return;
        if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not start`);
        await new Promise((res) => setTimeout(res, 50));
      } finally {
        r.disconnect();
      }
    }
  };
  const stop = (): Promise<void> => new Promise((resolve) => {
    const p = proc;
    proc = null;
    if (p === null || p.exitCode !== null) return resolve();
    p.once('exit', () => resolve());
    p.kill('SIGKILL');
  });
  await start();
  return {
    port, url: `redis://127.0.0.1:${port}`, start, stop,
    pause: () => void (proc as ChildProcess | null)?.kill('SIGSTOP'),
    resume: () => void (proc as ChildProcess | null)?.kill('SIGCONT'),
  };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Waits until `check()` is true (polling every 5 ms), or fails after `ms`. */
export async function until(check: () => boolean, ms = 2000, what = 'the condition'): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(5);
  }
}

/** One node of a cluster of the test's own. */
export interface ClusterNode {
  readonly port: number;
  readonly url: string;
}

/** A Redis Cluster of the test's own: 3 masters + 3 replicas on free ports (never the shared 6379). */
export interface OwnCluster {
  readonly nodes: readonly ClusterNode[];
  /** redis:// URLs of every node (seeds for the fleet). */
  readonly urls: readonly string[];
  /** The master serving a key now (asks a live node: CLUSTER KEYSLOT and CLUSTER SLOTS). */
  masterOf(key: string): Promise<number>;
  /** The ports of the masters serving slots now. */
  masters(): Promise<number[]>;
  /** kill -9 of a node. */
  kill(port: number): Promise<void>;
  /** Waits until `port` has no slots any more and every slot is served by a live master (a replica took over). */
  failedOver(port: number, ms?: number): Promise<void>;
  /** A client of one live node (not a cluster client), for checks. */
  node(port: number): Redis;
  /** Kills every node and removes its files. */
  stop(): Promise<void>;
}

/**
 * Starts six redis-servers with `cluster-enabled yes` (node timeout `nodeTimeoutMs`: how
 * long before a silent master is failed over), joins them with `redis-cli --cluster
 * create … --cluster-replicas 1`, and waits for `cluster_state:ok` on every node.
 */
export async function ownCluster(nodeTimeoutMs = 1000): Promise<OwnCluster> {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), 'relent-cluster-'));
  const ports: number[] = [];
  while (ports.length < 6) {
    const p = await freePort();
    // The cluster bus listens on port + 10000: both must be free.
    if (p + 10000 < 65536 && !ports.includes(p)) ports.push(p);
  }
  const procs = new Map<number, ChildProcess>();
  const clients = new Map<number, Redis>();
  const stop = async (): Promise<void> => {
    for (const c of clients.values()) c.disconnect();
    clients.clear();
    await Promise.all([...procs.values()].map((p) => new Promise<void>((resolve) => {
      if (p.exitCode !== null || p.signalCode !== null) return resolve();
      p.once('exit', () => resolve());
      p.kill('SIGKILL');
    })));
    procs.clear();
    rmSync(dir, { recursive: true, force: true });
  };
  const node = (port: number): Redis => {
    let c = clients.get(port);
    if (c === undefined) {
      c = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: true, lazyConnect: false });
      c.on('error', () => {});
      clients.set(port, c);
    }
    return c;
  };
  try {
    for (const port of ports) {
      const p = spawn('redis-server', [
        '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir,
        '--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`, '--cluster-node-timeout', String(nodeTimeoutMs),
      ], { stdio: 'ignore' });
      procs.set(port, p);
    }
    for (const port of ports) {
      const deadline = Date.now() + 10_000;
      for (;;) {
        try {
          if ((await node(port).ping()) === 'PONG') break;
        } catch {
          clients.get(port)?.disconnect();
          clients.delete(port);
        }
        if (Date.now() > deadline) throw new Error(`cluster node ${port} did not start`);
        await sleep(50);
      }
    }
    await new Promise<void>((resolve, reject) => {
      const cli = spawn('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '1', '--cluster-yes'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      cli.stdout!.on('data', (d) => (out += d));
      cli.stderr!.on('data', (d) => (out += d));
      cli.on('error', reject);
      cli.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`redis-cli --cluster create exited with ${code}: ${out.slice(-1000)}`))));
    });
    const deadline = Date.now() + 20_000;
    for (;;) {
      const states = await Promise.all(ports.map(async (p) => {
        const info = await node(p).cluster('INFO') as string;
        return /cluster_state:ok/.test(info) && /cluster_known_nodes:6/.test(info);
      }));
      // Every replica has its master's data link up (so that a failover can pick it).
      const replicas = await Promise.all(ports.map(async (p) => {
        const info = await node(p).info('replication');
        return !/role:slave/.test(info) || /master_link_status:up/.test(info);
      }));
      if (states.every(Boolean) && replicas.every(Boolean)) break;
      if (Date.now() > deadline) throw new Error('the cluster did not reach cluster_state:ok');
      await sleep(100);
    }
  } catch (e) {
    await stop();
    throw e;
  }
  const alive = (): number[] => ports.filter((p) => procs.get(p)?.exitCode === null && procs.get(p)?.signalCode === null);
  const slotsMap = async (): Promise<{ from: number; to: number; port: number }[]> => {
    for (const p of alive()) {
      try {
        const slots = await node(p).cluster('SLOTS') as unknown as [number, number, [string, number]][];
        return slots.map(([from, to, master]) => ({ from, to, port: Number(master[1]) }));
      } catch {
        // try the next node
      }
    }
    throw new Error('no live cluster node answered CLUSTER SLOTS');
  };
  return {
    nodes: ports.map((port) => ({ port, url: `redis://127.0.0.1:${port}` })),
    urls: ports.map((port) => `redis://127.0.0.1:${port}`),
    node,
    async masterOf(key) {
      const slot = await node(alive()[0]!).cluster('KEYSLOT', key) as number;
      const hit = (await slotsMap()).find((r) => slot >= r.from && slot <= r.to);
      if (hit === undefined) throw new Error(`no master serves slot ${slot}`);
      return hit.port;
    },
    async masters() {
      return [...new Set((await slotsMap()).map((r) => r.port))].sort((a, b) => a - b);
    },
    async kill(port) {
      const p = procs.get(port);
      clients.get(port)?.disconnect();
      clients.delete(port);
      if (p === undefined || p.exitCode !== null || p.signalCode !== null) return;
      await new Promise<void>((resolve) => {
        p.once('exit', () => resolve());
        p.kill('SIGKILL');
      });
    },
    async failedOver(port, ms = 20_000) {
      const deadline = Date.now() + ms;
      for (;;) {
        try {
          const live = alive();
          const views = await Promise.all(live.map(async (p) => {
            const info = await node(p).cluster('INFO') as string;
            const slots = await node(p).cluster('SLOTS') as unknown as [number, number, [string, number]][];
            const covered = slots.reduce((n, [a, b]) => n + (b - a + 1), 0);
            return /cluster_state:ok/.test(info) && covered === 16384 && slots.every(([, , m]) => Number(m[1]) !== port);
          }));
          if (views.every(Boolean)) return;
        } catch {
          // a node still catching up
        }
        if (Date.now() > deadline) throw new Error(`no failover of ${port} within ${ms} ms`);
        await sleep(20);
      }
    },
    stop,
  };
}

/** A name whose fleet keys (`{prefix}{name}:…`) a given master serves, for each master: dependencies on different masters. */
export async function namesOnMasters(cluster: OwnCluster, prefix: string): Promise<Map<number, string>> {
  const { keySlot } = await import('../../src/fleet/slot.js');
  const masters = await cluster.masters();
  const slots = await cluster.node(masters[0]!).cluster('SLOTS') as unknown as [number, number, [string, number]][];
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
  writeFileSync(conf, [
    `port ${sentinelPort}`, 'bind 127.0.0.1', `dir ${dir}`,
    `sentinel monitor ${name} 127.0.0.1 ${master.port} 1`,
    `sentinel down-after-milliseconds ${name} 1000`,
    `sentinel failover-timeout ${name} 3000`,
    `sentinel parallel-syncs ${name} 1`, '',
  ].join('\n'));
  const proc = spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
  const client = new Redis({ port: sentinelPort, host: '127.0.0.1', maxRetriesPerRequest: 0, retryStrategy: () => 50, lazyConnect: false });
  client.on('error', () => {});
  const replicaClient = new Redis(replica.url, { maxRetriesPerRequest: 0, retryStrategy: () => 50 });
  replicaClient.on('error', () => {});
  const masterPort = async (): Promise<number> => {
    const r = await client.call('SENTINEL', 'get-master-addr-by-name', name) as [string, string] | null;
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
        const replicas = await client.call('SENTINEL', 'replicas', name) as unknown[];
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

/** A redis-server in a network namespace of the test's own, reached over a veth pair; `partition()` drops every packet both ways (iptables DROP inside the namespace), `heal()` lets them through again. */
export interface NamespacedRedis {
  readonly url: string;
  readonly host: string;
  readonly port: number;
  partition(): Promise<void>;
  heal(): Promise<void>;
  /** Connections Redis has accepted so far (INFO stats total_connections_received). */
  connectionsReceived(): Promise<number>;
  stop(): Promise<void>;
}

function run(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout!.on('data', (d) => (out += d));
    p.stderr!.on('data', (d) => (err += d));
    p.on('error', reject);
    p.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args.join(' ')}: exit ${code}: ${err.trim()}`))));
  });
}

/** Whether this process may make namespaces and iptables rules (root, with ip and iptables installed); why not otherwise. */
export async function namespacesUnavailable(): Promise<string | null> {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) return 'not root';
  try {
    await run('ip', ['-V']);
    await run('iptables', ['-V']);
    return null;
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
}

export async function namespacedRedis(): Promise<NamespacedRedis> {
  const tag = randomBytes(3).toString('hex');
  const ns = `relent-${tag}`;
  const outer = `rl${tag}a`;
  const inner = `rl${tag}b`;
  // A /30 of its own in 10.77.0.0/16 (another test's namespace picks another one).
  const n = randomBytes(2).readUInt16BE(0) & 0x3fff;
  const base = `10.77.${n >> 6}.${(n & 0x3f) << 2}`;
  const [a, b, c] = base.split('.').map(Number) as [number, number, number, number];
  const d = Number(base.split('.')[3]);
  const outerIp = `${a}.${b}.${c}.${d + 1}`;
  const innerIp = `${a}.${b}.${c}.${d + 2}`;
  const port = 6379;
  const cleanup = async (): Promise<void> => {
    await run('ip', ['link', 'del', outer]).catch(() => {});
    await run('ip', ['netns', 'del', ns]).catch(() => {});
  };
  let proc: ChildProcess | null = null;
  try {
    await run('ip', ['netns', 'add', ns]);
    await run('ip', ['link', 'add', outer, 'type', 'veth', 'peer', 'name', inner]);
    await run('ip', ['link', 'set', inner, 'netns', ns]);
    await run('ip', ['addr', 'add', `${outerIp}/30`, 'dev', outer]);
    await run('ip', ['link', 'set', outer, 'up']);
    await run('ip', ['netns', 'exec', ns, 'ip', 'addr', 'add', `${innerIp}/30`, 'dev', inner]);
    await run('ip', ['netns', 'exec', ns, 'ip', 'link', 'set', inner, 'up']);
    await run('ip', ['netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up']);
    proc = spawn('ip', ['netns', 'exec', ns, 'redis-server', '--port', String(port), '--bind', innerIp, '--save', '', '--appendonly', 'no', '--protected-mode', 'no'], { stdio: 'ignore' });
    const deadline = Date.now() + 10_000;
    for (;;) {
      const r = new Redis({ host: innerIp, port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 500 });
      r.on('error', () => {});
      try {
        await r.connect();
        await r.ping();
        break;
      } catch {
        if (Date.now() > deadline) throw new Error(`redis-server in namespace ${ns} did not start`);
        await sleep(50);
      } finally {
        r.disconnect();
      }
    }
  } catch (e) {
    proc?.kill('SIGKILL');
    await cleanup();
    throw e;
  }
  const iptables = (...args: string[]): Promise<string> => run('ip', ['netns', 'exec', ns, 'iptables', ...args]);
  return {
    url: `redis://${innerIp}:${port}`, host: innerIp, port,
    async partition() {
      await iptables('-A', 'INPUT', '-i', inner, '-j', 'DROP');
      await iptables('-A', 'OUTPUT', '-o', inner, '-j', 'DROP');
    },
    async heal() {
      await iptables('-F');
    },
    async connectionsReceived() {
      const r = new Redis({ host: innerIp, port, maxRetriesPerRequest: 0, retryStrategy: () => null });
      r.on('error', () => {});
      try {
        return Number(/total_connections_received:(\d+)/.exec(await r.info('stats'))?.[1] ?? NaN);
      } finally {
        r.disconnect();
      }
    },
    async stop() {
      await new Promise<void>((resolve) => {
        if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return resolve();
        proc.once('exit', () => resolve());
        proc.kill('SIGKILL');
      });
      await cleanup();
    },
  };
}
