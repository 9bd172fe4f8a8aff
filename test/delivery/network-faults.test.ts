// The worker and the stores when the store is slow or out of reach (issue 20, items 6 and 7).
//
// 1. The worker's bookkeeping is keyed by claim: a store stall longer than the lease makes
//    the worker claim its own batches again; the late outcome of the old claim must not
//    cancel the new one, nothing is sent twice, and stop() gives every lease back. A rule
//    of the worker, so on a test clock: a real SQLite store whose outcome writes fail for a
//    while (what a store out of reach does to them), and an in-process destination.
// 2. PostgreSQL behind the fault proxy (relent/testing/proxy): a partition gives
//    store_error events (query timeouts), and after the heal the worker delivers again
//    although the connections that were stalled stay stalled (TCP has not retransmitted yet).
// 3. SQLite whose store process is frozen (SIGSTOP: what a disk that stops answering does):
//    store_error events while it is, and work resumes as soon as it answers.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { openStore } from '../../src/delivery/store.js';
import { createWorker, type DeliveryEvent } from '../../src/delivery/worker.js';
import { DeliveryError } from '../../src/delivery/errors.js';
import type { DeliveryStore } from '../../src/delivery/types.js';
import type { DeliveryRequest, TransportResult } from '../../src/delivery/transport.js';
import { createSeededRandom, createTestClock } from '../../src/testing/index.js';
import { createFaultProxy } from '../../src/testing/proxy.js';
import { openPostgresStore } from '../../src/delivery/postgres-store.js';
import { PG_URL, distSqlite, dropSchema, listen, pgEnabled, uniqueSchema, waitFor } from './support.js';

/** A real store whose outcome writes and lease renewals fail while `down` (the store out of reach for them). */
function withFailingWrites(store: DeliveryStore): { store: DeliveryStore; down: { on: boolean }; calls: string[] } {
  const down = { on: false };
  const calls: string[] = [];
  const unreachable = (what: string): Promise<never> =>
    Promise.reject(new DeliveryError('ERR_STORE_UNAVAILABLE', `${store.description}: cannot reach the store (test); ${what} did not happen`));
  const wrapped = new Proxy(store, {
    get(target, key, receiver) {
      const v = Reflect.get(target, key, receiver) as unknown;
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        calls.push(String(key));
        if (down.on && (key === 'complete' || key === 'renew' || key === 'release')) return unreachable(String(key));
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { store: wrapped, down, calls };
}

describe('a store stall longer than the lease (bookkeeping by claim)', () => {
  async function scenario() {
    const clock = createTestClock();
    const real = await openStore('sqlite::memory:');
    const { store, down } = withFailingWrites(real);
    const sends = new Map<string, number>();
    const events: DeliveryEvent[] = [];
    // The first request of a batch is answered 200 at once; a second one (the bug) hangs until it is aborted.
    const transport = async (req: DeliveryRequest): Promise<TransportResult> => {
      const n = (sends.get(req.batchKey) ?? 0) + 1;
      sends.set(req.batchKey, n);
      if (n === 1) return { status: 200 };
      return new Promise<TransportResult>((_r, reject) => req.signal.addEventListener('abort', () => reject(req.signal.reason)));
    };
    const worker = createWorker({
      store,
      clock,
      random: createSeededRandom(1),
      transport,
      leaseMs: 10_000,
      pollMs: 500,
      onEvent: (e) => events.push(e),
      destinations: { d: { url: 'https://receiver.example/in', batch: { maxItems: 1, maxAgeMs: 0 }, concurrency: { initial: 4, adaptive: false } } },
    });
    await real.enqueue(
      [0, 1, 2].map((i) => ({ destination: 'd', key: `k${i}`, payload: String(i) })),
      clock.wallNow(),
    );
    down.on = true;
    worker.start();
    await clock.advanceAsync(100); // claimed, sent, answered 200; the outcomes cannot be written
    expect([...sends.values()]).toEqual([1, 1, 1]);
    expect(events.some((e) => e.type === 'store_error' && e.during === 'recording outcomes')).toBe(true);
    // The lease runs out while the outcomes wait; claims still work, so the worker finds its own batches due again.
    for (let t = 0; t < 24; t++) await clock.advanceAsync(500);
    return { clock, real, store, down, sends, events, worker };
  }

  it('the worker claims its own batches again: it sends none of them twice, and the outcomes are written under the new claim', async () => {
    const { clock, real, down, sends, events, worker } = await scenario();
    down.on = false;
    for (let t = 0; t < 40; t++) await clock.advanceAsync(500);
    expect([...sends.entries()].filter(([, n]) => n > 1)).toEqual([]);
    const list = await real.list({}, clock.wallNow());
    expect(list.map((b) => b.state)).toEqual(['delivered', 'delivered', 'delivered']);
    expect(list.every((b) => b.leaseOwner === null)).toBe(true);
    expect(events.filter((e) => e.type === 'lease_lost')).toEqual([]);
    expect(worker.counters()).toMatchObject({ deliveredBatches: 3, leaseLost: 0 });
    await worker.stop();
    await real.close();
  });

  it("the fence refuses the old claim's outcome before the answer of the claim that took the batch back arrives: written again under the new claim, not sent again", async () => {
    const clock = createTestClock();
    const real = await openStore('sqlite::memory:');
    const { store, down } = withFailingWrites(real);
    // Claims made from 10 s on (when the lease has run out) happen in the store at once; their answers wait for the gate.
    let gate: () => void = () => {};
    const opened = new Promise<void>((r) => (gate = r));
    const late = new Proxy(store, {
      get(target, key, receiver) {
        const v = Reflect.get(target, key, receiver) as unknown;
        if (typeof v !== 'function' || !['claim', 'claimThenForm', 'formAndClaim', 'claimLimited'].includes(String(key))) return v;
        return async (...args: unknown[]) => {
          const answer = await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          if (clock.now() >= 10_000) await opened;
          return answer;
        };
      },
    });
    const sends = new Map<string, number>();
    const events: DeliveryEvent[] = [];
    const worker = createWorker({
      store: late,
      clock,
      random: createSeededRandom(1),
      leaseMs: 10_000,
      pollMs: 500,
      onEvent: (e) => events.push(e),
      transport: async (req) => {
        const n = (sends.get(req.batchKey) ?? 0) + 1;
        sends.set(req.batchKey, n);
        if (n === 1) return { status: 200 };
        return new Promise<TransportResult>((_r, reject) => req.signal.addEventListener('abort', () => reject(req.signal.reason)));
      },
      destinations: { d: { url: 'https://receiver.example/in', batch: { maxItems: 1, maxAgeMs: 0 } } },
    });
    await real.enqueue([{ destination: 'd', key: 'k', payload: '{}' }], clock.wallNow());
    down.on = true;
    worker.start();
    for (let t = 0; t < 22; t++) await clock.advanceAsync(500); // the lease ran out at 10 s; a claim took the batch back
    expect((await real.list({}, clock.wallNow()))[0]).toMatchObject({ state: 'queued', claims: 2 });
    down.on = false;
    for (let t = 0; t < 8; t++) await clock.advanceAsync(500); // the old claim's outcome is refused meanwhile
    gate();
    for (let t = 0; t < 8; t++) await clock.advanceAsync(500);
    expect([...sends.values()]).toEqual([1]);
    expect((await real.list({}, clock.wallNow()))[0]).toMatchObject({ state: 'delivered', leaseOwner: null });
    expect(events.filter((e) => e.type === 'lease_lost')).toEqual([]);
    await worker.stop();
    await real.close();
  });

  it('stop() in that window records what was delivered and leaves no batch leased', async () => {
    const { clock, real, down, worker } = await scenario();
    down.on = false;
    await clock.advanceAsync(1_000); // the outcomes waiting are written
    const stopping = worker.stop();
    for (let t = 0; t < 25; t++) await clock.advanceAsync(500); // stopTimeoutMs (10 s) for requests in flight
    await stopping;
    const now = clock.wallNow();
    const list = await real.list({}, now);
    expect(list.filter((b) => b.state === 'queued' && b.leaseUntil > now)).toEqual([]);
    expect(list.map((b) => b.state)).toEqual(['delivered', 'delivered', 'delivered']);
    await real.close();
  });
});

describe('PostgreSQL behind a partition (the fault proxy)', async () => {
  const pgOn = await pgEnabled();
  const pgTarget = (): string => {
    const u = new URL(PG_URL);
    return `${u.hostname}:${u.port || 5432}`;
  };

  it.runIf(pgOn)(
    'store_error while the store is unreachable; after the heal the worker delivers again, though the stalled connections stay stalled; stop() leaves nothing leased',
    async () => {
      const schema = uniqueSchema('nf');
      const direct = await openPostgresStore({ connectionString: PG_URL, schema });
      // The proxy's own clock never moves: bytes a partition held stay held after the heal, as
      // a TCP connection in retransmission backoff is stalled for seconds more.
      const proxy = await createFaultProxy({ target: pgTarget(), clock: createTestClock() });
      const store = await openPostgresStore({
        connectionString: proxy.via(PG_URL),
        schema,
        queryTimeoutMs: 500,
        statementTimeoutMs: 400,
        connectTimeoutMs: 500,
      });
      const got = new Map<string, number>();
      const rx = await listen((req, res) => {
        let body = '';
        req.on('data', (d: Buffer) => (body += d));
        req.on('end', () => {
          for (const it of (JSON.parse(body) as { items: { key: string }[] }).items) got.set(it.key, (got.get(it.key) ?? 0) + 1);
          res.end('ok');
        });
      });
      const events: DeliveryEvent[] = [];
      const worker = createWorker({
        store,
        pollMs: 50,
        leaseMs: 5_000,
        onEvent: (e) => events.push(e),
        destinations: { d: { url: `${rx.url}/in`, batch: { maxItems: 1, maxAgeMs: 0 }, concurrency: { initial: 2, adaptive: false } } },
      });
      const enqueue = (from: number): Promise<unknown> =>
        direct.enqueue(
          [0, 1, 2].map((i) => ({ destination: 'd', key: `k${from + i}`, payload: '{}' })),
          Date.now(),
        );
      try {
        await enqueue(0);
        worker.start();
        await waitFor(() => got.size === 3, 10_000, 'the first three delivered');
        proxy.set({ blackhole: true });
        await enqueue(3);
        await waitFor(
          () => events.some((e) => e.type === 'store_error' && e.error.code === 'ERR_STORE_UNAVAILABLE'),
          10_000,
          'a store_error while partitioned',
        );
        const err = events.find((e) => e.type === 'store_error')! as Extract<DeliveryEvent, { type: 'store_error' }>;
        expect(err.error.message).toMatch(/PostgreSQL/);
        expect(err.error.message).not.toMatch(/password/);
        proxy.set({ blackhole: false });
        await waitFor(() => got.size === 6, 15_000, 'the other three delivered after the heal');
        await worker.stop();
        const now = Date.now();
        const list = await direct.list({}, now);
        expect(list.map((b) => b.state)).toEqual(Array(6).fill('delivered'));
        expect(list.filter((b) => b.leaseUntil > now)).toEqual([]);
      } finally {
        await worker.stop();
        await store.close();
        await proxy.close();
        await rx.close();
        await direct.close();
        await dropSchema(schema);
      }
    },
    60_000,
  );
});

describe('SQLite whose store process stops answering (SIGSTOP: a disk that does not come back from a write)', () => {
  it('store_error every storeTimeoutMs while it is frozen; the late answer is used and work goes on', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'relent-frozen-'));
    const store = await (await distSqlite()).openSqliteStore({ file: join(dir, 'q.db') });
    const runner = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(process.pid)], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.includes('sqlite-runner'))
      .map((l) => Number(l.trim().split(/\s+/)[0]));
    expect(runner).toHaveLength(1);
    const pid = runner[0]!;
    const sent = new Map<string, number>();
    const events: DeliveryEvent[] = [];
    const worker = createWorker({
      store,
      pollMs: 50,
      leaseMs: 10_000,
      storeTimeoutMs: 300,
      onEvent: (e) => events.push(e),
      transport: async (req) => {
        sent.set(req.batchKey, (sent.get(req.batchKey) ?? 0) + 1);
        return { status: 200 };
      },
      destinations: { d: { url: 'https://receiver.example/in', batch: { maxItems: 1, maxAgeMs: 0 } } },
    });
    const enqueue = (from: number): Promise<unknown> =>
      store.enqueue(
        [0, 1, 2].map((i) => ({ destination: 'd', key: `k${from + i}`, payload: '{}' })),
        Date.now(),
      );
    let frozen = false;
    try {
      await enqueue(0);
      worker.start();
      await waitFor(() => sent.size === 3, 10_000, 'three delivered');
      process.kill(pid, 'SIGSTOP');
      frozen = true;
      await waitFor(() => events.filter((e) => e.type === 'store_error').length >= 2, 10_000, 'store_error events while frozen');
      const errs = events.filter((e): e is Extract<DeliveryEvent, { type: 'store_error' }> => e.type === 'store_error');
      expect(errs[0]!.error.code).toBe('ERR_STORE_UNAVAILABLE');
      expect(errs[0]!.error.message).toMatch(/no answer from the store for \d+\.\d s \(storeTimeoutMs 300/);
      process.kill(pid, 'SIGCONT');
      frozen = false;
      await enqueue(3);
      await waitFor(() => sent.size === 6, 10_000, 'three more delivered after it answers again');
      await worker.stop();
      const now = Date.now();
      const list = await store.list({}, now);
      expect(list.map((b) => b.state)).toEqual(Array(6).fill('delivered'));
      expect([...sent.values()].every((n) => n === 1)).toBe(true);
    } finally {
      if (frozen) process.kill(pid, 'SIGCONT');
      await worker.stop();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe('PostgreSQL: timeouts and keepalive, as options', async () => {
  const pgOn = await pgEnabled();
  const pgTarget = (): string => {
    const u = new URL(PG_URL);
    return `${u.hostname}:${u.port || 5432}`;
  };

  it('refuses a bad timeout naming it, in the options and in the store URL', async () => {
    await expect(openPostgresStore({ connectionString: PG_URL, queryTimeoutMs: -1 })).rejects.toMatchObject({
      code: 'ERR_INVALID_CONFIG',
      field: 'queryTimeoutMs',
    });
    await expect(openPostgresStore({ connectionString: PG_URL, statementTimeoutMs: 1.5 })).rejects.toMatchObject({
      code: 'ERR_INVALID_CONFIG',
      field: 'statementTimeoutMs',
    });
    await expect(openStore(`${PG_URL}?keepAliveMs=soon`)).rejects.toMatchObject({ code: 'ERR_INVALID_CONFIG', field: 'store.keepAliveMs' });
  });

  it.runIf(pgOn)("statementTimeoutMs: a claim stuck behind another session's lock is cancelled by the server and reported, and the store goes on", async () => {
    const schema = uniqueSchema('st');
    const store = await openStore(`${PG_URL}?schema=${schema}&statementTimeoutMs=300&queryTimeoutMs=2000`);
    const locker = new pg.Client({ connectionString: PG_URL });
    await locker.connect();
    try {
      await store.setPaused('d', false, Date.now());
      await store.claimLimited('d', 1, { rate: null, concurrency: 1 }, Date.now(), 1_000, 'w'); // makes the destination's row
      await locker.query('BEGIN');
      await locker.query(`SELECT * FROM "${schema}".relent_destinations WHERE destination = 'd' FOR UPDATE`);
      const err = await store.claimLimited('d', 1, { rate: null, concurrency: 1 }, Date.now(), 1_000, 'w').catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'ERR_STORE' });
      expect((err as Error).message).toMatch(/statement_timeout \(statementTimeoutMs/);
      await locker.query('ROLLBACK');
      await expect(store.claimLimited('d', 1, { rate: null, concurrency: 1 }, Date.now(), 1_000, 'w')).resolves.toMatchObject({ claimed: [] });
    } finally {
      await locker.end();
      await store.close();
      await dropSchema(schema);
    }
  });

  it.runIf(pgOn)('keepAliveMs: every connection of the store has TCP keepalive on (seen by ss); 0 turns it off', async () => {
    for (const keepAliveMs of [10_000, 0]) {
      const schema = uniqueSchema('ka');
      const proxy = await createFaultProxy({ target: pgTarget() });
      const store = await openPostgresStore({ connectionString: proxy.via(PG_URL), schema, keepAliveMs });
      try {
        await store.stats(Date.now());
        await store.complete([
          {
            id: 1,
            token: 1,
            state: 'delivered',
            notBefore: 0,
            attempt: 1,
            opStartedAt: null,
            opDeadlineAt: null,
            prevDelayMs: null,
            opThrottled: 0,
            lastStatus: 200,
            lastErrorClass: null,
            lastDecision: 'return',
            lastWhy: null,
            finishedAt: 0,
            record: null,
          },
        ]);
        const lines = execFileSync('ss', ['-tno', 'state', 'established', `( dport = :${proxy.port} )`], { encoding: 'utf8' })
          .split('\n')
          .filter((l) => l.includes(`:${proxy.port}`));
        expect(lines.length).toBeGreaterThanOrEqual(2); // the pool's and the outcome writer's
        for (const l of lines) expect(l.includes('keepalive'), l).toBe(keepAliveMs > 0);
      } finally {
        await store.close();
        await proxy.close();
        await dropSchema(schema);
      }
    }
  });
});

describe('an outcome written again by the same claim (its first answer was lost with a connection) is applied, not lost', async () => {
  const pgOn = await pgEnabled();
  for (const kind of ['sqlite', 'postgres'] as const) {
    it.runIf(kind === 'sqlite' || pgOn)(kind, async () => {
      const schema = uniqueSchema('again');
      const store = kind === 'sqlite' ? await openStore('sqlite::memory:') : await openPostgresStore({ connectionString: PG_URL, schema });
      try {
        await store.enqueue([{ destination: 'd', key: 'a', payload: '{}' }], 0);
        await store.formBatches('d', { maxItems: 1, maxBytes: 1_000, maxAgeMs: 0 }, 0, 10);
        const [b] = await store.claim('d', 1, 0, 10_000, 'w');
        const outcome = {
          id: b!.id,
          token: b!.token,
          state: 'delivered' as const,
          notBefore: 0,
          attempt: 1,
          opStartedAt: 0,
          opDeadlineAt: 1_000,
          prevDelayMs: null,
          opThrottled: 0,
          lastStatus: 200,
          lastErrorClass: null,
          lastDecision: 'return' as const,
          lastWhy: null,
          finishedAt: 5,
          record: null,
        };
        expect(await store.complete([outcome])).toEqual({ applied: [b!.id], lost: [] });
        expect(await store.complete([outcome])).toEqual({ applied: [b!.id], lost: [] });
        // Another claim's token is still refused.
        expect(await store.complete([{ ...outcome, token: b!.token - 1 }])).toEqual({ applied: [], lost: [b!.id] });
        expect((await store.stats(0))[0]).toMatchObject({ deliveredBatches: 1, inflightBatches: 0, readyBatches: 0 });
      } finally {
        await store.close();
        if (kind === 'postgres') await dropSchema(schema);
      }
    });
  }
});

describe('a claim whose answer is lost (the store leased batches to this worker, the worker never heard)', async () => {
  const pgOn = await pgEnabled();
  for (const kind of ['sqlite', 'postgres'] as const) {
    it.runIf(kind === 'sqlite' || pgOn)(`${kind}: reclaim() hands back the live leases of an owner that it does not know of, tokens unchanged`, async () => {
      const schema = uniqueSchema('rc');
      const store = kind === 'sqlite' ? await openStore('sqlite::memory:') : await openPostgresStore({ connectionString: PG_URL, schema });
      try {
        await store.enqueue(
          ['a', 'b', 'c'].map((k) => ({ destination: 'd', key: k, payload: '{}' })),
          0,
        );
        await store.formBatches('d', { maxItems: 1, maxBytes: 1_000, maxAgeMs: 0 }, 0, 10);
        const mine = await store.claim('d', 2, 0, 10_000, 'w');
        await store.claim('d', 1, 0, 10_000, 'other');
        // Knowing the first under its token: only the second comes back, extended, same token.
        const back = await store.reclaim!('d', 'w', [{ id: mine[0]!.id, token: mine[0]!.token }], 5_000, 10_000);
        expect(back.map((b) => [b.id, b.token, b.items.length])).toEqual([[mine[1]!.id, mine[1]!.token, 1]]);
        expect((await store.list({}, 0)).find((b) => b.id === mine[1]!.id)!.leaseUntil).toBe(15_000);
        // Knowing it under an older token: it comes back too. Expired leases do not (a claim takes them).
        expect((await store.reclaim!('d', 'w', [{ id: mine[0]!.id, token: mine[0]!.token - 1 }], 5_000, 10_000)).map((b) => b.id).sort()).toEqual(
          mine.map((b) => b.id).sort(),
        );
        expect(await store.reclaim!('d', 'w', [], 20_000, 10_000)).toEqual([]);
      } finally {
        await store.close();
        if (kind === 'postgres') await dropSchema(schema);
      }
    });
  }

  it('the worker takes in what that claim leased to it at its next claim, instead of a lease later', async () => {
    const clock = createTestClock();
    const real = await openStore('sqlite::memory:');
    let lose = true;
    // The first claim happens in the store, and its answer is lost.
    const store = new Proxy(real, {
      get(target, key, receiver) {
        const v = Reflect.get(target, key, receiver) as unknown;
        if (typeof v !== 'function' || !['claim', 'claimThenForm', 'formAndClaim'].includes(String(key))) return v;
        return async (...args: unknown[]) => {
          const answer = await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          if (lose && (answer as { claimed?: unknown[] }).claimed?.length) {
            lose = false;
            throw new DeliveryError('ERR_STORE_UNAVAILABLE', 'no answer within 3000 ms (test)');
          }
          return answer;
        };
      },
    });
    const sends: string[] = [];
    const worker = createWorker({
      store,
      clock,
      random: createSeededRandom(1),
      leaseMs: 60_000,
      pollMs: 500,
      transport: async (req) => {
        sends.push(req.batchKey);
        return { status: 200 };
      },
      destinations: { d: { url: 'https://receiver.example/in', batch: { maxItems: 1, maxAgeMs: 0 } } },
    });
    await real.enqueue([{ destination: 'd', key: 'k', payload: '{}' }], clock.wallNow());
    worker.start();
    for (let t = 0; t < 10; t++) await clock.advanceAsync(500);
    expect(lose).toBe(false);
    expect(sends).toHaveLength(1);
    expect((await real.list({}, clock.wallNow()))[0]).toMatchObject({ state: 'delivered', claims: 1 });
    await worker.stop();
    await real.close();
  });
});
