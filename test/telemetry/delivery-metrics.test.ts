// Operations metrics of a delivery queue (relent/otel createDeliveryMetrics), read with
// the OpenTelemetry SDK's in-memory exporter: depth per destination and state, the age
// of the oldest waiting item, paused destinations, and deliveries, retries, deferrals
// and drops per destination. A real (in-memory SQLite) queue on the test clock.
import { afterEach, describe, expect, it } from 'vitest';
import { openDeliveryQueue } from '../../src/delivery/queue.js';
import type { DeliveryRequest, TransportResult } from '../../src/delivery/transport.js';
import { createDeliveryMetrics, DELIVERY_METRICS } from '../../src/telemetry/otel.js';
import { createSeededRandom, createTestClock } from '../../src/testing/index.js';
import { points, setupOtel } from './otel-helpers.js';

let otel: ReturnType<typeof setupOtel> | null = null;
afterEach(async () => {
  await otel?.shutdown();
  otel = null;
});

const value = (ps: { attributes: Record<string, unknown>; value: unknown }[], attrs: Record<string, unknown>): unknown =>
  ps.find((p) => Object.entries(attrs).every(([k, v]) => p.attributes[k] === v))?.value;

describe('delivery queue metrics', () => {
  it('depth by state, oldest age and paused (gauges from stats); delivered, deferred, dropped and retries per destination (counters from events)', async () => {
    otel = setupOtel();
    const clock = createTestClock();
    const dest = (name: string) => ({ url: `https://${name}.example/in`, policy: 'adobe-best-effort', batch: { maxItems: 1, maxAgeMs: 0 } });
    const queue = await openDeliveryQueue({ store: 'sqlite::memory:', clock, destinations: { ok: dest('ok'), flaky: dest('flaky'), held: dest('held') } });
    const m = createDeliveryMetrics(queue, { meterProvider: otel.meterProvider, now: () => clock.wallNow(), minIntervalMs: 0 });
    let flaky = 0;
    const transport = (req: DeliveryRequest): Promise<TransportResult> => {
      if (req.destination.name === 'flaky') return Promise.resolve({ status: ++flaky <= 4 ? 503 : 400 }); // 503, 503 (retries), then 400 drops
      return Promise.resolve({ status: 200 });
    };
    await queue.enqueueMany('ok', [
      { key: 'a', payload: 1 },
      { key: 'b', payload: 2 },
    ]);
    await queue.enqueueMany('flaky', [
      { key: 'x', payload: 1 },
      { key: 'y', payload: 2 },
    ]);
    await queue.enqueueMany('held', [{ key: 'h', payload: 1 }]);
    expect(await queue.pause('held')).toBe(true);
    const worker = queue.createWorker({ clock, random: createSeededRandom(3), transport, onEvent: m.onEvent, pollMs: 1_000 });
    worker.start();
    await clock.advanceAsync(1_000); // ok: both delivered; flaky: both 503 (deferred 15 s)
    let ms = await otel.metrics();
    const depth = points(ms, DELIVERY_METRICS.items) as unknown as { attributes: Record<string, unknown>; value: unknown }[];
    expect(value(depth, { 'relent.delivery.destination': 'flaky', 'relent.delivery.state': 'deferred' })).toBe(2);
    // Paused: waiting, not batched (a batch is sealed as it is claimed, and a paused destination is not claimed).
    expect([
      value(depth, { 'relent.delivery.destination': 'held', 'relent.delivery.state': 'pending' }),
      value(depth, { 'relent.delivery.destination': 'held', 'relent.delivery.state': 'ready' }),
    ]).toEqual([1, 0]);
    expect(value(depth, { 'relent.delivery.destination': 'ok', 'relent.delivery.state': 'ready' })).toBe(0);
    const age = points(ms, DELIVERY_METRICS.oldestAge) as unknown as { attributes: Record<string, unknown>; value: unknown }[];
    expect(value(age, { 'relent.delivery.destination': 'held' })).toBe(1); // enqueued 1 s ago, still waiting
    expect(value(age, { 'relent.delivery.destination': 'ok' })).toBeUndefined(); // nothing waits
    const paused = points(ms, DELIVERY_METRICS.paused) as unknown as { attributes: Record<string, unknown>; value: unknown }[];
    expect([value(paused, { 'relent.delivery.destination': 'held' }), value(paused, { 'relent.delivery.destination': 'flaky' })]).toEqual([1, 0]);

    await clock.advanceAsync(60_000); // flaky: second attempt 503 (deferred 30 s), third 400: dropped
    ms = await otel.metrics();
    const batches = points(ms, DELIVERY_METRICS.batches) as unknown as { attributes: Record<string, unknown>; value: unknown }[];
    expect(value(batches, { 'relent.delivery.destination': 'ok', 'relent.delivery.outcome': 'delivered' })).toBe(2);
    expect(value(batches, { 'relent.delivery.destination': 'flaky', 'relent.delivery.outcome': 'deferred' })).toBe(4);
    expect(value(batches, { 'relent.delivery.destination': 'flaky', 'relent.delivery.outcome': 'dropped', 'relent.terminal_reason': 'not_retryable' })).toBe(2);
    const items = points(ms, DELIVERY_METRICS.items_done) as unknown as { attributes: Record<string, unknown>; value: unknown }[];
    expect(value(items, { 'relent.delivery.destination': 'flaky', 'relent.delivery.outcome': 'dropped' })).toBe(2);
    const retries = points(ms, DELIVERY_METRICS.retries) as unknown as { attributes: Record<string, unknown>; value: unknown }[];
    expect(value(retries, { 'relent.delivery.destination': 'flaky' })).toBe(4); // attempts 2 and 3 of two batches
    expect(value(retries, { 'relent.delivery.destination': 'ok' })).toBeUndefined();
    // No id on any metric: destination names and closed vocabularies only.
    for (const mt of ms) for (const p of mt.dataPoints) expect(Object.keys(p.attributes).every((k) => k.startsWith('relent.'))).toBe(true);

    // After resume the held item goes out, and the gauges say so.
    expect(await queue.resume('held')).toBe(true);
    await clock.advanceAsync(1_000);
    ms = await otel.metrics();
    const after = points(ms, DELIVERY_METRICS.paused) as unknown as { attributes: Record<string, unknown>; value: unknown }[];
    expect(value(after, { 'relent.delivery.destination': 'held' })).toBe(0);
    expect(value(points(ms, DELIVERY_METRICS.batches) as never, { 'relent.delivery.destination': 'held', 'relent.delivery.outcome': 'delivered' })).toBe(1);
    m.close();
    await worker.stop();
    await queue.close();
  });

  it('reads stats() at most once per minIntervalMs, and a failing read keeps the last figures', async () => {
    otel = setupOtel();
    let reads = 0;
    let fail = false;
    let t = 0;
    const source = {
      stats: () => {
        reads++;
        if (fail) return Promise.reject(new Error('database down'));
        return Promise.resolve([{ destination: 'd', pendingItems: reads, readyItems: 0, inflightItems: 0, deferredItems: 0 }]);
      },
    };
    createDeliveryMetrics(source, { meterProvider: otel.meterProvider, now: () => t, minIntervalMs: 5_000 });
    const pending = async (): Promise<unknown> => value(points(await otel!.metrics(), DELIVERY_METRICS.items) as never, { 'relent.delivery.state': 'pending' });
    expect(await pending()).toBe(1);
    t = 1_000;
    expect(await pending()).toBe(1); // cached
    t = 6_000;
    expect(await pending()).toBe(2);
    fail = true;
    t = 12_000;
    expect(await pending()).toBe(2); // the read failed: last figures
    expect(reads).toBe(3);
  });
});
