// createRedisFleet() on a real Redis, several fleet objects in one process standing in
// for processes (each has its own connections). The ten-process figures are in
// processes.test.ts. Tests that stop, kill or lock Redis run their own redis-server.
import { afterAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import { Agent, request } from 'undici';
import { Redis } from 'ioredis';
import { createCircuitBreaker, type BreakerStateChange } from '../../src/core/breaker.js';
import type { RetryBudget } from '../../src/core/budget.js';
import { RelentError } from '../../src/core/errors.js';
import { createRedisFleet, type FleetEvent, type RedisFleet, type RedisFleetOptions } from '../../src/fleet/index.js';
import { createClient, relentInterceptor } from '../../src/http/index.js';
import { run } from '../../src/run/run.js';
import { dropPrefix, freePort, ownRedisEnabled, ownRedis, REDIS_URL, redisEnabled, sleep, uniquePrefix, until } from './support.js';

const enabled = await redisEnabled();
const canSpawn = enabled && (await ownRedisEnabled());
const RETRY = { throttled: false, timeout: false };
const prefixes: string[] = [];
const open: RedisFleet[] = [];

function fleet(o: Partial<RedisFleetOptions> & { prefix: string }): RedisFleet {
  const f = createRedisFleet({ url: REDIS_URL, timeoutMs: 250, syncMs: 50, ...o } as RedisFleetOptions);
  open.push(f);
  return f;
}
function prefix(tag: string): string {
  const p = uniquePrefix(tag);
  prefixes.push(p);
  return p;
}
/** Takes every token a budget will give over `ms` (letting its syncs run). */
async function drain(budgets: RetryBudget[], ms: number): Promise<number> {
  let got = 0;
  const end = Date.now() + ms;
  while (Date.now() < end) {
    for (const b of budgets) while (b.tryAcquire(RETRY, performance.now()) !== false) got++;
    await sleep(5);
  }
  return got;
}

afterAll(async () => {
  await Promise.all(open.map((f) => f.close()));
  if (enabled) for (const p of prefixes) await dropPrefix(p);
});

describe('createRedisFleet: bad input', () => {
  it('bad options throw ERR_INVALID_INPUT naming the field, and never echo a URL', () => {
    const bad: [unknown, RegExp][] = [
      [undefined, /options/],
      [{}, /exactly one of `url`, `cluster`, `sentinels` \(with `name`\) and `client`/],
      [{ url: 'redis://a', client: {} }, /exactly one.*got url and client/],
      [{ url: 'redis://a', cluster: ['redis://b:7000'] }, /exactly one.*got url and cluster/],
      [{ cluster: [] }, /`cluster` to be a non-empty array/],
      [{ cluster: ['redis://:hunter2@h:7000', 'rediss://h:7001'] }, /same scheme/],
      [{ cluster: ['redis://:hunter2@h:7000/3'] }, /only database 0/],
      [{ cluster: ['http://:hunter2@h:7000'] }, /`cluster` to start with redis:\/\//],
      [{ sentinels: [{ host: 'h', port: 26379 }] }, /`name`/],
      [{ sentinels: ['h:notaport'], name: 'm' }, /sentinels\[0\]/],
      [{ sentinels: [{ host: 'h', port: 0 }], name: 'm' }, /sentinels\[0\]\.port/],
      [{ url: 'redis://h', name: 'm' }, /`name` only with `sentinels`/],
      [{ url: 'redis://h', redisOptions: 'pw' }, /redisOptions/],
      [{ url: 'http://user:hunter2@host:6379' }, /redis:\/\/ or rediss:\/\//],
      [{ url: 'not a url :hunter2' }, /not shown/],
      [{ url: 'redis://h:1/abc' }, /database number/],
      [{ url: 'redis://h', prefix: '' }, /prefix/],
      [{ url: 'redis://h', prefix: 'a b' }, /prefix/],
      [{ url: 'redis://h', timeoutMs: 0 }, /timeoutMs/],
      [{ url: 'redis://h', syncMs: 'fast' }, /syncMs/],
      [{ url: 'redis://h', syncEvery: 1.5 }, /syncEvery/],
      [{ url: 'redis://h', leaseTokens: 0 }, /leaseTokens/],
      [{ url: 'redis://h', keyTtlMs: 5 }, /keyTtlMs/],
      [{ url: 'redis://h', onEvent: 'log' }, /onEvent/],
      [{ url: 'redis://h', clock: {} }, /clock/],
      [{ url: 'redis://h', timeout: 5 }, /Unknown option `timeout`/],
      [{ client: { pipeline: 1 } }, /ioredis client/],
      [{ client: new Redis({ lazyConnect: true }), redisOptions: {} }, /no `redisOptions` with `client`/],
    ];
    for (const [o, msg] of bad) {
      let err: unknown;
      try {
        createRedisFleet(o as RedisFleetOptions);
      } catch (e) {
        err = e;
      }
      expect(RelentError.is(err), String(msg)).toBe(true);
      expect((err as RelentError).code).toBe('ERR_INVALID_INPUT');
      expect((err as Error).message).toMatch(msg);
      expect((err as Error).message).not.toMatch(/hunter2/);
    }
  });

  it('an unreachable Redis: no throw, local mode said once with the reason, budgets and breakers work locally', async () => {
    const events: FleetEvent[] = [];
    const port = await freePort();
    const f = createRedisFleet({ url: `redis://:hunter2@127.0.0.1:${port}`, prefix: 'x:', reconnectMs: 20, onEvent: (e) => events.push(e) });
    open.push(f);
    expect(await f.ready(300)).toBe(false);
    const modes = events.filter((e) => e.type === 'fleet_mode');
    expect(modes).toHaveLength(1); // many reconnection attempts, one event
    expect(modes[0]).toMatchObject({ mode: 'local' });
    expect((modes[0] as { reason: string }).reason).toMatch(new RegExp(`ECONNREFUSED.*${port}|${port}.*ECONNREFUSED`));
    expect(JSON.stringify(events)).not.toMatch(/hunter2/);
    const budget = f.budget('api', { kind: 'ratio', minPerSecond: 0, maxTokens: 3 });
    expect([1, 2, 3, 4].map(() => budget.tryAcquire(RETRY, 0))).toEqual([1, 1, 1, false]);
    const breaker = f.breaker('api', { minimumThroughput: 2, openMs: 1000 });
    breaker.record('failure', 0);
    breaker.record('failure', 1);
    expect(breaker.tryPass(2)).toBe(false);
    const s = f.stats();
    expect(s).toMatchObject({ mode: 'local', connected: false });
    expect(s.lastError).toMatch(/ECONNREFUSED/);
    await f.close();
    expect(f.mode).toBe('local');
  });
});

describe.skipIf(!enabled)('shared budget (real Redis)', () => {
  it('two processes draw on one bucket: one budget, not two', async () => {
    const p = prefix('budget');
    const a = fleet({ prefix: p });
    const b = fleet({ prefix: p });
    expect(await a.ready()).toBe(true);
    expect(await b.ready()).toBe(true);
    const spec = { kind: 'ratio' as const, minPerSecond: 0, maxTokens: 10 };
    const got = await drain([a.budget('dep', spec), b.budget('dep', spec)], 300);
    // One bucket of 10, plus at most one lease (1 token) per process: each starts with its lease on credit.
    expect(got).toBeGreaterThanOrEqual(10);
    expect(got).toBeLessThanOrEqual(10 + 2);
    // Separate fleets (another prefix): two budgets.
    const q = prefix('budget-separate');
    const c = fleet({ prefix: q });
    const d = fleet({ prefix: `${q}other:` });
    await c.ready();
    await d.ready();
    expect(await drain([c.budget('dep', spec), d.budget('dep', spec)], 300)).toBeGreaterThanOrEqual(20);
  });

  it('deposits of one process pay for the retries of another; refill runs on Redis time', async () => {
    const p = prefix('deposit');
    const a = fleet({ prefix: p });
    const b = fleet({ prefix: p });
    await a.ready();
    await b.ready();
    const spec = { kind: 'ratio' as const, ratio: 0.5, minPerSecond: 0, maxTokens: 10 };
    const ba = a.budget('dep', spec);
    const bb = b.budget('dep', spec);
    await drain([ba, bb], 200);
    expect(await drain([ba, bb], 100)).toBe(0);
    // A serves 12 answers: 6 tokens, 1 kept in its lease, 5 handed to the bucket at its next sync.
    for (let i = 0; i < 12; i++)
      ba.observe({ attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 }, performance.now());
    expect(await drain([bb], 300)).toBe(5);
    expect(await drain([ba], 100)).toBe(1);
    expect(a.stats().budgets.dep).toMatchObject({ lease: 0, pending: 0 });
    // The floor: 20 tokens/s on Redis's clock.
    const c = fleet({ prefix: prefix('floor') });
    await c.ready();
    const bc = c.budget('dep', { kind: 'ratio', minPerSecond: 20, maxTokens: 2 });
    await drain([bc], 100);
    const refilled = await drain([bc], 500);
    expect(refilled).toBeGreaterThanOrEqual(6);
    expect(refilled).toBeLessThanOrEqual(14);
  });

  it('a client of your own: shared with a url fleet, not closed by close()', async () => {
    const p = prefix('client-option');
    const client = new Redis(REDIS_URL, { enableOfflineQueue: false });
    await new Promise<void>((r) => client.once('ready', () => r()));
    const before = client.listenerCount('error') + client.listenerCount('ready') + client.listenerCount('close');
    const a = createRedisFleet({ client, prefix: p, timeoutMs: 250, syncMs: 50 });
    const b = fleet({ prefix: p });
    try {
      expect(await a.ready()).toBe(true);
      expect(await b.ready()).toBe(true);
      const spec = { kind: 'ratio' as const, minPerSecond: 0, maxTokens: 6 };
      const got = await drain([a.budget('dep', spec), b.budget('dep', spec)], 300);
      expect(got).toBeGreaterThanOrEqual(6);
      expect(got).toBeLessThanOrEqual(6 + 2);
      await a.close();
      expect(client.status).toBe('ready');
      expect(await client.ping()).toBe('PONG');
      expect(client.listenerCount('error') + client.listenerCount('ready') + client.listenerCount('close')).toBe(before);
    } finally {
      client.disconnect();
    }
  });

  it('budget kinds other than ratio stay per process, said once', async () => {
    const events: FleetEvent[] = [];
    const f = fleet({ prefix: prefix('kinds'), onEvent: (e) => events.push(e) });
    const t = f.budget('grpc', { kind: 'throttle', maxTokens: 10, tokenRatio: 0.1 });
    expect(f.budget('grpc', { kind: 'throttle', maxTokens: 10, tokenRatio: 0.1 })).toBe(t);
    expect(events.filter((e) => e.type === 'fleet_budget_local')).toEqual([
      expect.objectContaining({ dependency: 'grpc', kind: 'throttle', reason: expect.stringMatching(/only ratio budgets are shared/) }),
    ]);
    expect(f.stats().budgets).toEqual({});
  });

  it('keys expire when unused', async () => {
    const p = prefix('ttl');
    const f = fleet({ prefix: p, keyTtlMs: 1000 });
    await f.ready();
    f.budget('dep', { kind: 'ratio', minPerSecond: 100, maxTokens: 10 });
    const br = f.breaker('dep', { minimumThroughput: 1, openMs: 100, windowMs: 1000 });
    br.record('failure', Date.now());
    await until(() => f.stats().breakers.dep?.state === 'open', 2000, 'the breaker to open');
    const r = new Redis(REDIS_URL);
    try {
      const keys = await r.keys(`${p}*`);
      expect(keys.sort()).toEqual([`${p}{dep}:breaker`, `${p}{dep}:budget`, `${p}{dep}:members`, `${p}{dep}:window`]);
      for (const k of keys) {
        const ttl = await r.pttl(k);
        expect(ttl, k).toBeGreaterThan(0);
        // An open state lives at least as long as two trial claims (10 s each); the members
        // as long as a process may go unseen (a few syncs and two connection timeouts); the
        // rest keyTtlMs or the window.
        expect(ttl, k).toBeLessThanOrEqual(k.endsWith(':breaker') ? 20_000 : k.endsWith(':members') ? 3 * 50 + 2 * 1000 : 1100);
      }
    } finally {
      r.disconnect();
    }
  });
});

describe.skipIf(!enabled)('shared breaker (real Redis)', () => {
  it('an open in one process is announced: the others open within one round trip', async () => {
    const p = prefix('open');
    const fleets = [0, 1, 2, 3].map(() => fleet({ prefix: p }));
    for (const f of fleets) expect(await f.ready()).toBe(true);
    const changes: (BreakerStateChange & { who: number; t: number })[] = [];
    const spec = { minimumThroughput: 5, failureRatio: 0.5, openMs: 60_000 };
    const breakers = fleets.map((f, who) => f.breaker('dep', spec, { onStateChange: (c) => changes.push({ ...c, who, t: performance.now() }) }));
    await sleep(100); // each has read the fleet's state
    for (let i = 0; i < 5; i++) breakers[0]!.record('failure', Date.now());
    const t0 = performance.now();
    expect(breakers[0]!.tryPass(Date.now())).toBe(false); // opened here at once, on its own evidence
    await until(() => breakers.every((b) => !b.tryPass(Date.now())), 1000, 'every process to open');
    const opens = changes.filter((c) => c.to === 'open');
    expect(opens.map((c) => c.who).sort()).toEqual([0, 1, 2, 3]);
    const rtt = Math.max(...fleets.map((f) => f.stats().rttMs.max ?? 0));
    for (const c of opens) expect(c.t - t0, `process ${c.who}`).toBeLessThan(Math.max(50, 3 * rtt));
  });

  it('the fleet window opens the circuit where no single process would', async () => {
    const p = prefix('window');
    const fleets = [0, 1, 2].map(() => fleet({ prefix: p, syncEvery: 2 }));
    for (const f of fleets) await f.ready();
    const spec = { minimumThroughput: 6, failureRatio: 0.5, openMs: 60_000 };
    const breakers = fleets.map((f) => f.breaker('dep', spec));
    await sleep(100);
    for (const b of breakers) {
      b.record('failure', Date.now());
      b.record('failure', Date.now()); // 2 failures each: below minimumThroughput alone, 6 together
    }
    await until(() => breakers.every((b) => b.state(Date.now()) === 'open'), 1000, 'the fleet to open');
    expect(Math.max(...breakers.map((b) => b.window(Date.now()).failures))).toBe(6);
    // Control: one process's breaker with the same spec and its 2 failures stays closed.
    const alone = createCircuitBreaker(spec);
    alone.record('failure', Date.now());
    alone.record('failure', Date.now());
    expect(alone.state(Date.now())).toBe('closed');
  });

  it('exactly one trial per half-open period in the whole fleet; its outcome decides for all', async () => {
    const p = prefix('trial');
    const fleets = [0, 1, 2, 3, 4].map(() => fleet({ prefix: p }));
    for (const f of fleets) await f.ready();
    const spec = { minimumThroughput: 1, openMs: 150 };
    const breakers = fleets.map((f) => f.breaker('dep', spec));
    await sleep(100);
    breakers[0]!.record('failure', Date.now());
    await until(() => breakers.every((b) => b.state(Date.now()) === 'open'), 1000, 'every process to open');
    let trials = 0;
    let trialAt = 0;
    const periods: number[] = [];
    // Every process calls every 2 ms for three periods; each trial fails.
    const end = Date.now() + 3 * 150 + 100;
    while (Date.now() < end) {
      for (const b of breakers) {
        if (b.tryPass(Date.now())) {
          trials++;
          periods.push(Date.now() - trialAt);
          trialAt = Date.now();
          b.record('failure', Date.now());
        }
      }
      await sleep(2);
    }
    expect(trials).toBeGreaterThanOrEqual(2);
    expect(trials).toBeLessThanOrEqual(4);
    for (const gap of periods.slice(1)) expect(gap).toBeGreaterThanOrEqual(150 - 5);
    // Now a trial succeeds: the whole fleet closes.
    let holder = -1;
    await until(() => (holder = breakers.findIndex((b) => b.tryPass(Date.now()))) >= 0, 2000, 'a trial');
    breakers[holder]!.record('success', Date.now());
    await until(() => breakers.every((b) => b.state(Date.now()) === 'closed'), 1000, 'every process to close');
  });
});

describe.skipIf(!canSpawn)('Redis away (own redis-server)', () => {
  it('killed: every process falls back at once to its share of the budget, said once; back: it rejoins within a second', async () => {
    const server = await ownRedis();
    const events: { who: number; e: FleetEvent; t: number }[] = [];
    const fleets = [0, 1, 2].map((who) => {
      const f = createRedisFleet({ url: server.url, prefix: 'kill:', timeoutMs: 250, syncMs: 50, onEvent: (e) => events.push({ who, e, t: Date.now() }) });
      open.push(f);
      return f;
    });
    try {
      for (const f of fleets) expect(await f.ready()).toBe(true);
      const spec = { kind: 'ratio' as const, minPerSecond: 0, maxTokens: 6 };
      const budgets = fleets.map((f) => f.budget('dep', spec));
      // Each has visited: its lease (1, on credit) paid, and three processes counted.
      await until(() => fleets.every((f) => f.stats().budgets.dep?.processes === 3 && f.stats().budgets.dep?.pending === 0), 2000, 'three members');
      const seen = fleets.map((f) => f.stats().budgets.dep!);
      await server.stop();
      await until(() => fleets.every((f) => f.mode === 'local'), 2000, 'local mode');
      // Locally each process spends what its lease holds, and a third of the floor (none
      // here): together at most one budget of 6 (3 in Redis + 3 leases), not three (18).
      const local = budgets.map((b) => {
        let n = 0;
        while (b.tryAcquire(RETRY, performance.now()) !== false) n++;
        return n;
      });
      expect(local).toEqual(seen.map((b) => Math.floor(b.lease)));
      expect(local).toEqual([1, 1, 1]);
      expect(fleets[0]!.stats().budgets.dep).toMatchObject({ mode: 'local', processes: 3 });
      await sleep(700); // reconnection attempts go on
      const t = Date.now();
      await server.start();
      await until(() => fleets.every((f) => f.mode === 'fleet'), 3000, 'rejoin');
      const rejoined = events.filter((x) => x.e.type === 'fleet_mode' && x.e.mode === 'fleet' && x.t >= t);
      expect(rejoined).toHaveLength(3);
      for (const x of rejoined) expect(x.t - t).toBeLessThan(1000);
      for (let who = 0; who < 3; who++) {
        // joined, fell back once, joined again: three events, however many reconnection attempts failed
        expect(events.filter((x) => x.who === who && x.e.type === 'fleet_mode').map((x) => (x.e as { mode: string }).mode)).toEqual([
          'fleet',
          'local',
          'fleet',
        ]);
        expect(fleets[who]!.stats()).toMatchObject({ fallbacks: 1, rejoins: 1 });
      }
      // The new (empty) Redis starts a fresh bucket of 6: the fleet has it, as a new fleet would.
      expect(await drain(budgets, 300)).toBe(6);
    } finally {
      await Promise.all(fleets.map((f) => f.close()));
      await server.stop();
    }
  });

  it('stalled (no answer, connection open): local after timeoutMs, calls never wait; rejoins when it answers', async () => {
    const server = await ownRedis();
    const events: FleetEvent[] = [];
    const f = createRedisFleet({ url: server.url, prefix: 'stall:', timeoutMs: 20, syncMs: 30, reconnectMs: 50, onEvent: (e) => events.push(e) });
    open.push(f);
    try {
      expect(await f.ready(3000)).toBe(true);
      const budget = f.budget('dep', { kind: 'ratio', minPerSecond: 0, maxTokens: 50 });
      const breaker = f.breaker('dep', { minimumThroughput: 1000 });
      await sleep(100);
      server.pause();
      // Calls go on, answered from this process's state, while syncs time out.
      const slowest = { ms: 0 };
      const end = Date.now() + 300;
      let calls = 0;
      while (Date.now() < end) {
        const t0 = performance.now();
        budget.tryAcquire(RETRY, t0);
        budget.observe({ attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 }, t0);
        breaker.tryPass(Date.now());
        breaker.record('success', Date.now());
        slowest.ms = Math.max(slowest.ms, performance.now() - t0);
        calls++;
        await sleep(1);
      }
      expect(calls).toBeGreaterThan(50);
      expect(slowest.ms).toBeLessThan(20);
      expect(f.mode).toBe('local');
      expect(f.stats().syncFailures).toBeGreaterThanOrEqual(1);
      // Three syncs in a row failed (deadlines 20, 40, 80 ms: doubled after each failure).
      expect(events.filter((e) => e.type === 'fleet_mode').map((e) => (e as { reason: string | null }).reason)).toEqual([
        null,
        expect.stringMatching(/did not answer within 80 ms/),
      ]);
      server.resume();
      await until(() => f.mode === 'fleet', 2000, 'rejoin after the stall');
    } finally {
      server.resume();
      await f.close();
      await server.stop();
    }
  });

  it('a wrong password: local, with the reason, never the password; the right one joins', async () => {
    const server = await ownRedis(['--requirepass', 's3cr3t-pw']);
    const events: FleetEvent[] = [];
    const bad = createRedisFleet({ url: `redis://:wrong-pw-123@127.0.0.1:${server.port}`, prefix: 'auth:', reconnectMs: 50, onEvent: (e) => events.push(e) });
    const none = createRedisFleet({ url: `redis://127.0.0.1:${server.port}`, prefix: 'auth:', reconnectMs: 50 });
    const good = createRedisFleet({ url: `redis://:s3cr3t-pw@127.0.0.1:${server.port}`, prefix: 'auth:' });
    open.push(bad, none, good);
    try {
      expect(await good.ready(3000)).toBe(true);
      expect(await bad.ready(500)).toBe(false);
      expect(await none.ready(300)).toBe(false);
      const modes = events.filter((e) => e.type === 'fleet_mode');
      expect(modes).toHaveLength(1);
      expect((modes[0] as { reason: string }).reason).toMatch(/WRONGPASS|invalid password|invalid username-password/i);
      expect(JSON.stringify([events, bad.stats()])).not.toMatch(/wrong-pw-123/);
      expect(none.stats().lastError).toMatch(/NOAUTH|Authentication required/i);
      const b = bad.budget('dep', { kind: 'ratio', minPerSecond: 0, maxTokens: 2 });
      expect([b.tryAcquire(RETRY, 0), b.tryAcquire(RETRY, 0), b.tryAcquire(RETRY, 0)]).toEqual([1, 1, false]);
    } finally {
      await Promise.all([bad.close(), none.close(), good.close()]);
      await server.stop();
    }
  });
});

describe.skipIf(!enabled)('drivers take a fleet', () => {
  let server: Server;
  let status = 503;
  let hits = 0;
  const url = async (): Promise<string> => {
    server ??= createServer((_req, res) => {
      hits++;
      res.statusCode = status;
      res.end('x');
    });
    if (!server.listening) await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  };
  afterAll(() => server?.close());

  it('createClient({ fleet }): two clients in two processes share one budget per origin', async () => {
    const base = await url();
    const policy = { maxAttempts: 4, backoff: { kind: 'constant', delayMs: 1 }, budget: { kind: 'ratio', minPerSecond: 0, maxTokens: 6 } } as const;
    /** Retries two clients send to a dependency that fails everything, with fleets on these prefixes. */
    const retries = async (pa: string, pb: string): Promise<number> => {
      const fa = fleet({ prefix: pa });
      const fb = fleet({ prefix: pb });
      await fa.ready();
      await fb.ready();
      const ca = createClient({ fleet: fa, policy });
      const cb = createClient({ fleet: fb, policy });
      try {
        status = 200; // both have called the dependency before (their leases are paid for)
        await Promise.all([ca.fetch(`${base}/warm`).then((r) => r.text()), cb.fetch(`${base}/warm`).then((r) => r.text())]);
        await sleep(100);
        status = 503;
        hits = 0;
        let ops = 0;
        for (let i = 0; i < 15; i++) {
          await Promise.all([ca.fetch(`${base}/a`).then((r) => r.text()), cb.fetch(`${base}/b`).then((r) => r.text())]);
          ops += 2;
          await sleep(10);
        }
        expect(ca.budgets.get(base)).toBe(fa.budget(base, policy.budget));
        return hits - ops;
      } finally {
        await ca.close();
        await cb.close();
      }
    };
    const p = prefix('client');
    const shared = await retries(p, p);
    const separate = await retries(prefix('client-a'), prefix('client-b'));
    // One bucket of 6 (+0.2 deposited by the warm-up) plus a lease of 1 each; separately, two buckets.
    expect(shared).toBeGreaterThanOrEqual(5);
    expect(shared).toBeLessThanOrEqual(6 + 2);
    expect(separate).toBeGreaterThanOrEqual(11);
  });

  it('relentInterceptor({ fleet, breaker }): an open in one process refuses in the other', async () => {
    const base = await url();
    status = 503;
    const p = prefix('interceptor');
    const fa = fleet({ prefix: p });
    const fb = fleet({ prefix: p });
    await fa.ready();
    await fb.ready();
    const breaker = { minimumThroughput: 3, openMs: 60_000 };
    const ia = new Agent().compose(relentInterceptor({ fleet: fa, breaker, policy: { maxAttempts: 1 } }));
    const ib = new Agent().compose(relentInterceptor({ fleet: fb, breaker, policy: { maxAttempts: 1 } }));
    try {
      status = 200;
      await (await request(`${base}/warm`, { dispatcher: ib })).body.text(); // B has called the dependency before
      await sleep(100);
      status = 503;
      for (let i = 0; i < 3; i++) await (await request(`${base}/x`, { dispatcher: ia })).body.text();
      await until(() => fb.stats().breakers[base]?.state === 'open', 1000, 'the other process to open');
      hits = 0;
      const err = await request(`${base}/x`, { dispatcher: ib }).then(
        () => null,
        (e: unknown) => e,
      );
      expect((err as RelentError).code).toBe('ERR_CIRCUIT_OPEN');
      expect(hits).toBe(0);
    } finally {
      await ia.close();
      await ib.close();
    }
  });

  it('run({ fleet, dependency }): the fleet budget and breaker of the dependency', async () => {
    const p = prefix('run');
    const fa = fleet({ prefix: p });
    const fb = fleet({ prefix: p });
    await fa.ready();
    await fb.ready();
    const policy = { maxAttempts: 5, backoff: { kind: 'constant', delayMs: 1 }, budget: { kind: 'ratio', minPerSecond: 0, maxTokens: 3 } } as const;
    // The dependency's whole budget is spent (this process's lease included).
    await drain([fa.budget('payments', policy.budget), fb.budget('payments', policy.budget)], 200);
    let calls = 0;
    const fail = async () => {
      calls++;
      return { status: 503 };
    };
    const r = await run(fail, { fleet: fa, dependency: 'payments', policy });
    expect(r).toEqual({ status: 503 });
    expect(calls).toBe(1); // no token left in the fleet: no retry
    calls = 0;
    await run(fail, { fleet: fa, dependency: 'other', policy });
    expect(calls).toBeGreaterThan(1);
    // A breaker spec (or true) → the fleet's breaker of the dependency.
    const spec = { minimumThroughput: 1, openMs: 60_000 };
    fa.breaker('payments', spec);
    const b = fb.breaker('payments', spec);
    await sleep(100);
    b.record('failure', Date.now());
    await until(() => fa.stats().breakers.payments?.state === 'open', 1000, 'the open to reach the other process');
    const err = await run(fail, { fleet: fa, dependency: 'payments', policy, breaker: { minimumThroughput: 1, openMs: 60_000 } }).then(
      () => null,
      (e: unknown) => e,
    );
    expect((err as RelentError).code).toBe('ERR_CIRCUIT_OPEN');
    await expect(run(fail, { breaker: true })).rejects.toMatchObject({ code: 'ERR_INVALID_INPUT', field: 'breaker' });
    await expect(run(fail, { fleet: fa, policy })).rejects.toMatchObject({ code: 'ERR_INVALID_INPUT', field: 'dependency' });
  });
});
