// The rate limit's token bucket as plain calls on a test clock: the rate it lets through,
// the waits it announces, and what a server's 429, Retry-After and RateLimit do to it.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createTokenBucket, normalizeRateLimit, RATE_DECREASE_GAP_MS } from '../../src/core/token-bucket.js';

/** Calls as fast as the bucket lets them, from `from` to `to` (ms), asking every `step` ms. */
function drain(b: ReturnType<typeof createTokenBucket>, from: number, to: number, step = 1): number {
  let n = 0;
  for (let t = from; t < to; t += step) while (b.tryTake(t)) n++;
  return n;
}

describe('createTokenBucket', () => {
  it('lets through burst at once, then ratePerSecond', () => {
    const b = createTokenBucket({ ratePerSecond: 100, burst: 20 });
    expect(drain(b, 0, 1)).toBe(20);
    const n = drain(b, 1, 10_001);
    expect(n).toBeGreaterThanOrEqual(999);
    expect(n).toBeLessThanOrEqual(1001);
  });

  it('announces when the next tokens come, in line', () => {
    const b = createTokenBucket({ ratePerSecond: 10, burst: 1 });
    expect(b.readyAt(0)).toBe(0);
    expect(b.tryTake(0)).toBe(true);
    expect(b.tryTake(50)).toBe(false);
    expect(b.readyAt(50)).toBeCloseTo(100, 6);
    expect(b.readyAt(50, 4)).toBeCloseTo(500, 6); // the fifth in line
    expect(b.tryTake(100)).toBe(true);
  });

  it("a throttling answer pauses it for the server's wait and halves the rate, once per burst of 429s", () => {
    const b = createTokenBucket({ ratePerSecond: 100, burst: 10, recoverMs: 10_000 });
    drain(b, 0, 1);
    expect(b.throttled(1000, 2000)).toBe(true);
    for (let i = 0; i < 20; i++) expect(b.throttled(1000 + i, 2000)).toBe(false); // the same burst
    expect(b.readyAt(1000)).toBeGreaterThanOrEqual(3000);
    expect(drain(b, 1000, 3000)).toBe(0);
    expect(b.state(3000).ratePerSecond).toBeCloseTo(50 + 100 * (2000 / 10_000), 6); // growing back linearly
    // Over the next second: the rate's integral (70 → 80 per second: 75).
    const n = drain(b, 3000, 4000);
    expect(n).toBeGreaterThanOrEqual(73);
    expect(n).toBeLessThanOrEqual(76);
    expect(b.state(20_000).ratePerSecond).toBe(100); // recovered
    expect(b.throttled(1000 + RATE_DECREASE_GAP_MS + 20_000, null)).toBe(true); // no wait said: the rate falls, no pause
    expect(b.state(21_000).pausedUntil).toBeNull();
  });

  it('never lowers the rate below minRatePerSecond', () => {
    const b = createTokenBucket({ ratePerSecond: 100, minRatePerSecond: 30, recoverMs: 86_400_000 });
    for (let i = 0; i < 20; i++) b.throttled(i * 2000, null);
    expect(b.state(38_000).ratePerSecond).toBeCloseTo(30, 6);
  });

  it('a RateLimit quota caps the calls until its window ends', () => {
    const b = createTokenBucket({ ratePerSecond: 1000, burst: 1000 });
    b.quota(0, 5, 10_000);
    expect(drain(b, 0, 9_999)).toBe(5);
    expect(b.readyAt(100)).toBe(10_000);
    expect(b.state(100).quotaLeft).toBe(0);
    expect(b.tryTake(10_000)).toBe(true);
    expect(b.state(10_000).quotaLeft).toBeNull();
    b.quota(20_000, 0, 1000); // r=0: nothing until the window ends
    expect(b.tryTake(20_500)).toBe(false);
    expect(b.tryTake(21_000)).toBe(true);
  });

  it('setRate scales the rate and the burst (a fleet share)', () => {
    const b = createTokenBucket({ ratePerSecond: 1000, burst: 100 });
    b.setRate(0, 100);
    expect(b.state(0).tokens).toBe(10);
    expect(drain(b, 0, 1000)).toBeLessThanOrEqual(111);
  });

  it("whatever happens, never lets through more than burst + the rate's integral, and never NaN", () => {
    fc.assert(
      fc.property(
        fc.double({ min: 0.5, max: 5000, noNaN: true }),
        fc.integer({ min: 1, max: 50 }),
        fc.array(
          fc.record({
            dt: fc.integer({ min: 0, max: 500 }),
            kind: fc.constantFrom('take', 'take', 'take', 'throttle', 'quota', 'ready'),
            x: fc.double({ min: -1, max: 5000, noNaN: true }),
          }),
          { maxLength: 300 },
        ),
        (rate, burst, steps) => {
          const b = createTokenBucket({ ratePerSecond: rate, burst });
          let now = 0;
          let taken = 0;
          for (const s of steps) {
            now += s.dt;
            if (s.kind === 'take') taken += b.tryTake(now) ? 1 : 0;
            else if (s.kind === 'throttle') b.throttled(now, s.x);
            else if (s.kind === 'quota') b.quota(now, Math.round(s.x), 1 + Math.abs(s.x));
            else expect(Number.isNaN(b.readyAt(now, Math.abs(Math.round(s.x))))).toBe(false);
            const st = b.state(now);
            expect(Number.isFinite(st.tokens)).toBe(true);
            expect(st.ratePerSecond).toBeGreaterThan(0);
          }
          expect(taken).toBeLessThanOrEqual(burst + (rate * now) / 1000 + 1e-6);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('rejects bad specs, naming the field', () => {
    expect(() => normalizeRateLimit({})).toThrow(/`rateLimit.ratePerSecond`/);
    expect(() => normalizeRateLimit({ ratePerSecond: 0 })).toThrow(/`rateLimit.ratePerSecond`/);
    expect(() => normalizeRateLimit({ ratePerSecond: 10, burst: 0.5 })).toThrow(/`rateLimit.burst`/);
    expect(() => normalizeRateLimit({ ratePerSecond: 10, decrease: 0 })).toThrow(/`rateLimit.decrease`/);
    expect(() => normalizeRateLimit({ ratePerSecond: 10, minRatePerSecond: 20 })).toThrow(/`rateLimit.minRatePerSecond`/);
    expect(() => normalizeRateLimit({ ratePerSecond: 10, perMinute: 2 })).toThrow(/`rateLimit.perMinute`/);
    expect(() => normalizeRateLimit({ ratePerSecond: 10, maxWaitMs: -1 }, 'partners[1].rateLimit')).toThrow(/`partners\[1\].rateLimit.maxWaitMs`/);
  });
});
