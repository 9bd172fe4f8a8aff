// gRPC A6 and the AWS SDKs, where relent disagreed with them (issue 21, bugs 3–6 and the
// gaps): the throttle in milli-tokens, pushback on any retryable status, a "don't retry"
// pushback counted as a throttling failure, exactly the pushback's wait and the backoff
// reset after it, A6's cap of 5 attempts, budgets that never wait, x-amz-retry-after.
// The core's operation state machine, and run() on the test clock.
import { describe, expect, it } from 'vitest';
import { createRetryBudget, type RetryBudget } from '../../src/core/budget.js';
import { createPolicy, type Policy } from '../../src/core/policy.js';
import { createOperation, restoreOperation } from '../../src/core/operation.js';
import type { Observation, Random } from '../../src/core/types.js';
import { presetPolicy, resolvePolicy, withOverrides } from '../../src/presets/index.js';
import { execute, type AttemptContext } from '../../src/run/run.js';
import { constantRandom, createTestClock, type TestClock } from '../../src/testing/index.js';

/** The decision on the first attempt of a GET under `policy`, answered at 1 ms, as the operation state machine takes it. */
function decideFirst(policy: Policy, obs: Observation, o: { random?: Random; budget?: RetryBudget } = {}) {
  const op = createOperation(policy, { method: 'GET', random: o.random ?? constantRandom(0.5), budget: o.budget ?? null });
  op.start(0);
  op.answered(obs, 1, Date.UTC(2026, 0, 1) + 1);
  return op.decision!;
}

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

describe('gRPC A6 retryThrottling in milli-tokens (bug 6)', () => {
  const failure = { attempt: 1, success: false, retryableFailure: true, throttled: false, timeout: false, lastCost: 0 };
  const success = { attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 };

  it('maxTokens 10, tokenRatio 0.2: 6 failures, 10 successes, 1 failure → exactly 5, throttled at the threshold', () => {
    const b = createRetryBudget({ kind: 'throttle', maxTokens: 10, tokenRatio: 0.2 });
    for (let i = 0; i < 6; i++) b.observe(failure, 0);
    for (let i = 0; i < 10; i++) b.observe(success, 0);
    b.observe(failure, 0);
    expect(b.available(0)).toBe(5); // was 5.000000000000002
    expect(b.tryAcquire({ throttled: false, timeout: false }, 0)).toBe(false);
  });
  it('tokenRatio keeps three decimals as written (0.5466 → 0.546; 0.29 stays 0.29)', () => {
    const a = createRetryBudget({ kind: 'throttle', maxTokens: 10, tokenRatio: 0.5466 });
    a.observe(failure, 0);
    a.observe(success, 0);
    expect(a.available(0)).toBe(9.546);
    expect(a.spec).toMatchObject({ tokenRatio: 0.546 });
    const b = createRetryBudget({ kind: 'throttle', maxTokens: 10, tokenRatio: 0.29 });
    expect(b.spec).toMatchObject({ tokenRatio: 0.29 });
    b.observe(failure, 0);
    b.observe(success, 0);
    expect(b.available(0)).toBe(9.29);
  });
});

describe("grpc-retry-pushback-ms (bugs 4 and 5, and A6's exact wait and backoff reset)", () => {
  const policy = createPolicy({
    maxAttempts: 5,
    retryOn: { status: [500, 503] },
    backoff: { kind: 'proportional-jitter', baseMs: 100, capMs: 10_000, multiplier: 2, jitter: 0.2 },
  });
  /** The decision on the first attempt of a GET, answered at 1 ms, as the operation state machine takes it. */
  const first = (obs: Observation, o: { random?: Random; budget?: RetryBudget } = {}) => decideFirst(policy, obs, o);

  it('is honoured on any status the policy retries, not only retryAfter.statuses (a 500 with pushback 5000 waits 5000)', () => {
    const d = first({ status: 500, headers: { 'grpc-retry-pushback-ms': '5000' }, elapsedMs: 1 });
    expect(d).toMatchObject({ decision: 'retry', delayMs: 5000, retryAfterMs: 5000, pushback: true });
  });
  it('a status the policy does not retry stays final, pushback or not', () => {
    expect(first({ status: 404, headers: { 'grpc-retry-pushback-ms': '10' }, elapsedMs: 1 }).decision).toBe('not_retryable');
  });
  it('is exactly the asked wait: no jitter, whatever the random draws', () => {
    for (const r of [0, 0.5, 0.999]) {
      expect(first({ status: 503, headers: { 'grpc-retry-pushback-ms': '40' }, elapsedMs: 1 }, { random: constantRandom(r) }).delayMs).toBe(40);
    }
  });
  it('later retries back off from initialBackoff again ("n counts since the last server pushback")', () => {
    const r = constantRandom(0.5); // the ±20 % jitter at its middle: exactly min(100·2^(n−1), cap)
    const op = createOperation(policy, { method: 'GET', random: r });
    let now = 0;
    let cmd = op.start(now);
    const delays: number[] = [];
    const answers: Observation[] = [
      { status: 503, elapsedMs: 1 }, // retry 1: 100
      { status: 503, elapsedMs: 1 }, // retry 2: 200
      { status: 503, headers: { 'grpc-retry-pushback-ms': '1000' }, elapsedMs: 1 }, // retry 3: the pushback, 1000
      { status: 503, elapsedMs: 1 }, // retry 4: 100 again, not 800
    ];
    for (const obs of answers) {
      expect(cmd.kind).toBe('call');
      now += obs.elapsedMs;
      cmd = op.answered(obs, now, Date.UTC(2026, 0, 1) + now);
      expect(op.decision!.decision).toBe('retry');
      if (cmd.kind !== 'wait') throw new Error(`expected a wait, got ${cmd.kind}`);
      delays.push(cmd.delayMs);
      now += cmd.delayMs;
      cmd = op.timerFired(now);
    }
    expect(delays).toEqual([100, 200, 1000, 100]);
  });
  it('the reset survives a durable snapshot (the delivery queue restores operations)', () => {
    const op = createOperation(policy, { method: 'GET', random: constantRandom(0.5) });
    op.start(0);
    op.answered({ status: 503, elapsedMs: 1 }, 1);
    op.timerFired(101);
    op.answered({ status: 503, headers: { 'grpc-retry-pushback-ms': '500' }, elapsedMs: 1 }, 102);
    const snap = op.snapshot();
    expect(snap.pushbackAt).toBe(2);
    const back = restoreOperation(policy, snap, { method: 'GET', random: constantRandom(0.5) });
    back.timerFired(602);
    const cmd = back.answered({ status: 503, elapsedMs: 1 }, 603);
    expect(cmd).toMatchObject({ kind: 'wait', delayMs: 100 });
  });
  it('a "don\'t retry" pushback on a status the policy does not retry counts as a throttling failure (tokens 4 → 3 in milli-tokens)', () => {
    // grpc-java RetriableStreamTest FailWithNonRetriableStatusCode_WithNonRetriablePushback: 4 tokens → 3.
    const budget = createRetryBudget({ kind: 'throttle', maxTokens: 10, tokenRatio: 0.1 });
    const fail = { attempt: 1, success: false, retryableFailure: true, throttled: false, timeout: false, lastCost: 0 };
    for (let i = 0; i < 6; i++) budget.observe(fail, 0);
    expect(budget.available(0)).toBe(4);
    const d = first({ status: 400, headers: { 'grpc-retry-pushback-ms': '-1' }, elapsedMs: 1 }, { budget });
    expect(d.decision).toBe('not_retryable');
    expect(budget.available(0)).toBe(3);
    // A plain non-retryable status without pushback does not count (A6: INVALID_ARGUMENT does not).
    first({ status: 400, elapsedMs: 1 }, { budget });
    expect(budget.available(0)).toBe(3);
  });
});

describe('the grpc and aws-standard presets never wait on an empty budget (bug 3)', () => {
  for (const name of ['grpc', 'grpc-2017', 'aws-standard'] as const) {
    it(`${name}: budgetExhausted "stop"`, () => {
      expect(presetPolicy(name).budgetExhausted).toBe('stop');
    });
  }

  it('grpc through run(): a throttled retry fails at once with budget_exhausted, even while other calls succeed', async () => {
    const clock = createTestClock();
    const policy = presetPolicy('grpc');
    const budget = createRetryBudget(policy.spec.budget!);
    // Six failures elsewhere bring the tokens to 4 (<= 5): retries are throttled.
    for (let i = 0; i < 6; i++) budget.observe({ attempt: 1, success: false, retryableFailure: true, throttled: false, timeout: false, lastCost: 0 }, 0);
    // Another caller's successes keep the dependency "answering" (what made "wait" wait).
    budget.observe({ attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 }, 0);
    let calls = 0;
    const r = await drive(
      clock,
      execute(
        async () => {
          calls++;
          return { status: 503 };
        },
        { clock, policy, budget, method: 'GET' },
      ),
    );
    expect(r.reason).toBe('budget_exhausted');
    expect(calls).toBe(1);
    expect(clock.now()).toBe(0); // no wait at all
  });
});

describe('A6: maxAttempts over 5 is taken as 5 for the grpc presets (a gap)', () => {
  it('with the preset, 10 → 5, without an error; other presets are not capped', () => {
    expect(resolvePolicy({ preset: 'grpc', maxAttempts: 10 }).maxAttempts).toBe(5);
    expect(resolvePolicy({ preset: 'grpc-2017', maxAttempts: 6 }).maxAttempts).toBe(5);
    expect(resolvePolicy({ preset: 'grpc', maxAttempts: 3 }).maxAttempts).toBe(3);
    expect(withOverrides(presetPolicy('grpc'), { maxAttempts: 9 }).maxAttempts).toBe(5);
    expect(resolvePolicy({ preset: 'http-429', maxAttempts: 10 }).maxAttempts).toBe(10);
  });
});

describe('x-amz-retry-after (the AWS SDKs, 2026): max(t_i, min(asked, t_i + 5 s)) (a gap)', () => {
  const aws = presetPolicy('aws-standard');
  const at = (asked: string, r: number) =>
    decideFirst(aws, { status: 503, headers: { 'x-amz-retry-after': asked }, elapsedMs: 1 }, { random: constantRandom(r) }).delayMs;

  it('lengthens the own wait up to the asked one, by at most 5 s; never shortens it', () => {
    // t_1 = U(0,1)·50 ms: 25 at 0.5.
    expect(at('1500', 0.5)).toBe(1500);
    expect(at('60000', 0.5)).toBe(25 + 5000);
    expect(at('3', 0.5)).toBe(25);
  });
  it('an unusable value is no hint (the own backoff)', () => {
    for (const v of ['-5', 'soon', '1.5', '99999999999']) expect(at(v, 0.5)).toBe(25);
  });
  it('on the wire: the HTTP driver keeps the header for the decision', async () => {
    const { pickHintHeaders } = await import('../../src/core/hints.js');
    expect(pickHintHeaders(new Headers({ 'X-Amz-Retry-After': '1500', cookie: 'secret' }))).toEqual({ 'x-amz-retry-after': '1500' });
  });
});

describe('a caller of run() sees the exact pushback on the test clock', () => {
  it('503 with pushback 700 → the retry goes 700 ms later, then 200', async () => {
    const clock = createTestClock();
    const sent: number[] = [];
    const fn = (ctx: AttemptContext) => {
      sent.push(clock.now());
      return Promise.resolve(ctx.attempt === 1 ? { status: 503, headers: { 'grpc-retry-pushback-ms': '700' } } : { status: 200 });
    };
    const r = await drive(clock, execute(fn, { clock, policy: 'grpc', budget: null, method: 'GET' }));
    expect(r.reason).toBe('return');
    expect(sent).toEqual([0, 700]);
  });
});
