// The tail scenario (relent simulate tail): hedging through the core's operation state
// machine against a slow tail, and in a failing window, in virtual time.
import { describe, expect, it } from 'vitest';
import { parseScenario, runScenario } from '../../src/sim/config.js';
import { formatResult } from '../../src/sim/format.js';
import { renderSimulationHtml } from '../../src/sim/html.js';
import { runTail } from '../../src/sim/tail.js';

describe('relent simulate tail', () => {
  const r = runTail({});
  const row = (name: string) => r.rows.find((x) => x.name.startsWith(name))!;

  it('hedging at p95 cuts the p99 at least 5x for extra requests within maxExtraLoad (5 %); hedges win', () => {
    const none = row('no hedging');
    const h = row('hedge at p95');
    expect(none.p99).toBeGreaterThanOrEqual(500);
    expect(none.p99 / h.p99).toBeGreaterThanOrEqual(5);
    expect(h.extra).toBeLessThanOrEqual(0.05);
    expect(h.extra).toBeGreaterThan(0);
    expect(h.hedgesWon).toBeGreaterThan(0.9 * h.hedges);
    expect(none.hedges).toBe(0);
  });

  it('in the failing window hedges stop: the requests per operation stay within 1.05x of no hedging', () => {
    const none = row('no hedging');
    for (const h of r.rows.filter((x) => x.name.startsWith('hedge'))) {
      expect(h.failingHedges).toBeLessThan(0.02 * h.failingOperations);
      expect(h.failingAmplification / none.failingAmplification).toBeLessThanOrEqual(1.05);
    }
  });

  it('is deterministic, validates scenario files naming the field, and renders', () => {
    expect(runTail({}).rows).toEqual(r.rows);
    const bad = (o: Record<string, unknown>): string => {
      try {
        parseScenario({ scenario: 'tail', ...o });
      } catch (e) {
        return (e as { field: string }).field;
      }
      return 'none';
    };
    expect(bad({ contenders: [{ name: 'x', policy: { hedge: { delayMs: 'p100' } } }] })).toBe('contenders[0].policy.hedge.delayMs');
    expect(bad({ contenders: [{ name: 'x', policy: 5 }] })).toBe('contenders[0].policy');
    expect(bad({ slowShare: 2 })).toBe('slowShare');
    expect(
      bad({
        contenders: [
          { name: 'x', policy: 'http-429' },
          { name: 'x', policy: 'http-429' },
        ],
      }),
    ).toBe('contenders[1].name');
    const res = runScenario(
      parseScenario({
        scenario: 'tail',
        durationMs: 5000,
        failAtMs: 4000,
        failForMs: 1000,
        contenders: [{ name: 'fixed 10', policy: { preset: 'http-429', hedge: { delayMs: 10 } } }],
      }),
    );
    expect(formatResult(res)).toMatch(/fixed 10 /);
    expect(renderSimulationHtml(res)).toContain('The slow tail');
  });
});
