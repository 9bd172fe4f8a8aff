// The AWS SDKs' shared retry specification ("Retry Behavior 2.0", standard and adaptive
// modes) as smithy-swift reproduces its test cases, botocore's standard-mode tests (the
// 2026 values) and smithy-typescript's util-retry tests, answered by relent's
// `aws-standard` preset, its `quota` budget and the operation machine.
//
// relent classifies answers by HTTP status: 429 stands for AWS's throttling error codes
// and 500/502/503/504 for the transient ones (the preset's notes). Where a source sets
// `random = 1` to remove jitter, the case uses relent's `exponential` backoff kind (the
// top of the full-jitter range, exactly).

import { decide, PRESETS, createRetryBudget, resolvePolicy, type Command, type PolicySpec, type RetryBudget } from '../../../src/index.js';
import { createSeededRandom } from '../../../src/testing/index.js';
import { drive, group, type Source, type Step } from '../harness.js';

const SEP = 'smithy-swift Tests/ClientRuntimeTests/Retry/RetryIntegrationTests.swift ("Retry Behavior 2.0" standard mode)';
const RL = 'smithy-swift Tests/ClientRuntimeTests/Retry/DefaultRetryStrategy/ClientSideRateLimiterTests.swift (adaptive mode)';
const BOTO = 'botocore tests/unit/retries/test_standard.py';
const TS = 'smithy-typescript packages/util-retry/src';

const QUOTA_V2 = { kind: 'quota', capacity: 500, retryCost: 5, throttleCost: 5, timeoutCost: 10, successRefund: 1 } as const;

/** A quota budget with only `available` of its capacity left. */
function drained(spec: { kind: 'quota'; capacity: number; retryCost: number }, available: number): RetryBudget {
  const b = createRetryBudget(spec as never);
  while (b.available(0) > available && b.tryAcquire({ throttled: false, timeout: false }, 0) !== false);
  return b;
}

// --- the specification's standard-mode cases ------------------------------------------------

interface SepStep {
  readonly response: 'success' | number;
  readonly outcome: string;
  readonly quota: number;
  readonly delay: number | null;
}
interface SepIn {
  readonly available: number;
  readonly maxRetriesBase: number;
  readonly maxBackoffS: number;
  readonly responses: readonly ('success' | number)[];
}

function outcomeOf(cmd: Command): string {
  if (cmd.kind === 'wait') return 'retryRequest';
  if (cmd.kind !== 'end') return cmd.kind;
  return { return: 'success', max_attempts: 'maxAttemptsExceeded', budget_exhausted: 'retryQuotaExceeded' }[cmd.reason as string] ?? cmd.reason;
}

const sep = group<SepIn, readonly SepStep[]>({
  title: 'standard mode (Retry Behavior 2.0 test cases)',
  check: (i) => {
    const budget = drained(QUOTA_V2, i.available);
    const spec: PolicySpec = {
      preset: 'aws-standard',
      maxAttempts: i.maxRetriesBase + 1,
      deadlineMs: 600_000,
      budget: QUOTA_V2,
      backoff: { kind: 'exponential', baseMs: 1000, capMs: i.maxBackoffS * 1000 },
      throttleBackoff: { kind: 'exponential', baseMs: 1000, capMs: i.maxBackoffS * 1000 },
    };
    const steps: Step[] = i.responses.map((r) => ({ status: r === 'success' ? 200 : r }));
    const out: SepStep[] = [];
    let k = 0;
    drive(spec, steps, {
      budget,
      afterAnswer: (cmd, now) => {
        out.push({
          response: i.responses[k++]!,
          outcome: outcomeOf(cmd),
          quota: budget.available(now),
          delay: cmd.kind === 'wait' ? cmd.delayMs / 1000 : null,
        });
      },
    });
    return out;
  },
  cases: [
    {
      id: "case 1: two 500s then success; the last retry's cost comes back",
      from: `${SEP} test_case1`,
      input: { available: 500, maxRetriesBase: 2, maxBackoffS: 20, responses: [500, 500, 'success'] },
      expected: [
        { response: 500, outcome: 'retryRequest', quota: 495, delay: 1 },
        { response: 500, outcome: 'retryRequest', quota: 490, delay: 2 },
        { response: 'success', outcome: 'success', quota: 495, delay: null },
      ],
      note: "the specification's numbers (cost 5, base 1 s): the preset's 2026 values overridden",
    },
    {
      id: 'case 2: three 502s exceed max attempts',
      from: `${SEP} test_case2`,
      input: { available: 500, maxRetriesBase: 2, maxBackoffS: 20, responses: [502, 502, 502] },
      expected: [
        { response: 502, outcome: 'retryRequest', quota: 495, delay: 1 },
        { response: 502, outcome: 'retryRequest', quota: 490, delay: 2 },
        { response: 502, outcome: 'maxAttemptsExceeded', quota: 490, delay: null },
      ],
    },
    {
      id: 'case 3: 5 tokens pay one retry, then the quota is exceeded',
      from: `${SEP} test_case3`,
      input: { available: 5, maxRetriesBase: 2, maxBackoffS: 20, responses: [500, 502] },
      expected: [
        { response: 500, outcome: 'retryRequest', quota: 0, delay: 1 },
        { response: 502, outcome: 'retryQuotaExceeded', quota: 0, delay: null },
      ],
    },
    {
      id: 'case 4: no tokens, no retry',
      from: `${SEP} test_case4`,
      input: { available: 0, maxRetriesBase: 2, maxBackoffS: 20, responses: [500] },
      expected: [{ response: 500, outcome: 'retryQuotaExceeded', quota: 0, delay: null }],
    },
    {
      id: 'case 5: 4 retries at 1, 2, 4, 8 s',
      from: `${SEP} test_case5`,
      input: { available: 500, maxRetriesBase: 4, maxBackoffS: 20, responses: [500, 500, 500, 500, 500] },
      expected: [
        { response: 500, outcome: 'retryRequest', quota: 495, delay: 1 },
        { response: 500, outcome: 'retryRequest', quota: 490, delay: 2 },
        { response: 500, outcome: 'retryRequest', quota: 485, delay: 4 },
        { response: 500, outcome: 'retryRequest', quota: 480, delay: 8 },
        { response: 500, outcome: 'maxAttemptsExceeded', quota: 480, delay: null },
      ],
    },
    {
      id: 'case 6: max backoff 3 s caps the waits',
      from: `${SEP} test_case6`,
      input: { available: 500, maxRetriesBase: 4, maxBackoffS: 3, responses: [500, 500, 500, 500, 500] },
      expected: [
        { response: 500, outcome: 'retryRequest', quota: 495, delay: 1 },
        { response: 500, outcome: 'retryRequest', quota: 490, delay: 2 },
        { response: 500, outcome: 'retryRequest', quota: 485, delay: 3 },
        { response: 500, outcome: 'retryRequest', quota: 480, delay: 3 },
        { response: 500, outcome: 'maxAttemptsExceeded', quota: 480, delay: null },
      ],
    },
  ],
});

// --- which answers are retried, and as what ----------------------------------------------------

type Kind = 'throttling' | 'transient' | 'not retried';
interface ClassIn {
  readonly status?: number;
  readonly code?: string | null;
  readonly error?: 'connect_refused' | 'socket_closed';
}

/** The cost the preset charges for a retry of this attempt (from a fresh budget). */
function kindFromCost(step: Step): Kind {
  const budget = createRetryBudget({ kind: 'quota' });
  const policy = resolvePolicy('aws-standard');
  const obs = step.status !== undefined ? { status: step.status, elapsedMs: 1 } : { errorClass: step.errorClass!, elapsedMs: 1 };
  const d = decide(policy, { attempt: 1, startedAt: 0, deadlineAt: 60_000, idempotent: true, prevDelayMs: null, lastBudgetCost: 0, throttled: 0 }, obs, {
    now: 1,
    random: () => 0.5,
    budget,
  });
  if (d.decision !== 'retry') return 'not retried';
  return d.budgetCost === 5 ? 'throttling' : 'transient';
}

const STATUS_ONLY =
  "relent reads the HTTP status, not AWS error codes in the body: 429 is the throttling status, 500/502/503/504 the transient ones (the `aws-standard` preset's notes; [README, Presets](../README.md#presets)); a `classifyValue` maps codes to statuses";

const transient = group<ClassIn, boolean>({
  title: 'botocore RETRYABLE_TRANSIENT_ERRORS (retried as a transient error)',
  check: (i) => kindFromCost(i.error !== undefined ? { errorClass: i.error } : { status: i.status! }) === 'transient',
  cases: [
    ...(['RequestTimeout', 'RequestTimeoutException', 'PriorRequestNotComplete'] as const).map((code) => ({
      id: `400 ${code} is transient`,
      from: `${BOTO} RETRYABLE_TRANSIENT_ERRORS`,
      input: { status: 400, code },
      expected: true,
      status: 'differs' as const,
      relent: false,
      why: STATUS_ONLY,
    })),
    ...[500, 502, 503, 504].map((status) => ({
      id: `${status} is transient`,
      from: `${BOTO} RETRYABLE_TRANSIENT_ERRORS`,
      input: { status, code: null },
      expected: true,
    })),
    {
      id: '500 InternalServiceError is transient',
      from: `${BOTO} RETRYABLE_TRANSIENT_ERRORS`,
      input: { status: 500, code: 'InternalServiceError' },
      expected: true,
    },
    { id: '502 BadError is transient', from: `${BOTO} RETRYABLE_TRANSIENT_ERRORS`, input: { status: 502, code: 'BadError' }, expected: true },
    { id: 'a ConnectionError is transient', from: `${BOTO} RETRYABLE_TRANSIENT_ERRORS`, input: { error: 'connect_refused' }, expected: true },
    { id: 'an HTTPClientError is transient', from: `${BOTO} RETRYABLE_TRANSIENT_ERRORS`, input: { error: 'socket_closed' }, expected: true },
    { id: '200 is not an error', from: `${BOTO} RETRYABLE_TRANSIENT_ERRORS`, input: { status: 200, code: null }, expected: false },
    { id: '400 Throttling is not transient', from: `${BOTO} RETRYABLE_TRANSIENT_ERRORS`, input: { status: 400, code: 'Throttling' }, expected: false },
    { id: '400 is not transient', from: `${BOTO} RETRYABLE_TRANSIENT_ERRORS`, input: { status: 400, code: null }, expected: false },
  ],
});

const throttled = group<ClassIn, boolean>({
  title: 'botocore RETRYABLE_THROTTLED_RESPONSES (retried as a throttling error)',
  check: (i) => kindFromCost({ status: i.status! }) === 'throttling',
  cases: [
    ...(
      [
        [400, 'Throttling'],
        [400, 'ThrottlingException'],
        [400, 'ThrottledException'],
        [400, 'RequestThrottledException'],
        [400, 'TooManyRequestsException'],
        [400, 'ProvisionedThroughputExceededException'],
        [400, 'TransactionInProgressException'],
        [503, 'RequestLimitExceeded'],
        [509, 'BandwidthLimitExceeded'],
        [400, 'LimitExceededException'],
        [403, 'RequestThrottled'],
        [503, 'SlowDown'],
        [400, 'PriorRequestNotComplete'],
        [502, 'EC2ThrottledException'],
      ] as const
    ).map(([status, code]) => ({
      id: `${status} ${code} is throttling`,
      from: `${BOTO} RETRYABLE_THROTTLED_RESPONSES`,
      input: { status, code },
      expected: true,
      status: 'differs' as const,
      relent: false,
      why: STATUS_ONLY,
    })),
    {
      id: '429 TooManyRequests is throttling',
      from: `${BOTO} RETRYABLE_THROTTLED_RESPONSES (as the status the preset reads)`,
      input: { status: 429, code: 'TooManyRequestsException' },
      expected: true,
      note: 'the code the SEP lists, with HTTP 429',
    },
    {
      id: '400 NotAThrottlingError is not',
      from: `${BOTO} RETRYABLE_THROTTLED_RESPONSES`,
      input: { status: 400, code: 'NotAThrottlingError' },
      expected: false,
    },
    {
      id: '500 InternalServerError is not',
      from: `${BOTO} RETRYABLE_THROTTLED_RESPONSES`,
      input: { status: 500, code: 'InternalServerError' },
      expected: false,
    },
    { id: 'a bare 400 is not', from: `${BOTO} RETRYABLE_THROTTLED_RESPONSES`, input: { status: 400, code: null }, expected: false },
    { id: 'a bare 500 is not', from: `${BOTO} RETRYABLE_THROTTLED_RESPONSES`, input: { status: 500, code: null }, expected: false },
    { id: 'a 200 is not', from: `${BOTO} RETRYABLE_THROTTLED_RESPONSES`, input: { status: 200, code: null }, expected: false },
  ],
});

// --- max attempts, backoff, quota (botocore) ---------------------------------------------------

const maxAttempts = group<number, boolean>({
  title: 'botocore MaxAttemptsChecker(max_attempts=3)',
  check: (attempt) => {
    const policy = resolvePolicy('aws-standard');
    const d = decide(
      policy,
      { attempt, startedAt: 0, deadlineAt: 60_000, idempotent: true, prevDelayMs: null, lastBudgetCost: 0, throttled: 0 },
      { status: 500, elapsedMs: 1 },
      { now: 1, random: () => 0.5 },
    );
    return d.decision === 'retry';
  },
  cases: [
    { id: 'attempt 1 may be retried', from: `${BOTO} test_can_honor_max_attempts`, input: 1, expected: true },
    { id: 'attempt 2 may be retried', from: `${BOTO} test_can_honor_max_attempts`, input: 2, expected: true },
    {
      id: 'attempt 3 may not (MaxAttemptsReached)',
      from: `${BOTO} test_can_honor_max_attempts, test_max_attempts_adds_metadata_key_when_reached`,
      input: 3,
      expected: false,
    },
  ],
});

const backoff = group<{ readonly kind: 'range' | 'jitter' | 'uniform' }, unknown>({
  title: 'botocore ExponentialBackoff',
  check: (i) => {
    const waitAt = (spec: PolicySpec | 'aws-standard', attempt: number, random: () => number): number => {
      const policy = resolvePolicy(spec);
      const d = decide(
        policy,
        { attempt, startedAt: 0, deadlineAt: 600_000, idempotent: true, prevDelayMs: null, lastBudgetCost: 0, throttled: 0 },
        { status: 500, elapsedMs: 1 },
        { now: 1, random },
      );
      return d.delayMs!;
    };
    if (i.kind === 'range') {
      const spec: PolicySpec = { preset: 'aws-standard', maxAttempts: 20, backoff: { kind: 'exponential', baseMs: 50, capMs: 20_000 } };
      return Array.from({ length: 11 }, (_, k) => waitAt(spec, k + 1, () => 0.5) / 1000);
    }
    if (i.kind === 'jitter') {
      const random = createSeededRandom('botocore-jitter');
      return Array.from({ length: 10 }, () => waitAt('aws-standard', 3, random)).every((ms) => ms >= 0 && ms <= 200);
    }
    const random = createSeededRandom('botocore-uniform');
    const spec: PolicySpec = { preset: 'aws-standard', maxAttempts: 20 };
    const histogram = new Map<number, number>();
    for (let k = 0; k < 10_000; k++) {
      const s = Math.floor(waitAt(spec, 10, random) / 1000);
      histogram.set(s, (histogram.get(s) ?? 0) + 1);
    }
    const expected = 10_000 / histogram.size;
    return histogram.size === 20 && [...histogram.values()].every((n) => n >= expected * 0.8 && n <= expected * 1.2);
  },
  cases: [
    {
      id: 'random = 1: 0.05 s doubling to the 20 s cap',
      from: `${BOTO} TestExponentialBackoff.test_range_of_exponential_backoff`,
      input: { kind: 'range' },
      expected: [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 20, 20],
    },
    {
      id: 'attempt 3 waits within [0, 0.2 s]',
      from: `${BOTO} TestExponentialBackoff.test_exponential_backoff_with_jitter`,
      input: { kind: 'jitter' },
      expected: true,
    },
    {
      id: 'attempt 10 waits uniformly over [0, 20 s) (10 000 draws, ±20 % per second)',
      from: `${BOTO} TestExponentialBackoff.test_uniform_rand_dist_on_max_attempts`,
      input: { kind: 'uniform' },
      expected: true,
    },
  ],
});

interface QuotaIn {
  readonly steps: readonly Step[];
  readonly capacity?: number;
  readonly before?: 'one acquire';
}
const quota = group<QuotaIn, { readonly after: readonly number[]; readonly end: string }>({
  title: 'botocore RetryQuotaChecker (capacity 500; cost 5 throttling, 14 otherwise; refund on success)',
  check: (i) => {
    const budget = createRetryBudget({ kind: 'quota', capacity: i.capacity ?? 500 });
    if (i.before === 'one acquire') budget.tryAcquire({ throttled: false, timeout: false }, 0);
    const after: number[] = [];
    const t = drive('aws-standard', i.steps, { budget, afterAnswer: (_c, now) => after.push(budget.available(now)) });
    return { after, end: t.reason };
  },
  cases: [
    {
      id: 'a throttling error acquires 5',
      from: `${BOTO} test_can_acquire_quota_for_throttling_error`,
      input: { steps: [{ status: 429 }, { status: 200 }] },
      expected: { after: [495, 500], end: 'return' },
    },
    {
      id: 'a non-timeout error acquires 14',
      from: `${BOTO} test_can_acquire_quota_non_timeout_error`,
      input: { steps: [{ status: 500 }, { status: 200 }] },
      expected: { after: [486, 500], end: 'return' },
    },
    {
      id: 'a timeout error acquires 14',
      from: `${BOTO} test_can_acquire_quota_for_timeout_error`,
      input: { steps: [{ errorClass: 'timeout' }, { status: 200 }] },
      expected: { after: [486, 500], end: 'return' },
    },
    {
      id: 'a success after a retry releases what it acquired',
      from: `${BOTO} test_can_release_quota_based_on_context_value_on_success`,
      input: { steps: [{ status: 500 }, { status: 200 }] },
      expected: { after: [486, 500], end: 'return' },
    },
    {
      id: 'a success after a throttling retry releases 5',
      from: `${BOTO} test_can_release_quota_when_succeed_after_throttling_error`,
      input: { steps: [{ status: 429 }, { status: 200 }] },
      expected: { after: [495, 500], end: 'return' },
    },
    {
      id: 'nothing is released when every retry failed',
      from: `${BOTO} test_dont_release_quota_if_all_retries_failed`,
      input: { steps: [{ status: 500 }, { status: 500 }, { status: 500 }] },
      expected: { after: [486, 472, 472], end: 'max_attempts' },
    },
    {
      id: 'a success without retries releases 1',
      from: `${BOTO} test_can_release_default_quota_if_not_in_context`,
      input: { before: 'one acquire', steps: [{ status: 200 }] },
      expected: { after: [487], end: 'return' },
    },
    {
      id: 'a quota of 14 pays one retry, not two',
      from: `${BOTO} test_acquire_quota_fails`,
      input: { capacity: 14, steps: [{ status: 500 }, { status: 500 }, { status: 200 }] },
      expected: { after: [0, 0], end: 'budget_exhausted' },
    },
    {
      id: 'an empty quota ends the operation (RetryQuotaReached)',
      from: `${BOTO} test_quota_reached_adds_retry_metadata`,
      input: { capacity: 13, steps: [{ status: 500 }] },
      expected: { after: [13], end: 'budget_exhausted' },
      note: "relent's capacity is at least 1: 13 tokens cannot pay 14",
    },
    {
      id: 'a failed request gives nothing back',
      from: `${BOTO} test_single_failed_request_does_not_give_back_quota`,
      input: { before: 'one acquire', steps: [{ status: 400 }] },
      expected: { after: [486], end: 'not_retryable' },
    },
  ],
});

interface DynamoOut {
  readonly after: readonly number[];
  readonly delays: readonly number[];
  readonly end: string;
}
const dynamodb = group<null, DynamoOut>({
  title: 'botocore service-specific retries',
  check: () => {
    const budget = createRetryBudget({ kind: 'quota' });
    const after: number[] = [];
    const t = drive(
      { preset: 'aws-standard', maxAttempts: 4, backoff: { kind: 'exponential', baseMs: 25, capMs: 20_000 } },
      [{ status: 500 }, { status: 500 }, { status: 500 }, { status: 500 }],
      {
        budget,
        afterAnswer: (_c, now) => after.push(budget.available(now)),
      },
    );
    return { after, delays: t.delays, end: t.reason };
  },
  cases: [
    {
      id: 'DynamoDB: 25 ms base and 4 attempts',
      from: `${BOTO} TestServiceSpecificRetries.test_dynamodb_base_backoff_and_increased_retries`,
      input: null,
      expected: { after: [486, 472, 458, 458], delays: [25, 50, 100], end: 'max_attempts' },
      note: "relent has no table of services: the DynamoDB values are the caller's overrides (maxAttempts 4, base 25 ms)",
    },
  ],
});

interface AmzIn {
  readonly header: string;
}
const amzRetryAfter = group<AmzIn, { readonly afterFailure: number; readonly delayS: number; readonly afterSuccess: number }>({
  title: 'botocore x-amz-retry-after (2026 behaviour)',
  check: (i) => {
    const budget = createRetryBudget({ kind: 'quota' });
    const after: number[] = [];
    const t = drive(
      { preset: 'aws-standard', backoff: { kind: 'exponential', baseMs: 50, capMs: 20_000 } },
      [{ status: 500, headers: { 'x-amz-retry-after': i.header } }, { status: 200 }],
      {
        budget,
        afterAnswer: (_c, now) => after.push(budget.available(now)),
      },
    );
    return { afterFailure: after[0]!, delayS: (t.delays[0] ?? 0) / 1000, afterSuccess: after[1]! };
  },
  cases: [
    {
      id: 'x-amz-retry-after 1500 ms is honoured',
      from: `${BOTO} TestRetryAfterHeaderInRetries.test_x_amz_retry_after_header_is_honored[1500]`,
      input: { header: '1500' },
      expected: { afterFailure: 486, delayS: 1.5, afterSuccess: 500 },
    },
    {
      id: 'x-amz-retry-after 0 keeps the backoff',
      from: `${BOTO} TestRetryAfterHeaderInRetries.test_x_amz_retry_after_header_is_honored[0]`,
      input: { header: '0' },
      expected: { afterFailure: 486, delayS: 0.05, afterSuccess: 500 },
    },
    {
      id: 'x-amz-retry-after 10 s is bounded to backoff + 5 s',
      from: `${BOTO} TestRetryAfterHeaderInRetries.test_x_amz_retry_after_header_is_honored[10000]`,
      input: { header: '10000' },
      expected: { afterFailure: 486, delayS: 5.05, afterSuccess: 500 },
    },
    {
      id: 'an invalid x-amz-retry-after keeps the backoff',
      from: `${BOTO} TestRetryAfterHeaderInRetries.test_x_amz_retry_after_header_is_honored[invalid]`,
      input: { header: 'invalid' },
      expected: { afterFailure: 486, delayS: 0.05, afterSuccess: 500 },
    },
    {
      id: 'a negative x-amz-retry-after keeps the backoff',
      from: `${BOTO} TestRetryAfterHeaderInRetries.test_x_amz_retry_after_header_is_honored[-100]`,
      input: { header: '-100' },
      expected: { afterFailure: 486, delayS: 0.05, afterSuccess: 500 },
    },
  ],
});

const emptyQuota = group<'fresh' | 'answered', { readonly calls: number; readonly end: string; readonly budgetWaits: number }>({
  title: 'an empty quota does not delay',
  check: (i) => {
    const budget = drained({ kind: 'quota', capacity: 500, retryCost: 14 }, 10);
    if (i === 'answered') budget.observe({ attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 }, 0);
    const t = drive('aws-standard', [{ status: 500 }, { status: 200 }], { budget });
    return { calls: t.attempts, end: t.reason, budgetWaits: t.waits.filter((w) => w.why === 'budget_wait').length };
  },
  cases: [
    {
      id: 'quota empty: the error is returned, no sleep',
      from: `${BOTO} TestServiceSpecificRetries.test_non_long_polling_operation_does_not_sleep_when_quota_exhausted`,
      input: 'fresh',
      expected: { calls: 1, end: 'budget_exhausted', budgetWaits: 0 },
    },
    {
      id: 'quota empty while other calls succeed: still no sleep',
      from: `${BOTO} RetryHandler.needs_retry (quota not acquired → no retry)`,
      input: 'answered',
      expected: { calls: 1, end: 'budget_exhausted', budgetWaits: 0 },
    },
  ],
});

// --- smithy-typescript -----------------------------------------------------------------------

const integ = group<readonly number[], number>({
  title: 'smithy-typescript retries.integ.spec.ts',
  check: (statuses) =>
    drive(
      'aws-standard',
      statuses.map((status) => ({ status })),
    ).attempts,
  cases: [
    {
      id: 'throttling (429) and transient (500) statuses are retried',
      from: `${TS}/retries.integ.spec.ts "should retry throttling and transient-error status codes"`,
      input: [429, 500, 200],
      expected: 3,
    },
    {
      id: 'an error modeled retryable is retried on 400',
      from: `${TS}/retries.integ.spec.ts "should retry when a retryable trait is modeled"`,
      input: [400, 400, 200],
      expected: 3,
      status: 'differs',
      relent: 1,
      why: STATUS_ONLY,
    },
    {
      id: 'a modeled throttling error on 400 is retried',
      from: `${TS}/retries.integ.spec.ts "should retry retryable trait with throttling"`,
      input: [429, 400, 200],
      expected: 3,
      status: 'differs',
      relent: 2,
      why: STATUS_ONLY,
    },
    {
      id: 'an unmodeled 400 stops after a retried 429',
      from: `${TS}/retries.integ.spec.ts "should not retry if the error is not modeled …"`,
      input: [429, 400, 200],
      expected: 2,
    },
  ],
});

const strategy = group<'max1' | 'no-tokens' | 'client-error', boolean>({
  title: 'smithy-typescript StandardRetryStrategy.spec.ts (refreshRetryTokenForRetry throws = no retry)',
  check: (i) => {
    if (i === 'max1') return drive({ preset: 'aws-standard', maxAttempts: 1 }, [{ status: 500 }, { status: 200 }]).attempts > 1;
    if (i === 'no-tokens')
      return drive('aws-standard', [{ status: 500 }, { status: 200 }], { budget: drained({ kind: 'quota', capacity: 500, retryCost: 14 }, 0) }).attempts > 1;
    return drive('aws-standard', [{ status: 400 }, { status: 200 }]).attempts > 1;
  },
  cases: [
    {
      id: 'no retry when attempts exceed maxAttempts',
      from: `${TS}/StandardRetryStrategy.spec.ts "throws when attempts exceeds maxAttempts"`,
      input: 'max1',
      expected: false,
    },
    {
      id: 'no retry when no tokens are available',
      from: `${TS}/StandardRetryStrategy.spec.ts "throws when no tokens are available"`,
      input: 'no-tokens',
      expected: false,
      note: "the quota holds 10 tokens, fewer than a retry's 14",
    },
    {
      id: 'no retry of a CLIENT_ERROR',
      from: `${TS}/StandardRetryStrategy.spec.ts "throws when error is non-retryable"`,
      input: 'client-error',
      expected: false,
    },
  ],
});

// --- what the preset copies ---------------------------------------------------------------------

const preset = group<'values' | 'post' | 'note', unknown>({
  title: 'the aws-standard preset',
  check: (i) => {
    if (i === 'values') {
      const p = resolvePolicy('aws-standard');
      return { maxAttempts: p.maxAttempts, backoff: p.backoff, throttleBackoff: p.throttleBackoff, budget: p.budget };
    }
    if (i === 'post') return drive('aws-standard', [{ status: 500 }, { status: 200 }], { method: 'POST' }).attempts > 1;
    return (PRESETS.get('aws-standard')?.notes ?? []).some((n) => /idempotent/i.test(n));
  },
  cases: [
    {
      id: 'the 2026 standard mode: 3 attempts, 50 ms / 1 s base, 20 s cap, quota 500 with costs 14 / 5, refund 1',
      from: 'AWS SDKs and Tools Reference Guide, Retry behavior (2026); botocore retries/standard.py, quota.py',
      input: 'values',
      expected: {
        maxAttempts: 3,
        backoff: { kind: 'full-jitter', baseMs: 50, capMs: 20_000, multiplier: 2 },
        throttleBackoff: { kind: 'full-jitter', baseMs: 1000, capMs: 20_000, multiplier: 2 },
        budget: { kind: 'quota', capacity: 500, retryCost: 14, throttleCost: 5, timeoutCost: 14, successRefund: 1 },
      },
    },
    {
      id: 'AWS SDKs retry their POST calls',
      from: 'AWS SDKs and Tools Reference Guide, Retry behavior (every operation, whatever its HTTP method)',
      input: 'post',
      expected: true,
      status: 'differs',
      relent: false,
      why: 'a POST is retried only with an idempotency key or `idempotent: true` ([README, Concepts: Idempotency](../README.md#concepts))',
    },
    {
      id: 'the preset says POST-based AWS calls need idempotent: true',
      from: 'issue 21 (aws-standard idempotent note)',
      input: 'note',
      expected: true,
    },
  ],
});

const notApplicable = group<never, never>({
  title: 'not applicable',
  check: () => {
    throw new Error('not run');
  },
  cases: [
    {
      id: 'adaptive mode: CUBIC calculation, successes only',
      from: `${RL} test_case1`,
      status: 'na',
      why: "adaptive mode's CUBIC client-side rate limiter is not copied (relent's rate limiter lowers on 429 its own way)",
    },
    {
      id: 'adaptive mode: CUBIC calculation with throttles',
      from: `${RL} test_case2`,
      status: 'na',
      why: "adaptive mode's CUBIC client-side rate limiter is not copied (relent's rate limiter lowers on 429 its own way)",
    },
    {
      id: 'adaptive mode: measured send rate and token bucket fill rate',
      from: `${RL} test_case3`,
      status: 'na',
      why: "adaptive mode's measured-rate token bucket is not copied",
    },
    ...['ModeledThrottlingError', 'ModeledRetryableError', 'ErrorCodeRetryable', 'NonRetryableError', 'ConnectionError (modeled checker)'].map((e) => ({
      id: `modeled error ${e}`,
      from: `${BOTO} RETRYABLE_MODELED_ERRORS`,
      status: 'na' as const,
      why: 'retryable traits of a service model; relent has no service models',
    })),
    {
      id: 'SQS long polling sleeps when the quota is empty',
      from: `${BOTO} TestServiceSpecificRetries.test_sqs_triggers_long_polling_backoff_when_token_empty`,
      status: 'na',
      why: 'operation names of particular services (SQS ReceiveMessage); relent has none',
    },
    {
      id: 'RetryHandler, RetryEventAdapter, RetryPolicy delegation',
      from: `${BOTO} TestRetryHandler, TestRetryEventAdapter, TestRetryPolicy, TestRetryContext`,
      status: 'na',
      why: "botocore's event plumbing and mocks",
    },
    {
      id: 'ThrottlingErrorDetector and ModeledRetryErrorDetector',
      from: `${BOTO} TestThrottlingErrorDetector, TestModeledRetryErrorDetector`,
      status: 'na',
      why: 'error codes and modeled traits in the response body',
    },
    { id: 'OrRetryChecker', from: `${BOTO} TestOrRetryChecker`, status: 'na', why: "botocore's checker composition" },
    { id: 'register_retry_handler', from: `${BOTO} test_can_create_default_retry_handler`, status: 'na', why: "botocore's event registration" },
    {
      id: 'StandardRetryStrategy members and mode',
      from: `${TS}/StandardRetryStrategy.spec.ts (sets maxAttemptsProvider, mode, retryToken)`,
      status: 'na',
      why: 'class members of the JS implementation',
    },
  ],
});

export const SMITHY: Source = {
  key: 'smithy',
  title: 'smithy / AWS SDK retries',
  upstream: [
    'smithy-lang/smithy-swift RetryIntegrationTests.swift (the "Retry Behavior 2.0" standard mode cases), ClientSideRateLimiterTests.swift (adaptive mode)',
    'boto/botocore tests/unit/retries/test_standard.py',
    'smithy-lang/smithy-typescript packages/util-retry (retries.integ.spec.ts, StandardRetryStrategy.spec.ts)',
  ],
  groups: [sep, transient, throttled, maxAttempts, backoff, quota, dynamodb, amzRetryAfter, emptyQuota, integ, strategy, preset, notApplicable],
};
