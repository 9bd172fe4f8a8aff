// The dedupe table of a receiver: each key processed once, duplicates answered with the
// first response, bounded memory (LRU + TTL, on the test clock).
import { describe, expect, it } from 'vitest';
import { createIdempotencyCache, noticeKey } from '../../src/shared/idempotency-cache.js';
import { createTestClock } from '../../src/testing/index.js';

describe('createIdempotencyCache', () => {
  it('runs the work once per key; a concurrent duplicate waits for the first answer; a failure lets the retry run', async () => {
    const cache = createIdempotencyCache();
    let runs = 0;
    let release: () => void = () => {};
    const work = () =>
      new Promise<{ status: number; body: string }>((r) => {
        runs++;
        release = () => r({ status: 200, body: `run ${runs}` });
      });
    const first = cache.once('k', work);
    const second = cache.once('k', work);
    release();
    expect(await first).toEqual({ response: { status: 200, body: 'run 1' }, duplicate: false });
    expect(await second).toEqual({ response: { status: 200, body: 'run 1' }, duplicate: true });
    expect(runs).toBe(1);
    await expect(cache.once('f', () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(await cache.once('f', () => ({ status: 204 }))).toEqual({ response: { status: 204 }, duplicate: false });
  });

  it('bounded memory: at most maxKeys keys (least recently used go first), each kept ttlMs', () => {
    const clock = createTestClock();
    const cache = createIdempotencyCache({ maxKeys: 3, ttlMs: 60_000, clock });
    for (const k of ['a', 'b', 'c']) {
      expect(cache.begin(k).state).toBe('new');
      cache.complete(k, { status: 200 });
    }
    expect(cache.begin('a').state).toBe('done'); // a is now the most recently used
    expect(cache.begin('d').state).toBe('new'); // evicts b
    cache.complete('d', { status: 200 });
    expect(cache.size).toBe(3);
    expect(cache.begin('b').state).toBe('new'); // b was forgotten: processed again
    cache.complete('b', { status: 200 });
    clock.advance(60_000);
    expect(cache.begin('a').state).toBe('new'); // expired
    expect(cache.size).toBeLessThanOrEqual(3);
    expect(noticeKey('req-1', 'imp-2')).toBe('req-1:imp-2');
  });

  it('keys in progress are never evicted', () => {
    const cache = createIdempotencyCache({ maxKeys: 1 });
    expect(cache.begin('a').state).toBe('new');
    expect(cache.begin('b').state).toBe('new');
    expect(cache.begin('a').state).toBe('in_progress');
  });
});
