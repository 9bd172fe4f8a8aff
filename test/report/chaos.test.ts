// relent report counts the attempts chaos injected into apart, from the events of real
// operations (the executor on a test clock, a seeded random).
import { describe, expect, it } from 'vitest';
import { analyzeEventText } from '../../src/report/analyze.js';
import { formatReport } from '../../src/report/format.js';
import { execute, type RelentEvent } from '../../src/run/run.js';
import { createSeededRandom, createTestClock } from '../../src/testing/index.js';

describe('relent report: injected attempts', () => {
  it('counts faults, outcomes and latencies apart, and says so', async () => {
    const clock = createTestClock();
    const random = createSeededRandom(5);
    const events: RelentEvent[] = [];
    const policy = {
      budget: null,
      maxAttempts: 3,
      backoff: { kind: 'constant', delayMs: 1 } as const,
      chaos: { fault: { rate: 0.2, errorClass: 'reset' as const }, outcome: { rate: 0.2, status: 503 }, latency: { rate: 0.2, delayMs: 2 } },
    };
    for (let i = 0; i < 200; i++) {
      const p = execute(() => ({ status: 200 }), { policy, clock, random, onEvent: (e) => events.push(e) });
      await clock.advanceAsync(20);
      await p;
    }
    const byKind = { fault: 0, outcome: 0, latency: 0 };
    for (const e of events) if (e.type === 'attempt' && e.injected !== undefined) byKind[e.injected]++;
    expect(byKind.fault).toBeGreaterThan(0);
    expect(byKind.outcome).toBeGreaterThan(0);
    expect(byKind.latency).toBeGreaterThan(0);
    const r = analyzeEventText(events.map((e) => JSON.stringify(e)).join('\n'));
    const injected = byKind.fault + byKind.outcome + byKind.latency;
    expect(r.chaos).toEqual({ injected, ...byKind, share: injected / r.load.attempts });
    expect(formatReport(r)).toContain(`Injected by chaos: ${injected} attempts`);
    // a log without chaos says nothing of it
    const plain = analyzeEventText(
      events
        .filter((e) => e.type === 'result' || e.injected === undefined)
        .map((e) => JSON.stringify(e))
        .join('\n'),
    );
    expect(plain.chaos.injected).toBe(0);
    expect(formatReport(plain)).not.toContain('Injected by chaos');
  });
});
