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
import { describe, expect, it } from 'vitest';
import { openStore } from '../../src/delivery/store.js';
import { createWorker, type DeliveryEvent } from '../../src/delivery/worker.js';
import { DeliveryError } from '../../src/delivery/errors.js';
import type { DeliveryStore } from '../../src/delivery/types.js';
import type { DeliveryRequest, TransportResult } from '../../src/delivery/transport.js';
import { createSeededRandom, createTestClock } from '../../src/testing/index.js';

/** A real store whose outcome writes and lease renewals fail while `down` (the store out of reach for them). */
function withFailingWrites(store: DeliveryStore): { store: DeliveryStore; down: { on: boolean }; calls: string[] } {
  const down = { on: false };
  const calls: string[] = [];
  const unreachable = (what: string): Promise<never> => Promise.reject(new DeliveryError('ERR_STORE_UNAVAILABLE', `${store.description}: cannot reach the store (test); ${what} did not happen`));
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
      store, clock, random: createSeededRandom(1), transport, leaseMs: 10_000, pollMs: 500, onEvent: (e) => events.push(e),
      destinations: { d: { url: 'https://receiver.example/in', batch: { maxItems: 1, maxAgeMs: 0 }, concurrency: { initial: 4, adaptive: false } } },
    });
    await real.enqueue([0, 1, 2].map((i) => ({ destination: 'd', key: `k${i}`, payload: String(i) })), clock.wallNow());
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
