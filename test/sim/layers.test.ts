import { describe, expect, it } from 'vitest';
import { runLayers } from '../../src/sim/layers.js';

describe('layers: retries at every layer (SRE book ch. 22)', () => {
  const r = runLayers({ runs: 1, seed: 1, durationMs: 10_000 });
  const row = (name: string) => r.rows.find((x) => x.variant === name)!;

  it('3 layers × 4 attempts without budgets: 4, 16, 64 calls per user action', () => {
    expect(row('no budgets').callsPerAction).toEqual([4, 16, 64]);
    expect(row('no budgets').amplification).toBe(64);
    expect(row('no budgets').reasons).toEqual({ max_attempts: 1 });
  });

  it("with the SRE book's rule (10 % of requests per layer) and the overload passed up: ~1.1^3 at the bottom", () => {
    const b = row('budgets (SRE rule: 10 % of requests)');
    expect(b.amplification).toBeGreaterThan(1.2);
    expect(b.amplification).toBeLessThan(1.45);
    expect(b.callsPerAction[0]!).toBeLessThan(1.15);
  });

  it("with relent's default budget: a database that answers nothing gets only the floor's retries", () => {
    const b = row('budgets');
    expect(b.amplification).toBeLessThan(1.1);
    expect(b.amplification).toBeLessThan(row('budgets (SRE rule: 10 % of requests)').amplification - 0.2);
    expect(b.callsPerAction[0]!).toBeLessThan(1.03);
  });

  it('with budgets and a layer that gives up answering "do not retry": only the bottom layer retries', () => {
    const b = row('budgets, give-up not retried');
    expect(b.amplification).toBeGreaterThan(1);
    expect(b.amplification).toBeLessThan(1.05);
    expect(b.callsPerAction.slice(0, 2)).toEqual([1, 1]);
  });

  it('the fleet case: 10 processes per layer with a budget each get ten floors; one shared budget gets one', () => {
    const separate = row('fleet, budget per process');
    const shared = row('fleet, shared budget');
    expect(separate.processes).toBe(10);
    expect(separate.amplification).toBeGreaterThan(1.3);
    expect(shared.amplification).toBeLessThan(1.1);
    // A shared budget is one budget for the layer: the same as one process.
    expect(shared.callsPerAction).toEqual(row('budgets').callsPerAction);
    expect(separate.callsPerAction[0]!).toBeGreaterThan(shared.callsPerAction[0]! + 0.1);
  });

  it('the fleet case with relent\'s "don\'t retry" marker: only the layer above the database retries', () => {
    for (const name of ['fleet, budget per process, "don\'t retry"', 'fleet, shared budget, "don\'t retry"']) {
      expect(row(name).callsPerAction.slice(0, 2)).toEqual([1, 1]);
      expect(row(name).reasons).toEqual({ not_retryable: 1 });
    }
    expect(row('fleet, shared budget, "don\'t retry"').amplification).toBeLessThan(row('fleet, budget per process, "don\'t retry"').amplification);
    expect(row('fleet, budget per process, "don\'t retry"').amplification).toBeLessThan(row('fleet, budget per process').amplification);
  });

  it('the marker is honoured whatever the status (here 500, which the layers do not even retry, and 503, which they do)', () => {
    const t = runLayers({ runs: 1, durationMs: 3000, variants: [{ name: 'm', budget: false, giveUpStatus: 503, noRetry: true }] });
    expect(t.rows[0]!.callsPerAction).toEqual([1, 1, 4]);
  });

  it('is deterministic', () => {
    expect(runLayers({ runs: 1, seed: 1, durationMs: 10_000 })).toEqual(r);
  });

  it('a deadline propagated down the stack bounds the calls when time runs out first', () => {
    const t = runLayers({ runs: 1, durationMs: 5000, deadlineMs: 400, variants: [{ name: 'tight', budget: false, giveUpStatus: 503 }] });
    const x = t.rows[0]!;
    expect(x.amplification).toBeLessThan(64);
    expect(x.reasons.deadline_exceeded ?? 0).toBeGreaterThan(0.5);
  });
});
