import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { EventQueue, Sampler } from '../../src/sim/engine.js';

describe('EventQueue: a binary min-heap of (time, kind, id)', () => {
  it('pops in time order, FIFO among equal times, whatever the push order', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 3 })), { maxLength: 300 }), (events) => {
        const q = new EventQueue(16); // starts small: exercises growth
        events.forEach(([t, k], i) => q.push(t, k, i));
        const popped: [number, number, number][] = [];
        while (q.pop()) popped.push([q.time, q.kind, q.id]);
        const expected = events.map(([t, k], i) => [t, k, i] as [number, number, number]).sort((a, b) => a[0] - b[0] || a[2] - b[2]);
        expect(popped).toEqual(expected);
        expect(q.size).toBe(0);
      }),
    );
  });

  it('interleaved pushes and pops keep the order', () => {
    const q = new EventQueue();
    q.push(5, 0, 1);
    q.push(1, 0, 2);
    expect(q.pop()).toBe(true);
    expect(q.id).toBe(2);
    q.push(3, 1, 3);
    q.push(5, 1, 4);
    const ids: number[] = [];
    while (q.pop()) ids.push(q.id);
    expect(ids).toEqual([3, 1, 4]);
    expect(q.peekTime()).toBe(Infinity);
  });

  it('refuses times that would never pop', () => {
    const q = new EventQueue();
    expect(() => q.push(Number.NaN, 0, 0)).toThrow(/finite/);
    expect(() => q.push(Infinity, 0, 0)).toThrow(/finite/);
    expect(() => q.push(-1, 0, 0)).toThrow(/finite/);
  });
});

describe('Sampler: seeded variates', () => {
  it('the same seed gives the same numbers; another seed others', () => {
    const a = new Sampler('s:1');
    const b = new Sampler('s:1');
    const c = new Sampler('s:2');
    const xs = Array.from({ length: 20 }, () => a.normal(10, 2));
    expect(Array.from({ length: 20 }, () => b.normal(10, 2))).toEqual(xs);
    expect(Array.from({ length: 20 }, () => c.normal(10, 2))).not.toEqual(xs);
  });

  it('normal(10, 2) has mean ≈ 10 and sd ≈ 2; exponential(5) has mean ≈ 5', () => {
    const s = new Sampler(42);
    const n = 40_000;
    let sum = 0;
    let sq = 0;
    let e = 0;
    for (let i = 0; i < n; i++) {
      const x = s.normal(10, 2);
      sum += x;
      sq += x * x;
      e += s.exponential(5);
    }
    const mean = sum / n;
    expect(mean).toBeCloseTo(10, 1);
    expect(Math.sqrt(sq / n - mean * mean)).toBeCloseTo(2, 1);
    expect(e / n).toBeGreaterThan(4.9);
    expect(e / n).toBeLessThan(5.1);
    expect(s.absNormal(0, 1)).toBeGreaterThanOrEqual(0);
  });

  it('the normal variates follow Φ at the quartiles and in the tails (ziggurat)', () => {
    const s = new Sampler('phi');
    const n = 200_000;
    const cuts = [-3, -2, -1, 0, 1, 2, 3];
    const phi = [0.00135, 0.02275, 0.15866, 0.5, 0.84134, 0.97725, 0.99865];
    const below = cuts.map(() => 0);
    for (let i = 0; i < n; i++) {
      const x = s.normal(0, 1);
      cuts.forEach((c, k) => {
        if (x < c) below[k]!++;
      });
    }
    below.forEach((b, k) => expect(Math.abs(b / n - phi[k]!)).toBeLessThan(0.004));
  });
});
