// The pure parts: the sliding-window rate limit, AIMD, batch cutting and keys, config
// validation, and the defaults table of docs/delivery.md against the code.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { SlidingWindowLimiter } from '../../src/delivery/limits.js';
import { createLimitAlgorithm } from '../../src/core/concurrency.js';
import { batchKey, cutBatches, encodeBatch } from '../../src/delivery/batching.js';
import { DESTINATION_DEFAULTS, WORKER_DEFAULTS, parseDeliveryConfig, resolveDestination } from '../../src/delivery/config.js';
import { DeliveryError } from '../../src/delivery/errors.js';
import { classifyThrown } from '../../src/delivery/worker.js';
import { POSTGRES_DEFAULTS } from '../../src/delivery/postgres-store.js';

describe('SlidingWindowLimiter', () => {
  it('never allows more than `requests` starts in any window of perMs (property)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 1, max: 1000 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 300 }), fc.integer({ min: 0, max: 30 })), { maxLength: 60 }),
        (requests, perMs, steps) => {
          const l = new SlidingWindowLimiter(requests, perMs);
          const starts: number[] = [];
          let now = 0;
          for (const [dt, want] of steps) {
            now += dt;
            const n = Math.min(want, l.available(now));
            l.take(n, now);
            for (let i = 0; i < n; i++) starts.push(now);
            expect(l.nextAt(now)).toBeGreaterThanOrEqual(now);
          }
          for (const t of starts) expect(starts.filter((x) => x >= t && x < t + perMs).length).toBeLessThanOrEqual(requests);
        },
      ),
    );
  });
});

describe("a destination's AIMD (the core's, shared with the HTTP client)", () => {
  it('halves once per wave of 429s, grows by one per `limit` successes while used, stays within [min, max]', () => {
    const a = createLimitAlgorithm({ kind: 'aimd', initial: 32, min: 2, max: 40, decrease: 0.5 });
    const sample = (dropped: boolean, generation = a.generation) => a.sample({ startedAt: 0, now: 1, inFlight: a.limit, generation, dropped });
    const wave = a.generation;
    expect(sample(true, wave)).toBe('decrease');
    expect(a.limit).toBe(16);
    expect(sample(true, wave)).toBeNull(); // same wave: no second cut
    expect(a.limit).toBe(16);
    for (let i = 0; i < 15; i++) sample(false);
    expect(a.limit).toBe(16);
    expect(sample(false)).toBe('increase');
    expect(a.limit).toBe(17);
    for (let i = 0; i < 10; i++) sample(true);
    expect(a.limit).toBe(2);
  });
});

describe('batches', () => {
  const row = (i: number, bytes = 10, at = 0) => ({ id: i, key: `k${i}`, bytes, enqueuedAt: at });

  it('cuts at maxItems or maxBytes, seals a young partial batch only by age, and respects maxBatches (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 50 }), { maxLength: 40 }),
        fc.integer({ min: 1, max: 8 }),
        fc.integer({ min: 1, max: 120 }),
        fc.integer({ min: 1, max: 10 }),
        fc.boolean(),
        (sizes, maxItems, maxBytes, maxBatches, old) => {
          const rows = sizes.map((b, i) => row(i, b, 0));
          const { cuts, nextAt } = cutBatches('d', rows, { maxItems, maxBytes, maxAgeMs: 1000 }, old ? 1000 : 999, maxBatches);
          expect(cuts.length).toBeLessThanOrEqual(maxBatches);
          const flat = cuts.flatMap((c) => c.rows.map((r) => r.id));
          expect(flat).toEqual(flat.map((_, i) => i)); // in order, no gaps, no repeats
          for (const c of cuts) {
            expect(c.rows.length).toBeLessThanOrEqual(maxItems);
            expect(c.rows.length === 1 || c.bytes <= maxBytes).toBe(true);
            expect(c.key).toBe(
              batchKey(
                'd',
                c.rows.map((r) => r.key),
              ),
            );
          }
          if (old && maxBatches >= rows.length) expect(flat.length).toBe(rows.length);
          if (flat.length === rows.length) expect(nextAt).toBeNull();
          else expect(nextAt).toBe(cuts.length >= maxBatches ? (old ? 1000 : 999) : 1000); // more now, or when the leftover is 1000 ms old
        },
      ),
    );
  });

  it('a batch key depends on the destination and the exact item keys', () => {
    expect(batchKey('d', ['a', 'b'])).toBe(batchKey('d', ['a', 'b']));
    expect(
      new Set([batchKey('d', ['a', 'b']), batchKey('d', ['b', 'a']), batchKey('e', ['a', 'b']), batchKey('d', ['a\0b']), batchKey('d', ['ab'])]).size,
    ).toBe(5);
  });

  it('encodes the four body formats, payloads spliced in as stored', () => {
    const items = [
      { key: 'a', payload: '{"x":1}' },
      { key: 'b', payload: '"y"' },
    ];
    expect(encodeBatch('envelope', 'K', items)).toEqual({
      body: '{"key":"K","items":[{"key":"a","payload":{"x":1}},{"key":"b","payload":"y"}]}',
      contentType: 'application/json',
    });
    expect(encodeBatch('array', 'K', items).body).toBe('[{"x":1},"y"]');
    expect(encodeBatch('ndjson', 'K', items)).toEqual({ body: '{"x":1}\n"y"\n', contentType: 'application/x-ndjson' });
    expect(encodeBatch('single', 'K', items.slice(0, 1)).body).toBe('{"x":1}');
  });
});

describe('config', () => {
  it('fills the defaults and compiles the policy', () => {
    const d = resolveDestination('adobe', { url: 'https://x.example/in' });
    expect(d.batch).toEqual(DESTINATION_DEFAULTS.batch);
    expect(d.policy.name).toBe('adobe-best-effort');
    expect(d.concurrency).toMatchObject({ initial: 8, min: 1, max: 64, adaptive: true });
    expect(parseDeliveryConfig({ destinations: { a: { url: 'http://x/' } } }).worker).toEqual(WORKER_DEFAULTS);
  });

  it('errors name the field', () => {
    const err = (f: () => unknown): string => {
      try {
        f();
      } catch (e) {
        expect(DeliveryError.is(e)).toBe(true);
        return `${(e as DeliveryError).field} | ${(e as Error).message}`;
      }
      throw new Error('no error');
    };
    expect(err(() => resolveDestination('a', { url: 'ftp://x/' }))).toMatch(/^destinations\.a\.url \| Expected `destinations\.a\.url` to be an absolute http/);
    expect(err(() => resolveDestination('a', { url: 'http://x/', rateLimit: { requests: 0 } }))).toMatch(/^destinations\.a\.rateLimit\.requests \|/);
    expect(err(() => resolveDestination('a', { url: 'http://x/', headers: { 'Idempotency-Key': 'x' } }))).toMatch(/relent sets it/);
    expect(err(() => resolveDestination('a', { url: 'http://x/', format: 'single' }))).toMatch(
      /`destinations\.a\.batch\.maxItems` to be 1 with format "single"/,
    );
    expect(err(() => resolveDestination('a', { url: 'http://x/', policy: { maxAttempts: 0 } }))).toMatch(
      /^destinations\.a\.policy\.maxAttempts \| destinations\.a\.policy: Expected `maxAttempts`/,
    );
    expect(err(() => parseDeliveryConfig({ destinations: {} }, 'f.json'))).toMatch(
      /f\.json: Expected `destinations` to be an object with at least one destination/,
    );
    expect(err(() => resolveDestination('bad name', { url: 'http://x/' }))).toMatch(/a name of 1-100 letters/);
  });
});

describe('classifyThrown', () => {
  it('maps undici/Node error codes through src/http/classify.ts', () => {
    expect(classifyThrown(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }))).toEqual({ errorClass: 'connect_refused', sent: 'not_sent' });
    expect(classifyThrown(Object.assign(new Error('x'), { code: 'ECONNRESET' }))).toEqual({ errorClass: 'reset', sent: 'unknown' });
    expect(classifyThrown(Object.assign(new Error('x'), { code: 'UND_ERR_HEADERS_TIMEOUT' }))).toEqual({ errorClass: 'timeout', sent: 'unknown' });
    expect(classifyThrown(new Error('?'))).toEqual({ errorClass: 'error', sent: 'unknown' });
  });
});

describe('docs/delivery.md', () => {
  it('states the defaults the code has', () => {
    const doc = readFileSync(fileURLToPath(new URL('../../docs/delivery.md', import.meta.url)), 'utf8');
    const row = (name: string): string => {
      const line = doc.split('\n').find((l) => l.startsWith(`| \`${name}\``));
      if (!line) throw new Error(`docs/delivery.md has no row for ${name}`);
      return line.split('|')[2]!.trim();
    };
    const b = DESTINATION_DEFAULTS;
    expect(row('policy')).toBe(`\`"${b.policy}"\``);
    expect(row('batch.maxItems')).toBe(`${b.batch.maxItems}`);
    expect(row('batch.maxBytes')).toBe(`${b.batch.maxBytes}`);
    expect(row('batch.maxAgeMs')).toBe(`${b.batch.maxAgeMs}`);
    expect(row('concurrency.initial')).toBe(`${b.concurrency.initial}`);
    expect(row('concurrency.max')).toBe(`${b.concurrency.max}`);
    expect(row('maxPauseMs')).toBe(`${b.maxPauseMs}`);
    expect(row('leaseMs')).toBe(`${WORKER_DEFAULTS.leaseMs}`);
    expect(row('pollMs')).toBe(`${WORKER_DEFAULTS.pollMs}`);
    expect(row('stopTimeoutMs')).toBe(`${WORKER_DEFAULTS.stopTimeoutMs}`);
    expect(row('retainDeliveredMs')).toBe(`${WORKER_DEFAULTS.retainDeliveredMs}`);
    expect(row('retainDroppedMs')).toBe(`${WORKER_DEFAULTS.retainDroppedMs}`);
    expect(row('concurrency.scope')).toBe(`\`"${b.concurrency.scope}"\``);
    expect(row('storeTimeoutMs')).toBe(`${WORKER_DEFAULTS.storeTimeoutMs}`);
    for (const k of ['connectTimeoutMs', 'queryTimeoutMs', 'statementTimeoutMs', 'keepAliveMs'] as const) expect(row(k)).toBe(`${POSTGRES_DEFAULTS[k]}`);
  });
});
