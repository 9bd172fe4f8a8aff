// Seed 001's worked example (Adobe Destination SDK, configurable aggregation): a
// destination that answers 429 above 50,000 requests a minute. Minute 1: 40,000 sent,
// all succeed; minute 2: 70,000 sent, 50,000 succeed, 20,000 get 429 and are retried
// 30 minutes later; minute 3: 30,000 succeed; minute 32: the 20,000 succeed.
// In virtual time (test clock, in-memory SQLite, an in-process destination) at full
// scale, and in real time at 1/1000 scale against a real node:http server.
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDeliveryQueue } from '../../src/delivery/queue.js';
import type { DeliveryRequest, TransportResult } from '../../src/delivery/transport.js';
import { createSeededRandom, createTestClock } from '../../src/testing/index.js';
import { listen, waitFor } from './support.js';

const LIMIT = 50_000;
const MINUTE = 60_000;

interface MinuteCounts {
  sent: number;
  ok: number;
  throttled: number;
}

describe('seed 001 worked example, virtual time, full scale', () => {
  it('40,000 → 50,000 + 20,000 deferred → 30,000 → minute 32: the 20,000', async () => {
    const clock = createTestClock();
    const start = clock.wallNow();
    const minutes = new Map<number, MinuteCounts>();
    const minuteOf = (): number => Math.floor((clock.wallNow() - start) / MINUTE) + 1;
    // The destination: at most 50,000 successful requests per minute, 429 above.
    const destination = (_req: DeliveryRequest): Promise<TransportResult> => {
      const m = minuteOf();
      let c = minutes.get(m);
      if (!c) minutes.set(m, (c = { sent: 0, ok: 0, throttled: 0 }));
      c.sent++;
      if (c.ok >= LIMIT) {
        c.throttled++;
        return Promise.resolve({ status: 429 });
      }
      c.ok++;
      return Promise.resolve({ status: 200 });
    };
    const queue = await openDeliveryQueue({
      store: 'sqlite::memory:',
      clock,
      destinations: {
        adobe: {
          url: 'https://destination.example/ingest',
          policy: 'adobe-configurable',
          // one profile batch per request, as the example counts requests; no local limit: Adobe sends all 70,000
          batch: { maxItems: 1, maxAgeMs: 0 },
          concurrency: { initial: 5_000, max: 5_000, adaptive: false },
        },
      },
    });
    const worker = queue.createWorker({ clock, random: createSeededRandom(1), transport: destination, pollMs: 1_000, claimChunk: 5_000, leaseMs: 120_000 });
    worker.start();
    const rows: string[] = [];
    const snapshot = async (label: string): Promise<{ delivered: number; deferred: number; dropped: number }> => {
      const s = (await queue.stats())[0]!;
      const r = { delivered: s.deliveredBatches, deferred: s.deferredBatches, dropped: s.droppedBatches };
      const c = minutes.get(Number(label)) ?? { sent: 0, ok: 0, throttled: 0 };
      rows.push(
        `${label.padStart(6)}  ${String(c.sent).padStart(7)}  ${String(c.ok).padStart(7)}  ${String(c.throttled).padStart(7)}  ${String(r.delivered).padStart(9)}  ${String(r.deferred).padStart(8)}  ${String(r.dropped).padStart(7)}`,
      );
      return r;
    };
    const enqueue = (n: number, tag: string) =>
      queue.enqueueMany(
        'adobe',
        Array.from({ length: n }, (_, i) => ({ key: `${tag}-${i}`, payload: { profile: `${tag}-${i}` } })),
      );

    await enqueue(40_000, 'm1');
    await clock.advanceAsync(MINUTE - 1);
    expect(await snapshot('1')).toEqual({ delivered: 40_000, deferred: 0, dropped: 0 });
    await clock.advanceAsync(1);

    await enqueue(70_000, 'm2');
    await clock.advanceAsync(MINUTE - 1);
    expect(await snapshot('2')).toEqual({ delivered: 90_000, deferred: 20_000, dropped: 0 });
    await clock.advanceAsync(1);

    await enqueue(30_000, 'm3');
    await clock.advanceAsync(MINUTE - 1);
    expect(await snapshot('3')).toEqual({ delivered: 120_000, deferred: 20_000, dropped: 0 });
    await clock.advanceAsync(1);

    await clock.advanceAsync(28 * MINUTE - 1); // minutes 4..31: nothing is due
    expect(await snapshot('31')).toEqual({ delivered: 120_000, deferred: 20_000, dropped: 0 });
    await clock.advanceAsync(1);
    await clock.advanceAsync(MINUTE - 1);
    expect(await snapshot('32')).toEqual({ delivered: 140_000, deferred: 0, dropped: 0 });

    expect(Object.fromEntries([...minutes].map(([m, c]) => [m, c]))).toEqual({
      1: { sent: 40_000, ok: 40_000, throttled: 0 },
      2: { sent: 70_000, ok: 50_000, throttled: 20_000 },
      3: { sent: 30_000, ok: 30_000, throttled: 0 },
      32: { sent: 20_000, ok: 20_000, throttled: 0 },
    });
    // The history of a rate-limited batch: 429 at 1:00, retried at 31:00 (the preset's 30 minutes, decided by the core).
    const retried = (await queue.list({ state: 'delivered', limit: 1, afterId: 40_000 + 50_000 }))[0]!;
    const detail = (await queue.show(retried.id))!;
    expect(detail.attempts.map((a) => [a.attempt, a.status, a.decision, a.delayMs, a.at - start])).toEqual([
      [1, 429, 'retry', 1_800_000, 60_000],
      [2, 200, 'return', null, 1_860_000],
    ]);
    console.log(
      [
        '',
        'seed 001 worked example (virtual time, adobe-configurable, destination limit 50,000/min):',
        'minute     sent       ok      429  delivered  deferred  dropped',
        ...rows,
      ].join('\n'),
    );
    await worker.stop();
    await queue.close();
  }, 120_000);
});

describe('seed 001 worked example, real time at 1/1000 scale, real HTTP server', () => {
  const dir = mkdtempSync(join(tmpdir(), 'relent-we-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('the same four minutes against node:http on loopback; the retry waits the (scaled) 30 minutes', async () => {
    let minute = 1;
    const counts = new Map<number, MinuteCounts>();
    const throttledAt = new Map<string, number>();
    const retriedAt = new Map<string, number>();
    const seen = new Set<string>();
    const server = await listen((req, res) => {
      req.resume();
      req.on('end', () => {
        const key = String(req.headers['idempotency-key']);
        let c = counts.get(minute);
        if (!c) counts.set(minute, (c = { sent: 0, ok: 0, throttled: 0 }));
        c.sent++;
        if (seen.has(key)) retriedAt.set(key, Date.now());
        seen.add(key);
        if (c.ok >= 50) {
          c.throttled++;
          throttledAt.set(key, Date.now());
          res.writeHead(429).end();
          return;
        }
        c.ok++;
        res.writeHead(200).end('ok');
      });
    });
    const scaledHalfHourMs = 1_800; // 30 minutes / 1000
    const queue = await openDeliveryQueue({
      store: `sqlite:${join(dir, 'we.db')}`,
      destinations: {
        adobe: {
          url: `${server.url}/ingest`,
          policy: { preset: 'adobe-configurable', backoff: { kind: 'schedule', delaysMs: [scaledHalfHourMs] } },
          batch: { maxItems: 1, maxAgeMs: 0 },
          concurrency: { initial: 16, adaptive: false },
        },
      },
    });
    const worker = queue.createWorker({ pollMs: 20 });
    worker.start();
    const total = (m: number): MinuteCounts => counts.get(m) ?? { sent: 0, ok: 0, throttled: 0 };
    const enqueue = (n: number, tag: string) =>
      queue.enqueueMany(
        'adobe',
        Array.from({ length: n }, (_, i) => ({ key: `${tag}-${i}`, payload: { i } })),
      );
    try {
      await enqueue(40, 'm1');
      await waitFor(() => total(1).sent === 40, 10_000, 'minute 1');
      minute = 2;
      await enqueue(70, 'm2');
      await waitFor(() => total(2).sent === 70, 10_000, 'minute 2');
      await waitFor(async () => (await queue.stats())[0]!.deferredBatches === 20, 5_000, 'the 20 deferrals to be stored');
      minute = 3;
      await enqueue(30, 'm3');
      await waitFor(() => total(3).sent === 30, 10_000, 'minute 3');
      minute = 32;
      await waitFor(() => total(32).sent === 20, 15_000, 'minute 32');
      await waitFor(async () => (await queue.stats())[0]!.deliveredBatches === 140, 5_000, 'all delivered');
      expect([1, 2, 3, 32].map((m) => total(m))).toEqual([
        { sent: 40, ok: 40, throttled: 0 },
        { sent: 70, ok: 50, throttled: 20 },
        { sent: 30, ok: 30, throttled: 0 },
        { sent: 20, ok: 20, throttled: 0 },
      ]);
      // each of the 20 went out again, and never earlier than the policy's (scaled) 30 minutes after its 429
      expect([...retriedAt.keys()].sort()).toEqual([...throttledAt.keys()].sort());
      for (const [key, at] of retriedAt) expect(at - throttledAt.get(key)!).toBeGreaterThanOrEqual(scaledHalfHourMs);
      const st = (await queue.stats())[0]!;
      expect([st.deliveredItems, st.droppedItems, st.deferredBatches, st.inflightBatches]).toEqual([140, 0, 0, 0]);
    } finally {
      await worker.stop();
      await queue.close();
      await server.close();
    }
  }, 60_000);
});
