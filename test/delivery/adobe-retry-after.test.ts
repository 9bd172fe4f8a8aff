// adobe-configurable retries a rate-limited item 30 minutes later; a server's
// Retry-After can lengthen that wait (up to the 1 h cap), never shorten it. Shown by
// replay (the core's decision) and by the seed 001 worked example in virtual time with
// a destination that answers its 429s with a short (5 s) and a long (40 min) Retry-After.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { openDeliveryQueue } from '../../src/delivery/queue.js';
import type { DeliveryRequest, TransportResult } from '../../src/delivery/transport.js';
import { replay } from '../../src/run/replay.js';
import { createSeededRandom, createTestClock } from '../../src/testing/index.js';

const MINUTE = 60_000;
const HALF_HOUR = 30 * MINUTE;

describe("adobe-configurable: 30 minutes or the server's longer Retry-After, whichever is later (replay)", () => {
  const timeline = (retryAfter: string | null) => ({
    operationId: 'activation-1',
    method: 'POST',
    policy: 'adobe-configurable' as const,
    seed: 1,
    observations: [
      { status: 429, elapsedMs: 100, ...(retryAfter !== null ? { headers: { 'retry-after': retryAfter } } : {}) },
      { status: 200, elapsedMs: 100 },
    ],
  });

  it.each([
    ['no Retry-After', null, HALF_HOUR, HALF_HOUR, null],
    ['Retry-After: 5 (shorter)', '5', HALF_HOUR, HALF_HOUR, 5_000],
    ['Retry-After: 1200 (20 min, shorter)', '1200', HALF_HOUR, HALF_HOUR, 1_200_000],
    ['Retry-After: 2400 (40 min, longer)', '2400', 2_400_000, 2_410_000, 2_400_000],
    ['Retry-After: 3600 (the cap)', '3600', 3_600_000, 3_600_000, 3_600_000],
  ])('%s → deferred for the later of the two', async (_name, retryAfter, min, max, asked) => {
    const { events, result } = await replay(timeline(retryAfter));
    expect(result.reason).toBe('defer');
    expect(result.delayMs!).toBeGreaterThanOrEqual(min);
    expect(result.delayMs!).toBeLessThanOrEqual(max);
    expect(events[0]).toMatchObject({ status: 429, decision: 'defer', retryAfterMs: asked, retryAfterValid: asked === null ? null : true });
  });

  it('a Retry-After over the 1 h cap stops (not_retryable, with the asked wait)', async () => {
    const { events, result } = await replay(timeline('7200'));
    expect(result).toMatchObject({ reason: 'not_retryable', why: 'retry_after_over_cap', retryAfterMs: 7_200_000 });
    expect(events[0]).toMatchObject({ decision: 'not_retryable', retryAfterMs: 7_200_000 });
  });

  it('relent replay of the bundled example prints a 30-minute deferral for a 5 s Retry-After', () => {
    const bin = fileURLToPath(new URL('../../bin/relent', import.meta.url));
    const file = fileURLToPath(new URL('../../examples/timelines/adobe-configurable-retry-after.json', import.meta.url));
    const r = spawnSync(process.execPath, [bin, 'replay', file], { encoding: 'utf8', timeout: 20_000 });
    const first = JSON.parse(r.stdout.split('\n')[0]!) as Record<string, unknown>;
    expect(first).toMatchObject({ status: 429, decision: 'defer', delayMs: HALF_HOUR, retryAfterMs: 5000, retryAfterValid: true });
  });
});

describe('the seed 001 worked example with a Retry-After on every 429 (virtual time, 1/1000 scale)', () => {
  /**
   * The destination takes 50 requests a minute and answers the rest 429 with `retryAfter`.
   * Minute 1: 40 sent; minute 2: 70 sent, 20 throttled; minute 3: 30 sent. Returns the
   * minute (1-based) each throttled item was delivered in.
   */
  async function run(retryAfter: string) {
    const clock = createTestClock();
    const start = clock.wallNow();
    const minuteOf = (): number => Math.floor((clock.wallNow() - start) / MINUTE) + 1;
    const ok = new Map<number, number>();
    const throttled = new Set<string>();
    const deliveredAt = new Map<string, number>();
    const destination = (req: DeliveryRequest): Promise<TransportResult> => {
      const m = minuteOf();
      const key = req.items[0]!.key;
      if ((ok.get(m) ?? 0) >= 50) {
        throttled.add(key);
        return Promise.resolve({ status: 429, headers: { 'retry-after': retryAfter } });
      }
      ok.set(m, (ok.get(m) ?? 0) + 1);
      deliveredAt.set(key, m);
      return Promise.resolve({ status: 200 });
    };
    const queue = await openDeliveryQueue({
      store: 'sqlite::memory:',
      clock,
      destinations: {
        adobe: {
          url: 'https://destination.example/ingest',
          policy: 'adobe-configurable',
          batch: { maxItems: 1, maxAgeMs: 0 },
          concurrency: { initial: 100, max: 100, adaptive: false },
          maxPauseMs: 0, // no destination-wide pause: each item's own wait is what is shown
        },
      },
    });
    const worker = queue.createWorker({ clock, random: createSeededRandom(1), transport: destination, pollMs: 1_000, leaseMs: 120_000 });
    worker.start();
    const enqueue = (n: number, tag: string) =>
      queue.enqueueMany(
        'adobe',
        Array.from({ length: n }, (_, i) => ({ key: `${tag}-${i}`, payload: { i } })),
      );
    await enqueue(40, 'm1');
    await clock.advanceAsync(MINUTE);
    await enqueue(70, 'm2');
    await clock.advanceAsync(MINUTE);
    await enqueue(30, 'm3');
    await clock.advanceAsync(60 * MINUTE);
    const stats = (await queue.stats())[0]!;
    await worker.stop();
    await queue.close();
    return { throttled: [...throttled], minutes: [...throttled].map((k) => deliveredAt.get(k)), stats };
  }

  it('Retry-After: 5 → the 20 are retried at minute 32, not seconds later', async () => {
    const r = await run('5');
    expect(r.throttled).toHaveLength(20);
    expect(new Set(r.minutes)).toEqual(new Set([32]));
    expect(r.stats).toMatchObject({ deliveredItems: 140, droppedItems: 0 });
  });

  it('Retry-After: 2400 (40 min) → the 20 are retried at minute 42: the longer wait wins', async () => {
    const r = await run('2400');
    expect(r.throttled).toHaveLength(20);
    expect(new Set(r.minutes)).toEqual(new Set([42]));
    expect(r.stats).toMatchObject({ deliveredItems: 140, droppedItems: 0 });
  });
});
