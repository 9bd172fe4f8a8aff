// relent report shows hedged requests: how many, how many won, the extra load — from the
// events of real hedged operations (the executor on a test clock), not retries.
import { describe, expect, it } from 'vitest';
import { analyzeEventText } from '../../src/report/analyze.js';
import { formatReport } from '../../src/report/format.js';
import { execute, type AttemptContext, type RelentEvent } from '../../src/run/run.js';
import { createHedgeState } from '../../src/core/hedge.js';
import { createTestClock } from '../../src/testing/index.js';

describe('relent report: hedged requests', () => {
  it('counts hedges apart from retries, those that won, and their extra load', async () => {
    const clock = createTestClock();
    const hedging = createHedgeState();
    const events: RelentEvent[] = [];
    // 10 operations; the 1st, 4th and 7th have a slow first attempt: their hedge wins.
    for (let i = 0; i < 10; i++) {
      const slow = i % 3 === 0 && i < 9;
      const fn = (ctx: AttemptContext) =>
        new Promise<{ status: number }>((resolve, reject) => {
          const cancel = clock.setTimer(() => resolve({ status: 200 }), ctx.attempt === 1 && slow ? 500 : 5);
          ctx.signal.addEventListener(
            'abort',
            () => {
              cancel();
              reject(ctx.signal.reason);
            },
            { once: true },
          );
        });
      const p = execute(fn, { policy: { hedge: { delayMs: 20, maxExtraLoad: 1 }, budget: null }, clock, hedging, onEvent: (e) => events.push(e) });
      await clock.advanceAsync(600);
      await p;
    }
    const r = analyzeEventText(events.map((e) => JSON.stringify(e)).join('\n'));
    expect(r.hedging).toEqual({ hedges: 3, won: 3, extraLoad: 0.3 });
    expect(r.load.retries).toBe(0);
    expect(r.perAttempt.decisions.map((d) => d.decision)).toContain('hedge_lost');
    expect(formatReport(r)).toMatch(/Hedged requests: 3 hedges \(extra load 30(\.0)? ?% of operations\), 3 won/);
  });
});
