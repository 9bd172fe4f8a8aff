import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { boundObservation, decide, isIdempotent, preflight, attemptBudgetMs, type OperationState } from '../../src/core/decide.js';
import { createOperation } from '../../src/core/operation.js';
import { createPolicy, type PolicySpec } from '../../src/core/policy.js';
import { createRetryBudget, type BudgetSpec, type RetryBudget } from '../../src/core/budget.js';
import { createSeededRandom } from '../../src/core/random.js';
import type { Observation } from '../../src/core/types.js';

const rnd = createSeededRandom(7);
const WALL = Date.UTC(2026, 0, 1, 10, 0, 0);

/**
 * What decide() is given on attempt `attempt` of an operation that started at 0 and has
 * not retried yet: a fixture for the unit tests of decide() alone. Tests of a sequence of
 * attempts drive the operation state machine (createOperation), as the drivers do.
 */
function stateOf(o: { attempt: number; deadlineAt: number; idempotent: boolean }): OperationState {
  return { attempt: o.attempt, startedAt: 0, deadlineAt: o.deadlineAt, idempotent: o.idempotent, prevDelayMs: null, lastBudgetCost: 0, throttled: 0 };
}

/** The policy of `spec` and the state of attempt `attempt` (default 1) of an operation under it (the idempotency rule as the machine applies it). */
function opAt(spec: PolicySpec, o: { method?: string; key?: string; idempotent?: boolean; attempt?: number } = {}) {
  const policy = createPolicy(spec);
  const idempotent = isIdempotent(policy, { method: o.method ?? 'GET', idempotencyKey: o.key ?? null, idempotent: o.idempotent ?? null });
  return { policy, state: stateOf({ attempt: o.attempt ?? 1, deadlineAt: policy.deadlineMs, idempotent }) };
}

const ctx = (now: number, extra: object = {}) => ({ now, wallNow: WALL + now, random: rnd, ...extra });

describe('decide(): the S3 reference fixture through the operation state machine (R1, R3, R15)', () => {
  it('503 (80) → retry, 503 (80) → retry, 200 (50) → return; remaining 400 → 280 → 160', () => {
    const policy = createPolicy({ maxAttempts: 3, deadlineMs: 400, backoff: { kind: 'constant', delayMs: 40 } });
    const op = createOperation(policy, { method: 'GET', random: rnd });
    let now = 0;
    let cmd = op.start(now);
    const seen: { remaining: number; decision: string }[] = [];
    for (const obs of [
      { status: 503, elapsedMs: 80 },
      { status: 503, elapsedMs: 80 },
      { status: 200, elapsedMs: 50 },
    ]) {
      // A call, not the end: the deadline allows the attempt.
      if (cmd.kind !== 'call') throw new Error(`expected a call, got ${cmd.kind}`);
      const remaining = cmd.remainingMs;
      now += obs.elapsedMs;
      cmd = op.answered(obs, now, WALL + now);
      seen.push({ remaining, decision: op.decision!.decision });
      if (cmd.kind !== 'wait') break;
      expect(cmd.delayMs).toBe(40);
      now += cmd.delayMs;
      cmd = op.timerFired(now);
    }
    expect(seen).toEqual([
      { remaining: 400, decision: 'retry' },
      { remaining: 280, decision: 'retry' },
      { remaining: 160, decision: 'return' },
    ]);
  });

  it('POST whose attempt times out → check_state, never a retry (R6)', () => {
    const { policy, state } = opAt({ maxAttempts: 3, deadlineMs: 400, backoff: { kind: 'constant', delayMs: 40 } }, { method: 'POST' });
    const d = decide(policy, state, { errorClass: 'timeout', elapsedMs: 120 }, ctx(120));
    expect(d.decision).toBe('check_state');
    expect(d.why).toBe('unknown_outcome');
  });
});

describe('R1/R2 deadline and attempt timeout', () => {
  it('no call when the deadline is already spent', () => {
    const { state } = opAt({ deadlineMs: 100 }, { attempt: 0 });
    expect(preflight(state, 100)?.decision).toBe('deadline_exceeded');
    expect(preflight(state, 99)).toBeNull();
  });
  it('each attempt gets min(attemptTimeout, remaining): three 400 ms attempts cannot take 1.2 s under 400 ms', () => {
    const { policy, state } = opAt({ deadlineMs: 400, attemptTimeoutMs: 400 });
    expect(attemptBudgetMs(policy, state, 0)).toBe(400);
    expect(attemptBudgetMs(policy, state, 300)).toBe(100);
    expect(attemptBudgetMs(policy, state, 450)).toBe(0);
  });
  it('a wait that does not fit the remaining time ends with deadline_exceeded, not a sleep past it', () => {
    const { policy, state } = opAt({ deadlineMs: 500, backoff: { kind: 'constant', delayMs: 2000 } });
    const d = decide(policy, state, { status: 503, elapsedMs: 10 }, ctx(10));
    expect(d).toMatchObject({ decision: 'deadline_exceeded', why: 'delay_past_deadline', delayMs: null });
  });
  it('minAttemptMs: a retry needs the time for a whole attempt after its wait (R20)', () => {
    const spec: PolicySpec = { deadlineMs: 260, attemptTimeoutMs: 120, minAttemptMs: 120, backoff: { kind: 'constant', delayMs: 0 } };
    expect(decide(createPolicy(spec), opAt(spec).state, { errorClass: 'connect_refused', elapsedMs: 15 }, ctx(15)).decision).toBe('retry');
    expect(decide(createPolicy(spec), opAt(spec).state, { errorClass: 'connect_refused', elapsedMs: 150 }, ctx(150)).decision).toBe('deadline_exceeded');
  });
  it('boundObservation turns a too-slow answer into a timeout at the bound', () => {
    expect(boundObservation({ status: 200, elapsedMs: 500 }, 120)).toEqual({ errorClass: 'timeout', elapsedMs: 120, sent: 'unknown' });
    expect(boundObservation({ status: 200, elapsedMs: 120 }, 120)).toEqual({ status: 200, elapsedMs: 120 });
  });
});

describe('R3 max_attempts and deadline_exceeded are different reasons', () => {
  it('attempts run out before time does', () => {
    const { policy, state } = opAt({ maxAttempts: 2, deadlineMs: 10_000 }, { attempt: 2 });
    expect(decide(policy, state, { status: 503, elapsedMs: 10 }, ctx(100)).decision).toBe('max_attempts');
  });
  it('time runs out before attempts do', () => {
    const { policy, state } = opAt({ maxAttempts: 5, deadlineMs: 100 }, { attempt: 1 });
    expect(decide(policy, state, { errorClass: 'timeout', elapsedMs: 100 }, ctx(100)).decision).toBe('deadline_exceeded');
  });
});

describe('R4 retry only what can succeed', () => {
  const spec: PolicySpec = { backoff: { kind: 'constant', delayMs: 10 } };
  it.each([200, 201, 204, 304])('%i returns', (status) => {
    expect(decide(createPolicy(spec), opAt(spec).state, { status, elapsedMs: 1 }, ctx(1)).decision).toBe('return');
  });
  it.each([400, 401, 403, 404, 409, 422])('%i is not retried by default', (status) => {
    expect(decide(createPolicy(spec), opAt(spec).state, { status, elapsedMs: 1 }, ctx(1))).toMatchObject({
      decision: 'not_retryable',
      why: 'status_not_retryable',
    });
  });
  it.each([408, 429, 500, 502, 503, 504])('%i is retried by default', (status) => {
    expect(decide(createPolicy(spec), opAt(spec).state, { status, elapsedMs: 1 }, ctx(1)).decision).toBe('retry');
  });
  it('409 is retried when the policy lists it', () => {
    const s: PolicySpec = { ...spec, retryOn: { status: [409] } };
    expect(decide(createPolicy(s), opAt(s).state, { status: 409, elapsedMs: 1 }, ctx(1)).decision).toBe('retry');
  });
  it('an OpenRTB nbr is an answer, never retried, whatever the status', () => {
    for (const status of [200, 204, 503]) {
      const d = decide(createPolicy(spec), opAt(spec).state, { status, nbr: 2, elapsedMs: 1 }, ctx(1));
      expect(d).toMatchObject({ decision: 'return', why: 'no_bid' });
    }
  });
  it('rejects an observation with both or neither of status and errorClass', () => {
    const { policy, state } = opAt(spec);
    expect(() => decide(policy, state, { status: 200, errorClass: 'timeout', elapsedMs: 1 } as Observation, ctx(1))).toThrow(/exactly one/);
    expect(() => decide(policy, state, { elapsedMs: 1 } as Observation, ctx(1))).toThrow(/exactly one/);
  });
});

describe('R5 idempotency', () => {
  const spec: PolicySpec = { backoff: { kind: 'constant', delayMs: 10 } };
  it.each(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'QUERY', 'query'])('%s is retried after a 503', (method) => {
    const { policy, state } = opAt(spec, { method });
    expect(decide(policy, state, { status: 503, elapsedMs: 1 }, ctx(1)).decision).toBe('retry');
  });
  it.each(['POST', 'PATCH'])('%s without a key is not retried after a 503', (method) => {
    const { policy, state } = opAt(spec, { method });
    expect(decide(policy, state, { status: 503, elapsedMs: 1 }, ctx(1))).toMatchObject({ decision: 'not_retryable', why: 'not_idempotent' });
  });
  it('POST with an idempotency key is retried', () => {
    const { policy, state } = opAt(spec, { method: 'POST', key: 'k-1' });
    expect(decide(policy, state, { status: 503, elapsedMs: 1 }, ctx(1)).decision).toBe('retry');
  });
  it("the operation's own declaration beats the method both ways", () => {
    expect(decide(createPolicy(spec), opAt(spec, { method: 'POST', idempotent: true }).state, { status: 503, elapsedMs: 1 }, ctx(1)).decision).toBe('retry');
    expect(decide(createPolicy(spec), opAt(spec, { method: 'GET', idempotent: false }).state, { status: 503, elapsedMs: 1 }, ctx(1)).decision).toBe(
      'not_retryable',
    );
  });
  it('429 and 408 mean "not processed": retryable for any method', () => {
    const { policy, state } = opAt(spec, { method: 'POST' });
    expect(decide(policy, state, { status: 429, elapsedMs: 1 }, ctx(1)).decision).toBe('retry');
    expect(decide(policy, state, { status: 408, elapsedMs: 1 }, ctx(1)).decision).toBe('retry');
  });
});

describe('R6 sent or not sent', () => {
  const spec: PolicySpec = { backoff: { kind: 'constant', delayMs: 10 } };
  it.each(['connect_refused', 'dns', 'tls', 'connect_timeout'] as const)('POST after %s (nothing sent) is retried', (errorClass) => {
    const { policy, state } = opAt(spec, { method: 'POST' });
    expect(decide(policy, state, { errorClass, elapsedMs: 1 }, ctx(1)).decision).toBe('retry');
  });
  it.each(['timeout', 'reset', 'socket_closed'] as const)('POST after %s (maybe applied) → check_state', (errorClass) => {
    const { policy, state } = opAt(spec, { method: 'POST' });
    expect(decide(policy, state, { errorClass, elapsedMs: 1 }, ctx(1)).decision).toBe('check_state');
  });
  it('GET after a timeout is retried (bounded by attempts)', () => {
    const { policy, state } = opAt(spec, { method: 'GET' });
    expect(decide(policy, state, { errorClass: 'timeout', elapsedMs: 1 }, ctx(1)).decision).toBe('retry');
  });
  it('an explicit sent state beats the class default', () => {
    const { policy, state } = opAt(spec, { method: 'POST' });
    expect(decide(policy, state, { errorClass: 'reset', sent: 'not_sent', elapsedMs: 1 }, ctx(1)).decision).toBe('retry');
  });
  it('unknownOutcome: "stop" ends without a state check', () => {
    const s: PolicySpec = { ...spec, unknownOutcome: 'stop' };
    const { policy, state } = opAt(s, { method: 'POST' });
    expect(decide(policy, state, { errorClass: 'timeout', elapsedMs: 1 }, ctx(1))).toMatchObject({ decision: 'not_retryable', why: 'not_idempotent' });
  });
});

describe('R7 backoff with jitter by default', () => {
  it('default waits differ between seeds and stay within [0, 100·2^n)', () => {
    const spec: PolicySpec = {};
    const delays = [1, 2, 3, 4, 5].map(
      (seed) => decide(createPolicy(spec), opAt(spec).state, { status: 503, elapsedMs: 1 }, { now: 1, random: createSeededRandom(seed) }).delayMs!,
    );
    expect(new Set(delays).size).toBeGreaterThan(1);
    for (const d of delays) {
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThan(100);
    }
  });
});

describe('R8 Retry-After', () => {
  const spec: PolicySpec = { deadlineMs: 60_000, backoff: { kind: 'constant', delayMs: 50 } };
  const run429 = (headers: Record<string, string>, s: PolicySpec = spec) =>
    decide(createPolicy(s), opAt(s).state, { status: 429, headers, elapsedMs: 10 }, ctx(10));
  it('delay-seconds: never earlier than asked, a small positive jitter after', () => {
    for (let seed = 0; seed < 50; seed++) {
      const s = createPolicy(spec);
      const d = decide(s, opAt(spec).state, { status: 429, headers: { 'retry-after': '1' }, elapsedMs: 10 }, { now: 10, random: createSeededRandom(seed) });
      expect(d.decision).toBe('retry');
      expect(d.retryAfterMs).toBe(1000);
      expect(d.retryAfterValid).toBe(true);
      expect(d.delayMs!).toBeGreaterThanOrEqual(1000);
      expect(d.delayMs!).toBeLessThan(1100);
    }
  });
  it('HTTP-date measured against the response Date header, not the local clock', () => {
    // the local wall clock is an hour off the server's: the wait is still 2 s
    const d = decide(
      createPolicy(spec),
      opAt(spec).state,
      { status: 503, headers: { 'retry-after': 'Thu, 01 Jan 2026 12:00:02 GMT', date: 'Thu, 01 Jan 2026 12:00:00 GMT' }, elapsedMs: 10 },
      { now: 10, wallNow: Date.UTC(2026, 0, 1, 11, 0, 0), random: rnd },
    );
    expect(d.retryAfterMs).toBe(2000);
    expect(d.delayMs!).toBeGreaterThanOrEqual(2000);
    expect(d.delayMs!).toBeLessThan(2300);
  });
  it('a date in the past is zero base wait, still jittered', () => {
    const d = run429({ 'retry-after': 'Thu, 01 Jan 2026 09:00:00 GMT' });
    expect(d.retryAfterMs).toBe(0);
    expect(d.decision).toBe('retry');
    expect(d.delayMs!).toBeGreaterThanOrEqual(0);
    expect(d.delayMs!).toBeLessThan(100);
  });
  it.each(['-5', 'soon', '1.5', '', '1e3'])('invalid %j → own backoff, retryAfterValid false', (v) => {
    const d = run429({ 'retry-after': v });
    expect(d).toMatchObject({ decision: 'retry', retryAfterValid: false, retryAfterMs: null, delayMs: 50 });
  });
  it('over the cap → stop now, not sleep', () => {
    const d = run429({ 'retry-after': '3600' });
    expect(d).toMatchObject({ decision: 'not_retryable', why: 'retry_after_over_cap', retryAfterMs: 3_600_000, retryAfterValid: true });
  });
  it.each([
    ['31536000', 31_536_000_000], // a year (got's suite: over the cap means stop, however far)
    ['31622401', 31_622_401_000], // just over 366 days (once "absurd", then retried at once with the own backoff)
    ['99999999999999999999', Number.MAX_SAFE_INTEGER], // too long to hold exactly: "forever"
    ['Fri, 31 Dec 9999 23:59:59 GMT', Date.UTC(9999, 11, 31, 23, 59, 59) - WALL - 10],
  ])('a well-formed Retry-After however far away (%s) is over the cap: stop, with the asked wait', (v, asked) => {
    expect(run429({ 'retry-after': v })).toMatchObject({
      decision: 'not_retryable',
      why: 'retry_after_over_cap',
      retryAfterMs: asked,
      retryAfterValid: true,
      delayMs: null,
    });
  });
  it('over the remaining deadline → deadline_exceeded now', () => {
    const s: PolicySpec = { deadlineMs: 2000, retryAfter: { maxMs: 60_000 } };
    expect(run429({ 'retry-after': '5' }, s)).toMatchObject({ decision: 'deadline_exceeded', why: 'retry_after_past_deadline' });
  });
  it('over the remaining deadline with deferral allowed → defer with the wait', () => {
    const s: PolicySpec = { deadlineMs: 2000, retryAfter: { maxMs: 3_600_000 }, deferOverMs: 60_000 };
    expect(run429({ 'retry-after': '1800' }, s)).toMatchObject({ decision: 'defer', delayMs: expect.any(Number) });
    // the durable queue itself schedules instead of deferring again
    const d = decide(
      createPolicy({ ...s, deadlineMs: 86_400_000 }),
      opAt({ ...s, deadlineMs: 86_400_000 }).state,
      { status: 429, headers: { 'retry-after': '1800' }, elapsedMs: 1 },
      { now: 1, random: rnd, durable: true },
    );
    expect(d.decision).toBe('retry');
    expect(d.delayMs!).toBeGreaterThanOrEqual(1_800_000);
  });
  it('jitter never pushes a fitting Retry-After past the deadline', () => {
    const s: PolicySpec = { deadlineMs: 1050, retryAfter: { jitterMinMs: 1000, jitterMaxMs: 1000 } };
    for (let seed = 0; seed < 30; seed++) {
      const d = decide(
        createPolicy(s),
        opAt(s).state,
        { status: 429, headers: { 'retry-after': '1' }, elapsedMs: 10 },
        { now: 10, random: createSeededRandom(seed) },
      );
      expect(d.decision).toBe('retry');
      expect(d.delayMs!).toBeGreaterThanOrEqual(1000);
      expect(d.delayMs!).toBeLessThan(1040);
    }
  });
  it('413 with a Retry-After is retried like 429/503 (after the asked wait); without one it is final', () => {
    const d = decide(createPolicy(spec), opAt(spec).state, { status: 413, headers: { 'retry-after': '2' }, elapsedMs: 10 }, ctx(10));
    expect(d).toMatchObject({ decision: 'retry', retryAfterMs: 2000, retryAfterValid: true });
    expect(d.delayMs!).toBeGreaterThanOrEqual(2000);
    expect(decide(createPolicy(spec), opAt(spec).state, { status: 413, elapsedMs: 10 }, ctx(10))).toMatchObject({
      decision: 'not_retryable',
      why: 'status_not_retryable',
    });
    expect(decide(createPolicy(spec), opAt(spec).state, { status: 413, headers: { 'retry-after': 'soon' }, elapsedMs: 10 }, ctx(10))).toMatchObject({
      decision: 'not_retryable',
      why: 'status_not_retryable',
      retryAfterValid: false,
    });
    // A RateLimit field is a wait too; over the cap stops; a POST without a key is not repeated.
    expect(decide(createPolicy(spec), opAt(spec).state, { status: 413, headers: { 'ratelimit-reset': '3' }, elapsedMs: 10 }, ctx(10))).toMatchObject({
      decision: 'retry',
      retryAfterMs: 3000,
    });
    expect(decide(createPolicy(spec), opAt(spec).state, { status: 413, headers: { 'retry-after': '3600' }, elapsedMs: 10 }, ctx(10))).toMatchObject({
      decision: 'not_retryable',
      why: 'retry_after_over_cap',
    });
    expect(
      decide(createPolicy(spec), opAt(spec, { method: 'POST' }).state, { status: 413, headers: { 'retry-after': '2' }, elapsedMs: 10 }, ctx(10)),
    ).toMatchObject({ decision: 'not_retryable', why: 'not_idempotent' });
    // retryOn.statusWithWait: [] turns it off (the presets that copy a documented list do).
    const off: PolicySpec = { ...spec, retryOn: { statusWithWait: [] } };
    expect(decide(createPolicy(off), opAt(off).state, { status: 413, headers: { 'retry-after': '2' }, elapsedMs: 10 }, ctx(10))).toMatchObject({
      decision: 'not_retryable',
      why: 'status_not_retryable',
    });
  });
  it('retryAfter.lengthenOnly: the later of the own backoff and the server wait', () => {
    const s: PolicySpec = { deadlineMs: 600_000, backoff: { kind: 'constant', delayMs: 30_000 }, retryAfter: { maxMs: 120_000, lengthenOnly: true } };
    const short = run429({ 'retry-after': '5' }, s);
    expect(short).toMatchObject({ decision: 'retry', delayMs: 30_000, retryAfterMs: 5000, retryAfterValid: true });
    const long = run429({ 'retry-after': '40' }, s);
    expect(long).toMatchObject({ decision: 'retry', retryAfterMs: 40_000 });
    expect(long.delayMs!).toBeGreaterThanOrEqual(40_000);
    expect(long.delayMs!).toBeLessThanOrEqual(44_000);
    expect(run429({ 'retry-after': '121' }, s)).toMatchObject({ decision: 'not_retryable', why: 'retry_after_over_cap', retryAfterMs: 121_000 });
    // the own wait past the deadline is the own wait's fault
    expect(run429({ 'retry-after': '1' }, { ...s, deadlineMs: 20_000 })).toMatchObject({ decision: 'deadline_exceeded', why: 'delay_past_deadline' });
    // without it, the server's wait replaces the backoff
    expect(run429({ 'retry-after': '5' }, { ...s, retryAfter: { maxMs: 120_000 } }).delayMs!).toBeLessThan(6000);
  });
  it('not read for statuses the policy does not list, nor when honor is false', () => {
    expect(decide(createPolicy(spec), opAt(spec).state, { status: 500, headers: { 'retry-after': '3' }, elapsedMs: 1 }, ctx(1))).toMatchObject({
      delayMs: 50,
      retryAfterValid: null,
    });
    const s: PolicySpec = { ...spec, retryAfter: { honor: false } };
    expect(run429({ 'retry-after': '3' }, s)).toMatchObject({ delayMs: 50, retryAfterValid: null });
  });
});

/** Tells a budget that an attempt of another operation was answered at `now`. */
const answered = (budget: RetryBudget, now: number): void =>
  budget.observe({ attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 }, now);

describe('R9 budgets', () => {
  it('with budgetExhausted "stop", an empty shared budget ends with budget_exhausted, without touching attempts', () => {
    const spec: PolicySpec = { maxAttempts: 10, backoff: { kind: 'constant', delayMs: 1 }, budgetExhausted: 'stop' };
    const policy = createPolicy(spec);
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0, minPerSecond: 0, maxTokens: 2 });
    const results: string[] = [];
    for (let i = 0; i < 4; i++) {
      const op = createOperation(policy, { method: 'GET', random: rnd, budget });
      op.start(0);
      op.answered({ status: 503, elapsedMs: 1 }, 1);
      results.push(op.decision!.decision);
    }
    expect(results).toEqual(['retry', 'retry', 'budget_exhausted', 'budget_exhausted']);
  });
  it('by default an empty budget keeps the retry unpaid (budgetExhausted "wait")', () => {
    const { policy, state } = opAt({ maxAttempts: 10, backoff: { kind: 'constant', delayMs: 1 } });
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0, minPerSecond: 0, maxTokens: 1 });
    budget.tryAcquire({ throttled: false, timeout: false }, 0);
    answered(budget, 0); // another call of this client was answered: the dependency is serving
    expect(decide(policy, state, { status: 503, elapsedMs: 1 }, { now: 1, random: rnd, budget })).toMatchObject({
      decision: 'retry',
      why: 'budget_wait',
      budgetPending: true,
      budgetCost: 0,
    });
    // a dependency that has answered nothing for over a second is not waited for
    expect(decide(policy, state, { status: 503, elapsedMs: 1 }, { now: 1001, random: rnd, budget })).toMatchObject({
      decision: 'budget_exhausted',
      why: 'budget_empty',
    });
  });

  /** A fleet of 10 000 operations, 1 per ms; each attempt succeeds with probability `ok`. Counts retries sent and failed. */
  const fleet = (budgetSpec: BudgetSpec, ok: number) => {
    const policy = createPolicy({ maxAttempts: 3, backoff: { kind: 'constant', delayMs: 1 }, budgetExhausted: 'stop' });
    const budget = createRetryBudget(budgetSpec);
    const draw = createSeededRandom(7);
    let retries = 0;
    let failedRetries = 0;
    let answered = 0;
    const ops = 10_000;
    for (let op = 0; op < ops; op++) {
      const now = op; // 1 operation per ms for 10 s
      const operation = createOperation(policy, { method: 'GET', random: rnd, budget });
      let cmd = operation.start(now);
      while (cmd.kind === 'call') {
        const status = draw() < ok ? 200 : 503;
        if (status === 200) answered++;
        else if (operation.attempt > 1) failedRetries++;
        cmd = operation.answered({ status, elapsedMs: 0 }, now);
        if (cmd.kind !== 'wait') break;
        retries++;
        cmd = operation.timerFired(now);
      }
    }
    return { ops, retries, failedRetries, answered };
  };
  it('deposit "operation" (the SRE book / Finagle rule): retries <= ratio × operations + floor + bucket', () => {
    const r = fleet({ kind: 'ratio', ratio: 0.1, minPerSecond: 1, maxTokens: 10, deposit: 'operation', refund: false }, 0);
    expect(r.retries).toBeLessThanOrEqual(0.1 * r.ops + 1 * 10 + 10);
    expect(r.retries).toBeGreaterThan(0.09 * r.ops);
  });
  it('the default: against a dependency that fails everything only the floor and the bucket pay for retries', () => {
    const r = fleet({ kind: 'ratio' }, 0);
    expect(r.retries).toBeLessThanOrEqual(1 * 10 + 10);
    expect(r.retries).toBeGreaterThanOrEqual(10);
  });
  it('the default: failed retries <= ratio × answered attempts + floor + bucket, while successful retries are refunded', () => {
    for (const ok of [0.2, 0.5, 0.9]) {
      const r = fleet({ kind: 'ratio' }, ok);
      expect(r.failedRetries).toBeLessThanOrEqual(0.1 * r.answered + 1 * 10 + 10);
      // refunds let many more retries through than the deposits alone would pay for
      expect(r.retries).toBeGreaterThan(0.1 * r.answered + 20);
    }
    // without refunds, every retry is paid by deposits
    const noRefund = fleet({ kind: 'ratio', refund: false }, 0.5);
    expect(noRefund.retries).toBeLessThanOrEqual(0.1 * noRefund.answered + 20);
  });
  it('a retry that succeeds gets its token back; one that fails does not', () => {
    const policy = createPolicy({ maxAttempts: 3, backoff: { kind: 'constant', delayMs: 1 } });
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0, minPerSecond: 0, maxTokens: 5 });
    const op = createOperation(policy, { method: 'GET', random: rnd, budget });
    op.start(0);
    expect(op.answered({ status: 503, elapsedMs: 0 }, 0).kind).toBe('wait');
    expect(budget.available(0)).toBe(4);
    op.timerFired(0);
    expect(op.answered({ status: 503, elapsedMs: 0 }, 0).kind).toBe('wait');
    expect(budget.available(0)).toBe(3);
    op.timerFired(0);
    op.answered({ status: 200, elapsedMs: 0 }, 0);
    expect(budget.available(0)).toBe(4);
  });
  it('ratio budget options are validated by name', () => {
    expect(() => createRetryBudget({ kind: 'ratio', deposit: 'request' as never })).toThrow(/`budget.deposit`/);
    expect(() => createRetryBudget({ kind: 'ratio', refund: 1 as never })).toThrow(/`budget.refund`/);
  });
  it('the budget is charged only for retries that would happen', () => {
    const policy = createPolicy({ maxAttempts: 1 });
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0, minPerSecond: 0, maxTokens: 1 });
    const op = createOperation(policy, { random: rnd, budget });
    op.start(0);
    op.answered({ status: 503, elapsedMs: 1 }, 1);
    expect(budget.available(1)).toBe(1);
  });
});

describe("R12/R19 a throttled attempt may not count against maxAttempts (the policy's choice)", () => {
  const run = (spec: PolicySpec, statuses: number[]) => {
    const op = createOperation(createPolicy(spec), { method: 'GET', random: rnd });
    let cmd = op.start(0);
    const out: string[] = [];
    for (const status of statuses) {
      if (cmd.kind !== 'call') throw new Error(`expected a call, got ${cmd.kind}`);
      cmd = op.answered({ status, elapsedMs: 0 }, 0);
      out.push(op.decision!.decision);
      if (cmd.kind !== 'wait') break;
      cmd = op.timerFired(0);
    }
    return out;
  };
  const base: PolicySpec = { maxAttempts: 2, deadlineMs: 1e9, backoff: { kind: 'constant', delayMs: 1 } };
  it('by default a 429 uses an attempt', () => {
    expect(run(base, [429, 429, 429])).toEqual(['retry', 'max_attempts']);
  });
  it('with throttleCountsAsAttempt false, 429s are bounded by maxThrottledAttempts and other failures by maxAttempts', () => {
    const s: PolicySpec = { ...base, throttleCountsAsAttempt: false, maxThrottledAttempts: 3 };
    expect(run(s, [429, 429, 429, 429, 429])).toEqual(['retry', 'retry', 'retry', 'max_attempts']);
    expect(run(s, [429, 503, 429, 503, 200])).toEqual(['retry', 'retry', 'retry', 'max_attempts']);
    expect(run(s, [429, 429, 503, 200])).toEqual(['retry', 'retry', 'retry', 'return']);
  });
  it('validation names the fields', () => {
    expect(() => createPolicy({ throttleCountsAsAttempt: 'no' as never })).toThrow(/`throttleCountsAsAttempt`/);
    expect(() => createPolicy({ maxThrottledAttempts: -1 })).toThrow(/`maxThrottledAttempts`/);
  });
});

describe('R9 budgetExhausted: "wait" — an unpaid retry waits for the budget at send time', () => {
  const spec: PolicySpec = { maxAttempts: 3, deadlineMs: 1000, backoff: { kind: 'constant', delayMs: 100 }, budgetExhausted: 'wait' };
  it('decide keeps the retry unpaid; preflight charges it or says how long to wait more; the deadline still ends it', () => {
    const policy = createPolicy(spec);
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0, minPerSecond: 2, maxTokens: 1 });
    budget.tryAcquire({ throttled: false, timeout: false }, 0); // empty it
    answered(budget, 0); // the dependency answers other calls
    const op = createOperation(policy, { method: 'GET', random: rnd, budget });
    op.start(0);
    expect(op.answered({ status: 503, elapsedMs: 10 }, 10)).toEqual({ kind: 'wait', delayMs: 100, why: 'budget_wait' });
    expect(op.decision).toMatchObject({ decision: 'retry', why: 'budget_wait', delayMs: 100, budgetCost: 0, budgetPending: true });
    // A second operation in the same state, still waiting for the budget after the first is paid.
    const late = createOperation(policy, { method: 'GET', random: rnd, budget });
    late.start(0);
    expect(late.answered({ status: 503, elapsedMs: 10 }, 10)).toMatchObject({ kind: 'wait', why: 'budget_wait' });
    expect(preflight(late, 110)).toMatchObject({ decision: 'budget_exhausted' }); // a driver that cannot wait ends it
    // The machine's preflight (its own gate) when each wait is over.
    expect(op.timerFired(110)).toEqual({ kind: 'wait', delayMs: 100, why: 'budget_wait' }); // 0.2 tokens
    expect(op.timerFired(510)).toMatchObject({ kind: 'call', attempt: 2 }); // 1 token after 0.5 s at 2/s: paid, go
    expect(budget.available(510)).toBeLessThan(0.01);
    expect(op.budgetPending).toBe(false);
    answered(budget, 600);
    expect(late.timerFired(950)).toMatchObject({ kind: 'end', reason: 'budget_exhausted', why: 'budget_empty' }); // no slot fits any more
  });
  it('waits only while the dependency answers someone: after a second of no answers, it ends', () => {
    const policy = createPolicy({ ...spec, deadlineMs: 10_000 });
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0, minPerSecond: 0.1, maxTokens: 1 });
    budget.tryAcquire({ throttled: false, timeout: false }, 0);
    answered(budget, 0);
    const op = createOperation(policy, { method: 'GET', random: rnd, budget });
    op.start(0);
    expect(op.answered({ status: 503, elapsedMs: 10 }, 10)).toMatchObject({ kind: 'wait', why: 'budget_wait' });
    expect(op.timerFired(900)).toMatchObject({ kind: 'wait', why: 'budget_wait' });
    expect(op.timerFired(1100)).toMatchObject({
      kind: 'end',
      reason: 'budget_exhausted',
      why: 'budget_empty',
      decision: { decision: 'budget_exhausted', why: 'budget_empty' },
    });
  });
  it('"stop" ends with budget_exhausted at once', () => {
    const policy = createPolicy({ ...spec, budgetExhausted: 'stop' });
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0, minPerSecond: 0, maxTokens: 1 });
    budget.tryAcquire({ throttled: false, timeout: false }, 0);
    const op = createOperation(policy, { method: 'GET', random: rnd, budget });
    op.start(0);
    expect(op.answered({ status: 503, elapsedMs: 10 }, 10)).toMatchObject({ kind: 'end', reason: 'budget_exhausted' });
    expect(op.decision!.decision).toBe('budget_exhausted');
    expect(() => createPolicy({ budgetExhausted: 'later' as never })).toThrow(/`budgetExhausted`/);
  });
});

describe('R10 cancellation', () => {
  it('an aborted attempt ends with cancelled, even when retryable otherwise', () => {
    const { policy, state } = opAt({});
    expect(decide(policy, state, { errorClass: 'aborted', elapsedMs: 1 }, ctx(1)).decision).toBe('cancelled');
  });
  it('"aborted" cannot be made retryable', () => {
    expect(() => createPolicy({ retryOn: { errors: ['aborted'] } })).toThrow(/retryOn\.errors\[0\]/);
  });
});

describe('properties', () => {
  const obsArb: fc.Arbitrary<Observation> = fc.oneof(
    fc.record({
      status: fc.integer({ min: 100, max: 999 }),
      elapsedMs: fc.nat(100_000),
      headers: fc.option(fc.record({ 'retry-after': fc.oneof(fc.string(), fc.nat(100_000).map(String)) }), { nil: undefined }),
    }),
    fc.record({
      errorClass: fc.constantFrom(
        'connect_refused',
        'dns',
        'connect_timeout',
        'tls',
        'timeout',
        'reset',
        'socket_closed',
        'protocol',
        'aborted',
        'error' as const,
      ),
      elapsedMs: fc.nat(100_000),
    }),
  );
  it('a retry wait is always within [0, policy.maxDelayMs + jitter] and ends before the deadline', () => {
    fc.assert(
      fc.property(
        obsArb,
        fc.integer({ min: 1, max: 10_000 }),
        fc.nat(200_000),
        fc.integer({ min: 1, max: 300_000 }),
        fc.integer(),
        (obs, attempt, now, deadlineMs, seed) => {
          const { policy, state } = opAt({ deadlineMs, maxAttempts: 10_000 }, { attempt });
          const d = decide(policy, state, obs, { now, wallNow: WALL, random: createSeededRandom(seed) });
          if (d.decision === 'retry') {
            expect(Number.isInteger(d.delayMs)).toBe(true);
            expect(d.delayMs!).toBeGreaterThanOrEqual(0);
            expect(d.delayMs!).toBeLessThanOrEqual(policy.maxDelayMs);
            expect(now + d.delayMs!).toBeLessThan(state.deadlineAt);
          } else if (d.decision !== 'defer') {
            expect(d.delayMs).toBeNull();
          }
        },
      ),
      { numRuns: 3000 },
    );
  });
});
