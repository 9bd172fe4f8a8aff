import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RelentError } from '../../src/core/errors.js';
import { BULKHEAD_DEFAULTS, createBulkhead, type BulkheadOptions } from '../../src/run/bulkhead.js';

const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('createBulkhead', () => {
  it('takes free slots synchronously and refuses past the cap', () => {
    const b = createBulkhead({ maxConcurrent: 2 });
    expect(b.tryAcquire()).toBe(true);
    expect(b.tryAcquire()).toBe(true);
    expect(b.tryAcquire()).toBe(false);
    expect(b.active).toBe(2);
    expect(b.queued).toBe(0);
    b.release();
    expect(b.active).toBe(1);
    expect(b.tryAcquire()).toBe(true);
  });

  it('queues in FIFO order and hands each released slot to the longest waiter', async () => {
    const b = createBulkhead({ maxConcurrent: 1, maxQueue: 5 });
    await b.acquire();
    const order: number[] = [];
    const waits = [1, 2, 3].map((i) => b.acquire().then(() => order.push(i)));
    expect(b.queued).toBe(3);
    b.release();
    await flush();
    expect(order).toEqual([1]);
    expect(b.active).toBe(1); // handed over, not freed
    b.release();
    b.release();
    await Promise.all(waits);
    expect(order).toEqual([1, 2, 3]);
    expect(b.queued).toBe(0);
    expect(b.active).toBe(1);
    b.release();
    expect(b.active).toBe(0);
  });

  it('rejects at once with ERR_BULKHEAD_FULL when the queue is full', async () => {
    const b = createBulkhead({ maxConcurrent: 1, maxQueue: 1 });
    expect(b.tryAcquire()).toBe(true);
    const queued = b.acquire();
    const err = await b.acquire().catch((e: unknown) => e);
    expect(RelentError.is(err)).toBe(true);
    expect((err as RelentError).code).toBe('ERR_BULKHEAD_FULL');
    expect(b.queued).toBe(1);
    b.release();
    await queued;
  });

  it('with no queue (the default) rejects as soon as every slot is taken', async () => {
    const b = createBulkhead({ maxConcurrent: 1 });
    expect(b.options).toEqual({ maxConcurrent: 1, maxQueue: 0 });
    await b.acquire();
    await expect(b.acquire()).rejects.toMatchObject({ code: 'ERR_BULKHEAD_FULL' });
  });

  it('a waiter whose signal aborts leaves the queue; the next one gets the slot', async () => {
    const b = createBulkhead({ maxConcurrent: 1, maxQueue: 5 });
    b.tryAcquire();
    const ac = new AbortController();
    const first = b.acquire(ac.signal);
    let secondIn = false;
    const second = b.acquire().then(() => {
      secondIn = true;
    });
    expect(b.queued).toBe(2);
    const reason = new Error('gone');
    ac.abort(reason);
    await expect(first).rejects.toBe(reason);
    expect(b.queued).toBe(1);
    b.release();
    await second;
    expect(secondIn).toBe(true);
    expect(b.active).toBe(1);
  });

  it('an already aborted signal rejects without queueing or taking a slot', async () => {
    const b = createBulkhead({ maxConcurrent: 1, maxQueue: 1 });
    const ac = new AbortController();
    ac.abort();
    await expect(b.acquire(ac.signal)).rejects.toBeDefined();
    expect(b.active).toBe(0);
    expect(b.queued).toBe(0);
  });

  it('a release without a held slot is a bug and says so', () => {
    const b = createBulkhead({ maxConcurrent: 1 });
    expect(() => b.release()).toThrow(/without a slot/);
  });

  it('validates options, naming the option', () => {
    expect(createBulkhead().options).toEqual(BULKHEAD_DEFAULTS);
    expect(Object.isFrozen(BULKHEAD_DEFAULTS)).toBe(true);
    const cases: [unknown, string][] = [
      [{ maxConcurrent: 0 }, 'maxConcurrent'],
      [{ maxConcurrent: 1.5 }, 'maxConcurrent'],
      [{ maxConcurrent: '4' }, 'maxConcurrent'],
      [{ maxQueue: -1 }, 'maxQueue'],
      [{ maxQueue: Number.POSITIVE_INFINITY }, 'maxQueue'],
      [{ limit: 3 }, 'bulkhead.limit'],
    ];
    for (const [input, field] of cases) {
      let caught: unknown;
      try {
        createBulkhead(input as BulkheadOptions);
      } catch (e) {
        caught = e;
      }
      expect((caught as RelentError).code, JSON.stringify(input)).toBe('ERR_INVALID_POLICY');
      expect((caught as RelentError).field).toBe(field);
      expect((caught as RelentError).message).toContain(`\`${field}\``);
    }
  });

  it('property: active never exceeds the cap, queued never exceeds maxQueue, order is FIFO', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 0, max: 4 }),
        fc.array(fc.constantFrom('acquire', 'try', 'release', 'abort'), { maxLength: 80 }),
        async (maxConcurrent, maxQueue, ops) => {
          const b = createBulkhead({ maxConcurrent, maxQueue });
          let held = 0;
          let seq = 0;
          const waiting: { id: number; ac: AbortController }[] = [];
          const granted: number[] = [];
          for (const op of ops) {
            if (op === 'try') {
              if (b.tryAcquire()) held++;
            } else if (op === 'acquire') {
              const id = seq++;
              const ac = new AbortController();
              const before = b.active;
              const p = b.acquire(ac.signal);
              if (before < maxConcurrent) {
                held++;
                await p;
              } else {
                p.then(
                  () => {
                    held++;
                    granted.push(id);
                  },
                  () => {},
                );
                if (b.queued > waiting.length) waiting.push({ id, ac });
              }
            } else if (op === 'release' && held > 0) {
              held--;
              b.release();
            } else if (op === 'abort' && waiting.length > 0) {
              waiting.shift()!.ac.abort();
            }
            await flush();
            for (let i = waiting.length - 1; i >= 0; i--) if (granted.includes(waiting[i]!.id)) waiting.splice(i, 1);
            expect(b.active).toBeLessThanOrEqual(maxConcurrent);
            expect(b.active).toBe(held);
            expect(b.queued).toBeLessThanOrEqual(maxQueue);
            expect(b.queued).toBe(waiting.length);
          }
          const sorted = [...granted].sort((x, y) => x - y);
          expect(granted).toEqual(sorted);
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe('docs/protection-and-telemetry.md', () => {
  it('lists BULKHEAD_DEFAULTS as they are', async () => {
    const { readFileSync } = await import('node:fs');
    const doc = readFileSync(new URL('../../docs/protection-and-telemetry.md', import.meta.url), 'utf8');
    for (const [k, v] of Object.entries(BULKHEAD_DEFAULTS)) expect(doc, k).toContain(`| \`${k}\` | \`${v}\` |`);
  });
});
