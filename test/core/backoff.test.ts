import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { BACKOFF_KINDS, backoffCeiling, computeBackoff, normalizeBackoff, type BackoffSpec } from '../../src/core/backoff.js';
import { createSeededRandom } from '../../src/core/random.js';
import { constantRandom } from '../../src/testing/index.js';

const lo = constantRandom(0);
const hi = constantRandom(0.999999);

describe('strategies (R7)', () => {
  it('constant', () => {
    const s = normalizeBackoff({ kind: 'constant', delayMs: 40 });
    expect([0, 1, 2, 50].map((n) => computeBackoff(s, n, null, hi))).toEqual([40, 40, 40, 40]);
  });
  it('exponential without jitter doubles to the cap', () => {
    const s = normalizeBackoff({ kind: 'exponential', baseMs: 100, capMs: 1000 });
    expect([0, 1, 2, 3, 4, 5].map((n) => computeBackoff(s, n, null, hi))).toEqual([100, 200, 400, 800, 1000, 1000]);
  });
  it('full jitter is U[0, min(cap, base·2^n))', () => {
    const s = normalizeBackoff({ kind: 'full-jitter', baseMs: 200, capMs: 10_000 });
    expect([0, 1, 2, 6, 7].map((n) => computeBackoff(s, n, null, lo))).toEqual([0, 0, 0, 0, 0]);
    expect([0, 1, 2, 5, 6, 7].map((n) => computeBackoff(s, n, null, hi))).toEqual([199, 399, 799, 6399, 9999, 9999]);
  });
  it('equal jitter keeps half: [v/2, v)', () => {
    const s = normalizeBackoff({ kind: 'equal-jitter', baseMs: 100, capMs: 10_000 });
    expect([0, 1, 2].map((n) => computeBackoff(s, n, null, lo))).toEqual([50, 100, 200]);
    expect([0, 1, 2].map((n) => computeBackoff(s, n, null, hi))).toEqual([99, 199, 399]);
  });
  it('decorrelated jitter is min(cap, U[base, 3·prev)), prev starting at base', () => {
    const s = normalizeBackoff({ kind: 'decorrelated-jitter', baseMs: 5, capMs: 2000 });
    expect(computeBackoff(s, 0, null, lo)).toBe(5);
    expect(computeBackoff(s, 0, null, hi)).toBe(14);
    expect(computeBackoff(s, 3, 100, hi)).toBe(299);
    expect(computeBackoff(s, 3, 1000, hi)).toBe(2000);
  });
  it('truncated exponential (Model Armor) is min(2^n s + U[0,1) s, cap)', () => {
    const s = normalizeBackoff({ kind: 'truncated-exponential', baseMs: 1000, capMs: 32_000 });
    expect([0, 1, 2, 3, 4, 5, 6].map((n) => computeBackoff(s, n, null, lo))).toEqual([1000, 2000, 4000, 8000, 16_000, 32_000, 32_000]);
    expect([0, 1, 2, 3, 4, 5].map((n) => computeBackoff(s, n, null, hi))).toEqual([1999, 2999, 4999, 8999, 16_999, 32_000]);
  });
  it('schedule (Adobe) takes the list, then repeats the last entry', () => {
    const s = normalizeBackoff({ kind: 'schedule', delaysMs: [15_000, 30_000] });
    expect([0, 1, 2, 9].map((n) => computeBackoff(s, n, null, hi))).toEqual([15_000, 30_000, 30_000, 30_000]);
  });
  it('proportional jitter (gRPC A6 2024) is min(base·m^n, cap)·U[0.8, 1.2)', () => {
    const s = normalizeBackoff({ kind: 'proportional-jitter', baseMs: 100, capMs: 1000, multiplier: 2, jitter: 0.2 });
    expect([0, 1, 2, 3, 4].map((n) => computeBackoff(s, n, null, lo))).toEqual([80, 160, 320, 640, 800]);
    expect([0, 1, 2, 3, 4].map((n) => computeBackoff(s, n, null, hi))).toEqual([119, 239, 479, 959, 1199]);
    expect(backoffCeiling(s)).toBe(1200);
  });
  it('envoy is U[0, (2^N − 1)·25 ms) capped at 250 ms', () => {
    const s = normalizeBackoff({ kind: 'envoy', baseMs: 25, capMs: 250 });
    expect([0, 1, 2, 3, 4].map((n) => computeBackoff(s, n, null, hi))).toEqual([24, 74, 174, 249, 249]);
  });
  it('accepts the Brooker names as aliases', () => {
    expect(normalizeBackoff({ kind: 'full', baseMs: 1, capMs: 2 }).kind).toBe('full-jitter');
    expect(normalizeBackoff({ kind: 'decorrelated', baseMs: 1, capMs: 2 }).kind).toBe('decorrelated-jitter');
  });
});

describe('validation names the field', () => {
  it.each([
    [{ kind: 'nope' }, /backoff\.kind/],
    [{ kind: 'full-jitter', baseMs: -1, capMs: 10 }, /backoff\.baseMs/],
    [{ kind: 'full-jitter', baseMs: 10, capMs: 5 }, /backoff\.capMs.*>= baseMs/],
    [{ kind: 'full-jitter', baseMs: 10, capMs: Infinity }, /backoff\.capMs/],
    [{ kind: 'full-jitter', baseMs: 10, capMs: 100, multiplier: 0.5 }, /backoff\.multiplier/],
    [{ kind: 'constant', delayMs: 1, capMs: 5 }, /backoff\.capMs.*absent/],
    [{ kind: 'schedule', delaysMs: [] }, /backoff\.delaysMs/],
    [{ kind: 'schedule', delaysMs: [1, 'x'] }, /backoff\.delaysMs\[1\]/],
    [null, /backoff/],
  ])('%j', (spec, message) => {
    expect(() => normalizeBackoff(spec)).toThrow(message);
  });
});

const specArb: fc.Arbitrary<BackoffSpec> = fc.oneof(
  fc.record({ kind: fc.constant('constant' as const), delayMs: fc.nat(1e9) }),
  ...(['exponential', 'full-jitter', 'equal-jitter'] as const).map((kind) =>
    fc.tuple(fc.nat(1e6), fc.nat(1e9), fc.double({ min: 1, max: 100, noNaN: true })).map(([b, c, m]) => ({ kind, baseMs: b, capMs: b + c, multiplier: m })),
  ),
  fc.tuple(fc.nat(1e6), fc.nat(1e9)).map(([b, c]) => ({ kind: 'decorrelated-jitter' as const, baseMs: b, capMs: b + c })),
  fc.tuple(fc.nat(1e6), fc.nat(1e9)).map(([b, c]) => ({ kind: 'envoy' as const, baseMs: b, capMs: b + c })),
  fc.tuple(fc.nat(1e6), fc.nat(1e9), fc.nat(1e6)).map(([b, c, f]) => ({ kind: 'truncated-exponential' as const, baseMs: b, capMs: b + c, fractionMs: f })),
  fc
    .tuple(fc.nat(1e6), fc.nat(1e9), fc.double({ min: 0, max: 0.99, noNaN: true }))
    .map(([b, c, j]) => ({ kind: 'proportional-jitter' as const, baseMs: b, capMs: b + c, multiplier: 2, jitter: j })),
  fc.array(fc.nat(1e9), { minLength: 1, maxLength: 5 }).map((d) => ({ kind: 'schedule' as const, delaysMs: d })),
);

describe('properties', () => {
  it(`every kind (${BACKOFF_KINDS.length}) stays a whole number in [0, ceiling], finite up to attempt 10^4 and beyond`, () => {
    fc.assert(
      fc.property(
        specArb,
        fc.oneof(fc.nat(20), fc.constant(10_000), fc.nat(2_000_000)),
        fc.option(fc.nat(1e9), { nil: null }),
        fc.integer(),
        (raw, n, prev, seed) => {
          const s = normalizeBackoff(raw);
          const v = computeBackoff(s, n, prev, createSeededRandom(seed));
          expect(Number.isInteger(v)).toBe(true);
          expect(v).toBeGreaterThanOrEqual(0);
          expect(v).toBeLessThanOrEqual(backoffCeiling(s));
        },
      ),
      { numRuns: 5000 },
    );
  });
  it('a sequence of 10^4 retries never produces NaN or Infinity (decorrelated feeds on itself)', () => {
    for (const kind of ['decorrelated-jitter', 'full-jitter', 'equal-jitter', 'truncated-exponential', 'envoy'] as const) {
      const s = normalizeBackoff(kind === 'truncated-exponential' ? { kind, baseMs: 1000, capMs: 64_000 } : { kind, baseMs: 5, capMs: 2000 });
      const r = createSeededRandom(kind);
      let prev: number | null = null;
      for (let n = 0; n <= 10_000; n++) {
        const v = computeBackoff(s, n, prev, r);
        expect(Number.isFinite(v)).toBe(true);
        prev = v;
      }
    }
  });
  it('the same seed gives the same sequence', () => {
    const s = normalizeBackoff({ kind: 'full-jitter', baseMs: 100, capMs: 10_000 });
    const seq = (seed: number) => {
      const r = createSeededRandom(seed);
      return Array.from({ length: 20 }, (_, n) => computeBackoff(s, n, null, r));
    };
    expect(seq(42)).toEqual(seq(42));
    expect(seq(42)).not.toEqual(seq(43));
  });
});
