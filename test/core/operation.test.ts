import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createOperation, restoreOperation, STATE_CHECK_TIMEOUT_MS, type Command } from '../../src/core/operation.js';
import { decide, isIdempotent, preflight, type OperationState } from '../../src/core/decide.js';
import { createPolicy, type PolicySpec } from '../../src/core/policy.js';
import { createRetryBudget } from '../../src/core/budget.js';
import { createSeededRandom } from '../../src/core/random.js';
import type { Observation } from '../../src/core/types.js';

const constant = (delayMs: number) => ({ kind: 'constant' as const, delayMs });

function expectKind<K extends Command['kind']>(cmd: Command, kind: K): Extract<Command, { kind: K }> {
  expect(cmd.kind).toBe(kind);
  return cmd as Extract<Command, { kind: K }>;
}

describe('the operation state machine: the loop of one operation in the core', () => {
  it('S3: 503 (80) → wait, 503 (80) → wait, 200 (50) → end; each call names its attempt and the time left', () => {
    const op = createOperation(createPolicy({ maxAttempts: 3, deadlineMs: 400, backoff: constant(40) }), { method: 'GET', random: createSeededRandom(1) });
    let now = 0;
    let cmd = op.start(now);
    const calls: { attempt: number; remainingMs: number; timeoutMs: number }[] = [];
    for (const obs of [
      { status: 503, elapsedMs: 80 },
      { status: 503, elapsedMs: 80 },
      { status: 200, elapsedMs: 50 },
    ]) {
      const call = expectKind(cmd, 'call');
      calls.push({ attempt: call.attempt, remainingMs: call.remainingMs, timeoutMs: call.timeoutMs });
      now += obs.elapsedMs;
      cmd = op.answered(obs, now);
      if (cmd.kind === 'wait') {
        expect(cmd).toEqual({ kind: 'wait', delayMs: 40, why: 'retryable' });
        now += cmd.delayMs;
        cmd = op.timerFired(now);
      }
    }
    expect(calls).toEqual([
      { attempt: 1, remainingMs: 400, timeoutMs: 400 },
      { attempt: 2, remainingMs: 280, timeoutMs: 280 },
      { attempt: 3, remainingMs: 160, timeoutMs: 160 },
    ]);
    expect(expectKind(cmd, 'end')).toMatchObject({ reason: 'return', why: 'success' });
    expect(op.attempt).toBe(3);
  });

  it('takes the same decisions as decide() called by hand on a plain state (preflight → next attempt → decide → remember the retry), over random timelines', () => {
    const obsArb = fc.oneof(
      fc.record({ status: fc.constantFrom(200, 404, 429, 500, 503), elapsedMs: fc.integer({ min: 0, max: 300 }) }),
      fc.record({ errorClass: fc.constantFrom('timeout' as const, 'reset' as const, 'connect_refused' as const), elapsedMs: fc.integer({ min: 0, max: 300 }) }),
    );
    fc.assert(
      fc.property(
        fc.array(obsArb, { minLength: 1, maxLength: 8 }),
        fc.constantFrom('GET', 'POST'),
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 50, max: 2000 }),
        fc.integer(),
        (observations, method, maxAttempts, deadlineMs, seed) => {
          const spec: PolicySpec = { maxAttempts, deadlineMs, backoff: { kind: 'full-jitter', baseMs: 20, capMs: 500 }, budget: null };
          const policy = createPolicy(spec);
          // The machine.
          const op = createOperation(policy, { method, random: createSeededRandom(seed) });
          const mine: string[] = [];
          let now = 0;
          let cmd = op.start(now);
          for (const obs of observations) {
            if (cmd.kind !== 'call') break;
            now += obs.elapsedMs;
            cmd = op.answered(obs as Observation, now);
            mine.push(`${op.decision!.decision}:${op.decision!.delayMs}`);
            if (cmd.kind === 'wait') {
              now += cmd.delayMs;
              cmd = op.timerFired(now);
            }
          }
          // decide() by hand, on a state this test keeps itself.
          const random = createSeededRandom(seed);
          let state: OperationState = {
            attempt: 0,
            startedAt: 0,
            deadlineAt: policy.deadlineMs,
            idempotent: isIdempotent(policy, { method }),
            prevDelayMs: null,
            lastBudgetCost: 0,
            throttled: 0,
          };
          const theirs: string[] = [];
          now = 0;
          for (const obs of observations) {
            if (preflight(state, now) !== null) break;
            state = { ...state, attempt: state.attempt + 1 };
            now += obs.elapsedMs;
            const d = decide(policy, state, obs as Observation, { now, random });
            theirs.push(`${d.decision}:${d.delayMs}`);
            if (d.decision !== 'retry') break;
            state = { ...state, prevDelayMs: d.delayMs, lastBudgetCost: d.budgetCost, throttled: (state.throttled ?? 0) + (d.uncounted === true ? 1 : 0) };
            now += d.delayMs!;
          }
          expect(mine).toEqual(theirs);
        },
      ),
    );
  });

  it('a retry without a wait is a wait of 0 ms (a driver may fire it at once)', () => {
    const op = createOperation(createPolicy({ backoff: constant(0) }), { random: Math.random });
    op.start(0);
    expect(op.answered({ status: 503, elapsedMs: 10 }, 10)).toEqual({ kind: 'wait', delayMs: 0, why: 'retryable' });
    expect(op.decision).toMatchObject({ decision: 'retry', delayMs: 0 });
    expect(op.timerFired(10)).toEqual({ kind: 'call', attempt: 2, timeoutMs: 9990, remainingMs: 9990, hedgeInMs: null });
  });

  it("a per-operation deadline and attempt timeout replace the policy's, longer or shorter; the caller's deadline bounds both", () => {
    const policy = createPolicy({ deadlineMs: 1000, attemptTimeoutMs: 300 });
    expect(createOperation(policy, { random: Math.random }).start(0)).toMatchObject({ timeoutMs: 300, remainingMs: 1000 });
    expect(createOperation(policy, { random: Math.random, deadlineMs: 5000, attemptTimeoutMs: 2000 }).start(0)).toMatchObject({
      timeoutMs: 2000,
      remainingMs: 5000,
    });
    expect(createOperation(policy, { random: Math.random, deadlineMs: 200, attemptTimeoutMs: 50 }).start(0)).toMatchObject({ timeoutMs: 50, remainingMs: 200 });
    expect(createOperation(policy, { random: Math.random, deadlineMs: 5000, callerDeadlineMs: 700 }).start(100)).toMatchObject({
      timeoutMs: 300,
      remainingMs: 700,
    });
    expect(createOperation(policy, { random: Math.random, callerDeadlineMs: 0 }).start(0)).toMatchObject({
      kind: 'end',
      reason: 'deadline_exceeded',
      why: 'deadline_spent',
    });
  });

  it("an unknown outcome: the state check when the driver has one (its time: the attempt's, or at least the attempt timeout once the deadline is spent)", () => {
    const policy = createPolicy({ deadlineMs: 400, attemptTimeoutMs: 150 });
    const withCheck = createOperation(policy, { method: 'POST', random: Math.random, stateCheck: true });
    withCheck.start(0);
    expect(withCheck.answered({ errorClass: 'timeout', elapsedMs: 150 }, 150)).toEqual({ kind: 'check_state', attempt: 1, timeoutMs: 150, remainingMs: 250 });
    expect(withCheck.checked()).toMatchObject({ kind: 'end', reason: 'check_state', why: 'unknown_outcome' });

    const late = createOperation(policy, { method: 'POST', random: Math.random, stateCheck: true });
    late.start(0);
    expect(late.answered({ errorClass: 'reset', elapsedMs: 400 }, 400)).toMatchObject({ kind: 'check_state', timeoutMs: 150, remainingMs: 0 });
    const noTimeout = createOperation(createPolicy({ deadlineMs: 400 }), { method: 'POST', random: Math.random, stateCheck: true });
    noTimeout.start(0);
    expect(noTimeout.answered({ errorClass: 'reset', elapsedMs: 400 }, 400)).toMatchObject({ kind: 'check_state', timeoutMs: STATE_CHECK_TIMEOUT_MS });

    const without = createOperation(policy, { method: 'POST', random: Math.random });
    without.start(0);
    expect(without.answered({ errorClass: 'timeout', elapsedMs: 150 }, 150)).toMatchObject({ kind: 'end', reason: 'check_state', why: 'unknown_outcome' });
  });

  it('a refused slot makes no attempt: the breaker, a full bulkhead, the deadline or a cancel end the operation', () => {
    const policy = createPolicy({ backoff: constant(0) });
    const cases = [
      ['circuit_open', { reason: 'circuit_open', why: 'circuit_open' }],
      ['bulkhead_full', { reason: 'bulkhead_full', why: null }],
      ['concurrency_limited', { reason: 'concurrency_limited', why: null }],
      ['rate_limited', { reason: 'rate_limited', why: null }],
      ['deadline', { reason: 'deadline_exceeded', why: 'deadline_spent' }],
      ['cancelled', { reason: 'cancelled', why: null }],
    ] as const;
    for (const [why, end] of cases) {
      const op = createOperation(policy, { random: Math.random });
      op.start(0);
      op.answered({ status: 503, elapsedMs: 1 }, 1);
      expect(op.timerFired(1)).toMatchObject({ kind: 'call', attempt: 2 });
      expect(op.slotRefused(why)).toMatchObject({ kind: 'end', ...end });
      expect(op.attempt).toBe(1);
    }
  });

  it('a slot granted after a wait: the call with the time left then, or the end if the deadline passed meanwhile', () => {
    const policy = createPolicy({ deadlineMs: 100 });
    const op = createOperation(policy, { random: Math.random });
    op.start(0);
    expect(op.slotGranted(30)).toEqual({ kind: 'call', attempt: 1, timeoutMs: 70, remainingMs: 70, hedgeInMs: null });
    const late = createOperation(policy, { random: Math.random });
    late.start(0);
    expect(late.slotGranted(100)).toMatchObject({ kind: 'end', reason: 'deadline_exceeded' });
    expect(late.attempt).toBe(0);
  });

  it('budgetExhausted "wait": the retry waits for the shared budget, asks it again after each wait, and goes once paid', () => {
    const policy = createPolicy({ budgetExhausted: 'wait', backoff: constant(100), budget: { kind: 'ratio', ratio: 0.1, minPerSecond: 2, maxTokens: 1 } });
    const budget = createRetryBudget(policy.budget!);
    budget.observe({ attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 }, 0);
    budget.tryAcquire({ throttled: false, timeout: false }, 0); // empty
    const op = createOperation(policy, { method: 'GET', budget, random: createSeededRandom(1) });
    op.start(0);
    expect(op.answered({ status: 503, elapsedMs: 10 }, 10)).toEqual({ kind: 'wait', delayMs: 100, why: 'budget_wait' });
    expect(op.timerFired(110)).toMatchObject({ kind: 'wait', why: 'budget_wait' });
    expect(op.timerFired(510)).toMatchObject({ kind: 'call', attempt: 2 });
  });

  it('budgetGranted: a retry waiting for the budget goes at once when something else paid for it', () => {
    const policy = createPolicy({ budgetExhausted: 'wait', backoff: constant(100), budget: { kind: 'ratio', ratio: 0.1, minPerSecond: 0.001, maxTokens: 1 } });
    const budget = createRetryBudget(policy.budget!);
    budget.observe({ attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 }, 0);
    budget.tryAcquire({ throttled: false, timeout: false }, 0);
    const op = createOperation(policy, { method: 'GET', budget, random: createSeededRandom(1) });
    op.start(0);
    expect(op.answered({ status: 503, elapsedMs: 10 }, 10).kind).toBe('wait');
    expect(op.budgetGranted(20)).toMatchObject({ kind: 'call', attempt: 2 });
  });

  it('a durable driver stores each wait (even of 0 ms); restored elsewhere, the operation carries on', () => {
    const policy = createPolicy({ maxAttempts: 3, deadlineMs: 60_000, backoff: constant(0), deferOverMs: 10 });
    const op = createOperation(policy, { method: 'POST', idempotencyKey: 'k', random: Math.random, durable: true });
    op.start(1000);
    expect(op.answered({ status: 503, elapsedMs: 5 }, 1005)).toEqual({ kind: 'wait', delayMs: 0, why: 'retryable' });
    const snap = op.snapshot();
    expect(snap).toEqual({ attempt: 1, startedAt: 1000, deadlineAt: 61_000, prevDelayMs: 0, throttled: 0 });
    const again = restoreOperation(policy, snap, { method: 'POST', idempotencyKey: 'k', random: Math.random, durable: true });
    expect(again.timerFired(2000)).toEqual({ kind: 'call', attempt: 2, timeoutMs: 59_000, remainingMs: 59_000, hedgeInMs: null });
    const past = restoreOperation(policy, snap, { method: 'POST', idempotencyKey: 'k', random: Math.random, durable: true });
    expect(past.timerFired(61_000)).toMatchObject({ kind: 'end', reason: 'deadline_exceeded', why: 'deadline_spent' });
  });

  it("a long wait is deferred to a durable queue by a driver that is not one; the end carries the wait and the server's asked wait", () => {
    const policy = createPolicy({ deferOverMs: 1000, deadlineMs: 3_600_000, retryOn: { status: [429] }, retryAfter: { maxMs: 600_000 } });
    const op = createOperation(policy, { method: 'GET', random: () => 0 });
    op.start(0);
    const end = expectKind(op.answered({ status: 429, elapsedMs: 5, headers: { 'retry-after': '120' } }, 5, Date.UTC(2026, 0, 1)), 'end');
    expect(end).toMatchObject({ reason: 'defer', why: 'defer_long_wait' });
    expect(end.decision).toMatchObject({ delayMs: 120_000, retryAfterMs: 120_000 });
  });

  it("a server wait over the cap ends with the decision's why and the asked wait (nothing to parse again)", () => {
    const policy = createPolicy({ retryOn: { status: [503] }, retryAfter: { maxMs: 30_000 } });
    const op = createOperation(policy, { method: 'GET', random: () => 0 });
    op.start(0);
    const end = expectKind(op.answered({ status: 503, elapsedMs: 5, headers: { 'retry-after': '3600' } }, 5, Date.UTC(2026, 0, 1)), 'end');
    expect(end).toMatchObject({ reason: 'not_retryable', why: 'retry_after_over_cap' });
    expect(end.decision?.retryAfterMs).toBe(3_600_000);
  });

  it('a cancel between attempts ends at once; events out of order are refused with a clear error', () => {
    const op = createOperation(createPolicy({ backoff: constant(50) }), { random: Math.random });
    op.start(0);
    op.answered({ status: 503, elapsedMs: 1 }, 1);
    expect(op.cancelled()).toMatchObject({ kind: 'end', reason: 'cancelled', decision: null });
    expect(() => op.timerFired(60)).toThrow(/timerFired` while ended/);
    const fresh = createOperation(createPolicy({}), { random: Math.random });
    expect(() => fresh.answered({ status: 200, elapsedMs: 1 }, 1)).toThrow(/answered` while not started/);
  });
});
