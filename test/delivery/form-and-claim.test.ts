// Both stores seal new batches and lease them in the same write (formAndClaim); PostgreSQL
// with one item per batch in a single statement whose batch key it computes, otherwise in
// one transaction. What it hands out must be what formBatches + claim would have: the
// same keys, items, leases and counters; nothing for a paused destination; fenced writes.
import { afterAll, describe, expect, it } from 'vitest';
import { batchKey } from '../../src/delivery/batching.js';
import { openStore } from '../../src/delivery/store.js';
import type { ClaimedBatch, DeliveryStore, Outcome } from '../../src/delivery/types.js';
import { createTestClock } from '../../src/testing/index.js';
import { PG_URL, pgEnabled, postgresFactory, sqliteFactory, sqliteThreadFactory, type StoreFactory } from './support.js';

const withPg = await pgEnabled();
const factories: StoreFactory[] = [sqliteFactory(), sqliteThreadFactory()];
if (withPg) factories.push(postgresFactory());
afterAll(async () => {
  for (const f of factories) await f.cleanup();
});

const LEASE = 10_000;
const ONE = { maxItems: 1, maxBytes: 1_000_000, maxAgeMs: 60_000 };

function items(dest: string, keys: string[]) {
  return keys.map((key, i) => ({ destination: dest, key, payload: JSON.stringify({ n: i }) }));
}

function delivered(b: ClaimedBatch, at: number): Outcome {
  return {
    id: b.id,
    token: b.token,
    state: 'delivered',
    notBefore: at,
    attempt: 1,
    opStartedAt: at,
    opDeadlineAt: at + 60_000,
    prevDelayMs: null,
    opThrottled: 0,
    lastStatus: 200,
    lastErrorClass: null,
    lastDecision: 'return',
    lastWhy: 'success',
    finishedAt: at,
    record: {
      round: 1,
      attempt: 1,
      at,
      status: 200,
      errorClass: null,
      elapsedMs: 3,
      decision: 'return',
      why: 'success',
      delayMs: null,
      retryAfterMs: null,
      worker: 'w1',
    },
  };
}

for (const factory of factories)
  describe(`${factory.name} formAndClaim: new batches sealed and leased in one write`, () => {
    it('one item per batch: the key is batchKey() (PostgreSQL computes it) for every kind of key (non-ASCII, outside the BMP, separators); leased, in order, at most maxBatches', async () => {
      const s: DeliveryStore = await factory.open();
      const clock = createTestClock();
      const dest = 'dést😀:x';
      const keys = ['a', 'é', '😀', 'a😀b😀c', 'k:1\n2', 'x'.repeat(300), '中文キー', '\u0000'.slice(1) + 'z'];
      await s.enqueue(items(dest, keys), clock.wallNow());
      const first = await s.formAndClaim!(dest, ONE, clock.wallNow(), 5, LEASE, 'w1');
      expect(first.nextAt).toBe(clock.wallNow()); // maxBatches reached: more may be sealed at once
      const rest = await s.formAndClaim!(dest, ONE, clock.wallNow(), 5, LEASE, 'w1');
      expect(rest.nextAt).toBeNull();
      const all = [...first.claimed, ...rest.claimed];
      expect(first.claimed).toHaveLength(5);
      expect(all.map((b) => b.items.map((i) => i.key))).toEqual(keys.map((k) => [k]));
      expect(all.map((b) => b.key)).toEqual(keys.map((k) => batchKey(dest, [k])));
      expect(all.every((b) => b.token === 1 && b.attempt === 0 && b.round === 1 && b.items[0]!.payload.startsWith('{"n":'))).toBe(true);
      // Stored as a claim leaves a batch: leased to w1, not claimable by another worker.
      const stored = await s.get(all[0]!.id);
      expect(stored).toMatchObject({ key: all[0]!.key, state: 'queued', leaseOwner: 'w1', leaseUntil: clock.wallNow() + LEASE, claims: 1, items: 1 });
      expect(await s.claim(dest, 10, clock.wallNow(), LEASE, 'w2')).toEqual([]);
      const st = (await s.stats(clock.wallNow()))[0]!;
      expect(st).toMatchObject({ pendingItems: 0, inflightBatches: keys.length, readyBatches: 0 });
      // The lease expires (the worker died): the batch comes back to any claimer, with a new token.
      clock.advance(LEASE);
      const again = await s.claim(dest, 1, clock.wallNow(), LEASE, 'w2');
      expect(again.map((b) => [b.id, b.token])).toEqual([[all[0]!.id, 2]]);
      // The first holder's outcome is refused (fenced); the second's is written.
      expect((await s.complete([delivered(all[0]!, clock.wallNow())])).lost).toEqual([all[0]!.id]);
      expect((await s.complete([delivered(again[0]!, clock.wallNow())])).applied).toEqual([all[0]!.id]);
    });

    it('batches of several items: cut as formBatches cuts them (maxItems, maxAgeMs), leased at once', async () => {
      const s: DeliveryStore = await factory.open();
      const clock = createTestClock();
      const limits = { maxItems: 3, maxBytes: 1_000_000, maxAgeMs: 5_000 };
      await s.enqueue(items('d', ['k1', 'k2', 'k3', 'k4', 'k5']), clock.wallNow());
      const t0 = clock.wallNow();
      const r = await s.formAndClaim!('d', limits, clock.wallNow(), 10, LEASE, 'w1');
      expect(r.nextAt).toBe(t0 + 5_000); // k4, k5 too young
      expect(r.claimed.map((b) => b.items.map((i) => i.key))).toEqual([['k1', 'k2', 'k3']]);
      expect(r.claimed[0]!.key).toBe(batchKey('d', ['k1', 'k2', 'k3']));
      clock.advance(5_000);
      const r2 = await s.formAndClaim!('d', limits, clock.wallNow(), 10, LEASE, 'w2');
      expect(r2.claimed.map((b) => b.items.map((i) => i.key))).toEqual([['k4', 'k5']]);
      expect(r2.nextAt).toBeNull();
      expect(await s.get(r2.claimed[0]!.id)).toMatchObject({ leaseOwner: 'w2', claims: 1 });
    });

    it('a paused destination: nothing is sealed or leased until it is resumed', async () => {
      const s: DeliveryStore = await factory.open();
      const clock = createTestClock();
      await s.enqueue(items('p', ['a', 'b']), clock.wallNow());
      await s.setPaused('p', true, clock.wallNow());
      for (const limits of [ONE, { ...ONE, maxItems: 2, maxAgeMs: 0 }]) {
        expect(await s.formAndClaim!('p', limits, clock.wallNow(), 10, LEASE, 'w1')).toEqual({ claimed: [], nextAt: null });
      }
      expect((await s.stats(clock.wallNow()))[0]).toMatchObject({ pendingItems: 2, paused: true });
      await s.setPaused('p', false, clock.wallNow());
      expect((await s.formAndClaim!('p', ONE, clock.wallNow(), 10, LEASE, 'w1')).claimed).toHaveLength(2);
    });

    it.skipIf(factory.name !== 'sqlite')(
      'SQLite checkpoints its write-ahead log every 10,000 pages (not 1,000) and cuts the file back to 64 MB after one',
      async () => {
        const s = await factory.open();
        // Connection settings: read through the store's own connection.
        const own = (s as unknown as { db: { pragma: (q: string, o: { simple: true }) => unknown } }).db;
        expect([
          own.pragma('wal_autocheckpoint', { simple: true }),
          own.pragma('journal_size_limit', { simple: true }),
          own.pragma('journal_mode', { simple: true }),
        ]).toEqual([10_000, 64 * 1024 * 1024, 'wal']);
      },
    );

    it.skipIf(factory.name !== 'postgres')('synchronousOutcomes in the store URL: true or false, anything else is refused naming the field', async () => {
      const s = await openStore(`${PG_URL}?schema=relent_test_syncout&synchronousOutcomes=true`);
      await s.close();
      await expect(openStore(`${PG_URL}?schema=relent_test_syncout&synchronousOutcomes=yes`)).rejects.toMatchObject({
        code: 'ERR_INVALID_CONFIG',
        field: 'store.synchronousOutcomes',
      });
      const { dropSchema } = await import('./support.js');
      await dropSchema('relent_test_syncout');
    });

    it.runIf(factory.name !== 'postgres')(
      'claimThenForm: due batches first (as claim), then new ones sealed and leased for the rest, in one call',
      async () => {
        const s: DeliveryStore = await factory.open();
        const clock = createTestClock();
        expect(await s.claimThenForm!('d', ONE, clock.wallNow(), 4, LEASE, 'w1')).toEqual({ claimed: [], due: 0, formed: true, nextAt: null });
        await s.enqueue(items('d', ['a', 'b', 'c', 'd', 'e']), clock.wallNow());
        // 'a' sealed and left due (not leased): a claim would take it first.
        expect((await s.formBatches('d', ONE, clock.wallNow(), 1)).formed).toBe(1);
        const r = await s.claimThenForm!('d', ONE, clock.wallNow(), 3, LEASE, 'w1');
        expect(r.due).toBe(1);
        expect(r.formed).toBe(true);
        expect(r.nextAt).toBe(clock.wallNow()); // 3 - 1 due = 2 sealed: more could be sealed at once
        expect(r.claimed.map((b) => b.items.map((i) => i.key))).toEqual([['a'], ['b'], ['c']]);
        expect(r.claimed.map((b) => b.token)).toEqual([1, 1, 1]);
        expect(await s.get(r.claimed[0]!.id)).toMatchObject({ leaseOwner: 'w1', claims: 1, state: 'queued' });
        expect((await s.stats(clock.wallNow()))[0]).toMatchObject({ pendingItems: 2, inflightBatches: 3, readyBatches: 0 });
        // Due batches that fill `want`: nothing is sealed (formed: false), the pending items stay pending.
        clock.advance(LEASE); // the three leases expire: due again
        const r2 = await s.claimThenForm!('d', ONE, clock.wallNow(), 2, LEASE, 'w2');
        expect(r2).toMatchObject({ due: 2, formed: false, nextAt: null });
        expect(r2.claimed.map((b) => [b.items[0]!.key, b.token])).toEqual([
          ['a', 2],
          ['b', 2],
        ]);
        expect((await s.stats(clock.wallNow()))[0]).toMatchObject({ pendingItems: 2 });
        // A paused destination: nothing due is leased, nothing is sealed.
        clock.advance(LEASE);
        await s.setPaused('d', true, clock.wallNow());
        expect(await s.claimThenForm!('d', ONE, clock.wallNow(), 10, LEASE, 'w3')).toMatchObject({ claimed: [], due: 0 });
        await s.setPaused('d', false, clock.wallNow());
        const r3 = await s.claimThenForm!('d', ONE, clock.wallNow(), 10, LEASE, 'w3');
        expect(r3.due).toBe(3);
        expect(r3.claimed.map((b) => b.items[0]!.key)).toEqual(['a', 'b', 'c', 'd', 'e']); // the due ones (in id order, as a claim hands them), then the new ones
        expect(r3.nextAt).toBeNull();
      },
    );
  });
