// The store contract, one suite for both stores, driven by the test clock: every `now`
// comes from createTestClock(), so leases expire and retries fall due without sleeping.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Sqlite from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { batchKey } from '../../src/delivery/batching.js';
import { openPostgresStore } from '../../src/delivery/postgres-store.js';
import { openSqliteStore } from '../../src/delivery/sqlite-store.js';
import type { ClaimedBatch, DeliveryStore, Outcome } from '../../src/delivery/types.js';
import { createSeededRandom, createTestClock } from '../../src/testing/index.js';
import { dropSchema, pgEnabled, PG_URL, postgresFactory, sqliteFactory, sqliteThreadFactory, uniqueSchema, type StoreFactory } from './support.js';

const withPg = await pgEnabled();
const factories: StoreFactory[] = [sqliteFactory(), sqliteThreadFactory()];
if (withPg) factories.push(postgresFactory());

afterAll(async () => {
  for (const f of factories) await f.cleanup();
});

const LIMITS = { maxItems: 3, maxBytes: 1_000_000, maxAgeMs: 5_000 };
const LEASE = 10_000;

function items(dest: string, keys: string[]) {
  return keys.map((key, i) => ({ destination: dest, key, payload: JSON.stringify({ n: i, key }) }));
}

/** An outcome written by the holder of `b`'s lease. */
function outcome(b: ClaimedBatch, o: Partial<Outcome> & Pick<Outcome, 'state'>, at: number): Outcome {
  return {
    id: b.id,
    token: b.token,
    notBefore: at,
    attempt: b.attempt + 1,
    opStartedAt: at,
    opDeadlineAt: at + 60_000,
    prevDelayMs: null,
    opThrottled: 0,
    lastStatus: 200,
    lastErrorClass: null,
    lastDecision: 'return',
    lastWhy: 'success',
    finishedAt: o.state === 'queued' ? null : at,
    record: {
      round: b.round,
      attempt: b.attempt + 1,
      at,
      status: o.lastStatus === undefined ? 200 : o.lastStatus,
      errorClass: null,
      elapsedMs: 12,
      decision: o.lastDecision ?? 'return',
      why: o.lastWhy ?? 'success',
      delayMs: o.state === 'queued' ? o.notBefore! - at : null,
      retryAfterMs: null,
      worker: 'w1',
    },
    ...o,
  };
}

for (const f of factories) {
  describe(`store contract: ${f.name}`, () => {
    const fresh = async (): Promise<{ s: DeliveryStore; clock: ReturnType<typeof createTestClock> }> => ({ s: await f.open(), clock: createTestClock() });

    it('enqueue stores items once per (destination, key); a known key is a duplicate, not a second item', async () => {
      const { s, clock } = await fresh();
      const a = await s.enqueue(items('d1', ['a', 'b']), clock.wallNow());
      expect(a.map((r) => r.duplicate)).toEqual([false, false]);
      const b = await s.enqueue([...items('d1', ['a', 'c']), ...items('d2', ['a'])], clock.wallNow());
      expect(b.map((r) => r.duplicate)).toEqual([true, false, false]);
      expect(b[0]!.id).toBe(a[0]!.id);
      const stats = await s.stats(clock.wallNow());
      expect(stats.map((x) => [x.destination, x.pendingItems])).toEqual([
        ['d1', 3],
        ['d2', 1],
      ]);
    });

    it('forms batches at maxItems, at maxBytes, and a partial one only when its oldest item is maxAgeMs old', async () => {
      const { s, clock } = await fresh();
      await s.enqueue(items('d', ['k1', 'k2', 'k3', 'k4', 'k5']), clock.wallNow());
      const t0 = clock.wallNow();
      expect(await s.formBatches('d', LIMITS, clock.wallNow(), 10)).toEqual({ formed: 1, nextAt: t0 + 5_000 }); // k1..k3 full; k4,k5 too young
      clock.advance(4_999);
      expect(await s.formBatches('d', LIMITS, clock.wallNow(), 10)).toEqual({ formed: 0, nextAt: t0 + 5_000 });
      clock.advance(1);
      expect(await s.formBatches('d', LIMITS, clock.wallNow(), 10)).toEqual({ formed: 1, nextAt: null });
      expect(await s.formBatches('d', LIMITS, clock.wallNow(), 10)).toEqual({ formed: 0, nextAt: null });
      const all = await s.list({}, clock.wallNow());
      expect(all.map((b) => b.items)).toEqual([3, 2]);
      expect(all[0]!.key).toBe(batchKey('d', ['k1', 'k2', 'k3']));
      // bytes: each payload is ~20 bytes; a 50-byte limit makes batches of two
      await s.enqueue(items('e', ['x1', 'x2', 'x3']), clock.wallNow());
      expect((await s.formBatches('e', { maxItems: 100, maxBytes: 50, maxAgeMs: 0 }, clock.wallNow(), 10)).formed).toBe(2);
      // maxBatches reached: more can be sealed at once
      await s.enqueue(items('f', ['f1', 'f2', 'f3']), clock.wallNow());
      expect(await s.formBatches('f', { maxItems: 1, maxBytes: 100, maxAgeMs: 0 }, clock.wallNow(), 2)).toEqual({ formed: 2, nextAt: clock.wallNow() });
      expect((await s.list({ destination: 'e' }, clock.wallNow())).map((b) => b.items)).toEqual([2, 1]);
    });

    it('claims due batches with their items in order; a live lease hides a batch; an expired one comes back with a new token', async () => {
      const { s, clock } = await fresh();
      await s.enqueue(items('d', ['a', 'b', 'c', 'd', 'e', 'f']), clock.wallNow());
      await s.formBatches('d', LIMITS, clock.wallNow(), 10);
      const first = await s.claim('d', 10, clock.wallNow(), LEASE, 'w1');
      expect(first.map((b) => b.items.map((i) => i.key))).toEqual([
        ['a', 'b', 'c'],
        ['d', 'e', 'f'],
      ]);
      expect(first[0]!.items[0]!.payload).toBe(JSON.stringify({ n: 0, key: 'a' }));
      expect(first.every((b) => b.attempt === 0 && b.round === 1)).toBe(true);
      expect(await s.claim('d', 10, clock.wallNow(), LEASE, 'w2')).toEqual([]);
      expect((await s.stats(clock.wallNow()))[0]!.inflightBatches).toBe(2);
      clock.advance(LEASE - 1);
      expect(await s.claim('d', 10, clock.wallNow(), LEASE, 'w2')).toEqual([]);
      clock.advance(1); // the first worker died: its leases expire
      const again = await s.claim('d', 1, clock.wallNow(), LEASE, 'w2');
      expect(again).toHaveLength(1);
      expect(again[0]!.id).toBe(first[0]!.id);
      expect(again[0]!.token).toBeGreaterThan(first[0]!.token);
      expect((await s.get(first[0]!.id))!.claims).toBe(2);
    });

    it('fences every write: a worker whose lease expired cannot overwrite the batch after another worker claimed it', async () => {
      const { s, clock } = await fresh();
      await s.enqueue(items('d', ['a']), clock.wallNow());
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 10);
      const [stale] = await s.claim('d', 1, clock.wallNow(), LEASE, 'w1');
      clock.advance(LEASE);
      const [live] = await s.claim('d', 1, clock.wallNow(), LEASE, 'w2');
      // the stale worker wakes up: its renew, its outcome and its release are all refused
      expect(await s.renew([stale!], clock.wallNow(), LEASE)).toEqual([stale!.id]);
      const staleWrite = await s.complete([
        outcome(stale!, { state: 'dropped', lastStatus: 400, lastDecision: 'not_retryable', lastWhy: 'status_not_retryable' }, clock.wallNow()),
      ]);
      expect(staleWrite).toEqual({ applied: [], lost: [stale!.id] });
      expect(await s.release([stale!], clock.wallNow())).toBe(0);
      // the live holder renews and writes
      expect(await s.renew([live!], clock.wallNow(), LEASE)).toEqual([]);
      expect(await s.complete([outcome(live!, { state: 'delivered' }, clock.wallNow())])).toEqual({ applied: [live!.id], lost: [] });
      const d = (await s.get(live!.id))!;
      expect(d.state).toBe('delivered');
      expect(d.leaseOwner).toBeNull();
      expect(d.attempts.map((a) => [a.attempt, a.status, a.worker])).toEqual([[1, 200, 'w1']]);
      // and once finished, nothing can claim it again
      clock.advance(LEASE * 2);
      expect(await s.claim('d', 10, clock.wallNow(), LEASE, 'w3')).toEqual([]);
    });

    it('a retry is stored as not_before: hidden until then, with the attempt in its history; stats and list tell deferred from ready', async () => {
      const { s, clock } = await fresh();
      await s.enqueue(items('d', ['a', 'b']), clock.wallNow());
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 10);
      const [b1, b2] = await s.claim('d', 2, clock.wallNow(), LEASE, 'w1');
      const now = clock.wallNow();
      await s.complete([
        outcome(b1!, { state: 'queued', notBefore: now + 1_800_000, lastStatus: 429, lastDecision: 'retry', lastWhy: 'retryable' }, now),
        outcome(b2!, { state: 'dropped', lastStatus: 400, lastDecision: 'not_retryable', lastWhy: 'status_not_retryable' }, now),
      ]);
      let st = (await s.stats(clock.wallNow()))[0]!;
      expect([st.deferredBatches, st.readyBatches, st.droppedBatches, st.inflightBatches]).toEqual([1, 0, 1, 0]);
      expect((await s.list({ state: 'deferred' }, clock.wallNow())).map((b) => b.id)).toEqual([b1!.id]);
      clock.advance(1_800_000 - 1);
      expect(await s.claim('d', 10, clock.wallNow(), LEASE, 'w1')).toEqual([]);
      clock.advance(1);
      st = (await s.stats(clock.wallNow()))[0]!;
      expect(st.readyBatches).toBe(1);
      const [again] = await s.claim('d', 10, clock.wallNow(), LEASE, 'w1');
      expect(again!.id).toBe(b1!.id);
      expect(again!.attempt).toBe(1);
      expect(again!.opStartedAt).toBe(now);
      expect(again!.opDeadlineAt).toBe(now + 60_000);
      const hist = (await s.get(b1!.id))!.attempts;
      expect(hist).toEqual([
        {
          round: 1,
          attempt: 1,
          at: now,
          status: 429,
          errorClass: null,
          elapsedMs: 12,
          decision: 'retry',
          why: 'retryable',
          delayMs: 1_800_000,
          retryAfterMs: null,
          worker: 'w1',
        },
      ]);
    });

    it('the operation state round-trips: op_throttled comes back with the claim, survives a later write, and a requeue resets it', async () => {
      const { s, clock } = await fresh();
      await s.enqueue(items('d', ['a']), clock.wallNow());
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 10);
      const [b] = await s.claim('d', 1, clock.wallNow(), LEASE, 'w1');
      expect(b!.opThrottled).toBe(0); // a new batch
      const t0 = clock.wallNow();
      const deferred = (c: ClaimedBatch, throttled: number, status: number): Outcome =>
        outcome(
          c,
          {
            state: 'queued',
            notBefore: clock.wallNow() + 1_800_000,
            opStartedAt: t0,
            opDeadlineAt: t0 + 7_200_000,
            prevDelayMs: 1_800_000,
            opThrottled: throttled,
            lastStatus: status,
            lastDecision: 'retry',
            lastWhy: 'retryable',
          },
          clock.wallNow(),
        );
      expect((await s.complete([deferred(b!, 1, 429)])).applied).toEqual([b!.id]);
      clock.advance(1_800_000);
      const [again] = await s.claim('d', 1, clock.wallNow(), LEASE, 'w2');
      expect(again).toMatchObject({ id: b!.id, attempt: 1, opStartedAt: t0, opDeadlineAt: t0 + 7_200_000, prevDelayMs: 1_800_000, opThrottled: 1 });
      await s.complete([deferred(again!, 1, 503)]); // a counted failure keeps the count
      clock.advance(1_800_000);
      const [third] = await s.claim('d', 1, clock.wallNow(), LEASE, 'w1');
      expect(third).toMatchObject({ attempt: 2, opThrottled: 1 });
      await s.complete([
        outcome(third!, { state: 'dropped', opThrottled: 1, lastStatus: 503, lastDecision: 'max_attempts', lastWhy: 'attempts_exhausted' }, clock.wallNow()),
      ]);
      expect(await s.requeue({ ids: [b!.id] }, clock.wallNow())).toBe(1);
      const [round2] = await s.claim('d', 1, clock.wallNow(), LEASE, 'w1');
      expect(round2).toMatchObject({ round: 2, attempt: 0, opStartedAt: null, prevDelayMs: null, opThrottled: 0 }); // a new round
    });

    it('dropped batches are listed, counted by reason and requeued with their history (new round, same key)', async () => {
      const { s, clock } = await fresh();
      await s.enqueue([...items('d', ['a', 'b', 'c']), ...items('e', ['z'])], clock.wallNow());
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 10);
      await s.formBatches('e', { ...LIMITS, maxItems: 1, maxAgeMs: 0 }, clock.wallNow(), 10);
      const claimed = [...(await s.claim('d', 10, clock.wallNow(), LEASE, 'w')), ...(await s.claim('e', 10, clock.wallNow(), LEASE, 'w'))];
      const now = clock.wallNow();
      const drop = (b: ClaimedBatch, status: number, decision: Outcome['lastDecision'], why: Outcome['lastWhy']): Outcome =>
        outcome(b, { state: 'dropped', lastStatus: status, lastDecision: decision, lastWhy: why }, now);
      await s.complete([
        drop(claimed[0]!, 400, 'not_retryable', 'status_not_retryable'),
        drop(claimed[1]!, 503, 'max_attempts', 'attempts_exhausted'),
        drop(claimed[2]!, 503, 'max_attempts', 'attempts_exhausted'),
        drop(claimed[3]!, 503, 'max_attempts', 'attempts_exhausted'),
      ]);
      const stats = await s.dropStats();
      expect(stats.map((r) => [r.destination, r.reason, r.lastStatus, Number(r.batches), Number(r.items)])).toEqual([
        ['d', 'max_attempts', 503, 2, 2],
        ['d', 'not_retryable', 400, 1, 1],
        ['e', 'max_attempts', 503, 1, 1],
      ]);
      expect((await s.list({ state: 'dropped', reason: 'max_attempts', destination: 'd' }, now)).map((b) => b.id)).toEqual([claimed[1]!.id, claimed[2]!.id]);
      expect(await s.requeue({ destination: 'd', reason: 'max_attempts', limit: 1 }, now)).toBe(1);
      expect(await s.requeue({ ids: [claimed[0]!.id, claimed[3]!.id] }, now)).toBe(2);
      expect(await s.requeue({ ids: [claimed[0]!.id] }, now)).toBe(0); // no longer dropped
      const back = await s.claim('d', 10, clock.wallNow(), LEASE, 'w2');
      expect(back.map((b) => b.id)).toEqual([claimed[0]!.id, claimed[1]!.id]);
      expect(back.every((b) => b.round === 2 && b.attempt === 0 && b.opStartedAt === null)).toBe(true);
      expect(back[0]!.key).toBe(claimed[0]!.key);
      await s.complete([outcome(back[0]!, { state: 'delivered' }, clock.wallNow())]);
      const d = (await s.get(claimed[0]!.id))!;
      expect(d.attempts.map((a) => [a.round, a.attempt, a.status])).toEqual([
        [1, 1, 400],
        [2, 1, 200],
      ]);
      expect(d.itemList.map((i) => i.key)).toEqual(['a']);
    });

    it('release gives claims back at once (graceful stop); stats count items and batches per state', async () => {
      const { s, clock } = await fresh();
      await s.enqueue(items('d', ['a', 'b', 'c', 'd']), clock.wallNow());
      await s.formBatches('d', { ...LIMITS, maxItems: 2 }, clock.wallNow(), 10);
      const claimed = await s.claim('d', 10, clock.wallNow(), LEASE, 'w1');
      expect((await s.stats(clock.wallNow()))[0]).toMatchObject({ inflightBatches: 2, inflightItems: 4, readyBatches: 0, pendingItems: 0 });
      expect(await s.release(claimed, clock.wallNow())).toBe(2);
      expect((await s.stats(clock.wallNow()))[0]).toMatchObject({ inflightBatches: 0, readyBatches: 2, readyItems: 4 });
      expect(await s.claim('d', 10, clock.wallNow(), LEASE, 'w2')).toHaveLength(2);
    });

    it('concurrent claims never hand the same batch to two workers', async () => {
      const { s, clock } = await fresh();
      await s.enqueue(
        items(
          'd',
          Array.from({ length: 60 }, (_, i) => `k${i}`),
        ),
        clock.wallNow(),
      );
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 100);
      const got = await Promise.all(Array.from({ length: 6 }, (_, w) => s.claim('d', 15, clock.wallNow(), LEASE, `w${w}`)));
      const ids = got.flat().map((b) => b.id);
      expect(ids).toHaveLength(60);
      expect(new Set(ids).size).toBe(60);
    });

    it('purges delivered batches past retention, never dropped or queued ones', async () => {
      const { s, clock } = await fresh();
      await s.enqueue(items('d', ['a', 'b', 'c']), clock.wallNow());
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 10);
      const [a, b] = await s.claim('d', 2, clock.wallNow(), LEASE, 'w');
      await s.complete([
        outcome(a!, { state: 'delivered' }, clock.wallNow()),
        outcome(b!, { state: 'dropped', lastDecision: 'max_attempts' }, clock.wallNow()),
      ]);
      clock.advance(1000);
      expect(await s.purgeDelivered(clock.wallNow())).toBe(1);
      const left = await s.list({}, clock.wallNow());
      expect(left.map((x) => x.state).sort()).toEqual(['dropped', 'queued']);
      expect(await s.get(a!.id)).toBeNull();
      // the key can be enqueued again once its delivered item is gone
      expect((await s.enqueue(items('d', ['a']), clock.wallNow()))[0]!.duplicate).toBe(false);
    });

    it('purge(state, before, limit): finished batches of that state, oldest first, at most `limit` a call, with their items and history', async () => {
      const { s, clock } = await fresh();
      await s.enqueue(items('d', ['a', 'b', 'c', 'd', 'e']), clock.wallNow());
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 10);
      const got = await s.claim('d', 5, clock.wallNow(), LEASE, 'w');
      for (const [i, b] of got.entries()) {
        const st = i < 3 ? 'delivered' : 'dropped';
        await s.complete([outcome(b, { state: st, ...(st === 'dropped' ? { lastDecision: 'max_attempts' as const } : {}) }, clock.wallNow())]);
        clock.advance(1_000); // finished 1 s apart
      }
      const t = clock.wallNow();
      expect(await s.purge('delivered', t - 4_500, 10)).toBe(1); // only the one finished more than 4.5 s ago
      expect(await s.purge('delivered', t, 1)).toBe(1); // at most `limit`, oldest first
      expect(await s.get(got[0]!.id)).toBeNull();
      expect(await s.get(got[1]!.id)).toBeNull();
      expect(await s.get(got[2]!.id)).not.toBeNull(); // the youngest delivered one is still there
      expect(await s.purge('dropped', t, 10)).toBe(2);
      expect((await s.list({}, t)).map((b) => b.id)).toEqual([got[2]!.id]);
      await expect(s.purge('queued' as 'dropped', t, 10)).rejects.toMatchObject({ code: 'ERR_INVALID_CONFIG' });
    });

    it('setPaused: a paused destination is not claimed (by claim or claimLimited) until resumed; stats say so', async () => {
      const { s, clock } = await fresh();
      await s.enqueue([...items('d', ['a', 'b']), ...items('e', ['x'])], clock.wallNow());
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 10);
      await s.formBatches('e', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 10);
      expect(await s.setPaused('d', true, clock.wallNow())).toBe(true);
      expect(await s.setPaused('d', true, clock.wallNow())).toBe(false); // already paused
      expect(await s.claim('d', 10, clock.wallNow(), LEASE, 'w')).toEqual([]);
      expect((await s.claimLimited('d', 10, { rate: null, concurrency: 5 }, clock.wallNow(), LEASE, 'w')).claimed).toEqual([]);
      expect(await s.claim('e', 10, clock.wallNow(), LEASE, 'w')).toHaveLength(1); // others go on
      const st = await s.stats(clock.wallNow());
      expect(st.map((x) => [x.destination, x.paused, x.readyBatches])).toEqual([
        ['d', true, 2],
        ['e', false, 0],
      ]);
      expect(await s.setPaused('d', false, clock.wallNow())).toBe(true);
      expect(await s.setPaused('d', false, clock.wallNow())).toBe(false);
      expect(await s.claim('d', 10, clock.wallNow(), LEASE, 'w')).toHaveLength(2);
    });

    it('claimLimited shares a rate window: at most `requests` claims per window, counted until their permit ends; retryAt says when', async () => {
      const { s, clock } = await fresh();
      await s.enqueue(
        items(
          'd',
          Array.from({ length: 10 }, (_, i) => `k${i}`),
        ),
        clock.wallNow(),
      );
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 100);
      const rate = { requests: 4, perMs: 1_000 };
      const t0 = clock.wallNow();
      const a = await s.claimLimited('d', 3, { rate, concurrency: null }, t0, LEASE, 'w1');
      const b = await s.claimLimited('d', 3, { rate, concurrency: null }, t0 + 10, LEASE, 'w2'); // another worker: 1 left
      expect([a.claimed.length, b.claimed.length]).toEqual([3, 1]);
      expect(b.retryAt).toBe(t0 + LEASE + 1_000); // nothing answered yet: not before the permits end
      // a's requests were answered at t0 + 200, b's at t0 + 300: the window runs from there
      await s.endPermit(a.permit!, t0 + 200);
      await s.endPermit(b.permit!, t0 + 300);
      const c = await s.claimLimited('d', 3, { rate, concurrency: null }, t0 + 400, LEASE, 'w1');
      expect(c.claimed).toEqual([]);
      expect(c.retryAt).toBe(t0 + 1_200); // a's three go out of the window then
      const d = await s.claimLimited('d', 5, { rate, concurrency: null }, t0 + 1_200, LEASE, 'w1');
      expect(d.claimed).toHaveLength(3); // b's one still counts until t0 + 1300
      expect(d.retryAt).toBe(t0 + 1_300);
      const e = await s.claimLimited('d', 5, { rate, concurrency: null }, t0 + 1_300, LEASE, 'w2');
      expect(e.claimed).toHaveLength(1); // d's three are not answered yet: they still count
      expect(e.retryAt).toBe(t0 + 1_200 + LEASE + 1_000); // d's three, unanswered, count until their lease runs out
      await s.endPermit(d.permit!, t0 + 1_350);
      await s.endPermit(e.permit!, t0 + 1_400);
      expect((await s.claimLimited('d', 5, { rate, concurrency: null }, t0 + 2_349, LEASE, 'w1')).claimed).toHaveLength(0);
      expect((await s.claimLimited('d', 5, { rate, concurrency: null }, t0 + 2_400, LEASE, 'w1')).claimed).toHaveLength(2); // the rest
    });

    it('claimLimited shares a concurrency: live leases of the destination, from any worker, count', async () => {
      const { s, clock } = await fresh();
      await s.enqueue(
        items(
          'd',
          Array.from({ length: 6 }, (_, i) => `k${i}`),
        ),
        clock.wallNow(),
      );
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 100);
      const lim = { rate: null, concurrency: 3 };
      const a = await s.claimLimited('d', 2, lim, clock.wallNow(), LEASE, 'w1');
      const b = await s.claimLimited('d', 5, lim, clock.wallNow(), LEASE, 'w2');
      expect([a.claimed.length, b.claimed.length]).toEqual([2, 1]);
      expect(b.permit).toBeNull();
      await s.complete([outcome(a.claimed[0]!, { state: 'delivered' }, clock.wallNow())]);
      expect((await s.claimLimited('d', 5, lim, clock.wallNow(), LEASE, 'w2')).claimed).toHaveLength(1); // one lease ended
      clock.advance(LEASE); // the other leases expire (their workers died): they no longer count
      expect((await s.claimLimited('d', 5, lim, clock.wallNow(), LEASE, 'w3')).claimed).toHaveLength(3);
    });

    it('stats come from counters the writes keep: after 300 random operations they equal a count from scratch (recount)', async () => {
      const { s, clock } = await fresh();
      const random = createSeededRandom(11);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
      const dests = ['a', 'b', 'c'];
      let k = 0;
      const held: ClaimedBatch[] = [];
      for (let step = 0; step < 300; step++) {
        const now = clock.wallNow();
        const op = random();
        if (op < 0.25)
          await s.enqueue(
            items(
              pick(dests),
              Array.from({ length: 1 + Math.floor(random() * 4) }, () => `k${k++ % 150}`),
            ),
            now,
          ); // some keys repeat: duplicates
        else if (op < 0.4) await s.formBatches(pick(dests), { maxItems: 1 + Math.floor(random() * 3), maxBytes: 1_000_000, maxAgeMs: 0 }, now, 5);
        else if (op < 0.6) held.push(...(await s.claim(pick(dests), 1 + Math.floor(random() * 3), now, LEASE, 'w')));
        else if (op < 0.85 && held.length > 0) {
          const b = held.splice(Math.floor(random() * held.length), 1)[0]!;
          const st = pick(['delivered', 'dropped', 'queued'] as const);
          await s.complete([
            outcome(
              b,
              {
                state: st,
                notBefore: now + Math.floor(random() * 3_000),
                lastDecision: st === 'delivered' ? 'return' : st === 'dropped' ? 'max_attempts' : 'retry',
              },
              now,
            ),
          ]);
        } else if (op < 0.9) await s.requeue({ destination: pick(dests), limit: 2 }, now);
        else if (op < 0.95) await s.purge(pick(['delivered', 'dropped'] as const), now - 500, 3);
        else if (held.length > 0) await s.release(held.splice(0, 1), now);
        clock.advance(Math.floor(random() * 400));
      }
      const now = clock.wallNow();
      const kept = await s.stats(now);
      expect(
        kept.reduce((a, x) => a + x.pendingItems + x.readyItems + x.inflightItems + x.deferredItems + x.deliveredItems + x.droppedItems, 0),
      ).toBeGreaterThan(0);
      await s.recount();
      expect(await s.stats(now)).toEqual(kept);
    });

    it('stats tell the oldest waiting item per destination (pending or in a queued batch)', async () => {
      const { s, clock } = await fresh();
      const t0 = clock.wallNow();
      await s.enqueue(items('d', ['a']), t0);
      clock.advance(5_000);
      await s.enqueue(items('d', ['b']), clock.wallNow());
      expect((await s.stats(clock.wallNow()))[0]!.oldestEnqueuedAt).toBe(t0); // pending
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 10);
      expect((await s.stats(clock.wallNow()))[0]!.oldestEnqueuedAt).toBe(t0); // in a queued batch
      const [first] = await s.claim('d', 1, clock.wallNow(), LEASE, 'w');
      await s.complete([outcome(first!, { state: 'delivered' }, clock.wallNow())]);
      expect((await s.stats(clock.wallNow()))[0]!.oldestEnqueuedAt).toBe(t0 + 5_000); // a is delivered
    });
  });
}

/**
 * A database made by the previous schema (no op_throttled): simulated by dropping the
 * column from the tables, as raw SQL, between two opens of the same database.
 */
interface Upgrade {
  readonly name: string;
  open(): Promise<DeliveryStore>;
  /** Runs SQL on the database behind the store's back; `{batches}` is the batches table (`{counts}`, `{meta}` likewise). */
  sql(text: string): Promise<Record<string, unknown>[]>;
  cleanup(): Promise<void>;
}

function sqliteUpgrade(): Upgrade {
  const dir = mkdtempSync(join(tmpdir(), 'relent-upgrade-'));
  const file = join(dir, 'old.db');
  return {
    name: 'sqlite',
    open: () => openSqliteStore({ file }),
    sql(text) {
      const db = new Sqlite(file);
      try {
        const stmt = db.prepare(text.replaceAll('{batches}', 'relent_batches').replaceAll('{counts}', 'relent_counts').replaceAll('{meta}', 'relent_meta'));
        return Promise.resolve(stmt.reader ? (stmt.all() as Record<string, unknown>[]) : (stmt.run(), []));
      } finally {
        db.close();
      }
    },
    cleanup: () => Promise.resolve(rmSync(dir, { recursive: true, force: true })),
  };
}

function postgresUpgrade(): Upgrade {
  const schema = uniqueSchema('u');
  return {
    name: 'postgres',
    open: () => openPostgresStore({ connectionString: PG_URL, schema }),
    async sql(text) {
      const c = new pg.Client({ connectionString: PG_URL });
      await c.connect();
      try {
        return (
          await c.query(
            text
              .replaceAll('{batches}', `"${schema}".relent_batches`)
              .replaceAll('{counts}', `"${schema}".relent_counts`)
              .replaceAll('{meta}', `"${schema}".relent_meta`),
          )
        ).rows as Record<string, unknown>[];
      } finally {
        await c.end();
      }
    },
    cleanup: () => dropSchema(schema),
  };
}

for (const u of [sqliteUpgrade(), ...(withPg ? [postgresUpgrade()] : [])]) {
  describe(`schema upgrade: ${u.name}`, () => {
    afterAll(() => u.cleanup());

    it('a database made before op_throttled gets the column (0 for its batches) when opened, and keeps its batches', async () => {
      const clock = createTestClock();
      let s = await u.open();
      await s.enqueue(items('d', ['a']), clock.wallNow());
      await s.formBatches('d', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 10);
      const [b] = await s.claim('d', 1, clock.wallNow(), LEASE, 'w1');
      const now = clock.wallNow();
      await s.complete([
        outcome(b!, { state: 'queued', notBefore: now + 1_000, prevDelayMs: 1_000, lastStatus: 503, lastDecision: 'retry', lastWhy: 'retryable' }, now),
      ]);
      await s.close();
      await u.sql('ALTER TABLE {batches} DROP COLUMN op_throttled'); // the previous schema
      await u.sql(`DELETE FROM {meta} WHERE k = 'migration'`); // (made before numbered migrations)
      s = await u.open();
      clock.advance(1_000);
      const [again] = await s.claim('d', 1, clock.wallNow(), LEASE, 'w2');
      expect(again).toMatchObject({ id: b!.id, attempt: 1, prevDelayMs: 1_000, opThrottled: 0 });
      await s.complete([
        outcome(
          again!,
          { state: 'queued', notBefore: clock.wallNow() + 1_000, opThrottled: 1, lastStatus: 429, lastDecision: 'retry', lastWhy: 'retryable' },
          clock.wallNow(),
        ),
      ]);
      await s.close();
      s = await u.open(); // opening an up-to-date database changes nothing
      expect(await u.sql('SELECT op_throttled FROM {batches}')).toEqual([{ op_throttled: 1 }]);
      await s.close();
    });

    it('a database made before the stats counters gets them, counted from its tables, when opened', async () => {
      const clock = createTestClock();
      let s = await u.open();
      await s.enqueue(items('e', ['a', 'b', 'c']), clock.wallNow());
      await s.formBatches('e', { ...LIMITS, maxItems: 1 }, clock.wallNow(), 2);
      const [b] = await s.claim('e', 1, clock.wallNow(), LEASE, 'w1');
      await s.complete([outcome(b!, { state: 'delivered' }, clock.wallNow())]);
      const before = (await s.stats(clock.wallNow())).find((x) => x.destination === 'e');
      expect(before).toMatchObject({ pendingItems: 1, readyBatches: 1, deliveredBatches: 1 });
      await s.close();
      await u.sql('DROP TABLE {counts}'); // the previous schema
      await u.sql(`DELETE FROM {meta} WHERE k = 'migration'`); // (made before numbered migrations)
      s = await u.open();
      expect((await s.stats(clock.wallNow())).find((x) => x.destination === 'e')).toEqual(before);
      await s.close();
    });
  });
}
