// createRedisFleet() on a Redis Cluster of the test's own (3 masters + 3 replicas from the
// installed redis-server, on free ports: test/fleet/support.ts ownCluster()), several
// fleet objects in one process standing in for processes. The tests that kill a node
// start a cluster of their own.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cluster } from 'ioredis';
import fc from 'fast-check';
import type { RetryBudget } from '../../src/core/budget.js';
import { createRedisFleet, type FleetEvent, type RedisFleet, type RedisFleetOptions } from '../../src/fleet/index.js';
import { keySlot } from '../../src/fleet/slot.js';
import { namesOnMasters, ownCluster, ownRedisEnabled, sleep, until, type OwnCluster } from './support.js';

const enabled = await ownRedisEnabled();
const RETRY = { throttled: false, timeout: false };
const FAIL = { attempt: 1, success: false, retryableFailure: true, throttled: false, timeout: false, lastCost: 0 };
const open: RedisFleet[] = [];

function fleet(o: Partial<RedisFleetOptions> & Pick<RedisFleetOptions, 'prefix'>): RedisFleet {
  const f = createRedisFleet({ timeoutMs: 250, syncMs: 50, ...o } as RedisFleetOptions);
  open.push(f);
  return f;
}

/**
 * Takes every token the budgets will give (letting their syncs run): until `least` have
 * come (at most 10 s: this machine may be loaded), then `ms` more to see whether any more come.
 */
async function drain(budgets: RetryBudget[], ms: number, least = 0): Promise<number> {
  let got = 0;
  const take = (): void => {
    for (const b of budgets) while (b.tryAcquire(RETRY, performance.now()) !== false) got++;
  };
  const deadline = Date.now() + 10_000;
  while (got < least && Date.now() < deadline) {
    take();
    await sleep(5);
  }
  const end = Date.now() + ms;
  while (Date.now() < end) {
    take();
    await sleep(5);
  }
  return got;
}

afterAll(async () => {
  await Promise.all(open.map((f) => f.close()));
});

describe('hash slots', () => {
  it("CRC16/XMODEM of the spec's test vector, and the hash tag rule", () => {
    expect(keySlot('123456789')).toBe(0x31c3 % 16384);
    expect(keySlot('{user1000}.following')).toBe(keySlot('{user1000}.followers'));
    expect(keySlot('foo{}{bar}')).toBe(keySlot('foo{}{bar}')); // empty tag: the whole key
    expect(keySlot('foo{}{bar}')).not.toBe(keySlot('bar'));
    expect(keySlot('foo{{bar}}zap')).toBe(keySlot('{bar'));
    expect(keySlot('foo{bar}{zap}')).toBe(keySlot('bar'));
  });
});

describe.skipIf(!enabled)('Redis Cluster (own 3 masters + 3 replicas)', () => {
  let cluster: OwnCluster;
  beforeAll(async () => {
    cluster = await ownCluster();
  }, 60_000);
  afterAll(async () => {
    await Promise.all(open.splice(0).map((f) => f.close()));
    await cluster?.stop();
  });

  it('the slot of a key is the one the cluster computes (CLUSTER KEYSLOT), tags and UTF-8 included', async () => {
    const node = cluster.node(cluster.nodes[0]!.port);
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.string(),
          fc.string({ unit: 'grapheme' }),
          fc.tuple(fc.string(), fc.string(), fc.string()).map(([a, b, c]) => `${a}{${b}}${c}`),
        ),
        async (key) => {
          expect(keySlot(key)).toBe(await node.cluster('KEYSLOT', key));
        },
      ),
      { numRuns: 200, seed: 7 },
    );
  });

  it('three dependencies on three masters: every node joined, one budget per dependency shared by two processes', async () => {
    const prefix = 'c-three:';
    const names = [...(await namesOnMasters(cluster, prefix)).values()];
    expect(names).toHaveLength(3);
    const a = fleet({ cluster: cluster.urls, prefix });
    const b = fleet({ cluster: cluster.urls.slice(0, 1), prefix });
    expect(await a.ready(10_000)).toBe(true);
    expect(await b.ready(10_000)).toBe(true);
    const spec = { kind: 'ratio' as const, minPerSecond: 0, maxTokens: 10 };
    for (const name of names) {
      const got = await drain([a.budget(name, spec), b.budget(name, spec)], 400, 10);
      // One bucket of 10 plus a lease each — on whichever master holds it.
      expect(got, name).toBeGreaterThanOrEqual(10);
      expect(got, name).toBeLessThanOrEqual(12);
    }
    const s = a.stats();
    expect(s.mode).toBe('fleet');
    expect(s.store).toMatch(/^cluster redis:\/\/127\.0\.0\.1:\d+ \(\+5 seeds\)$/);
    const masters = (await cluster.masters()).map((p) => `127.0.0.1:${p}`);
    expect(Object.keys(s.nodes).sort()).toEqual(masters.sort());
    for (const n of Object.values(s.nodes)) expect(n).toMatchObject({ mode: 'fleet', dependencies: 1 });
    for (const name of names) expect(s.budgets[name]).toMatchObject({ mode: 'fleet', processes: 2 });
    expect(s.fallbacks).toBe(0);
  });

  it('an open breaker reaches every process, whichever node it was published on and each one listens to', async () => {
    const prefix = 'c-open:';
    const names = [...(await namesOnMasters(cluster, prefix)).values()];
    const fleets = [0, 1, 2, 3].map(() => fleet({ cluster: cluster.urls, prefix }));
    for (const f of fleets) expect(await f.ready(10_000)).toBe(true);
    const spec = { minimumThroughput: 3, openMs: 60_000 };
    for (const name of names) {
      const breakers = fleets.map((f) => f.breaker(name, spec));
      await sleep(100);
      for (let i = 0; i < 3; i++) breakers[0]!.record('failure', Date.now());
      await until(() => breakers.every((br) => br.state(Date.now()) === 'open'), 10_000, `every process to open ${name}`);
    }
  });

  it('`url:` to one node finds the cluster and uses it; with a database number it fails at ready(), naming the fix', async () => {
    const prefix = 'c-url:';
    const names = [...(await namesOnMasters(cluster, prefix)).values()];
    const f = fleet({ url: cluster.urls[4]!, prefix });
    expect(await f.ready(10_000)).toBe(true);
    expect(f.stats().store).toBe(`cluster via ${cluster.urls[4]}`);
    // One process: the whole bucket (its lease's credit is paid from it at its first visit).
    for (const name of names) expect(await drain([f.budget(name, { kind: 'ratio', minPerSecond: 0, maxTokens: 4 })], 300, 4)).toBe(4);
    expect(Object.values(f.stats().nodes).map((n) => n.mode)).toEqual(['fleet', 'fleet', 'fleet']);

    const events: FleetEvent[] = [];
    const bad = fleet({ url: `${cluster.urls[0]}/2`, prefix, onEvent: (e) => events.push(e) });
    expect(await bad.ready(3000)).toBe(false);
    expect(bad.stats().reason).toMatch(/is a Redis Cluster node, and a cluster has only database 0: remove the database number from `url`/);
    expect(events.filter((e) => e.type === 'fleet_mode')).toHaveLength(1);
  });

  it('`client:` a Cluster of your own (typed Redis | Cluster): used as a template, never touched', async () => {
    const client = new Cluster(cluster.nodes.slice(0, 2).map((n) => ({ host: '127.0.0.1', port: n.port })));
    try {
      await new Promise<void>((r) => client.once('ready', () => r()));
      const listeners = client.listenerCount('error');
      const f = fleet({ client, prefix: 'c-client:' });
      expect(await f.ready(10_000)).toBe(true);
      expect(f.stats().store).toBe('the given cluster client');
      expect(await drain([f.budget('x', { kind: 'ratio', minPerSecond: 0, maxTokens: 3 })], 200, 3)).toBe(3);
      await f.close();
      expect(client.status).toBe('ready');
      expect(client.listenerCount('error')).toBe(listeners);
      expect(await client.set('c-client:probe', '1')).toBe('OK');
    } finally {
      client.disconnect();
    }
  });

  it('scripts are loaded again after NOSCRIPT (SCRIPT FLUSH on every master): no fallback, syncs go on', async () => {
    const prefix = 'c-noscript:';
    const names = [...(await namesOnMasters(cluster, prefix)).values()];
    const events: FleetEvent[] = [];
    const f = fleet({ cluster: cluster.urls, prefix, onEvent: (e) => events.push(e) });
    expect(await f.ready(10_000)).toBe(true);
    const budgets = names.map((n) => f.budget(n, { kind: 'ratio', ratio: 1, minPerSecond: 0, maxTokens: 100 }));
    await drain(budgets, 200, 3 * 100);
    for (const p of await cluster.masters()) expect(await cluster.node(p).script('FLUSH')).toBe('OK');
    const before = f.stats().roundTrips;
    // Deposits handed in after the flush reach the shared buckets: 30 answers each = 30
    // tokens, 10 of which refill the lease and 20 go to the (drained) bucket.
    for (const b of budgets) for (let i = 0; i < 30; i++) b.observe({ ...FAIL, success: true, retryableFailure: false }, performance.now());
    await until(() => names.every((n) => f.stats().budgets[n]?.shared === 20), 10_000, 'the deposits to reach every master');
    expect(f.stats().roundTrips).toBeGreaterThan(before);
    expect(f.stats().fallbacks).toBe(0);
    expect(events.filter((e) => e.type === 'fleet_mode').map((e) => (e as { mode: string }).mode)).toEqual(['fleet']);
  });
});

describe.skipIf(!enabled)('Redis Cluster failures (own cluster per test)', () => {
  it('kill -9 of a master: its dependency falls back at once and is shared again soon after its replica is promoted; no call fails', async () => {
    const cluster = await ownCluster();
    const prefix = 'c-kill:';
    try {
      const byMaster = await namesOnMasters(cluster, prefix);
      const [victim, name] = [...byMaster.entries()][0]!;
      const events: { e: FleetEvent; t: number }[] = [];
      const a = fleet({ cluster: cluster.urls, prefix, onEvent: (e) => events.push({ e, t: Date.now() }) });
      const b = fleet({ cluster: cluster.urls, prefix });
      expect(await a.ready(10_000)).toBe(true);
      expect(await b.ready(10_000)).toBe(true);
      const spec = { kind: 'ratio' as const, minPerSecond: 0, maxTokens: 10 };
      const breakerSpec = { minimumThroughput: 3, openMs: 60_000 };
      const budgets = [...byMaster.values()].map((n) => a.budget(n, spec));
      budgets.push(...[...byMaster.values()].map((n) => b.budget(n, spec)));
      a.breaker(name, breakerSpec);
      const bb = b.breaker(name, breakerSpec);
      await sleep(200);
      // Calls go on through it all: answered from local state, never waiting, never throwing.
      let calls = 0;
      let slowest = 0;
      let stop = false;
      const caller = (async () => {
        while (!stop) {
          const t0 = performance.now();
          for (const x of budgets) {
            x.tryAcquire(RETRY, t0);
            x.observe({ ...FAIL, success: true, retryableFailure: false }, t0);
          }
          slowest = Math.max(slowest, performance.now() - t0);
          calls++;
          await sleep(2);
        }
      })();
      const killedAt = Date.now();
      await cluster.kill(victim);
      await until(() => a.stats().budgets[name]?.mode === 'local', 5000, 'the dependency on the killed master to fall back');
      const fellBackAfter = Date.now() - killedAt;
      await cluster.failedOver(victim);
      const promotedAt = Date.now();
      await until(
        () => a.mode === 'fleet' && a.stats().budgets[name]?.mode === 'fleet' && b.stats().budgets[name]?.mode === 'fleet',
        10_000,
        'the dependency to be shared again',
      );
      const sharedAfter = Date.now() - promotedAt;
      stop = true;
      await caller;
      const newMaster = await cluster.masterOf(`${prefix}{${name}}:budget`);
      expect(newMaster).not.toBe(victim);
      expect(Object.keys(a.stats().nodes)).toContain(`127.0.0.1:${newMaster}`);
      expect(Object.keys(a.stats().nodes)).not.toContain(`127.0.0.1:${victim}`);
      // The promoted replica had no scripts: they ran anyway (EVAL on a new connection), and an open reaches b.
      for (let i = 0; i < 3; i++) a.breaker(name, breakerSpec).record('failure', Date.now());
      await until(() => bb.state(Date.now()) === 'open', 10_000, 'the open to reach the other process after the failover');
      expect(calls).toBeGreaterThan(20);
      expect(slowest).toBeLessThan(50);
      process.stdout.write(
        `\n[fleet] cluster kill -9 of master ${victim}: ${name} local ${fellBackAfter} ms after the kill; shared again ${sharedAfter} ms after the promotion was visible; ${calls} calls, slowest ${slowest.toFixed(1)} ms\n`,
      );
    } finally {
      await Promise.all(open.splice(0).map((f) => f.close()));
      await cluster.stop();
    }
  }, 90_000);

  it("the subscriber's node is killed: the subscription moves to another node, announcements keep arriving", async () => {
    const cluster = await ownCluster();
    const prefix = 'c-sub:';
    try {
      const a = fleet({ cluster: cluster.urls, prefix });
      const b = fleet({ cluster: cluster.urls, prefix });
      expect(await a.ready(10_000)).toBe(true);
      expect(await b.ready(10_000)).toBe(true);
      // Where each listens: PUBSUB NUMSUB is per node in a cluster.
      const listening = async (): Promise<number[]> => {
        const out: number[] = [];
        for (const n of cluster.nodes) {
          const r = (await cluster
            .node(n.port)
            .pubsub('NUMSUB', `${prefix}breaker`)
            .catch(() => null)) as [string, number] | null;
          if (r !== null && Number(r[1]) > 0) out.push(n.port);
        }
        return out;
      };
      const before = await listening();
      expect(before.length).toBeGreaterThanOrEqual(1);
      for (const port of before) await cluster.kill(port);
      for (const port of before) await cluster.failedOver(port);
      await until(() => a.stats().subscribed && b.stats().subscribed, 10_000, 'both to subscribe again');
      const after = await listening();
      expect(after.some((p) => before.includes(p))).toBe(false);
      await until(() => a.mode === 'fleet' && b.mode === 'fleet', 10_000, 'both joined');
      const names = [...(await namesOnMasters(cluster, prefix)).values()];
      const spec = { minimumThroughput: 2, openMs: 60_000 };
      for (const name of names) {
        const ba = a.breaker(name, spec);
        const bb = b.breaker(name, spec);
        await sleep(100);
        ba.record('failure', Date.now());
        ba.record('failure', Date.now());
        await until(() => bb.state(Date.now()) === 'open', 10_000, `the open of ${name} to reach the other process`);
      }
    } finally {
      await Promise.all(open.splice(0).map((f) => f.close()));
      await cluster.stop();
    }
  }, 90_000);
});
