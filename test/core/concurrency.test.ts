// Adaptive concurrency limits as plain calls: the rules of AIMD and the gradient, and the
// capacity-drop story in virtual time (the benchmark repeats it on real sockets).
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createLimitAlgorithm, normalizeLimitSpec, type LimitAlgorithm, type LimitSample } from '../../src/core/concurrency.js';
import { runCapacity } from '../../src/sim/capacity.js';

const ok = (alg: LimitAlgorithm, now: number, rtt: number, inFlight = alg.limit, generation = alg.generation): ReturnType<LimitAlgorithm['sample']> =>
  alg.sample({ startedAt: now - rtt, now, inFlight, generation, dropped: false });
const drop = (alg: LimitAlgorithm, now: number, generation = alg.generation): ReturnType<LimitAlgorithm['sample']> =>
  alg.sample({ startedAt: now - 10, now, inFlight: alg.limit, generation, dropped: true });

describe('aimd', () => {
  it('halves once per wave: answers to calls started before the decrease do not count again', () => {
    const a = createLimitAlgorithm({ kind: 'aimd', initial: 40 });
    const wave = a.generation;
    expect(drop(a, 100, wave)).toBe('decrease');
    expect(a.limit).toBe(20);
    for (let i = 0; i < 30; i++) expect(drop(a, 101 + i, wave)).toBeNull();
    expect(a.limit).toBe(20);
    expect(drop(a, 200)).toBe('decrease'); // a call of the new wave
    expect(a.limit).toBe(10);
  });

  it('grows by one after `limit` answers while it is used, never while idle, never past max', () => {
    const a = createLimitAlgorithm({ kind: 'aimd', initial: 4, max: 5 });
    for (let i = 0; i < 100; i++) expect(ok(a, i, 10, 1)).toBeNull(); // 1 in flight of 4: idle
    expect(a.limit).toBe(4);
    for (let i = 0; i < 3; i++) expect(ok(a, i, 10)).toBeNull();
    expect(ok(a, 4, 10)).toBe('increase');
    expect(a.limit).toBe(5);
    for (let i = 0; i < 50; i++) ok(a, i, 10);
    expect(a.limit).toBe(5);
  });

  it('counts a call slower than slowMs as a drop, and never goes below min', () => {
    const a = createLimitAlgorithm({ kind: 'aimd', initial: 8, min: 3, slowMs: 100 });
    expect(ok(a, 1000, 99)).toBeNull();
    expect(ok(a, 1000, 101)).toBe('decrease');
    expect(a.limit).toBe(4);
    drop(a, 2000);
    expect(a.limit).toBe(3);
    expect(drop(a, 3000)).toBeNull();
    expect(a.limit).toBe(3);
  });
});

describe('gradient', () => {
  it('falls when the window median rises over tolerance × baseline, and grows while used without queueing', () => {
    const g = createLimitAlgorithm({ kind: 'gradient', initial: 20, windowMs: 100, minWindowSamples: 5, probeIntervalMs: 0 });
    let t = 0;
    const window = (rtt: number, inFlight?: number): void => {
      for (let i = 0; i < 10; i++) ok(g, (t += 12), rtt, inFlight);
    };
    window(50);
    expect(g.baselineMs).toBeCloseTo(50, 0);
    const before = g.limit;
    window(50); // no queueing, fully used: grows (×1.25 + √limit/2)
    expect(g.limit).toBeGreaterThan(before);
    const high = g.limit;
    window(200); // 4x the baseline: ×0.5 (+ headroom)
    expect(g.limit).toBeLessThan(high * 0.6 + 3);
    expect(g.baselineMs).toBeCloseTo(50, 0);
  });

  it('does not grow while idle', () => {
    const g = createLimitAlgorithm({ kind: 'gradient', initial: 20, windowMs: 100, minWindowSamples: 5, probeIntervalMs: 0 });
    for (let i = 1; i <= 200; i++) ok(g, i * 11, 50, 2);
    expect(g.limit).toBe(20);
  });

  it('probes: a dependency that became slower for good is measured again instead of taken for a queue', () => {
    const g = createLimitAlgorithm({ kind: 'gradient', initial: 20, windowMs: 100, minWindowSamples: 5, probeIntervalMs: 5000, probeSamples: 10 });
    let t = 0;
    for (let i = 0; i < 100; i++) ok(g, (t += 11), 50);
    expect(g.baselineMs).toBeCloseTo(50, 0);
    const changes: string[] = [];
    // From now on every call takes 150 ms, queueing or not.
    for (let i = 0; i < 2000; i++) {
      const c = ok(g, (t += 11), 150);
      if (c === 'probe' || c === 'probe_end') changes.push(c);
    }
    expect(changes).toContain('probe');
    expect(changes).toContain('probe_end');
    expect(g.baselineMs).toBeCloseTo(150, -1);
    // After the probe the limit grows again instead of sitting at min.
    expect(g.limit).toBeGreaterThan(5);
  });

  it('a drop halves it once per wave, as aimd', () => {
    const g = createLimitAlgorithm({ kind: 'gradient', initial: 40 });
    const wave = g.generation;
    expect(drop(g, 10, wave)).toBe('decrease');
    expect(drop(g, 11, wave)).toBeNull();
    expect(g.limit).toBe(20);
  });
});

describe('any algorithm, any samples', () => {
  it('keeps the limit an integer in [min, max] (never NaN)', () => {
    const sample = fc.record({
      dt: fc.double({ min: 0, max: 1e6, noNaN: true }),
      rtt: fc.oneof(fc.double({ min: -10, max: 1e7, noNaN: true }), fc.constantFrom(0, NaN, Infinity)),
      inFlight: fc.integer({ min: 0, max: 5000 }),
      dropped: fc.boolean(),
      stale: fc.boolean(),
    });
    const spec = fc.oneof(
      fc.record({
        kind: fc.constant('aimd' as const),
        min: fc.integer({ min: 1, max: 5 }),
        max: fc.integer({ min: 5, max: 100 }),
        slowMs: fc.option(fc.integer({ min: 1, max: 1000 })),
      }),
      fc.record({
        kind: fc.constant('gradient' as const),
        min: fc.integer({ min: 1, max: 5 }),
        max: fc.integer({ min: 5, max: 100 }),
        windowMs: fc.integer({ min: 1, max: 1000 }),
        minWindowSamples: fc.integer({ min: 1, max: 20 }),
        probeIntervalMs: fc.integer({ min: 0, max: 10_000 }),
      }),
    );
    fc.assert(
      fc.property(spec, fc.array(sample, { maxLength: 300 }), (sp, samples) => {
        const alg = createLimitAlgorithm(sp);
        const r = normalizeLimitSpec(sp);
        let now = 0;
        for (const s of samples) {
          now += s.dt;
          const x: LimitSample = {
            startedAt: now - s.rtt,
            now,
            inFlight: s.inFlight,
            generation: s.stale ? alg.generation - 1 : alg.generation,
            dropped: s.dropped,
          };
          alg.sample(x);
          expect(Number.isInteger(alg.limit)).toBe(true);
          expect(alg.limit).toBeGreaterThanOrEqual(r.min);
          expect(alg.limit).toBeLessThanOrEqual(r.max);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('converges on fixed input: a constant latency while used reaches max and stays; while idle it does not move; constant drops reach min', () => {
    const spec = fc.oneof(
      fc.record({
        kind: fc.constant('aimd' as const),
        min: fc.integer({ min: 1, max: 5 }),
        max: fc.integer({ min: 5, max: 60 }),
        initial: fc.integer({ min: 1, max: 60 }),
      }),
      fc.record({
        kind: fc.constant('gradient' as const),
        min: fc.integer({ min: 1, max: 5 }),
        max: fc.integer({ min: 5, max: 60 }),
        initial: fc.integer({ min: 1, max: 60 }),
        windowMs: fc.integer({ min: 1, max: 100 }),
        minWindowSamples: fc.integer({ min: 1, max: 10 }),
        probeIntervalMs: fc.constant(0),
      }),
    );
    fc.assert(
      fc.property(spec, fc.double({ min: 0.1, max: 1000, noNaN: true }), fc.double({ min: 0.1, max: 50, noNaN: true }), (sp0, rtt, dt) => {
        const sp = { ...sp0, initial: Math.min(Math.max(sp0.initial, sp0.min), sp0.max) };
        const r = normalizeLimitSpec(sp);
        // Used: every call ends with the limit's worth in flight.
        const used = createLimitAlgorithm(sp);
        let now = 0;
        const trace: number[] = [];
        for (let i = 0; i < 20_000; i++) {
          now += dt;
          ok(used, now, rtt);
          trace.push(used.limit);
        }
        expect(trace.slice(-2000).every((l) => l === r.max)).toBe(true);
        // Idle: nothing else in flight when a call ends — nothing learned about capacity, the limit stays.
        const idle = createLimitAlgorithm(sp);
        now = 0;
        for (let i = 0; i < 2000; i++) {
          now += dt;
          ok(idle, now, rtt, 0);
        }
        expect(idle.limit).toBe(r.initial);
        // Every call a drop in the current wave: halves to min and stays.
        const dropped = createLimitAlgorithm(sp);
        now = 0;
        for (let i = 0; i < 200; i++) {
          now += dt;
          drop(dropped, now);
        }
        expect(dropped.limit).toBe(r.min);
      }),
      { numRuns: 200 },
    );
  });

  it('rejects bad specs, naming the field', () => {
    expect(() => normalizeLimitSpec({ kind: 'vegas' })).toThrow(/`concurrencyLimit.kind`/);
    expect(() => normalizeLimitSpec({ kind: 'aimd', decrease: 1.5 })).toThrow(/`concurrencyLimit.decrease`/);
    expect(() => normalizeLimitSpec({ kind: 'aimd', tolerance: 2 })).toThrow(/`concurrencyLimit.tolerance`/);
    expect(() => normalizeLimitSpec({ kind: 'gradient', min: 10, max: 5 })).toThrow(/`concurrencyLimit.min`/);
    expect(() => normalizeLimitSpec({ kind: 'gradient', initial: 0 })).toThrow(/`concurrencyLimit.initial`/);
    expect(() => normalizeLimitSpec({ kind: 'gradient', windowMs: -1 }, 'partners[0].concurrencyLimit')).toThrow(/`partners\[0\].concurrencyLimit.windowMs`/);
    expect(() => normalizeLimitSpec(7)).toThrow(/`concurrencyLimit`/);
  });
});

describe("capacity drops 5x for 20 s (virtual time: relent/sim's capacity scenario)", () => {
  const base = {
    seed: 1,
    arrivalsPerSec: 400,
    serviceMs: 50,
    capacity: 50,
    degraded: 10,
    dropAtMs: 10_000,
    dropForMs: 20_000,
    durationMs: 40_000,
    deadlineMs: 1000,
    minAttemptMs: 100,
  };
  const fixed = [10, 15, 20, 30, 50];
  // Every contender on the same arrivals and service times.
  const { rows } = runCapacity({
    ...base,
    contenders: [
      { name: 'gradient', limit: { kind: 'gradient', initial: 20, max: 200 } },
      { name: 'aimd', limit: { kind: 'aimd', initial: 20, max: 200, slowMs: 100 } },
      ...fixed.map((n) => ({ name: `fixed ${n}`, fixed: n })),
      { name: 'none' },
    ],
  });
  const row = (name: string) => rows.find((r) => r.name === name)!;
  /** Calls in flight (one sample per 250 ms) from 2 s after the drop to its end. */
  const during = (name: string) => row(name).inFlightTrace.filter((_, i) => i * 250 >= base.dropAtMs + 2000 && i * 250 < base.dropAtMs + base.dropForMs);

  it('gradient: the limit reaches the new capacity within 2 s, the dependency queues little, and fewer calls fail than under any fixed cap', () => {
    const g = row('gradient');
    // Within 2 s of the drop, calls in flight are within 1.5x of the new capacity, and stay there (sampled every 50 ms).
    expect(g.convergedMs).not.toBeNull();
    expect(g.convergedMs!).toBeLessThanOrEqual(2000);
    expect(Math.max(...during('gradient'))).toBeLessThanOrEqual(1.5 * base.degraded);
    // The dependency's latency (its queue and its work) stays under twice its healthy median service time: it queues little.
    expect(g.dropLatencyP50).toBeLessThan(2 * base.serviceMs);
    // After the drop it grows back.
    const after = g.limitTrace.filter((_, i) => i * 250 >= base.dropAtMs + base.dropForMs + 3000);
    expect(Math.max(...after.map((x) => x ?? 0))).toBeGreaterThan(base.degraded * 2);
    for (const n of fixed) expect(g.failed).toBeLessThan(row(`fixed ${n}`).failed);
    expect(g.failed).toBeLessThan(row('none').failed);
  });

  it('aimd with slowMs at 2x the healthy latency does as well', () => {
    const a = row('aimd');
    expect(Math.max(...during('aimd'))).toBeLessThanOrEqual(2 * base.degraded);
    expect(a.inFlightP99).toBeLessThanOrEqual(2 * base.degraded);
    for (const n of fixed) expect(a.failed).toBeLessThan(row(`fixed ${n}`).failed);
  });
});
