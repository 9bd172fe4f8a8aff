// Envoy: the router filter's retry documentation (x-envoy-retry-on, back-off, rate-limited
// back-off, retry budgets) and its tests (test/common/router/retry_state_impl_test.cc,
// reset_header_parser_test.cc, test/common/common/backoff_strategy_test.cc), answered by
// relent's `envoy-default` preset and `envoy` back-off kind, policies written for each
// retry_on condition, and the operation machine.
//
// Envoy's documentation and its code disagree on the back-off: the docs give
// U[0, (2^N − 1)·base), the code (JitteredExponentialBackOffStrategy) U[0, base·2^(N−1)),
// both capped. relent follows the docs (#backoff-kinds). A case restates the interval (the
// range's upper bound): Envoy's tests draw `random % interval`, relent `random·interval`.

import { PRESETS, type PolicySpec } from '../../../src/index.js';
import { drive, group, GRPC_AS_STATUS as S, RANDOM_HALF, RANDOM_MAX, RANDOM_MIN, runOnClock, type Source, type Step } from '../harness.js';
import type { ErrorClass } from '../../../src/index.js';

const RT = 'test/common/router/retry_state_impl_test.cc RouterRetryStateImplTest';
const BS = 'test/common/common/backoff_strategy_test.cc';
const RH = 'test/common/router/reset_header_parser_test.cc';
const DOC = 'docs/root/configuration/http/http_filters/router_filter.rst';
const PROTO = 'api/envoy/config/route/v3/route_components.proto RetryPolicy';

const CODE_DOUBLES =
  "relent's `envoy` back-off follows Envoy's documentation, U[0, (2^N − 1)·base); Envoy's code doubles the interval instead ([backoff kinds](#backoff-kinds))";
const NO_MARKERS =
  "relent's \"don't retry\" signals are `x-relent-no-retry` and a negative `grpc-retry-pushback-ms`; Envoy's own response headers are not read ([docs/http.md, Deadline and attempt headers](http.md#deadline-and-attempt-headers))";
const NO_CONCURRENCY =
  'relent bounds retries by a token budget over time, not by the number of retries in flight; `envoy-default` has no budget (its notes) ([README, Presets](../README.md#presets))';

// --- back-off intervals -------------------------------------------------------------------------

interface IntervalIn {
  readonly baseMs: number;
  readonly capMs: number;
  readonly n: number;
  readonly operations?: number;
}
/** The upper bound of each retry's range: the longest wait + 1 (whole ms). */
const intervals = group<IntervalIn, readonly number[]>({
  title: 'back-off intervals',
  check: (i) => {
    const out: number[] = [];
    for (let op = 0; op < (i.operations ?? 1); op++) {
      const steps: Step[] = [...Array.from({ length: i.n }, () => ({ errorClass: 'connect_refused' as ErrorClass })), { status: 200 }];
      const t = drive({ maxAttempts: i.n + 1, deadlineMs: 2 ** 31 - 1, budget: null, backoff: { kind: 'envoy', baseMs: i.baseMs, capMs: i.capMs } }, steps, {
        random: RANDOM_MAX,
      });
      out.push(...t.delays.map((d) => d + 1));
    }
    return out;
  },
  cases: [
    {
      id: 'docs: retries 1, 2, 3, 4 range over [0, 25), [0, 75), [0, 175), then the 250 ms cap',
      from: `${DOC} (x-envoy-max-retries, default back-off)`,
      input: { baseMs: 25, capMs: 250, n: 4 },
      expected: [25, 75, 175, 250],
    },
    {
      id: 'Backoff (docs formula): 24, 74, 174 ms from random 49, 149, 349',
      from: `${RT}.Backoff (Envoy 1.13)`,
      input: { baseMs: 25, capMs: 250, n: 3 },
      expected: [25, 75, 175],
    },
    {
      id: 'Backoff (code): 15, 40, 90 ms from random 190',
      from: `${RT}.Backoff (current)`,
      input: { baseMs: 25, capMs: 250, n: 3 },
      expected: [25, 50, 100],
      status: 'differs',
      relent: [25, 75, 175],
      why: CODE_DOUBLES,
    },
    {
      id: 'CustomBackOffInterval: base 100, max 1200',
      from: `${RT}.CustomBackOffInterval`,
      input: { baseMs: 100, capMs: 1200, n: 5 },
      expected: [100, 200, 400, 800, 1200],
      status: 'differs',
      relent: [100, 300, 700, 1200, 1200],
      why: CODE_DOUBLES,
    },
    {
      id: 'CustomBackOffIntervalDefaultMax: base 100, max 10×base',
      from: `${RT}.CustomBackOffIntervalDefaultMax`,
      input: { baseMs: 100, capMs: 1000, n: 5 },
      expected: [100, 200, 400, 800, 1000],
      status: 'differs',
      relent: [100, 300, 700, 1000, 1000],
      why: CODE_DOUBLES,
    },
    {
      id: 'JitteredBackOffBasicFlow: base 25, max 30',
      from: `${BS} ExponentialBackOffStrategyTest.JitteredBackOffBasicFlow`,
      input: { baseMs: 25, capMs: 30, n: 2 },
      expected: [25, 30],
    },
    {
      id: 'JitteredBackOffBasicReset: a reset starts from the base again',
      from: `${BS} ExponentialBackOffStrategyTest.JitteredBackOffBasicReset`,
      input: { baseMs: 25, capMs: 30, n: 2, operations: 2 },
      expected: [25, 30, 25, 30],
      note: 'every relent operation starts its back-off afresh',
    },
    {
      id: 'JitteredBackOffWithMaxInterval: base 5, max 100',
      from: `${BS} ExponentialBackOffStrategyTest.JitteredBackOffWithMaxInterval`,
      input: { baseMs: 5, capMs: 100, n: 7 },
      expected: [5, 10, 20, 40, 80, 100, 100],
      status: 'differs',
      relent: [5, 15, 35, 75, 100, 100, 100],
      why: CODE_DOUBLES,
    },
    {
      id: 'JitteredBackOffWithMaxIntervalReset: the same after a reset',
      from: `${BS} ExponentialBackOffStrategyTest.JitteredBackOffWithMaxIntervalReset`,
      input: { baseMs: 5, capMs: 100, n: 7, operations: 2 },
      expected: [5, 10, 20, 40, 80, 100, 100, 5, 10, 20, 40, 80, 100, 100],
      status: 'differs',
      relent: [5, 15, 35, 75, 100, 100, 100, 5, 15, 35, 75, 100, 100, 100],
      why: CODE_DOUBLES,
    },
  ],
});

const overflow = group<null, boolean>({
  title: 'back-off arithmetic',
  check: () => {
    const steps: Step[] = [...Array.from({ length: 100 }, () => ({ errorClass: 'connect_refused' as ErrorClass })), { status: 200 }];
    const t = drive({ maxAttempts: 101, deadlineMs: 2 ** 31 - 1, budget: null, backoff: { kind: 'envoy', baseMs: 1, capMs: 2 ** 31 - 1 } }, steps, {
      random: RANDOM_MIN,
    });
    return t.delays.length === 100 && t.delays.every((d) => Number.isFinite(d) && d >= 0 && d <= 2 ** 31 - 1);
  },
  cases: [
    {
      id: 'no overflow over 100 retries with the largest max',
      from: `${BS} ExponentialBackOffStrategyTest.JitteredBackOffDoesntOverflow`,
      input: null,
      expected: true,
    },
  ],
});

const config = group<{ readonly baseMs: number; readonly capMs: number }, 'valid' | 'invalid'>({
  title: 'back-off configuration',
  check: (b) => {
    try {
      drive({ backoff: { kind: 'envoy', ...b }, budget: null }, [{ status: 200 }]);
      return 'valid';
    } catch {
      return 'invalid';
    }
  },
  cases: [
    { id: 'base 2 s, max 3 s is valid', from: `${BS} BackOffStrategyUtilsTest.InvalidConfig`, input: { baseMs: 2000, capMs: 3000 }, expected: 'valid' },
    { id: 'a max below the base is invalid', from: `${BS} BackOffStrategyUtilsTest.InvalidConfig`, input: { baseMs: 3000, capMs: 2000 }, expected: 'invalid' },
    {
      id: 'a max of 2 ms below a base of 3 ms is invalid',
      from: `${BS} BackOffStrategyUtilsTest.InvalidConfig`,
      input: { baseMs: 3, capMs: 2 },
      expected: 'invalid',
    },
  ],
});

// --- retry_on -------------------------------------------------------------------------------------

const NO_RESPONSE: ErrorClass[] = ['connect_refused', 'connect_timeout', 'reset', 'socket_closed', 'timeout'];
/** relent's retryOn for Envoy's retry_on conditions (one retry, as num_retries defaults to 1). */
function envoyPolicy(conditions: readonly string[], codes: readonly number[] = [], numRetries = 1): PolicySpec {
  const status = new Set<number | string>();
  const errors = new Set<ErrorClass>();
  for (const c of conditions) {
    switch (c) {
      case '5xx':
        status.add('5xx');
        NO_RESPONSE.forEach((e) => errors.add(e));
        break;
      case 'gateway-error':
        [502, 503, 504].forEach((x) => status.add(x));
        NO_RESPONSE.forEach((e) => errors.add(e));
        break;
      case 'reset':
        NO_RESPONSE.forEach((e) => errors.add(e));
        break;
      case 'connect-failure':
        errors.add('connect_refused');
        errors.add('connect_timeout');
        break;
      case 'retriable-4xx':
        status.add(409);
        break;
      case 'retriable-status-codes':
        codes.forEach((x) => status.add(x));
        break;
      case 'cancelled':
        status.add(S.CANCELLED);
        break;
      case 'deadline-exceeded':
        status.add(S.DEADLINE_EXCEEDED);
        break;
      case 'resource-exhausted':
        status.add(S.RESOURCE_EXHAUSTED);
        break;
      case 'unavailable':
        status.add(S.UNAVAILABLE);
        break;
      case 'internal':
        status.add(S.INTERNAL);
        break;
      default:
        throw new Error(c);
    }
  }
  return {
    preset: 'envoy-default',
    maxAttempts: numRetries + 1,
    retryOn: { status: [...status], errors: [...errors], statusWithWait: [] },
  };
}

interface OnIn {
  readonly on: readonly string[];
  readonly codes?: readonly number[];
  readonly steps: readonly Step[];
  readonly method?: string;
  readonly numRetries?: number;
}
interface OnOut {
  readonly calls: number;
  readonly end: string;
}
const retryOn = group<OnIn, OnOut>({
  title: 'x-envoy-retry-on conditions (num_retries 1)',
  check: (i) => {
    const t = drive(envoyPolicy(i.on, i.codes, i.numRetries), i.steps, { method: i.method ?? 'GET', random: RANDOM_HALF });
    return { calls: t.attempts, end: t.reason };
  },
  cases: [
    {
      id: 'no retry policy: no retry',
      from: `${RT}.PolicyNoneRemoteReset`,
      input: { on: [], steps: [{ errorClass: 'reset' }, { status: 200 }] },
      expected: { calls: 1, end: 'not_retryable' },
    },
    {
      id: '5xx retries a remote reset, once',
      from: `${RT}.Policy5xxRemoteReset`,
      input: { on: ['5xx'], steps: [{ errorClass: 'reset' }, { errorClass: 'reset' }] },
      expected: { calls: 2, end: 'max_attempts' },
    },
    {
      id: '5xx retries a 503, once',
      from: `${RT}.Policy5xxRemote503`,
      input: { on: ['5xx'], steps: [{ status: 503 }, { status: 503 }] },
      expected: { calls: 2, end: 'max_attempts' },
    },
    {
      id: '5xx does not retry a 503 marked x-envoy-overloaded',
      from: `${RT}.Policy5xxRemote503Overloaded`,
      input: { on: ['5xx'], steps: [{ status: 503, headers: { 'x-envoy-overloaded': 'true' } }, { status: 503 }] },
      expected: { calls: 1, end: 'not_retryable' },
      status: 'differs',
      relent: { calls: 2, end: 'max_attempts' },
      why: NO_MARKERS,
    },
    {
      id: 'resource-exhausted does not retry an answer marked x-envoy-ratelimited',
      from: `${RT}.PolicyResourceExhaustedRemoteRateLimited`,
      input: {
        on: ['resource-exhausted'],
        steps: [{ status: S.RESOURCE_EXHAUSTED, headers: { 'x-envoy-ratelimited': 'true' } }, { status: S.RESOURCE_EXHAUSTED }],
      },
      expected: { calls: 1, end: 'not_retryable' },
      status: 'differs',
      relent: { calls: 2, end: 'max_attempts' },
      why: NO_MARKERS,
    },
    ...[502, 503, 504].map((status) => ({
      id: `gateway-error retries a ${status}`,
      from: `${RT}.PolicyGatewayErrorRemote${status}`,
      input: { on: ['gateway-error'], steps: [{ status }, { status }] },
      expected: { calls: 2, end: 'max_attempts' },
    })),
    {
      id: 'gateway-error retries a remote reset',
      from: `${RT}.PolicyGatewayErrorRemoteReset`,
      input: { on: ['gateway-error'], steps: [{ errorClass: 'reset' }, { errorClass: 'reset' }] },
      expected: { calls: 2, end: 'max_attempts' },
    },
    ...(
      [
        ['cancelled', S.CANCELLED, 'Cancelled'],
        ['deadline-exceeded', S.DEADLINE_EXCEEDED, 'DeadlineExceeded'],
        ['resource-exhausted', S.RESOURCE_EXHAUSTED, 'ResourceExhausted'],
        ['unavailable', S.UNAVAILABLE, 'Unavilable'],
        ['internal', S.INTERNAL, 'Internal'],
      ] as const
    ).map(([on, status, name]) => ({
      id: `x-envoy-retry-grpc-on ${on}`,
      from: `${RT}.PolicyGrpc${name}`,
      input: { on: [on], steps: [{ status }, { status }] },
      expected: { calls: 2, end: 'max_attempts' },
      note: 'the grpc-status restated as an HTTP status',
    })),
    {
      id: 'connect-failure does not retry a remote reset',
      from: `${RT}.PolicyConnectFailureOtherReset`,
      input: { on: ['connect-failure'], steps: [{ errorClass: 'reset' }, { status: 200 }] },
      expected: { calls: 1, end: 'not_retryable' },
    },
    {
      id: 'connect-failure retries a connect failure',
      from: `${RT}.PolicyConnectFailureResetConnectFailure`,
      input: { on: ['connect-failure'], steps: [{ errorClass: 'connect_refused' }, { status: 200 }] },
      expected: { calls: 2, end: 'return' },
    },
    {
      id: 'retriable-4xx retries a 409',
      from: `${RT}.PolicyRetriable4xxRetry`,
      input: { on: ['retriable-4xx'], steps: [{ status: 409 }, { status: 409 }] },
      expected: { calls: 2, end: 'max_attempts' },
    },
    {
      id: 'retriable-4xx does not retry a 400',
      from: `${RT}.PolicyRetriable4xxNoRetry`,
      input: { on: ['retriable-4xx'], steps: [{ status: 400 }, { status: 200 }] },
      expected: { calls: 1, end: 'not_retryable' },
    },
    {
      id: 'retriable-4xx does not retry a reset',
      from: `${RT}.PolicyRetriable4xxReset`,
      input: { on: ['retriable-4xx'], steps: [{ errorClass: 'reset' }, { status: 200 }] },
      expected: { calls: 1, end: 'not_retryable' },
    },
    {
      id: 'retriable-status-codes [409] retries a 409',
      from: `${RT}.RetriableStatusCodes`,
      input: { on: ['retriable-status-codes'], codes: [409], steps: [{ status: 409 }, { status: 409 }] },
      expected: { calls: 2, end: 'max_attempts' },
    },
    {
      id: 'retriable-status-codes does not retry a reset',
      from: `${RT}.RetriableStatusCodesUpstreamReset`,
      input: { on: ['retriable-status-codes'], codes: [409], steps: [{ errorClass: 'reset' }, { status: 200 }] },
      expected: { calls: 1, end: 'not_retryable' },
    },
    {
      id: 'x-envoy-retriable-status-codes: 200 retries a 200',
      from: `${RT}.RetriableStatusCodesHeader ("200")`,
      input: { on: ['retriable-status-codes'], codes: [200], steps: [{ status: 200 }, { status: 201 }] },
      expected: { calls: 2, end: 'return' },
    },
    {
      id: 'x-envoy-retriable-status-codes: 418,200 retries a 200',
      from: `${RT}.RetriableStatusCodesHeader ("418,200")`,
      input: { on: ['retriable-status-codes'], codes: [418, 200], steps: [{ status: 200 }, { status: 201 }] },
      expected: { calls: 2, end: 'return' },
    },
    {
      id: 'reset retries a remote reset, once',
      from: `${RT}.PolicyResetRemoteReset`,
      input: { on: ['reset'], steps: [{ errorClass: 'reset' }, { errorClass: 'reset' }] },
      expected: { calls: 2, end: 'max_attempts' },
    },
    {
      id: 'retries limited to GET/HEAD: GET 409 under retriable-4xx',
      from: `${RT}.PolicyLimitedByRequestHeaders`,
      input: { on: ['retriable-4xx'], method: 'GET', steps: [{ status: 409 }, { status: 200 }] },
      expected: { calls: 2, end: 'return' },
    },
    {
      id: 'retries limited to GET/HEAD: GET 500 under 5xx',
      from: `${RT}.PolicyLimitedByRequestHeaders`,
      input: { on: ['5xx'], method: 'GET', steps: [{ status: 500 }, { status: 200 }] },
      expected: { calls: 2, end: 'return' },
    },
    {
      id: 'retries limited to GET/HEAD: HEAD 500 under 5xx',
      from: `${RT}.PolicyLimitedByRequestHeaders`,
      input: { on: ['5xx'], method: 'HEAD', steps: [{ status: 500 }, { status: 200 }] },
      expected: { calls: 2, end: 'return' },
    },
    {
      id: 'retries limited to GET/HEAD: HEAD 500 under retriable-4xx only',
      from: `${RT}.PolicyLimitedByRequestHeaders`,
      input: { on: ['retriable-4xx'], method: 'HEAD', steps: [{ status: 500 }, { status: 200 }] },
      expected: { calls: 1, end: 'not_retryable' },
    },
    {
      id: 'retries limited to GET/HEAD: POST is not retried',
      from: `${RT}.PolicyLimitedByRequestHeaders`,
      input: { on: ['5xx'], method: 'POST', steps: [{ status: 500 }, { status: 200 }] },
      expected: { calls: 1, end: 'not_retryable' },
      note: "relent's own idempotency rule gives the same",
    },
    {
      id: 'retry_on applies to any method: a POST 503 is retried',
      from: `${DOC} (x-envoy-retry-on: no method condition)`,
      input: { on: ['5xx'], method: 'POST', steps: [{ status: 503 }, { status: 200 }] },
      expected: { calls: 2, end: 'return' },
      status: 'differs',
      relent: { calls: 1, end: 'not_retryable' },
      why: 'a POST is retried only with an idempotency key or `idempotent: true` ([README, Concepts: Idempotency](../README.md#concepts))',
    },
    {
      id: 'num_retries 0: no retry',
      from: `${RT}.RouteConfigNoRetriesAllowed`,
      input: { on: ['connect-failure'], numRetries: 0, steps: [{ errorClass: 'connect_refused' }, { status: 200 }] },
      expected: { calls: 1, end: 'max_attempts' },
    },
    {
      id: 'num_retries 1 from the route config',
      from: `${RT}.RouteConfigNoHeaderConfig`,
      input: { on: ['connect-failure'], steps: [{ errorClass: 'connect_refused' }, { status: 200 }] },
      expected: { calls: 2, end: 'return' },
    },
    {
      id: 'a 503 then a 200: the 200 is the answer',
      from: `${RT}.NoPreferredOverLimitExceeded`,
      input: { on: ['5xx'], steps: [{ status: 503 }, { status: 200 }] },
      expected: { calls: 2, end: 'return' },
    },
    {
      id: 'num_retries defaults to 1',
      from: `${PROTO}.num_retries ("defaults to 1")`,
      input: { on: ['5xx'], steps: [{ status: 503 }, { status: 503 }, { status: 503 }] },
      expected: { calls: 2, end: 'max_attempts' },
    },
  ],
});

const concurrency = group<string, OnOut>({
  title: 'retry circuit breakers and budgets',
  check: () => {
    const t = drive(envoyPolicy(['5xx']), [{ status: 500 }, { status: 200 }]);
    return { calls: t.attempts, end: t.reason };
  },
  cases: [
    {
      id: 'max_retries 0 in flight: the retry overflows',
      from: `${RT}.NoAvailableRetries`,
      input: 'cb',
      expected: { calls: 1, end: 'overflow' },
      status: 'differs',
      relent: { calls: 2, end: 'return' },
      why: NO_CONCURRENCY,
    },
    {
      id: 'a retry budget overrides max_retries',
      from: `${RT}.BudgetAvailableRetries`,
      input: 'budget',
      expected: { calls: 2, end: 'return' },
      note: "no concurrent-retry limit in relent: the retry goes, as Envoy's budget allows it here",
    },
    {
      id: 'a budget of 0 % with no minimum allows no retry',
      from: `${RT}.BudgetNoAvailableRetries`,
      input: 'no budget',
      expected: { calls: 1, end: 'overflow' },
      status: 'differs',
      relent: { calls: 2, end: 'return' },
      why: NO_CONCURRENCY,
    },
    {
      id: "the budget's minimum: 3 retries in flight, more with more requests",
      from: `${RT}.BudgetVerifyMinimumConcurrency`,
      input: 'minimum',
      expected: { calls: 1, end: 'overflow' },
      status: 'differs',
      relent: { calls: 2, end: 'return' },
      why: NO_CONCURRENCY,
      note: 'the step with three retries already in flight',
    },
  ],
});

// --- server hints -------------------------------------------------------------------------------

const HINT_POLICY: PolicySpec = {
  maxAttempts: 2,
  deadlineMs: 2 ** 31 - 1,
  budget: null,
  retryOn: { status: [429], errors: [] },
  retryAfter: { statuses: [429], maxMs: 300_000, jitterRatio: 0, jitterMinMs: 0, jitterMaxMs: 0 },
};
const WALL_1E9 = 1e12; // Envoy's test time: 1 000 000 000 s since the epoch

const resetHeaders = group<Readonly<Record<string, string>>, number | 'none'>({
  title: 'rate-limited retry back-off: reset headers (now = 1 000 000 000 s)',
  check: async (headers) => {
    const r = await runOnClock(async (ctx) => ({ status: ctx.attempt === 1 ? 429 : 200, headers }), { policy: HINT_POLICY });
    const first = r.events.find((e) => e.type === 'attempt') as { retryAfterMs: number | null } | undefined;
    return first?.retryAfterMs ?? 'none';
  },
  cases: [
    { id: 'no header matches: no interval', from: `${RH} ResetHeaderParserParseIntervalTest.NoHeaderMatches`, input: {}, expected: 'none' },
    {
      id: 'Retry-After as an HTTP-date is not read (SECONDS format)',
      from: `${RH} ResetHeaderParserParseIntervalTest.HeaderMatchesButUnsupportedFormatDate`,
      input: { 'retry-after': 'Fri, 17 Jul 2020 11:59:51 GMT' },
      expected: 'none',
      status: 'differs',
      relent: 0,
      why: 'a recipient of Retry-After must accept both forms, an HTTP-date too (RFC 9110 §10.2.3) ([README, Concepts: Retry-After](../README.md#concepts))',
      note: 'relent reads the date and measures it against its clock (here 2026-01-01: the date is past, so 0)',
    },
    {
      id: 'Retry-After 2.5 is not a number of seconds',
      from: `${RH} ResetHeaderParserParseIntervalTest.HeaderMatchesButUnsupportedFormatFloat`,
      input: { 'retry-after': '2.5' },
      expected: 'none',
    },
    {
      id: 'Retry-After 5 is 5 s',
      from: `${RH} ResetHeaderParserParseIntervalTest.HeaderMatchesSupportedFormatSeconds`,
      input: { 'retry-after': '5' },
      expected: 5000,
    },
    {
      id: 'header names match case-insensitively',
      from: `${RH} ResetHeaderParserParseIntervalTest.HeaderMatchesSupportedFormatSecondsCaseInsensitive`,
      input: { 'Retry-After': '5' },
      expected: 5000,
    },
  ],
});

const resetTimestamps = group<Readonly<Record<string, string>>, number | 'none'>({
  title: 'rate-limited retry back-off: UNIX_TIMESTAMP reset headers (now = 1 000 000 000 s)',
  check: (headers) => {
    const t = drive(
      HINT_POLICY,
      [
        { status: 429, headers, elapsedMs: 0 },
        { status: 200, elapsedMs: 0 },
      ],
      { wall: WALL_1E9 },
    );
    return t.asked[0] ?? 'none';
  },
  cases: [
    {
      id: 'a fractional timestamp is not read',
      from: `${RH} ResetHeaderParserParseIntervalTest.HeaderMatchesButUnsupportedFormatTimestampFloat`,
      input: { 'x-ratelimit-reset': '1595320702.1234' },
      expected: 'none',
      note: 'relent reads decimals (Discord), but this one is 18 years away: ignored as absurd (over 366 days)',
    },
    {
      id: 'a timestamp in the past gives no interval',
      from: `${RH} ResetHeaderParserParseIntervalTest.HeaderMatchesSupportedFormatTimestampButInThePast`,
      input: { 'x-ratelimit-reset': '999999999' },
      expected: 'none',
      note: 'relent reads a value under 10^9 as delta seconds: 31 years, ignored as absurd',
    },
    {
      id: 'a timestamp of now is an empty interval',
      from: `${RH} ResetHeaderParserParseIntervalTest.HeaderMatchesSupportedFormatTimestampEmptyInterval`,
      input: { 'x-ratelimit-reset': '1000000000' },
      expected: 0,
    },
    {
      id: 'a timestamp 7 s ahead is 7 s',
      from: `${RH} ResetHeaderParserParseIntervalTest.HeaderMatchesSupportedFormatTimestampNonEmptyInterval`,
      input: { 'x-ratelimit-reset': '1000000007' },
      expected: 7000,
    },
  ],
});

interface RateIn {
  readonly kind: 'jitter' | 'over max' | 'not retried' | 'default max';
}
const rateLimited = group<RateIn, unknown>({
  title: 'rate_limited_retry_back_off (documented behaviour)',
  check: (i) => {
    const policy: PolicySpec = {
      maxAttempts: 2,
      deadlineMs: 2 ** 31 - 1,
      budget: null,
      retryOn: { status: [429], errors: [] },
      retryAfter: { statuses: [429], maxMs: 300_000 },
    };
    switch (i.kind) {
      case 'jitter': {
        const at = (random: typeof RANDOM_MIN): number =>
          drive(policy, [{ status: 429, headers: { 'retry-after': '2' }, elapsedMs: 0 }, { status: 200 }], { random }).delays[0]!;
        return [at(RANDOM_MIN), at(RANDOM_MAX)];
      }
      case 'over max': {
        const t = drive(policy, [{ status: 429, headers: { 'retry-after': '600', 'x-ratelimit-reset': '10' }, elapsedMs: 0 }, { status: 200 }], {
          random: RANDOM_MIN,
        });
        return t.attempts === 2 ? { retried: true, waitMs: t.delays[0] } : { retried: false };
      }
      case 'not retried': {
        const t = drive({ ...policy, retryOn: { status: [503], errors: [] } }, [{ status: 429, headers: { 'retry-after': '1' } }, { status: 200 }]);
        return t.attempts;
      }
      case 'default max':
        return (PRESETS.get('envoy-default')!.spec.retryAfter?.maxMs ?? 60_000) / 1000;
    }
  },
  cases: [
    {
      id: 'the interval is jittered to random(interval, 1.5 × interval)',
      from: `${PROTO}.RateLimitedRetryBackOff`,
      input: { kind: 'jitter' },
      expected: [2000, 2999],
      status: 'differs',
      relent: [2000, 2199],
      why: "relent adds a small positive jitter after a server's wait: 10 % of it, at least 100 ms, at most 10 s ([README, Concepts: Retry-After](../README.md#concepts))",
    },
    {
      id: 'a reset header over max_interval is discarded and the next header tried',
      from: `${PROTO}.RateLimitedRetryBackOff.max_interval`,
      input: { kind: 'over max' },
      expected: { retried: true, waitMs: 10_000 },
      status: 'differs',
      relent: { retried: false },
      why: 'a present Retry-After decides (draft-ietf-httpapi-ratelimit-headers §7); a wait over the cap stops the operation ([docs/http.md, Server hints](http.md#server-hints))',
    },
    {
      id: 'the back-off alone does not make a status retryable',
      from: `${PROTO}.RateLimitedRetryBackOff ("will not by itself cause a request to be retried")`,
      input: { kind: 'not retried' },
      expected: 1,
    },
    {
      id: 'max_interval defaults to 300 s',
      from: `${PROTO}.RateLimitedRetryBackOff.max_interval`,
      input: { kind: 'default max' },
      expected: 300,
      status: 'differs',
      relent: 60,
      why: 'relent accepts server waits up to 60 s by default (`retryAfter.maxMs`); `envoy-default` does not read them at all ([README, Defaults](../README.md#defaults))',
    },
  ],
});

// --- timeouts ---------------------------------------------------------------------------------------

const timeouts = group<'route' | 'global', unknown>({
  title: 'the route timeout covers every retry',
  check: (what) => {
    if (what === 'route') {
      const t = drive(
        { preset: 'envoy-default', deadlineMs: 3000 },
        [
          { status: 503, elapsedMs: 2700 },
          { status: 200, elapsedMs: 10 },
        ],
        { random: RANDOM_HALF },
      );
      return { retried: t.attempts === 2, withinRoute: t.delays[0]! + t.timeouts[1]! <= 300 };
    }
    const t = drive({ preset: 'envoy-default', deadlineMs: 3000 }, [{ errorClass: 'timeout', elapsedMs: 3000 }, { status: 200 }]);
    return { calls: t.attempts, end: t.reason };
  },
  cases: [
    {
      id: '3 s route timeout, 2.7 s first attempt: the retry and its back-off share 0.3 s',
      from: `${DOC} (x-envoy-max-retries: "the route timeout … includes all retries")`,
      input: 'route',
      expected: { retried: true, withinRoute: true },
    },
    {
      id: 'no per-try timeout: a request that hits the route timeout is not retried',
      from: `${PROTO}.per_try_timeout`,
      input: 'global',
      expected: { calls: 1, end: 'deadline_exceeded' },
    },
  ],
});

const preset = group<'budget' | 'which formula', unknown>({
  title: 'the envoy-default preset',
  check: (what) => {
    const def = PRESETS.get('envoy-default')!;
    if (what === 'budget') return def.spec.budget ?? null;
    const text = [def.summary, def.schedule, ...(def.notes ?? [])].join(' ');
    return /docs?|documentation/i.test(text) && /code/i.test(text);
  },
  cases: [
    {
      id: 'retry budgets: 20 % of active requests, at least 3 retries in flight',
      from: 'api/envoy/config/cluster/v3/circuit_breaker.proto RetryBudget',
      input: 'budget',
      expected: { budget_percent: 20, min_retry_concurrency: 3 },
      status: 'differs',
      relent: null,
      why: NO_CONCURRENCY,
    },
    {
      id: 'the preset says which back-off it follows (docs, not code) and why',
      from: 'issue 21 (What to build 4: where a source and its own code disagree)',
      input: 'which formula',
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
      id: 'a local overflow reset is not retried (5xx)',
      from: `${RT}.Policy5xxResetOverflow`,
      status: 'na',
      why: "Envoy's own connection-pool overflow; relent has no such local reset",
    },
    {
      id: 'a local overflow reset is not retried (gateway-error)',
      from: `${RT}.PolicyGatewayErrorResetOverflow`,
      status: 'na',
      why: "Envoy's own connection-pool overflow; relent has no such local reset",
    },
    {
      id: 'a reset after a 200 began',
      from: `${RT}.Policy5xxRemote200RemoteReset`,
      status: 'na',
      why: 'a reset while the body streams, after the attempt answered; a relent attempt ends at its response',
    },
    {
      id: 'refused-stream',
      from: `${RT}.PolicyRefusedStream`,
      status: 'na',
      why: "HTTP/2 REFUSED_STREAM is a transport state relent's observations do not carry",
    },
    { id: 'the upstream.use_retry runtime guard', from: `${RT}.RuntimeGuard`, status: 'na', why: 'Envoy runtime flags' },
    {
      id: 'x-envoy-retriable-status-codes with junk entries',
      from: `${RT}.RetriableStatusCodesHeader ("   418 junk,200", "   418 junk,xxx200")`,
      status: 'na',
      why: "parsing of Envoy's request header; relent takes a list of statuses in its policy",
    },
    {
      id: 'retriable-headers set by request header',
      from: `${RT}.RetriableHeadersPolicySetViaRequestHeader`,
      status: 'na',
      why: 'header matchers on the response; relent decides on status and error class',
    },
    {
      id: 'retriable-headers from the route config',
      from: `${RT}.RetriableHeadersPolicyViaRetryPolicyConfiguration`,
      status: 'na',
      why: 'header matchers on the response; relent decides on status and error class',
    },
    {
      id: 'retriable-headers by request headers',
      from: `${RT}.RetriableHeadersSetViaRequestHeader`,
      status: 'na',
      why: 'header matchers on the response; relent decides on status and error class',
    },
    {
      id: 'retriable-headers merged from config and request',
      from: `${RT}.RetriableHeadersMergedConfigAndRequestHeaders`,
      status: 'na',
      why: 'header matchers on the response; relent decides on status and error class',
    },
    {
      id: 'no :method header disables method-limited retries',
      from: `${RT}.PolicyLimitedByRequestHeaders (first block)`,
      status: 'na',
      why: "a request without a method; relent's operations have one or are plain functions",
    },
    {
      id: 'x-envoy-max-retries takes precedence',
      from: `${RT}.MaxRetriesHeader`,
      status: 'na',
      why: "Envoy's request headers that set the retry count; relent takes maxAttempts in the policy",
    },
    { id: 'x-envoy-max-retries: 0', from: `${RT}.ZeroMaxRetriesHeader`, status: 'na', why: "Envoy's request headers that set the retry count" },
    { id: 'host selection attempts', from: `${RT}.HostSelectionAttempts`, status: 'na', why: "Envoy's load balancer host selection" },
    { id: 'destruction during a scheduled retry', from: `${RT}.Cancel`, status: 'na', why: 'C++ object lifetime' },
    { id: 'retry budget set by runtime only', from: `${RT}.BudgetRuntimeSetOnly`, status: 'na', why: 'Envoy runtime overrides' },
    { id: 'parseRetryOn', from: `${RT}.ParseRetryOn`, status: 'na', why: 'parsing the x-envoy-retry-on header' },
    { id: 'parseRetryGrpcOn', from: `${RT}.ParseRetryGrpcOn`, status: 'na', why: 'parsing the x-envoy-retry-grpc-on header' },
    {
      id: 'reset header formats',
      from: `${RH} ResetHeaderParserConstructorTest (FormatUnset, FormatSeconds, FormatUnixTimestamp)`,
      status: 'na',
      why: "Envoy's reset header configuration; relent reads fixed header names",
    },
    {
      id: 'JitteredLowerBoundBackOffStrategy',
      from: `${BS} LowerBoundBackOffStrategyTest (2 tests)`,
      status: 'na',
      why: 'a back-off Envoy uses outside router retries',
    },
    {
      id: 'FixedBackOffStrategy',
      from: `${BS} FixedBackOffStrategyTest.FixedBackOffBasicReset`,
      status: 'na',
      why: 'a back-off Envoy uses outside router retries',
    },
    {
      id: 'hedge_on_per_try_timeout',
      from: `${PROTO} HedgePolicy`,
      status: 'na',
      why: "Envoy hedges only after a per-try timeout; relent's hedging is in the Polly and gRPC files",
    },
  ],
});

export const ENVOY: Source = {
  key: 'envoy',
  title: 'Envoy router retries',
  upstream: [
    'envoyproxy/envoy docs/root/configuration/http/http_filters/router_filter.rst, api/envoy/config/route/v3/route_components.proto, api/envoy/config/cluster/v3/circuit_breaker.proto',
    'envoyproxy/envoy test/common/router/retry_state_impl_test.cc (Envoy 1.13 and current), test/common/router/reset_header_parser_test.cc, test/common/common/backoff_strategy_test.cc',
  ],
  groups: [intervals, overflow, config, retryOn, concurrency, resetHeaders, resetTimestamps, rateLimited, timeouts, preset, notApplicable],
};
