import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { execute, run, type AttemptContext, type RelentEvent } from '../../src/run/run.js';
import { createRetryBudget } from '../../src/core/budget.js';
import type { RelentError } from '../../src/core/errors.js';
import { createTestClock, createSeededRandom, type TestClock } from '../../src/testing/index.js';
import { replay } from '../../src/run/replay.js';

/** Moves the test clock until the promise settles (never sleeps on the wall clock). */
async function drive<T>(clock: TestClock, p: Promise<T>): Promise<T> {
  let done = false;
  p.then(
    () => {
      done = true;
    },
    () => {
      done = true;
    },
  );
  for (let idle = 0; !done;) {
    if (await clock.next()) idle = 0;
    else if (++idle > 50) throw new Error('stalled');
  }
  return p;
}

/** An operation that answers with `answers[attempt-1]` after `ms` of virtual time, honouring the signal. */
function scripted(clock: TestClock, answers: { status?: number; error?: unknown; ms: number }[], calls: AttemptContext[] = []) {
  return (ctx: AttemptContext) => {
    calls.push(ctx);
    const a = answers[ctx.attempt - 1]!;
    return new Promise<{ status: number }>((resolve, reject) => {
      const cancel = clock.setTimer(() => (a.error !== undefined ? reject(a.error) : resolve({ status: a.status! })), a.ms);
      ctx.signal.addEventListener('abort', () => {
        cancel();
        reject(ctx.signal.reason);
      });
    });
  };
}

describe('run(): the S3 fixture through the real executor on a test clock', () => {
  it('one operationId, three requestIds, remaining 400 → 280 → 160, result 200', async () => {
    const clock = createTestClock();
    const events: RelentEvent[] = [];
    const calls: AttemptContext[] = [];
    const op = scripted(
      clock,
      [
        { status: 503, ms: 80 },
        { status: 503, ms: 80 },
        { status: 200, ms: 50 },
      ],
      calls,
    );
    const value = await drive(
      clock,
      run(op, {
        clock,
        random: createSeededRandom(1),
        operationId: 'op-42',
        method: 'GET',
        policy: { maxAttempts: 3, deadlineMs: 400, backoff: { kind: 'constant', delayMs: 40 } },
        onEvent: (e) => events.push(e),
      }),
    );
    expect(value).toEqual({ status: 200 });
    expect(calls.map((c) => c.requestId)).toEqual(['op-42/attempt-1', 'op-42/attempt-2', 'op-42/attempt-3']);
    expect(new Set(calls.map((c) => c.operationId))).toEqual(new Set(['op-42']));
    const attempts = events.filter((e) => e.type === 'attempt');
    expect(attempts.map((e) => [e.attempt, e.remainingMs, e.elapsedMs, e.decision])).toEqual([
      [1, 400, 80, 'retry'],
      [2, 280, 80, 'retry'],
      [3, 160, 50, 'return'],
    ]);
    // `ts` is the injected clock's wall time when each attempt was decided (the test clock starts at 2026-01-01).
    const wall0 = Date.UTC(2026, 0, 1);
    expect(attempts.map((e) => e.ts - wall0)).toEqual([80, 200, 290]);
    expect(events.at(-1)).toEqual({ type: 'result', operationId: 'op-42', status: 200, errorClass: null, reason: 'return', attempts: 3, ts: wall0 + 290 });
    expect(clock.pending()).toBe(0); // no timer leaks
  });

  it('emits each attempt event before the next call', async () => {
    const clock = createTestClock();
    const log: string[] = [];
    const inner = scripted(clock, [
      { status: 503, ms: 1 },
      { status: 200, ms: 1 },
    ]);
    await drive(
      clock,
      run(
        (ctx) => {
          log.push(`call ${ctx.attempt}`);
          return inner(ctx);
        },
        {
          clock,
          random: createSeededRandom(1),
          policy: { backoff: { kind: 'constant', delayMs: 5 } },
          onEvent: (e) => log.push(e.type === 'attempt' ? `event ${e.attempt}` : 'result'),
        },
      ),
    );
    expect(log).toEqual(['call 1', 'event 1', 'call 2', 'event 2', 'result']);
  });
});

describe('unknown outcomes (R6)', () => {
  it('POST timeout: one call, check_state, no second POST; without a state check a clear error', async () => {
    const clock = createTestClock();
    const calls: AttemptContext[] = [];
    const op = scripted(
      clock,
      [
        { status: 201, ms: 500 },
        { status: 201, ms: 1 },
      ],
      calls,
    );
    const p = run(op, { clock, method: 'POST', policy: { deadlineMs: 400, attemptTimeoutMs: 120 } });
    await expect(drive(clock, p)).rejects.toMatchObject({ code: 'ERR_UNKNOWN_OUTCOME', reason: 'check_state', attempts: 1 });
    expect(calls).toHaveLength(1);
    expect(calls[0]!.signal.aborted).toBe(true); // the attempt was told to stop
  });
  it('with a state check, its answer is the result', async () => {
    const clock = createTestClock();
    const events: RelentEvent[] = [];
    const op = scripted(clock, [{ status: 201, ms: 500 }]);
    const value = await drive(
      clock,
      run(op, {
        clock,
        method: 'POST',
        policy: { deadlineMs: 400, attemptTimeoutMs: 120 },
        stateCheck: async () => ({ status: 200, found: true }) as never,
        onEvent: (e) => events.push(e),
      }),
    );
    expect(value).toEqual({ status: 200, found: true });
    expect(events.at(-1)).toMatchObject({ type: 'result', reason: 'check_state', errorClass: 'timeout', stateCheck: { status: 200 } });
  });
  it('POST with an idempotency key is retried after a timeout', async () => {
    const clock = createTestClock();
    const calls: AttemptContext[] = [];
    const op = scripted(
      clock,
      [
        { status: 201, ms: 500 },
        { status: 201, ms: 10 },
      ],
      calls,
    );
    expect(
      await drive(
        clock,
        run(op, { clock, random: createSeededRandom(2), method: 'POST', idempotencyKey: 'k', policy: { deadlineMs: 1000, attemptTimeoutMs: 120 } }),
      ),
    ).toEqual({ status: 201 });
    expect(calls).toHaveLength(2);
  });
});

describe('deadline and timeouts (R1, R2)', () => {
  it('a hanging dependency: attempt timeout 100 ms, deadline 350 ms → at most 3 calls, ends at the deadline', async () => {
    const clock = createTestClock();
    const calls: AttemptContext[] = [];
    const hang = (ctx: AttemptContext) => {
      calls.push(ctx);
      return new Promise<never>(() => {});
    };
    const p = execute(hang, {
      clock,
      random: createSeededRandom(3),
      method: 'GET',
      policy: { maxAttempts: 10, deadlineMs: 350, attemptTimeoutMs: 100, backoff: { kind: 'constant', delayMs: 20 } },
    });
    const r = await drive(clock, p);
    expect(calls.length).toBeLessThanOrEqual(3);
    expect(r.reason).toBe('deadline_exceeded');
    expect(clock.now()).toBeLessThanOrEqual(350);
    expect(r.outcome.ok).toBe(false);
    expect((r.outcome as { error: RelentError }).error.code).toBe('ERR_DEADLINE_EXCEEDED');
  });
  it('a backoff longer than the deadline releases the caller at once, not after the wait', async () => {
    const clock = createTestClock();
    const op = scripted(clock, [
      { status: 503, ms: 10 },
      { status: 200, ms: 10 },
    ]);
    const r = await drive(clock, execute(op, { clock, policy: { deadlineMs: 500, backoff: { kind: 'constant', delayMs: 2000 } } }));
    expect(r.reason).toBe('deadline_exceeded');
    expect(clock.now()).toBe(10);
    expect(r.outcome).toEqual({ ok: true, value: { status: 503 } }); // the last real outcome, not a synthetic success
  });
  it('per-call deadlineMs and attemptTimeoutMs override the policy', async () => {
    const clock = createTestClock();
    const calls: AttemptContext[] = [];
    const hang = (ctx: AttemptContext) => {
      calls.push(ctx);
      return new Promise<never>(() => {});
    };
    await drive(clock, execute(hang, { clock, deadlineMs: 90, attemptTimeoutMs: 30, policy: { backoff: { kind: 'constant', delayMs: 0 }, maxAttempts: 10 } }));
    expect(calls.map((c) => c.timeoutMs)).toEqual([30, 30, 30]);
    expect(calls.map((c) => c.remainingMs)).toEqual([90, 60, 30]);
  });
  it("startedAt: the deadline counts from the caller's own clock reading (a later reading would give it ms it no longer has); a future or non-number one is ignored", async () => {
    for (const [back, endsAt] of [
      [30, 70],
      [0, 100],
      [-50, 100],
      [Number.NaN, 100],
    ] as const) {
      const clock = createTestClock();
      await clock.advanceAsync(1_000);
      const calls: AttemptContext[] = [];
      const hang = (ctx: AttemptContext) => {
        calls.push(ctx);
        return new Promise<never>(() => {});
      };
      const r = await drive(clock, execute(hang, { clock, deadlineMs: 100, startedAt: clock.now() - back, policy: { maxAttempts: 1 } }));
      expect(r.reason).toBe('deadline_exceeded');
      expect(clock.now() - 1_000, `startedAt now - ${back}`).toBe(endsAt);
    }
  });
  it('no call when the deadline is already spent: a 503 arriving at the deadline ends the operation', async () => {
    const clock = createTestClock();
    const calls: AttemptContext[] = [];
    const op = scripted(
      clock,
      [
        { status: 503, ms: 100 },
        { status: 200, ms: 1 },
      ],
      calls,
    );
    const r = await drive(clock, execute(op, { clock, policy: { deadlineMs: 100, backoff: { kind: 'constant', delayMs: 0 } } }));
    expect(calls).toHaveLength(1);
    expect(r.reason).toBe('deadline_exceeded');
  });
});

describe('cancellation (R10)', () => {
  it('an abort during the backoff wait rejects at once; no further call', async () => {
    const clock = createTestClock();
    const ac = new AbortController();
    const calls: AttemptContext[] = [];
    const op = scripted(
      clock,
      [
        { status: 503, ms: 10 },
        { status: 200, ms: 10 },
      ],
      calls,
    );
    const p = run(op, { clock, signal: ac.signal, policy: { deadlineMs: 60_000, backoff: { kind: 'constant', delayMs: 30_000 } } });
    await clock.advanceAsync(20);
    ac.abort(new Error('user left'));
    await expect(p).rejects.toMatchObject({ code: 'ERR_CANCELLED', reason: 'cancelled' });
    expect(calls).toHaveLength(1);
    expect(clock.now()).toBe(20);
    expect(clock.pending()).toBe(0);
  });
  it("an abort during a call aborts the attempt's signal and rejects at once", async () => {
    const clock = createTestClock();
    const ac = new AbortController();
    const calls: AttemptContext[] = [];
    const op = scripted(clock, [{ status: 200, ms: 1000 }], calls);
    const p = run(op, { clock, signal: ac.signal });
    await clock.advanceAsync(5);
    ac.abort();
    await expect(p).rejects.toMatchObject({ code: 'ERR_CANCELLED' });
    expect(calls[0]!.signal.aborted).toBe(true);
  });
  it('an already aborted signal makes no call', async () => {
    const ac = new AbortController();
    ac.abort();
    let called = 0;
    await expect(
      run(
        async () => {
          called++;
        },
        { signal: ac.signal },
      ),
    ).rejects.toMatchObject({ code: 'ERR_CANCELLED', attempts: 0 });
    expect(called).toBe(0);
  });
});

describe('outcomes for the caller', () => {
  it("when retries run out, the operation's own error is rethrown (same object)", async () => {
    const clock = createTestClock();
    const boom = Object.assign(new Error('db down'), { code: 'ECONNRESET' });
    const op = scripted(clock, [
      { error: boom, ms: 1 },
      { error: boom, ms: 1 },
      { error: boom, ms: 1 },
    ]);
    const events: RelentEvent[] = [];
    const p = run(op, { clock, random: createSeededRandom(4), policy: { backoff: { kind: 'constant', delayMs: 1 } }, onEvent: (e) => events.push(e) });
    await expect(drive(clock, p)).rejects.toBe(boom);
    expect(events.filter((e) => e.type === 'attempt').map((e) => e.type === 'attempt' && e.errorClass)).toEqual(['reset', 'reset', 'reset']);
    expect(events.at(-1)).toMatchObject({ reason: 'max_attempts', attempts: 3 });
  });
  it('a non-retryable answer is returned as is after one call', async () => {
    const clock = createTestClock();
    const calls: AttemptContext[] = [];
    expect(await drive(clock, run(scripted(clock, [{ status: 404, ms: 1 }], calls), { clock }))).toEqual({ status: 404 });
    expect(calls).toHaveLength(1);
  });
  it('an empty shared budget stops retries with budget_exhausted', async () => {
    const clock = createTestClock();
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0, minPerSecond: 0, maxTokens: 1 });
    const outcomes: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await drive(
        clock,
        execute(
          scripted(clock, [
            { status: 503, ms: 1 },
            { status: 503, ms: 1 },
          ]),
          { clock, budget, policy: { maxAttempts: 2, backoff: { kind: 'constant', delayMs: 1 } } },
        ),
      );
      outcomes.push(r.reason);
    }
    expect(outcomes).toEqual(['max_attempts', 'budget_exhausted', 'budget_exhausted']);
  });
  it('budgetExhausted "wait": the retry is sent once the shared budget has a token again, within the deadline', async () => {
    const clock = createTestClock();
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0, minPerSecond: 2, maxTokens: 1 });
    budget.tryAcquire({ throttled: false, timeout: false }, 0);
    // another call of this client was just answered: the dependency is serving, waiting may pay off
    budget.observe({ attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 }, 0);
    const calls: AttemptContext[] = [];
    const op = scripted(
      clock,
      [
        { status: 503, ms: 10 },
        { status: 200, ms: 10 },
      ],
      calls,
    );
    const r = await drive(
      clock,
      execute(op, {
        clock,
        budget,
        random: createSeededRandom(6),
        policy: { deadlineMs: 5000, backoff: { kind: 'constant', delayMs: 100 }, budgetExhausted: 'wait' },
      }),
    );
    expect(r.reason).toBe('return');
    expect(calls).toHaveLength(2);
    expect(clock.now()).toBeGreaterThanOrEqual(500); // the token came back after 0.5 s at 2/s
    expect(clock.now()).toBeLessThan(700);
  });
  it('budgetExhausted "wait" does not wait for a dependency that answers nothing: budget_exhausted at once', async () => {
    const clock = createTestClock();
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0, minPerSecond: 2, maxTokens: 1 });
    budget.tryAcquire({ throttled: false, timeout: false }, 0);
    const calls: AttemptContext[] = [];
    const op = scripted(
      clock,
      [
        { status: 503, ms: 10 },
        { status: 200, ms: 10 },
      ],
      calls,
    );
    const r = await drive(
      clock,
      execute(op, { clock, budget, random: createSeededRandom(6), policy: { deadlineMs: 5000, backoff: { kind: 'constant', delayMs: 100 } } }),
    );
    expect(r.reason).toBe('budget_exhausted');
    expect(calls).toHaveLength(1);
    expect(clock.now()).toBeLessThan(20);
  });
  it('classifies thrown errors by code, through cause chains (fetch wraps them)', async () => {
    const clock = createTestClock();
    const events: RelentEvent[] = [];
    const refused = new TypeError('fetch failed', { cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) });
    const op = scripted(clock, [
      { error: refused, ms: 1 },
      { status: 200, ms: 1 },
    ]);
    await drive(clock, run(op, { clock, method: 'POST', onEvent: (e) => events.push(e) }));
    expect(events[0]).toMatchObject({ errorClass: 'connect_refused', decision: 'retry' }); // nothing was sent: safe for POST
  });
  it('invalid policies are rejected before any call, naming the field', async () => {
    let called = false;
    await expect(
      run(
        async () => {
          called = true;
        },
        { policy: { maxAttempts: 0 } },
      ),
    ).rejects.toThrow(/`maxAttempts`/);
    expect(called).toBe(false);
  });
});

describe("drivers' hooks and scrubbing", () => {
  it('classifyTimeout lets a driver say a timed-out attempt was never sent (then POST may retry)', async () => {
    const clock = createTestClock();
    const events: RelentEvent[] = [];
    const calls: AttemptContext[] = [];
    const op = scripted(
      clock,
      [
        { status: 201, ms: 500 },
        { status: 201, ms: 5 },
      ],
      calls,
    );
    await drive(
      clock,
      run(op, {
        clock,
        random: createSeededRandom(5),
        method: 'POST',
        policy: { deadlineMs: 1000, attemptTimeoutMs: 100 },
        classifyTimeout: (ctx) => (ctx.attempt === 1 ? { errorClass: 'connect_timeout', sent: 'not_sent' } : undefined),
        onEvent: (e) => events.push(e),
      }),
    );
    expect(calls).toHaveLength(2);
    expect(events[0]).toMatchObject({ errorClass: 'connect_timeout', decision: 'retry' });
  });
  it('an endpoint with a query, userinfo or fragment never reaches an event (R14)', async () => {
    const events: RelentEvent[] = [];
    await run(async () => ({ status: 200 }), { endpoint: 'https://user:secret@api.example.com/v1/items?token=s3cr3t#frag', onEvent: (e) => events.push(e) });
    expect(JSON.stringify(events)).not.toMatch(/secret|s3cr3t|frag|user/);
    expect(events[0]).toMatchObject({ endpoint: 'https://api.example.com:443/v1/items' });
  });
});

describe('determinism and event shape (R13, R15)', () => {
  const obsArb = fc.oneof(
    fc.record({ status: fc.constantFrom(200, 204, 400, 404, 408, 429, 500, 503), elapsedMs: fc.nat(300) }),
    fc.record({ errorClass: fc.constantFrom('connect_refused', 'timeout', 'reset', 'dns' as const), elapsedMs: fc.nat(300) }),
  );
  it('every event has exactly one of status/errorClass; the same timeline gives byte-identical output', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(obsArb, { minLength: 1, maxLength: 6 }), fc.constantFrom('GET', 'POST'), fc.integer(), async (observations, method, seed) => {
        const t = { operationId: 'op-p', method, seed, observations, policy: { maxAttempts: 6, deadlineMs: 1000 } };
        const a = await replay(t);
        const b = await replay(t);
        expect(JSON.stringify(a.events)).toBe(JSON.stringify(b.events));
        for (const e of a.events) {
          if (e.type !== 'attempt') continue;
          expect((e.status === null) !== (e.errorClass === null)).toBe(true);
        }
        expect(a.events.filter((e) => e.type === 'result')).toHaveLength(1);
      }),
      { numRuns: 150 },
    );
  });
});
