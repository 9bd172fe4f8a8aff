import { describe, expect, it } from 'vitest';
import { createTestClock, createSeededRandom, constantRandom, createRecordingRandom } from '../../src/testing/index.js';

describe('relent/testing: createTestClock', () => {
  it('fires timers in due order (registration order on ties) and reads each due time while firing', () => {
    const clock = createTestClock({ now: 100 });
    const seen: string[] = [];
    clock.setTimer(() => seen.push(`b@${clock.now()}`), 20);
    clock.setTimer(() => seen.push(`a@${clock.now()}`), 10);
    clock.setTimer(() => seen.push(`c@${clock.now()}`), 20);
    expect(clock.pending()).toBe(3);
    expect(clock.nextAt()).toBe(110);
    clock.advance(15);
    expect(seen).toEqual(['a@110']);
    expect(clock.now()).toBe(115);
    clock.advance(100);
    expect(seen).toEqual(['a@110', 'b@120', 'c@120']);
    expect(clock.pending()).toBe(0);
  });
  it('cancelled timers never fire; timers set while firing are honoured', () => {
    const clock = createTestClock();
    const seen: number[] = [];
    const cancel = clock.setTimer(() => seen.push(1), 5);
    clock.setTimer(() => clock.setTimer(() => seen.push(clock.now()), 5), 10);
    cancel();
    clock.advance(100);
    expect(seen).toEqual([15]);
  });
  it('cancelling a fired timer changes nothing; many timers stay cheap', () => {
    const clock = createTestClock();
    const cancel = clock.setTimer(() => {}, 1);
    clock.setTimer(() => {}, 2);
    clock.advance(1);
    cancel();
    expect(clock.pending()).toBe(1);
    const cancels = Array.from({ length: 100_000 }, (_, i) => clock.setTimer(() => {}, 10 + (i % 1000)));
    for (let i = 0; i < cancels.length; i += 2) cancels[i]!();
    expect(clock.pending()).toBe(50_001);
    clock.advance(10_000);
    expect(clock.pending()).toBe(0);
  });
  it('wall clock moves with monotonic time (for HTTP dates)', () => {
    const clock = createTestClock({ wallNow: Date.UTC(2030, 0, 1) });
    clock.advance(2500);
    expect(clock.wallNow()).toBe(Date.UTC(2030, 0, 1) + 2500);
  });
  it('next() and runAll() let promise callbacks run between timers', async () => {
    const clock = createTestClock();
    const seen: number[] = [];
    const sleep = (ms: number) => new Promise<void>((r) => clock.setTimer(r, ms));
    const job = (async () => {
      await sleep(10);
      seen.push(clock.now());
      await sleep(10); // set only after the first promise settles
      seen.push(clock.now());
    })();
    expect(await clock.runAll()).toBe(2);
    await job;
    expect(seen).toEqual([10, 20]);
  });
  it('clamps delays like real timers (negative → 0, huge → 2^31-1)', () => {
    const clock = createTestClock();
    clock.setTimer(() => {}, -5);
    clock.setTimer(() => {}, Number.MAX_SAFE_INTEGER);
    expect(clock.nextAt()).toBe(0);
    clock.advance(1);
    expect(clock.nextAt()).toBe(2 ** 31 - 1);
  });
});

describe('relent/testing: random sources', () => {
  it('seeded random: same seed, same sequence; uniform-ish in [0, 1)', () => {
    const a = createSeededRandom(99);
    const b = createSeededRandom(99);
    const xs = Array.from({ length: 10_000 }, () => a());
    expect(Array.from({ length: 10_000 }, () => b())).toEqual(xs);
    expect(Math.min(...xs)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...xs)).toBeLessThan(1);
    const mean = xs.reduce((s, x) => s + x, 0) / xs.length;
    expect(Math.abs(mean - 0.5)).toBeLessThan(0.02);
    expect(createSeededRandom('abc')()).toBe(createSeededRandom('abc')());
    expect(createSeededRandom('abc')()).not.toBe(createSeededRandom('abd')());
  });
  it('constant and recording randoms', () => {
    expect(constantRandom(0.25)()).toBe(0.25);
    expect(() => constantRandom(1)).toThrow(/\[0, 1\)/);
    const r = createRecordingRandom(1);
    r();
    r();
    expect(r.drawn).toHaveLength(2);
  });
});
