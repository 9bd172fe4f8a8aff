// Redis servers of the tests' own, for the fleet's tests (through support.ts) and for
// `npm run bench -- fleet-faults`: plain JavaScript (with servers.d.mts), so that the
// benchmark, which runs on Node without a TypeScript loader, starts the same servers.
// Never the shared 6379: free ports, or a network namespace of their own.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = s.address().port;
      s.close(() => resolve(port));
    });
  });
}
export async function ownRedis(extra = []) {
  const port = await freePort();
  // Its files (a replica's sync writes an RDB) go to a folder of its own, removed by stop().
  const dir = join(tmpdir(), `relent-redis-${process.pid}-${port}`);
  let proc = null;
  const start = async () => {
    mkdirSync(dir, { recursive: true });
    proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...extra], {
      stdio: 'ignore',
    });
    const deadline = Date.now() + 10_000;
    for (;;) {
      const r = new Redis({
        port,
        host: '127.0.0.1',
        lazyConnect: true,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
        enableOfflineQueue: false,
        enableReadyCheck: false,
      });
      // A server with a password answers NOAUTH: it is up. ioredis 6 says so on connect (its HELLO), 5 on the PING.
      let noAuth = false;
      r.on('error', (e) => {
        if (/NOAUTH/.test(e.message)) noAuth = true;
      });
      try {
        await r.connect();
        await r.ping().catch((e) => {
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
  const stop = () =>
    new Promise((resolve) => {
      const p = proc;
      proc = null;
      const done = () => {
        rmSync(dir, { recursive: true, force: true });
        resolve();
      };
      if (p === null || p.exitCode !== null) return done();
      p.once('exit', done);
      p.kill('SIGKILL');
    });
  await start();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    start,
    stop,
    pause: () => void proc?.kill('SIGSTOP'),
    resume: () => void proc?.kill('SIGCONT'),
  };
}
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/**
 * Starts six redis-servers with `cluster-enabled yes` (node timeout `nodeTimeoutMs`: how
 * long before a silent master is failed over), joins them with `redis-cli --cluster
 * create … --cluster-replicas 1`, and waits for `cluster_state:ok` on every node.
 */
export async function ownCluster(nodeTimeoutMs = 1000) {
  const dir = mkdtempSync(join(tmpdir(), 'relent-cluster-'));
  const ports = [];
  while (ports.length < 6) {
    const p = await freePort();
    // The cluster bus listens on port + 10000: both must be free.
    if (p + 10000 < 65536 && !ports.includes(p)) ports.push(p);
  }
  const procs = new Map();
  const clients = new Map();
  const stop = async () => {
    for (const c of clients.values()) c.disconnect();
    clients.clear();
    await Promise.all(
      [...procs.values()].map(
        (p) =>
          new Promise((resolve) => {
            if (p.exitCode !== null || p.signalCode !== null) return resolve();
            p.once('exit', () => resolve());
            p.kill('SIGKILL');
          }),
      ),
    );
    procs.clear();
    rmSync(dir, { recursive: true, force: true });
  };
  const node = (port) => {
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
      const p = spawn(
        'redis-server',
        [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--save',
          '',
          '--appendonly',
          'no',
          '--dir',
          dir,
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          `nodes-${port}.conf`,
          '--cluster-node-timeout',
          String(nodeTimeoutMs),
        ],
        { stdio: 'ignore' },
      );
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
    await new Promise((resolve, reject) => {
      const cli = spawn('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '1', '--cluster-yes'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      cli.stdout.on('data', (d) => (out += d));
      cli.stderr.on('data', (d) => (out += d));
      cli.on('error', reject);
      cli.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`redis-cli --cluster create exited with ${code}: ${out.slice(-1000)}`))));
    });
    const deadline = Date.now() + 20_000;
    for (;;) {
      const states = await Promise.all(
        ports.map(async (p) => {
          const info = await node(p).cluster('INFO');
          return /cluster_state:ok/.test(info) && /cluster_known_nodes:6/.test(info);
        }),
      );
      // Every replica has its master's data link up (so that a failover can pick it).
      const replicas = await Promise.all(
        ports.map(async (p) => {
          const info = await node(p).info('replication');
          return !/role:slave/.test(info) || /master_link_status:up/.test(info);
        }),
      );
      if (states.every(Boolean) && replicas.every(Boolean)) break;
      if (Date.now() > deadline) throw new Error('the cluster did not reach cluster_state:ok');
      await sleep(100);
    }
  } catch (e) {
    await stop();
    throw e;
  }
  const alive = () => ports.filter((p) => procs.get(p)?.exitCode === null && procs.get(p)?.signalCode === null);
  const slotsMap = async () => {
    for (const p of alive()) {
      try {
        const slots = await node(p).cluster('SLOTS');
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
      const slot = await node(alive()[0]).cluster('KEYSLOT', key);
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
      await new Promise((resolve) => {
        p.once('exit', () => resolve());
        p.kill('SIGKILL');
      });
    },
    async failedOver(port, ms = 20_000) {
      const deadline = Date.now() + ms;
      for (;;) {
        try {
          const live = alive();
          const views = await Promise.all(
            live.map(async (p) => {
              const info = await node(p).cluster('INFO');
              const slots = await node(p).cluster('SLOTS');
              const covered = slots.reduce((n, [a, b]) => n + (b - a + 1), 0);
              return /cluster_state:ok/.test(info) && covered === 16384 && slots.every(([, , m]) => Number(m[1]) !== port);
            }),
          );
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
function run(cmd, args) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    p.on('error', reject);
    p.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args.join(' ')}: exit ${code}: ${err.trim()}`))));
  });
}
/** Whether this process may make namespaces and iptables rules (root, with ip and iptables installed); why not otherwise. */
export async function namespacesUnavailable() {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) return 'not root';
  try {
    await run('ip', ['-V']);
    await run('iptables', ['-V']);
    return null;
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
}
export async function namespacedRedis() {
  const tag = randomBytes(3).toString('hex');
  const ns = `relent-${tag}`;
  const outer = `rl${tag}a`;
  const inner = `rl${tag}b`;
  // A /30 of its own in 10.77.0.0/16 (another test's namespace picks another one).
  const n = randomBytes(2).readUInt16BE(0) & 0x3fff;
  const base = `10.77.${n >> 6}.${(n & 0x3f) << 2}`;
  const [a, b, c] = base.split('.').map(Number);
  const d = Number(base.split('.')[3]);
  const outerIp = `${a}.${b}.${c}.${d + 1}`;
  const innerIp = `${a}.${b}.${c}.${d + 2}`;
  const port = 6379;
  const cleanup = async () => {
    await run('ip', ['link', 'del', outer]).catch(() => {});
    await run('ip', ['netns', 'del', ns]).catch(() => {});
  };
  let proc = null;
  try {
    await run('ip', ['netns', 'add', ns]);
    await run('ip', ['link', 'add', outer, 'type', 'veth', 'peer', 'name', inner]);
    await run('ip', ['link', 'set', inner, 'netns', ns]);
    await run('ip', ['addr', 'add', `${outerIp}/30`, 'dev', outer]);
    await run('ip', ['link', 'set', outer, 'up']);
    await run('ip', ['netns', 'exec', ns, 'ip', 'addr', 'add', `${innerIp}/30`, 'dev', inner]);
    await run('ip', ['netns', 'exec', ns, 'ip', 'link', 'set', inner, 'up']);
    await run('ip', ['netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up']);
    proc = spawn(
      'ip',
      ['netns', 'exec', ns, 'redis-server', '--port', String(port), '--bind', innerIp, '--save', '', '--appendonly', 'no', '--protected-mode', 'no'],
      { stdio: 'ignore' },
    );
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
  const iptables = (...args) => run('ip', ['netns', 'exec', ns, 'iptables', ...args]);
  return {
    url: `redis://${innerIp}:${port}`,
    host: innerIp,
    port,
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
      await new Promise((resolve) => {
        if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return resolve();
        proc.once('exit', () => resolve());
        proc.kill('SIGKILL');
      });
      await cleanup();
    },
  };
}
