// The fleet's token arithmetic as plain calls on a test clock: the lease a process holds,
// the shared bucket, and the bound across P processes (no Redis here: the Lua script is
// checked against takeFromSharedBucket() in test/fleet/scripts.test.ts).
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createRetryBudget, normalizeBudget, ratioDeposit, type BudgetObservation, type RatioBudgetSpec } from '../../src/core/budget.js';
import { createLeasedBudget, takeFromSharedBucket, type SharedBucket } from '../../src/core/fleet.js';
import { createTestClock } from '../../src/testing/index.js';

const ratio = (over: Partial<RatioBudgetSpec> = {}): RatioBudgetSpec => normalizeBudget({ kind: 'ratio', ...over }) as RatioBudgetSpec;
const obs = (attempt: number, success: boolean, retryableFailure = !success): BudgetObservation => ({
  attempt,
  success,
  retryableFailure,
  throttled: false,
  timeout: false,
  lastCost: 0,
});
const RETRY = { throttled: false, timeout: false };

describe('ratioDeposit (the one deposit rule)', () => {
  it('deposits ratio per answer, refunds an answered retry, nothing for a retryable failure', () => {
    const spec = ratio({ ratio: 0.25 });
    expect(ratioDeposit(spec, obs(1, true))).toBe(0.25);
    expect(ratioDeposit(spec, obs(2, true))).toBe(1.25);
    expect(ratioDeposit(spec, obs(1, false))).toBe(0);
    expect(ratioDeposit(spec, obs(1, false, false))).toBe(0.25); // a 404: answered
    expect(ratioDeposit(ratio({ deposit: 'operation', refund: false }), obs(1, false))).toBe(0.1);
    expect(ratioDeposit(ratio({ deposit: 'operation', refund: false }), obs(2, true))).toBe(0);
  });

  it('is what the in-process budget adds', () => {
    const spec = ratio({ ratio: 0.5, minPerSecond: 0, maxTokens: 100 });
    const b = createRetryBudget(spec);
    for (let i = 0; i < 100; i++) expect(b.tryAcquire(RETRY, 0)).toBe(1);
    b.observe(obs(2, true), 0);
    expect(b.available(0)).toBe(ratioDeposit(spec, obs(2, true)));
  });
});

describe('createLeasedBudget', () => {
  it('starts full on credit, pays retries from its lease, never holds more than leaseTokens', () => {
    const b = createLeasedBudget(ratio(), 2);
    expect(b.held()).toBe(2);
    expect(b.pending()).toBe(-2); // the debt its first visit to the shared bucket pays
    expect(b.wanted()).toBe(0);
    expect(b.tryAcquire(RETRY, 0)).toBe(1);
    expect(b.tryAcquire(RETRY, 0)).toBe(1);
    expect(b.tryAcquire(RETRY, 0)).toBe(false);
    expect(b.wanted()).toBe(2);
    const debt = b.takePending();
    expect(debt).toBe(-2);
    b.keepDebt(debt); // the visit failed: the debt stays
    b.keepDebt(0.5); // only debts are kept
    expect(b.takePending()).toBe(-2);
    b.grant(5); // more than fits: the rest goes back
    expect(b.held()).toBe(2);
    expect(b.pending()).toBe(3);
    expect(b.spent()).toBe(2);
  });

  it('deposits fill the lease first, then wait as pending', () => {
    const b = createLeasedBudget(ratio({ ratio: 0.5 }), 1);
    expect(b.tryAcquire(RETRY, 0)).toBe(1);
    b.takePending();
    b.observe(obs(1, true), 10);
    expect(b.held()).toBe(0.5);
    expect(b.wanted()).toBe(0); // half a token of room: nothing whole to ask for
    b.observe(obs(1, true), 20);
    b.observe(obs(2, true), 30); // 0.5 + refund 1
    expect(b.held()).toBe(1);
    expect(b.pending()).toBe(1.5);
    expect(b.lastAnswerAt()).toBe(30);
    b.observe(obs(1, false), 40); // a retryable failure deposits nothing and is no answer
    expect(b.pending()).toBe(1.5);
    expect(b.lastAnswerAt()).toBe(30);
  });

  it('refuses a lease below one token', () => {
    expect(() => createLeasedBudget(ratio(), 0.5)).toThrow(/leaseTokens/);
    expect(() => createLeasedBudget(ratio(), Number.NaN)).toThrow(/leaseTokens/);
  });
});

describe('takeFromSharedBucket', () => {
  const spec = ratio({ ratio: 0.1, minPerSecond: 2, maxTokens: 10 });

  it('starts full, grants whole tokens, refills on the shared clock, caps at maxTokens', () => {
    const clock = createTestClock({ now: 1_000_000 });
    let r = takeFromSharedBucket(null, clock.now(), spec, 0, 4);
    expect(r.granted).toBe(4);
    expect(r.bucket.tokens).toBe(6);
    clock.advance(500); // +1 token
    r = takeFromSharedBucket(r.bucket, clock.now(), spec, 0, 10);
    expect(r.granted).toBe(7);
    expect(r.bucket.tokens).toBe(0);
    clock.advance(250); // +0.5
    r = takeFromSharedBucket(r.bucket, clock.now(), spec, 0, 1);
    expect(r.granted).toBe(0);
    expect(r.bucket.tokens).toBeCloseTo(0.5, 12);
    clock.advance(60_000);
    r = takeFromSharedBucket(r.bucket, clock.now(), spec, 3, 0);
    expect(r.bucket.tokens).toBe(10);
  });

  it('a debt (negative deposit) may take the bucket below zero; refill pays it back first', () => {
    let r = takeFromSharedBucket({ tokens: 1, at: 0 }, 0, spec, -3, 0);
    expect(r.bucket.tokens).toBe(-2);
    r = takeFromSharedBucket(r.bucket, 1000, spec, 0, 5); // +2
    expect(r.granted).toBe(0);
    r = takeFromSharedBucket(r.bucket, 1500, spec, 0, 5); // +1
    expect(r.granted).toBe(1);
  });

  it('adds deposits before granting, and a clock that steps back refills nothing', () => {
    let b: SharedBucket = { tokens: 0.4, at: 5000 };
    let r = takeFromSharedBucket(b, 5000, spec, 0.7, 2);
    expect(r.granted).toBe(1);
    expect(r.bucket.tokens).toBeCloseTo(0.1, 12);
    b = r.bucket;
    r = takeFromSharedBucket(b, 4000, spec, 0, 1);
    expect(r.granted).toBe(0);
    expect(r.bucket.at).toBe(5000);
  });
});

/**
 * P processes, each with a lease, one shared bucket, random interleavings of calls,
 * answers and syncs, on a test clock. Whatever the order, the retries paid stay within
 * what ONE in-process budget would allow over the same time and answers, plus P leases.
 */
describe('the bound across P processes', () => {
  it('retries paid <= maxTokens + minPerSecond x seconds + deposits + P x leaseTokens', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 1, max: 4 }),
        fc.record({ ratio: fc.constantFrom(0, 0.1, 0.5), minPerSecond: fc.constantFrom(0, 1, 5), maxTokens: fc.constantFrom(1, 10, 50) }),
        fc.array(fc.tuple(fc.nat(11), fc.constantFrom('retry', 'answer', 'retry-answered', 'fail', 'sync', 'time')), { minLength: 1, maxLength: 600 }),
        (P, leaseTokens, over, steps) => {
          const spec = ratio(over);
          const clock = createTestClock({ now: 0 });
          const procs = Array.from({ length: P }, () => createLeasedBudget(spec, Math.min(leaseTokens, spec.maxTokens)));
          let bucket: SharedBucket | null = null;
          let paid = 0;
          let deposits = 0;
          for (const [who, what] of steps) {
            const p = procs[who % P]!;
            const now = clock.now();
            switch (what) {
              case 'retry':
                if (p.tryAcquire(RETRY, now) !== false) paid++;
                break;
              case 'answer':
              case 'retry-answered':
              case 'fail': {
                const o = what === 'answer' ? obs(1, true) : what === 'retry-answered' ? obs(2, true) : obs(1, false);
                deposits += ratioDeposit(spec, o);
                p.observe(o, now);
                break;
              }
              case 'sync': {
                const r = takeFromSharedBucket(bucket, now, spec, p.takePending(), p.wanted());
                bucket = r.bucket;
                p.grant(r.granted);
                break;
              }
              case 'time':
                clock.advance(137);
                break;
            }
            for (const q of procs) expect(q.held()).toBeLessThanOrEqual(q.leaseTokens);
          }
          const floor = spec.maxTokens + (spec.minPerSecond * clock.now()) / 1000;
          expect(paid).toBeLessThanOrEqual(floor + deposits + P * Math.min(leaseTokens, spec.maxTokens) + 1e-9);
        },
      ),
      { numRuns: 300, seed: 11 },
    );
  });

  it('against a dependency that answers nothing, P processes get one floor, not P floors', () => {
    // Ten processes retrying as fast as they can for 20 s; each syncs every 100 ms.
    const spec = ratio({ ratio: 0.1, minPerSecond: 1, maxTokens: 10 });
    const clock = createTestClock({ now: 0 });
    const procs = Array.from({ length: 10 }, () => createLeasedBudget(spec, 1));
    const alone = Array.from({ length: 10 }, () => createRetryBudget(spec));
    let bucket: SharedBucket | null = null;
    let shared = 0;
    let separate = 0;
    for (let t = 0; t <= 20_000; t += 10) {
      clock.advance(t === 0 ? 0 : 10);
      procs.forEach((p, i) => {
        if (t % 100 === i * 10) {
          const r = takeFromSharedBucket(bucket, clock.now(), spec, p.takePending(), p.wanted());
          bucket = r.bucket;
          p.grant(r.granted);
        }
        while (p.tryAcquire(RETRY, clock.now()) !== false) shared++;
      });
      for (const b of alone) while (b.tryAcquire(RETRY, clock.now()) !== false) separate++;
    }
    // One floor: 10 tokens + 1/s x 20 s = 30; plus at most 10 leases of 1.
    expect(shared).toBeLessThanOrEqual(30 + 10);
    expect(shared).toBeGreaterThanOrEqual(29);
    expect(separate).toBe(10 * 30);
  });
});
