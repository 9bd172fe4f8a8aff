// The fleet's rules as plain calls, on a test clock and seeded random numbers: when a Redis
// node counts as usable (health.ts: one deadline rule, hysteresis), and what a process may
// spend while it runs alone (share.ts), checked against the bound of docs/fleet.md with the
// real FleetBudget over an in-memory model of the budget script (the scripts themselves are
// checked against the same TypeScript in scripts.test.ts).
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { normalizeBudget, type RatioBudgetSpec } from '../../src/core/budget.js';
import { takeFromSharedBucket, type SharedBucket } from '../../src/core/fleet.js';
import { createSeededRandom } from '../../src/core/random.js';
import { createTestClock } from '../../src/shared/test-clock.js';
import { FleetBudget } from '../../src/fleet/budget.js';
import { afterFailure, afterSuccess, HEALTH_RULES, initialHealth, syncDeadline, type Health } from '../../src/fleet/health.js';
import type { Command, Link } from '../../src/fleet/link.js';
import { createShareBudget, refillDebt, refillOf, settleShare, shareOnFallback, visitMembers, type Members } from '../../src/fleet/share.js';

const DL = { timeoutMs: 50, maxMs: 1000 };
const ok = (h: Health, rtt = 1): Health => afterSuccess(h, rtt).health;
const fail = (h: Health, lost = false): Health => afterFailure(h, lost).health;
const joined = (): Health => ok(initialHealth());

describe('node health: one deadline rule, hysteresis', () => {
  it('the first good sync joins; a failure before that falls back at once (said once)', () => {
    expect(afterSuccess(initialHealth(), 3).change).toBe('fleet');
    const f = afterFailure(initialHealth(), false);
    expect(f.change).toBe('local');
    expect(afterFailure(f.health, false).change).toBeNull();
  });

  it('joined: falls back after three failed syncs in a row, at once when the connection is lost; one good sync between failures resets the count', () => {
    let h = joined();
    expect(afterFailure(h, false).change).toBeNull();
    h = fail(fail(h));
    expect(afterFailure(h, false).change).toBe('local');
    // fail, fail, ok, fail, fail: still joined
    h = fail(fail(ok(fail(fail(joined())))));
    expect(h.mode).toBe('fleet');
    expect(afterFailure(joined(), true).change).toBe('local');
  });

  it('fallen back: joins again only after three good probes in a row; a failure among them starts the count again', () => {
    let h = fail(joined(), true);
    expect(h.mode).toBe('local');
    h = ok(ok(h));
    expect(h.mode).toBe('local');
    h = fail(h);
    h = ok(ok(h));
    expect(h.mode).toBe('local');
    expect(afterSuccess(h, 1).change).toBe('fleet');
    expect(HEALTH_RULES).toMatchObject({ fallAfter: 3, rejoinAfter: 3 });
  });

  it('the deadline: the longest before any round trip; then srtt + 4 × rttvar within [timeoutMs, maxMs], doubled after each failure, reset by a success', () => {
    expect(syncDeadline(initialHealth(), DL)).toBe(1000);
    const fast = ok(initialHealth(), 2); // srtt 2, rttvar 1
    expect(syncDeadline(fast, DL)).toBe(50);
    const slow = ok(initialHealth(), 200); // srtt 200, rttvar 100
    expect(syncDeadline(slow, DL)).toBe(600);
    expect(syncDeadline(fail(slow), DL)).toBe(1000);
    expect(syncDeadline(fail(fast), DL)).toBe(100);
    expect(syncDeadline(fail(fail(fast)), DL)).toBe(200);
    expect(syncDeadline(ok(fail(fail(fast)), 2), DL)).toBe(50);
    // RFC 6298 smoothing: a second sample of 100 after 200.
    const two = ok(slow, 100);
    expect(two.srtt).toBeCloseTo(187.5);
    expect(two.rttvar).toBeCloseTo(100);
  });

  /** Replays syncs over a link with the given round trips; counts mode changes. */
  function flaps(rtts: (k: number) => number, n: number, rule: (h: Health, k: number) => number): { changes: number; fleetShare: number } {
    let h = joined();
    let changes = 0;
    let inFleet = 0;
    for (let k = 0; k < n; k++) {
      const rtt = rtts(k);
      const step = rtt <= rule(h, k) ? afterSuccess(h, rtt) : afterFailure(h, false);
      if (step.change !== null) changes++;
      h = step.health;
      if (h.mode === 'fleet') inFleet++;
    }
    return { changes, fleetShare: inFleet / n };
  }

  it('a slow link (100 ± 20 ms each way, 10 % of packets held back 200–600 ms): a slow fleet, not a flapping one', () => {
    for (let seed = 1; seed <= 50; seed++) {
      const random = createSeededRandom(seed);
      const oneWay = (): number => 100 + (random() * 40 - 20) + (random() < 0.1 ? 200 + random() * 400 : 0);
      const rtts = Array.from({ length: 60 }, () => oneWay() + oneWay());
      // 15 s of syncs (one a second, and the quick retries after a failure).
      const now = flaps(
        (k) => rtts[k]!,
        30,
        (h) => syncDeadline(h, { timeoutMs: 50, maxMs: 1000 }),
      );
      expect(now.changes, `seed ${seed}`).toBeLessThanOrEqual(2);
      expect(now.fleetShare, `seed ${seed}`).toBeGreaterThanOrEqual(0.7);
      // The rule before: 10 ms while joined, 2 s while local, one sync decides: a change at nearly every sync.
      let fleetMode = true;
      let before = 0;
      for (let k = 0; k < 30; k++) {
        const next: boolean = rtts[k]! <= (fleetMode ? 10 : 2000);
        if (next !== fleetMode) before++;
        fleetMode = next;
      }
      expect(before, `seed ${seed}`).toBeGreaterThan(20);
    }
  });
});

describe('the share of a process that runs alone', () => {
  const spec = normalizeBudget({ kind: 'ratio', ratio: 0.1, minPerSecond: 1, maxTokens: 10 }) as RatioBudgetSpec;

  it('P processes last seen: its lease, a bucket of maxTokens / P + lease refilling at minPerSecond / P; nothing from the shared bucket', () => {
    expect(shareOnFallback(spec, 1, 1, 7, 10)).toEqual({ capacity: 2, ratePerSecond: 0.1, tokens: 1, owed: 0, processes: 10 });
    // Never saw the fleet: the whole budget, as relent without a fleet (owed when it joins).
    expect(shareOnFallback(spec, 1, 1, null, null)).toEqual({ capacity: 10, ratePerSecond: 1, tokens: 10, owed: 10, processes: null });
    // The refill owed back: its own, up to its part of what the shared floor added meanwhile.
    expect(refillDebt(3, 100, 150, 10)).toBe(3); // others kept draining: the shared floor added 50
    expect(refillDebt(3, 100, 104, 10)).toBeCloseTo(0.4); // the bucket was nearly full: it added 4
    expect(refillDebt(3, 100, 90, 10)).toBe(0); // Redis restarted: a fresh bucket
    expect(refillDebt(3, null, 150, 10)).toBe(0);
    expect(refillOf({ tokens: 9.5, at: 0 }, 2000, spec)).toBe(0.5);
    expect(refillOf({ tokens: 2, at: 0 }, 2000, spec)).toBe(2);
  });

  it("the share budget refills on the callers' clock, counts its refill, takes its own deposits, never holds more than its capacity", () => {
    const clock = createTestClock();
    const b = createShareBudget(spec, shareOnFallback(spec, 1, 1, 10, 10));
    expect(b.tryAcquire({ throttled: false, timeout: false }, clock.now())).toBe(1);
    expect(b.tryAcquire({ throttled: false, timeout: false }, clock.now())).toBe(false);
    clock.advance(5000); // + 0.5
    for (let i = 0; i < 3; i++) b.observe({ attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 }, clock.now()); // + 0.3
    expect(b.available(clock.now())).toBeCloseTo(0.8);
    expect(b.refilled()).toBeCloseTo(0.5);
    clock.advance(60_000);
    expect(b.available(clock.now())).toBeCloseTo(2);
    expect(b.refilled()).toBeCloseTo(1.7);
    expect(settleShare(b.held(), 0)).toBeCloseTo(2);
  });

  /** A fleet of P FleetBudgets over an in-memory budget script, on a test clock. */
  function fleetOf(P: number, spec: RatioBudgetSpec, lease: number) {
    const clock = createTestClock();
    let bucket: SharedBucket | null = null;
    let members: Members | null = null;
    let floor = 0; // the script's running total of the floor's refill
    const links = Array.from({ length: P }, (_, i): Link & { local: boolean } => ({
      local: false,
      syncEvery: 10,
      keyTtlMs: 600_000,
      channel: 'c',
      id: `p${i}`,
      soon() {},
      wallNow: () => clock.now(),
      toLocal: (x) => x,
      swallow() {},
    }));
    const budgets = links.map((l) => new FleetBudget(l, ['b', 'm'], spec, lease, { renewMs: 3000, memberTtlMs: 10_000 }));
    /** Process i visits the shared bucket (a sync), if it can reach Redis. */
    const visit = (i: number): void => {
      if (links[i]!.local) return;
      const out: Command[] = [];
      budgets[i]!.write(out);
      for (const c of out) {
        const [, , deposit, want, , id, ttl] = c.args as number[];
        const now = clock.now();
        floor += refillOf(bucket, now, spec);
        const step = takeFromSharedBucket(bucket, now, spec, deposit!, want!);
        bucket = step.bucket;
        const m = visitMembers(members, String(id), now, Number(ttl));
        members = m.members;
        c.onReply([now * 1000, step.granted, String(step.bucket.tokens), m.count, String(floor)]);
      }
    };
    return { clock, links, budgets, visit, bucket: () => bucket };
  }

  it('through any number of fallbacks the fleet retries no more than one budget: maxTokens + minPerSecond × t + ratio × answers + P × leaseTokens', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 12 }),
        fc.constantFrom(0, 0.5, 1, 5),
        fc.constantFrom(5, 10, 40),
        fc.integer({ min: 1, max: 1e9 }),
        (P, minPerSecond, maxTokens, seed) => {
          const spec = normalizeBudget({ kind: 'ratio', ratio: 0.1, minPerSecond, maxTokens }) as RatioBudgetSpec;
          const lease = Math.max(1, Math.round(maxTokens / 10));
          const f = fleetOf(P, spec, lease);
          const random = createSeededRandom(seed);
          for (let i = 0; i < P; i++) f.visit(i);
          let retries = 0;
          let answers = 0;
          for (let round = 0; round < 400; round++) {
            f.clock.advance(random() * 400);
            const r = random();
            // Outages: all processes or some lose Redis; heals: they find it again.
            if (r < 0.05) for (const l of f.links) l.local = true;
            else if (r < 0.1) for (const l of f.links) l.local = random() < 0.5;
            else if (r < 0.2) for (const l of f.links) l.local = false;
            for (let i = 0; i < P; i++) {
              const b = f.budgets[i]!;
              // A dependency mostly failing: a few retries asked for, an answer now and then.
              for (let k = Math.floor(random() * 4); k > 0; k--) if (b.tryAcquire({ throttled: false, timeout: false }, f.clock.now()) !== false) retries++;
              if (random() < 0.2) {
                answers++;
                b.observe({ attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 }, f.clock.now());
              }
              if (random() < 0.5) f.visit(i);
            }
          }
          const t = f.clock.now() / 1000;
          const bound = maxTokens + minPerSecond * t + 0.1 * answers + P * lease;
          expect(retries).toBeLessThanOrEqual(bound + 1e-9);
        },
      ),
      { numRuns: 150, seed: 11 },
    );
  });

  it('ten fallbacks and rejoins with everything spent each time: one budget in all (10 + P leases), not one per process per fallback (500)', () => {
    const spec = normalizeBudget({ kind: 'ratio', ratio: 0.1, minPerSecond: 0, maxTokens: 10 }) as RatioBudgetSpec;
    const P = 5;
    const f = fleetOf(P, spec, 1);
    for (let i = 0; i < P; i++) f.visit(i);
    let spent = 0;
    const drainAll = (): void => {
      for (const b of f.budgets) while (b.tryAcquire({ throttled: false, timeout: false }, f.clock.now()) !== false) spent++;
      for (let i = 0; i < P; i++) f.visit(i);
    };
    for (let k = 0; k < 10; k++) {
      drainAll();
      drainAll();
      for (const l of f.links) l.local = true;
      drainAll();
      for (const l of f.links) l.local = false;
      f.clock.advance(1000);
    }
    drainAll();
    expect(spent).toBeGreaterThanOrEqual(10);
    expect(spent).toBeLessThanOrEqual(10 + P);
  });
});
