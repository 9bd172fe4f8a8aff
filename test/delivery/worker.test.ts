// The worker in virtual time: every attempt's observation goes to decide(), and what is
// stored (not_before, dropped, delivered) is the core's decision. In-memory SQLite and
// an in-process destination: these tests are about scheduling, not sockets.
import { describe, expect, it } from 'vitest';
import type { DestinationOptions } from '../../src/delivery/config.js';
import { openDeliveryQueue, type DeliveryQueue } from '../../src/delivery/queue.js';
import { openStore } from '../../src/delivery/store.js';
import type { DeliveryRequest, TransportResult } from '../../src/delivery/transport.js';
import type { DeliveryEvent, DeliveryWorker, WorkerOptions } from '../../src/delivery/worker.js';
import { resolvePolicy } from '../../src/presets/index.js';
import { createSeededRandom, createTestClock, type TestClock } from '../../src/testing/index.js';

interface Seen {
  at: number;
  key: string;
  attempt: number;
  items: number;
  body: string;
  headers: Readonly<Record<string, string>>;
}

async function setup(
  dest: Partial<DestinationOptions>,
  answer: (req: DeliveryRequest, n: number) => TransportResult | Promise<TransportResult>,
  worker: Partial<WorkerOptions> = {},
  clock: TestClock = createTestClock(),
) {
  const seen: Seen[] = [];
  const events: DeliveryEvent[] = [];
  const queue = await openDeliveryQueue({
    store: 'sqlite::memory:',
    clock,
    destinations: { d: { url: 'https://receiver.example/in?token=secret', batch: { maxItems: 1, maxAgeMs: 0 }, ...dest } },
  });
  const start = clock.wallNow();
  const transport = async (req: DeliveryRequest): Promise<TransportResult> => {
    seen.push({ at: clock.wallNow() - start, key: req.batchKey, attempt: req.attempt, items: req.items.length, body: req.body, headers: req.headers });
    return answer(req, seen.length);
  };
  const w = queue.createWorker({ clock, random: createSeededRandom(7), transport, pollMs: 5_000, leaseMs: 30_000, onEvent: (e) => events.push(e), ...worker });
  w.start();
  return { queue, worker: w, clock, seen, events, start };
}

async function finish(q: DeliveryQueue, w: DeliveryWorker): Promise<void> {
  await w.stop();
  await q.close();
}

describe('adobe-best-effort: 15 s, then 30 s, then dropped with its last status', () => {
  it('503 three times: attempts at 0 s, 15 s and 45 s, then dropped (max_attempts) with status 503 and its history', async () => {
    const t = await setup({ policy: 'adobe-best-effort' }, () => ({ status: 503 }));
    await t.queue.enqueue('d', { profile: 1 }, { key: 'p1' });
    await t.clock.advanceAsync(10 * 60_000);
    expect(t.seen.map((s) => [s.at, s.attempt])).toEqual([
      [0, 1],
      [15_000, 2],
      [45_000, 3],
    ]);
    expect(new Set(t.seen.map((s) => s.headers['idempotency-key'])).size).toBe(1); // the same key on every attempt
    const [dropped] = await t.queue.list({ state: 'dropped' });
    expect(dropped).toMatchObject({ lastStatus: 503, lastDecision: 'max_attempts', lastWhy: 'attempts_exhausted', attempt: 3, items: 1 });
    const detail = (await t.queue.show(dropped!.id))!;
    expect(detail.attempts.map((a) => [a.attempt, a.status, a.decision, a.delayMs, a.at - t.start])).toEqual([
      [1, 503, 'retry', 15_000, 0],
      [2, 503, 'retry', 30_000, 15_000],
      [3, 503, 'max_attempts', null, 45_000],
    ]);
    expect(detail.itemList.map((i) => [i.key, JSON.parse(i.payload)])).toEqual([['p1', { profile: 1 }]]);
    expect(t.events.filter((e) => e.type === 'dropped')).toEqual([expect.objectContaining({ reason: 'max_attempts', status: 503, attempts: 3 })]);
    await finish(t.queue, t.worker);
  });

  it('400 is dropped at once (not_retryable), one call, nothing more later', async () => {
    const t = await setup({ policy: 'adobe-best-effort' }, () => ({ status: 400 }));
    await t.queue.enqueue('d', { profile: 1 }, { key: 'p1' });
    await t.clock.advanceAsync(10 * 60_000);
    expect(t.seen).toHaveLength(1);
    const [dropped] = await t.queue.list({ state: 'dropped' });
    expect(dropped).toMatchObject({ lastStatus: 400, lastDecision: 'not_retryable', lastWhy: 'status_not_retryable', attempt: 1 });
    expect((await t.queue.dropStats()).map((r) => [r.reason, r.lastStatus, Number(r.items)])).toEqual([['not_retryable', 400, 1]]);
    await finish(t.queue, t.worker);
  });

  it('503 then 200: delivered on the second attempt, 15 s later, with the same Idempotency-Key', async () => {
    const t = await setup({ policy: 'adobe-best-effort' }, (_r, n) => ({ status: n === 1 ? 503 : 200 }));
    await t.queue.enqueue('d', { profile: 1 }, { key: 'p1' });
    await t.clock.advanceAsync(60_000);
    expect(t.seen.map((s) => s.at)).toEqual([0, 15_000]);
    expect(t.seen[0]!.headers['idempotency-key']).toBe(t.seen[1]!.headers['idempotency-key']);
    expect(t.seen[0]!.headers['idempotency-key']).toMatch(/^"rb-[0-9a-f]{40}"$/);
    expect((await t.queue.stats())[0]).toMatchObject({ deliveredItems: 1, droppedItems: 0, deferredBatches: 0 });
    await finish(t.queue, t.worker);
  });
});

describe('Retry-After is honoured as asked, within the policy cap, never shortened', () => {
  it('adobe-configurable: a 429 asking for 40 minutes is retried after 40 minutes (plus a small positive jitter)', async () => {
    const t = await setup({ policy: 'adobe-configurable', maxPauseMs: 0 }, (_r, n) =>
      n === 1 ? { status: 429, headers: { 'retry-after': '2400' } } : { status: 200 },
    );
    await t.queue.enqueue('d', { x: 1 });
    await t.clock.advanceAsync(60 * 60_000);
    expect(t.seen).toHaveLength(2);
    expect(t.seen[1]!.at).toBeGreaterThanOrEqual(2_400_000);
    expect(t.seen[1]!.at).toBeLessThanOrEqual(2_410_000); // jitter at most 10 s (the core's retryAfter.jitterMaxMs)
    const b = (await t.queue.list({ state: 'delivered' }))[0]!;
    expect((await t.queue.show(b.id))!.attempts[0]).toMatchObject({ status: 429, decision: 'retry', retryAfterMs: 2_400_000 });
    await finish(t.queue, t.worker);
  });

  it('adobe-configurable: a Retry-After of 2 hours is over the cap (1 h): dropped at once, kept with its reason', async () => {
    const t = await setup({ policy: 'adobe-configurable', maxPauseMs: 0 }, () => ({ status: 429, headers: { 'retry-after': '7200' } }));
    await t.queue.enqueue('d', { x: 1 });
    await t.clock.advanceAsync(3 * 3_600_000);
    expect(t.seen).toHaveLength(1);
    expect((await t.queue.list({ state: 'dropped' }))[0]).toMatchObject({ lastStatus: 429, lastDecision: 'not_retryable', lastWhy: 'retry_after_over_cap' });
    await finish(t.queue, t.worker);
  });

  it("adobe-best-effort: a 503 asking for 45 s waits 45 s, not the schedule's 15 s", async () => {
    const t = await setup({ policy: 'adobe-best-effort', maxPauseMs: 0 }, (_r, n) =>
      n === 1 ? { status: 503, headers: { 'retry-after': '45' } } : { status: 200 },
    );
    await t.queue.enqueue('d', { x: 1 });
    await t.clock.advanceAsync(5 * 60_000);
    expect(t.seen[1]!.at).toBeGreaterThanOrEqual(45_000);
    await finish(t.queue, t.worker);
  });

  it("adobe-configurable without Retry-After: 429 waits exactly the preset's 30 minutes; a 429 does not use up an attempt; the 6 h deadline ends it (11 calls: the 11th 429 is 1 over maxThrottledAttempts)", async () => {
    const t = await setup({ policy: 'adobe-configurable' }, () => ({ status: 429 }));
    await t.queue.enqueue('d', { x: 1 });
    await t.clock.advanceAsync(7 * 3_600_000);
    expect(t.seen.map((s) => s.at)).toEqual(Array.from({ length: 11 }, (_, i) => i * 1_800_000));
    expect((await t.queue.list({ state: 'dropped' }))[0]).toMatchObject({
      lastStatus: 429,
      lastDecision: 'max_attempts',
      lastWhy: 'attempts_exhausted',
      attempt: 11,
    });
    await finish(t.queue, t.worker);
  });
});

describe('a 429 that does not count against maxAttempts (throttleCountsAsAttempt: false) stays uncounted across claims', () => {
  const MIN = 60_000;
  const HALF_HOUR = 30 * MIN;
  const spec = { preset: 'adobe-configurable', throttleCountsAsAttempt: false, maxThrottledAttempts: 5 } as const;
  /** Answers `statuses` in turn, then 200. */
  const answers =
    (...statuses: number[]) =>
    (_r: DeliveryRequest, n: number): TransportResult => ({ status: statuses[n - 1] ?? 200 });
  /** Each call after the first comes at least 30 minutes after the 429 (or 503) before it. */
  const expectHalfHourApart = (at: readonly number[]) => {
    for (let i = 1; i < at.length; i++) expect(at[i]! - at[i - 1]!).toBeGreaterThanOrEqual(HALF_HOUR);
  };

  it('429, 503, 503, 200: delivered on the 4th call — the 429 is stored as uncounted, so the 503s still have 2 attempts', async () => {
    const t = await setup({ policy: spec }, answers(429, 503, 503));
    await t.queue.enqueue('d', { x: 1 });
    await t.clock.advanceAsync(3 * 3_600_000);
    expect(t.seen.map((s) => s.at)).toEqual([0, HALF_HOUR, 2 * HALF_HOUR, 3 * HALF_HOUR]);
    const [b] = await t.queue.list({ state: 'delivered' });
    // Without op_throttled, the reclaimed batch would count the 429 and drop on the 3rd call (max_attempts).
    expect((await t.queue.show(b!.id))!.attempts.map((a) => [a.status, a.decision])).toEqual([
      [429, 'retry'],
      [503, 'retry'],
      [503, 'retry'],
      [200, 'return'],
    ]);
    await finish(t.queue, t.worker);
  });

  it('4 × 429, then 200, with a deadline that leaves room: delivered on the 5th call, each retry ≥ 30 min after its 429', async () => {
    const t = await setup({ policy: { ...spec, deadlineMs: 4 * 3_600_000 } }, answers(429, 429, 429, 429));
    await t.queue.enqueue('d', { x: 1 });
    await t.clock.advanceAsync(5 * 3_600_000);
    expect(t.seen).toHaveLength(5);
    expectHalfHourApart(t.seen.map((s) => s.at));
    const [b] = await t.queue.list({ state: 'delivered' });
    expect((await t.queue.show(b!.id))!.attempts.map((a) => [a.attempt, a.status, a.decision, a.delayMs])).toEqual([
      [1, 429, 'retry', HALF_HOUR],
      [2, 429, 'retry', HALF_HOUR],
      [3, 429, 'retry', HALF_HOUR],
      [4, 429, 'retry', HALF_HOUR],
      [5, 200, 'return', null],
    ]);
    await finish(t.queue, t.worker);
  });

  it('429 every time: maxThrottledAttempts (5) ends it on the 6th call (max_attempts), however often the batch was reclaimed', async () => {
    const t = await setup({ policy: { ...spec, deadlineMs: 6 * 3_600_000 } }, () => ({ status: 429 }));
    await t.queue.enqueue('d', { x: 1 });
    await t.clock.advanceAsync(7 * 3_600_000);
    expect(t.seen).toHaveLength(6);
    expectHalfHourApart(t.seen.map((s) => s.at));
    expect((await t.queue.list({ state: 'dropped' }))[0]).toMatchObject({
      lastStatus: 429,
      lastDecision: 'max_attempts',
      lastWhy: 'attempts_exhausted',
      attempt: 6,
    });
    await finish(t.queue, t.worker);
  });

  it('4 × 429, then 200, within a 2 h deadline: the 4th 429 (at 90 min) cannot wait 30 min — dropped, deadline_exceeded', async () => {
    const t = await setup({ policy: { ...spec, deadlineMs: 2 * 3_600_000 } }, answers(429, 429, 429, 429));
    await t.queue.enqueue('d', { x: 1 });
    await t.clock.advanceAsync(4 * 3_600_000);
    expect(t.seen.map((s) => s.at)).toEqual([0, HALF_HOUR, 2 * HALF_HOUR, 3 * HALF_HOUR]);
    expect((await t.queue.list({ state: 'dropped' }))[0]).toMatchObject({
      lastStatus: 429,
      lastDecision: 'deadline_exceeded',
      lastWhy: 'delay_past_deadline',
      attempt: 4,
    });
    await finish(t.queue, t.worker);
  });

  it('the adobe-configurable preset itself (429s uncounted, at most 10, 6 h deadline): 4 × 429, then 200 is delivered on the 5th call; 503s still count', async () => {
    const preset = resolvePolicy('adobe-configurable');
    expect([preset.throttleCountsAsAttempt, preset.maxThrottledAttempts, preset.maxAttempts, preset.deadlineMs]).toEqual([false, 10, 3, 21_600_000]);
    const t = await setup({ policy: 'adobe-configurable' }, answers(429, 429, 429, 429));
    await t.queue.enqueue('d', { x: 1 });
    await t.clock.advanceAsync(4 * 3_600_000);
    expect(t.seen.map((s) => s.at)).toEqual([0, HALF_HOUR, 2 * HALF_HOUR, 3 * HALF_HOUR, 4 * HALF_HOUR]);
    expect(await t.queue.list({ state: 'delivered' })).toHaveLength(1);
    await finish(t.queue, t.worker);

    const u = await setup({ policy: 'adobe-configurable' }, answers(429, 503, 503, 503));
    await u.queue.enqueue('d', { x: 1 });
    await u.clock.advanceAsync(4 * 3_600_000);
    expect(u.seen).toHaveLength(4); // the 429 plus maxAttempts (3) counted calls
    expect((await u.queue.list({ state: 'dropped' }))[0]).toMatchObject({ lastStatus: 503, lastDecision: 'max_attempts', attempt: 4 });
    await finish(u.queue, u.worker);
  });
});

describe('aggregation: max items, max bytes, max age — whichever comes first', () => {
  it('25 items, 10 per batch, 1 s max age: two full batches at once, the last 5 after 1 s; one stable key per batch', async () => {
    const t = await setup({ policy: 'adobe-best-effort', batch: { maxItems: 10, maxAgeMs: 1_000 } }, (_r, n) => ({ status: n === 2 ? 503 : 200 }));
    await t.queue.enqueueMany(
      'd',
      Array.from({ length: 25 }, (_, i) => ({ key: `k${i}`, payload: { i } })),
    );
    await t.clock.advanceAsync(999);
    expect(t.seen.map((s) => [s.at, s.items])).toEqual([
      [0, 10],
      [0, 10],
    ]);
    await t.clock.advanceAsync(30_000);
    expect(t.seen.map((s) => [s.at, s.items])).toEqual([
      [0, 10],
      [0, 10],
      [1_000, 5],
      [15_000, 10],
    ]);
    // the retried batch went out with the same key and the same body
    expect(t.seen[3]!.key).toBe(t.seen[1]!.key);
    expect(t.seen[3]!.body).toBe(t.seen[1]!.body);
    const body = JSON.parse(t.seen[0]!.body) as { key: string; items: { key: string; payload: unknown }[] };
    expect(body.key).toBe(t.seen[0]!.key);
    expect(body.items.map((i) => i.key)).toEqual(['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8', 'k9']);
    expect(body.items[3]!.payload).toEqual({ i: 3 });
    await finish(t.queue, t.worker);
  });
});

describe('load shedding', () => {
  it('rate limit: 250 requests under a 100/min limit never put more than 100 in any 60 s window', async () => {
    const t = await setup({ policy: 'adobe-best-effort', rateLimit: { requests: 100, perMs: 60_000 } }, () => ({ status: 200 }));
    await t.queue.enqueueMany(
      'd',
      Array.from({ length: 250 }, (_, i) => ({ key: `k${i}`, payload: i })),
    );
    await t.clock.advanceAsync(5 * 60_000);
    expect(t.seen).toHaveLength(250);
    const at = t.seen.map((s) => s.at);
    let worst = 0;
    for (let i = 0; i < at.length; i++) worst = Math.max(worst, at.filter((x) => x >= at[i]! && x < at[i]! + 60_000).length);
    expect(worst).toBe(100);
    expect([at.filter((x) => x < 60_000).length, at.filter((x) => x >= 60_000 && x < 120_000).length, at.filter((x) => x >= 120_000).length]).toEqual([
      100, 100, 50,
    ]);
    await finish(t.queue, t.worker);
  });

  it('the seed 001 destination with a local limit of 50,000/min: it sees its limit, no 429 at all (scaled 1/1000)', async () => {
    const clock = createTestClock();
    const perMinute = new Map<number, { ok: number; throttled: number }>();
    const t = await setup(
      { policy: 'adobe-configurable', rateLimit: { requests: 50, perMs: 60_000 }, concurrency: { initial: 100, adaptive: false } },
      () => {
        const m = Math.floor((clock.wallNow() - t0) / 60_000) + 1;
        const c = perMinute.get(m) ?? { ok: 0, throttled: 0 };
        perMinute.set(m, c);
        if (c.ok >= 50) {
          c.throttled++;
          return { status: 429 };
        }
        c.ok++;
        return { status: 200 };
      },
      {},
      clock,
    );
    const t0 = t.start;
    await t.queue.enqueueMany(
      'd',
      Array.from({ length: 40 }, (_, i) => ({ key: `a${i}`, payload: i })),
    );
    await clock.advanceAsync(60_000);
    await t.queue.enqueueMany(
      'd',
      Array.from({ length: 70 }, (_, i) => ({ key: `b${i}`, payload: i })),
    );
    await clock.advanceAsync(60_000);
    await t.queue.enqueueMany(
      'd',
      Array.from({ length: 30 }, (_, i) => ({ key: `c${i}`, payload: i })),
    );
    await clock.advanceAsync(5 * 60_000);
    expect([...perMinute.values()].reduce((a, c) => a + c.throttled, 0)).toBe(0);
    expect((await t.queue.stats())[0]!.deliveredItems).toBe(140); // all out by minute 4, not minute 32
    expect(Math.max(...[...perMinute.keys()])).toBeLessThanOrEqual(4);
    await finish(t.queue, t.worker);
  });

  it('adaptive concurrency (AIMD): a destination that takes 4 requests at a time sees far fewer 429s, and the limit comes down to it', async () => {
    const run = async (adaptive: boolean) => {
      const clock = createTestClock();
      let inFlight = 0;
      let throttled = 0;
      const t = await setup(
        {
          policy: {
            maxAttempts: 50,
            deadlineMs: 3_600_000,
            backoff: { kind: 'constant', delayMs: 1_000 },
            retryOn: { status: [429] },
            retryAfter: { honor: false },
            idempotent: true,
            budget: null,
          },
          concurrency: { initial: 32, min: 1, max: 32, adaptive },
        },
        () => {
          if (inFlight >= 4) {
            throttled++;
            return { status: 429 };
          }
          inFlight++;
          return new Promise<TransportResult>((resolve) =>
            clock.setTimer(() => {
              inFlight--;
              resolve({ status: 200 });
            }, 100),
          );
        },
        { pollMs: 50 },
        clock,
      );
      await t.queue.enqueueMany(
        'd',
        Array.from({ length: 300 }, (_, i) => ({ key: `k${i}`, payload: i })),
      );
      await clock.advanceAsync(10 * 60_000);
      const st = (await t.queue.stats())[0]!;
      const limit = t.worker.concurrency('d');
      const shrinks = t.events.filter((e) => e.type === 'concurrency' && e.cause === 'throttled').length;
      await finish(t.queue, t.worker);
      return { delivered: st.deliveredItems, dropped: st.droppedItems, throttled, limit, shrinks };
    };
    const fixed = await run(false);
    const aimd = await run(true);
    console.log(`AIMD vs a fixed limit of 32 against a destination that takes 4 at a time: fixed ${JSON.stringify(fixed)}, adaptive ${JSON.stringify(aimd)}`);
    expect(fixed.delivered + fixed.dropped).toBe(300); // the storm: retries run out (max_attempts), kept as dropped
    expect(aimd.delivered).toBe(300);
    expect(aimd.shrinks).toBeGreaterThan(0);
    expect(aimd.limit).toBeLessThanOrEqual(8);
    expect(aimd.throttled * 4).toBeLessThan(fixed.throttled); // at least 4x fewer 429s than a fixed limit of 32
  });

  it('a 429 with Retry-After pauses the whole destination for that long (capped by maxPauseMs)', async () => {
    const t = await setup({ policy: 'adobe-best-effort', maxPauseMs: 60_000, concurrency: { initial: 1, adaptive: false } }, (_r, n) =>
      n === 1 ? { status: 429, headers: { 'retry-after': '20' } } : { status: 200 },
    );
    await t.queue.enqueueMany(
      'd',
      Array.from({ length: 5 }, (_, i) => ({ key: `k${i}`, payload: i })),
    );
    await t.clock.advanceAsync(60_000);
    expect(t.seen).toHaveLength(6);
    expect(t.seen.slice(1).every((s) => s.at >= 20_000)).toBe(true);
    expect(t.events.some((e) => e.type === 'paused')).toBe(true);
    await finish(t.queue, t.worker);
  });
});

describe('nothing is silently discarded', () => {
  it('a refused connection is retried, then dropped with its error class; requeue delivers it with both rounds in its history', async () => {
    let up = false;
    const t = await setup({ policy: 'adobe-best-effort' }, () => {
      if (!up) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED' });
      return { status: 200 };
    });
    await t.queue.enqueue('d', { x: 1 }, { key: 'only' });
    await t.clock.advanceAsync(5 * 60_000);
    const [dropped] = await t.queue.list({ state: 'dropped' });
    expect(dropped).toMatchObject({ lastErrorClass: 'connect_refused', lastStatus: null, lastDecision: 'max_attempts' });
    up = true;
    expect(await t.queue.requeue({ ids: [dropped!.id] })).toBe(1);
    await t.clock.advanceAsync(1_000);
    const d = (await t.queue.show(dropped!.id))!;
    expect(d.state).toBe('delivered');
    expect(d.attempts.map((a) => [a.round, a.attempt, a.errorClass ?? a.status])).toEqual([
      [1, 1, 'connect_refused'],
      [1, 2, 'connect_refused'],
      [1, 3, 'connect_refused'],
      [2, 1, 200],
    ]);
    expect(t.seen.at(-1)!.key).toBe(t.seen[0]!.key); // same key after the requeue
    await finish(t.queue, t.worker);
  });

  it('an attempt that outlives its timeout is a timeout observation (at the bound), decided by the core', async () => {
    const clock = createTestClock();
    const t = await setup(
      { policy: { preset: 'adobe-best-effort', attemptTimeoutMs: 2_000 } },
      (req, n) =>
        n === 1 ? new Promise<TransportResult>((_resolve, reject) => req.signal.addEventListener('abort', () => reject(req.signal.reason))) : { status: 200 },
      {},
      clock,
    );
    await t.queue.enqueue('d', { x: 1 });
    await clock.advanceAsync(60_000);
    const b = (await t.queue.list({ state: 'delivered' }))[0]!;
    expect((await t.queue.show(b.id))!.attempts.map((a) => [a.errorClass ?? a.status, a.elapsedMs, a.decision])).toEqual([
      ['timeout', 2_000, 'retry'],
      [200, 0, 'return'],
    ]);
    expect(t.seen[1]!.at).toBe(17_000); // 2 s timeout + the schedule's 15 s
    await finish(t.queue, t.worker);
  });
});

describe('leases', () => {
  it('fencing: a worker frozen past its lease cannot overwrite the batch after another worker claimed and delivered it', async () => {
    const frozen = createTestClock(); // worker A's timers never fire while frozen: a stop-the-world pause
    const live = createTestClock();
    let releaseA: (r: TransportResult) => void = () => {};
    const queue = await openDeliveryQueue({
      store: 'sqlite::memory:',
      clock: live,
      destinations: { d: { url: 'https://r.example/', policy: 'adobe-best-effort', batch: { maxItems: 1, maxAgeMs: 0 } } },
    });
    const eventsA: DeliveryEvent[] = [];
    const a = queue.createWorker({
      clock: frozen,
      leaseMs: 10_000,
      transport: () =>
        new Promise((r) => {
          releaseA = r;
        }),
      onEvent: (e) => eventsA.push(e),
      workerId: 'A',
    });
    await queue.enqueue('d', { x: 1 });
    a.start();
    await frozen.advanceAsync(0); // A claims and sends; its request hangs
    expect((await queue.stats())[0]!.inflightBatches).toBe(1);
    live.advance(10_000); // A's lease expires (A is frozen: no renewal)
    const b = queue.createWorker({ clock: live, leaseMs: 10_000, transport: () => Promise.resolve({ status: 200 }), workerId: 'B' });
    b.start();
    await live.advanceAsync(1_000);
    expect((await queue.stats())[0]!.deliveredBatches).toBe(1);
    releaseA({ status: 400 }); // A wakes up with an answer that would drop the batch
    await frozen.advanceAsync(1_000);
    const [batch] = await queue.list({});
    expect(batch).toMatchObject({ state: 'delivered', claims: 2, leaseOwner: null });
    expect(eventsA.some((e) => e.type === 'lease_lost')).toBe(true);
    expect((await queue.show(batch!.id))!.attempts.map((x) => [x.worker, x.status])).toEqual([['B', 200]]);
    await b.stop();
    await a.stop();
    await queue.close();
  });

  it('graceful stop waits for requests in flight up to stopTimeoutMs, then gives the claims back: another worker takes them at once', async () => {
    const clock = createTestClock();
    const t = await setup(
      { policy: 'adobe-best-effort', concurrency: { initial: 3, adaptive: false } },
      (req) => new Promise<TransportResult>((_r, reject) => req.signal.addEventListener('abort', () => reject(req.signal.reason))),
      { stopTimeoutMs: 500 },
      clock,
    );
    await t.queue.enqueueMany(
      'd',
      Array.from({ length: 5 }, (_, i) => ({ key: `k${i}`, payload: i })),
    );
    await clock.advanceAsync(100);
    expect((await t.queue.stats())[0]!.inflightBatches).toBe(3);
    const stopping = t.worker.stop();
    await clock.advanceAsync(500);
    expect(await stopping).toEqual({ released: 3, abandoned: 3 });
    const st = (await t.queue.stats())[0]!;
    expect([st.inflightBatches, st.readyBatches + st.pendingItems, st.droppedBatches]).toEqual([0, 5, 0]);
    expect((await t.queue.list({ state: 'queued' })).every((b) => b.attempt === 0)).toBe(true); // abandoned attempts are not recorded
    await t.queue.close();
  });
});

describe('outcomes are written in groups', () => {
  /** Ten batches answered 2 ms apart (virtual): the sizes of the store's outcome writes. */
  async function writes(scope: 'worker' | 'shared'): Promise<number[]> {
    const clock = createTestClock();
    const store = await openStore('sqlite::memory:');
    const sizes: number[] = [];
    const complete = store.complete.bind(store);
    store.complete = (outcomes) => {
      sizes.push(outcomes.length);
      return complete(outcomes);
    };
    const queue = await openDeliveryQueue({
      store,
      clock,
      destinations: { d: { url: 'https://receiver.example/in', batch: { maxItems: 1, maxAgeMs: 0 }, concurrency: { initial: 10, adaptive: false, scope } } },
    });
    let n = 0;
    const transport = async (): Promise<TransportResult> => {
      const wait = 2 * n++;
      await new Promise<void>((r) => clock.setTimer(r, wait));
      return { status: 200 };
    };
    const w = queue.createWorker({ clock, random: createSeededRandom(1), transport, pollMs: 5_000, leaseMs: 30_000 });
    await queue.enqueueMany(
      'd',
      Array.from({ length: 10 }, (_, i) => ({ payload: i, key: `k${i}` })),
    );
    w.start();
    await clock.advanceAsync(1_000);
    expect((await queue.stats())[0]).toMatchObject({ deliveredBatches: 10, inflightBatches: 0 });
    await finish(queue, w);
    return sizes;
  }

  it('on SQLite, answers within 20 ms of the first are written in one store call; a destination whose concurrency is kept in the store has each written at the end of its turn', async () => {
    expect(await writes('worker')).toEqual([10]);
    expect(await writes('shared')).toEqual(Array.from({ length: 10 }, () => 1));
  });
});

describe('wake-ups', () => {
  it('an enqueue makes the worker look at that destination only, not at every one', async () => {
    const clock = createTestClock();
    const store = await openStore('sqlite::memory:');
    const looked: string[] = [];
    const counted = new Proxy(store, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (typeof v !== 'function') return v;
        if (prop === 'claim' || prop === 'claimThenForm' || prop === 'formAndClaim' || prop === 'claimLimited' || prop === 'formBatches') {
          return (...args: unknown[]) => {
            looked.push(args[0] as string);
            return (v as (...a: unknown[]) => unknown).apply(target, args);
          };
        }
        return (v as (...a: unknown[]) => unknown).bind(target);
      },
    });
    const dest = { url: 'https://receiver.example/in', batch: { maxItems: 1, maxAgeMs: 0 } };
    const queue = await openDeliveryQueue({ store: counted, clock, destinations: { a: dest, b: dest, c: dest } });
    const delivered: string[] = [];
    const w = queue.createWorker({
      clock,
      random: createSeededRandom(7),
      pollMs: 60_000,
      leaseMs: 30_000,
      transport: async (req) => {
        delivered.push(req.destination.name);
        return { status: 204 };
      },
    });
    w.start();
    await clock.advanceAsync(0);
    looked.length = 0;
    await queue.enqueue('a', { n: 1 }, { key: 'k1' });
    await clock.advanceAsync(0);
    expect(delivered).toEqual(['a']);
    expect(looked.length).toBeGreaterThan(0);
    expect(new Set(looked)).toEqual(new Set(['a']));
    // Without names, wake() still looks at every destination.
    looked.length = 0;
    w.wake();
    await clock.advanceAsync(0);
    expect(new Set(looked)).toEqual(new Set(['a', 'b', 'c']));
    await w.stop();
    await queue.close();
  });
});

describe('what each attempt tells the receiver', () => {
  it('x-relent-attempt and x-relent-deadline-ms on every attempt; propagate: false sends neither', async () => {
    const t = await setup(
      { policy: { backoff: { kind: 'constant', delayMs: 1_000 }, maxAttempts: 3, attemptTimeoutMs: 4_000, deadlineMs: 60_000 } },
      (_req, n) => ({ status: n < 3 ? 503 : 200 }),
    );
    await t.queue.enqueue('d', { a: 1 }, { key: 'p1' });
    await t.clock.advanceAsync(10_000);
    expect(t.seen.map((s) => [s.headers['x-relent-attempt'], s.headers['x-relent-deadline-ms']])).toEqual([
      ['1', '4000'],
      ['2', '4000'],
      ['3', '4000'],
    ]);
    await finish(t.queue, t.worker);

    const off = await setup({ propagate: false }, () => ({ status: 200 }));
    await off.queue.enqueue('d', { a: 1 }, { key: 'p1' });
    await off.clock.advanceAsync(1_000);
    expect(off.seen).toHaveLength(1);
    expect(Object.keys(off.seen[0]!.headers).filter((h) => h.startsWith('x-relent-'))).toEqual([]);
    expect(off.seen[0]!.headers['idempotency-key']).toBeDefined();
    await finish(off.queue, off.worker);

    // A bad value names the field.
    await expect(
      openDeliveryQueue({ store: 'sqlite::memory:', destinations: { d: { url: 'https://r.example/in', propagate: { attemptHeader: 'bad header' } } } }),
    ).rejects.toMatchObject({ code: 'ERR_INVALID_CONFIG', field: 'destinations.d.propagate.attemptHeader' });
  });
});

describe('attempt events: the core attempt event, with the batch', () => {
  it('every field of the core attempt event plus destination, batchId, key, items, round and why; the endpoint never has the query', async () => {
    const t = await setup({ policy: 'adobe-best-effort' }, (_r, n) => ({ status: n === 1 ? 503 : 200 }));
    await t.queue.enqueue('d', { profile: 1 }, { key: 'p1' });
    await t.clock.advanceAsync(60_000);
    const attempts = t.events.filter((e) => e.type === 'attempt');
    const [batch] = await t.queue.list({ state: 'delivered' });
    const key = batch!.key;
    const common = {
      type: 'attempt',
      operationId: key,
      method: 'POST',
      endpoint: 'https://receiver.example/in',
      errorClass: null,
      elapsedMs: 0,
      retryAfterMs: null,
      retryAfterValid: null,
      destination: 'd',
      batchId: batch!.id,
      key,
      items: 1,
      round: 1,
    };
    expect(attempts).toEqual([
      {
        ...common,
        requestId: `${key}/attempt-1`,
        attempt: 1,
        status: 503,
        remainingMs: 120_000,
        decision: 'retry',
        why: 'retryable',
        delayMs: 15_000,
        ts: t.start,
      },
      {
        ...common,
        requestId: `${key}/attempt-2`,
        attempt: 2,
        status: 200,
        remainingMs: 105_000,
        decision: 'return',
        why: 'success',
        delayMs: null,
        ts: t.start + 15_000,
      },
    ]);
    await finish(t.queue, t.worker);
  });

  it("a requeued batch's attempts say their round, in the event and in the request id", async () => {
    const t = await setup({ policy: 'adobe-best-effort' }, (_r, n) => ({ status: n === 1 ? 400 : 200 }));
    await t.queue.enqueue('d', { profile: 1 }, { key: 'p1' });
    await t.clock.advanceAsync(1_000);
    expect(await t.queue.requeue({ destination: 'd' })).toBe(1);
    t.worker.wake();
    await t.clock.advanceAsync(1_000);
    const [batch] = await t.queue.list({ state: 'delivered' });
    expect(t.events.filter((e) => e.type === 'attempt').map((e) => e.type === 'attempt' && [e.round, e.attempt, e.requestId, e.status, e.why])).toEqual([
      [1, 1, `${batch!.key}/attempt-1`, 400, 'status_not_retryable'],
      [2, 1, `${batch!.key}/round-2/attempt-1`, 200, 'success'],
    ]);
    await finish(t.queue, t.worker);
  });
});
