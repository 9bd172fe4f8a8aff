// Fairness: ten destinations share one worker and one store; one of them is slow (2 s
// answers) or failing (503 at once). The healthy nine must keep at least 90 % of the
// throughput they have alone. Time is the test clock: the destinations are in-process
// and answer on it, and the store (a real SQLite file or PostgreSQL) is served one call
// at a time at 2 ms of virtual time a call. Time moves only when no store call is
// running, so the figures are exact and say whether the bad destination takes what the
// others need: slots, claims, store round trips, timers.
import { afterAll, describe, expect, it } from 'vitest';
import { openDeliveryQueue } from '../../src/delivery/queue.js';
import type { DeliveryRequest, TransportResult } from '../../src/delivery/transport.js';
import type { DeliveryStore } from '../../src/delivery/types.js';
import { createSeededRandom, createTestClock, type TestClock } from '../../src/testing/index.js';
import { pgEnabled, postgresFactory, sqliteFactory, type StoreFactory } from './support.js';

const withPg = await pgEnabled();
const factories: StoreFactory[] = [sqliteFactory()];
if (withPg) factories.push(postgresFactory());

afterAll(async () => {
  for (const f of factories) await f.cleanup();
});

const HEALTHY = 9;
const ITEMS = 120; // per healthy destination
const ANSWER_MS = 10; // a healthy destination's answer time
const STORE_MS = 2; // virtual time per store call

/**
 * The store as one shared server on the test clock: calls are served one at a time, each
 * taking STORE_MS of virtual time before it runs against the real database (so store
 * round trips cost time, and a destination that makes many of them takes it from the
 * others). `idle()` waits until no call is running for real.
 */
function served(store: DeliveryStore, clock: TestClock): { store: DeliveryStore; idle: () => Promise<void>; timed: (on: boolean) => void } {
  let running = 0;
  let on = false; // before and after the measured run, calls go straight through
  let queue: Promise<unknown> = Promise.resolve();
  const proxy = new Proxy(store, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function' || prop === 'close' || prop === 'subscribe') return v;
      return (...args: unknown[]) => {
        const call = (): Promise<unknown> => {
          running++;
          return (v as (...a: unknown[]) => Promise<unknown>).apply(target, args).finally(() => running--);
        };
        if (!on) return call();
        const turn = queue
          .then(() => new Promise<void>((r) => clock.setTimer(r, STORE_MS)))
          .then(() => {
            running++;
            return (v as (...a: unknown[]) => Promise<unknown>).apply(target, args).finally(() => running--);
          });
        queue = turn.catch(() => {});
        return turn;
      };
    },
  });
  const idle = async (): Promise<void> => {
    do await new Promise((r) => setImmediate(r));
    while (running > 0);
  };
  return {
    store: proxy,
    idle,
    timed: (v) => {
      on = v;
    },
  };
}

/** Virtual ms until the nine healthy destinations have delivered everything. */
async function runNine(f: StoreFactory, bad: 'slow' | 'failing' | null): Promise<{ ms: number; badCalls: number }> {
  const clock = createTestClock();
  const { store, idle, timed } = served(await f.open(), clock);
  const names = Array.from({ length: HEALTHY }, (_, i) => `ok${i}`);
  const destinations: Record<
    string,
    { url: string; policy: string; batch: { maxItems: number; maxAgeMs: number }; concurrency: { initial: number; adaptive: boolean } }
  > = {};
  for (const n of [...names, ...(bad ? ['bad'] : [])]) {
    destinations[n] = {
      url: `https://${n}.example/in`,
      policy: 'adobe-best-effort',
      batch: { maxItems: 1, maxAgeMs: 0 },
      concurrency: { initial: 4, adaptive: false },
    };
  }
  const queue = await openDeliveryQueue({ store, clock, destinations });
  for (const n of Object.keys(destinations))
    await queue.enqueueMany(
      n,
      Array.from({ length: ITEMS }, (_, i) => ({ key: `k${i}`, payload: { i } })),
    );
  let delivered = 0;
  let badCalls = 0;
  const transport = (req: DeliveryRequest): Promise<TransportResult> => {
    if (req.destination.name === 'bad') {
      badCalls++;
      if (bad === 'failing') return Promise.resolve({ status: 503 });
      return new Promise((r) => clock.setTimer(() => r({ status: 200 }), 2_000));
    }
    return new Promise((r) =>
      clock.setTimer(() => {
        delivered++;
        r({ status: 200 });
      }, ANSWER_MS),
    );
  };
  const worker = queue.createWorker({ clock, random: createSeededRandom(1), transport, pollMs: 100, leaseMs: 30_000, stopTimeoutMs: 0 });
  const t0 = clock.now();
  timed(true);
  worker.start();
  let end = Number.NaN;
  for (let steps = 0; steps < 200_000; steps++) {
    await idle();
    if (delivered >= HEALTHY * ITEMS) {
      end = clock.now();
      break;
    }
    if (!(await clock.next())) break;
  }
  timed(false);
  let stopped = false;
  const stopping = worker.stop().then(() => {
    stopped = true;
  });
  while (!stopped) {
    // store calls still queued on the clock finish
    await idle();
    await clock.next();
  }
  await stopping;
  await store.close();
  expect(delivered).toBe(HEALTHY * ITEMS);
  return { ms: end - t0, badCalls };
}

for (const f of factories) {
  describe(`fairness on ${f.name}: ten destinations, one bad`, () => {
    it('a slow destination (2 s answers) or a failing one (503) leaves the healthy nine at least 90 % of their throughput alone', async () => {
      const alone = await runNine(f, null);
      const slow = await runNine(f, 'slow');
      const failing = await runNine(f, 'failing');
      const share = (x: { ms: number }): number => alone.ms / x.ms;
      console.log(
        `fairness ${f.name}: nine alone ${alone.ms} ms (virtual) for ${HEALTHY * ITEMS} items; with a slow one ${slow.ms} ms (${(100 * share(slow)).toFixed(0)} %), with a failing one ${failing.ms} ms (${(100 * share(failing)).toFixed(0)} %)`,
      );
      // The bad destination was busy meanwhile (it is not starved either)...
      expect(slow.badCalls).toBeGreaterThan(0);
      expect(failing.badCalls).toBeGreaterThan(0);
      // ...and the nine keep at least 90 % of their throughput alone.
      expect(share(slow)).toBeGreaterThanOrEqual(0.9);
      expect(share(failing)).toBeGreaterThanOrEqual(0.9);
      // Alone, the nine run at their concurrency: 4 in flight each, 10 ms an answer.
      expect(alone.ms).toBeLessThanOrEqual(Math.ceil(ITEMS / 4) * ANSWER_MS * 2);
    }, 120_000);
  });
}
