import { describe, expect, it } from 'vitest';
import { createPolicy } from '../../src/core/policy.js';
import { createSeededRandom } from '../../src/core/random.js';
import { createOperation } from '../../src/core/operation.js';
import { BROOKER_BACKOFFS, BROOKER_BASE_MS, BROOKER_CAP_MS, brookerPolicySpec, runBrooker, type BrookerResult } from '../../src/sim/brooker.js';

// Fewer runs and clients than the published experiment (100 runs, 10…190 clients) to stay fast;
// the orderings hold on every seed tried (docs/simulator.md has the full table).
const SEEDS = [1, 2];
const results: BrookerResult[] = SEEDS.map((seed) => runBrooker({ seed, runs: 8, clients: [20, 50, 100] }));

function cell(r: BrookerResult, clients: number, strategy: string) {
  const row = r.rows.find((x) => x.clients === clients && x.strategy === strategy);
  if (!row) throw new Error(`no row ${clients}/${strategy}`);
  return row;
}

describe("brooker: Brooker's waits as relent backoff specs", () => {
  it("exponential/full/equal use base 10 with relent's n from 0 = Brooker's base 5 with n from 1", () => {
    const policy = createPolicy(brookerPolicySpec(BROOKER_BACKOFFS.exponential!) as object);
    // The operation state machine, as the simulator drives it; time stands still (the waits do not depend on it).
    const op = createOperation(policy, { idempotent: true, random: createSeededRandom(1) });
    let cmd = op.start(0);
    const waits: number[] = [];
    for (let n = 1; n <= 10; n++) {
      expect(cmd.kind).toBe('call');
      cmd = op.answered({ status: 409, elapsedMs: 20 }, 0);
      expect(op.decision!.decision).toBe('retry');
      if (cmd.kind !== 'wait') throw new Error(`expected a wait, got ${cmd.kind}`);
      waits.push(cmd.delayMs);
      cmd = op.timerFired(0);
    }
    // Brooker: min(cap, 2^n · base) with the attempt counter incremented first (n = 1, 2, …)
    expect(waits).toEqual(Array.from({ length: 10 }, (_, i) => Math.min(BROOKER_CAP_MS, 2 ** (i + 1) * BROOKER_BASE_MS)));
  });

  it('decorrelated keeps base 5: the first wait is in [5, 15)', () => {
    const policy = createPolicy(brookerPolicySpec(BROOKER_BACKOFFS.decorrelated!) as object);
    const random = createSeededRandom(3);
    for (let i = 0; i < 200; i++) {
      const op = createOperation(policy, { idempotent: true, random });
      op.start(0);
      op.answered({ status: 409, elapsedMs: 20 }, 0);
      const d = op.decision!;
      expect(d.delayMs).toBeGreaterThanOrEqual(5);
      expect(d.delayMs).toBeLessThan(15);
    }
  });
});

describe.each(SEEDS.map((seed, i) => [seed, results[i]!] as const))('brooker orderings, seed %s', (_seed, r) => {
  it('without backoff, work grows about quadratically with the clients', () => {
    const w20 = cell(r, 20, 'none').work;
    const w50 = cell(r, 50, 'none').work;
    const w100 = cell(r, 100, 'none').work;
    // work ∝ clients^k with k near 2 (N compete, then N−1, …); network jitter lets a few
    // writes through per round, so k comes out a little under 2
    const k = Math.log(w100 / w20) / Math.log(5);
    const kTop = Math.log(w100 / w50) / Math.log(2);
    expect(k).toBeGreaterThan(1.6);
    expect(kTop).toBeGreaterThan(1.6);
    expect(kTop).toBeLessThan(2.2);
    // and faster than with full jitter
    expect(w100 / w20).toBeGreaterThan(cell(r, 100, 'full').work / cell(r, 20, 'full').work);
  });

  it.each([50, 100])('%s clients: plain exponential barely cuts work and takes by far the longest', (n) => {
    const none = cell(r, n, 'none');
    const exp = cell(r, n, 'exponential');
    expect(exp.work).toBeGreaterThan(0.6 * none.work);
    for (const s of ['none', 'full', 'equal', 'decorrelated']) {
      expect(exp.completionTime).toBeGreaterThan(4 * cell(r, n, s).completionTime);
      if (s !== 'none') expect(exp.work).toBeGreaterThan(cell(r, n, s).work);
    }
  });

  it.each([50, 100])('%s clients: full and equal jitter do the least work; decorrelated more than full; equal slower than full', (n) => {
    const full = cell(r, n, 'full');
    const equal = cell(r, n, 'equal');
    const decorrelated = cell(r, n, 'decorrelated');
    for (const s of ['none', 'exponential', 'decorrelated']) {
      expect(full.work).toBeLessThan(cell(r, n, s).work);
      expect(equal.work).toBeLessThan(cell(r, n, s).work);
    }
    expect(decorrelated.work).toBeGreaterThan(full.work);
    expect(equal.completionTime).toBeGreaterThan(full.completionTime);
  });

  it("every client finishes (Brooker's strategies never give up)", () => {
    expect(r.rows.every((x) => x.gaveUp === 0)).toBe(true);
  });
});

describe('brooker: determinism and custom strategies', () => {
  it('the same seed gives identical rows; another seed different ones', () => {
    const a = runBrooker({ seed: 7, runs: 2, clients: [10, 30] });
    const b = runBrooker({ seed: 7, runs: 2, clients: [10, 30] });
    const c = runBrooker({ seed: 8, runs: 2, clients: [10, 30] });
    expect(b).toEqual(a);
    expect(c.rows).not.toEqual(a.rows);
  });

  it('a cell does not depend on which other cells run with it', () => {
    const wide = runBrooker({ seed: 3, runs: 2, clients: [10, 40] });
    const narrow = runBrooker({ seed: 3, runs: 2, clients: [40] });
    expect(narrow.rows).toEqual(wide.rows.filter((x) => x.clients === 40));
  });

  it('a user policy runs as given (409 made retryable); one that gives up is reported', () => {
    const r = runBrooker({
      runs: 3,
      clients: [30],
      strategies: [{ name: 'mine', policy: { maxAttempts: 3, backoff: { kind: 'full-jitter', baseMs: 10, capMs: 2000 } } }],
    });
    const row = r.rows[0]!;
    expect(row.strategy).toBe('mine');
    expect(row.gaveUp).toBeGreaterThan(0);
    expect(row.work).toBeLessThanOrEqual(3 * 30);
  });
});
