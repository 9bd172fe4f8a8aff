// Chaos into a delivery destination's policy: the worker sends nothing for an injected
// fault or outcome, stores the core's decision as for a real answer, and its attempt
// events say what was injected. A real node:http receiver counts what arrives.
import { afterEach, describe, expect, it } from 'vitest';
import { openDeliveryQueue } from '../../src/delivery/queue.js';
import type { DeliveryEvent } from '../../src/delivery/worker.js';
import { createSeededRandom } from '../../src/testing/index.js';
import { listen, waitFor, type Receiver } from './support.js';

let receivers: Receiver[] = [];
afterEach(async () => {
  await Promise.all(receivers.map((r) => r.close()));
  receivers = [];
});

async function receiver(): Promise<{ r: Receiver; count: () => number }> {
  let n = 0;
  const r = await listen((req, res) => {
    n++;
    req.resume();
    req.on('end', () => {
      res.writeHead(200);
      res.end('ok');
    });
  });
  receivers.push(r);
  return { r, count: () => n };
}

describe('delivery destinations with chaos', () => {
  it('an injected 503 at rate 1: nothing reaches the receiver, the batch is dropped by the rules, every attempt says injected', async () => {
    const { r, count } = await receiver();
    const events: DeliveryEvent[] = [];
    const queue = await openDeliveryQueue({
      store: 'sqlite::memory:',
      destinations: {
        d: {
          url: `${r.url}/in`,
          batch: { maxItems: 1, maxAgeMs: 0 },
          policy: { maxAttempts: 2, deadlineMs: 5_000, backoff: { kind: 'constant', delayMs: 10 }, budget: null, chaos: { outcome: { rate: 1, status: 503 } } },
        },
      },
    });
    const w = queue.createWorker({ random: createSeededRandom(3), pollMs: 20, onEvent: (e) => events.push(e) });
    w.start();
    await queue.enqueue('d', { n: 1 }, { key: 'k1' });
    await waitFor(async () => (await queue.list({ state: 'dropped' })).length === 1, 10_000, 'the batch dropped');
    await w.stop();
    await queue.close();
    expect(count()).toBe(0);
    const attempts = events.filter((e) => e.type === 'attempt');
    expect(attempts.map((e) => e.type === 'attempt' && [e.status, e.injected, e.decision])).toEqual([
      [503, 'outcome', 'retry'],
      [503, 'outcome', 'max_attempts'],
    ]);
  });

  it('a seeded share of injected faults: the receiver gets the rest, and every batch is delivered once', async () => {
    const { r, count } = await receiver();
    const events: DeliveryEvent[] = [];
    const queue = await openDeliveryQueue({
      store: 'sqlite::memory:',
      destinations: {
        d: {
          url: `${r.url}/in`,
          batch: { maxItems: 1, maxAgeMs: 0 },
          policy: {
            maxAttempts: 10,
            deadlineMs: 20_000,
            backoff: { kind: 'constant', delayMs: 5 },
            budget: null,
            chaos: { fault: { rate: 0.4, errorClass: 'connect_refused' } },
          },
        },
      },
    });
    const w = queue.createWorker({ random: createSeededRandom(4), pollMs: 20, onEvent: (e) => events.push(e) });
    w.start();
    for (let i = 0; i < 10; i++) await queue.enqueue('d', { n: i }, { key: `k${i}` });
    await waitFor(async () => (await queue.list({ state: 'delivered' })).length === 10, 15_000, 'ten batches delivered');
    await w.stop();
    await queue.close();
    const attempts = events.filter((e) => e.type === 'attempt');
    const injected = attempts.filter((e) => e.type === 'attempt' && e.injected === 'fault').length;
    expect(injected).toBeGreaterThan(0);
    expect(count()).toBe(attempts.length - injected);
    expect(count()).toBe(10);
  });
});
