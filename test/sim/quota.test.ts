// The quota scenario (relent simulate quota): a published quota, and the core's token
// bucket in front of the core's operation state machine, in virtual time.
import { describe, expect, it } from 'vitest';
import { parseScenario, runScenario } from '../../src/sim/config.js';
import { formatResult } from '../../src/sim/format.js';
import { renderSimulationHtml } from '../../src/sim/html.js';
import { runQuota } from '../../src/sim/quota.js';

describe('relent simulate quota', () => {
  const r = runQuota({ durationMs: 10_000 });
  const row = (name: string) => r.rows.find((x) => x.name.startsWith(name))!;

  it('a rate limit at the quota sends the quota and gets no 429; without one the client sends several times it, mostly 429s', () => {
    const none = row('no rate limit');
    const at = row('rateLimit at the quota (100/s)');
    expect(at.throttled).toBe(0);
    expect(Math.abs(at.sentPerSec - 100) / 100).toBeLessThan(0.05);
    expect(at.failed).toBe(0);
    expect(none.throttled).toBeGreaterThan(none.succeeded);
    expect(none.amplification).toBeGreaterThan(2);
    // Refused at once (no wait): nothing over the quota is sent, the rest answer in one service time.
    const noWait = row('rateLimit at the quota, no wait');
    expect(noWait.throttled).toBe(0);
    expect(noWait.p99).toBeLessThanOrEqual(10);
  });

  it('a rate limit set too high learns from the 429s: a handful, then none', () => {
    const high = row('rateLimit at 2x');
    expect(high.throttled).toBeGreaterThan(0);
    expect(high.throttled).toBeLessThan(20);
    expect(high.sentPerSec).toBeLessThanOrEqual(101);
  });

  it('is deterministic, validates scenario files naming the field, and renders', () => {
    expect(runQuota({ durationMs: 10_000 }).rows).toEqual(r.rows);
    const bad = (o: Record<string, unknown>): string => {
      try {
        parseScenario({ scenario: 'quota', ...o });
      } catch (e) {
        return (e as { field: string }).field;
      }
      return 'none';
    };
    expect(bad({ contenders: [{ name: 'x', rateLimit: { ratePerSecond: 0 } }] })).toBe('contenders[0].rateLimit.ratePerSecond');
    expect(bad({ contenders: [{ name: 'x', policy: { maxAttempts: 0 } }] })).toBe('contenders[0].policy.maxAttempts');
    expect(bad({ quotaPerSec: 0 })).toBe('quotaPerSec');
    const res = runScenario(parseScenario({ scenario: 'quota', durationMs: 3000, contenders: [{ name: 'at 100', rateLimit: { ratePerSecond: 100 } }] }));
    expect(formatResult(res)).toMatch(/at 100 /);
    expect(renderSimulationHtml(res)).toContain('A published quota');
  });
});
