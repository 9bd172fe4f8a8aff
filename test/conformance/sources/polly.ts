// Polly.Core's hedging tests (test/Polly.Core.Tests/Hedging), answered by relent's `hedge`
// policy on execute() with the test clock.
//
// Polly sends the next hedged action when the last outcome is "handled" (a failure) or when
// the delay passes; relent hedges only on the delay, and a failure alone is decided by the
// retry rules (docs/slow.md). So a Polly case whose handled outcomes come one after another
// (nothing else in flight) is restated as retries; the cases with slow actions are hedges.

import { createHedgeState, createOperation, decide, resolvePolicy, type AttemptContext, type ErrorClass, type PolicySpec } from '../../../src/index.js';
import { group, hedgeRun, runOnClock, after, outcomeCode, RANDOM_HALF, type HedgeAttempt, type Source } from '../harness.js';

const H = 'test/Polly.Core.Tests/Hedging/HedgingResilienceStrategyTests.cs';
const O = 'test/Polly.Core.Tests/Hedging/HedgingStrategyOptionsTests.cs';

const HOUR = 3_600_000;
const hedge = (delayMs: number, maxHedges: number, extra: PolicySpec = {}): PolicySpec => ({
  maxAttempts: maxHedges + 1,
  deadlineMs: 2 ** 31 - 1,
  budget: null,
  backoff: { kind: 'constant', delayMs: 0 },
  hedge: { delayMs, maxHedges, maxExtraLoad: 1 },
  ...extra,
});

// --- options ------------------------------------------------------------------------------

const options = group<string, unknown>({
  title: 'HedgingStrategyOptions',
  check: (what) => {
    const valid = (spec: PolicySpec): string => {
      try {
        resolvePolicy(spec);
        return 'valid';
      } catch (e) {
        return `invalid: ${(e as { field?: string }).field ?? ''}`;
      }
    };
    switch (what) {
      case 'max':
        return resolvePolicy({ hedge: { delayMs: 100 } }).hedge!.maxHedges;
      case 'delay':
        return valid({ hedge: {} as never });
      case '-1':
        return valid({ hedge: { delayMs: 100, maxHedges: -1 } });
      case '10':
        return valid({ hedge: { delayMs: 100, maxHedges: 10 } });
      default:
        throw new Error(what);
    }
  },
  cases: [
    { id: 'MaxHedgedAttempts defaults to 1', from: `${O} Ctor_EnsureDefaults`, input: 'max', expected: 1 },
    {
      id: 'Delay defaults to 2 s',
      from: `${O} Ctor_EnsureDefaults`,
      input: 'delay',
      expected: 'valid',
      status: 'differs',
      relent: 'invalid: hedge.delayMs',
      why: 'relent has no default hedging delay: `delayMs` is required, a number or a percentile such as "p95" ([docs/slow.md, Hedged requests](slow.md#hedged-requests))',
    },
    { id: 'MaxHedgedAttempts -1 is refused', from: `${O} Validation`, input: '-1', expected: 'invalid: hedge.maxHedges' },
    {
      id: 'MaxHedgedAttempts may be up to 10',
      from: `${O} Validation ("between 1 and 10")`,
      input: '10',
      expected: 'valid',
      status: 'differs',
      relent: 'invalid: hedge.maxHedges',
      why: 'at most 4 hedges per operation, 5 attempts in flight as gRPC A6 allows ([docs/slow.md, Hedged requests](slow.md#hedged-requests))',
    },
  ],
});

/** Polly's default ShouldHandle: a result is not handled, OperationCanceledException is not, any other exception is. */
const shouldHandle = group<'result' | 'cancelled' | 'exception', boolean>({
  title: 'ShouldHandle defaults',
  check: (what) => {
    const policy = resolvePolicy({ hedge: { delayMs: 100 } });
    const obs = what === 'result' ? { status: 200, elapsedMs: 1 } : { errorClass: (what === 'cancelled' ? 'aborted' : 'error') as ErrorClass, elapsedMs: 1 };
    const d = decide(policy, { attempt: 1, startedAt: 0, deadlineAt: 10_000, idempotent: true, prevDelayMs: null, lastBudgetCost: 0, throttled: 0 }, obs, {
      now: 1,
      random: RANDOM_HALF,
    });
    return d.decision === 'retry';
  },
  cases: [
    { id: 'a result is not handled', from: `${O} ShouldHandle_EnsureDefaults`, input: 'result', expected: false },
    { id: 'OperationCanceledException is not handled', from: `${O} ShouldHandle_EnsureDefaults`, input: 'cancelled', expected: false },
    { id: 'another exception is handled', from: `${O} ShouldHandle_EnsureDefaults`, input: 'exception', expected: true },
  ],
});

// --- running ------------------------------------------------------------------------------

const basics = group<string, unknown>({
  title: 'execution',
  check: async (what) => {
    switch (what) {
      case 'sync value': {
        const r = await runOnClock(() => 10, { policy: hedge(1000, 1), method: 'GET' });
        if (r.rejection !== undefined) return `execute() rejects: ${String(r.rejection)}`;
        return r.result?.outcome.ok ? r.result.outcome.value : outcomeCode(r.result);
      }
      case 'pre-cancelled': {
        const controller = new AbortController();
        controller.abort(new Error('cancelled before'));
        let calls = 0;
        const r = await runOnClock(
          async () => {
            calls++;
            return 'dummy';
          },
          { policy: hedge(1000, 1), signal: controller.signal },
        );
        return { calls, reason: r.result?.reason };
      }
      case 'numbers': {
        const r = await runOnClock(async (ctx) => ({ status: ctx.attempt === 1 ? 503 : 200 }), { policy: hedge(1000, 1) });
        return r.events.filter((e) => e.type === 'attempt').map((e) => (e as { attempt: number }).attempt);
      }
      case 'secondary': {
        const r = await runOnClock(async (ctx) => (ctx.attempt === 1 ? { status: 503, body: 'primary' } : { status: 200, body: 'secondary' }), {
          policy: hedge(1000, 1),
        });
        return r.result?.outcome.ok ? (r.result.outcome.value as { body: string }).body : outcomeCode(r.result);
      }
      case 'delay 123': {
        const op = createOperation(resolvePolicy(hedge(123, 1)), { random: RANDOM_HALF, hedging: createHedgeState(), method: 'GET' });
        const cmd = op.start(0);
        return cmd.kind === 'call' ? cmd.hedgeInMs : cmd.kind;
      }
      case 'contexts': {
        const seen: AttemptContext[] = [];
        const r = await runOnClock(
          async (ctx, clock) => {
            seen.push(ctx);
            return after(clock, ctx.attempt === 1 ? HOUR : 10, { status: 200 }, ctx.signal);
          },
          { policy: hedge(100, 1), hedging: warmed(hedge(100, 1)) },
        );
        return {
          attempts: seen.length,
          signals: new Set(seen.map((c) => c.signal)).size,
          requestIds: new Set(seen.map((c) => c.requestId)).size,
          reason: r.result?.reason,
        };
      }
      case 'listener throws': {
        const r = await runOnClock(async (ctx) => ({ status: ctx.attempt === 1 ? 503 : 200 }), {
          policy: hedge(1000, 1),
          onEvent: (e) => {
            if (e.type === 'attempt') throw new Error('my-exception');
          },
        });
        const error = r.result && !r.result.outcome.ok ? (r.result.outcome.error as Error).message : undefined;
        return { rejectsWith: error ?? (r.result ? 'settled without it' : 'never settled'), escaped: r.escaped.length };
      }
      default:
        throw new Error(what);
    }
  },
  cases: [
    {
      id: 'a synchronous action returns its value',
      from: `${H} Execute_Skipped_Ok`,
      input: 'sync value',
      expected: 10,
    },
    {
      id: 'a cancel before the start: no call, cancelled',
      from: `${H} Execute_CancellationRequested_Throws`,
      input: 'pre-cancelled',
      expected: { calls: 0, reason: 'cancelled' },
    },
    {
      id: 'attempts are reported as 0 (primary) and 1 (the first hedge)',
      from: `${H} ExecutePrimaryAndSecondary_EnsureAttemptReported`,
      input: 'numbers',
      expected: [0, 1],
      status: 'differs',
      relent: [1, 2],
      why: 'attempt numbers start at 1 everywhere in relent ([README, Concepts: Operation and attempt](../README.md#concepts))',
    },
    {
      id: "a handled primary outcome: the secondary action's result is returned",
      from: `${H} ExecutePrimary_Cancelled_SecondaryShouldBeExecuted`,
      input: 'secondary',
      expected: 'secondary',
      note: 'relent retries here: nothing else is in flight when the primary fails',
    },
    {
      id: 'the hedging delay is used as given (123 ms)',
      from: `${H} GetHedgingDelayAsync_NoGeneratorSet_EnsureCorrectValue`,
      input: 'delay 123',
      expected: 123,
    },
    {
      id: 'every hedged action has its own context and cancellation',
      from: `${H} ExecuteAsync_EveryHedgedTaskShouldHaveDifferentContexts`,
      input: 'contexts',
      expected: { attempts: 2, signals: 2, requestIds: 2, reason: 'return' },
    },
    {
      id: 'an event listener that throws: the exception reaches the caller',
      from: `${H} ExecuteAsync_OnHedgingEventThrows_EnsureExceptionRethrown`,
      input: 'listener throws',
      expected: { rejectsWith: 'my-exception', escaped: 0 },
    },
  ],
});

/** A hedging state whose extra-load bucket already holds hedges (relent's starts empty). */
function warmed(spec: PolicySpec): ReturnType<typeof createHedgeState> {
  const h = createHedgeState();
  const p = resolvePolicy(spec);
  for (let k = 0; k < 10; k++) h.started(p.hedge!);
  return h;
}

interface RaceIn {
  readonly delayMs: number;
  readonly maxHedges: number;
  readonly script: readonly HedgeAttempt[];
  readonly cancelAt?: number;
}
interface RaceOut {
  readonly winner: number | null;
  readonly aborted: readonly number[];
  readonly reason: string;
  readonly starts?: readonly number[];
}
const races = group<RaceIn, RaceOut>({
  title: 'slow actions (latency mode)',
  check: async (i) => {
    const r = await hedgeRun(hedge(i.delayMs, i.maxHedges), i.script, { cancelAt: i.cancelAt });
    const value = r.result?.outcome.ok ? (r.result.outcome.value as { attempt: number }) : null;
    return { winner: value?.attempt ?? null, aborted: r.aborted, reason: r.reason, ...(i.delayMs === 0 ? { starts: r.starts } : {}) };
  },
  cases: [
    {
      id: 'the first answer wins, whichever action gives it',
      from: `${H} ExecuteAsync_ShouldReturnAnyPossibleResult`,
      input: { delayMs: 100, maxHedges: 2, script: [{ at: 5000 }, { at: 3000 }, { at: 100 }] },
      expected: { winner: 3, aborted: [1, 2], reason: 'return' },
    },
    {
      id: 'the primary wins: the hedged actions are cancelled',
      from: `${H} ExecuteAsync_EnsureHedgedTasksCancelled_Ok`,
      input: { delayMs: 1000, maxHedges: 2, script: [{ at: HOUR }, {}, {}] },
      expected: { winner: 1, aborted: [2, 3], reason: 'return' },
    },
    {
      id: 'a hedge wins: the primary is cancelled',
      from: `${H} ExecuteAsync_EnsurePrimaryTaskCancelled_Ok`,
      input: { delayMs: 1000, maxHedges: 1, script: [{ at: 24 * HOUR }, { at: HOUR }] },
      expected: { winner: 2, aborted: [1], reason: 'return' },
    },
    {
      id: "the caller's cancel cancels the primary and the hedge",
      from: `${H} ExecuteAsync_CancellationLinking_Ok`,
      input: { delayMs: 1000, maxHedges: 1, script: [{}, {}], cancelAt: 4 * HOUR },
      expected: { winner: null, aborted: [1, 2], reason: 'cancelled' },
    },
    {
      id: 'delay 0: every action starts at once',
      from: `${H} ExecuteAsync_ZeroHedgingDelay_EnsureAllTasksSpawnedAtOnce`,
      input: { delayMs: 0, maxHedges: 3, script: [{ at: 1000 }, {}, {}, {}] },
      expected: { winner: 1, aborted: [2, 3, 4], reason: 'return', starts: [0, 0, 0, 0] },
    },
  ],
});

const fallback = group<null, number>({
  title: 'a delay longer than the call (fallback mode)',
  check: async () => {
    let inFlight = 0;
    let most = 0;
    await runOnClock(
      async (ctx, clock) => {
        inFlight++;
        most = Math.max(most, inFlight);
        try {
          return await after(clock, 1000, { status: ctx.attempt < 3 ? 503 : 200 }, ctx.signal);
        } finally {
          inFlight--;
        }
      },
      { policy: hedge(60_000, 2, { deadlineMs: 10_000 }) },
    );
    return most;
  },
  cases: [
    {
      id: 'an infinite delay: never two actions at once',
      from: `${H} ExecuteAsync_InfiniteHedgingDelay_EnsureNoConcurrentExecutions`,
      input: null,
      expected: 1,
      note: 'a delay past the deadline plans no hedge; failures are retried one after another',
    },
  ],
});

// --- handled exceptions (restated as retries: nothing else is in flight) ----------------------------

interface ThrowsIn {
  readonly errors: readonly (string | null)[];
  readonly handled: readonly string[];
}
interface ThrowsOut {
  readonly result: string;
  readonly extra: number;
}
const exceptions = group<ThrowsIn, ThrowsOut>({
  title: 'handled exceptions',
  check: async (i) => {
    let calls = 0;
    const made = new Map<string, Error>();
    const r = await runOnClock(
      async (ctx) => {
        calls++;
        const name = i.errors[ctx.attempt - 1];
        if (name === undefined) throw new Error('script ran out');
        if (name === null) return 'Success';
        const e = new Error(name);
        e.name = name;
        made.set(`${ctx.attempt}`, e);
        throw e;
      },
      {
        policy: { maxAttempts: i.errors.length, backoff: { kind: 'constant', delayMs: 0 }, budget: null, retryOn: { status: [], errors: ['error'] } },
        classifyError: (e) => ({ errorClass: i.handled.includes((e as Error).name) ? 'error' : 'protocol' }),
      },
    );
    const out = r.result?.outcome;
    const result =
      out === undefined
        ? 'never settled'
        : out.ok
          ? String(out.value)
          : `throws ${(out.error as Error).name}${[...made.values()].includes(out.error as Error) ? '' : ' (another object)'}`;
    return { result, extra: calls - 1 };
  },
  cases: [
    {
      id: 'three handled exceptions, then an unhandled one is thrown',
      from: `${H} ExecuteAsync_ExceptionsHandled_ShouldThrowAnyException`,
      input: {
        errors: ['InvalidCastException', 'ArgumentException', 'InvalidOperationException', 'BadImageFormatException'],
        handled: ['InvalidCastException', 'ArgumentException', 'InvalidOperationException'],
      },
      expected: { result: 'throws BadImageFormatException', extra: 3 },
    },
    {
      id: "every exception handled: the primary's exception is thrown",
      from: `${H} ExecuteAsync_ExceptionsHandled_ShouldThrowLastException`,
      input: {
        errors: ['InvalidCastException', 'ArgumentException', 'InvalidOperationException', 'BadImageFormatException'],
        handled: ['InvalidCastException', 'ArgumentException', 'InvalidOperationException', 'BadImageFormatException'],
      },
      expected: { result: 'throws InvalidCastException', extra: 3 },
      status: 'differs',
      relent: { result: 'throws BadImageFormatException', extra: 3 },
      why: "when retries run out relent rejects with the last attempt's own error ([README, In your code](../README.md#in-your-code))",
    },
    {
      id: 'an unhandled primary exception is rethrown, no hedge',
      from: `${H} ExecuteAsync_PrimaryExceptionNotHandled_Rethrow`,
      input: { errors: ['InvalidCastException', null], handled: ['InvalidOperationException'] },
      expected: { result: 'throws InvalidCastException', extra: 0 },
    },
    {
      id: 'handled exceptions, then a result: the result is returned',
      from: `${H} ExecuteAsync_ExceptionsHandled_ShouldReturnLastResult`,
      input: {
        errors: ['InvalidCastException', 'ArgumentException', 'InvalidOperationException', null],
        handled: ['InvalidCastException', 'ArgumentException', 'InvalidOperationException', 'BadImageFormatException'],
      },
      expected: { result: 'Success', extra: 3 },
    },
    {
      id: "the primary's own exception object is thrown (stack trace kept)",
      from: `${H} ExecuteAsync_EnsureExceptionStackTracePreserved`,
      input: { errors: ['InvalidOperationException'], handled: [] },
      expected: { result: 'throws InvalidOperationException', extra: 0 },
    },
  ],
});

const onHedging = group<number, { readonly extra: number; readonly ascending: boolean }>({
  title: 'every extra action is reported',
  check: async (maxHedged) => {
    const r = await runOnClock(async () => ({ status: 503 }), {
      policy: { maxAttempts: maxHedged + 1, backoff: { kind: 'constant', delayMs: 0 }, budget: null },
    });
    const attempts = r.events.filter((e) => e.type === 'attempt').map((e) => (e as { attempt: number }).attempt);
    return { extra: attempts.length - 1, ascending: attempts.every((a, k) => k === 0 || a > attempts[k - 1]!) };
  },
  cases: [
    {
      id: 'OnHedging runs once per extra action, in ascending order',
      from: `${H} ExecuteAsync_EnsureOnHedgingCalled`,
      input: 3,
      expected: { extra: 3, ascending: true },
    },
  ],
});

const methods = group<string, number>({
  title: 'what may be hedged',
  check: async (method) => (await hedgeRun(hedge(100, 1), [{ at: 1000 }, { at: 10 }], { method })).starts.length,
  cases: [
    {
      id: 'any action is hedged (no method rule)',
      from: 'src/Polly.Core/Hedging/HedgingResilienceStrategy.cs (hedges whatever callback it is given)',
      input: 'POST',
      expected: 2,
      status: 'differs',
      relent: 1,
      why: 'only idempotent operations hedge: never a POST without an idempotency key ([docs/slow.md, Hedged requests](slow.md#hedged-requests))',
    },
    { id: 'an idempotent read is hedged', from: 'src/Polly.Core/Hedging/HedgingResilienceStrategy.cs', input: 'GET', expected: 2 },
  ],
});

const notApplicable = group<never, never>({
  title: 'not applicable',
  check: () => {
    throw new Error('not run');
  },
  cases: [
    {
      id: 'HedgingDelayGenerator values (-1000 … 1000 s)',
      from: `${H} GetHedgingDelayAsync_GeneratorSet_EnsureCorrectGeneratedValue`,
      status: 'na',
      why: 'relent has no per-attempt delay generator: delayMs is a number or a latency percentile',
    },
    {
      id: 'HedgingDelayGenerator respected',
      from: `${H} ExecuteAsync_EnsureHedgingDelayGeneratorRespected`,
      status: 'na',
      why: 'relent has no per-attempt delay generator: delayMs is a number or a latency percentile',
    },
    {
      id: 'the primary ResilienceContext flows to OnHedging',
      from: `${H} ExecuteAsync_EnsurePrimaryContextFlows`,
      status: 'na',
      why: "Polly's ResilienceContext properties",
    },
    {
      id: 'OnHedging HasOutcome for a delay-triggered hedge',
      from: `${H} ExecuteAsync_EnsureSecondaryHedgedTaskReportedWithNoOutcome`,
      status: 'na',
      why: "the arguments of Polly's OnHedging callback",
    },
    { id: 'a discarded result is disposed', from: `${H} ExecuteAsync_EnsureDiscardedResultDisposed`, status: 'na', why: '.NET IDisposable results' },
    {
      id: 'the original cancellation token is restored',
      from: `${H} ExecuteAsync_EnsureOriginalCancellationTokenRestored`,
      status: 'na',
      why: "Polly's ResilienceContext token swap",
    },
    {
      id: 'properties are consistent after hedging',
      from: `${H} ExecuteAsync_EnsurePropertiesConsistency`,
      status: 'na',
      why: "Polly's ResilienceContext properties",
    },
    {
      id: 'custom properties of the primary',
      from: `${H} ExecuteAsync_Primary_CustomPropertiesAvailable`,
      status: 'na',
      why: "Polly's ResilienceContext properties",
    },
    {
      id: 'custom properties of a secondary',
      from: `${H} ExecuteAsync_Secondary_CustomPropertiesAvailable`,
      status: 'na',
      why: "Polly's ResilienceContext properties",
    },
    {
      id: 'background work of a successful call is not cancelled',
      from: `${H} ExecuteAsync_EnsureBackgroundWorkInSuccessfulCallNotCancelled`,
      status: 'na',
      why: '.NET tasks started with a token outside the action',
    },
    { id: 'OnHedging telemetry events', from: `${H} ExecuteAsync_EnsureOnHedgingTelemetry`, status: 'na', why: "Polly's telemetry event names" },
    { id: 'the default ActionGenerator', from: `${O} HedgingActionGenerator_EnsureDefaults`, status: 'na', why: "Polly's action generator and thread use" },
    {
      id: 'strategy properties after construction',
      from: `${H} Ctor_EnsureDefaults`,
      status: 'na',
      why: "members of Polly's strategy object (the option defaults are cases above)",
    },
  ],
});

export const POLLY: Source = {
  key: 'polly',
  title: 'Polly.Core hedging',
  upstream: ['App-vNext/Polly test/Polly.Core.Tests/Hedging/HedgingResilienceStrategyTests.cs, HedgingStrategyOptionsTests.cs'],
  groups: [options, shouldHandle, basics, races, fallback, exceptions, onHedging, methods, notApplicable],
};
