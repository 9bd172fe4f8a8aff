// The capacity scenario (relent simulate capacity): a dependency whose capacity drops 5x,
// under the core's adaptive limits, fixed bulkheads and no limit, in virtual time.
import { describe, expect, it } from 'vitest';
import { runCapacity } from '../../src/sim/capacity.js';
import { parseScenario, runScenario } from '../../src/sim/config.js';
import { formatResult } from '../../src/sim/format.js';
import { renderSimulationHtml } from '../../src/sim/html.js';

describe('relent simulate capacity', () => {
  const r = runCapacity({});
  const row = (name: string) => r.rows.find((x) => x.name.startsWith(name))!;

  it('the gradient limit converges within 2 s, keeps the dependency within 2x its healthy latency, and fails less than any fixed bulkhead', () => {
    const g = row('relent gradient');
    expect(g.convergedMs).not.toBeNull();
    expect(g.convergedMs!).toBeLessThanOrEqual(2000);
    expect(g.latencyRatio).toBeLessThanOrEqual(2);
    expect(g.inFlightP99).toBeLessThanOrEqual(15);
    for (const f of r.rows.filter((x) => x.name.startsWith('fixed'))) expect(g.failed).toBeLessThan(f.failed);
    expect(g.failed).toBeLessThan(row('no limit').failed);
    // Without a limit the dependency's own queue holds the excess: its latency is 20x.
    expect(row('no limit').latencyRatio).toBeGreaterThan(10);
    expect(row('fixed 50').convergedMs).toBeNull();
    // The trace: the limit before, during and after the drop (250 ms apart).
    expect(g.limitTrace[4 * 29]!).toBeLessThanOrEqual(15);
    expect(Math.max(...(g.limitTrace.slice(4 * 35) as number[]))).toBeGreaterThan(20);
  });

  it('is deterministic: the same seed, the same numbers; another seed, other numbers', () => {
    const again = runCapacity({});
    expect(again.rows.map((x) => [x.failed, x.convergedMs, x.dropLatencyP50])).toEqual(r.rows.map((x) => [x.failed, x.convergedMs, x.dropLatencyP50]));
    const other = runCapacity({ seed: 2, contenders: [{ name: 'g', limit: { kind: 'gradient', initial: 20, max: 200 } }] });
    expect(other.rows[0]!.failed).not.toBe(row('relent gradient').failed);
  });

  it('scenario files: contenders and settings validated, errors name the field', () => {
    const bad = (o: Record<string, unknown>): string => {
      try {
        parseScenario({ scenario: 'capacity', ...o });
      } catch (e) {
        return (e as { field: string }).field;
      }
      return 'none';
    };
    expect(bad({ contenders: [{ name: 'x', limit: { kind: 'vegas' } }] })).toBe('contenders[0].limit.kind');
    expect(bad({ contenders: [{ name: 'x', fixed: 0 }] })).toBe('contenders[0].fixed');
    expect(bad({ contenders: [{ name: 'x', fixed: 3, limit: { kind: 'aimd' } }] })).toBe('contenders[0].fixed');
    expect(bad({ contenders: [{ name: 'x' }, { name: 'x' }] })).toBe('contenders[1].name');
    expect(bad({ degraded: -1 })).toBe('degraded');
    expect(bad({ bogus: 1 })).toBe('bogus');
    const s = parseScenario({
      scenario: 'capacity',
      durationMs: 4000,
      dropAtMs: 1000,
      dropForMs: 2000,
      contenders: [{ name: 'aimd', limit: { kind: 'aimd', slowMs: 80 } }, { name: 'cap 10', fixed: 10 }, { name: 'none' }],
    });
    const res = runScenario(s);
    expect(res.scenario).toBe('capacity');
    const text = formatResult(res);
    expect(text).toMatch(/aimd .*\n.*cap 10 .*\n.*none /);
    expect(renderSimulationHtml(res)).toContain('Calls in flight');
  });
});
