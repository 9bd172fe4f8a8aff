import type { RetryBudget } from '../core/budget.js';
import {
  afterRetry, attemptBudgetMs, beginAttempt, decide, preflight, startOperation, type OperationState,
} from '../core/decide.js';
import { errorClassOfCode } from '../core/error-codes.js';
import { RelentError, REASON_CODES } from '../core/errors.js';
import { ERROR_CLASSES, type Policy, type PolicySpec } from '../core/policy.js';
import type {
  AttemptEvent, Clock, DecisionResult, ErrorClass, Observation, Random, ResultEvent, SendState, TerminalReason,
} from '../core/types.js';
import { resolvePolicy } from '../presets/index.js';
import { systemClock, systemRandom } from './clock.js';

/** What each attempt of an operation receives. */
export interface AttemptContext {
  /** 1-based attempt number. */
  readonly attempt: number;
  /** Stable across the operation's attempts. */
  readonly operationId: string;
  /** New for every attempt: `${operationId}/attempt-${attempt}`. */
  readonly requestId: string;
  /** Aborts when the caller cancels, the attempt times out or the deadline passes. */
  readonly signal: AbortSignal;
  /** Time this attempt may take (min of attempt timeout and remaining deadline), ms. */
  readonly timeoutMs: number;
  /** Time left in the operation when the attempt started, ms. */
  readonly remainingMs: number;
}

/** An observation without timing: what a value or an error says about the attempt. */
export type Classified =
  | { readonly status: number; readonly headers?: Readonly<Record<string, string>>; readonly nbr?: number | null }
  | { readonly errorClass: ErrorClass; readonly sent?: SendState };

export type RelentEvent = AttemptEvent | ResultEvent;

export interface RunOptions<T> {
  /** A preset name, a policy spec, or a Policy. Default: relent's defaults. */
  readonly policy?: string | PolicySpec | Policy;
  readonly signal?: AbortSignal;
  /** Created before the first call when absent (never changes across attempts). */
  readonly operationId?: string;
  /** For idempotency defaults (R5) and events. */
  readonly method?: string;
  /** Normalised endpoint for events (no query, userinfo or fragment). */
  readonly endpoint?: string;
  readonly idempotencyKey?: string;
  /** Declares the operation safe (true) or unsafe (false) to repeat; beats method and key. */
  readonly idempotent?: boolean;
  /** This call's own deadline (ms from now), instead of the policy's. */
  readonly deadlineMs?: number;
  /** This call's own attempt timeout (ms), instead of the policy's. */
  readonly attemptTimeoutMs?: number;
  /** The shared retry budget (create one per client or dependency with createRetryBudget). */
  readonly budget?: RetryBudget | null;
  readonly clock?: Clock;
  readonly random?: Random;
  /** One event per attempt, then the result. Nothing is built when absent. */
  readonly onEvent?: (event: RelentEvent) => void;
  /** Maps a resolved value to an observation; `undefined` → the default (a `status` field, else 200). */
  readonly classifyValue?: (value: T) => Classified | undefined;
  /** Maps a thrown error to an observation; `undefined` → the default (error codes, else `error`). */
  readonly classifyError?: (error: unknown) => Classified | undefined;
  /** Reads the operation's real state after an unknown outcome (R6); its value is returned. */
  readonly stateCheck?: (ctx: AttemptContext) => Promise<T>;
}

/** Everything known when an operation ends. `run()` unwraps it; the CLI prints it. */
export interface RunResult<T> {
  readonly operationId: string;
  readonly reason: TerminalReason;
  readonly attempts: number;
  /** The last attempt's observation (null when no call was made). */
  readonly last: Observation | null;
  /** How the operation ends for the caller. */
  readonly outcome: { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: unknown };
  /** The state check's observation, when one ran. */
  readonly stateCheck: Classified | null;
  /** The wait a `defer` asks the durable queue for. */
  readonly delayMs: number | null;
}

let idCounter = 0;
const idPrefix = Math.floor(Math.random() * 0xffffffff).toString(36);
/** A process-unique operation id, cheap enough for the success path. */
export function newOperationId(): string {
  idCounter = (idCounter + 1) | 0;
  return `op-${idPrefix}-${(idCounter >>> 0).toString(36)}`;
}

const TIMEOUT_REASON = 'relent: attempt timed out';

function classifyValueDefault(value: unknown): Classified {
  if (typeof value === 'object' && value !== null) {
    const status = (value as { status?: unknown }).status;
    if (typeof status === 'number' && Number.isInteger(status) && status >= 100 && status <= 999) {
      const h = (value as { headers?: unknown }).headers;
      return status >= 400 && h ? { status, headers: pickHeaders(h) } : { status };
    }
  }
  return { status: 200 };
}

/** The hint headers of a Headers object or a plain record, lower-cased. */
function pickHeaders(h: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  const names = ['retry-after', 'date', 'ratelimit', 'ratelimit-reset', 'x-ratelimit-reset', 'ratelimit-policy'];
  if (typeof (h as { get?: unknown }).get === 'function') {
    for (const n of names) {
      const v = (h as { get(name: string): string | null }).get(n);
      if (v !== null && v !== undefined) out[n] = v;
    }
  } else if (typeof h === 'object' && h !== null) {
    for (const [k, v] of Object.entries(h as Record<string, unknown>)) {
      const lk = k.toLowerCase();
      if (names.includes(lk) && typeof v === 'string') out[lk] = v;
    }
  }
  return out;
}

function classifyErrorDefault(error: unknown): Classified {
  if (typeof error === 'object' && error !== null) {
    const own = (error as { errorClass?: unknown }).errorClass;
    if (typeof own === 'string' && own in ERROR_CLASSES) {
      const sent = (error as { sent?: unknown }).sent;
      return sent === 'not_sent' || sent === 'sent' || sent === 'unknown' ? { errorClass: own as ErrorClass, sent } : { errorClass: own as ErrorClass };
    }
  }
  const cls = errorClassOfCode(error);
  return { errorClass: cls ?? 'error' };
}

/**
 * One attempt in flight: the race between the operation, its timer and the caller's
 * signal. A class, so the success path allocates one object and no closures.
 */
class Attempt<T> implements AttemptContext {
  readonly attempt: number;
  readonly requestId: string;
  readonly timeoutMs: number;
  readonly remainingMs: number;
  readonly operationId: string;
  private controller: AbortController | null = null;
  private readonly callerSignal: AbortSignal | undefined;
  settled = false;
  timedOut = false;
  private resolve!: (o: AttemptOutcome<T>) => void;
  private cancelTimer: (() => void) | null = null;

  constructor(operationId: string, attempt: number, timeoutMs: number, remainingMs: number, callerSignal: AbortSignal | undefined) {
    this.operationId = operationId;
    this.attempt = attempt;
    this.requestId = `${operationId}/attempt-${attempt}`;
    this.timeoutMs = timeoutMs;
    this.remainingMs = remainingMs;
    this.callerSignal = callerSignal;
  }

  /** Created on first use: an operation that never reads it costs no AbortController. */
  get signal(): AbortSignal {
    if (this.controller === null) {
      this.controller = new AbortController();
      if (this.timedOut) this.controller.abort(new RelentError('ERR_DEADLINE_EXCEEDED', TIMEOUT_REASON));
      else if (this.callerSignal?.aborted) this.controller.abort(this.callerSignal.reason);
    }
    return this.controller.signal;
  }

  run(fn: (ctx: AttemptContext) => Promise<T>, clock: Clock): Promise<AttemptOutcome<T>> {
    return new Promise<AttemptOutcome<T>>((resolve) => {
      this.resolve = resolve;
      let p: Promise<T>;
      try {
        p = fn(this);
      } catch (error) {
        p = Promise.reject(error);
      }
      if (this.settled) return;
      this.cancelTimer = clock.setTimer(this.onTimer, this.timeoutMs);
      if (this.callerSignal) this.callerSignal.addEventListener('abort', this.onAbort);
      p.then(this.onValue, this.onError);
    });
  }

  private finish(o: AttemptOutcome<T>): void {
    if (this.settled) return;
    this.settled = true;
    if (this.cancelTimer) this.cancelTimer();
    if (this.callerSignal) this.callerSignal.removeEventListener('abort', this.onAbort);
    this.resolve(o);
  }

  private readonly onValue = (value: T): void => this.finish({ kind: 'value', value });
  private readonly onError = (error: unknown): void => this.finish({ kind: 'error', error });
  private readonly onTimer = (): void => {
    if (this.settled) return;
    this.timedOut = true;
    this.controller?.abort(new RelentError('ERR_DEADLINE_EXCEEDED', TIMEOUT_REASON));
    this.finish({ kind: 'timeout' });
  };
  private readonly onAbort = (): void => {
    if (this.settled) return;
    this.controller?.abort(this.callerSignal?.reason);
    this.finish({ kind: 'aborted' });
  };
}

type AttemptOutcome<T> =
  | { readonly kind: 'value'; readonly value: T }
  | { readonly kind: 'error'; readonly error: unknown }
  | { readonly kind: 'timeout' }
  | { readonly kind: 'aborted' };

/** Sleeps `ms` unless the signal aborts first; resolves true when it slept, false when cancelled. */
function wait(clock: Clock, ms: number, signal: AbortSignal | undefined): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise<boolean>((resolve) => {
    const onAbort = (): void => {
      cancel();
      resolve(false);
    };
    const cancel = clock.setTimer(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

const round = (ms: number): number => Math.round(ms * 1000) / 1000;

/**
 * Runs an operation under a policy and reports how it ended, without throwing for
 * operation failures. `run()` is the same with the outcome unwrapped.
 */
export async function execute<T>(fn: (ctx: AttemptContext) => Promise<T>, options: RunOptions<T> = {}): Promise<RunResult<T>> {
  const policy = resolvePolicy(options.policy);
  const clock = options.clock ?? systemClock;
  const random = options.random ?? systemRandom;
  const onEvent = options.onEvent;
  const signal = options.signal;
  const budget = options.budget ?? null;
  const operationId = options.operationId ?? newOperationId();
  const method = options.method ?? null;
  const endpoint = options.endpoint ?? null;
  const attemptTimeoutMs = options.attemptTimeoutMs;

  let state: OperationState = startOperation(policy, {
    now: clock.now(),
    method,
    idempotencyKey: options.idempotencyKey ?? null,
    idempotent: options.idempotent ?? null,
    deadlineMs: options.deadlineMs ?? null,
  });
  let last: Observation | null = null;
  let lastOutcome: AttemptOutcome<T> | null = null;

  const end = (reason: TerminalReason, d: DecisionResult | null, extra: Partial<RunResult<T>> = {}): RunResult<T> => {
    const outcome = extra.outcome ?? outcomeFor(reason, d, lastOutcome, last, operationId, state.attempt, signal);
    if (onEvent) {
      const ev: ResultEvent & { stateCheck?: Classified } = {
        type: 'result', operationId, status: last?.status ?? null, errorClass: last?.errorClass ?? null, reason, attempts: state.attempt,
      };
      if (extra.stateCheck) ev.stateCheck = extra.stateCheck;
      onEvent(ev);
    }
    return { operationId, reason, attempts: state.attempt, last, outcome, stateCheck: extra.stateCheck ?? null, delayMs: d?.delayMs ?? null };
  };

  for (;;) {
    if (signal?.aborted) return end('cancelled', null);
    let now = clock.now();
    const pre = preflight(state, now);
    if (pre) return end(pre.decision as TerminalReason, pre);
    state = beginAttempt(state);
    const remaining = state.deadlineAt - now;
    let timeoutMs = attemptBudgetMs(policy, state, now);
    if (attemptTimeoutMs !== undefined && attemptTimeoutMs > 0 && attemptTimeoutMs < timeoutMs) timeoutMs = attemptTimeoutMs;

    const attempt = new Attempt<T>(operationId, state.attempt, timeoutMs, remaining, signal);
    const outcome = await attempt.run(fn, clock);
    lastOutcome = outcome;
    now = clock.now();
    const elapsedMs = now - (state.deadlineAt - remaining);

    let obs: Observation;
    switch (outcome.kind) {
      case 'value': {
        const c = (options.classifyValue?.(outcome.value)) ?? classifyValueDefault(outcome.value);
        obs = { ...c, elapsedMs };
        break;
      }
      case 'error': {
        // An error after our own abort is the timeout or the cancellation, not a new fact.
        const c = signal?.aborted ? { errorClass: 'aborted' as const } : ((options.classifyError?.(outcome.error)) ?? classifyErrorDefault(outcome.error));
        obs = { ...c, elapsedMs };
        break;
      }
      case 'timeout':
        obs = { errorClass: 'timeout', sent: 'unknown', elapsedMs };
        break;
      case 'aborted':
        obs = { errorClass: 'aborted', elapsedMs };
        break;
    }
    last = obs;
    const d = decide(policy, state, obs, { now, wallNow: clock.wallNow(), random, budget });
    if (onEvent) onEvent(attemptEvent(operationId, state.attempt, method, endpoint, obs, remaining, d));

    switch (d.decision) {
      case 'return':
        return end('return', d);
      case 'retry': {
        state = afterRetry(state, d);
        if (d.delayMs! > 0 && !(await wait(clock, d.delayMs!, signal))) return end('cancelled', null);
        continue;
      }
      case 'check_state': {
        if (!options.stateCheck) return end('check_state', d);
        return end('check_state', d, await runStateCheck(options.stateCheck, options, policy, state, clock, operationId));
      }
      default:
        return end(d.decision as TerminalReason, d);
    }
  }
}

async function runStateCheck<T>(
  check: (ctx: AttemptContext) => Promise<T>, options: RunOptions<T>, policy: Policy, state: OperationState, clock: Clock, operationId: string,
): Promise<Partial<RunResult<T>>> {
  const now = clock.now();
  const remaining = state.deadlineAt - now;
  // The state must be read even when the deadline is spent: give it at least one attempt timeout.
  const timeoutMs = remaining > 0 ? attemptBudgetMs(policy, state, now) : (policy.attemptTimeoutMs ?? 1000);
  const a = new Attempt<T>(operationId, state.attempt, timeoutMs, remaining, options.signal);
  const o = await a.run(check, clock);
  if (o.kind === 'value') {
    const c = (options.classifyValue?.(o.value)) ?? classifyValueDefault(o.value);
    return { outcome: { ok: true, value: o.value }, stateCheck: c };
  }
  const c: Classified = o.kind === 'timeout' ? { errorClass: 'timeout' } : o.kind === 'aborted' ? { errorClass: 'aborted' }
    : ((options.classifyError?.(o.error)) ?? classifyErrorDefault(o.error));
  const error = new RelentError('ERR_UNKNOWN_OUTCOME', `Outcome unknown after attempt ${state.attempt}, and the state check failed (${'errorClass' in c ? c.errorClass : c.status})`, {
    reason: 'check_state', attempts: state.attempt, operationId, cause: o.kind === 'error' ? o.error : undefined,
  });
  return { outcome: { ok: false, error }, stateCheck: c };
}

function attemptEvent(operationId: string, attempt: number, method: string | null, endpoint: string | null, obs: Observation, remaining: number, d: DecisionResult): AttemptEvent {
  return {
    type: 'attempt',
    operationId,
    requestId: `${operationId}/attempt-${attempt}`,
    attempt,
    method,
    endpoint,
    status: obs.status ?? null,
    errorClass: obs.errorClass ?? null,
    elapsedMs: round(obs.elapsedMs),
    remainingMs: round(remaining),
    decision: d.decision,
    delayMs: d.delayMs,
    retryAfterMs: d.retryAfterMs,
    retryAfterValid: d.retryAfterValid,
  };
}

const MESSAGES: Partial<Record<string, string>> = {
  retry_after_over_cap: 'the server asked to wait longer than the policy allows',
  retry_after_past_deadline: 'the server asked to wait past the deadline',
  delay_past_deadline: 'the next wait does not fit in the deadline',
  deadline_spent: 'the deadline is spent',
  attempts_exhausted: 'no attempts left',
  budget_empty: 'the shared retry budget is empty',
  not_idempotent: 'the operation is not idempotent (send an idempotency key or declare it safe)',
  status_not_retryable: 'the status is not retryable',
  error_not_retryable: 'the error is not retryable',
  unknown_outcome: 'the request may have been applied; read the state before trying again',
  defer_long_wait: 'the wait is handed to a durable queue',
  retry_after_no_retry: 'the server said not to retry',
};

/**
 * How an operation ends for the caller (never a synthetic success): the last value
 * when a response arrived; the operation's own error when it threw; a RelentError
 * with a stable code when relent's own limits ended it (timeout, deadline, cancel,
 * unknown outcome, deferral) or no call was made.
 */
function outcomeFor<T>(
  reason: TerminalReason, d: DecisionResult | null, lastOutcome: AttemptOutcome<T> | null, last: Observation | null,
  operationId: string, attempts: number, signal: AbortSignal | undefined,
): RunResult<T>['outcome'] {
  if (lastOutcome?.kind === 'value' && reason !== 'check_state' && reason !== 'defer' && reason !== 'cancelled') return { ok: true, value: lastOutcome.value };
  if (lastOutcome?.kind === 'error' && reason !== 'cancelled' && reason !== 'check_state' && reason !== 'defer') {
    return { ok: false, error: lastOutcome.error };
  }
  if (reason === 'return') return { ok: false, error: new RelentError('ERR_INVALID_INPUT', 'internal: return without a value') };
  const code = REASON_CODES[reason];
  const what = last ? (last.status ?? last.errorClass) : 'no call made';
  const detail = d ? (MESSAGES[d.why] ?? d.why) : reason === 'cancelled' ? 'cancelled by the caller' : reason;
  const message = `${reason}: ${detail} (operation ${operationId}, ${attempts} attempt${attempts === 1 ? '' : 's'}, last: ${what})`;
  const error = new RelentError(d?.why === 'retry_after_over_cap' ? 'ERR_RETRY_AFTER_TOO_LONG' : code, message, {
    reason, attempts, operationId,
    cause: reason === 'cancelled' ? signal?.reason : lastOutcome?.kind === 'error' ? lastOutcome.error : undefined,
  });
  return { ok: false, error };
}

/**
 * Runs `fn` under a policy: deadline, per-attempt timeout, backoff, budget, events.
 * Resolves with the operation's value (the last real one when retries ran out);
 * rejects with the operation's own error, or a RelentError with a stable `code`.
 */
export async function run<T>(fn: (ctx: AttemptContext) => Promise<T>, options?: RunOptions<T>): Promise<T> {
  const r = await execute(fn, options);
  if (r.outcome.ok) return r.outcome.value;
  throw r.outcome.error;
}
