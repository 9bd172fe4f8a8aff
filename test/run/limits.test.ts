// The executor's concurrency limit (queue, refusal, events) and rate limiter (FIFO queue,
// one timer, refusal known in advance, a server's 429 honoured), on a test clock.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createConcurrencyLimit, type LimitEvent } from '../../src/run/concurrency-limit.js';
import { createRateLimiter } from '../../src/run/rate-limiter.js';
import { compileStatuses } from '../../src/core/policy.js';
import { observeRateAnswer } from '../../src/core/token-bucket.js';
import { RelentError } from '../../src/core/errors.js';
import { createTestClock } from '../../src/testing/index.js';

describe('createConcurrencyLimit', () => {
  it('holds calls within the limit, queues the rest FIFO, refuses past maxQueue with its own code', async () => {
    const l = createConcurrencyLimit({ kind: 'aimd', initial: 2, maxQueue: 1 });
    expect(l.tryAcquire()).toBe(true);
    await l.acquire();
    expect(l.tryAcquire()).toBe(false);
    const order: string[] = [];
    const waiting = l.acquire().then(() => order.push('queued'));
    const err = await l.acquire().catch((e: unknown) => e);
    expect(RelentError.is(err) && err.code).toBe('ERR_CONCURRENCY_LIMITED');
    expect(String((err as Error).message)).toMatch(/2 of 2 calls in flight, 1 of 1 queued/);
    l.release(null);
    await waiting;
    expect(order).toEqual(['queued']);
    expect(l.active).toBe(2);
  });

  it('learns from outcomes: a drop halves the limit (once per wave), with an event; waiters get slots when it grows', async () => {
    const events: LimitEvent[] = [];
    const l = createConcurrencyLimit({ kind: 'aimd', initial: 4, maxQueue: 10 }, { name: 'payments', onEvent: (e) => events.push(e), wallNow: () => 42 });
    for (let i = 0; i < 4; i++) expect(l.tryAcquire()).toBe(true);
    const gen = l.generation;
    l.release({ startedAt: 0, now: 10, generation: gen, dropped: true });
    l.release({ startedAt: 0, now: 11, generation: gen, dropped: true }); // the same wave
    expect(l.limit).toBe(2);
    expect(events).toEqual([{ type: 'limit', ts: 42, name: 'payments', limit: 2, inFlight: 3, queued: 0, cause: 'decrease' }]);
    const got: number[] = [];
    const a = l.acquire().then(() => got.push(1));
    l.release(null); // 1 in flight of 2: the waiter gets the slot
    await a;
    expect(got).toEqual([1]);
    expect(l.active).toBe(2);
  });

  it('a waiter whose signal aborts leaves the queue', async () => {
    const l = createConcurrencyLimit({ kind: 'gradient', initial: 1 });
    expect(l.tryAcquire()).toBe(true);
    const c = new AbortController();
    const p = l.acquire(c.signal);
    expect(l.queued).toBe(1);
    c.abort(new Error('gone'));
    await expect(p).rejects.toThrow('gone');
    expect(l.queued).toBe(0);
  });

  it('property: bounded memory (queued never past maxQueue), within max, FIFO, and no waiter left while a slot is free, whatever the outcomes', async () => {
    const op = fc.oneof(
      fc.constant({ t: 'acquire' as const }),
      fc.constant({ t: 'abort' as const }),
      fc.record({ t: fc.constant('release' as const), rtt: fc.double({ min: 0, max: 500, noNaN: true }), dropped: fc.boolean(), told: fc.boolean() }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('aimd' as const, 'gradient' as const),
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 0, max: 5 }),
        fc.array(op, { maxLength: 120 }),
        async (kind, max, maxQueue, ops) => {
          const l = createConcurrencyLimit(
            kind === 'aimd' ? { kind, max, initial: max, maxQueue } : { kind, max, initial: max, maxQueue, windowMs: 1, minWindowSamples: 1 },
          );
          let now = 0;
          let held = 0;
          let seq = 0;
          const waiting: { id: number; ac: AbortController }[] = [];
          const granted: number[] = [];
          const flush = () => new Promise<void>((r) => setImmediate(r));
          for (const o of ops) {
            now += 7;
            if (o.t === 'acquire') {
              const id = seq++;
              const ac = new AbortController();
              const queuedBefore = l.queued;
              l.acquire(ac.signal).then(
                () => {
                  held++;
                  granted.push(id);
                },
                () => {},
              );
              if (l.queued > queuedBefore) waiting.push({ id, ac });
            } else if (o.t === 'abort' && waiting.length > 0) {
              waiting.shift()!.ac.abort();
            } else if (o.t === 'release' && held > 0) {
              held--;
              l.release(o.told ? { startedAt: now - o.rtt, now, generation: l.generation, dropped: o.dropped } : null);
            }
            await flush();
            for (let i = waiting.length - 1; i >= 0; i--) if (granted.includes(waiting[i]!.id)) waiting.splice(i, 1);
            expect(l.queued).toBeLessThanOrEqual(maxQueue);
            expect(l.queued).toBe(waiting.length);
            expect(l.active).toBe(held);
            expect(l.active).toBeLessThanOrEqual(max);
            expect(Number.isInteger(l.limit) && l.limit >= 1 && l.limit <= max).toBe(true);
            if (l.queued > 0) expect(l.active).toBeGreaterThanOrEqual(l.limit);
          }
          expect(granted).toEqual([...granted].sort((x, y) => x - y));
        },
      ),
      { numRuns: 150 },
    );
  });

  it('names every bad option', () => {
    expect(() => createConcurrencyLimit({ kind: 'aimd', maxQueue: -1 })).toThrow(/`concurrencyLimit.maxQueue`/);
    expect(() => createConcurrencyLimit({ kind: 'fixed' } as never)).toThrow(/`concurrencyLimit.kind`/);
    expect(() => createConcurrencyLimit({ kind: 'gradient', tolerance: 0.5 }, { field: 'partners[0].concurrencyLimit' })).toThrow(
      /`partners\[0\].concurrencyLimit.tolerance`/,
    );
  });
});

describe("run() with a limit's options instead of the limit", () => {
  it('refuses at once, naming the field (not a TypeError at the first call)', async () => {
    const { run } = await import('../../src/run/run.js');
    let calls = 0;
    const fn = async () => {
      calls++;
      return 'ok';
    };
    for (const [field, bad] of [
      ['concurrencyLimit', { kind: 'aimd' }],
      ['bulkhead', { maxConcurrent: 2 }],
      ['rateLimiter', { ratePerSecond: 5 }],
    ] as const) {
      const e = await Promise.resolve()
        .then(() => run(fn, { policy: 'http-429', [field]: bad } as never))
        .catch((x: unknown) => x);
      expect(RelentError.is(e) && e.code, field).toBe('ERR_INVALID_INPUT');
      expect((e as RelentError).field).toBe(field);
      expect((e as Error).message).toMatch(new RegExp(`\`${field}\` to be made by create`));
    }
    const h = await Promise.resolve()
      .then(() => run(fn, { policy: { hedge: { delayMs: 5 } }, hedging: 5 } as never))
      .catch((x: unknown) => x);
    expect((h as RelentError).field).toBe('hedging');
    expect(calls).toBe(0);
  });
});

describe('createRateLimiter', () => {
  it('serves waiters in order as tokens come, with one timer, and refuses at once a call that would wait too long', async () => {
    const clock = createTestClock();
    const r = createRateLimiter({ ratePerSecond: 10, burst: 1, maxWaitMs: 350 }, clock);
    expect(r.tryAcquire(clock.now())).toBe(true);
    const got: [number, number][] = [];
    const all = [1, 2, 3].map((i) => r.acquire(clock.now(), 10_000).then(() => got.push([i, clock.now()])));
    // The fourth would get its token at 400 ms: more than maxWaitMs.
    await expect(r.acquire(clock.now(), 10_000)).rejects.toMatchObject({ code: 'ERR_RATE_LIMITED' });
    // Within maxWaitMs but not within the caller's deadline: refused too.
    expect(clock.pending()).toBe(1);
    await clock.advanceAsync(300);
    await Promise.all(all);
    expect(got).toEqual([
      [1, 100],
      [2, 200],
      [3, 300],
    ]);
    expect(clock.pending()).toBe(0);
    await expect(r.acquire(clock.now(), 50)).rejects.toMatchObject({ code: 'ERR_RATE_LIMITED' });
  });

  it('a 429 with Retry-After pauses it and lowers the rate: a waiter past its bound is refused then', async () => {
    const clock = createTestClock();
    const r = createRateLimiter({ ratePerSecond: 100, burst: 1, maxWaitMs: 500 }, clock);
    expect(r.tryAcquire(0)).toBe(true);
    const p = r.acquire(0, 10_000).catch((e: unknown) => e);
    observeRateAnswer(r.bucket, 0, 429, { 'retry-after': '2' }, 2000, compileStatuses([429], 'x'));
    await clock.advanceAsync(20);
    expect(RelentError.is(await p) && ((await p) as RelentError).code).toBe('ERR_RATE_LIMITED');
    expect(r.state(20).pausedUntil).toBe(2000);
    expect(r.state(20).ratePerSecond).toBeCloseTo(50, 0);
  });

  it('a RateLimit field caps the calls to its quota until the window ends', () => {
    const clock = createTestClock();
    const r = createRateLimiter({ ratePerSecond: 1000 }, clock);
    observeRateAnswer(r.bucket, 0, 200, { ratelimit: '"default";r=2;t=10' }, null, compileStatuses([429], 'x'));
    expect([r.tryAcquire(0), r.tryAcquire(1), r.tryAcquire(2)]).toEqual([true, true, false]);
    expect(r.tryAcquire(10_000)).toBe(true);
    // A cached answer's quota is stale: ignored.
    observeRateAnswer(r.bucket, 10_000, 200, { ratelimit: '"default";r=0;t=10', age: '30' }, null, compileStatuses([429], 'x'));
    expect(r.tryAcquire(10_001)).toBe(true);
  });

  it('a waiter whose signal aborts leaves the line and the next one moves up', async () => {
    const clock = createTestClock();
    const r = createRateLimiter({ ratePerSecond: 10, burst: 1 }, clock);
    r.tryAcquire(0);
    const c = new AbortController();
    const first = r.acquire(0, 5000, c.signal);
    const second = r.acquire(0, 5000);
    c.abort(new Error('gone'));
    await expect(first).rejects.toThrow('gone');
    await clock.advanceAsync(100);
    await second;
    expect(r.queued).toBe(0);
  });
});
