// cockatiel's tests (src/RetryPolicy.test.ts, backoff/*.test.ts, breaker/*.test.ts,
// CircuitBreakerPolicy.test.ts, BulkheadPolicy.test.ts, TimeoutPolicy.test.ts at 4.0.0),
// answered by relent's run()/execute() on the test clock, its backoff kinds, createCircuitBreaker
// and createBulkhead.
//
// Mapping: cockatiel's maxAttempts counts retries (relent's maxAttempts = it + 1);
// handleType/handleWhenResult become classifyError/classifyValue; a ConsecutiveBreaker(n)
// becomes a breaker with failureRatio 1 and minimumThroughput n; halfOpenAfter is openMs.
// cockatiel's stubs are synchronous functions, and so are the attempts here.

import { getEventListeners } from 'node:events';
import { createBulkhead, createCircuitBreaker, type BackoffSpec, type CircuitBreaker, type PolicySpec, type RunOptions } from '../../../src/index.js';
import { createSeededRandom, createTestClock, type TestClock } from '../../../src/testing/index.js';
import { after, drive, group, runOnClock, type Source, type Step } from '../harness.js';

const RP = 'src/RetryPolicy.test.ts';
const BO = 'src/backoff';
const BR = 'src/breaker';
const CB = 'src/CircuitBreakerPolicy.test.ts';
const BH = 'src/BulkheadPolicy.test.ts';
const TO = 'src/TimeoutPolicy.test.ts';

class MyErrorA extends Error {
  override name = 'MyErrorA';
}
class MyErrorB extends Error {
  override name = 'MyErrorB';
}

const NO_WAIT: BackoffSpec = { kind: 'constant', delayMs: 0 };
/** cockatiel's retry(handle, { maxAttempts: n }): n retries, no budget, no deadline to speak of. */
const retry = (n: number, extra: PolicySpec = {}): PolicySpec => ({ maxAttempts: n + 1, deadlineMs: 2 ** 31 - 1, backoff: NO_WAIT, budget: null, ...extra });
/** handleType(MyErrorA): MyErrorA is retried, anything else is final. */
const handleA: Pick<RunOptions<unknown>, 'classifyError'> = { classifyError: (e) => ({ errorClass: e instanceof MyErrorA ? 'error' : 'protocol' }) };
const ONLY_ERROR: PolicySpec = { retryOn: { status: [503], errors: ['error'] } };

function failure(r: {
  readonly result?: { readonly outcome: { ok: boolean; error?: unknown; value?: unknown } } | undefined;
  readonly rejection?: unknown;
}): string {
  if (r.rejection !== undefined) return `execute() rejects: ${String(r.rejection)}`;
  const o = r.result?.outcome;
  if (o === undefined) return 'never settled';
  if (o.ok) return `returns ${JSON.stringify(o.value)}`;
  const e = o.error as { name?: string; code?: string };
  return e.code !== undefined ? e.code : `rejects ${e.name ?? String(e)}`;
}

// --- RetryPolicy ------------------------------------------------------------------------

const retryPolicy = group<string, unknown>({
  title: 'RetryPolicy',
  check: async (what) => {
    let calls = 0;
    switch (what) {
      case 'plain value': {
        const r = await runOnClock(() => 42, { policy: retry(1) });
        return failure(r);
      }
      case 'delay 50':
      case 'sequence': {
        const delays = what === 'delay 50' ? [50] : [10, 20, 20];
        const r = await runOnClock(
          () => {
            calls++;
            throw new MyErrorA();
          },
          { policy: retry(delays.length, { backoff: { kind: 'schedule', delaysMs: delays } }) },
        );
        const waits = r.events.filter((e) => e.type === 'attempt' && e.decision === 'retry').map((e) => (e as { delayMs: number }).delayMs);
        return { delays: waits, calls, end: failure(r) };
      }
      case 'all errors': {
        const r = await runOnClock(
          () => {
            if (++calls === 1) throw new MyErrorA();
            return 'ok';
          },
          { policy: retry(3) },
        );
        return { calls, end: failure(r) };
      }
      case 'error types': {
        const r = await runOnClock(
          () => {
            throw ++calls === 1 ? new MyErrorA() : new MyErrorB();
          },
          { policy: retry(5, ONLY_ERROR), ...handleA },
        );
        return { calls, end: failure(r) };
      }
      case 'returns': {
        const r = await runOnClock(() => ++calls, { policy: retry(5), classifyValue: (v: number) => ({ status: v < 2 ? 503 : 200 }) });
        return { calls, end: failure(r) };
      }
      case 'exponential': {
        const r = await runOnClock(
          () => {
            calls++;
            return 1;
          },
          { policy: retry(2, { backoff: { kind: 'exponential', baseMs: 128, capMs: 30_000 } }), classifyValue: () => ({ status: 503 }) },
        );
        return { calls, end: failure(r) };
      }
      case 'bubble returns': {
        const r = await runOnClock(
          () => {
            calls++;
            return 1;
          },
          { policy: retry(5), classifyValue: (v: number) => ({ status: v < 2 ? 503 : 200 }) },
        );
        return { calls, end: failure(r) };
      }
      case 'bubble errors': {
        const r = await runOnClock(
          () => {
            calls++;
            throw new MyErrorB();
          },
          { policy: retry(5) },
        );
        return { calls, end: failure(r) };
      }
      case 'cancel': {
        const parent = new AbortController();
        const err = new MyErrorA();
        let before: boolean | null = null;
        let abortedInside: boolean | null = null;
        const r = await runOnClock(
          (ctx) => {
            calls++;
            before = ctx.signal.aborted;
            parent.abort();
            abortedInside = ctx.signal.aborted;
            throw err;
          },
          { policy: retry(2), signal: parent.signal },
        );
        const o = r.result?.outcome;
        return { before, abortedInside, calls, end: o && !o.ok && o.error === err ? "rejects with the attempt's error" : failure(r) };
      }
      case 'give up': {
        const r = await runOnClock(
          () => {
            throw new MyErrorA();
          },
          { policy: retry(5), ...handleA },
        );
        const results = r.events.filter((e) => e.type === 'result');
        return { giveUps: results.length, reason: results[0]?.reason, end: failure(r) };
      }
      case 'onRetry attempts': {
        const r = await runOnClock(
          () => {
            throw new MyErrorA();
          },
          { policy: retry(3) },
        );
        return r.events.filter((e) => e.type === 'attempt' && e.decision === 'retry').map((e) => (e as { attempt: number }).attempt);
      }
      default:
        throw new Error(what);
    }
  },
  cases: [
    {
      id: 'execute(() => 42) returns the value',
      from: `${RP} "types return data correctly in all cases"`,
      input: 'plain value',
      expected: 'returns 42',
    },
    {
      id: 'the retry delay of an IterableBackoff([50])',
      from: `${RP} "sets the retry delay"`,
      input: 'delay 50',
      expected: { delays: [50], calls: 2, end: 'rejects MyErrorA' },
    },
    {
      id: 'the retry sequence of an IterableBackoff([10, 20, 20])',
      from: `${RP} "sets the retry sequence"`,
      input: 'sequence',
      expected: { delays: [10, 20, 20], calls: 4, end: 'rejects MyErrorA' },
    },
    {
      id: 'handleAll retries a thrown error, then returns "ok"',
      from: `${RP} "retries all errors"`,
      input: 'all errors',
      expected: { calls: 2, end: 'returns "ok"' },
    },
    { id: 'handleType(A): B is not retried', from: `${RP} "filters error types"`, input: 'error types', expected: { calls: 2, end: 'rejects MyErrorB' } },
    {
      id: 'handleWhenResult(r < 2): 1 is retried, 2 is returned',
      from: `${RP} "filters returns"`,
      input: 'returns',
      expected: { calls: 2, end: 'returns 2' },
    },
    {
      id: 'exponential backoff, maxAttempts 2: three calls, the last value',
      from: `${RP} "permits specifying exponential backoffs"`,
      input: 'exponential',
      expected: { calls: 3, end: 'returns 1' },
    },
    {
      id: 'returns bubble up when attempts are exceeded',
      from: `${RP} "bubbles returns when retry attempts exceeded"`,
      input: 'bubble returns',
      expected: { calls: 6, end: 'returns 1' },
    },
    {
      id: 'errors bubble up when attempts are exceeded',
      from: `${RP} "bubbles errors when retry attempts exceeded"`,
      input: 'bubble errors',
      expected: { calls: 6, end: 'rejects MyErrorB' },
    },
    {
      id: 'a cancel during the attempt stops retries',
      from: `${RP} "stops retries if cancellation is requested"`,
      input: 'cancel',
      expected: { before: false, abortedInside: true, calls: 1, end: "rejects with the attempt's error" },
      status: 'differs',
      relent: { before: false, abortedInside: true, calls: 1, end: 'ERR_CANCELLED' },
      why: "a cancelled operation rejects with ERR_CANCELLED (its cause is the signal's reason) ([docs/http.md, How a call ends](http.md#how-a-call-ends))",
    },
    {
      id: 'onGiveUp fires once with the error',
      from: `${RP} "fires onGiveUp"`,
      input: 'give up',
      expected: { giveUps: 1, reason: 'max_attempts', end: 'rejects MyErrorA' },
      note: "relent's result event is the give-up",
    },
    { id: 'onRetry gets attempts 1, 2, 3', from: `${RP} "provides the attempt to the onRetry callback"`, input: 'onRetry attempts', expected: [1, 2, 3] },
  ],
});

// --- backoff -------------------------------------------------------------------------------

/** relent's waits before retries 1..n under a backoff spec. */
function waits(backoff: BackoffSpec, n: number, random = createSeededRandom('cockatiel')): number[] {
  const steps: Step[] = [...Array.from({ length: n }, () => ({ status: 503 })), { status: 200 }];
  return [...drive(retry(n, { backoff, deadlineMs: 2 ** 31 - 1 }), steps, { random }).delays];
}

const backoffs = group<{ readonly backoff: BackoffSpec; readonly n: number }, readonly number[]>({
  title: 'backoffs',
  check: (i) => waits(i.backoff, i.n),
  cases: [
    {
      id: 'ConstantBackoff(42)',
      from: `${BO}/ConstantBackoff.test.ts "returns its duration"`,
      input: { backoff: { kind: 'constant', delayMs: 42 }, n: 3 },
      expected: [42, 42, 42],
    },
    {
      id: 'IterableBackoff([3, 6, 9]) repeats its last',
      from: `${BO}/IterableBackoff.test.ts "works"`,
      input: { backoff: { kind: 'schedule', delaysMs: [3, 6, 9] }, n: 4 },
      expected: [3, 6, 9, 9],
    },
    {
      id: 'ExponentialBackoff without jitter: 128 ms doubling to 30 s',
      from: `${BO}/ExponentialBackoff.test.ts "works"`,
      input: { backoff: { kind: 'exponential', baseMs: 128, capMs: 30_000 }, n: 11 },
      expected: [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 30000, 30000, 30000],
    },
  ],
});

type Gen = 'exponential' | 'full-jitter' | 'equal-jitter' | 'decorrelated-jitter';
const generators = group<Gen, boolean>({
  title: 'exponential generators are sane (0 ≤ delay ≤ min(30 s, 128 ms·2^k), k = 1…99, 10 runs)',
  check: (kind) => {
    for (let run = 0; run < 10; run++) {
      const backoff = (
        kind === 'decorrelated-jitter' ? { kind, baseMs: 128, capMs: 30_000 } : { kind, baseMs: 128, capMs: 30_000, multiplier: 2 }
      ) as BackoffSpec;
      const ds = waits(backoff, 99, createSeededRandom(`gen-${run}`));
      if (!ds.every((d, k) => d >= 0 && d <= Math.min(30_000, 128 * 2 ** (k + 1)))) return false;
    }
    return true;
  },
  cases: [
    { id: 'noJitterGenerator is sane', from: `${BO}/ExponentialBackoffGenerators.test.ts "noJitterGenerator is sane"`, input: 'exponential', expected: true },
    {
      id: 'fullJitterGenerator is sane',
      from: `${BO}/ExponentialBackoffGenerators.test.ts "fullJitterGenerator is sane"`,
      input: 'full-jitter',
      expected: true,
    },
    {
      id: 'halfJitterGenerator is sane',
      from: `${BO}/ExponentialBackoffGenerators.test.ts "halfJitterGenerator is sane"`,
      input: 'equal-jitter',
      expected: true,
    },
    {
      id: 'decorrelatedJitterGenerator is sane',
      from: `${BO}/ExponentialBackoffGenerators.test.ts "decorrelatedJitterGenerator is sane"`,
      input: 'decorrelated-jitter',
      expected: true,
      status: 'differs',
      relent: false,
      why: "relent's decorrelated jitter is Brooker's min(cap, U[base, 3·previous)), which may pass 128·2^k early; cockatiel's is Polly's DecorrelatedJitterBackoffV2 ([backoff kinds](#backoff-kinds))",
    },
  ],
});

const issue86 = group<null, boolean>({
  title: 'decorrelated jitter over many attempts',
  check: () => waits({ kind: 'decorrelated-jitter', baseMs: 45_000, capMs: 900_000 }, 2999).every((d) => Number.isFinite(d) && d >= 0),
  cases: [
    {
      id: '3000 attempts: never NaN, never negative (issue #86)',
      from: `${BO}/ExponentialBackoffGenerators.test.ts "fixes issue #86"`,
      input: null,
      expected: true,
    },
  ],
});

// --- breakers (the pure state machine) -----------------------------------------------------------

type BOp = 'F' | 'S' | 'wait' | 'snapshot';
interface BreakerIn {
  readonly spec: { readonly failureRatio?: number; readonly minimumThroughput?: number; readonly openMs?: number };
  readonly ops: readonly BOp[];
}
/** After each failure: whether the circuit is open. 'wait' lets openMs pass; 'snapshot' restores the breaker from toJSON(). */
const breakerOps = group<BreakerIn, readonly boolean[]>({
  title: 'breakers',
  check: (i) => {
    const spec = { windowMs: 600_000, openMs: 1000, ...i.spec };
    let b: CircuitBreaker = createCircuitBreaker(spec);
    let now = 0;
    const out: boolean[] = [];
    for (const op of i.ops) {
      now += 1;
      if (op === 'wait') now += spec.openMs;
      else if (op === 'snapshot') b = createCircuitBreaker(spec, { initialState: JSON.parse(JSON.stringify(b)) });
      else {
        if (b.tryPass(now)) b.record(op === 'F' ? 'failure' : 'success', now);
        if (op === 'F') out.push(b.state(now) === 'open');
      }
    }
    return out;
  },
  cases: [
    {
      id: 'ConsecutiveBreaker(3) opens on the third failure',
      from: `${BR}/ConsecutiveBreaker.test.ts "works"`,
      input: { spec: { failureRatio: 1, minimumThroughput: 3 }, ops: ['F', 'F', 'F', 'F'] },
      expected: [false, false, true, true],
    },
    {
      id: 'ConsecutiveBreaker(3): a success resets the count',
      from: `${BR}/ConsecutiveBreaker.test.ts "works"`,
      input: { spec: { failureRatio: 1, minimumThroughput: 3 }, ops: ['F', 'F', 'S', 'F', 'F', 'F'] },
      expected: [false, false, false, false, true],
      status: 'differs',
      relent: [false, false, false, false, false],
      why: "relent's breaker opens on a failure ratio over a time window, not on consecutive failures ([docs/protection-and-telemetry.md, Circuit breaker](protection-and-telemetry.md#circuit-breaker-createcircuitbreaker-relent))",
    },
    {
      id: 'ConsecutiveBreaker serializes and deserializes',
      from: `${BR}/ConsecutiveBreaker.test.ts "serializes and deserializes"`,
      input: { spec: { failureRatio: 1, minimumThroughput: 3 }, ops: ['F', 'F', 'snapshot', 'F'] },
      expected: [false, false, true],
    },
    {
      id: 'CountBreaker: no open below the minimum number of calls (49 of 50)',
      from: `${BR}/CountBreaker.test.ts "does not open as long as the minimum number of calls has not been reached"`,
      input: { spec: { failureRatio: 0.5, minimumThroughput: 50 }, ops: Array.from({ length: 49 }, () => 'F' as const) },
      expected: Array.from({ length: 49 }, () => false),
    },
    {
      id: 'CountBreaker: exactly 50 % failures does not open',
      from: `${BR}/CountBreaker.test.ts "does not open when the minimum number of calls has been reached but the threshold has not been surpassed"`,
      input: {
        spec: { failureRatio: 0.5, minimumThroughput: 50 },
        ops: [...Array.from({ length: 25 }, () => 'S' as const), ...Array.from({ length: 25 }, () => 'F' as const)],
      },
      expected: Array.from({ length: 25 }, () => false),
      status: 'differs',
      relent: [...Array.from({ length: 24 }, () => false), true],
      why: "relent opens when the failures' share reaches failureRatio (≥), as Polly's FailureRatio ([docs/protection-and-telemetry.md, Circuit breaker](protection-and-telemetry.md#circuit-breaker-createcircuitbreaker-relent))",
    },
    {
      id: 'CountBreaker: opens once the threshold is surpassed (26 of 50)',
      from: `${BR}/CountBreaker.test.ts "opens when the minimum number of calls has been reached and threshold has been surpassed"`,
      input: {
        spec: { failureRatio: 0.5, minimumThroughput: 50 },
        ops: [...Array.from({ length: 24 }, () => 'S' as const), ...Array.from({ length: 26 }, () => 'F' as const)],
      },
      expected: [...Array.from({ length: 25 }, () => false), true],
    },
    {
      id: 'CountBreaker resets when recovering from half-open',
      from: `${BR}/CountBreaker.test.ts "resets when recoving from a half-open"`,
      input: { spec: { failureRatio: 0.5, minimumThroughput: 50 }, ops: [...Array.from({ length: 100 }, () => 'F' as const), 'wait', 'S', 'F'] },
      expected: [...Array.from({ length: 49 }, () => false), ...Array.from({ length: 51 }, () => true), false],
    },
    {
      id: 'SamplingBreaker resets when recovering from half-open',
      from: `${BR}/SamplingBreaker.test.ts "resets when recoving from a half-open"`,
      input: { spec: { failureRatio: 0.5, minimumThroughput: 10 }, ops: [...Array.from({ length: 10 }, () => 'F' as const), 'wait', 'S', 'F'] },
      expected: [...Array.from({ length: 9 }, () => false), true, false],
    },
  ],
});

const breakerValidation = group<{ readonly failureRatio?: number; readonly minimumThroughput?: number }, 'valid' | 'invalid'>({
  title: 'breaker options',
  check: (spec) => {
    try {
      createCircuitBreaker(spec);
      return 'valid';
    } catch {
      return 'invalid';
    }
  },
  cases: [
    ...(['CountBreaker', 'SamplingBreaker'] as const).flatMap((who) => [
      {
        id: `${who} threshold -1 is refused`,
        from: `${BR}/${who}.test.ts "rejects if threshold${who === 'CountBreaker' ? ' is' : ''} out of range"`,
        input: { failureRatio: -1 },
        expected: 'invalid' as const,
      },
      {
        id: `${who} threshold 0 is refused`,
        from: `${BR}/${who}.test.ts "rejects if threshold${who === 'CountBreaker' ? ' is' : ''} out of range"`,
        input: { failureRatio: 0 },
        expected: 'invalid' as const,
      },
      {
        id: `${who} threshold 1 is refused`,
        from: `${BR}/${who}.test.ts "rejects if threshold${who === 'CountBreaker' ? ' is' : ''} out of range"`,
        input: { failureRatio: 1 },
        expected: 'invalid' as const,
        status: 'differs' as const,
        relent: 'valid' as const,
        why: 'failureRatio is in (0, 1]: 1 opens only when every call in the window failed ([docs/protection-and-telemetry.md, Circuit breaker](protection-and-telemetry.md#circuit-breaker-createcircuitbreaker-relent))',
      },
      {
        id: `${who} threshold 10 is refused`,
        from: `${BR}/${who}.test.ts "rejects if threshold${who === 'CountBreaker' ? ' is' : ''} out of range"`,
        input: { failureRatio: 10 },
        expected: 'invalid' as const,
      },
    ]),
    {
      id: 'CountBreaker minimumNumberOfCalls -1 is refused',
      from: `${BR}/CountBreaker.test.ts "rejects if minimumNumberOfCalls is invalid"`,
      input: { minimumThroughput: -1 },
      expected: 'invalid',
    },
    {
      id: 'CountBreaker minimumNumberOfCalls 0 is refused',
      from: `${BR}/CountBreaker.test.ts "rejects if minimumNumberOfCalls is invalid"`,
      input: { minimumThroughput: 0 },
      expected: 'invalid',
    },
    {
      id: 'CountBreaker minimumNumberOfCalls 0.5 is refused',
      from: `${BR}/CountBreaker.test.ts "rejects if minimumNumberOfCalls is invalid"`,
      input: { minimumThroughput: 0.5 },
      expected: 'invalid',
    },
  ],
});

// --- CircuitBreakerPolicy (run() with a breaker, on one test clock) --------------------------------

interface Scene {
  readonly clock: TestClock;
  readonly breaker: CircuitBreaker;
  call(fn: () => Promise<unknown>, signal?: AbortSignal): Promise<string>;
}

/** cockatiel's circuitBreaker(handleType(MyException), { halfOpenAfter: 1000, breaker: new ConsecutiveBreaker(2) }) on relent. */
function scene(): Scene {
  const clock = createTestClock();
  const breaker = createCircuitBreaker({ failureRatio: 1, minimumThroughput: 2, openMs: 1000, windowMs: 600_000 });
  return {
    clock,
    breaker,
    async call(fn, signal) {
      const r = await runOnClock(() => fn(), { policy: retry(0), breaker, signal }, undefined, clock);
      return failure(r);
    },
  };
}
const fail = async (): Promise<never> => {
  throw new MyErrorA();
};
const ok = async (): Promise<number> => 42;

const circuit = group<string, unknown>({
  title: 'CircuitBreakerPolicy (ConsecutiveBreaker(2), halfOpenAfter 1000 ms)',
  check: async (what) => {
    const s = scene();
    const state = (): string => s.breaker.state(s.clock.wallNow());
    const open = async (): Promise<void> => {
      await s.call(fail);
      await s.call(fail);
    };
    switch (what) {
      case 'closed':
        return s.call(ok);
      case 'opens': {
        let calls = 0;
        const f = async (): Promise<never> => {
          calls++;
          throw new MyErrorA();
        };
        const seen = [await s.call(f), state(), await s.call(f), state(), await s.call(f)];
        return { seen, calls };
      }
      case 'closes': {
        await open();
        s.clock.advance(1000);
        return { result: await s.call(ok), state: state() };
      }
      case 'backoff factory': {
        await open();
        s.clock.advance(1000);
        await s.call(fail);
        s.clock.advance(1000);
        return s.call(ok);
      }
      case 'dedupe': {
        await open();
        s.clock.advance(1000);
        const a = s.call(() => after(s.clock, 10, 1));
        const b = s.call(async () => 2);
        s.clock.advance(10);
        return [await a, await b];
      }
      case 'sampling': {
        await open();
        s.clock.advance(1000);
        await s.call(fail);
        return state();
      }
      case 'reopens': {
        await open();
        s.clock.advance(1000);
        await s.call(fail);
        return state();
      }
      case 'stops deduped': {
        await open();
        s.clock.advance(1000);
        let bRan = false;
        const a = s.call(async () => {
          await after(s.clock, 10, 0);
          throw new MyErrorA();
        });
        const b = s.call(async () => {
          bRan = true;
          return 2;
        });
        s.clock.advance(10);
        return { a: await a, b: await b, bRan };
      }
      case 'aborted while half-open': {
        await open();
        s.clock.advance(1000);
        const trial = s.call(() => after(s.clock, 10, 42));
        const controller = new AbortController();
        controller.abort();
        const queued = await s.call(async () => 'called', controller.signal);
        s.clock.advance(10);
        await trial;
        return { queued, state: state() };
      }
      case 'signal while half-open': {
        await open();
        s.clock.advance(1000);
        const trial = s.call(() => after(s.clock, 10, 42));
        const controller = new AbortController();
        let sawAbort: boolean | null = null;
        const second = s.call(async () => {
          controller.abort();
          sawAbort = true;
          return 'result';
        }, controller.signal);
        s.clock.advance(10);
        await trial;
        await second;
        return { secondRan: sawAbort !== null };
      }
      default:
        throw new Error(what);
    }
  },
  cases: [
    { id: 'calls pass while closed', from: `${CB} "allows calls when open"`, input: 'closed', expected: 'returns 42' },
    {
      id: 'opens after two failing calls; then fails fast without calling',
      from: `${CB} "opens after failing calls"`,
      input: 'opens',
      expected: { seen: ['rejects MyErrorA', 'closed', 'rejects MyErrorA', 'open', 'ERR_CIRCUIT_OPEN'], calls: 2 },
    },
    {
      id: 'closes when the half-open trial succeeds',
      from: `${CB} "closes if the half open test succeeds"`,
      input: 'closes',
      expected: { result: 'returns 42', state: 'closed' },
    },
    {
      id: 'halfOpenAfter as a backoff: the second open period is 2000 ms',
      from: `${CB} "uses the given backof factory to decide whether to enter the half open state"`,
      input: 'backoff factory',
      expected: 'ERR_CIRCUIT_OPEN',
      status: 'differs',
      relent: 'returns 42',
      why: 'the open period is one fixed openMs ([docs/protection-and-telemetry.md, Circuit breaker](protection-and-telemetry.md#circuit-breaker-createcircuitbreaker-relent))',
    },
    {
      id: 'half-open: a second call waits for the trial, then runs',
      from: `${CB} "dedupes half-open tests"`,
      input: 'dedupe',
      expected: ['returns 1', 'returns 2'],
      status: 'differs',
      relent: ['returns 1', 'ERR_CIRCUIT_OPEN'],
      why: 'while half-open, calls beyond the trial slots fail fast instead of queueing ([docs/protection-and-telemetry.md, Circuit breaker](protection-and-telemetry.md#circuit-breaker-createcircuitbreaker-relent))',
    },
    {
      id: 'half-open sampling (10 calls, 30 %): a trial failure keeps it half-open',
      from: `${CB} "samples multiple half-open calls before closing"`,
      input: 'sampling',
      expected: 'half_open',
      status: 'differs',
      relent: 'open',
      why: 'one trial failure reopens the circuit (halfOpenTrials / successThreshold, no failure sampling) ([docs/protection-and-telemetry.md, Circuit breaker](protection-and-telemetry.md#circuit-breaker-createcircuitbreaker-relent))',
    },
    {
      id: 'half-open sampling: re-opens only past the failure threshold (the 4th failure)',
      from: `${CB} "re-opens when the half-open sample exceeds the failure threshold"`,
      input: 'sampling',
      expected: 'half_open',
      status: 'differs',
      relent: 'open',
      why: 'one trial failure reopens the circuit (halfOpenTrials / successThreshold, no failure sampling) ([docs/protection-and-telemetry.md, Circuit breaker](protection-and-telemetry.md#circuit-breaker-createcircuitbreaker-relent))',
    },
    {
      id: 'half-open sample full: further calls queue',
      from: `${CB} "queues calls once the half-open sample is full"`,
      input: 'dedupe',
      expected: ['returns 1', 'returns 2'],
      status: 'differs',
      relent: ['returns 1', 'ERR_CIRCUIT_OPEN'],
      why: 'while half-open, calls beyond the trial slots fail fast instead of queueing ([docs/protection-and-telemetry.md, Circuit breaker](protection-and-telemetry.md#circuit-breaker-createcircuitbreaker-relent))',
    },
    {
      id: 'a failed trial stops the waiting call (BrokenCircuitError)',
      from: `${CB} "stops deduped half-open tests if the circuit reopens"`,
      input: 'stops deduped',
      expected: { a: 'rejects MyErrorA', b: 'ERR_CIRCUIT_OPEN', bRan: false },
    },
    { id: 're-opens if the half-open trial fails', from: `${CB} "re-opens if the half open fails"`, input: 'reopens', expected: 'open' },
    {
      id: 'an aborted call during half-open is cancelled, not run',
      from: `${CB} "aborts function execution if half open test succeeds"`,
      input: 'aborted while half-open',
      expected: { queued: 'ERR_CANCELLED', state: 'closed' },
    },
    {
      id: 'a call during half-open runs after the trial and sees its signal abort',
      from: `${CB} "respects signal cancellation when execute() is called during HalfOpen state"`,
      input: 'signal while half-open',
      expected: { secondRan: true },
      status: 'differs',
      relent: { secondRan: false },
      why: 'while half-open, calls beyond the trial slots fail fast instead of queueing ([docs/protection-and-telemetry.md, Circuit breaker](protection-and-telemetry.md#circuit-breaker-createcircuitbreaker-relent))',
    },
  ],
});

const restore = group<string, unknown>({
  title: 'CircuitBreakerPolicy state restoration (toJSON / initialState)',
  check: async (what) => {
    const s = scene();
    const restored = (): Scene => {
      const t = scene();
      const b = createCircuitBreaker(
        { failureRatio: 1, minimumThroughput: 2, openMs: 1000, windowMs: 600_000 },
        { initialState: JSON.parse(JSON.stringify(s.breaker)) },
      );
      t.clock.advance(s.clock.now());
      return {
        ...t,
        breaker: b,
        call: async (fn, signal) => failure(await runOnClock(() => fn(), { policy: retry(0), breaker: b, signal }, undefined, t.clock)),
      };
    };
    switch (what) {
      case 'closed': {
        const t = restored();
        return { state: t.breaker.state(t.clock.wallNow()), call: await t.call(ok) };
      }
      case 'breaker': {
        await s.call(fail);
        const t = restored();
        const before = t.breaker.state(t.clock.wallNow());
        await t.call(fail);
        return { before, after: t.breaker.state(t.clock.wallNow()) };
      }
      case 'open': {
        await s.call(fail);
        await s.call(fail);
        const t = restored();
        const first = await t.call(ok);
        t.clock.advance(1000);
        return { first, later: await t.call(ok), state: t.breaker.state(t.clock.wallNow()) };
      }
      case 'half-open': {
        s.clock.advance(1000);
        await s.call(fail);
        await s.call(fail);
        s.clock.advance(1000);
        const trial = s.call(() =>
          after(s.clock, 1, 0).then(() => {
            throw new MyErrorA();
          }),
        );
        const t = restored();
        const r = await t.call(ok);
        s.clock.advance(1);
        await trial;
        return { call: r, state: t.breaker.state(t.clock.wallNow()) };
      }
      default:
        throw new Error(what);
    }
  },
  cases: [
    {
      id: 'restores a closed state',
      from: `${CB} state restoration "restores closed state"`,
      input: 'closed',
      expected: { state: 'closed', call: 'returns 42' },
    },
    {
      id: "restores the breaker's counts",
      from: `${CB} state restoration "restores breaker state"`,
      input: 'breaker',
      expected: { before: 'closed', after: 'open' },
    },
    {
      id: 'restores an open state',
      from: `${CB} state restoration "restores open state"`,
      input: 'open',
      expected: { first: 'ERR_CIRCUIT_OPEN', later: 'returns 42', state: 'closed' },
    },
    {
      id: 'restores a half-open state: a call goes through',
      from: `${CB} state restoration "restores half-open state with immediate retry"`,
      input: 'half-open',
      expected: { call: 'returns 42', state: 'closed' },
    },
  ],
});

// --- Bulkhead -----------------------------------------------------------------------------

const bulkheads = group<string, unknown>({
  title: 'Bulkhead',
  check: async (what) => {
    const clock = createTestClock();
    const order: string[] = [];
    const fnFor = (index: number) => async (): Promise<number> => {
      order.push(`${index}: enter`);
      await after(clock, index * 2, 0);
      order.push(`${index}: exit`);
      return index;
    };
    const runIn = (bulkhead: ReturnType<typeof createBulkhead>, fn: () => Promise<unknown>, signal?: AbortSignal): Promise<string> =>
      runOnClock(() => fn(), { policy: retry(0), bulkhead, signal }, undefined, clock).then(failure);
    switch (what) {
      case 'limit':
      case 'queue': {
        const b = createBulkhead({ maxConcurrent: 2, maxQueue: what === 'limit' ? 0 : 2 });
        const runs = (what === 'limit' ? [0, 1, 2] : [0, 1, 2, 3, 4]).map((k) => runIn(b, fnFor(k)));
        await clock.runAll();
        return { out: await Promise.all(runs), order };
      }
      case 'state': {
        const b = createBulkhead({ maxConcurrent: 2, maxQueue: 2 });
        const slots = (): [number, number] => [2 - b.active, 2 - b.queued];
        const seen: [number, number][] = [slots()];
        const resolvers: (() => void)[] = [];
        const runs: Promise<string>[] = [];
        for (let k = 0; k < 4; k++) {
          runs.push(runIn(b, () => new Promise<void>((res) => resolvers.push(res))));
          await clock.flush();
          seen.push(slots());
        }
        for (let k = 0; k < 4; k++) {
          resolvers[k]!();
          await runs[k];
          await clock.flush();
          seen.push(slots());
        }
        return seen;
      }
      case 'cancelled': {
        const b = createBulkhead({ maxConcurrent: 1, maxQueue: 10 });
        const aborted = new AbortController();
        aborted.abort();
        let called = false;
        const pre = await runIn(
          b,
          async () => {
            called = true;
          },
          aborted.signal,
        );
        const blocker = runIn(b, () => after(clock, 5, 0));
        const later = new AbortController();
        clock.setTimer(() => later.abort(), 2);
        const queued = runIn(
          b,
          async () => {
            called = true;
          },
          later.signal,
        );
        await clock.runAll();
        const out = [pre, await queued, await blocker];
        return { out, called };
      }
      case 'next after abort': {
        const b = createBulkhead({ maxConcurrent: 1, maxQueue: 10 });
        let release!: () => void;
        const first = runIn(b, () => new Promise<number>((res) => (release = () => res(1))));
        const controller = new AbortController();
        const second = runIn(b, async () => 2, controller.signal);
        const third = runIn(b, async () => 3);
        await clock.flush();
        controller.abort();
        await clock.flush();
        release();
        const out = [await first, await second, await third];
        return { out, active: b.active, queued: b.queued };
      }
      default:
        throw new Error(what);
    }
  },
  cases: [
    {
      id: 'bulkhead(2): the third call is rejected',
      from: `${BH} "rejects calls after limit is hit"`,
      input: 'limit',
      expected: { out: ['returns 0', 'returns 1', 'ERR_BULKHEAD_FULL'], order: ['0: enter', '1: enter', '0: exit', '1: exit'] },
    },
    {
      id: 'bulkhead(2, 2): two queue, the fifth is rejected, in order',
      from: `${BH} "queues requests, and rejects after queue limit"`,
      input: 'queue',
      expected: {
        out: ['returns 0', 'returns 1', 'returns 2', 'returns 3', 'ERR_BULKHEAD_FULL'],
        order: ['0: enter', '1: enter', '0: exit', '2: enter', '1: exit', '3: enter', '2: exit', '3: exit'],
      },
    },
    {
      id: 'free execution and queue slots as calls come and go',
      from: `${BH} "maintains proper state"`,
      input: 'state',
      expected: [
        [2, 2],
        [1, 2],
        [0, 2],
        [0, 1],
        [0, 0],
        [0, 1],
        [0, 2],
        [1, 2],
        [2, 2],
      ],
    },
    {
      id: 'a call cancelled before or while queued is not run (TaskCancelledError)',
      from: `${BH} "links parent cancellation token"`,
      input: 'cancelled',
      expected: { out: ['ERR_CANCELLED', 'ERR_CANCELLED', 'returns 0'], called: false },
    },
    {
      id: 'an aborted queued call leaves its place to the next',
      from: `${BH} "should process next queued item when previous item was aborted"`,
      input: 'next after abort',
      expected: { out: ['returns 1', 'ERR_CANCELLED', 'returns 3'], active: 0, queued: 0 },
    },
  ],
});

// --- Timeout (the attempt timeout) --------------------------------------------------------------

const timeouts = group<string, unknown>({
  title: "TimeoutPolicy (relent's attempt timeout)",
  check: async (what) => {
    const policy = retry(0, { attemptTimeoutMs: 2 });
    switch (what) {
      case 'no timeout':
        return failure(await runOnClock(() => 42, { policy: retry(0, { attemptTimeoutMs: 1000 }) }));
      case 'cooperative': {
        let abortedLate = false;
        const r = await runOnClock(
          async (ctx, clock) => {
            await after(clock, 3, 0);
            abortedLate = ctx.signal.aborted;
            return 42;
          },
          { policy },
        );
        return { end: failure(r), abortedLate };
      }
      case 'aggressive': {
        let abortedAt: number | null = null;
        const r = await runOnClock(
          async (ctx, clock) => {
            ctx.signal.addEventListener('abort', () => (abortedAt = clock.now()));
            return after(clock, 10, 42);
          },
          { policy: retry(0, { attemptTimeoutMs: 5 }) },
        );
        return { settled: r.result?.outcome.ok === false, abortedAt };
      }
      case 'parent': {
        const parent = new AbortController();
        let before: boolean | null = null;
        let afterAbort: boolean | null = null;
        await runOnClock(
          (ctx) => {
            before = ctx.signal.aborted;
            parent.abort();
            afterAbort = ctx.signal.aborted;
            return Promise.resolve(1);
          },
          { policy: retry(0, { attemptTimeoutMs: 1000 }), signal: parent.signal },
        );
        return { before, afterAbort };
      }
      case 'own timeout with parent': {
        const parent = new AbortController();
        let abortedAt: number | null = null;
        await runOnClock(
          async (ctx, clock) => {
            ctx.signal.addEventListener('abort', () => (abortedAt = clock.now()));
            return after(clock, 3, 1);
          },
          { policy: retry(0, { attemptTimeoutMs: 1 }), signal: parent.signal },
        );
        return abortedAt;
      }
      case 'abort on return': {
        let signal: AbortSignal | undefined;
        await runOnClock(
          async (ctx) => {
            signal = ctx.signal;
            return 1;
          },
          { policy: retry(0, { attemptTimeoutMs: 1 }) },
        );
        return signal?.aborted;
      }
      case 'events ok':
      case 'events timeout':
      case 'events failure':
      case 'events coop timeout': {
        const r = await runOnClock(
          async (_ctx, clock) => {
            if (what === 'events failure') throw new Error('oh no!');
            if (what === 'events ok') return 42;
            return after(clock, 3, 42);
          },
          { policy },
        );
        const attempt = r.events.find((e) => e.type === 'attempt') as { decision: string; errorClass: string | null } | undefined;
        return {
          success: attempt?.decision === 'return',
          timeout: attempt?.errorClass === 'timeout',
          failure: attempt !== undefined && attempt.decision !== 'return',
        };
      }
      case 'listeners': {
        const parent = new AbortController();
        let left = 15;
        await runOnClock(
          async () => {
            if (left-- > 0) throw new Error('fail');
            return 1;
          },
          { policy: retry(16, { attemptTimeoutMs: 1, backoff: { kind: 'exponential', baseMs: 1, capMs: 1 } }), signal: parent.signal },
        );
        return getEventListeners(parent.signal, 'abort').length;
      }
      default:
        throw new Error(what);
    }
  },
  cases: [
    {
      id: 'no timeout: the value',
      from: `${TO} "works when no timeout happens"`,
      input: 'no timeout',
      expected: 'returns 42',
    },
    {
      id: 'cooperative: the signal aborts at the timeout, the late value is returned',
      from: `${TO} "properly cooperatively cancels"`,
      input: 'cooperative',
      expected: { end: 'returns 42', abortedLate: true },
      status: 'differs',
      relent: { end: 'ERR_MAX_ATTEMPTS', abortedLate: true },
      why: 'an attempt that reaches its timeout has ended (a `timeout`); a value that comes later is not taken ([README, In your code](../README.md#in-your-code))',
    },
    {
      id: 'aggressive: rejected at the timeout, the signal aborted',
      from: `${TO} "properly aggressively cancels"`,
      input: 'aggressive',
      expected: { settled: true, abortedAt: 5 },
    },
    {
      id: "the caller's cancel reaches the attempt's signal at once",
      from: `${TO} "links parent cancellation token"`,
      input: 'parent',
      expected: { before: false, afterAbort: true },
    },
    {
      id: "the timeout still applies with a caller's signal",
      from: `${TO} "still has own timeout if given parent"`,
      input: 'own timeout with parent',
      expected: 1,
    },
    {
      id: 'the signal is aborted once the attempt returns',
      from: `${TO} "aborts on return by default"`,
      input: 'abort on return',
      expected: true,
      status: 'differs',
      relent: false,
      why: "an attempt's signal aborts only at its timeout, the deadline or the caller's cancel: an answer's body may still be streaming ([README, In your code](../README.md#in-your-code))",
    },
    { id: 'abortOnReturn: false leaves the signal alone', from: `${TO} "does not aborts on return if requested"`, input: 'abort on return', expected: false },
    {
      id: 'success event (cooperative)',
      from: `${TO} events "emits a success event (cooperative)"`,
      input: 'events ok',
      expected: { success: true, timeout: false, failure: false },
    },
    {
      id: 'success event (aggressive)',
      from: `${TO} events "emits a success event (aggressive)"`,
      input: 'events ok',
      expected: { success: true, timeout: false, failure: false },
    },
    {
      id: 'timeout event (cooperative): a timeout and still a success',
      from: `${TO} events "emits a timeout event (cooperative)"`,
      input: 'events coop timeout',
      expected: { success: true, timeout: true, failure: false },
      status: 'differs',
      relent: { success: false, timeout: true, failure: true },
      why: 'an attempt that reaches its timeout has ended (a `timeout`); a value that comes later is not taken ([README, In your code](../README.md#in-your-code))',
    },
    {
      id: 'timeout event (aggressive): a timeout and a failure',
      from: `${TO} events "emits a timeout event (aggressive)"`,
      input: 'events timeout',
      expected: { success: false, timeout: true, failure: true },
    },
    {
      id: 'failure event (cooperative)',
      from: `${TO} events "emits a failure event (cooperative)"`,
      input: 'events failure',
      expected: { success: false, timeout: false, failure: true },
    },
    {
      id: 'failure event (aggressive)',
      from: `${TO} events "emits a failure event (aggressive)"`,
      input: 'events failure',
      expected: { success: false, timeout: false, failure: true },
    },
    { id: "no abort listener is left on the caller's signal (#81)", from: `${TO} "does not leak abort listeners (#81)"`, input: 'listeners', expected: 0 },
  ],
});

const notApplicable = group<never, never>({
  title: 'not applicable',
  check: () => {
    throw new Error('not run');
  },
  cases: [
    {
      id: 'retry timers are referenced by default',
      from: `${RP} "does not unref by default"`,
      status: 'na',
      why: "Node timer ref/unref of a child process; relent's timers are referenced and cleared",
    },
    { id: 'dangerouslyUnref()', from: `${RP} "unrefs as requested"`, status: 'na', why: 'relent has no unref option' },
    { id: 'timeout timers are referenced by default', from: `${TO} "does not unref by default"`, status: 'na', why: 'Node timer ref/unref of a child process' },
    { id: 'timeout dangerouslyUnref()', from: `${TO} "unrefs as requested"`, status: 'na', why: 'relent has no unref option' },
    {
      id: 'DelegateBackoff passes the context',
      from: `${BO}/DelegateBackoff.test.ts "passes through the context and sets next delay"`,
      status: 'na',
      why: 'relent backoffs are JSON specs, not functions',
    },
    {
      id: 'DelegateBackoff keeps state',
      from: `${BO}/DelegateBackoff.test.ts "captures and sets delegate state"`,
      status: 'na',
      why: 'relent backoffs are JSON specs, not functions',
    },
    {
      id: 'CountBreaker size is validated',
      from: `${BR}/CountBreaker.test.ts "rejects if size is invalid"`,
      status: 'na',
      why: "relent's window is a time window (windowMs), not a count of calls",
    },
    {
      id: 'CountBreaker minimumNumberOfCalls above size',
      from: `${BR}/CountBreaker.test.ts "rejects if minimumNumberOfCalls is invalid" (101 > size)`,
      status: 'na',
      why: "relent's window is a time window, it has no size",
    },
    {
      id: 'CountBreaker initial params',
      from: `${BR}/CountBreaker.test.ts "creates good initial params"`,
      status: 'na',
      why: "internal fields of cockatiel's breaker",
    },
    {
      id: 'CountBreaker window wraps',
      from: `${BR}/CountBreaker.test.ts "correctly wraps around when reaching the end of the window"`,
      status: 'na',
      why: "a count window's ring buffer",
    },
    {
      id: 'CountBreaker window serializes',
      from: `${BR}/CountBreaker.test.ts window "serializes and deserializes"`,
      status: 'na',
      why: "a count window's ring buffer",
    },
    {
      id: 'SamplingBreaker initial params',
      from: `${BR}/SamplingBreaker.test.ts "creates good initial params", "creates initial params for small durations"`,
      status: 'na',
      why: "internal fields (window sizes) of cockatiel's breaker",
    },
    {
      id: 'SamplingBreaker guesses a minimum rps',
      from: `${BR}/SamplingBreaker.test.ts "creates guess for rpms"`,
      status: 'na',
      why: "relent's minimum is a number of calls (minimumThroughput), not a rate",
    },
    { id: 'SamplingBreaker windowing', from: `${BR}/SamplingBreaker.test.ts windowing (2 tests)`, status: 'na', why: 'internal bucket contents' },
    {
      id: 'SamplingBreaker minimum rate',
      from: `${BR}/SamplingBreaker.test.ts "does not start failing if below threshold rps", "fails once above rps", "calculates rps correctly over time"`,
      status: 'na',
      why: "relent's minimum is a number of calls, not a rate",
    },
    {
      id: 'half-open backoff resets when the circuit closes',
      from: `${CB} "resets the backoff when closing the circuit"`,
      status: 'na',
      why: "relent's open period is one fixed openMs (no backoff to reset)",
    },
    {
      id: 'half-open sampling options are validated',
      from: `${CB} "validates half-open sampling options"`,
      status: 'na',
      why: 'relent has no half-open failure sampling',
    },
    { id: 'isolate()', from: `${CB} "handles isolation correctly"`, status: 'na', why: "relent's breaker has no manual isolation" },
    {
      id: "the breaker links the caller's signal",
      from: `${CB} "links parent cancellation token"`,
      status: 'na',
      why: 'the same rule as TimeoutPolicy "links parent cancellation token" above (one executor)',
    },
  ],
});

export const COCKATIEL: Source = {
  key: 'cockatiel',
  title: 'cockatiel',
  upstream: [
    'connor4312/cockatiel 4.0.0 (f475a69): src/RetryPolicy.test.ts, src/backoff/*.test.ts, src/breaker/*.test.ts, src/CircuitBreakerPolicy.test.ts, src/BulkheadPolicy.test.ts, src/TimeoutPolicy.test.ts',
  ],
  groups: [retryPolicy, backoffs, generators, issue86, breakerOps, breakerValidation, circuit, restore, bulkheads, timeouts, notApplicable],
};
