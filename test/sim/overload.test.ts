import { describe, expect, it } from 'vitest';
import { RATIO_BUDGET_DEFAULTS } from '../../src/core/budget.js';
import { POLICY_DEFAULTS } from '../../src/core/policy.js';
import { MEASURED_OVERLOAD, PEER_POLICIES, RELENT_POLICIES } from '../../src/sim/policies.js';
import { OVERLOAD_DEFAULTS, runOverload, type OverloadResult, type OverloadRow } from '../../src/sim/overload.js';

// The calibration set-up of issue 6 (400/s, 320 operations/s, 80/s for 10 s, 503, 2 s deadline), one run.
const calibration: OverloadResult = runOverload({ runs: 1, seed: 1 });
const row = (r: OverloadResult, name: string): OverloadRow => {
  const x = r.rows.find((y) => y.policy === name);
  if (!x) throw new Error(`no row ${name}`);
  return x;
};

describe('overload: the modelled peers land within ±20 % of the measured amplification', () => {
  it.each(Object.keys(MEASURED_OVERLOAD))('%s', (name) => {
    const r = row(calibration, name);
    const m = MEASURED_OVERLOAD[name]!;
    expect(r.fault.amplification).toBeGreaterThanOrEqual(0.8 * m.amplification);
    expect(r.fault.amplification).toBeLessThanOrEqual(1.2 * (m.amplificationMax ?? m.amplification));
    expect(r.calibration).toBeGreaterThanOrEqual(0.8);
    expect(r.calibration).toBeLessThanOrEqual(1.2);
  });

  it('every peer default is modelled and compared', () => {
    const names = calibration.rows.map((r) => r.policy);
    for (const p of [...PEER_POLICIES, ...RELENT_POLICIES]) expect(names).toContain(p.name);
  });

  it('before the fault nobody retries (capacity 400/s > 320/s)', () => {
    for (const r of calibration.rows) expect(r.before.amplification).toBeLessThan(1.01);
  });

  it('no retries: success share = capacity ÷ demand = 25 %', () => {
    const none = row(calibration, 'none');
    expect(none.fault.amplification).toBe(1);
    expect(none.fault.successShare).toBeGreaterThan(0.23);
    expect(none.fault.successShare).toBeLessThan(0.27);
  });
});

describe("overload: relent's defaults with the shared budget", () => {
  const relent = row(calibration, 'relent');
  const none = row(calibration, 'none');
  const peers = PEER_POLICIES.map((p) => row(calibration, p.name));

  it('keeps amplification ≤ 1.2x through the fault window', () => {
    expect(relent.fault.amplification).toBeLessThanOrEqual(1.2);
    expect(row(calibration, 'http-429').fault.amplification).toBeLessThanOrEqual(1.2);
  });

  it("with a success share within 2 points of the best peer's", () => {
    // against the shares measured with the real libraries (best: undici and cockatiel, 32 %)
    const bestMeasured = Math.max(...Object.values(MEASURED_OVERLOAD).map((m) => m.successShareMax ?? m.successShare));
    expect(relent.fault.successShare).toBeGreaterThanOrEqual(bestMeasured - 0.02);
    // and against every simulated peer but cockatiel, whose simulated share (~36 %) overstates
    // the measured 32 %: the model lets its ~50 calls per operation through the front end
    // slightly more often than the real server did.
    for (const p of peers.filter((x) => x.policy !== 'cockatiel')) {
      expect(relent.fault.successShare, p.policy).toBeGreaterThanOrEqual(p.fault.successShare - 0.02);
    }
    expect(relent.fault.successShare).toBeGreaterThan(none.fault.successShare + 0.05);
  });

  it('causes no storm after the fault ends', () => {
    // Two deadlines after the fault, when the fault's operations and those they delayed
    // have ended, load is what it is without retries.
    expect(relent.settledLoad).toBeLessThanOrEqual(none.settledLoad! + 0.02);
    expect(relent.recoveryMs).toBeLessThan(2 * OVERLOAD_DEFAULTS.deadlineMs);
    // The recovery's peak is below that of every peer whose retries also reach it.
    for (const p of peers.filter((x) => x.fault.successShare > none.fault.successShare + 0.02)) {
      expect(relent.peakLoadAfter, p.policy).toBeLessThan(p.peakLoadAfter);
    }
  });

  it("the storm metric sees a storm: cockatiel's retry loop keeps the dependency saturated (seed 5)", () => {
    const pick = (n: string) => [...PEER_POLICIES, ...RELENT_POLICIES].find((p) => p.name === n)!;
    const r = runOverload({ runs: 1, seed: 5, policies: [pick('none'), pick('cockatiel'), pick('relent')] });
    expect(row(r, 'cockatiel').settledLoad).toBeGreaterThan(5);
    expect(row(r, 'relent').settledLoad).toBeLessThanOrEqual(row(r, 'none').settledLoad! + 0.02);
  });

  it('the budget is what holds the load, and waiting for it is what keeps the success', () => {
    expect(row(calibration, 'relent-no-budget').fault.amplification).toBeGreaterThan(2);
    expect(relent.fault.reasons.budget_exhausted).toBeGreaterThan(0.5);
    // failing fast on an empty budget holds the load too, but loses the recovery's success
    const failFast = row(calibration, 'relent-fail-fast');
    expect(failFast.fault.amplification).toBeLessThanOrEqual(1.2);
    expect(failFast.fault.successShare).toBeLessThan(relent.fault.successShare - 0.04);
    expect(failFast.fault.p99Ms).toBeLessThan(200);
  });

  // The bounds the ratio budget promises (src/core/budget.ts), over a window of T seconds
  // and `clients` budgets: with deposit "operation", retries <= ratio × operations +
  // clients × (minPerSecond × T + maxTokens); with deposit "success" (the default), failed
  // retries <= ratio × answered + the same floor, and a retry only succeeds when the
  // dependency serves it, so retries <= (1 + ratio) × (capacity × T + burst) + the floor.
  it.each([
    { clients: 1, arrivalsPerSec: 320, capacity: 80 },
    { clients: 10, arrivalsPerSec: 320, capacity: 80 },
    { clients: 25, arrivalsPerSec: 500, capacity: 0 },
    { clients: 4, arrivalsPerSec: 100, capacity: 20 },
  ])('holds the budget bound: %o', ({ clients, arrivalsPerSec, capacity }) => {
    const f = { startMs: 6000, endMs: 14_000, capacityPerSec: capacity };
    const r = runOverload({ runs: 1, seed: 5, clients, arrivalsPerSec, durationMs: 20_000, faults: [f], policies: RELENT_POLICIES.filter((p) => p.budget) });
    const seconds = (f.endMs - f.startMs) / 1000;
    const served = capacity * seconds + OVERLOAD_DEFAULTS.dependency.burst;
    for (const x of r.rows) {
      const p = RELENT_POLICIES.find((y) => y.name === x.policy)!;
      const b = { ...RATIO_BUDGET_DEFAULTS, ...POLICY_DEFAULTS.budget, ...(typeof p.policy === 'object' ? p.policy.budget : {}) };
      const ops = x.fault.operations;
      const floor = clients * (b.minPerSecond * seconds + b.maxTokens);
      const retries = b.deposit === 'operation' ? b.ratio * ops + floor : (1 + b.ratio) * served + floor;
      expect(x.fault.amplification, x.policy).toBeLessThanOrEqual(1 + retries / ops);
      // a dependency that serves nothing gets the floor's retries and nothing more
      if (capacity === 0 && b.deposit !== 'operation') expect(x.fault.amplification, x.policy).toBeLessThanOrEqual(1 + floor / ops + 0.001);
    }
  });
});

describe('overload: what a custom scenario shows', () => {
  const pick = (n: string) => [...PEER_POLICIES, ...RELENT_POLICIES].find((p) => p.name === n)!;
  it('the measured figures appear only beside the set-up they were measured in', () => {
    expect(row(calibration, 'got').measured).not.toBeNull();
    const other = runOverload({ runs: 1, durationMs: 12_000, faults: [{ startMs: 4000, endMs: 8000, capacityPerSec: 80 }], policies: [pick('got')] });
    expect(other.rows[0]!.measured).toBeNull();
    expect(other.rows[0]!.calibration).toBeNull();
    const slower = runOverload({ runs: 1, arrivalsPerSec: 200, policies: [pick('got')] });
    expect(slower.rows[0]!.measured).toBeNull();
  });
  it('"settled" is null when the arrivals end before two deadlines after the fault', () => {
    const r = runOverload({
      runs: 1,
      durationMs: 12_000,
      deadlineMs: 3000,
      faults: [{ startMs: 4000, endMs: 8000, capacityPerSec: 80 }],
      policies: [pick('none')],
    });
    expect(r.rows[0]!.settledLoad).toBeNull();
    expect(row(calibration, 'none').settledLoad).toBeGreaterThan(0.9);
  });
});

describe('overload: model and determinism', () => {
  const policies = [PEER_POLICIES[1]!, RELENT_POLICIES[0]!];

  it('the same seed gives identical results; another seed different ones', () => {
    const a = runOverload({ runs: 1, seed: 11, durationMs: 12_000, faults: [{ startMs: 4000, endMs: 8000, capacityPerSec: 80 }], policies });
    const b = runOverload({ runs: 1, seed: 11, durationMs: 12_000, faults: [{ startMs: 4000, endMs: 8000, capacityPerSec: 80 }], policies });
    const c = runOverload({ runs: 1, seed: 12, durationMs: 12_000, faults: [{ startMs: 4000, endMs: 8000, capacityPerSec: 80 }], policies });
    expect(b).toEqual(a);
    expect(c).not.toEqual(a);
  });

  it('a queue in front of the dependency turns rejections into waits (and timeouts)', () => {
    const r = runOverload({
      runs: 1,
      durationMs: 12_000,
      faults: [{ startMs: 4000, endMs: 8000, capacityPerSec: 80 }],
      policies: [PEER_POLICIES[0]!],
      dependency: { ...OVERLOAD_DEFAULTS.dependency, queueLimit: 1000 },
    });
    const none = r.rows[0]!;
    expect(none.fault.p99Ms).toBeGreaterThan(1000);
    expect(none.fault.reasons.deadline_exceeded ?? 0).toBeGreaterThan(0.3);
  });

  it('a Retry-After on the rejections is honoured by the policies that read it', () => {
    const r = runOverload({
      runs: 1,
      durationMs: 12_000,
      faults: [{ startMs: 4000, endMs: 8000, capacityPerSec: 80 }],
      policies: PEER_POLICIES.filter((p) => p.name === 'ky' || p.name === 'p-retry'),
      dependency: { ...OVERLOAD_DEFAULTS.dependency, retryAfterSec: 1 },
    });
    // ky waits the 1 s the server asks (afterStatusCodes has 503): at most 2 attempts fit in 2 s
    expect(row(r, 'ky').fault.amplification).toBeLessThan(2.05);
    expect(row(r, 'p-retry').fault.amplification).toBeGreaterThan(1.5);
  });
});

describe('chaos in the simulator (the policy field, no scenario code of its own)', () => {
  it('injected faults never reach the dependency; a latency still does; the same seed repeats', () => {
    const base = { budget: null, maxAttempts: 1, backoff: { kind: 'constant', delayMs: 10 } } as const;
    const cfg = { runs: 1, seed: 3, durationMs: 5_000, faults: [] };
    const r = runOverload({
      ...cfg,
      policies: [
        { name: 'plain', policy: base, budget: false },
        { name: 'faults', policy: { ...base, chaos: { fault: { rate: 0.5, errorClass: 'connect_refused' } } }, budget: false },
        { name: 'latency', policy: { ...base, chaos: { latency: { rate: 1, delayMs: 5 } } }, budget: false },
      ],
    });
    const [plain, faults, latency] = r.rows;
    const sent = (row: typeof plain) => row!.loadPerSecond.reduce((a, b) => a + b, 0);
    // one attempt per operation: half of them injected, and not sent
    expect(sent(faults) / sent(plain)).toBeGreaterThan(0.4);
    expect(sent(faults) / sent(plain)).toBeLessThan(0.6);
    expect(sent(latency)).toBe(sent(plain));
    const again = runOverload({
      ...cfg,
      policies: [{ name: 'faults', policy: { ...base, chaos: { fault: { rate: 0.5, errorClass: 'connect_refused' } } }, budget: false }],
    });
    expect(sent(again.rows[0])).toBe(sent(faults));
  });
});
