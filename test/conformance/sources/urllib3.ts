// urllib3's own retry tests (test/test_retry.py) and the defaults of src/urllib3/util/retry.py,
// restated as data and answered by relent's operation machine and parseRetryAfter.
//
// Mapping: urllib3's Retry(total=N) allows N retries, relent's maxAttempts counts every call
// (N + 1). urllib3 keeps one counter per kind of failure (connect, read, status, other);
// relent keeps one, so a case binds the lowest counter that applies. `allowed_methods`
// says which methods are retried; relent's equivalent is the caller's `idempotent`
// declaration (true for a method in the list). Backoff: urllib3 waits 0 before the first
// retry and backoff_factor·2^(k−1) before retry k ≥ 2; relent's `exponential` kind with
// baseMs = backoff_factor·1000 waits exactly that for k ≥ 2 (and base before the first).

import { IDEMPOTENT_METHODS, POLICY_DEFAULTS, parseRetryAfter, type PolicySpec } from '../../../src/index.js';
import { drive, group, RANDOM_MAX, RANDOM_MIN, runOnClock, outcomeCode, type Source, type Step } from '../harness.js';

const T = 'test/test_retry.py';
const R = 'src/urllib3/util/retry.py';

const NO_WAIT = { kind: 'constant', delayMs: 0 } as const;

/** relent's policy for urllib3's Retry with this many retries and no backoff. */
function retries(n: number, extra: PolicySpec = {}): PolicySpec {
  return { maxAttempts: n + 1, deadlineMs: 2 ** 31 - 1, backoff: NO_WAIT, budget: null, ...extra };
}

// --- counters --------------------------------------------------------------------------

interface CountIn {
  readonly retries: number;
  readonly steps: readonly Step[];
  readonly method?: string;
}
interface CountOut {
  readonly calls: number;
  readonly end: string;
}

const connectTimeout: Step = { errorClass: 'connect_timeout' };
const readTimeout: Step = { errorClass: 'timeout' };
const tlsError: Step = { errorClass: 'tls' };
const ok: Step = { status: 200 };

const counters = group<CountIn, CountOut>({
  title: 'retry counters',
  check: (i) => {
    const t = drive(retries(i.retries, { retryOn: { status: [500, 400], errors: ['connect_timeout', 'timeout', 'tls'] } }), i.steps, {
      method: i.method ?? 'GET',
    });
    return { calls: t.attempts, end: t.reason };
  },
  cases: [
    {
      id: 'total beats a higher connect count',
      from: `${T} test_retry_both_specified`,
      input: { retries: 2, steps: [connectTimeout, connectTimeout, connectTimeout] },
      expected: { calls: 3, end: 'max_attempts' },
      note: 'connect=3, total=2: the lower counter (2 retries) binds',
    },
    {
      id: 'a lower connect count beats total',
      from: `${T} test_retry_higher_total_loses`,
      input: { retries: 2, steps: [connectTimeout, connectTimeout, connectTimeout] },
      expected: { calls: 3, end: 'max_attempts' },
    },
    {
      id: 'a lower read count beats total (GET)',
      from: `${T} test_retry_higher_total_loses_vs_read`,
      input: { retries: 2, steps: [readTimeout, readTimeout, readTimeout] },
      expected: { calls: 3, end: 'max_attempts' },
    },
    {
      id: 'total=None: the connect count binds connect errors',
      from: `${T} test_retry_total_none`,
      input: { retries: 2, steps: [connectTimeout, connectTimeout, connectTimeout] },
      expected: { calls: 3, end: 'max_attempts' },
    },
    {
      id: 'total=None: read errors are not limited by the connect count',
      from: `${T} test_retry_total_none`,
      input: { retries: 2, steps: [readTimeout, readTimeout, readTimeout, ok] },
      expected: { calls: 4, end: 'return' },
      status: 'differs',
      relent: { calls: 3, end: 'max_attempts' },
      why: 'relent keeps one count of calls of every kind ([one attempt counter](#one-attempt-counter))',
    },
    {
      id: 'connect=1: one retry, the second connect error gives up',
      from: `${T} test_retry_default`,
      input: { retries: 1, steps: [connectTimeout, connectTimeout] },
      expected: { calls: 2, end: 'max_attempts' },
    },
    {
      id: 'connect=1 does not limit other errors (total=10)',
      from: `${T} test_retry_other`,
      input: { retries: 10, steps: [tlsError, tlsError, ok] },
      expected: { calls: 3, end: 'return' },
    },
    {
      id: 'other=1: one retry of an unexpected error',
      from: `${T} test_retry_other`,
      input: { retries: 1, steps: [tlsError, tlsError] },
      expected: { calls: 2, end: 'max_attempts' },
    },
    {
      id: 'read=0: no second chance on a read timeout',
      from: `${T} test_retry_read_zero`,
      input: { retries: 0, steps: [readTimeout] },
      expected: { calls: 1, end: 'max_attempts' },
    },
    {
      id: 'status=2: two status retries, then it gives up',
      from: `${T} test_status_counter`,
      input: { retries: 2, steps: [{ status: 400 }, { status: 400 }, { status: 400 }] },
      expected: { calls: 3, end: 'max_attempts' },
      note: 'a policy that retries 400, as the test calls increment() for it',
    },
    {
      id: 'total=0: the first failure is final',
      from: `${T} test_disabled[0]`,
      input: { retries: 0, steps: [{ status: 500 }] },
      expected: { calls: 1, end: 'max_attempts' },
    },
  ],
});

// --- what giving up looks like ------------------------------------------------------------

interface GiveUpIn {
  readonly kind: 'status' | 'post-timeout';
}
const givingUp = group<GiveUpIn, { readonly calls: number; readonly outcome: string }>({
  title: 'giving up',
  check: async (i) => {
    let calls = 0;
    if (i.kind === 'status') {
      const r = await runOnClock(
        async () => {
          calls++;
          return { status: 400 };
        },
        { policy: retries(2, { retryOn: { status: [400] } }), method: 'GET' },
      );
      return { calls, outcome: r.result?.outcome.ok ? 'resolves with the last 400 response' : outcomeCode(r.result) };
    }
    const own = Object.assign(new Error('read timed out'), { errorClass: 'timeout' });
    const r = await runOnClock(
      async () => {
        calls++;
        throw own;
      },
      { policy: retries(3), method: 'POST' },
    );
    const error = r.result && !r.result.outcome.ok ? r.result.outcome.error : undefined;
    return { calls, outcome: error === own ? 'rejects with the read timeout itself' : outcomeCode(r.result) };
  },
  cases: [
    {
      id: 'status retries exhausted: MaxRetryError',
      from: `${T} test_status_counter`,
      input: { kind: 'status' },
      expected: { calls: 3, outcome: 'raises MaxRetryError (too many 400 error responses)' },
      status: 'differs',
      relent: { calls: 3, outcome: 'resolves with the last 400 response' },
      why: 'relent returns the last real answer when retries run out ([docs/http.md, How a call ends](http.md#how-a-call-ends))',
    },
    {
      id: 'a read timeout of a POST is not retried and re-raised',
      from: `${T} test_retry_method_not_allowed`,
      input: { kind: 'post-timeout' },
      expected: { calls: 1, outcome: 'rejects with the read timeout itself' },
      status: 'differs',
      relent: { calls: 1, outcome: 'ERR_UNKNOWN_OUTCOME' },
      why: 'a write whose outcome is unknown ends in check_state, never a resend ([README, Concepts: Observation](../README.md#concepts))',
    },
  ],
});

// --- backoff -----------------------------------------------------------------------------

interface BackoffIn {
  readonly factor: number;
  readonly maxS?: number;
  readonly jitterS?: number;
  readonly at: readonly number[];
}

/** relent's waits (ms) before retries 1..n for urllib3's backoff settings, at the given random extremes. */
function urllib3Waits(i: BackoffIn, random = RANDOM_MIN): number[] {
  const capMs = (i.maxS ?? 120) * 1000;
  const baseMs = i.factor * 1000;
  const backoff =
    i.jitterS === undefined
      ? ({ kind: 'exponential', baseMs, capMs } as const)
      : ({ kind: 'truncated-exponential', baseMs, capMs, fractionMs: i.jitterS * 1000 } as const);
  const n = Math.max(...i.at);
  const steps: Step[] = [...Array.from({ length: n }, () => ({ status: 500 })), { status: 200 }];
  return [...drive(retries(n, { backoff, deadlineMs: 2 ** 31 - 1 }), steps, { random }).delays];
}

const backoff = group<BackoffIn, readonly (readonly [number, number])[]>({
  title: 'backoff',
  // The wait before each retry `at`, as [shortest, longest] over the random range.
  check: (i) => {
    const lo = urllib3Waits(i, RANDOM_MIN);
    const hi = urllib3Waits(i, RANDOM_MAX);
    return i.at.map((k) => [lo[k - 1]!, hi[k - 1]!] as const);
  },
  cases: [
    {
      id: 'backoff_factor 0.2: no wait before the first retry',
      from: `${T} test_backoff`,
      input: { factor: 0.2, at: [1] },
      expected: [[0, 0]],
      status: 'differs',
      relent: [[200, 200]],
      why: 'every relent retry waits its backoff, the first included ([always jitter, never a tight loop](../README.md#1-always-jitter)); a `schedule` starting at 0 copies urllib3',
    },
    {
      id: 'backoff_factor 0.2: 0.4 s, 0.8 s, 1.6 s, then capped at 120 s',
      from: `${T} test_backoff`,
      input: { factor: 0.2, at: [2, 3, 4, 14] },
      expected: [
        [400, 400],
        [800, 800],
        [1600, 1600],
        [120_000, 120_000],
      ],
    },
    {
      id: 'backoff_max 1 s caps the waits',
      from: `${T} test_configurable_backoff_max`,
      input: { factor: 0.2, maxS: 1, at: [2, 3, 4, 5] },
      expected: [
        [400, 400],
        [800, 800],
        [1000, 1000],
        [1000, 1000],
      ],
    },
    {
      id: 'backoff_jitter 0.4 adds U[0, 0.4 s], within the cap',
      from: `${T} test_backoff_jitter`,
      input: { factor: 0.2, maxS: 1, jitterS: 0.4, at: [2, 3, 4, 5] },
      expected: [
        [400, 799],
        [800, 1000],
        [1000, 1000],
        [1000, 1000],
      ],
      note: "the test asserts 0.4 ≤ t ≤ 0.8 and 0.8 ≤ t ≤ 1; relent's truncated-exponential kind is base·2^n + U[0, jitter) capped, in whole ms",
    },
    {
      id: 'backoff_factor 0: no wait at all',
      from: `${T} test_zero_backoff`,
      input: { factor: 0, at: [1, 2] },
      expected: [
        [0, 0],
        [0, 0],
      ],
    },
  ],
});

// --- which failures are retried -------------------------------------------------------------

interface RetryIn {
  readonly status: number;
  readonly method: string;
  readonly forcelist: readonly (number | string)[];
  readonly allowed: readonly string[] | null;
}
const isRetry = group<RetryIn, boolean>({
  title: 'status_forcelist and allowed_methods',
  check: (i) => {
    const t = drive(retries(1, { retryOn: { status: i.forcelist, errors: [] }, retryAfter: { honor: false } }), [{ status: i.status }, ok], {
      method: i.method,
      idempotent: i.allowed === null ? true : i.allowed.includes(i.method),
    });
    return t.attempts === 2;
  },
  cases: [
    {
      id: 'forcelist 500-599: GET 200 is not retried',
      from: `${T} test_status_forcelist`,
      input: { status: 200, method: 'GET', forcelist: ['500-599'], allowed: ['GET'] },
      expected: false,
    },
    {
      id: 'forcelist 500-599: GET 400 is not retried',
      from: `${T} test_status_forcelist`,
      input: { status: 400, method: 'GET', forcelist: ['500-599'], allowed: ['GET'] },
      expected: false,
    },
    {
      id: 'forcelist 500-599: GET 500 is retried',
      from: `${T} test_status_forcelist`,
      input: { status: 500, method: 'GET', forcelist: ['500-599'], allowed: ['GET'] },
      expected: true,
    },
    {
      id: 'forcelist [418]: 400 is not retried',
      from: `${T} test_status_forcelist`,
      input: { status: 400, method: 'GET', forcelist: [418], allowed: ['GET'] },
      expected: false,
    },
    {
      id: 'forcelist [418]: 418 is retried',
      from: `${T} test_status_forcelist`,
      input: { status: 418, method: 'GET', forcelist: [418], allowed: ['GET'] },
      expected: true,
    },
    {
      id: 'forcelist ["418"]: a string status is not matched',
      from: `${T} test_status_forcelist`,
      input: { status: 418, method: 'GET', forcelist: ['418'], allowed: ['GET'] },
      expected: false,
      status: 'differs',
      relent: true,
      why: 'relent reads a status pattern written as a string too ("418", "5xx", "500-599", ">500") ([status patterns](#status-patterns))',
    },
    {
      id: 'allowed_methods=None: GET 500 is retried',
      from: `${T} test_allowed_methods_with_status_forcelist`,
      input: { status: 500, method: 'GET', forcelist: [500], allowed: null },
      expected: true,
    },
    {
      id: 'allowed_methods=None: POST 500 is retried',
      from: `${T} test_allowed_methods_with_status_forcelist`,
      input: { status: 500, method: 'POST', forcelist: [500], allowed: null },
      expected: true,
      note: "allowed_methods=None is relent's idempotent: true",
    },
    {
      id: 'allowed_methods=[POST]: GET 500 is not retried',
      from: `${T} test_allowed_methods_with_status_forcelist`,
      input: { status: 500, method: 'GET', forcelist: [500], allowed: ['POST'] },
      expected: false,
    },
    {
      id: 'allowed_methods=[POST]: POST 500 is retried',
      from: `${T} test_allowed_methods_with_status_forcelist`,
      input: { status: 500, method: 'POST', forcelist: [500], allowed: ['POST'] },
      expected: true,
    },
  ],
});

// --- Retry-After ------------------------------------------------------------------------

const parse = group<string, number | 'invalid'>({
  title: 'parse_retry_after',
  check: (v) => {
    const r = parseRetryAfter(v, { wallNowMs: Date.UTC(2019, 5, 3, 11) });
    return r.present && r.valid ? r.delayMs / 1000 : 'invalid';
  },
  cases: [
    { id: 'parse "-1" is invalid', from: `${T} test_parse_retry_after_invalid[-1]`, input: '-1', expected: 'invalid' },
    { id: 'parse "+1" is invalid', from: `${T} test_parse_retry_after_invalid[+1]`, input: '+1', expected: 'invalid' },
    { id: 'parse "1.0" is invalid', from: `${T} test_parse_retry_after_invalid[1.0]`, input: '1.0', expected: 'invalid' },
    { id: 'parse "²" is invalid', from: `${T} test_parse_retry_after_invalid[\\xb2]`, input: '\u00b2', expected: 'invalid' },
    { id: 'parse "0" is 0 s', from: `${T} test_parse_retry_after[0]`, input: '0', expected: 0 },
    { id: 'parse "1000" is 1000 s', from: `${T} test_parse_retry_after[1000]`, input: '1000', expected: 1000 },
    { id: 'parse "\\t42 " is 42 s', from: `${T} test_parse_retry_after[\\t42 ]`, input: '\t42 ', expected: 42 },
  ],
});

interface SleepIn {
  readonly header: string;
  readonly respect: boolean;
}
/** urllib3's respect_retry_after_header policy as relent writes it: the server's wait, exactly, up to 6 h. */
const URLLIB3_RA: PolicySpec = { retryOn: { status: [503], errors: [] }, retryAfter: { maxMs: 21_600_000, jitterRatio: 0, jitterMinMs: 0, jitterMaxMs: 0 } };
const sleep = group<SleepIn, number | null>({
  title: 'sleep on a 503 with Retry-After (now = 2019-06-03 11:00:00 UTC)',
  check: (i) => {
    const spec = retries(1, { ...URLLIB3_RA, retryAfter: { ...URLLIB3_RA.retryAfter, honor: i.respect } });
    const t = drive(
      spec,
      [
        { status: 503, headers: { 'retry-after': i.header }, elapsedMs: 0 },
        { ...ok, elapsedMs: 0 },
      ],
      { wall: Date.UTC(2019, 5, 3, 11) },
    );
    const d = t.delays[0] ?? 0;
    return d === 0 ? null : d / 1000;
  },
  cases: [
    {
      id: '"3600", respected: sleeps 3600 s',
      from: `${T} test_respect_retry_after_header_sleep`,
      input: { header: '3600', respect: true },
      expected: 3600,
      note: 'the same in the three time zones of the test: relent reads no local zone',
    },
    { id: '"3600", not respected: no sleep', from: `${T} test_respect_retry_after_header_sleep`, input: { header: '3600', respect: false }, expected: null },
    {
      id: '"Mon, 3 Jun 2019 12:00:00 UTC", respected: sleeps 3600 s',
      from: `${T} test_respect_retry_after_header_sleep`,
      input: { header: 'Mon, 3 Jun 2019 12:00:00 UTC', respect: true },
      expected: 3600,
      status: 'differs',
      relent: null,
      why: 'a one-digit day and "UTC" are not an HTTP-date: the value is invalid and the policy\'s backoff applies ([strict HTTP-date](#strict-http-date))',
    },
    {
      id: '"Mon, 3 Jun 2019 12:00:00 UTC", not respected: no sleep',
      from: `${T} test_respect_retry_after_header_sleep`,
      input: { header: 'Mon, 3 Jun 2019 12:00:00 UTC', respect: false },
      expected: null,
    },
    {
      id: '"Mon, 3 Jun 2019 11:00:00 UTC" (now), respected: no sleep',
      from: `${T} test_respect_retry_after_header_sleep`,
      input: { header: 'Mon, 3 Jun 2019 11:00:00 UTC', respect: true },
      expected: null,
      note: 'relent does not sleep either, but because the value is invalid (not an HTTP-date) and the backoff is 0',
    },
    {
      id: '"Mon, 3 Jun 2019 11:00:00 UTC" (now), not respected: no sleep',
      from: `${T} test_respect_retry_after_header_sleep`,
      input: { header: 'Mon, 3 Jun 2019 11:00:00 UTC', respect: false },
      expected: null,
    },
    {
      id: 'IMF-fixdate 11:30:12: sleeps 1812 s',
      from: `${T} test_respect_retry_after_header_sleep`,
      input: { header: 'Mon, 03 Jun 2019 11:30:12 GMT', respect: true },
      expected: 1812,
    },
    {
      id: 'RFC 850 date 11:30:12: sleeps 1812 s',
      from: `${T} test_respect_retry_after_header_sleep`,
      input: { header: 'Monday, 03-Jun-19 11:30:12 GMT', respect: true },
      expected: 1812,
    },
    {
      id: 'asctime date (no zone, UTC): sleeps 1812 s',
      from: `${T} test_respect_retry_after_header_sleep`,
      input: { header: 'Mon Jun  3 11:30:12 2019', respect: true },
      expected: 1812,
    },
  ],
});

interface CapIn {
  readonly header: string;
  readonly capS: number;
}
const cap = group<CapIn, { readonly retries: boolean; readonly sleepS?: number; readonly askedS?: number }>({
  title: 'a Retry-After over the cap',
  check: (i) => {
    const t = drive(retries(1, { ...URLLIB3_RA, retryAfter: { ...URLLIB3_RA.retryAfter, maxMs: i.capS * 1000 } }), [
      { status: 503, headers: { 'retry-after': i.header }, elapsedMs: 0 },
      ok,
    ]);
    return t.reason === 'return' ? { retries: true, sleepS: (t.delays[0] ?? 0) / 1000 } : { retries: false, askedS: (t.retryAfterMs ?? 0) / 1000 };
  },
  cases: [
    {
      id: 'over max_retry_wait_length: stops, reporting the asked wait',
      from: `${T} test_max_retry_wait_length_exceeded`,
      input: { header: '3700', capS: 3600 },
      expected: { retries: false, askedS: 3700 },
    },
    {
      id: 'over retry_after_max (6 h): the wait is clamped to it',
      from: `${R} Retry.parse_retry_after`,
      input: { header: '30000', capS: 21_600 },
      expected: { retries: true, sleepS: 21_600 },
      status: 'differs',
      relent: { retries: false, askedS: 30_000 },
      why: 'a server wait over the cap stops the operation, never a shorter wait ([README, Concepts: Retry-After](../README.md#concepts))',
    },
  ],
});

// --- defaults -----------------------------------------------------------------------------

interface DefaultRetryIn {
  readonly status: number;
  readonly retryAfter: boolean;
}
const defaultIsRetry = group<DefaultRetryIn, boolean>({
  title: 'default Retry(): RETRY_AFTER_STATUS_CODES without a status_forcelist',
  check: (i) => {
    const headers = i.retryAfter ? { 'retry-after': '1' } : undefined;
    const t = drive({ budget: null }, [{ status: i.status, headers }, ok]);
    return t.attempts === 2;
  },
  cases: [
    { id: '413 with Retry-After is retried', from: `${R} Retry.is_retry`, input: { status: 413, retryAfter: true }, expected: true },
    { id: '413 without Retry-After is not', from: `${R} Retry.is_retry`, input: { status: 413, retryAfter: false }, expected: false },
    { id: '429 with Retry-After is retried', from: `${R} Retry.is_retry`, input: { status: 429, retryAfter: true }, expected: true },
    {
      id: '429 without Retry-After is not retried',
      from: `${R} Retry.is_retry`,
      input: { status: 429, retryAfter: false },
      expected: false,
      status: 'differs',
      relent: true,
      why: 'relent retries 408, 429, 500, 502, 503, 504 by default, with or without a wait ([README, Defaults](../README.md#defaults))',
    },
    { id: '503 with Retry-After is retried', from: `${R} Retry.is_retry`, input: { status: 503, retryAfter: true }, expected: true },
    {
      id: '503 without Retry-After is not retried',
      from: `${R} Retry.is_retry`,
      input: { status: 503, retryAfter: false },
      expected: false,
      status: 'differs',
      relent: true,
      why: 'relent retries 408, 429, 500, 502, 503, 504 by default, with or without a wait ([README, Defaults](../README.md#defaults))',
    },
  ],
});

const defaults = group<string, unknown>({
  title: 'defaults',
  check: (what) => {
    switch (what) {
      case 'total':
        return POLICY_DEFAULTS.maxAttempts - 1;
      case 'backoff_factor':
        return POLICY_DEFAULTS.backoff;
      case 'backoff_max':
        return (POLICY_DEFAULTS.backoff as { capMs: number }).capMs / 1000;
      case 'retry_after_max':
        return POLICY_DEFAULTS.retryAfter.maxMs / 1000;
      case 'methods':
        return ['HEAD', 'GET', 'PUT', 'DELETE', 'OPTIONS', 'TRACE'].every((m) => IDEMPOTENT_METHODS.has(m)) && !IDEMPOTENT_METHODS.has('POST');
      case 'query':
        return IDEMPOTENT_METHODS.has('QUERY');
      default:
        throw new Error(what);
    }
  },
  cases: [
    {
      id: 'default total: 10 retries',
      from: `${T} test_retry_default`,
      input: 'total',
      expected: 10,
      status: 'differs',
      relent: 2,
      why: 'relent makes 3 calls in all by default ([README, Defaults](../README.md#defaults))',
    },
    {
      id: 'default backoff: none (factor 0)',
      from: `${R} Retry.__init__ backoff_factor`,
      input: 'backoff_factor',
      expected: { kind: 'constant', delayMs: 0 },
      status: 'differs',
      relent: { kind: 'full-jitter', baseMs: 100, capMs: 10_000, multiplier: 2 },
      why: 'relent jitters every retry by default ([README, 1. Always jitter](../README.md#1-always-jitter))',
    },
    {
      id: 'DEFAULT_BACKOFF_MAX: 120 s',
      from: `${R} Retry.DEFAULT_BACKOFF_MAX`,
      input: 'backoff_max',
      expected: 120,
      status: 'differs',
      relent: 10,
      why: 'relent caps its default backoff at 10 s ([README, Defaults](../README.md#defaults))',
    },
    {
      id: 'DEFAULT_RETRY_AFTER_MAX: 6 h',
      from: `${R} Retry.DEFAULT_RETRY_AFTER_MAX`,
      input: 'retry_after_max',
      expected: 21_600,
      status: 'differs',
      relent: 60,
      why: 'relent accepts server waits up to 60 s by default, and stops over it ([README, Defaults](../README.md#defaults))',
    },
    {
      id: 'DEFAULT_ALLOWED_METHODS: HEAD GET PUT DELETE OPTIONS TRACE, not POST',
      from: `${R} Retry.DEFAULT_ALLOWED_METHODS`,
      input: 'methods',
      expected: true,
    },
    {
      id: 'QUERY is not an allowed method',
      from: `${R} Retry.DEFAULT_ALLOWED_METHODS`,
      input: 'query',
      expected: false,
      status: 'differs',
      relent: true,
      why: 'QUERY (draft-ietf-httpbis-safe-method-w-body) is safe and idempotent ([README, Concepts: Idempotency](../README.md#concepts))',
    },
  ],
});

const invalid = group<number, string>({
  title: 'disabled retries',
  check: (total) => {
    try {
      return drive(retries(total), [{ status: 500 }]).attempts === 1 ? 'no retry' : 'retried';
    } catch (e) {
      return (e as { code?: string }).code ?? String(e);
    }
  },
  cases: [
    {
      id: 'total=-1: retries disabled',
      from: `${T} test_disabled[-1]`,
      input: -1,
      expected: 'no retry',
      status: 'differs',
      relent: 'ERR_INVALID_POLICY',
      why: 'maxAttempts counts calls and is at least 1; anything else is refused when the policy is made ([README, Defaults](../README.md#defaults))',
    },
  ],
});

const notApplicable = group<never, never>({
  title: 'not applicable',
  check: () => {
    throw new Error('not run');
  },
  cases: [
    { id: 'str(Retry) representation', from: `${T} test_string`, status: 'na', why: "the text form of urllib3's Retry object" },
    {
      id: 'raise_on_redirect follows total',
      from: `${T} test_retry_default`,
      status: 'na',
      why: 'relent follows redirects inside an attempt (maxRedirections); a redirect is not a retry',
    },
    {
      id: 'backoff resets after a redirect',
      from: `${T} test_backoff_reset_after_redirect`,
      status: 'na',
      why: 'relent follows redirects inside an attempt; its backoff never sees them',
    },
    { id: 'sleep() runs', from: `${T} test_sleep`, status: 'na', why: "a coverage test of urllib3's own sleep call" },
    {
      id: 'is_exhausted() of Retry(0), Retry(-1)',
      from: `${T} test_exhausted`,
      status: 'na',
      why: "urllib3's internal counter (negative means exhausted); relent counts calls",
    },
    { id: 'MaxRetryError messages', from: `${T} test_error_message`, status: 'na', why: "urllib3's error texts; relent reports stable codes (ERR_*)" },
    {
      id: 'RequestHistory of increments',
      from: `${T} test_history`,
      status: 'na',
      why: "urllib3's history tuple, with a method per entry; relent emits one event per attempt of one operation",
    },
    {
      id: 'remove_headers_on_redirect default',
      from: `${T} test_retry_default_remove_headers_on_redirect`,
      status: 'na',
      why: 'header stripping on redirects belongs to the HTTP client, not the retry rules',
    },
    {
      id: 'remove_headers_on_redirect set',
      from: `${T} test_retry_set_remove_headers_on_redirect`,
      status: 'na',
      why: 'header stripping on redirects belongs to the HTTP client, not the retry rules',
    },
    {
      id: 'respect_retry_after_header survives new()',
      from: `${T} test_respect_retry_after_header_propagated`,
      status: 'na',
      why: "a copy of urllib3's Retry object; relent policies are frozen values",
    },
  ],
});

export const URLLIB3: Source = {
  key: 'urllib3',
  title: 'urllib3',
  upstream: ['urllib3/urllib3 test/test_retry.py', 'urllib3/urllib3 src/urllib3/util/retry.py'],
  groups: [counters, givingUp, backoff, isRetry, parse, sleep, cap, defaultIsRetry, defaults, invalid, notApplicable],
};
