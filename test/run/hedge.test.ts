// Hedging through the executor (run/execute) on a test clock: the core's operation state
// machine decides when a hedge goes and which answer wins; the executor races the
// attempts, aborts the losers and reports every attempt.
import { describe, expect, it } from 'vitest';
import { execute, type AttemptContext, type RelentEvent } from '../../src/run/run.js';
import { createHedgeState } from '../../src/core/hedge.js';
import { createRetryBudget } from '../../src/core/budget.js';
import { createSeededRandom, createTestClock, type TestClock } from '../../src/testing/index.js';

type Script = { ms: number; status?: number; error?: string };

/** An operation whose attempt k answers per `script[k-1]` after its ms (virtual), recording aborts. */
function scripted(clock: TestClock, script: Script[]) {
  const calls: { attempt: number; start: number; aborted: number | null }[] = [];
  const fn = (ctx: AttemptContext): Promise<{ status: number; attempt: number }> =>
    new Promise((resolve, reject) => {
      const s = script[ctx.attempt - 1] ?? script[script.length - 1]!;
      const rec = { attempt: ctx.attempt, start: clock.now(), aborted: null as number | null };
      calls.push(rec);
      const cancel = clock.setTimer(() => {
        if (s.error) reject(Object.assign(new Error(s.error), { code: s.error }));
        else resolve({ status: s.status ?? 200, attempt: ctx.attempt });
      }, s.ms);
      ctx.signal.addEventListener(
        'abort',
        () => {
          rec.aborted = clock.now();
          cancel();
          reject(ctx.signal.reason);
        },
        { once: true },
      );
    });
  return { fn, calls };
}

async function drive<T>(clock: TestClock, p: Promise<T>): Promise<T> {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  for (let i = 0; i < 10_000 && !done; i++) if (!(await clock.next())) await clock.flush();
  return p;
}

const HEDGE = { hedge: { delayMs: 10, maxExtraLoad: 1 }, budget: null } as const;

describe('hedged requests (executor, test clock)', () => {
  it('a slow first attempt: the hedge answers first and wins; the first is aborted and recorded as a hedge that lost', async () => {
    const clock = createTestClock();
    const { fn, calls } = scripted(clock, [{ ms: 500 }, { ms: 5 }]);
    const events: RelentEvent[] = [];
    const r = await drive(
      clock,
      execute(fn, { policy: HEDGE, clock, random: createSeededRandom(1), hedging: createHedgeState(), onEvent: (e) => events.push(e) }),
    );
    expect(r.reason).toBe('return');
    expect(r.outcome).toEqual({ ok: true, value: { status: 200, attempt: 2 } });
    expect(calls.map((c) => [c.attempt, c.start, c.aborted])).toEqual([
      [1, 0, 15],
      [2, 10, null],
    ]);
    expect(
      events.map((e) => (e.type === 'attempt' ? [e.attempt, e.decision, e.hedge ?? false, e.errorClass] : [e.type, e.reason, e.hedges, e.hedgeWon])),
    ).toEqual([
      [2, 'return', true, null],
      [1, 'hedge_lost', false, 'aborted'],
      ['result', 'return', 1, true],
    ]);
  });

  it('a first attempt that answers before the delay: no hedge at all', async () => {
    const clock = createTestClock();
    const { fn, calls } = scripted(clock, [{ ms: 8 }]);
    const events: RelentEvent[] = [];
    const r = await drive(clock, execute(fn, { policy: HEDGE, clock, hedging: createHedgeState(), onEvent: (e) => events.push(e) }));
    expect(r.attempts).toBe(1);
    expect(calls).toHaveLength(1);
    expect(events.at(-1)).not.toHaveProperty('hedges');
  });

  it('never hedges an operation that may not be repeated (a POST without a key)', async () => {
    const clock = createTestClock();
    const { fn, calls } = scripted(clock, [{ ms: 500 }, { ms: 5 }]);
    const r = await drive(clock, execute(fn, { policy: HEDGE, clock, method: 'POST', hedging: createHedgeState() }));
    expect(r.attempts).toBe(1);
    expect(calls).toHaveLength(1);
    const keyed = scripted(clock, [{ ms: 500 }, { ms: 5 }]);
    const k = await drive(clock, execute(keyed.fn, { policy: HEDGE, clock, method: 'POST', idempotencyKey: 'k-1', hedging: createHedgeState() }));
    expect(k.attempts).toBe(2);
  });

  it('a failure while the hedge is in flight waits for it (await_hedge), and no further hedge goes', async () => {
    const clock = createTestClock();
    const { fn, calls } = scripted(clock, [{ ms: 15, status: 503 }, { ms: 40 }, { ms: 1 }]);
    const events: RelentEvent[] = [];
    const policy = { hedge: { delayMs: 10, maxHedges: 2, maxExtraLoad: 1 }, budget: null };
    const r = await drive(clock, execute(fn, { policy, clock, random: createSeededRandom(2), hedging: createHedgeState(), onEvent: (e) => events.push(e) }));
    // attempt 1 at 0, hedge 2 at 10; attempt 1 fails at 15: the second hedge (due at 20) never goes.
    expect(calls.map((c) => [c.attempt, c.start])).toEqual([
      [1, 0],
      [2, 10],
    ]);
    expect(r.outcome).toEqual({ ok: true, value: { status: 200, attempt: 2 } });
    expect(events.map((e) => (e.type === 'attempt' ? [e.attempt, e.decision, e.status] : [e.reason, e.hedges, e.hedgeWon]))).toEqual([
      [1, 'await_hedge', 503],
      [2, 'return', 200],
      ['return', 1, true],
    ]);
  });

  it('hedges stop while the dependency fails, and the retry budget pays for every hedge', async () => {
    const clock = createTestClock();
    const hedging = createHedgeState();
    // Ten failing operations: the dependency is failing, not slow.
    for (let i = 0; i < 10; i++) {
      const s = scripted(clock, [{ ms: 1, status: 503 }]);
      await drive(clock, execute(s.fn, { policy: { ...HEDGE, maxAttempts: 1 }, clock, hedging }));
    }
    const slow = scripted(clock, [{ ms: 500 }, { ms: 5 }]);
    const r = await drive(clock, execute(slow.fn, { policy: HEDGE, clock, hedging }));
    expect(r.attempts).toBe(1);
    expect(hedging.stats().skipped).toBeGreaterThan(0);

    // A budget with no token: no hedge either.
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0.1, minPerSecond: 0, maxTokens: 1 });
    expect(budget.tryAcquire({ throttled: false, timeout: false }, 0)).toBe(1);
    const s2 = scripted(clock, [{ ms: 500 }, { ms: 5 }]);
    const r2 = await drive(clock, execute(s2.fn, { policy: { hedge: { delayMs: 10, maxExtraLoad: 1 } }, clock, hedging: createHedgeState(), budget }));
    expect(r2.attempts).toBe(1);
  });

  it('maxExtraLoad: hedges never exceed that share of the operations', async () => {
    const clock = createTestClock();
    const hedging = createHedgeState();
    let calls = 0;
    for (let i = 0; i < 200; i++) {
      const s = scripted(clock, [{ ms: 100 }, { ms: 100 }]);
      await drive(clock, execute(s.fn, { policy: { hedge: { delayMs: 10, maxExtraLoad: 0.05 }, budget: null }, clock, hedging }));
      calls += s.calls.length;
    }
    expect(calls - 200).toBe(10);
    expect(hedging.stats()).toMatchObject({ operations: 200, hedges: 10 });
  });

  it('a percentile delay: no hedge until the latency is known, then at the observed percentile', async () => {
    const clock = createTestClock();
    const hedging = createHedgeState();
    const starts: number[] = [];
    for (let i = 0; i < 40; i++) {
      const s = scripted(clock, [{ ms: i % 20 === 19 ? 50 : 5 }, { ms: 1 }]);
      const t0 = clock.now();
      await drive(clock, execute(s.fn, { policy: { hedge: { delayMs: 'p90', maxExtraLoad: 1 }, budget: null }, clock, hedging }));
      if (s.calls.length > 1) starts.push(s.calls[1]!.start - t0);
    }
    // Only the 40th (a slow one, after 20+ samples) hedges, at the p90 of what was seen: 5 ms (within a bucket, ±2.2 %).
    expect(starts).toHaveLength(1);
    expect(starts[0]).toBeGreaterThanOrEqual(5);
    expect(starts[0]).toBeLessThan(5 * 1.023);
  });

  it('the caller cancels while two attempts are in flight: both are aborted, the operation is cancelled', async () => {
    const clock = createTestClock();
    const { fn, calls } = scripted(clock, [{ ms: 500 }, { ms: 500 }]);
    const c = new AbortController();
    const events: RelentEvent[] = [];
    const p = execute(fn, { policy: HEDGE, clock, hedging: createHedgeState(), signal: c.signal, onEvent: (e) => events.push(e) });
    await clock.advanceAsync(20);
    expect(calls).toHaveLength(2);
    c.abort(new Error('stop'));
    const r = await drive(clock, p);
    expect(r.reason).toBe('cancelled');
    expect(calls.every((x) => x.aborted === 20)).toBe(true);
    expect(
      events
        .filter((e) => e.type === 'attempt')
        .map((e) => e.decision)
        .sort(),
    ).toEqual(['cancelled', 'cancelled']);
  });
});
