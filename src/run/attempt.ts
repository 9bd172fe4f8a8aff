// What the executor keeps per attempt (the context handed to the call), how an attempt's
// answer is subscribed to, the waits for a gate's turn, and run()'s defaults for a
// dependency (its hedging state, its guard and budget from run()'s own options).
import type { CircuitBreaker } from '../core/breaker.js';
import type { RetryBudget } from '../core/budget.js';
import { injectedError, injectedObservation, type ChaosInjection } from '../core/chaos.js';
import { describe, RelentError } from '../core/errors.js';
import { createHedgeState, type HedgeState } from '../core/hedge.js';
import type { EndCommand } from '../core/operation.js';
import type { Policy } from '../core/policy.js';
import type { Clock, DecisionResult, Observation } from '../core/types.js';
import { checkShared, createGuard, dependencyOf, type Guard } from './guard.js';
import { classifyErrorDefault, classifyValueDefault } from './classify.js';
import { ABORTED_OUTCOME, TIMEOUT_OUTCOME, ValueOutcome, type AttemptOutcome } from './outcome.js';
import type { AttemptContext, AttemptScope, Classified, ExecuteOptions, RunOptions, RunResult } from './types.js';

export const TIMEOUT_REASON = 'relent: attempt timed out';

/**
 * What an attempt function returned, as something to call `then` on: a promise or any
 * thenable is itself (its `then` is called once, with the settle callbacks; what it
 * hands them is the answer as is — the HTTP drivers' attempt handler is a thenable
 * answering with itself, which Promise.resolve would chase for ever); a plain value is
 * the answer. Reading `then` may throw (a getter): the caller catches it.
 */
export function thenableOf<T>(v: T | PromiseLike<T>): PromiseLike<T> {
  if (v instanceof Promise) return v;
  if (v !== null && (typeof v === 'object' || typeof v === 'function') && typeof (v as { then?: unknown }).then === 'function') return v as PromiseLike<T>;
  return Promise.resolve(v as T);
}

export const ignore = (): void => {};

/** How an injected fault or outcome is observed (see core/chaos.ts injectedObservation). */
export function injectedClassified(inj: Exclude<ChaosInjection, { kind: 'latency' }>): Classified {
  const o = injectedObservation(inj);
  if (o.status !== null && o.status !== undefined) return o.headers !== undefined ? { status: o.status, headers: o.headers } : { status: o.status };
  return { errorClass: o.errorClass!, sent: o.sent! };
}

export const TIMED_OUT: Classified = { errorClass: 'timeout', sent: 'unknown' };
export const ABORTED: Classified = { errorClass: 'aborted' };

/** How a wait for a slot or a token ended: `refused` carries the limit's own error (full queue, no token in time). */
export type WaitResult = { readonly result: 'ok' | 'deadline' | 'cancelled' } | { readonly result: 'refused'; readonly error: RelentError };

/**
 * Waits for a bulkhead or concurrency-limit slot, or a rate-limit token (the slow path),
 * bounded by the remaining deadline and the caller's signal. Returns how the wait ended;
 * a refusal is the limit's error with `code`.
 */
export async function waitFor(
  acquire: (signal: AbortSignal) => Promise<void>,
  code: string,
  clock: Clock,
  signal: AbortSignal | undefined,
  remainingMs: number,
): Promise<WaitResult> {
  if (signal?.aborted) return WAIT_CANCELLED;
  const controller = new AbortController();
  let why: 'deadline' | 'cancelled' | null = null;
  const onAbort = (): void => {
    why ??= 'cancelled';
    controller.abort();
  };
  signal?.addEventListener('abort', onAbort, { once: true });
  const cancelTimer = clock.setTimer(() => {
    why ??= 'deadline';
    controller.abort();
  }, remainingMs);
  try {
    await acquire(controller.signal);
    return WAIT_OK;
  } catch (error) {
    if (why !== null) return why === 'deadline' ? WAIT_DEADLINE : WAIT_CANCELLED;
    if (RelentError.is(error) && error.code === code) return { result: 'refused', error };
    throw error;
  } finally {
    cancelTimer();
    signal?.removeEventListener('abort', onAbort);
  }
}

const WAIT_OK: WaitResult = Object.freeze({ result: 'ok' });
const WAIT_DEADLINE: WaitResult = Object.freeze({ result: 'deadline' });
const WAIT_CANCELLED: WaitResult = Object.freeze({ result: 'cancelled' });

/** The decision of an attempt cut because the caller cancelled its operation (hedging: the others in flight). */
export const CANCELLED_ATTEMPT: DecisionResult = Object.freeze({
  decision: 'cancelled',
  why: 'cancelled',
  delayMs: null,
  retryAfterMs: null,
  retryAfterValid: null,
  budgetCost: 0,
});

/** Hedging states kept by relent: one per dependency name (or per policy when none is named), at most 10 000. */
const HEDGE_STATES = new Map<string, HedgeState>();
const HEDGE_STATES_BY_POLICY = new WeakMap<Policy, HedgeState>();

/** The hedging state of an operation whose policy hedges: the caller's, or relent's one for its dependency (or policy). */
export function hedgingOf(o: Pick<RunOptions<unknown>, 'hedging' | 'dependency'>, policy: Policy): HedgeState | null {
  if (o.hedging !== undefined) {
    const h = o.hedging as { started?: unknown; delayMs?: unknown } | null;
    if (h !== null && (typeof h !== 'object' || typeof h.started !== 'function' || typeof h.delayMs !== 'function')) {
      throw new RelentError('ERR_INVALID_INPUT', `Expected \`hedging\` to be made by createHedgeState() (shared per dependency), got ${describe(o.hedging)}`, {
        field: 'hedging',
      });
    }
    return o.hedging;
  }
  if (typeof o.dependency === 'string' && o.dependency.length > 0) {
    let h = HEDGE_STATES.get(o.dependency);
    if (h === undefined) {
      if (HEDGE_STATES.size >= 10_000) HEDGE_STATES.delete(HEDGE_STATES.keys().next().value as string);
      h = createHedgeState();
      HEDGE_STATES.set(o.dependency, h);
    }
    return h;
  }
  let h = HEDGE_STATES_BY_POLICY.get(policy);
  if (h === undefined) {
    h = createHedgeState();
    HEDGE_STATES_BY_POLICY.set(policy, h);
  }
  return h;
}

/** What the executor keeps of an attempt in flight (the context it handed to the call). */
export interface AttemptHandle extends AttemptContext {
  /** The attempt has settled (answered, failed, timed out or been cancelled). */
  done: boolean;
  /** When it started (the executor's clock). */
  callStart: number;
  /** Its tracing scope, if any. */
  aScope: AttemptScope | null;
  /** The concurrency limit's generation when it started. */
  generation: number;
  /** A hedge (sent while another attempt of the operation was in flight). */
  isHedge: boolean;
  /** Its own timer, when several attempts may be in flight (hedging). */
  cancel: (() => void) | null;
  /** What the policy's chaos injected into it (null: a plain call). */
  inject: ChaosInjection | null;
  /** The timer of an injected latency, until the call is made. */
  delay: (() => void) | null;
  abort(reason: unknown): void;
  /** Aborts for the attempt timeout; the error (and its stack) is made only if someone holds the signal. */
  abortForTimeout(): void;
}

/** What an attempt's signal is aborted with when its time is up. */
function timeoutError(): RelentError {
  return new RelentError('ERR_DEADLINE_EXCEEDED', TIMEOUT_REASON);
}

/** A signal for an attempt, made when first read: aborted already if the attempt timed out or the caller cancelled. */
export function attemptSignal(h: { controller: AbortController | null; timedOut: boolean }, callerSignal: AbortSignal | undefined): AbortSignal {
  if (h.controller === null) {
    h.controller = new AbortController();
    if (h.timedOut) h.controller.abort(timeoutError());
    else if (callerSignal?.aborted) h.controller.abort(callerSignal.reason);
  }
  return h.controller.signal;
}

/** The attempt's time is up: its signal, if one was read, is aborted (one read later is aborted already). */
export function timeOutAttempt(h: { controller: AbortController | null; timedOut: boolean }): void {
  h.timedOut = true;
  if (h.controller !== null) h.controller.abort(timeoutError());
}

/**
 * The context of an attempt after the first (the operation's Runner is the first
 * attempt's context itself: one object less on the success path). Its signal and
 * requestId are built only when read.
 */
export class AttemptCtx implements AttemptHandle {
  controller: AbortController | null = null;
  done = false;
  timedOut = false;
  callStart = 0;
  aScope: AttemptScope | null = null;
  generation = 0;
  isHedge = false;
  cancel: (() => void) | null = null;
  inject: ChaosInjection | null = null;
  delay: (() => void) | null = null;

  constructor(
    private readonly owner: { readonly operationId: string },
    private readonly callerSignal: AbortSignal | undefined,
    readonly attempt: number,
    readonly timeoutMs: number,
    readonly remainingMs: number,
  ) {}

  get operationId(): string {
    return this.owner.operationId;
  }

  get requestId(): string {
    return `${this.operationId}/attempt-${this.attempt}`;
  }

  /** Created on first use: an operation that never reads it costs no AbortController. */
  get signal(): AbortSignal {
    return attemptSignal(this, this.callerSignal);
  }

  abort(reason: unknown): void {
    this.controller?.abort(reason);
  }

  abortForTimeout(): void {
    timeOutAttempt(this);
  }
}

export const enum Phase {
  Idle,
  Calling,
  Waiting,
  Slot,
  Done,
}

/** How the last attempt settled (the payload is its value or error). */
export const enum Settled {
  None,
  Value,
  Error,
  Timeout,
  Aborted,
  Injected,
}

export const CRASHED: EndCommand = Object.freeze({ kind: 'end', reason: 'not_retryable', why: null, decision: null });

/** A 200 nobody timed: the observation of a plain success when no one watches (no allocation). */
export const UNTIMED_200: Observation = Object.freeze({ status: 200, errorClass: null, sent: undefined, headers: undefined, nbr: null, elapsedMs: 0 });

type FleetFields = Pick<RunOptions<unknown>, 'fleet' | 'dependency'>;

/** The fleet's budget of `dependency` (none without a fleet, a dependency or a policy budget). */
export function fleetBudget(o: FleetFields, policy: Policy): RetryBudget | null {
  const fleet = o.fleet;
  if (fleet === undefined || fleet === null || policy.budget === null) return null;
  return fleet.budget(dependencyOf(o), policy.budget);
}

/**
 * The operation's guard: the driver's, or one made by createGuard() from run()'s own
 * options — the objects it was given (made once per dependency and shared), a breaker
 * spec with a fleet (the fleet's breaker of `dependency`); null when nothing guards it.
 */
export function guardOf(o: ExecuteOptions<unknown>, clock: Clock): Guard | null {
  if (o.guard != null) return o.guard;
  if (o.breaker == null && o.bulkhead == null && o.concurrencyLimit == null && o.rateLimiter == null) return null;
  checkShared('bulkhead', o.bulkhead, 'createBulkhead');
  checkShared('concurrencyLimit', o.concurrencyLimit, 'createConcurrencyLimit');
  checkShared('rateLimiter', o.rateLimiter, 'createRateLimiter');
  const b = o.breaker;
  if (b != null && typeof (b as CircuitBreaker).tryPass !== 'function' && o.fleet == null) {
    throw new RelentError('ERR_INVALID_INPUT', 'Expected `breaker` to be a CircuitBreaker (a breaker spec needs `fleet` and `dependency`)', {
      field: 'breaker',
    });
  }
  return createGuard({
    dependency: o.dependency ?? null,
    fleet: o.fleet ?? null,
    breaker: b ?? null,
    rateLimit: o.rateLimiter ?? null,
    bulkhead: o.bulkhead ?? null,
    concurrencyLimit: o.concurrencyLimit ?? null,
    clock,
  });
}

/** What an attempt observed, by the caller's classifiers or the defaults (may throw: the executor ends the operation with it). */
export function classifyAttempt<T>(
  options: ExecuteOptions<T>,
  policy: Policy,
  aborted: boolean,
  ctx: AttemptContext,
  kind: Settled,
  payload: unknown,
): Classified {
  switch (kind) {
    case Settled.Value:
      return options.classifyValue?.(payload as T, policy) ?? classifyValueDefault(payload);
    case Settled.Error:
      // An error after the caller's abort is the cancellation, not a new fact.
      return aborted ? ABORTED : (options.classifyError?.(payload) ?? classifyErrorDefault(payload));
    case Settled.Timeout:
      return options.classifyTimeout?.(ctx) ?? TIMED_OUT;
    case Settled.Injected:
      return injectedClassified(payload as Exclude<ChaosInjection, { kind: 'latency' }>);
    default:
      return ABORTED;
  }
}

/** How the last attempt ended, for the outcome (built only off the success path). */
export function lastOutcomeOf<T>(settled: Settled, payload: unknown): AttemptOutcome<T> | null {
  switch (settled) {
    case Settled.Value:
      return new ValueOutcome(payload as T);
    case Settled.Error:
      return { kind: 'error', error: payload };
    case Settled.Timeout:
      return TIMEOUT_OUTCOME;
    case Settled.Aborted:
      return ABORTED_OUTCOME;
    case Settled.Injected:
      return { kind: 'error', error: injectedError(payload as Exclude<ChaosInjection, { kind: 'latency' }>) };
    default:
      return null;
  }
}

/**
 * How a state check ends the operation: its answer is the result (with what it
 * observed), or ERR_UNKNOWN_OUTCOME when it failed too; a classifier that throws ends
 * it with its error.
 */
export function stateCheckEnd<T>(
  options: ExecuteOptions<T>,
  policy: Policy,
  kind: Settled,
  payload: unknown,
  attempts: number,
  operationId: string,
): Partial<RunResult<T>> {
  let c: Classified;
  try {
    c =
      kind === Settled.Value
        ? (options.classifyValue?.(payload as T, policy) ?? classifyValueDefault(payload))
        : kind === Settled.Timeout
          ? { errorClass: 'timeout' }
          : kind === Settled.Aborted
            ? { errorClass: 'aborted' }
            : (options.classifyError?.(payload) ?? classifyErrorDefault(payload));
  } catch (error) {
    return { outcome: { ok: false, error } };
  }
  if (kind === Settled.Value) return { outcome: { ok: true, value: payload as T }, stateCheck: c };
  const error = new RelentError(
    'ERR_UNKNOWN_OUTCOME',
    `Outcome unknown after attempt ${attempts}, and the state check failed (${'errorClass' in c ? c.errorClass : c.status})`,
    {
      reason: 'check_state',
      attempts,
      operationId,
      cause: kind === Settled.Error ? payload : undefined,
    },
  );
  return { outcome: { ok: false, error }, stateCheck: c };
}
