// The conformance suite's machinery: cases restated as data from the sources' own test
// files and documents, and the few ways relent's public API is driven to answer them.
//
// A case says what the source expects for an input (`expected`). Its status is
// - `agree`: relent's answer equals `expected`;
// - `differs`: relent answers `relent` instead, on purpose; `why` links the rule (docs/ or
//   README) and docs/conformance.md lists the case;
// - `na`: the case tests something relent does not have (an internal, a transport state);
//   `why` says what in one line and the case is not run.
// A case that waits for a fix of issue 21 on main names it in `pending`: it runs with
// `it.fails` until the fix lands.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createHedgeState, createOperation, execute, resolvePolicy } from '../../src/index.js';
import type {
  AttemptContext,
  Command,
  DecisionWhy,
  ErrorClass,
  Policy,
  PolicySpec,
  PresetName,
  Random,
  RelentEvent,
  RetryBudget,
  RunOptions,
  RunResult,
  TerminalReason,
} from '../../src/index.js';
import type { HedgeState } from '../../src/core/hedge.js';
import { constantRandom, createTestClock, type TestClock } from '../../src/testing/index.js';

export type Status = 'agree' | 'differs' | 'na';

export interface Case<I, O> {
  /** Unique within its source: what the case is, in a few words. */
  readonly id: string;
  /** Where it comes from: the upstream file and test (or the document and section). */
  readonly from: string;
  readonly input?: I;
  /** The source's answer. */
  readonly expected?: O;
  readonly status?: Status;
  /** relent's answer, when it differs on purpose. */
  readonly relent?: O;
  /** differs: a markdown link to the rule relent keeps; na: why the case does not map, one line. */
  readonly why?: string;
  /** The issue 21 fix on main this case waits for (it runs with it.fails until then). */
  readonly pending?: string;
  /** How the source's case was restated, when it needed a choice (shown in the docs). */
  readonly note?: string;
}

export interface Group<I, O> {
  readonly title: string;
  /** relent's answer to one case's input. */
  readonly check: (input: I, c: Case<I, O>) => O | Promise<O>;
  readonly cases: readonly Case<I, O>[];
}

export interface Source {
  /** Short name used in case keys and the docs (`urllib3`). */
  readonly key: string;
  readonly title: string;
  /** The upstream files and documents the cases were read from. */
  readonly upstream: readonly string[];
  readonly groups: readonly Group<never, unknown>[];
}

/** A group with its input and output types checked (stored untyped in a Source). */
export function group<I, O>(g: Group<I, O>): Group<never, unknown> {
  return g as unknown as Group<never, unknown>;
}

export function statusOf(c: Case<unknown, unknown>): Status {
  return c.status ?? 'agree';
}

export function allCases(source: Source): Case<unknown, unknown>[] {
  return source.groups.flatMap((g) => g.cases as readonly Case<unknown, unknown>[]);
}

export interface Counts {
  readonly agree: number;
  readonly differs: number;
  readonly na: number;
  readonly pending: number;
}

export function countsOf(source: Source): Counts {
  const cs = allCases(source);
  return {
    agree: cs.filter((c) => statusOf(c) === 'agree').length,
    differs: cs.filter((c) => statusOf(c) === 'differs').length,
    na: cs.filter((c) => statusOf(c) === 'na').length,
    pending: cs.filter((c) => c.pending !== undefined).length,
  };
}

const DOC = new URL('../../docs/conformance.md', import.meta.url);

/** Runs every case of a source, then checks that docs/conformance.md lists its differences. */
export function runSource(source: Source): void {
  describe(source.title, () => {
    for (const g of source.groups) {
      if (g.cases.every((c) => statusOf(c as Case<unknown, unknown>) === 'na')) continue;
      describe(g.title, () => {
        for (const c of g.cases as readonly Case<never, unknown>[]) {
          if (statusOf(c) === 'na') continue;
          const body = async (): Promise<void> => {
            const got = await g.check(c.input as never, c);
            // CONFORMANCE_SHOW=1 prints relent's answer to pending cases (for the report to the lead).
            if (process.env.CONFORMANCE_SHOW && c.pending !== undefined) {
              console.log(`[pending ${c.pending}] ${source.key} / ${c.id}\n  expected ${JSON.stringify(c.expected)}\n  relent   ${JSON.stringify(got)}`);
            }
            if (statusOf(c) === 'differs') {
              expect(got, 'relent answers as documented').toEqual(c.relent);
              expect(got, "and that is not the source's answer").not.toEqual(c.expected);
            } else {
              expect(got).toEqual(c.expected);
            }
          };
          const name = `${c.id} (${c.from})`;
          // A pending case waits for an issue 21 fix on main (see its `pending`).
          if (c.pending !== undefined) it.fails(`${name} [pending: ${c.pending}]`, body);
          else it(name, body);
        }
      });
    }

    it('case ids are unique; differences link a rule; cases not applicable say why', () => {
      const cs = allCases(source);
      const ids = cs.map((c) => c.id);
      expect(new Set(ids).size, `duplicate ids in ${source.key}`).toBe(ids.length);
      for (const c of cs) {
        if (statusOf(c) === 'differs') {
          expect(c.why, `${c.id}: a difference links the rule it keeps`).toMatch(/\]\((?:\.\.\/README\.md|[a-z-]+\.md|#)[^)]*\)/);
          expect(c.relent, `${c.id}: a difference says relent's answer`).toBeDefined();
        }
        if (statusOf(c) === 'na') expect(c.why?.length ?? 0, `${c.id}: why not applicable`).toBeGreaterThan(10);
      }
    });

    it('docs/conformance.md lists every difference of this source', () => {
      const doc = readFileSync(DOC, 'utf8');
      for (const c of allCases(source)) {
        if (statusOf(c) !== 'differs') continue;
        expect(doc, `docs/conformance.md lists ${source.key} / ${c.id}`).toContain(`| ${source.title} | ${c.id} |`);
      }
    });
  });
}

// ---------------------------------------------------------------------------------------
// Driving the operation machine (createOperation): decisions in virtual time, no timers.

/** What one attempt observed (a status XOR an error class), as a script step. */
export interface Step {
  readonly status?: number;
  readonly errorClass?: ErrorClass;
  readonly headers?: Readonly<Record<string, string>>;
  readonly sent?: 'not_sent' | 'sent' | 'unknown';
  /** How long the attempt took (default 1 ms). */
  readonly elapsedMs?: number;
}

export interface Trace {
  /** Calls made. */
  readonly attempts: number;
  readonly reason: TerminalReason;
  readonly why: DecisionWhy | null;
  /** The waits before each retry (ms), in order (budget waits included, marked in `waits`). */
  readonly delays: readonly number[];
  readonly waits: readonly { readonly delayMs: number; readonly why: string }[];
  /** The server's asked wait seen by the ending decision. */
  readonly retryAfterMs: number | null;
  /** The server's asked wait seen by each attempt's decision, in order. */
  readonly asked: readonly (number | null)[];
  /** The time each attempt was given (min of attempt timeout and remaining), in order. */
  readonly timeouts: readonly number[];
  /** Monotonic time when the operation ended. */
  readonly endedAt: number;
}

export interface DriveOptions {
  readonly random?: Random;
  readonly budget?: RetryBudget | null;
  readonly method?: string;
  readonly idempotent?: boolean;
  readonly idempotencyKey?: string;
  readonly deadlineMs?: number;
  /** Monotonic start (default 0). */
  readonly now?: number;
  /** Wall clock (epoch ms) at monotonic 0, for HTTP dates (default 2026-01-01T00:00:00Z). */
  readonly wall?: number;
  readonly hedging?: HedgeState | null;
  /** Called after every answered attempt with the command that follows it. */
  readonly afterAnswer?: (cmd: Command, now: number) => void;
}

export const WALL_2026 = Date.UTC(2026, 0, 1);

/** A random source at the top of [0, 1): the longest jittered wait (the sources' "random = max"). */
export const RANDOM_MAX = constantRandom(1 - 2 ** -40);
export const RANDOM_MIN = constantRandom(0);
export const RANDOM_HALF = constantRandom(0.5);

export function policyOf(p: Policy | PolicySpec | PresetName): Policy {
  return resolvePolicy(p);
}

/** Runs an operation over a script of observations on the operation machine; returns how it went. */
export function drive(policy: Policy | PolicySpec | PresetName, steps: readonly Step[] | ((attempt: number) => Step), o: DriveOptions = {}): Trace {
  const op = createOperation(policyOf(policy), {
    random: o.random ?? RANDOM_HALF,
    budget: o.budget ?? null,
    method: o.method ?? 'GET',
    idempotent: o.idempotent ?? null,
    idempotencyKey: o.idempotencyKey ?? null,
    deadlineMs: o.deadlineMs ?? null,
    hedging: o.hedging ?? null,
  });
  const wall = o.wall ?? WALL_2026;
  let now = o.now ?? 0;
  let i = 0;
  const waits: { delayMs: number; why: string }[] = [];
  const asked: (number | null)[] = [];
  const timeouts: number[] = [];
  let cmd = op.start(now);
  for (;;) {
    switch (cmd.kind) {
      case 'call': {
        timeouts.push(cmd.timeoutMs);
        const s = typeof steps === 'function' ? steps(cmd.attempt) : steps[i];
        i++;
        if (s === undefined) throw new Error(`the script ran out: the operation asked for attempt ${cmd.attempt}`);
        now += s.elapsedMs ?? 1;
        const obs =
          s.status !== undefined
            ? { status: s.status, headers: s.headers, elapsedMs: s.elapsedMs ?? 1 }
            : { errorClass: s.errorClass ?? 'error', sent: s.sent, elapsedMs: s.elapsedMs ?? 1 };
        cmd = op.answered(obs, now, wall + now);
        asked.push(op.decision?.retryAfterMs ?? null);
        o.afterAnswer?.(cmd, now);
        break;
      }
      case 'wait':
        waits.push({ delayMs: cmd.delayMs, why: cmd.why });
        now += cmd.delayMs;
        cmd = op.timerFired(now);
        break;
      case 'check_state':
        cmd = op.checked();
        break;
      case 'end':
        return {
          attempts: op.attempt,
          reason: cmd.reason,
          why: cmd.why,
          delays: waits.map((w) => w.delayMs),
          waits,
          retryAfterMs: cmd.decision?.retryAfterMs ?? null,
          asked,
          timeouts,
          endedAt: now,
        };
      default:
        throw new Error(`drive() does not carry out \`${cmd.kind}\` (use runOnClock for hedging)`);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Driving the executor (execute()) on the test clock.

export interface ClockRun<T> {
  /** undefined when the operation never settled (nothing left to fire on the test clock). */
  readonly result: RunResult<T> | undefined;
  readonly events: readonly RelentEvent[];
  readonly clock: TestClock;
  /** execute() itself rejected with this (it should not: it reports failures in its result). */
  readonly rejection?: unknown;
  /** Errors that escaped to the process (unhandled rejections) while the operation ran. */
  readonly escaped: readonly unknown[];
}

/**
 * execute(fn) on a fresh test clock with a seeded random (or the one given), firing timers
 * until none is pending. `setup` may schedule things on the clock first (a cancel at 30 ms).
 */
export async function runOnClock<T>(
  fn: (ctx: AttemptContext, clock: TestClock) => T | Promise<T>,
  options: Omit<RunOptions<T>, 'clock'> = {},
  setup?: (clock: TestClock) => void,
  /**
   * A clock to run on, shared by several operations (around one breaker or bulkhead): the
   * caller moves its time, and the returned promise settles with the operation. Default: a
   * fresh clock whose timers are all fired.
   */
  shared?: TestClock,
): Promise<ClockRun<T>> {
  const clock = shared ?? createTestClock();
  const events: RelentEvent[] = [];
  const escaped: unknown[] = [];
  const onEscape = (e: unknown): void => {
    escaped.push(e);
  };
  // While the operation runs, an error that escapes it (an unhandled rejection) is the
  // measurement, not a failure of the test run: the runner's own listeners step aside.
  const saved = { rejection: process.listeners('unhandledRejection'), exception: process.listeners('uncaughtException') };
  process.removeAllListeners('unhandledRejection');
  process.removeAllListeners('uncaughtException');
  process.on('unhandledRejection', onEscape);
  process.on('uncaughtException', onEscape);
  try {
    let result: RunResult<T> | undefined;
    let rejection: unknown;
    const userOnEvent = options.onEvent;
    const p = execute((ctx) => fn(ctx, clock) as Promise<T>, {
      random: RANDOM_HALF,
      ...options,
      clock,
      onEvent: (e) => {
        events.push(e);
        userOnEvent?.(e);
      },
    });
    p.then(
      (r) => {
        result = r;
      },
      (e: unknown) => {
        rejection = e;
      },
    );
    setup?.(clock);
    if (shared !== undefined) {
      // On a shared clock the caller moves time; the operation settles when it settles.
      await p.then(
        () => undefined,
        () => undefined,
      );
      return { result, rejection, events, clock, escaped };
    }
    for (let tries = 0; tries < 10; tries++) {
      try {
        await clock.runAll();
        break;
      } catch (e) {
        // A timer callback threw (an error that would have been uncaught on the real clock).
        escaped.push(e);
      }
    }
    for (let k = 0; k < 5 && result === undefined; k++) await clock.flush();
    return { result, rejection, events, clock, escaped };
  } finally {
    await new Promise<void>((resolve) => setImmediate(resolve));
    process.off('unhandledRejection', onEscape);
    process.off('uncaughtException', onEscape);
    for (const l of saved.rejection) process.on('unhandledRejection', l as (...args: unknown[]) => void);
    for (const l of saved.exception) process.on('uncaughtException', l as (...args: unknown[]) => void);
  }
}

/** A promise that resolves with `value` after `ms` on the test clock (aborts with the signal). */
export function after<T>(clock: TestClock, ms: number, value: T, signal?: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const cancel = clock.setTimer(() => resolve(value), ms);
    signal?.addEventListener(
      'abort',
      () => {
        cancel();
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

/** A promise that rejects with `error` after `ms` on the test clock (aborts with the signal). */
export function failAfter(clock: TestClock, ms: number, error: unknown, signal?: AbortSignal): Promise<never> {
  return new Promise<never>((_resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const cancel = clock.setTimer(() => reject(error), ms);
    signal?.addEventListener(
      'abort',
      () => {
        cancel();
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

/** The error code of a RunResult's failure (or 'ok'). */
export function outcomeCode(r: RunResult<unknown> | undefined): string {
  if (r === undefined) return 'never settled';
  if (r.outcome.ok) return 'ok';
  const e = r.outcome.error as { code?: unknown; message?: unknown };
  return typeof e?.code === 'string' ? e.code : `error: ${String(e?.message ?? e)}`;
}

/**
 * gRPC status codes restated as the HTTP statuses relent's policies name (one each, so a
 * policy's retryOn lists exactly what the source's retryableStatusCodes lists).
 */
export const GRPC_AS_STATUS = Object.freeze({
  OK: 200,
  CANCELLED: 499,
  INVALID_ARGUMENT: 400,
  DEADLINE_EXCEEDED: 504,
  ALREADY_EXISTS: 409,
  RESOURCE_EXHAUSTED: 429,
  INTERNAL: 500,
  UNAVAILABLE: 503,
  DATA_LOSS: 502,
});

// ---------------------------------------------------------------------------------------
// Hedging on the executor: attempts that answer after a while (or never), on the test clock.

export interface HedgeAttempt {
  /** When the attempt answers, ms after it started; absent: it never answers (only an abort ends it). */
  readonly at?: number;
  readonly status?: number;
  readonly headers?: Readonly<Record<string, string>>;
  /** Throws this instead of answering. */
  readonly throws?: unknown;
}

export interface HedgeRun {
  /** When each attempt started (ms on the test clock), in order. */
  readonly starts: readonly number[];
  readonly reason: string;
  /** The status of the answer the operation ended with (null: none). */
  readonly status: number | null;
  /** Attempts (1-based) whose signal was aborted. */
  readonly aborted: readonly number[];
  readonly result: RunResult<{ status: number; attempt: number }> | undefined;
}

/**
 * An operation whose attempt n follows script[n−1], under a policy that hedges, with a hedging
 * state whose extra-load bucket already holds `saved` hedges (default 10).
 */
export async function hedgeRun(
  policy: PolicySpec,
  script: readonly HedgeAttempt[],
  o: {
    readonly hedging?: HedgeState;
    readonly budget?: RetryBudget | null;
    readonly cancelAt?: number;
    readonly method?: string;
    readonly saved?: number;
  } = {},
): Promise<HedgeRun> {
  const p = policyOf(policy);
  const hedging = o.hedging ?? createHedgeState();
  if (o.hedging === undefined && p.hedge !== null) for (let k = 0; k < (o.saved ?? 10); k++) hedging.started(p.hedge);
  const starts: number[] = [];
  const aborted: number[] = [];
  const controller = new AbortController();
  const r = await runOnClock(
    async (ctx, clock) => {
      starts.push(clock.now());
      ctx.signal.addEventListener('abort', () => aborted.push(ctx.attempt), { once: true });
      const a = script[ctx.attempt - 1];
      if (a === undefined) throw new Error(`no script for attempt ${ctx.attempt}`);
      if (a.at === undefined) return new Promise<never>((_res, rej) => ctx.signal.addEventListener('abort', () => rej(ctx.signal.reason), { once: true }));
      if (a.throws !== undefined) return failAfter(clock, a.at, a.throws, ctx.signal);
      return after(clock, a.at, { status: a.status ?? 200, headers: a.headers, attempt: ctx.attempt }, ctx.signal);
    },
    { policy: p, hedging, budget: o.budget ?? null, method: o.method ?? 'GET', signal: controller.signal },
    (clock) => {
      if (o.cancelAt !== undefined) clock.setTimer(() => controller.abort(new Error('cancelled by the caller')), o.cancelAt);
    },
  );
  const value = r.result?.outcome.ok ? (r.result.outcome.value as { status: number }) : null;
  return {
    starts,
    reason: r.result?.reason ?? 'never settled',
    status: value?.status ?? null,
    aborted: [...aborted].sort((a, b) => a - b),
    result: r.result as HedgeRun['result'],
  };
}
