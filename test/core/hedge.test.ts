// Hedging's per-dependency state and the policy field, as plain calls.
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createHedgeState, HEDGE_FAILURE_RATIO, HEDGE_MIN_SAMPLES, normalizeHedge } from '../../src/core/hedge.js';
import { createPolicy } from '../../src/core/policy.js';
import { resolvePolicy } from '../../src/presets/index.js';

describe('the hedge policy field', () => {
  it('takes a number of ms or "p90" … "p99", with defaults for the bounds', () => {
    expect(createPolicy({ hedge: { delayMs: 'p95' } }).hedge).toEqual({ delayMs: 'p95', quantile: 0.95, maxHedges: 1, maxExtraLoad: 0.05 });
    expect(createPolicy({ hedge: { delayMs: 20, maxHedges: 2, maxExtraLoad: 0.1 } }).hedge).toEqual({
      delayMs: 20,
      quantile: null,
      maxHedges: 2,
      maxExtraLoad: 0.1,
    });
    expect(createPolicy({}).hedge).toBeNull();
    expect(createPolicy({ hedge: null }).spec.hedge).toBeNull();
    expect(createPolicy({ hedge: { delayMs: 'p99' } }).spec.hedge).toEqual({ delayMs: 'p99', maxHedges: 1, maxExtraLoad: 0.05 });
    expect(resolvePolicy({ preset: 'http-429', hedge: { delayMs: 'p90' } }).hedge?.quantile).toBe(0.9);
  });

  it('names the field of every bad value', () => {
    const bad: [unknown, RegExp][] = [
      [7, /`hedge`/],
      [{}, /`hedge.delayMs`/],
      [{ delayMs: 'p100' }, /`hedge.delayMs`/],
      [{ delayMs: 'p89' }, /`hedge.delayMs`/],
      [{ delayMs: '95' }, /`hedge.delayMs`/],
      [{ delayMs: -1 }, /`hedge.delayMs`/],
      [{ delayMs: 10, maxHedges: 0 }, /`hedge.maxHedges`/],
      [{ delayMs: 10, maxHedges: 5 }, /`hedge.maxHedges`/],
      [{ delayMs: 10, maxExtraLoad: 0 }, /`hedge.maxExtraLoad`/],
      [{ delayMs: 10, maxExtraLoad: 1.5 }, /`hedge.maxExtraLoad`/],
      [{ delayMs: 10, after: 5 }, /`hedge.after`/],
    ];
    for (const [v, re] of bad) expect(() => createPolicy({ hedge: v as never })).toThrow(re);
    expect(() => normalizeHedge({ delayMs: 'fast' })).toThrow(/"p90" … "p99"/);
  });
});

describe('createHedgeState', () => {
  const p95 = normalizeHedge({ delayMs: 'p95' });

  it('plans no percentile hedge before it has seen enough attempts, then the percentile', () => {
    const h = createHedgeState();
    for (let i = 0; i < HEDGE_MIN_SAMPLES - 1; i++) h.observe(5, false);
    expect(h.delayMs(p95)).toBeNull();
    h.observe(5, false);
    expect(h.delayMs(p95)).toBe(5);
    expect(h.delayMs(normalizeHedge({ delayMs: 12 }))).toBe(12);
  });

  it('starts empty: hedges never exceed maxExtraLoad × operations', () => {
    fc.assert(
      fc.property(fc.double({ min: 0.001, max: 1, noNaN: true }), fc.array(fc.boolean(), { maxLength: 2000 }), (load, steps) => {
        const spec = normalizeHedge({ delayMs: 1, maxExtraLoad: load });
        const h = createHedgeState();
        let ops = 0;
        let hedges = 0;
        for (const op of steps) {
          if (op) {
            h.started(spec);
            ops++;
          } else if (h.mayHedge()) {
            h.hedged();
            hedges++;
          }
          expect(hedges).toBeLessThanOrEqual(load * ops + 1e-9);
        }
        expect(h.stats().hedges).toBe(hedges);
      }),
    );
  });

  it('stops hedging while the dependency is failing, and resumes when it answers again', () => {
    const spec = normalizeHedge({ delayMs: 1, maxExtraLoad: 1 });
    const h = createHedgeState();
    for (let i = 0; i < 5; i++) h.started(spec);
    expect(h.mayHedge()).toBe(true);
    for (let i = 0; i < 10; i++) h.observe(3, true);
    expect(h.stats().failureRatio).toBeGreaterThan(HEDGE_FAILURE_RATIO);
    expect(h.mayHedge()).toBe(false);
    for (let i = 0; i < 60; i++) h.observe(3, false);
    expect(h.mayHedge()).toBe(true);
    h.noRetry(); // the server said not to retry
    expect(h.mayHedge()).toBe(false);
  });
});
