// gRPC: the rules of gRFC A6 "gRPC Retry Design" and the retry, pushback, throttling and
// hedging tests of grpc-java (RetriableStreamTest), grpc-go (test/retry_test.go) and gRPC
// core (ServerRetryThrottleData), answered by relent's `grpc` / `grpc-2017` presets, its
// `throttle` budget, the operation machine and execute() on the test clock.
//
// gRPC status codes are restated as HTTP statuses (GRPC_AS_STATUS: UNAVAILABLE 503,
// DATA_LOSS 502, INTERNAL 500, ALREADY_EXISTS 409 …); a case's policy retries the statuses
// its source's retryableStatusCodes lists. `grpc-retry-pushback-ms` is a response header.

import { createRetryBudget, presetPolicy, resolvePolicy, type PolicySpec, type RetryBudget } from '../../../src/index.js';
import {
  drive,
  group,
  GRPC_AS_STATUS as S,
  hedgeRun,
  RANDOM_HALF,
  RANDOM_MAX,
  RANDOM_MIN,
  runOnClock,
  type HedgeAttempt,
  type Source,
  type Step,
} from '../harness.js';

const A6 = 'gRFC A6 (A6-client-retries.md)';
const RST = 'core/src/test/java/io/grpc/internal/RetriableStreamTest.java';
const GO = 'test/retry_test.go';
const CORE = 'test/core/client_channel/retry_throttle_test.cc';

const PB = 'grpc-retry-pushback-ms';
const pushback = (v: string): Readonly<Record<string, string>> => ({ [PB]: v });

/** grpc-java's RetriableStreamTest policy: 100 s initial, 700 s max, ×2, UNAVAILABLE and DATA_LOSS, the 2017 (full jitter) text. */
const JAVA: PolicySpec = {
  preset: 'grpc-2017',
  maxAttempts: 6,
  deadlineMs: 2 ** 31 - 1,
  backoff: { kind: 'full-jitter', baseMs: 100_000, capMs: 700_000, multiplier: 2 },
  retryOn: { status: [S.UNAVAILABLE, S.DATA_LOSS], errors: [] },
  retryAfter: { maxMs: 2 ** 31 - 1 - 10_000 },
};

/**
 * The same RetryPolicy object below a channel: RetriableStreamTest builds it directly with 6
 * attempts, out of reach of the channel's 5-attempt cap (which relent's grpc presets apply).
 */
const JAVA_POLICY_OBJECT: PolicySpec = {
  maxAttempts: 6,
  deadlineMs: 2 ** 31 - 1,
  budget: null,
  backoff: { kind: 'full-jitter', baseMs: 100_000, capMs: 700_000, multiplier: 2 },
  retryOn: { status: [S.UNAVAILABLE, S.DATA_LOSS], errors: [] },
};

/** grpc-go's test policy: 4 attempts, 10 ms backoff without growth. */
const goPolicy = (codes: readonly number[]): PolicySpec => ({
  preset: 'grpc',
  maxAttempts: 4,
  backoff: { kind: 'proportional-jitter', baseMs: 10, capMs: 10, multiplier: 1, jitter: 0.2 },
  retryOn: { status: codes, errors: [] },
});

// --- budget helpers ------------------------------------------------------------------------

const FAILURE = { attempt: 1, success: false, retryableFailure: true, throttled: false, timeout: false, lastCost: 0 } as const;
const SUCCESS = { attempt: 1, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost: 0 } as const;

function throttle(maxTokens: number, tokenRatio: number): RetryBudget {
  return createRetryBudget({ kind: 'throttle', maxTokens, tokenRatio });
}
/** "Above the threshold": the budget would pay for a retry. */
const above = (b: RetryBudget): boolean => b.tryAcquire({ throttled: false, timeout: false }, 0) !== false;

// --- A6: the retry policy -------------------------------------------------------------------

interface RetryIn {
  readonly policy: PolicySpec | 'grpc' | 'grpc-2017';
  readonly steps: readonly Step[];
  readonly random?: 'min' | 'half' | 'max';
}
interface RetryOut {
  readonly calls: number;
  readonly end: string;
  readonly delays: readonly number[];
}
const RANDOMS = { min: RANDOM_MIN, half: RANDOM_HALF, max: RANDOM_MAX };
const u = (n: number): Step[] => Array.from({ length: n }, () => ({ status: S.UNAVAILABLE }));

const retryPolicy = group<RetryIn, RetryOut>({
  title: 'A6 retry policy',
  check: (i) => {
    const t = drive(i.policy, i.steps, { random: RANDOMS[i.random ?? 'half'] });
    return { calls: t.attempts, end: t.reason, delays: t.delays };
  },
  cases: [
    {
      id: 'maxAttempts counts the original RPC',
      from: `${A6} Maximum Number of Retries`,
      input: { policy: 'grpc', steps: u(5) },
      expected: { calls: 4, end: 'max_attempts', delays: [100, 200, 400] },
    },
    {
      id: 'maxAttempts above 5 is treated as 5',
      from: `${A6} Limits on Retries and Hedges`,
      input: { policy: { preset: 'grpc', maxAttempts: 7 }, steps: u(7) },
      expected: { calls: 5, end: 'max_attempts', delays: [100, 200, 400, 800] },
    },
    {
      id: '2024 text: retry n waits min(initial·m^(n−1), max)·random(0.8, 1.2), random at 0',
      from: `${A6} Exponential Backoff (since 2024-08)`,
      input: { policy: 'grpc', steps: u(4), random: 'min' },
      expected: { calls: 4, end: 'max_attempts', delays: [80, 160, 320] },
    },
    {
      id: '2024 text: random at 0.5 gives the plain exponential',
      from: `${A6} Exponential Backoff (since 2024-08)`,
      input: { policy: 'grpc', steps: u(4), random: 'half' },
      expected: { calls: 4, end: 'max_attempts', delays: [100, 200, 400] },
    },
    {
      id: '2024 text: random near 1.2 gives just under 1.2×',
      from: `${A6} Exponential Backoff (since 2024-08)`,
      input: { policy: 'grpc', steps: u(4), random: 'max' },
      expected: { calls: 4, end: 'max_attempts', delays: [119, 239, 479] },
      note: 'whole ms, rounded down',
    },
    {
      id: '2024 text: a wait may exceed maxBackoff by the jitter',
      from: `${A6} Exponential Backoff ("slightly above maxBackoff")`,
      input: {
        policy: { preset: 'grpc', backoff: { kind: 'proportional-jitter', baseMs: 600, capMs: 1000, multiplier: 2, jitter: 0.2 } },
        steps: u(4),
        random: 'max',
      },
      expected: { calls: 4, end: 'max_attempts', delays: [719, 1199, 1199] },
    },
    {
      id: '2017 text: random(0, min(initial·m^(n−1), max))',
      from: `${A6} Exponential Backoff (2017 text)`,
      input: { policy: 'grpc-2017', steps: u(4), random: 'half' },
      expected: { calls: 4, end: 'max_attempts', delays: [50, 100, 200] },
    },
    {
      id: 'deadline applies across all attempts',
      from: `${A6} Maximum Number of Retries`,
      input: {
        policy: { preset: 'grpc', deadlineMs: 1000 },
        steps: [
          { status: S.UNAVAILABLE, elapsedMs: 400 },
          { status: S.UNAVAILABLE, elapsedMs: 400 },
          { status: S.UNAVAILABLE, elapsedMs: 400 },
        ],
      },
      expected: { calls: 2, end: 'deadline_exceeded', delays: [100] },
    },
    {
      id: "retries and backoffs of grpc-java's retry test",
      from: `${RST} retry_everythingDrained`,
      input: { policy: JAVA, steps: [{ status: S.DATA_LOSS }, { status: S.UNAVAILABLE }, { status: S.INTERNAL }] },
      expected: { calls: 3, end: 'not_retryable', delays: [50_000, 100_000] },
    },
    {
      id: 'exponential backoff to maxBackoff, then no more attempts',
      from: `${RST} expBackoff_maxBackoff_maxRetryAttempts`,
      input: { policy: JAVA_POLICY_OBJECT, steps: [...u(1), { status: S.DATA_LOSS }, ...u(1), { status: S.DATA_LOSS }, { status: S.DATA_LOSS }, ...u(1)] },
      expected: { calls: 6, end: 'max_attempts', delays: [50_000, 100_000, 200_000, 350_000, 350_000] },
      note: "the test builds its RetryPolicy (6 attempts) directly, below the channel's 5-attempt cap: a relent policy without the grpc preset (whose cap is A6's)",
    },
  ],
});

const validation = group<PolicySpec, 'valid' | 'invalid'>({
  title: 'A6 configuration rules',
  check: (spec) => {
    try {
      resolvePolicy(spec);
      return 'valid';
    } catch {
      return 'invalid';
    }
  },
  cases: [
    {
      id: 'retryPolicy maxAttempts must be greater than 1',
      from: `${A6} Integration with Service Config (maxAttempts: "two or greater")`,
      input: { preset: 'grpc', maxAttempts: 1 },
      expected: 'invalid',
      status: 'differs',
      relent: 'valid',
      why: 'maxAttempts 1 is a valid relent policy: one call, no retry ([README, Defaults](../README.md#defaults))',
    },
    {
      id: 'maxTokens above 1000 is invalid',
      from: `${A6} Throttling Configuration ("maxTokens … (0, 1000]")`,
      input: { budget: { kind: 'throttle', maxTokens: 1001, tokenRatio: 0.1 } },
      expected: 'invalid',
    },
    {
      id: 'maxTokens must be greater than zero',
      from: `${A6} Integration with Service Config`,
      input: { budget: { kind: 'throttle', maxTokens: 0, tokenRatio: 0.1 } },
      expected: 'invalid',
    },
    {
      id: 'tokenRatio must be greater than zero',
      from: `${A6} Integration with Service Config`,
      input: { budget: { kind: 'throttle', maxTokens: 10, tokenRatio: 0 } },
      expected: 'invalid',
    },
    {
      id: 'hedging maxAttempts is capped at 5 (4 hedges)',
      from: `${A6} Limits on Retries and Hedges`,
      input: { hedge: { delayMs: 100, maxHedges: 5 } },
      expected: 'invalid',
      note: 'relent refuses more than 4 hedges per operation (5 attempts in flight)',
    },
  ],
});

const ratio = group<number, number>({
  title: 'A6 tokenRatio precision',
  check: (r) => (createRetryBudget({ kind: 'throttle', maxTokens: 10, tokenRatio: r }).spec as { tokenRatio: number }).tokenRatio,
  cases: [
    {
      id: 'tokenRatio keeps three decimals: 0.5466 is 0.546',
      from: `${A6} Throttling Configuration ("Up to 3 decimal places")`,
      input: 0.5466,
      expected: 0.546,
    },
  ],
});

// --- pushback -----------------------------------------------------------------------------

const pushbacks = group<RetryIn, RetryOut>({
  title: 'server pushback (grpc-retry-pushback-ms)',
  check: (i) => {
    const t = drive(i.policy, i.steps, { random: RANDOMS[i.random ?? 'half'] });
    return { calls: t.attempts, end: t.reason, delays: t.delays };
  },
  cases: [
    {
      id: 'a pushback of 123 ms is waited exactly',
      from: `${RST} pushback (retry1)`,
      input: { policy: JAVA, steps: [{ status: S.UNAVAILABLE, headers: pushback('123') }, { status: 200 }] },
      expected: { calls: 2, end: 'return', delays: [123] },
    },
    {
      id: 'a pushback of 4567 s is waited exactly',
      from: `${RST} pushback (retry2)`,
      input: { policy: { ...JAVA, retryAfter: {} }, steps: [{ status: S.UNAVAILABLE, headers: pushback(String(4567 * 1000)) }, { status: 200 }] },
      expected: { calls: 2, end: 'return', delays: [4_567_000] },
      status: 'differs',
      relent: { calls: 1, end: 'not_retryable', delays: [] },
      why: "a server's wait over `retryAfter.maxMs` (60 s by default) stops the operation ([docs/http.md, Deadline and attempt headers](http.md#deadline-and-attempt-headers))",
      note: "relent with the preset's own cap on server waits; with a cap above 4567 s it waits it",
    },
    {
      id: 'a pushback on DATA_LOSS (retryable, not 429/503) is honoured',
      from: `${RST} pushback (retry2 on DATA_LOSS)`,
      input: { policy: JAVA, steps: [{ status: S.DATA_LOSS, headers: pushback('123') }, { status: 200 }] },
      expected: { calls: 2, end: 'return', delays: [123] },
    },
    {
      id: 'after a pushback the backoff starts again from initialBackoff',
      from: `${RST} pushback (retry3, retry4)`,
      input: { policy: JAVA, steps: [{ status: S.UNAVAILABLE, headers: pushback('123') }, ...u(2), { status: 200 }] },
      expected: { calls: 4, end: 'return', delays: [123, 50_000, 100_000] },
    },
    {
      id: 'A6: retry in n ms, then the delay resets to the initial backoff',
      from: `${A6} Summary of Retry and Hedging Logic, 5.1`,
      input: { policy: 'grpc-2017', steps: [{ status: S.UNAVAILABLE, headers: pushback('30') }, ...u(1), { status: 200 }] },
      expected: { calls: 3, end: 'return', delays: [30, 50] },
    },
    {
      id: 'no attempt beyond maxAttempts, whatever the pushback',
      from: `${RST} pushback (last attempt)`,
      input: { policy: { ...JAVA, maxAttempts: 2 }, steps: [...u(1), { status: S.UNAVAILABLE, headers: pushback('4567000') }] },
      expected: { calls: 2, end: 'max_attempts', delays: [50_000] },
    },
    {
      id: 'an empty pushback means do not retry',
      from: `${RST} pushback_noRetry`,
      input: { policy: 'grpc', steps: [{ status: S.UNAVAILABLE, headers: pushback('') }, { status: 200 }] },
      expected: { calls: 1, end: 'not_retryable', delays: [] },
    },
    {
      id: 'a negative pushback means do not retry',
      from: `${GO} TestRetryStreaming "Negative server pushback - no retry"`,
      input: { policy: goPolicy([S.UNAVAILABLE]), steps: [{ status: S.UNAVAILABLE, headers: pushback('-1') }, { status: 200 }] },
      expected: { calls: 1, end: 'not_retryable', delays: [] },
    },
    {
      id: 'a non-numeric pushback means do not retry',
      from: `${GO} TestRetryStreaming "Non-numeric server pushback - no retry"`,
      input: { policy: goPolicy([S.UNAVAILABLE]), steps: [{ status: S.UNAVAILABLE, headers: pushback('xxx') }, { status: 200 }] },
      expected: { calls: 1, end: 'not_retryable', delays: [] },
    },
    {
      id: 'two pushback values mean do not retry',
      from: `${GO} TestRetryStreaming "Multiple server pushback values - no retry"`,
      input: { policy: goPolicy([S.UNAVAILABLE]), steps: [{ status: S.UNAVAILABLE, headers: pushback('100, 10') }, { status: 200 }] },
      expected: { calls: 1, end: 'not_retryable', delays: [] },
      note: 'a repeated header reaches relent joined with ", ", as HTTP combines field lines',
    },
    {
      id: 'a 1 s pushback delays the retry by 1 s',
      from: `${GO} TestRetryStreaming "1s server pushback - delayed retry"`,
      input: { policy: goPolicy([S.UNAVAILABLE]), steps: [{ status: S.UNAVAILABLE, headers: pushback('1000') }, { status: 200 }] },
      expected: { calls: 2, end: 'return', delays: [1000] },
    },
  ],
});

// --- throttling ----------------------------------------------------------------------------

type Op = 'check' | 'fail' | 'succeed';
interface ThrottleIn {
  readonly maxTokens: number;
  readonly ratio: number;
  readonly ops: readonly Op[];
}
const throttleUnit = group<ThrottleIn, readonly boolean[]>({
  title: 'the throttle: failures −1, successes +tokenRatio, retries while above maxTokens/2',
  // 'fail' records a failure and then asks (grpc-java's onQualifiedFailureThenCheckIsAboveThreshold, core's RecordFailure).
  check: (i) => {
    const b = throttle(i.maxTokens, i.ratio);
    const out: boolean[] = [];
    for (const op of i.ops) {
      if (op === 'fail') b.observe(FAILURE, 0);
      if (op === 'succeed') b.observe(SUCCESS, 0);
      if (op !== 'succeed') out.push(above(b));
    }
    return out;
  },
  cases: [
    {
      id: 'Throttle(4, 0.8): down to 0, up to 4, down again',
      from: `${RST} throttle`,
      input: {
        maxTokens: 4,
        ratio: 0.8,
        ops: [
          'check',
          'fail',
          'check',
          'fail',
          'check',
          'fail',
          'fail',
          'fail',
          'fail',
          'check',
          'succeed',
          'check',
          'succeed',
          'check',
          'succeed',
          'check',
          'succeed',
          'check',
          'succeed',
          'check',
          'succeed',
          'check',
          'check',
          'fail',
          'check',
          'fail',
          'check',
        ],
      },
      expected: [true, true, true, false, false, false, false, false, false, false, false, false, true, true, true, true, true, true, true, false, false],
    },
    {
      id: 'ServerRetryThrottleData(4, 1.6): the basic flow',
      from: `${CORE} ServerRetryThrottleData.Basic`,
      input: {
        maxTokens: 4,
        ratio: 1.6,
        ops: ['fail', 'succeed', 'fail', 'fail', 'fail', 'fail', 'fail', 'succeed', 'succeed', 'fail', 'fail', 'succeed', 'fail', 'succeed', 'fail'],
      },
      expected: [true, true, false, false, false, false, true, false, false, true],
    },
    {
      id: 'tokens are exact: 10/0.2, 6 failures, 10 successes, 1 failure sits at the threshold',
      from: 'grpc core retry_throttle.cc and grpc-java RetriableStream.Throttle (milli-tokens)',
      input: {
        maxTokens: 10,
        ratio: 0.2,
        ops: [
          'fail',
          'fail',
          'fail',
          'fail',
          'fail',
          'fail',
          'succeed',
          'succeed',
          'succeed',
          'succeed',
          'succeed',
          'succeed',
          'succeed',
          'succeed',
          'succeed',
          'succeed',
          'fail',
        ],
      },
      expected: [true, true, true, true, false, false, false],
    },
  ],
});

interface StreamIn {
  readonly status: number;
  readonly pushback?: string;
}
interface StreamOut {
  readonly retried: boolean;
  readonly tokens: number;
}
/** grpc-java's throttled-stream tests: Throttle(4, 0.8), another call already failed once (3 tokens). */
const throttledStreams = group<StreamIn, StreamOut>({
  title: 'a throttled call (Throttle(4, 0.8), another call failed: 3 tokens)',
  check: (i) => {
    const b = throttle(4, 0.8);
    b.observe(FAILURE, 0);
    const headers = i.pushback === undefined ? undefined : pushback(i.pushback);
    const t = drive(JAVA, [{ status: i.status, headers }, { status: 200 }], { budget: b });
    // tokens right after the failed attempt (before a retry, if any, succeeded)
    const tokens = t.attempts === 1 ? b.available(0) : Math.round((b.available(0) - 0.8) * 1000) / 1000;
    return { retried: t.attempts > 1, tokens };
  },
  cases: [
    {
      id: 'retryable status, no pushback: throttled, 2 tokens',
      from: `${RST} throttledStream_FailWithRetriableStatusCode_WithoutPushback`,
      input: { status: S.UNAVAILABLE },
      expected: { retried: false, tokens: 2 },
    },
    {
      id: 'non-retryable status: not a failure for the throttle, 3 tokens',
      from: `${RST} throttledStream_FailWithNonRetriableStatusCode_WithoutPushback`,
      input: { status: S.INTERNAL },
      expected: { retried: false, tokens: 3 },
    },
    {
      id: 'retryable status with a pushback: still throttled, 2 tokens',
      from: `${RST} throttledStream_FailWithRetriableStatusCode_WithRetriablePushback`,
      input: { status: S.UNAVAILABLE, pushback: '123' },
      expected: { retried: false, tokens: 2 },
    },
    {
      id: 'non-retryable status with a pushback of 123 ms: retried after it',
      from: `${RST} throttledStream_FailWithNonRetriableStatusCode_WithRetriablePushback`,
      input: { status: S.INTERNAL, pushback: '123' },
      expected: { retried: true, tokens: 3 },
      status: 'differs',
      relent: { retried: false, tokens: 3 },
      why: "relent follows A6's summary (a fatal status is not retried); a pushback is read only on a status the policy retries ([docs/http.md, Deadline and attempt headers](http.md#deadline-and-attempt-headers))",
    },
    {
      id: "retryable status with a don't-retry pushback: 2 tokens",
      from: `${RST} throttledStream_FailWithRetriableStatusCode_WithNonRetriablePushback`,
      input: { status: S.UNAVAILABLE, pushback: '' },
      expected: { retried: false, tokens: 2 },
    },
    {
      id: "non-retryable status with a don't-retry pushback counts as a failure: 2 tokens",
      from: `${RST} throttledStream_FailWithNonRetriableStatusCode_WithNonRetriablePushback`,
      input: { status: S.INTERNAL, pushback: '' },
      expected: { retried: false, tokens: 2 },
    },
    {
      id: 'A6: a pushback saying not to retry counts as a failure',
      from: `${A6} Throttling ("…or that receive a pushback response indicating not to retry")`,
      input: { status: S.INVALID_ARGUMENT, pushback: '-1' },
      expected: { retried: false, tokens: 2 },
    },
    {
      id: 'A6: INVALID_ARGUMENT is not a failure for the throttle',
      from: `${A6} Throttling ("INVALID_ARGUMENT")`,
      input: { status: S.INVALID_ARGUMENT },
      expected: { retried: false, tokens: 3 },
    },
  ],
});

const throttleSucceed = group<null, { readonly afterOwn: number; readonly aboveAfterOwn: boolean; readonly aboveAfterNext: boolean }>({
  title: 'a throttled call that succeeds',
  check: () => {
    const b = throttle(4, 0.8);
    for (let k = 0; k < 3; k++) b.observe(FAILURE, 0);
    drive(JAVA, [{ status: 200 }], { budget: b });
    const afterOwn = Math.round(b.available(0) * 1000) / 1000;
    const aboveAfterOwn = above(b);
    b.observe(SUCCESS, 0);
    return { afterOwn, aboveAfterOwn, aboveAfterNext: above(b) };
  },
  cases: [
    {
      id: 'a success adds tokenRatio: 1 → 1.8, another → 2.6',
      from: `${RST} throttleStream_Succeed`,
      input: null,
      expected: { afterOwn: 1.8, aboveAfterOwn: false, aboveAfterNext: true },
    },
  ],
});

interface BlockIn {
  readonly preset: 'grpc' | 'grpc-2017';
}
const noBlocking = group<BlockIn, { readonly calls: number; readonly end: string; readonly budgetWaits: number }>({
  title: 'an empty throttle does not block',
  check: (i) => {
    const b = throttle(10, 0.1);
    for (let k = 0; k < 5; k++) b.observe(FAILURE, 0);
    b.observe(SUCCESS, 0); // another call answered just now: 5.1 tokens
    const t = drive(i.preset, [...u(1), { status: 200 }], { budget: b });
    return { calls: t.attempts, end: t.reason, budgetWaits: t.waits.filter((w) => w.why === 'budget_wait').length };
  },
  cases: [
    {
      id: 'grpc: a throttled retry fails at once',
      from: `${A6} Throttling ("Neither retry attempts or hedged RPCs block")`,
      input: { preset: 'grpc' },
      expected: { calls: 1, end: 'budget_exhausted', budgetWaits: 0 },
    },
    {
      id: 'grpc-2017: a throttled retry fails at once',
      from: `${A6} Throttling ("Neither retry attempts or hedged RPCs block")`,
      input: { preset: 'grpc-2017' },
      expected: { calls: 1, end: 'budget_exhausted', budgetWaits: 0 },
    },
  ],
});

// --- grpc-go end-to-end sequences -------------------------------------------------------------

interface SeqRow {
  readonly code: string;
  readonly count: number;
}

function codeOf(status: number): string {
  return Object.entries(S).find(([, v]) => v === status)?.[0] ?? String(status);
}

/** Calls made one after another against a server whose i-th answer (from 0) is `serve(i)`; returns each call's code and the server's last i. */
function sequence(calls: number, serve: (i: number) => number, policy: PolicySpec, budget: RetryBudget | null): SeqRow[] {
  let i = -1;
  let now = 0;
  const rows: SeqRow[] = [];
  for (let c = 0; c < calls; c++) {
    let last = 0;
    const t = drive(
      policy,
      () => {
        i++;
        last = serve(i);
        return { status: last };
      },
      { budget, now },
    );
    now = t.endedAt + 1;
    rows.push({ code: codeOf(last), count: i });
  }
  return rows;
}

let unaryRows: SeqRow[] | undefined;
const unary = group<number, SeqRow>({
  title: 'grpc-go TestRetryUnary (ALREADY_EXISTS retryable, 4 attempts)',
  check: (row) => {
    unaryRows ??= sequence(
      7,
      (i) => ([0, 2, 5].includes(i) ? S.OK : [6, 8, 11].includes(i) ? S.INTERNAL : S.ALREADY_EXISTS),
      goPolicy([S.ALREADY_EXISTS]),
      null,
    );
    return unaryRows[row]!;
  },
  cases: [
    { id: 'call 1: OK at once (i = 0)', from: `${GO} TestRetryUnary`, input: 0, expected: { code: 'OK', count: 0 } },
    { id: 'call 2: one retry, OK (i = 2)', from: `${GO} TestRetryUnary`, input: 1, expected: { code: 'OK', count: 2 } },
    { id: 'call 3: two retries, OK (i = 5)', from: `${GO} TestRetryUnary`, input: 2, expected: { code: 'OK', count: 5 } },
    { id: 'call 4: INTERNAL is not retried (i = 6)', from: `${GO} TestRetryUnary`, input: 3, expected: { code: 'INTERNAL', count: 6 } },
    { id: 'call 5: one retry, INTERNAL (i = 8)', from: `${GO} TestRetryUnary`, input: 4, expected: { code: 'INTERNAL', count: 8 } },
    { id: 'call 6: two retries, INTERNAL (i = 11)', from: `${GO} TestRetryUnary`, input: 5, expected: { code: 'INTERNAL', count: 11 } },
    { id: 'call 7: four attempts, ALREADY_EXISTS (i = 15)', from: `${GO} TestRetryUnary`, input: 6, expected: { code: 'ALREADY_EXISTS', count: 15 } },
  ],
});

let throttleRows: SeqRow[] | undefined;
const goThrottle = group<number, SeqRow>({
  title: 'grpc-go TestRetryThrottling (maxTokens 10, tokenRatio 0.5)',
  check: (row) => {
    const ok = [0, 3, 6, 10, 11, 12, 13, 14, 16, 18];
    throttleRows ??= sequence(12, (i) => (ok.includes(i) ? S.OK : S.UNAVAILABLE), goPolicy([S.UNAVAILABLE]), throttle(10, 0.5));
    return throttleRows[row]!;
  },
  cases: [
    { id: 'call 1: OK, 10 tokens', from: `${GO} TestRetryThrottling`, input: 0, expected: { code: 'OK', count: 0 } },
    { id: 'call 2: two failures, OK', from: `${GO} TestRetryThrottling`, input: 1, expected: { code: 'OK', count: 3 } },
    { id: 'call 3: two failures, OK', from: `${GO} TestRetryThrottling`, input: 2, expected: { code: 'OK', count: 6 } },
    { id: 'call 4: retried once, then throttled at 5 tokens', from: `${GO} TestRetryThrottling`, input: 3, expected: { code: 'UNAVAILABLE', count: 8 } },
    { id: 'call 5: throttled at once, 4 tokens', from: `${GO} TestRetryThrottling`, input: 4, expected: { code: 'UNAVAILABLE', count: 9 } },
    { id: 'call 6: OK, 4.5 tokens', from: `${GO} TestRetryThrottling`, input: 5, expected: { code: 'OK', count: 10 } },
    { id: 'call 7: OK, 5 tokens', from: `${GO} TestRetryThrottling`, input: 6, expected: { code: 'OK', count: 11 } },
    { id: 'call 8: OK, 5.5 tokens', from: `${GO} TestRetryThrottling`, input: 7, expected: { code: 'OK', count: 12 } },
    { id: 'call 9: OK, 6 tokens', from: `${GO} TestRetryThrottling`, input: 8, expected: { code: 'OK', count: 13 } },
    { id: 'call 10: OK, 6.5 tokens', from: `${GO} TestRetryThrottling`, input: 9, expected: { code: 'OK', count: 14 } },
    { id: 'call 11: one failure retried, OK', from: `${GO} TestRetryThrottling`, input: 10, expected: { code: 'OK', count: 16 } },
    { id: 'call 12: throttled at once', from: `${GO} TestRetryThrottling`, input: 11, expected: { code: 'UNAVAILABLE', count: 17 } },
  ],
});

const streaming = group<RetryIn, RetryOut>({
  title: 'grpc-go TestRetryStreaming (the rows that are not about streams)',
  check: (i) => {
    const t = drive(i.policy, i.steps);
    return { calls: t.attempts, end: t.reason, delays: t.delays.map(() => 10) };
  },
  cases: [
    {
      id: 'non-retryable error code',
      from: `${GO} TestRetryStreaming "Non-retryable error code"`,
      input: { policy: goPolicy([S.UNAVAILABLE]), steps: [{ status: S.INTERNAL }] },
      expected: { calls: 1, end: 'not_retryable', delays: [] },
    },
    {
      id: 'one retry necessary',
      from: `${GO} TestRetryStreaming "One retry necessary"`,
      input: { policy: goPolicy([S.UNAVAILABLE]), steps: [{ status: S.UNAVAILABLE }, { status: 200 }] },
      expected: { calls: 2, end: 'return', delays: [10] },
      note: 'delays shown as the 10 ms of the policy (jitter ±20 %)',
    },
    {
      id: 'exceed max attempts (4)',
      from: `${GO} TestRetryStreaming "Exceed max attempts (4)"`,
      input: { policy: goPolicy([S.UNAVAILABLE]), steps: u(4) },
      expected: { calls: 4, end: 'max_attempts', delays: [10, 10, 10] },
    },
  ],
});

// --- cancellation (execute() on the test clock) ----------------------------------------------------

interface CancelIn {
  readonly first: 'fails' | 'hangs';
  readonly second?: 'hangs';
  readonly cancelAt: number;
}
const cancels = group<CancelIn, { readonly calls: number; readonly reason: string }>({
  title: 'the caller cancels',
  check: async (i) => {
    let calls = 0;
    const controller = new AbortController();
    const r = await runOnClock(
      async (ctx) => {
        calls++;
        if (calls === 1 && i.first === 'fails') return { status: S.UNAVAILABLE };
        return new Promise<never>((_res, rej) => ctx.signal.addEventListener('abort', () => rej(ctx.signal.reason), { once: true }));
      },
      { policy: { preset: 'grpc-2017', backoff: { kind: 'constant', delayMs: 50 }, budget: null }, signal: controller.signal },
      (clock) => {
        clock.setTimer(() => controller.abort(new Error('cancelled')), i.cancelAt);
      },
    );
    return { calls, reason: r.result?.reason ?? 'never settled' };
  },
  cases: [
    {
      id: 'a cancel during the backoff ends the call, no new attempt',
      from: `${RST} retry_cancelWhileBackoff`,
      input: { first: 'fails', cancelAt: 10 },
      expected: { calls: 1, reason: 'cancelled' },
    },
    {
      id: 'a cancel during the attempt ends the call',
      from: `${RST} cancel_closed`,
      input: { first: 'hangs', cancelAt: 10 },
      expected: { calls: 1, reason: 'cancelled' },
    },
    {
      id: 'a cancel during a retry ends the call',
      from: `${RST} retry_cancel_closed`,
      input: { first: 'fails', second: 'hangs', cancelAt: 100 },
      expected: { calls: 2, reason: 'cancelled' },
    },
  ],
});

// --- hedging (execute() on the test clock) ---------------------------------------------------------

interface HedgeIn {
  readonly delayMs: number;
  readonly maxHedges: number;
  readonly maxAttempts?: number;
  readonly script: readonly HedgeAttempt[];
  readonly cancelAt?: number;
  readonly throttle?: { readonly failuresBefore: number };
}
interface HedgeOut {
  readonly starts: readonly number[];
  readonly reason: string;
  readonly status: number | null;
}
const hedging = group<HedgeIn, HedgeOut>({
  title: 'A6 hedging',
  check: async (i) => {
    let budget: RetryBudget | null = null;
    if (i.throttle) {
      budget = throttle(4, 0.8);
      for (let k = 0; k < i.throttle.failuresBefore; k++) budget.observe(FAILURE, 0);
    }
    const r = await hedgeRun(
      {
        maxAttempts: i.maxAttempts ?? i.maxHedges + 1,
        deadlineMs: 100_000,
        budget: null,
        backoff: { kind: 'constant', delayMs: 10 },
        retryOn: { status: [S.UNAVAILABLE, S.DATA_LOSS], errors: [] },
        hedge: { delayMs: i.delayMs, maxHedges: i.maxHedges, maxExtraLoad: 1 },
      },
      i.script,
      { cancelAt: i.cancelAt, budget },
    );
    return { starts: r.starts, reason: r.reason, status: r.status };
  },
  cases: [
    {
      id: 'hedgingDelay 0.5 s: 1, 2, 3, 4 RPCs outstanding at 0, 500, 1000, 1500 ms',
      from: `${A6} Hedging Policy`,
      input: { delayMs: 500, maxHedges: 3, script: [{ at: 3000, status: 200 }, {}, {}, {}] },
      expected: { starts: [0, 500, 1000, 1500], reason: 'return', status: 200 },
    },
    {
      id: 'hedgingDelay 0: all attempts at once',
      from: `${A6} Hedging Policy ("issues four RPCs simultaneously")`,
      input: { delayMs: 0, maxHedges: 3, script: [{ at: 100, status: 200 }, {}, {}, {}] },
      expected: { starts: [0, 0, 0, 0], reason: 'return', status: 200 },
    },
    {
      id: 'the first OK response wins, the others are cancelled',
      from: `${RST} hedging_receiveHeaders`,
      input: { delayMs: 100, maxHedges: 2, script: [{}, { at: 150, status: 200 }, {}] },
      expected: { starts: [0, 100, 200], reason: 'return', status: 200 },
    },
    {
      id: 'a fatal status cancels the others and is returned',
      from: `${A6} Summary of Retry and Hedging Logic, 3.2`,
      input: { delayMs: 100, maxHedges: 2, script: [{}, { at: 50, status: S.INTERNAL }, {}] },
      expected: { starts: [0, 100], reason: 'not_retryable', status: S.INTERNAL },
    },
    {
      id: 'a non-fatal status sends the next hedge at once',
      from: `${A6} Summary of Retry and Hedging Logic, 2.2`,
      input: { delayMs: 1000, maxHedges: 2, script: [{ at: 1500, status: 200 }, { at: 100, status: S.UNAVAILABLE }, {}] },
      expected: { starts: [0, 1000, 1100], reason: 'return', status: 200 },
      status: 'differs',
      relent: { starts: [0, 1000], reason: 'return', status: 200 },
      why: 'a failure while another attempt is in flight stops further hedges ([docs/slow.md, Hedged requests](slow.md#hedged-requests))',
    },
    {
      id: 'when every hedge fails there is no retry',
      from: `${A6} Hedging Policy ("no additional retry attempts")`,
      input: {
        delayMs: 100,
        maxHedges: 1,
        maxAttempts: 3,
        script: [
          { at: 300, status: S.UNAVAILABLE },
          { at: 300, status: S.UNAVAILABLE },
          { at: 10, status: 200 },
        ],
      },
      expected: { starts: [0, 100], reason: 'max_attempts', status: S.UNAVAILABLE },
      status: 'differs',
      relent: { starts: [0, 100, 410], reason: 'return', status: 200 },
      why: 'the last attempt in flight is decided as ever, so maxAttempts left over may retry it ([docs/slow.md, Hedged requests](slow.md#hedged-requests))',
    },
    {
      id: "a don't-retry pushback on a hedge: no more hedges",
      from: `${RST} hedging_pushback_negative`,
      input: { delayMs: 100, maxHedges: 3, script: [{ at: 1000, status: 200 }, { at: 50, status: S.UNAVAILABLE, headers: pushback('-1') }, {}, {}] },
      expected: { starts: [0, 100, 200], reason: 'return', status: 200 },
      status: 'differs',
      relent: { starts: [0, 100], reason: 'return', status: 200 },
      why: 'a failure while another attempt is in flight stops further hedges ([docs/slow.md, Hedged requests](slow.md#hedged-requests))',
      note: 'grpc-java had sent hedge 3 before hedge 2 answered; relent stops at the first failure, so the pushback adds nothing',
    },
    {
      id: 'a pushback of n ms on a hedge: the next hedge goes n ms later',
      from: `${RST} hedging_pushback_positive`,
      input: { delayMs: 100, maxHedges: 3, script: [{ at: 50, status: S.UNAVAILABLE, headers: pushback('101') }, { at: 1000, status: 200 }, {}, {}] },
      expected: { starts: [0, 151, 251, 351], reason: 'return', status: 200 },
      note: 'the first attempt fails before any hedge went: relent retries it after exactly the pushback, then hedges resume every hedgingDelay (A6: "n + hedgingDelay")',
    },
    {
      id: 'a cancel cancels every hedge',
      from: `${RST} hedging_cancelled`,
      input: { delayMs: 100, maxHedges: 1, script: [{}, {}], cancelAt: 150 },
      expected: { starts: [0, 100], reason: 'cancelled', status: null },
    },
    {
      id: 'hedges are throttled: no hedge at or below the threshold',
      from: `${RST} hedging_throttledByOtherCall`,
      input: { delayMs: 100, maxHedges: 2, script: [{ at: 1000, status: 200 }, {}, {}], throttle: { failuresBefore: 2 } },
      expected: { starts: [0], reason: 'return', status: 200 },
    },
    {
      id: 'a hedge that fails with a non-fatal status: hedging goes on to maxAttempts',
      from: `${RST} hedging_maxAttempts`,
      input: { delayMs: 100, maxHedges: 4, script: [{ at: 2000, status: 200 }, { at: 50, status: S.UNAVAILABLE }, {}, {}, {}] },
      expected: { starts: [0, 100, 200, 300, 400], reason: 'return', status: 200 },
      status: 'differs',
      relent: { starts: [0, 100], reason: 'return', status: 200 },
      why: 'a failure while another attempt is in flight stops further hedges ([docs/slow.md, Hedged requests](slow.md#hedged-requests))',
    },
  ],
});

// --- documented presets ----------------------------------------------------------------------

const presetFacts = group<string, unknown>({
  title: 'what the grpc presets copy',
  check: (what) => {
    const p = presetPolicy('grpc');
    switch (what) {
      case 'example':
        return { maxAttempts: p.maxAttempts, backoff: p.backoff, budget: p.budget };
      case 'transparent':
        return drive('grpc', [
          { errorClass: 'connect_refused' },
          { errorClass: 'connect_refused' },
          { errorClass: 'connect_refused' },
          { errorClass: 'connect_refused' },
          { status: 200 },
        ]).attempts;
      default:
        throw new Error(what);
    }
  },
  cases: [
    {
      id: 'the A6 example policy and retryThrottling example',
      from: `${A6} Retry Policy Capabilities, Throttling Configuration`,
      input: 'example',
      expected: {
        maxAttempts: 4,
        backoff: { kind: 'proportional-jitter', baseMs: 100, capMs: 1000, multiplier: 2, jitter: 0.2 },
        budget: { kind: 'throttle', maxTokens: 10, tokenRatio: 0.1 },
      },
    },
    {
      id: 'an RPC that never left the client is retried without counting as an attempt',
      from: `${A6} Transparent Retries`,
      input: 'transparent',
      expected: 5,
      status: 'differs',
      relent: 4,
      why: 'every call counts against maxAttempts, one sent or not ([one attempt counter](#one-attempt-counter)); failures before sending are retried for any method',
    },
  ],
});

const notApplicable = group<never, never>({
  title: 'not applicable',
  check: () => {
    throw new Error('not run');
  },
  cases: [
    ...[
      'headersRead_cancel',
      'retry_headersRead_cancel',
      'headersRead_closed',
      'retry_headersRead_closed',
      'unretriableClosed_cancel',
      'retry_unretriableClosed_cancel',
    ].map((t) => ({
      id: t,
      from: `${RST} ${t}`,
      status: 'na' as const,
      why: 'commitment on response headers of a stream; a relent attempt ends with its response',
    })),
    ...[
      'operationsWhileDraining',
      'cancelWhileDraining',
      'cancelWhileRetryStart',
      'operationsAfterImmediateCommit',
      'isReady_whenDrained',
      'isReady_whileDraining',
      'messageAvailable',
      'closedWhileDraining',
      'commitAndCancelWhileDraining',
    ].map((t) => ({
      id: t,
      from: `${RST} ${t}`,
      status: 'na' as const,
      why: 'replaying buffered stream messages into a new substream',
    })),
    ...[
      'perRpcBufferLimitExceeded',
      'perRpcBufferLimitExceededDuringBackoff',
      'channelBufferLimitExceeded',
      'hedging_perRpcBufferLimitExceeded',
      'hedging_channelBufferLimitExceeded',
    ].map((t) => ({
      id: t,
      from: `${RST} ${t}`,
      status: 'na' as const,
      why: "gRPC's retry buffer limits; relent resends a replayable body or does not retry a stream",
    })),
    {
      id: 'updateHeaders (grpc-previous-rpc-attempts)',
      from: `${RST} updateHeaders`,
      status: 'na',
      why: "relent's clients send x-relent-attempt instead; its server reads grpc-previous-rpc-attempts",
    },
    ...[
      'transparentRetry_onlyOnceOnRefused',
      'transparentRetry_unlimitedTimesOnMiscarried',
      'normalRetry_thenNoTransparentRetry_butNormalRetry',
      'normalRetry_thenNoTransparentRetry_andNoMoreRetry',
      'noRetry_transparentRetry_earlyCommit',
      'droppedShouldNeverRetry',
      'hedging_transparentRetry',
      'hedging_transparentRetryNotAllowed',
    ].map((t) => ({
      id: t,
      from: `${RST} ${t}`,
      status: 'na' as const,
      why: 'gRPC transport states (REFUSED, MISCARRIED, DROPPED) that relent does not observe',
    })),
    {
      id: 'hedging_everythingDrained',
      from: `${RST} hedging_everythingDrained_oneHedgeReceivesNonFatal_oneHedgeReceivesFatalStatus`,
      status: 'na',
      why: 'message replay into hedges; the status rules are the A6 hedging cases above',
    },
    {
      id: 'hedging_throttledByHedgingStreams',
      from: `${RST} hedging_throttledByHedgingStreams`,
      status: 'na',
      why: 'hedges that fail count as failures at once; relent stops hedging at the first failure (A6 hedging cases above)',
    },
    {
      id: 'getRetryPolicies from service config JSON',
      from: 'core/src/test/java/io/grpc/internal/RetryPolicyTest.java getRetryPolicies',
      status: 'na',
      why: 'gRPC service config per method; relent takes one policy per call',
    },
    {
      id: 'ServerRetryThrottleData.Replacement',
      from: `${CORE} ServerRetryThrottleData.Replacement`,
      status: 'na',
      why: "a new throttle config inherits the old one's ratio; relent budgets are not replaced at runtime",
    },
    {
      id: 'ServerRetryThrottleMap.Replacement',
      from: `${CORE} ServerRetryThrottleMap.Replacement`,
      status: 'na',
      why: "a new throttle config inherits the old one's ratio; relent budgets are not replaced at runtime",
    },
    ...[
      'Multiple requests',
      'Multiple successive requests',
      'No retry after receiving',
      'Retry via ClientStream.Header()',
      'No retry after header',
      'No retry after context',
      'Replaying close send',
      'Overflowing buffer - no retry',
    ].map((t) => ({
      id: `TestRetryStreaming "${t}"`,
      from: `${GO} TestRetryStreaming`,
      status: 'na' as const,
      why: 'client and server streams; relent retries whole request/response calls',
    })),
    { id: 'TestRetryStats', from: `${GO} TestRetryStats`, status: 'na', why: "grpc-go's stats handler events" },
    {
      id: 'grpc-previous-rpc-attempts metadata',
      from: `${A6} Exposed Retry Metadata`,
      status: 'na',
      why: "relent's clients send x-relent-attempt (1-based) instead",
    },
  ],
});

export const GRPC: Source = {
  key: 'grpc',
  title: 'gRPC',
  upstream: [
    'grpc/proposal A6-client-retries.md',
    'grpc/grpc-java RetriableStreamTest.java, RetryPolicyTest.java',
    'grpc/grpc-go test/retry_test.go',
    'grpc/grpc test/core/client_channel/retry_throttle_test.cc',
  ],
  groups: [
    retryPolicy,
    validation,
    ratio,
    pushbacks,
    throttleUnit,
    throttledStreams,
    throttleSucceed,
    noBlocking,
    unary,
    goThrottle,
    streaming,
    cancels,
    hedging,
    presetFacts,
    notApplicable,
  ],
};
