import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { readServerHint } from '../../src/core/hints.js';
import { createPolicy, type Policy } from '../../src/core/policy.js';
import { createRetryBudget, type RetryBudget } from '../../src/core/budget.js';
import { createOperation } from '../../src/core/operation.js';
import type { Observation } from '../../src/core/types.js';
import {
  appendPropagation,
  formatDeadlineMs,
  formatGrpcTimeout,
  parseAttempt,
  parseDeadlineMs,
  parseGrpcTimeout,
  parsePreviousAttempts,
  parsePushback,
  readIncomingHints,
  resolvePropagation,
  saysNoRetry,
  MAX_DEADLINE_MS,
} from '../../src/core/propagation.js';

const READ_ALL = { deadlineHeader: 'x-relent-deadline-ms', attemptHeader: 'x-relent-attempt', grpc: true, envoy: true };

describe('deadline headers: parsing (never throws)', () => {
  it('x-relent-deadline-ms: integer ms, trimmed, leading zeros; 0 is a spent deadline', () => {
    expect(parseDeadlineMs('250')).toEqual({ present: true, valid: true, value: 250 });
    expect(parseDeadlineMs(' \t0042 ')).toEqual({ present: true, valid: true, value: 42 });
    expect(parseDeadlineMs('0')).toEqual({ present: true, valid: true, value: 0 });
    expect(parseDeadlineMs(undefined)).toEqual({ present: false });
  });
  it.each([
    ['-5', 'negative'],
    ['abc', 'malformed'],
    ['1e3', 'malformed'],
    ['+5', 'malformed'],
    ['5ms', 'malformed'],
    ['', 'malformed'],
    ['1.5', 'fractional'],
    ['100000000000000000000', 'absurd'],
    [String(MAX_DEADLINE_MS + 1), 'absurd'],
    ['9'.repeat(400), 'absurd'],
  ])('x-relent-deadline-ms: %j is %s', (v, problem) => {
    expect(parseDeadlineMs(v)).toEqual({ present: true, valid: false, problem });
  });
  it('a repeated header (an array) or a non-string is malformed', () => {
    expect(parseDeadlineMs(['1', '2'])).toMatchObject({ valid: false, problem: 'malformed' });
    expect(parseDeadlineMs(5)).toMatchObject({ valid: false, problem: 'malformed' });
  });
  it('grpc-timeout: 1–8 digits and a unit H M S m u n', () => {
    expect(parseGrpcTimeout('2S')).toMatchObject({ valid: true, value: 2000 });
    expect(parseGrpcTimeout('1H')).toMatchObject({ valid: true, value: 3_600_000 });
    expect(parseGrpcTimeout('3M')).toMatchObject({ valid: true, value: 180_000 });
    expect(parseGrpcTimeout('250m')).toMatchObject({ valid: true, value: 250 });
    expect(parseGrpcTimeout('1500u')).toMatchObject({ valid: true, value: 1.5 });
    expect(parseGrpcTimeout('99999999n')).toMatchObject({ valid: true });
    expect(parseGrpcTimeout('0m')).toMatchObject({ valid: true, value: 0 });
  });
  it.each([
    ['5X', 'malformed'],
    ['5', 'malformed'],
    ['S', 'malformed'],
    ['123456789m', 'malformed'],
    ['-5m', 'negative'],
    ['99999999H', 'absurd'],
    ['1.5S', 'malformed'],
  ])('grpc-timeout: %j is %s', (v, problem) => {
    expect(parseGrpcTimeout(v)).toEqual({ present: true, valid: false, problem });
  });
  it('attempt numbers: 1-based; 0, negative, fractional, huge are refused; gRPC counts previous attempts', () => {
    expect(parseAttempt('3')).toMatchObject({ valid: true, value: 3 });
    expect(parseAttempt('0')).toMatchObject({ valid: false, problem: 'zero' });
    expect(parseAttempt('-1')).toMatchObject({ valid: false, problem: 'negative' });
    expect(parseAttempt('2.0')).toMatchObject({ valid: false, problem: 'fractional' });
    expect(parseAttempt('1'.repeat(30))).toMatchObject({ valid: false, problem: 'absurd' });
    expect(parsePreviousAttempts('0')).toMatchObject({ valid: true, value: 1 });
    expect(parsePreviousAttempts('2')).toMatchObject({ valid: true, value: 3 });
  });
  it('never throws and never gives NaN or Infinity, whatever the string', () => {
    fc.assert(
      fc.property(fc.string(), (s) => {
        for (const r of [parseDeadlineMs(s), parseGrpcTimeout(s), parseAttempt(s), parsePreviousAttempts(s)]) {
          if (r.present && r.valid) expect(Number.isFinite(r.value) && r.value >= 0 && r.value <= MAX_DEADLINE_MS).toBe(true);
        }
        const p = parsePushback(s);
        if (p !== null && !p.noRetry) expect(Number.isInteger(p.delayMs)).toBe(true);
      }),
    );
  });
});

describe('deadline headers: formatting', () => {
  it('x-relent-deadline-ms is whole ms rounded down, never negative', () => {
    expect(formatDeadlineMs(299.9)).toBe('299');
    expect(formatDeadlineMs(-3)).toBe('0');
    expect(formatDeadlineMs(Number.NaN)).toBe('0');
    expect(formatDeadlineMs(1e20)).toBe(String(MAX_DEADLINE_MS));
  });
  it('grpc-timeout picks the finest unit that fits 8 digits, and parses back to no more than was left', () => {
    expect(formatGrpcTimeout(300)).toBe('300m');
    expect(formatGrpcTimeout(0.5)).toBe('500u');
    expect(formatGrpcTimeout(0)).toBe('1n');
    expect(formatGrpcTimeout(200_000_000)).toBe('200000S');
    fc.assert(
      fc.property(fc.double({ min: 0.001, max: MAX_DEADLINE_MS, noNaN: true }), (ms) => {
        const back = parseGrpcTimeout(formatGrpcTimeout(ms));
        expect(back.present && back.valid && back.value <= ms && back.value > 0).toBe(true);
      }),
    );
  });
  it('appendPropagation: the attempt, the wait, and the optional gRPC and Envoy forms', () => {
    expect(appendPropagation([], resolvePropagation(undefined), 2, 1234.7)).toEqual(['x-relent-attempt', '2', 'x-relent-deadline-ms', '1234']);
    const all = resolvePropagation({ deadlineHeader: 'X-Deadline', attemptHeader: null, grpcTimeout: true, envoyTimeout: true });
    expect(appendPropagation([], all, 1, 80)).toEqual(['x-deadline', '80', 'grpc-timeout', '80m', 'x-envoy-expected-rq-timeout-ms', '80']);
    expect(resolvePropagation(false).sends).toBe(false);
  });
  it('bad options are named', () => {
    expect(() => resolvePropagation({ deadlineHeader: 'bad name' })).toThrow(/propagate\.deadlineHeader/);
    expect(() => resolvePropagation({ grpcTimeout: 'yes' } as never)).toThrow(/propagate\.grpcTimeout/);
    expect(() => resolvePropagation({ deadline: 'x' } as never)).toThrow(/Unknown option `propagate\.deadline`/);
    expect(() => resolvePropagation(3 as never)).toThrow(/`propagate`/);
  });
});

describe('readIncomingHints: what a server reads', () => {
  it('the smallest valid deadline of the three forms wins; the attempt from the first form present', () => {
    const h = readIncomingHints(
      { 'x-relent-deadline-ms': '300', 'grpc-timeout': '2S', 'x-envoy-expected-rq-timeout-ms': '150', 'x-relent-attempt': '2' },
      READ_ALL,
    );
    expect(h).toEqual({ deadlineMs: 150, deadlineSource: 'x-envoy-expected-rq-timeout-ms', attempt: 2, problems: [] });
    expect(readIncomingHints({ 'grpc-previous-rpc-attempts': '1' }, READ_ALL).attempt).toBe(2);
    expect(readIncomingHints({ 'x-envoy-attempt-count': '3' }, READ_ALL).attempt).toBe(3);
  });
  it('bad values are ignored and reported, the good ones still used', () => {
    const h = readIncomingHints(
      { 'x-relent-deadline-ms': '-5', 'grpc-timeout': '5X', 'x-envoy-expected-rq-timeout-ms': '100000000000000000000', 'x-relent-attempt': 'abc' },
      READ_ALL,
    );
    expect(h.deadlineMs).toBeNull();
    expect(h.attempt).toBeNull();
    expect(h.problems).toEqual([
      { header: 'x-relent-deadline-ms', problem: 'negative' },
      { header: 'grpc-timeout', problem: 'malformed' },
      { header: 'x-envoy-expected-rq-timeout-ms', problem: 'absurd' },
      { header: 'x-relent-attempt', problem: 'malformed' },
    ]);
    expect(readIncomingHints({ 'x-relent-deadline-ms': 'abc', 'grpc-timeout': '40m' }, READ_ALL)).toMatchObject({
      deadlineMs: 40,
      deadlineSource: 'grpc-timeout',
    });
  });
  it('forms switched off are not read', () => {
    const h = readIncomingHints(
      { 'x-relent-deadline-ms': '300', 'grpc-timeout': '2m', 'x-my-deadline': '7' },
      { deadlineHeader: 'x-my-deadline', attemptHeader: null, grpc: false, envoy: false },
    );
    expect(h.deadlineMs).toBe(7);
  });
});

describe('"don\'t retry" from the server (SRE book ch. 22; gRPC A6 pushback)', () => {
  const policy = createPolicy({ maxAttempts: 3, backoff: { kind: 'constant', delayMs: 10 } });
  /** The decision on the first attempt of a GET under `p`, answered at 5 ms, as the operation state machine takes it. */
  const first = (obs: Observation, o: { policy?: Policy; budget?: RetryBudget } = {}) => {
    const op = createOperation(o.policy ?? policy, { method: 'GET', random: () => 0.5, budget: o.budget ?? null });
    op.start(0);
    op.answered(obs, 5, 1_700_000_000_000);
    return op.decision!;
  };

  it('x-relent-no-retry (any value) ends a retryable 503 with not_retryable / retry_after_no_retry', () => {
    const d = first({ status: 503, headers: { 'x-relent-no-retry': 'overloaded', 'retry-after': '1' }, elapsedMs: 5 });
    expect(d).toMatchObject({ decision: 'not_retryable', why: 'retry_after_no_retry', delayMs: null, retryAfterMs: null });
    // on statuses outside retryAfter.statuses too (here 502)
    expect(first({ status: 502, headers: { 'x-relent-no-retry': '' }, elapsedMs: 5 }).why).toBe('retry_after_no_retry');
  });
  it('without the marker the same 503 is retried (the branch was unreachable before)', () => {
    expect(first({ status: 503, elapsedMs: 5 }).decision).toBe('retry');
  });
  it('grpc-retry-pushback-ms: negative or unparseable → no retry; non-negative → that wait', () => {
    for (const v of ['-1', 'soon', '99999999999', '']) {
      expect(first({ status: 503, headers: { 'grpc-retry-pushback-ms': v }, elapsedMs: 5 }).why).toBe('retry_after_no_retry');
    }
    const d = first({ status: 503, headers: { 'grpc-retry-pushback-ms': '40' }, elapsedMs: 5 });
    expect(d).toMatchObject({ decision: 'retry', retryAfterMs: 40 });
    expect(d.delayMs!).toBeGreaterThanOrEqual(40);
    expect(readServerHint(policy, { status: 503, headers: { 'grpc-retry-pushback-ms': '40', 'retry-after': '2' }, elapsedMs: 1 }, 0)).toMatchObject({
      source: 'retry-after',
      delayMs: 2000,
    });
  });
  it("a don't-retry answer counts as a failure for the budget (as gRPC throttling does) and costs no token", () => {
    const budget = createRetryBudget({ kind: 'ratio', ratio: 0.1, minPerSecond: 0, maxTokens: 10 });
    const before = budget.available(5);
    const d = first({ status: 503, headers: { 'x-relent-no-retry': '1' }, elapsedMs: 5 }, { budget });
    expect(d.budgetCost).toBe(0);
    expect(budget.available(5)).toBeLessThanOrEqual(before);
  });
  it('a policy that ignores server hints ignores the marker too', () => {
    const deaf = createPolicy({ retryAfter: { honor: false } });
    expect(first({ status: 503, headers: { 'x-relent-no-retry': '1' }, elapsedMs: 1 }, { policy: deaf }).decision).toBe('retry');
  });
  it('saysNoRetry reads both forms', () => {
    expect(saysNoRetry({ 'x-relent-no-retry': 'upstream' })).toBe(true);
    expect(saysNoRetry({ 'grpc-retry-pushback-ms': '-1' })).toBe(true);
    expect(saysNoRetry({ 'grpc-retry-pushback-ms': '10' })).toBe(false);
    expect(saysNoRetry(undefined)).toBe(false);
  });
});
