import { breakerOutcome, type BreakerSpec, type CircuitBreaker } from '../core/breaker.js';
import { safeEndpoint } from '../core/endpoint.js';
import type { RetryBudget } from '../core/budget.js';
import { attemptLimitMs, isPlainAnswer } from '../core/decide.js';
import {
  HEDGE_LOST, operationAttemptTimeoutMs, operationDeadlineMs, OperationMachine, type CallCommand, type Command, type EndCommand, type HedgeCommand, type Operation, type SlotRefusal,
} from '../core/operation.js';
import { createHedgeState, type HedgeState } from '../core/hedge.js';
import { observeRateAnswer } from '../core/token-bucket.js';
import { injectedError, injectedObservation, type ChaosInjection } from '../core/chaos.js';
import { attemptEvent } from '../core/events.js';
import { limitDropped } from '../core/concurrency.js';
import type { Fleet } from '../core/fleet.js';
import { describe, RelentError, REASON_CODES } from '../core/errors.js';
import type { Policy, PolicySpec, PresetName } from '../core/policy.js';
import type {
  AttemptEvent, Clock, DecisionResult, DecisionWhy, ErrorClass, Observation, Random, ResultEvent, SendState, TerminalReason,
} from '../core/types.js';
import { resolvePolicy } from '../presets/index.js';
import type { Bulkhead } from './bulkhead.js';
import type { ConcurrencyLimit } from './concurrency-limit.js';
import type { RateLimiter } from './rate-limiter.js';
import { classifyErrorDefault, classifyValueDefault, noticeClientRetries, observedHeaders, OK_200 } from './classify.js';
import { clearTimerRecord, setTimerRecord, systemClock, systemRandom, turnNow, type TimerRecord } from '../shared/clock.js';

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
  | {
    readonly status: number;
    /**
     * The answer's headers (only the hint headers are read: Retry-After, Date, RateLimit…): a
     * record (any case; node:http's arrays are joined) or anything with `get(name)`
     * (a fetch Headers, axios's AxiosHeaders).
     */
    readonly headers?: Readonly<Record<string, string | readonly string[] | undefined>> | { get(name: string): unknown };
    readonly nbr?: number | null;
  }
  | { readonly errorClass: ErrorClass; readonly sent?: SendState };

export type RelentEvent = AttemptEvent | ResultEvent;

/**
 * An attempt: called with the attempt's context, it answers with a value, a promise or
 * any thenable of one, or throws (`Promise.resolve` semantics: a plain value is the
 * answer, a synchronous throw is a failed attempt like a rejection).
 */
export type AttemptFn<T> = (ctx: AttemptContext) => T | PromiseLike<T>;

/**
 * Observes an operation from inside the executor, so that a tracer can open a span
 * when a call starts and keep it active while the call runs (context propagation).
 * Events arrive only when an attempt has ended; this hook is told before. Absent →
 * nothing is called, built or allocated. relent/otel implements it.
 */
export interface Instrumentation {
  /** At the operation's start (before the breaker, the bulkhead or the first call). */
  operation(info: OperationInfo): OperationScope;
  /**
   * Optional: a unit of work that holds operations (an auction and its partner calls).
   * Operations started inside `scope.run(...)` are its children.
   */
  work?(info: WorkInfo): WorkScope;
}

/** The drivers that run operations (see `forDriver` in run/instrument.ts). */
export type DriverName = 'client.fetch' | 'interceptor' | 'exchange.partner' | 'exchange.notice' | 'delivery';

/** Span attributes a driver adds: closed names, no secrets (ids are fine on spans, never on metrics). */
export type InstrumentationAttributes = Readonly<Record<string, string | number | boolean>>;

export interface OperationInfo {
  readonly operationId: string;
  readonly method: string | null;
  readonly endpoint: string | null;
  /** The driver running the operation; absent for a plain run()/execute(). */
  readonly driver?: DriverName;
  /** The driver's own span attributes (a partner's name, a delivery batch's id and size). */
  readonly attributes?: InstrumentationAttributes;
}

export interface WorkInfo {
  /** What the work is: `auction`. */
  readonly name: string;
  readonly attributes?: InstrumentationAttributes;
}

export interface WorkScope {
  /** Runs `fn(arg)` in the work's context: operations it starts are the work's children. */
  run<A, R>(fn: (arg: A) => R, arg: A): R;
  /** Once, when the work is done: `error` names what failed (null: it succeeded). */
  end(outcome: { readonly error: string | null; readonly attributes?: InstrumentationAttributes }): void;
}

export interface OperationScope {
  /**
   * Just before call number `attempt` is made (after the breaker and the bulkhead let it
   * through); `ctx` is the call's context (its requestId, remainingMs, timeoutMs).
   */
  attempt(attempt: number, ctx: Pick<AttemptContext, 'requestId' | 'remainingMs' | 'timeoutMs'>): AttemptScope;
  /** Runs the state check (after an unknown outcome) in the operation's context. */
  run<A, R>(fn: (arg: A) => R, arg: A): R;
  /** Once, when the operation ends, with its result event. */
  end(event: ResultEvent): void;
}

export interface AttemptScope {
  /** Makes the call: `fn(arg)`, inside the attempt's context (e.g. with its span active). */
  run<A, R>(fn: (arg: A) => R, arg: A): R;
  /** Once, when the attempt has settled and been decided, with its attempt event. */
  end(event: AttemptEvent): void;
}

export interface RunOptions<T> {
  /** A preset name, a policy spec, or a Policy. Default: relent's defaults. */
  readonly policy?: PresetName | PolicySpec | Policy;
  readonly signal?: AbortSignal;
  /** Created before the first call when absent (never changes across attempts). */
  readonly operationId?: string;
  /** For idempotency defaults and events. */
  readonly method?: string;
  /** Normalised endpoint for events (no query, userinfo or fragment). */
  readonly endpoint?: string;
  readonly idempotencyKey?: string;
  /** Declares the operation safe (true) or unsafe (false) to repeat; beats method and key. */
  readonly idempotent?: boolean;
  /** This call's own deadline (ms from now), instead of the policy's (longer or shorter). */
  readonly deadlineMs?: number;
  /**
   * The deadline this call was handed by its caller (ms from now; e.g. what is left of
   * an incoming request's): the operation ends by then, whatever its own deadline.
   */
  readonly callerDeadlineMs?: number;
  /**
   * When the caller already read `clock.now()` for this call (a deadline it computed from
   * that reading): the operation starts there. Without it, the executor shares one
   * reading of the system clock, in whole ms, among the calls started in the same turn of
   * the event loop, which may be a few ms old on a busy loop: fine for a 5 s deadline, not
   * for a 100 ms auction, whose partners must get every ms they were given. Ignored when
   * it is not a number or is later than now.
   */
  readonly startedAt?: number;
  /** This call's own attempt timeout (ms), instead of the policy's (longer or shorter). */
  readonly attemptTimeoutMs?: number;
  /** The shared retry budget (create one per client or dependency with createRetryBudget). */
  readonly budget?: RetryBudget | null;
  readonly clock?: Clock;
  readonly random?: Random;
  /** One event per attempt, then the result. Nothing is built when absent. */
  readonly onEvent?: (event: RelentEvent) => void;
  /**
   * Maps a resolved value to an observation; `undefined` → the default (a `status` field,
   * else 200). Gets the operation's resolved policy, so a driver needs no closure per call.
   */
  readonly classifyValue?: (value: T, policy: Policy) => Classified | undefined;
  /** Maps a thrown error to an observation; `undefined` → the default (error codes, else `error`). */
  readonly classifyError?: (error: unknown) => Classified | undefined;
  /**
   * Classifies an attempt that hit its timeout; `undefined` → `timeout` with an unknown
   * outcome. A driver that knows the request was never written (still connecting) can
   * say `{ errorClass: 'connect_timeout', sent: 'not_sent' }`.
   */
  readonly classifyTimeout?: (ctx: AttemptContext) => Classified | undefined;
  /** Reads the operation's real state after an unknown outcome; its value is returned. */
  readonly stateCheck?: AttemptFn<T>;
  /**
   * The dependency's circuit breaker: asked before every call (refused → no call,
   * terminal `circuit_open`, ERR_CIRCUIT_OPEN); told every call's outcome. Share one per dependency.
   * With `fleet` and `dependency`, `true` or a breaker spec takes the fleet's breaker of the dependency.
   */
  readonly breaker?: CircuitBreaker | BreakerSpec | true | null;
  /**
   * A fleet (relent/fleet `createRedisFleet()`) and the dependency's name in it: unless
   * `budget` is given, the policy's budget is the one the fleet shares for `dependency`.
   */
  readonly fleet?: Fleet | null;
  readonly dependency?: string;
  /**
   * The dependency's bulkhead: a slot is held for each call, waited for (abortable,
   * within the deadline) when none is free. A full queue ends the operation with terminal
   * `bulkhead_full` and ERR_BULKHEAD_FULL. Share one per dependency.
   */
  readonly bulkhead?: Bulkhead | null;
  /**
   * The dependency's adaptive concurrency limit (createConcurrencyLimit), in place of a
   * fixed bulkhead: a slot is held for each call and the limit learns from how it ended.
   * Over the limit a call waits in its queue (abortable, within the deadline); a full
   * queue ends the operation with terminal `concurrency_limited` (ERR_CONCURRENCY_LIMITED).
   */
  readonly concurrencyLimit?: ConcurrencyLimit | null;
  /**
   * The dependency's rate limit (createRateLimiter, or around relent/fleet's shared one): a
   * token is taken before each call, waited for in line within maxWaitMs and the deadline;
   * one that cannot come in time ends the operation with terminal `rate_limited`
   * (ERR_RATE_LIMITED). Throttling answers and RateLimit fields lower or cap it.
   */
  readonly rateLimiter?: RateLimiter | null;
  /**
   * The dependency's hedging state (createHedgeState), for a policy with `hedge`. Default:
   * one per `dependency` (or per policy when no dependency is named), kept by relent; null: no hedging.
   */
  readonly hedging?: HedgeState | null;
  /** Tracing hooks (see relent/otel). Nothing is called when absent. */
  readonly instrumentation?: Instrumentation | null;
}

/** Everything known when an operation ends. `run()` unwraps it; the CLI prints it. */
export interface RunResult<T> {
  readonly operationId: string;
  readonly reason: TerminalReason;
  /** Why, one level finer (the ending decision's `why`; null when the caller cancelled between attempts or a slot was refused). */
  readonly why: DecisionWhy | null;
  readonly attempts: number;
  /** The last attempt's observation (null when no call was made). */
  readonly last: Observation | null;
  /** How the operation ends for the caller. */
  readonly outcome: { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: unknown };
  /** The state check's observation, when one ran. */
  readonly stateCheck: Classified | null;
  /** The wait a `defer` asks the durable queue for. */
  readonly delayMs: number | null;
  /** The server's asked wait (Retry-After or a RateLimit field) seen by the last decision, ms; null when none. */
  readonly retryAfterMs: number | null;
  /** The operation's time left when it ended (ms, negative once past the deadline): what a driver may still spend, e.g. reading the body. */
  readonly remainingMs: number;
  /** The operation's deadline, ms from its start (the call's own or the policy's, within its caller's). */
  readonly deadlineMs: number;
}

let idCounter = 0;
const idPrefix = Math.floor(Math.random() * 0xffffffff).toString(36);
/** A process-unique operation id, cheap enough for the success path. */
export function newOperationId(): string {
  idCounter = (idCounter + 1) | 0;
  return `op-${idPrefix}-${(idCounter >>> 0).toString(36)}`;
}

const TIMEOUT_REASON = 'relent: attempt timed out';

/**
 * What an attempt function returned, as something to call `then` on: a promise or any
 * thenable is itself (its `then` is called once, with the settle callbacks; what it
 * hands them is the answer as is — the HTTP drivers' attempt handler is a thenable
 * answering with itself, which Promise.resolve would chase for ever); a plain value is
 * the answer. Reading `then` may throw (a getter): the caller catches it.
 */
function thenableOf<T>(v: T | PromiseLike<T>): PromiseLike<T> {
  if (v instanceof Promise) return v;
  if (v !== null && (typeof v === 'object' || typeof v === 'function') && typeof (v as { then?: unknown }).then === 'function') return v as PromiseLike<T>;
  return Promise.resolve(v as T);
}

const ignore = (): void => {};

/** How an injected fault or outcome is observed (see core/chaos.ts injectedObservation). */
function injectedClassified(inj: Exclude<ChaosInjection, { kind: 'latency' }>): Classified {
  const o = injectedObservation(inj);
  if (o.status !== null && o.status !== undefined) return o.headers !== undefined ? { status: o.status, headers: o.headers } : { status: o.status };
  return { errorClass: o.errorClass!, sent: o.sent! };
}

type AttemptOutcome<T> =
  | { readonly kind: 'value'; readonly value: T }
  | { readonly kind: 'error'; readonly error: unknown }
  | { readonly kind: 'timeout' }
  | { readonly kind: 'aborted' };

const TIMED_OUT: Classified = { errorClass: 'timeout', sent: 'unknown' };
const ABORTED: Classified = { errorClass: 'aborted' };

/**
 * An observation with every field present, in one order: decide() reads absent fields,
 * and objects of one shape keep those reads fast (a spread-built object made decide()
 * 40x slower on the success path).
 */
function observation(c: Classified, elapsedMs: number): Observation {
  const r = c as { status?: number; errorClass?: ErrorClass; sent?: SendState; headers?: unknown; nbr?: number | null };
  return new ObservationRecord(r.status ?? null, r.errorClass ?? null, r.sent ?? undefined, r.headers == null ? undefined : observedHeaders(r.headers), r.nbr ?? null, elapsedMs);
}

/** An Observation made by `new` (a plain object all the same): see RunResultRecord. */
const ObservationRecord = function ObservationRecord(
  this: Record<string, unknown>, status: number | null, errorClass: ErrorClass | null, sent: SendState | undefined, headers: Readonly<Record<string, string>> | undefined,
  nbr: number | null, elapsedMs: number,
): void {
  this.status = status;
  this.errorClass = errorClass;
  this.sent = sent;
  this.headers = headers;
  this.nbr = nbr;
  this.elapsedMs = elapsedMs;
} as unknown as new (
  status: number | null, errorClass: ErrorClass | null, sent: SendState | undefined, headers: Readonly<Record<string, string>> | undefined, nbr: number | null, elapsedMs: number,
) => Observation;
ObservationRecord.prototype = Object.prototype;

/** A successful outcome made by `new` (a plain object all the same): see RunResultRecord. */
const OkOutcome = function OkOutcome(this: Record<string, unknown>, value: unknown): void {
  this.ok = true;
  this.value = value;
} as unknown as new <T>(value: T) => { readonly ok: true; readonly value: T };
OkOutcome.prototype = Object.prototype;

/** How the last attempt ended with a value (made by `new`: see RunResultRecord). */
class ValueOutcome<T> {
  readonly kind = 'value' as const;
  constructor(readonly value: T) {}
}

/** How a wait for a slot or a token ended: `refused` carries the limit's own error (full queue, no token in time). */
type WaitResult = { readonly result: 'ok' | 'deadline' | 'cancelled' } | { readonly result: 'refused'; readonly error: RelentError };

/**
 * Waits for a bulkhead or concurrency-limit slot, or a rate-limit token (the slow path),
 * bounded by the remaining deadline and the caller's signal. Returns how the wait ended;
 * a refusal is the limit's error with `code`.
 */
async function waitFor(
  acquire: (signal: AbortSignal) => Promise<void>, code: string, clock: Clock, signal: AbortSignal | undefined, remainingMs: number,
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
const CANCELLED_ATTEMPT: DecisionResult = Object.freeze({
  decision: 'cancelled', why: 'cancelled', delayMs: null, retryAfterMs: null, retryAfterValid: null, budgetCost: 0,
});

/** Hedging states kept by relent: one per dependency name (or per policy when none is named), at most 10 000. */
const HEDGE_STATES = new Map<string, HedgeState>();
const HEDGE_STATES_BY_POLICY = new WeakMap<Policy, HedgeState>();

/** The hedging state of an operation whose policy hedges: the caller's, or relent's one for its dependency (or policy). */
/**
 * The limits are objects made once per dependency and shared (createBulkhead,
 * createConcurrencyLimit, createRateLimiter); their options given here instead would
 * fail at the first call with a TypeError: refused at once, naming the field.
 */
function checkLimiters(o: Pick<RunOptions<unknown>, 'bulkhead' | 'concurrencyLimit' | 'rateLimiter'>): void {
  const made: [string, unknown, string][] = [['bulkhead', o.bulkhead, 'createBulkhead'], ['concurrencyLimit', o.concurrencyLimit, 'createConcurrencyLimit'], ['rateLimiter', o.rateLimiter, 'createRateLimiter']];
  for (const [field, v, maker] of made) {
    if (v == null) continue;
    const x = v as { tryAcquire?: unknown; acquire?: unknown; release?: unknown };
    if (typeof x.tryAcquire !== 'function' || typeof x.acquire !== 'function' || (field !== 'rateLimiter' && typeof x.release !== 'function')) {
      throw new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be made by ${maker}() (shared per dependency), got ${describe(v)}`, { field });
    }
  }
}

function hedgingOf(o: Pick<RunOptions<unknown>, 'hedging' | 'dependency'>, policy: Policy): HedgeState | null {
  if (o.hedging !== undefined) {
    const h = o.hedging as { started?: unknown; delayMs?: unknown } | null;
    if (h !== null && (typeof h !== 'object' || typeof h.started !== 'function' || typeof h.delayMs !== 'function')) {
      throw new RelentError('ERR_INVALID_INPUT', `Expected \`hedging\` to be made by createHedgeState() (shared per dependency), got ${describe(o.hedging)}`, { field: 'hedging' });
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
interface AttemptHandle extends AttemptContext {
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

/** A signal for an attempt, made when first read: aborted already if the attempt timed out or the caller cancelled. */
function attemptSignal(h: { controller: AbortController | null; timedOut: boolean }, callerSignal: AbortSignal | undefined): AbortSignal {
  if (h.controller === null) {
    h.controller = new AbortController();
    if (h.timedOut) h.controller.abort(new RelentError('ERR_DEADLINE_EXCEEDED', TIMEOUT_REASON));
    else if (callerSignal?.aborted) h.controller.abort(callerSignal.reason);
  }
  return h.controller.signal;
}

/**
 * The context of an attempt after the first (the operation's Runner is the first
 * attempt's context itself: one object less on the success path). Its signal and
 * requestId are built only when read.
 */
class AttemptCtx implements AttemptHandle {
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
    this.timedOut = true;
    if (this.controller !== null) this.controller.abort(new RelentError('ERR_DEADLINE_EXCEEDED', TIMEOUT_REASON));
  }
}

const enum Phase { Idle, Calling, Waiting, Slot, Done }

/** How the last attempt settled (the payload is its value or error). */
const enum Settled { None, Value, Error, Timeout, Aborted, Injected }

const CRASHED: EndCommand = Object.freeze({ kind: 'end', reason: 'not_retryable', why: null, decision: null });

/** A 200 nobody timed: the observation of a plain success when no one watches (no allocation). */
const UNTIMED_200: Observation = Object.freeze({ status: 200, errorClass: null, sent: undefined, headers: undefined, nbr: null, elapsedMs: 0 });

/**
 * One operation in flight: the core's operation state machine (createOperation) decides
 * every step; this class only carries its commands out on the clock it is given —
 * calls with a timer and the caller's signal racing them, waits, the breaker and the
 * bulkhead, events. It is driven by callbacks rather than async/await, so that the
 * success path costs the operation's own promise and one more, not a chain of them;
 * on the system clock it is its own lazy timer and reads the clock once per turn.
 */
class Runner<T> implements TimerRecord, AttemptHandle {
  readonly policy: Policy;
  private readonly clock: Clock;
  /** The system clock: timers are this object itself (no allocation), `now` is read once per turn. */
  private readonly system: boolean;
  private readonly callerSignal: AbortSignal | undefined;
  private readonly budget: RetryBudget | null;
  private readonly breaker: CircuitBreaker | null;
  private readonly bulkhead: Bulkhead | null;
  private readonly limit: ConcurrencyLimit | null;
  private readonly rate: RateLimiter | null;
  /** The dependency's hedging state when the policy hedges (attempts then have timers of their own). */
  private readonly hedging: HedgeState | null;
  /** Attempts in flight, when hedging. */
  private flying: AttemptHandle[] | null = null;
  private cancelHedge: (() => void) | null = null;
  private readonly scope: OperationScope | null;
  /** The endpoint for events (never a query, userinfo or fragment), made on first use. */
  private safe: string | null | undefined = undefined;
  opId: string | null;
  /**
   * The core's operation, made at the start; or, on the success path's shortcut, only if
   * the first attempt needs more than the core's plain-answer rule (see start()).
   */
  private op: Operation | undefined = undefined;
  startedAt = 0;
  phase = Phase.Idle;
  ctx: AttemptHandle | null = null;
  // The first attempt's context (this object): see AttemptHandle.
  readonly attempt = 1;
  timeoutMs = 0;
  remainingMs = 0;
  done = false;
  timedOut = false;
  controller: AbortController | null = null;
  callStart = 0;
  aScope: AttemptScope | null = null;
  generation = 0;
  isHedge = false;
  cancel: (() => void) | null = null;
  inject: ChaosInjection | null = null;
  delay: (() => void) | null = null;
  private checking = false;
  private cancelTimer: (() => void) | null = null;
  private last: Observation | null = null;
  private settled = Settled.None;
  private payload: unknown = undefined;
  private abortListener: (() => void) | null = null;
  /** What the caller's event listener threw first, if it did. */
  private thrown: { readonly error: unknown } | null = null;
  timerDue = 0;
  timerHandle: object | null = null;
  timerSet = false;
  timerQueued = 0;
  timerNext: TimerRecord | null = null;
  settleRun: ((r: RunResult<T>) => void) | null = null;
  resolveValue: ((v: T) => void) | null = null;
  rejectValue: ((e: unknown) => void) | null = null;

  constructor(private readonly fn: AttemptFn<T>, private readonly options: RunOptions<T>, policy?: Policy) {
    this.callerSignal = options.signal;
    this.policy = policy ?? resolvePolicy(options.policy);
    const clock = options.clock;
    this.clock = clock ?? systemClock;
    this.system = clock === undefined || clock === systemClock;
    this.budget = options.budget !== undefined ? options.budget : options.fleet == null ? null : fleetBudget(options, this.policy);
    this.breaker = options.breaker == null ? null : breakerOf(options);
    this.bulkhead = options.bulkhead ?? null;
    this.limit = options.concurrencyLimit ?? null;
    this.rate = options.rateLimiter ?? null;
    if (this.bulkhead !== null || this.limit !== null || this.rate !== null) checkLimiters(options);
    if (this.bulkhead !== null && this.limit !== null) {
      throw new RelentError('ERR_INVALID_INPUT', 'Expected one of `bulkhead` and `concurrencyLimit` (an adaptive limit replaces the fixed bulkhead)', { field: 'concurrencyLimit' });
    }
    this.hedging = this.policy.hedge === null ? null : hedgingOf(options, this.policy);
    if (this.hedging !== null) this.flying = [];
    this.opId = options.operationId ?? null;
    this.scope = options.instrumentation ? options.instrumentation.operation({ operationId: this.operationId, method: this.method, endpoint: this.endpoint }) : null;
  }

  private get method(): string | null {
    return this.options.method ?? null;
  }

  /** Whatever the caller passed, events never carry a query, userinfo or fragment. */
  private get endpoint(): string | null {
    if (this.safe === undefined) this.safe = this.options.endpoint != null ? safeEndpoint(this.options.endpoint) : null;
    return this.safe;
  }

  /** Fixed for the operation; made on first use (nothing reads it on a quiet success path). */
  get operationId(): string {
    return (this.opId ??= newOperationId());
  }

  // As the first attempt's context (AttemptContext):
  get requestId(): string {
    return `${this.operationId}/attempt-1`;
  }

  get signal(): AbortSignal {
    return attemptSignal(this, this.callerSignal);
  }

  abort(reason: unknown): void {
    this.controller?.abort(reason);
  }

  abortForTimeout(): void {
    this.timedOut = true;
    if (this.controller !== null) this.controller.abort(new RelentError('ERR_DEADLINE_EXCEEDED', TIMEOUT_REASON));
  }

  private now(): number {
    return this.system ? turnNow() : this.clock.now();
  }

  start(): void {
    const at = this.options.startedAt;
    const now = at !== undefined && at <= this.clock.now() ? at : this.now();
    this.startedAt = now;
    if (this.breaker === null && this.bulkhead === null && this.limit === null && this.rate === null && this.hedging === null && this.policy.chaos === null
      && !(this.callerSignal?.aborted ?? false)) {
      // The shortcut: the first call's limits are the core's (the same functions the
      // operation uses), and the operation itself is made only when the attempt needs
      // more than "a plain answer is the answer" (decide()'s first rule).
      const deadlineMs = operationDeadlineMs(this.policy, this.options);
      if (deadlineMs > 0) return this.invoke(now, 1, attemptLimitMs(operationAttemptTimeoutMs(this.policy, this.options), deadlineMs, 0), deadlineMs, null);
    }
    const op = this.operation();
    this.carry(this.callerSignal?.aborted ? op.cancelled() : op.start(now), now);
  }

  /**
   * Takes over an operation whose first attempt a driver made itself (see executeFrom),
   * as if start()'s shortcut had made it: at `startedAt`, given `timeoutMs` of the
   * operation's `remainingMs`. It has just ended as `how` says.
   */
  takeOver(startedAt: number, timeoutMs: number, remainingMs: number, how: FirstAttemptEnd, payload: unknown): void {
    this.startedAt = startedAt;
    this.callStart = startedAt;
    this.timeoutMs = timeoutMs;
    this.remainingMs = remainingMs;
    this.ctx = this;
    this.phase = Phase.Calling;
    switch (how) {
      case 'value':
        return this.settle(this, Settled.Value, payload);
      case 'error':
        return this.settle(this, Settled.Error, payload);
      case 'timeout':
        this.abortForTimeout();
        return this.settle(this, Settled.Timeout, undefined);
      default:
        return this.settle(this, Settled.Aborted, undefined);
    }
  }

  /** The core's operation (the caller's options are its options: no object per call). */
  private operation(): Operation {
    return (this.op ??= new OperationMachine(this.policy, this.options, this.budget, this.options.random ?? systemRandom, this.hedging));
  }

  /** Carries out one command of the operation. */
  private carry(cmd: Command, now: number): void {
    switch (cmd.kind) {
      case 'call':
        return this.call(cmd, now);
      case 'hedge':
        return this.sendHedge(cmd, now);
      case 'await':
        return;
      case 'wait':
        this.stopHedging();
        if (cmd.delayMs > 0) return this.waitFor(cmd.delayMs, now);
        // A zero wait: the next attempt after the current call stack (a driver's attempt
        // may settle inside its transport's callback), before any timer.
        this.phase = Phase.Waiting;
        queueMicrotask(() => {
          if (this.phase === Phase.Waiting) this.afterWait(now);
        });
        return;
      case 'check_state':
        return this.invoke(now, cmd.attempt, cmd.timeoutMs, cmd.remainingMs, this.options.stateCheck!);
      case 'end':
        this.stopHedging();
        if (this.flying !== null && this.flying.length > 0) this.abortOthers(cmd);
        return this.end(cmd);
    }
  }

  private setTimer(ms: number, now: number): void {
    if (this.system) setTimerRecord(this, ms, now);
    else this.cancelTimer = this.clock.setTimer(() => this.onTimerFired(), ms, now);
  }

  private clearTimer(): void {
    if (this.system) clearTimerRecord(this);
    else if (this.cancelTimer !== null) {
      this.cancelTimer();
      this.cancelTimer = null;
    }
  }

  /** A call: the breaker, the rate limit and the slot first (a refusal makes no attempt and no attempt event). */
  private call(cmd: CallCommand, now: number): void {
    if (this.breaker !== null && !this.breaker.tryPass(this.clock.wallNow())) return this.carry(this.operation().slotRefused('circuit_open'), now);
    if (this.rate !== null && !this.rate.tryAcquire(now)) {
      // The slow path: no token now. Wait in line for one, within maxWaitMs and the deadline.
      this.phase = Phase.Slot;
      waitFor((signal) => this.rate!.acquire(this.clock.now(), cmd.remainingMs, signal), 'ERR_RATE_LIMITED', this.clock, this.callerSignal, cmd.remainingMs)
        .then((r) => this.afterToken(r), (e: unknown) => this.end(CRASHED, { outcome: { ok: false, error: e } }));
      return;
    }
    this.takeSlot(cmd, now);
  }

  /** A call that has its token (or needs none): the bulkhead's or the concurrency limit's slot, then the call. */
  private takeSlot(cmd: CallCommand, now: number): void {
    const slots = this.bulkhead ?? this.limit;
    if (slots !== null && !slots.tryAcquire()) {
      // The slow path: every slot is taken. Wait in the queue, within the deadline.
      this.phase = Phase.Slot;
      const code = this.bulkhead !== null ? 'ERR_BULKHEAD_FULL' : 'ERR_CONCURRENCY_LIMITED';
      waitFor((signal) => slots.acquire(signal), code, this.clock, this.callerSignal, cmd.remainingMs)
        .then((r) => this.afterSlot(r), (e: unknown) => this.end(CRASHED, { outcome: { ok: false, error: e } }));
      return;
    }
    this.invoke(now, cmd.attempt, cmd.timeoutMs, cmd.remainingMs, null, cmd.hedgeInMs, false, cmd.inject ?? null);
  }

  private afterToken(r: WaitResult): void {
    const now = this.clock.now();
    if (r.result === 'ok') {
      const cmd = this.callerSignal?.aborted ? this.op!.slotRefused('cancelled') : this.op!.slotGranted(now);
      if (cmd.kind === 'call') return this.takeSlot(cmd, now);
      return this.refused(cmd, now, null);
    }
    this.refused(this.op!.slotRefused(r.result === 'refused' ? 'rate_limited' : r.result), now, r.result === 'refused' ? r.error : null);
  }

  private afterSlot(r: WaitResult): void {
    const now = this.clock.now();
    if (r.result === 'ok') {
      const cmd = this.callerSignal?.aborted ? this.op!.slotRefused('cancelled') : this.op!.slotGranted(now);
      if (cmd.kind === 'call') return this.invoke(now, cmd.attempt, cmd.timeoutMs, cmd.remainingMs, null, cmd.hedgeInMs, false, cmd.inject ?? null);
      (this.bulkhead ?? this.limit)!.release();
      return this.refused(cmd, now, null);
    }
    const why: SlotRefusal = r.result === 'refused' ? (this.bulkhead !== null ? 'bulkhead_full' : 'concurrency_limited') : r.result;
    this.refused(this.op!.slotRefused(why), now, r.result === 'refused' ? r.error : null);
  }

  /** No call is made: hand a half-open trial back to the breaker, and end (a limit's refusal says why). */
  private refused(cmd: Command, now: number, error: unknown): void {
    if (this.breaker !== null) this.breaker.record('ignored', this.clock.wallNow());
    if (error !== null && cmd.kind === 'end') return this.end(cmd, refusalOutcome(cmd.reason, error, this.lastOutcome(), this.last, this.operationId, this.op!.attempt));
    this.carry(cmd, now);
  }

  /** A hedge: another call alongside those in flight, only if a slot and a token are there now (a hedge never waits). */
  private sendHedge(cmd: HedgeCommand, now: number): void {
    const op = this.op!;
    let refusal: SlotRefusal | null = null;
    if (this.breaker !== null && !this.breaker.tryPass(this.clock.wallNow())) refusal = 'circuit_open';
    else if (this.rate !== null && !this.rate.tryAcquire(now)) refusal = 'rate_limited';
    else if (this.bulkhead !== null && !this.bulkhead.tryAcquire()) refusal = 'bulkhead_full';
    else if (this.limit !== null && !this.limit.tryAcquire()) refusal = 'concurrency_limited';
    if (refusal !== null) {
      if (refusal !== 'circuit_open' && this.breaker !== null) this.breaker.record('ignored', this.clock.wallNow());
      return this.carry(op.slotRefused(refusal), now);
    }
    this.invoke(now, cmd.attempt, cmd.timeoutMs, cmd.remainingMs, null, cmd.hedgeInMs, true, cmd.inject ?? null);
  }

  private armHedge(ms: number, now: number): void {
    this.cancelHedge?.();
    this.cancelHedge = this.clock.setTimer(() => {
      this.cancelHedge = null;
      if (this.phase !== Phase.Calling || this.op === undefined) return;
      const t = this.clock.now();
      this.carry(this.op.hedgeDue(t), t);
    }, ms, now);
  }

  private stopHedging(): void {
    if (this.cancelHedge !== null) {
      this.cancelHedge();
      this.cancelHedge = null;
    }
  }

  /**
   * The operation ended with attempts still in flight: each is aborted (its body never
   * reaches the caller), its slot given back, and it is recorded with its own event — a
   * hedge that lost (or, when the caller cancelled, a cancelled attempt).
   */
  private abortOthers(cmd: EndCommand): void {
    const flying = this.flying!;
    const now = this.clock.now();
    const d = cmd.reason === 'cancelled' ? CANCELLED_ATTEMPT : HEDGE_LOST;
    const reason = cmd.reason === 'cancelled' ? this.callerSignal?.reason : new RelentError('ERR_CANCELLED', 'relent: another attempt of this operation answered first');
    const wallNow = this.options.onEvent || this.scope !== null ? this.clock.wallNow() : 0;
    for (const ctx of flying.splice(0)) {
      if (ctx.done) continue;
      ctx.done = true;
      if (ctx.cancel !== null) ctx.cancel();
      if (ctx.delay !== null) {
        ctx.delay();
        ctx.delay = null;
      }
      // The attempt's signal aborts: a driver cuts what it has in flight for it.
      ctx.abort(reason);
      if (this.bulkhead !== null) this.bulkhead.release();
      if (this.limit !== null) this.limit.release(null);
      const elapsed = now - ctx.callStart;
      this.op!.lost(elapsed);
      if (this.options.onEvent || ctx.aScope !== null) {
        const ev = attemptEvent(this.operationId, ctx.attempt, this.method, this.endpoint, { status: null, errorClass: 'aborted', elapsedMs: elapsed }, ctx.remainingMs, d, wallNow, ctx.isHedge, ctx.inject?.kind ?? null);
        if (this.options.onEvent) this.emit(ev);
        ctx.aScope?.end(ev);
      }
    }
  }

  /** Calls the operation (or the state check) with a timer and the caller's signal racing it. */
  private invoke(
    now: number, attempt: number, timeoutMs: number, remaining: number, check: AttemptFn<T> | null, hedgeInMs: number | null = null, hedge = false,
    inject: ChaosInjection | null = null,
  ): void {
    let ctx: AttemptHandle;
    if (attempt === 1 && check === null && this.timeoutMs === 0 && !this.done) {
      // The first attempt's context is this object.
      this.timeoutMs = timeoutMs;
      this.remainingMs = remaining;
      ctx = this; // eslint-disable-line @typescript-eslint/no-this-alias
    } else {
      ctx = new AttemptCtx(this, this.callerSignal, attempt, timeoutMs, remaining);
    }
    this.ctx = ctx;
    this.checking = check !== null;
    ctx.callStart = now;
    ctx.isHedge = hedge;
    if (this.limit !== null) ctx.generation = this.limit.generation;
    this.phase = Phase.Calling;
    const flying = check === null ? this.flying : null;
    if (flying !== null) flying.push(ctx);
    const aScope = check === null && this.scope !== null ? this.scope.attempt(attempt, ctx) : null;
    ctx.aScope = aScope;
    // The caller's cancel reaches the attempt's signal at once, even while its function runs.
    if (this.callerSignal !== undefined) this.listenForAbort();
    if (inject !== null) {
      ctx.inject = inject;
      // Chaos: a fault or an outcome is the attempt's answer, and nothing is sent.
      if (inject.kind !== 'latency') return this.settle(ctx, Settled.Injected, inject);
      // A latency: the attempt's time runs from now; the call goes when the delay is over.
      this.armAttempt(ctx, flying, timeoutMs, hedgeInMs, now);
      ctx.delay = this.clock.setTimer(() => {
        ctx.delay = null;
        if (ctx.done) return;
        const late = this.send(ctx, check, aScope);
        if (late !== null) this.subscribe(ctx, late);
      }, inject.delayMs, now);
      this.afterSend();
      return;
    }
    const p = this.send(ctx, check, aScope);
    if (p === null) return;
    // The timers before the answer is subscribed to: a driver's thenable may answer at once (undici's synchronous failures).
    this.armAttempt(ctx, flying, timeoutMs, hedgeInMs, now);
    this.subscribe(ctx, p);
    this.afterSend();
  }

  /** The attempt's timer (its own when several may be in flight), and the next hedge's. */
  private armAttempt(ctx: AttemptHandle, flying: AttemptHandle[] | null, timeoutMs: number, hedgeInMs: number | null, now: number): void {
    if (flying !== null) {
      // Several attempts may be in flight: each has its own timer.
      ctx.cancel = this.clock.setTimer(() => this.onAttemptTimer(ctx), timeoutMs, now);
      if (hedgeInMs !== null) this.armHedge(hedgeInMs, now);
    } else {
      this.setTimer(timeoutMs, now);
    }
  }

  /** A cancel while the function ran (its synchronous part) ends the attempt now, as one after would. */
  private afterSend(): void {
    const signal = this.callerSignal;
    if (signal !== undefined) {
      this.listenForAbort();
      if (signal.aborted) this.onCallerAbort();
    }
  }

  /** Calls the attempt's function (or the state check): its answer to subscribe to, or null when the attempt ended meanwhile. */
  private send(ctx: AttemptHandle, check: AttemptFn<T> | null, aScope: AttemptScope | null): PromiseLike<T> | null {
    const fn = check ?? this.fn;
    let p: PromiseLike<T>;
    try {
      p = thenableOf(aScope !== null ? aScope.run(fn, ctx) : check !== null && this.scope !== null ? this.scope.run(fn, ctx) : fn(ctx));
    } catch (error) {
      p = Promise.reject(error);
    }
    if (ctx.done) {
      // Ended while the function ran: what it answers later is nobody's (never an unhandled rejection).
      try {
        p.then(undefined, ignore);
      } catch {
        // a thenable whose then throws: nothing to observe
      }
      return null;
    }
    return p;
  }

  private subscribe(ctx: AttemptHandle, p: PromiseLike<T>): void {
    try {
      p.then((value) => this.settle(ctx, Settled.Value, value), (error: unknown) => this.settle(ctx, Settled.Error, error));
    } catch (error) {
      // A thenable whose then throws: a failed attempt.
      this.settle(ctx, Settled.Error, error);
    }
  }

  private onAttemptTimer(ctx: AttemptHandle): void {
    ctx.cancel = null;
    if (ctx.done) return;
    ctx.abortForTimeout();
    this.settle(ctx, Settled.Timeout, undefined);
  }

  onTimerFired(): void {
    this.cancelTimer = null;
    if (this.phase === Phase.Waiting) return this.afterWait(this.clock.now());
    const ctx = this.ctx;
    if (ctx === null || ctx.done) return;
    ctx.abortForTimeout();
    this.settle(ctx, Settled.Timeout, undefined);
  }

  private onCallerAbort(): void {
    if (this.phase === Phase.Calling && this.flying !== null && this.flying.length > 0) {
      // Hedging: the latest attempt ends as cancelled; the operation then aborts the others.
      const ctx = this.flying[this.flying.length - 1]!;
      ctx.abort(this.callerSignal?.reason);
      this.settle(ctx, Settled.Aborted, undefined);
    } else if (this.phase === Phase.Calling && this.ctx !== null && !this.ctx.done) {
      this.ctx.abort(this.callerSignal?.reason);
      this.settle(this.ctx, Settled.Aborted, undefined);
    } else if (this.phase === Phase.Waiting) {
      this.clearTimer();
      this.carry(this.op!.cancelled(), 0);
    }
  }

  /** One attempt has settled: observe it, tell the operation (the core decides), report, carry out what comes next. */
  settle(ctx: AttemptHandle, kind: Settled, payload: unknown): void {
    if (ctx.done) {
      // Settled after its time (the client's own retries may have outlasted the attempt): does the client retry?
      if (kind === Settled.Error) noticeClientRetries(payload);
      return;
    }
    ctx.done = true;
    if (ctx.delay !== null) {
      ctx.delay();
      ctx.delay = null;
    }
    if (ctx.cancel !== null) {
      ctx.cancel();
      ctx.cancel = null;
    } else this.clearTimer();
    if (this.checking) return this.settleCheck(kind, payload);
    const flying = this.flying;
    if (flying !== null) {
      const i = flying.indexOf(ctx);
      if (i >= 0) flying.splice(i, 1);
    }
    // The slot is freed when the attempt settles, timeouts included: an operation that
    // ignores its signal cannot hold the slot past its time.
    if (this.bulkhead !== null) this.bulkhead.release();
    this.settled = kind;
    this.payload = payload;
    const options = this.options;
    let c: Classified;
    try {
      c = this.classify(ctx, kind, payload);
    } catch (error) {
      // A classifier that throws (the caller's, or a value no classifier can read): the operation ends with its error.
      return this.fail(error);
    }
    // A plain answer that nobody watches needs no clock reading (the core ignores the time then).
    const status = (c as { status?: number }).status;
    const untimed = status !== undefined && this.settleRun === null && this.budget === null && this.breaker === null && !options.onEvent && ctx.aScope === null
      && this.limit === null && this.rate === null && this.hedging === null && isPlainAnswer(this.policy, status);
    if (untimed && kind === Settled.Value && this.op === undefined) {
      // The shortcut's end: the core's rule for a plain answer nobody watches (decide()'s
      // first: the answer, nothing to record). Nothing else to build.
      this.phase = Phase.Done;
      if (this.abortListener !== null) this.callerSignal!.removeEventListener('abort', this.abortListener);
      return this.resolveValue!(payload as T);
    }
    let op = this.op;
    if (op === undefined) {
      // The shortcut's first attempt needs the core after all: the operation starts when the attempt did.
      op = this.operation();
      op.start(this.startedAt);
    }
    let now: number;
    let obs: Observation;
    if (untimed) {
      now = ctx.callStart;
      obs = c === OK_200 ? UNTIMED_200 : observation(c, 0);
    } else {
      now = this.clock.now();
      obs = observation(c, now - ctx.callStart);
    }
    this.last = obs;
    // The wall clock is read only when something needs it (HTTP dates, the breaker).
    const wallNow = this.breaker !== null || obs.headers !== undefined ? this.clock.wallNow() : undefined;
    if (this.breaker !== null) this.breaker.record(breakerOutcome(obs), wallNow!);
    if (this.limit !== null) {
      const st = obs.status ?? null;
      const dropped = limitDropped(this.policy.throttleStatuses, st, obs.errorClass ?? null);
      this.limit.release(kind === Settled.Aborted ? null : { startedAt: ctx.callStart, now, generation: ctx.generation, dropped });
    }
    const cmd = op.answered(obs, now, wallNow, ctx.attempt);
    if (this.rate !== null && obs.status !== null && obs.status !== undefined) {
      observeRateAnswer(this.rate.bucket, now, obs.status, obs.headers, op.decision?.retryAfterMs ?? null, this.policy.throttleStatuses);
    }
    const aScope = ctx.aScope;
    if (options.onEvent || aScope !== null) {
      const ev = attemptEvent(this.operationId, ctx.attempt, this.method, this.endpoint, obs, ctx.remainingMs, op.decision!, wallNow ?? this.clock.wallNow(), ctx.isHedge, ctx.inject?.kind ?? null);
      if (options.onEvent) this.emit(ev);
      if (aScope !== null) aScope.end(ev);
      if (this.thrown !== null) return this.fail(this.thrown.error);
    }
    this.carry(cmd, now);
  }

  /** Hands an event to the caller's listener; what it throws is kept (the operation then ends with it) and never escapes. */
  private emit(ev: RelentEvent): void {
    try {
      this.options.onEvent!(ev);
    } catch (error) {
      this.thrown ??= { error };
    }
  }

  /** What the attempt observed, by the caller's classifiers or the defaults (may throw: see settle()). */
  private classify(ctx: AttemptHandle, kind: Settled, payload: unknown): Classified {
    const options = this.options;
    switch (kind) {
      case Settled.Value:
        return (options.classifyValue?.(payload as T, this.policy)) ?? classifyValueDefault(payload);
      case Settled.Error:
        // An error after the caller's abort is the cancellation, not a new fact.
        return this.callerSignal?.aborted ? ABORTED : ((options.classifyError?.(payload)) ?? classifyErrorDefault(payload));
      case Settled.Timeout:
        return (options.classifyTimeout?.(ctx)) ?? TIMED_OUT;
      case Settled.Injected:
        return injectedClassified(payload as Exclude<ChaosInjection, { kind: 'latency' }>);
      default:
        return ABORTED;
    }
  }

  /**
   * Ends the operation with `error` (a classifier or an event listener threw): attempts
   * still in flight are aborted, no further attempt is made.
   */
  fail(error: unknown): void {
    if (this.phase === Phase.Done) return;
    this.clearTimer();
    this.stopHedging();
    if (this.flying !== null && this.flying.length > 0) this.abortOthers(CRASHED);
    this.end(CRASHED, { outcome: { ok: false, error } });
  }

  private waitFor(delay: number, now: number): void {
    this.phase = Phase.Waiting;
    if (this.callerSignal?.aborted) return this.carry(this.op!.cancelled(), now);
    if (this.callerSignal !== undefined) this.listenForAbort();
    this.setTimer(delay, now);
  }

  /** Listens to the caller's signal (once per operation): a cancel ends a call or a wait at once. */
  private listenForAbort(): void {
    if (this.abortListener === null) {
      this.abortListener = () => this.onCallerAbort();
      this.callerSignal!.addEventListener('abort', this.abortListener);
    }
  }

  private afterWait(now: number): void {
    this.phase = Phase.Idle;
    this.carry(this.callerSignal?.aborted ? this.op!.cancelled() : this.op!.timerFired(now), now);
  }

  /** How the last attempt ended, for the outcome (built only off the success path). */
  private lastOutcome(): AttemptOutcome<T> | null {
    switch (this.settled) {
      case Settled.Value: return new ValueOutcome(this.payload as T);
      case Settled.Error: return { kind: 'error', error: this.payload };
      case Settled.Timeout: return TIMEOUT_OUTCOME;
      case Settled.Aborted: return ABORTED_OUTCOME;
      case Settled.Injected: return { kind: 'error', error: injectedError(this.payload as Exclude<ChaosInjection, { kind: 'latency' }>) };
      default: return null;
    }
  }

  private settleCheck(kind: Settled, payload: unknown): void {
    const options = this.options;
    const cmd = this.op!.checked() as EndCommand;
    let c: Classified;
    try {
      c = kind === Settled.Value ? (options.classifyValue?.(payload as T, this.policy)) ?? classifyValueDefault(payload)
        : kind === Settled.Timeout ? { errorClass: 'timeout' } : kind === Settled.Aborted ? { errorClass: 'aborted' }
          : ((options.classifyError?.(payload)) ?? classifyErrorDefault(payload));
    } catch (error) {
      return this.end(cmd, { outcome: { ok: false, error } });
    }
    if (kind === Settled.Value) return this.end(cmd, { outcome: { ok: true, value: payload as T }, stateCheck: c });
    const attempts = this.op!.attempt;
    const error = new RelentError('ERR_UNKNOWN_OUTCOME', `Outcome unknown after attempt ${attempts}, and the state check failed (${'errorClass' in c ? c.errorClass : c.status})`, {
      reason: 'check_state', attempts, operationId: this.operationId, cause: kind === Settled.Error ? payload : undefined,
    });
    return this.end(cmd, { outcome: { ok: false, error }, stateCheck: c });
  }

  private end(cmd: EndCommand, extra: Partial<RunResult<T>> = NO_EXTRA): void {
    if (this.phase === Phase.Done) return;
    this.phase = Phase.Done;
    if (this.abortListener !== null) this.callerSignal!.removeEventListener('abort', this.abortListener);
    const reason = cmd.reason;
    const options = this.options;
    if (reason === 'return' && this.resolveValue !== null && extra.outcome === undefined && this.settled === Settled.Value && !options.onEvent && this.scope === null) {
      return this.resolveValue(this.payload as T); // run()'s success path: nothing else to build
    }
    const d = cmd.decision;
    const last = this.last;
    const attempts = this.op?.attempt ?? 0;
    let outcome = extra.outcome ?? outcomeFor(reason, d, this.lastOutcome(), last, this.operationId, attempts, this.callerSignal);
    if (options.onEvent || this.scope !== null) {
      const ev: ResultEvent & { stateCheck?: Classified; why?: DecisionWhy } = {
        type: 'result', operationId: this.operationId, status: last?.status ?? null, errorClass: last?.errorClass ?? null, reason, attempts,
        ts: Math.round(this.clock.wallNow()),
      };
      if (extra.stateCheck) ev.stateCheck = extra.stateCheck;
      // Said only when the server asked not to retry (optional: other result events keep their shape).
      if (d?.why === 'retry_after_no_retry') ev.why = d.why;
      const op = this.op;
      if (op !== undefined && op.hedges > 0) {
        (ev as { hedges?: number }).hedges = op.hedges;
        (ev as { hedgeWon?: boolean }).hedgeWon = op.hedgeWon;
      }
      if (options.onEvent) this.emit(ev);
      if (this.scope !== null) this.scope.end(ev);
      // A listener that threw ends the operation with its error (as p-retry's onFailedAttempt does).
      if (this.thrown !== null) outcome = { ok: false, error: this.thrown.error };
    }
    if (this.settleRun === null) {
      if (outcome.ok) this.resolveValue!(outcome.value);
      else this.rejectValue!(outcome.error);
      return;
    }
    this.settleRun(new RunResultRecord(
      this.operationId, reason, cmd.why, attempts, last, outcome, extra.stateCheck ?? null, d?.delayMs ?? null, d?.retryAfterMs ?? null,
      (this.op?.deadlineAt ?? this.startedAt) - this.clock.now(), this.op === undefined ? 0 : this.op.deadlineAt - this.op.startedAt,
    ) as RunResult<T>);
  }
}

const NO_EXTRA: Partial<RunResult<never>> = Object.freeze({});

type RunResultRecordConstructor = new (
  operationId: string, reason: TerminalReason, why: DecisionWhy | null, attempts: number, last: Observation | null,
  outcome: RunResult<unknown>['outcome'], stateCheck: Classified | null, delayMs: number | null, retryAfterMs: number | null,
  remainingMs: number, deadlineMs: number,
) => RunResult<unknown>;

/**
 * A RunResult made by `new`, not as an object literal: V8 tracks an allocation site per
 * literal and, when a site's objects survive a young-generation GC (as results did while
 * the process warmed up), allocates all later ones straight in the old generation; every
 * young object a result points to (the answer, its handler, the request behind it) then
 * survived each scavenge until the next full GC. An HTTP driver under load promoted
 * about 4x the memory a pass-through interceptor does and spent a third of its time in
 * scavenges. `new` has no such site. The prototype is Object.prototype: a result is the
 * plain object it always was.
 */
const RunResultRecord = function RunResultRecord(
  this: Record<string, unknown>, operationId: string, reason: TerminalReason, why: DecisionWhy | null, attempts: number, last: Observation | null,
  outcome: RunResult<unknown>['outcome'], stateCheck: Classified | null, delayMs: number | null, retryAfterMs: number | null,
  remainingMs: number, deadlineMs: number,
): void {
  this.operationId = operationId;
  this.reason = reason;
  this.why = why;
  this.attempts = attempts;
  this.last = last;
  this.outcome = outcome;
  this.stateCheck = stateCheck;
  this.delayMs = delayMs;
  this.retryAfterMs = retryAfterMs;
  this.remainingMs = remainingMs;
  this.deadlineMs = deadlineMs;
} as unknown as RunResultRecordConstructor;
RunResultRecord.prototype = Object.prototype;

/**
 * run()'s success path: an operation with nothing around its calls (no breaker, limit,
 * rate, budget, hedging, caller's signal, events or tracing) on the system clock. Its
 * first call's limits are the core's (the functions the operation uses); it is the
 * first attempt's context and its own lazy timer; and when that call ends with a plain
 * answer (decide()'s first rule: the answer, nothing to record) it resolves with it.
 * Anything else — an error, a timeout, a status the policy retries — hands the attempt
 * to a Runner, which makes the core's operation as if it had run from the start.
 */
class FastRun<T> implements AttemptHandle, TimerRecord {
  // Fields are set in the constructor (not as class fields): V8 then inlines the whole
  // initialisation into run() instead of calling a separate field initialiser. As few
  // as the attempt needs: every byte of it is allocated (and later scavenged) per call.
  declare timeoutMs: number;
  declare remainingMs: number;
  declare done: boolean;
  declare timedOut: boolean;
  declare controller: AbortController | null;
  declare callStart: number;
  declare timerDue: number;
  declare timerHandle: object | null;
  declare timerSet: boolean;
  declare timerQueued: number;
  declare timerNext: TimerRecord | null;
  /** Set once the attempt needs more than the success path (see promote()). */
  declare private runner: Runner<T> | null;
  declare private opId: string | null;
  declare private readonly fn: AttemptFn<T>;
  declare private readonly options: RunOptions<T>;
  declare private readonly policy: Policy;
  declare private readonly resolve: (v: T) => void;
  declare private readonly reject: (e: unknown) => void;

  constructor(fn: AttemptFn<T>, options: RunOptions<T>, policy: Policy, resolve: (v: T) => void, reject: (e: unknown) => void) {
    this.fn = fn;
    this.options = options;
    this.policy = policy;
    this.resolve = resolve;
    this.reject = reject;
    this.opId = options.operationId ?? null;
    this.runner = null;
    this.timeoutMs = 0;
    this.remainingMs = 0;
    this.done = false;
    this.timedOut = false;
    this.controller = null;
    this.callStart = 0;
    this.timerDue = 0;
    this.timerHandle = null;
    this.timerSet = false;
    this.timerQueued = 0;
    this.timerNext = null;
  }

  // What a Runner reads of its attempts' contexts, fixed for this one (the first attempt; no tracing, no limit, no hedging).
  get attempt(): number {
    return 1;
  }

  get aScope(): AttemptScope | null {
    return null;
  }

  get generation(): number {
    return 0;
  }

  get isHedge(): boolean {
    return false;
  }

  get cancel(): (() => void) | null {
    return null;
  }

  // No chaos on the success path (a policy with chaos never takes it).
  get inject(): ChaosInjection | null {
    return null;
  }

  get delay(): (() => void) | null {
    return null;
  }

  get operationId(): string {
    if (this.runner !== null) return this.runner.operationId;
    return (this.opId ??= newOperationId());
  }

  get requestId(): string {
    return `${this.operationId}/attempt-1`;
  }

  get signal(): AbortSignal {
    return attemptSignal(this, undefined);
  }

  abort(reason: unknown): void {
    this.controller?.abort(reason);
  }

  abortForTimeout(): void {
    this.timedOut = true;
    if (this.controller !== null) this.controller.abort(new RelentError('ERR_DEADLINE_EXCEEDED', TIMEOUT_REASON));
  }

  start(deadlineMs: number): void {
    const at = this.options.startedAt;
    const now = at === undefined ? turnNow() : at <= performance.now() ? at : turnNow();
    const timeoutMs = attemptLimitMs(operationAttemptTimeoutMs(this.policy, this.options), deadlineMs, 0);
    this.timeoutMs = timeoutMs;
    this.remainingMs = deadlineMs;
    this.callStart = now;
    let p: PromiseLike<T>;
    try {
      p = thenableOf(this.fn(this));
    } catch (error) {
      p = Promise.reject(error);
    }
    setTimerRecord(this, timeoutMs, now);
    // Bound methods rather than arrow functions: a bound function is smaller than a closure
    // and its context, and needs no lazy-compile step on its first (and only) call.
    try {
      p.then(this.onValue.bind(this), this.onError.bind(this));
    } catch (error) {
      this.onError(error);
    }
  }

  onError(error: unknown): void {
    this.settle(this, Settled.Error, error);
  }

  /** The call answered: a plain answer (decide()'s first rule) is the result; anything else goes to a Runner. */
  onValue(value: T): void {
    try {
      if (this.runner === null && !this.done && this.options.classifyValue === undefined
        && (typeof value !== 'object' || value === null ? plain200(this.policy) : isPlainAnswer(this.policy, (classifyValueDefault(value) as { status: number }).status))) {
        this.done = true;
        clearTimerRecord(this);
        return this.resolve(value);
      }
    } catch (error) {
      // A value the default classifier cannot read (a getter that throws): the operation ends with that error.
      if (this.runner === null && !this.done) return this.promote().fail(error);
      return;
    }
    this.settle(this, Settled.Value, value);
  }

  settle(ctx: AttemptHandle, kind: Settled, payload: unknown): void {
    const runner = this.runner;
    if (runner !== null) return runner.settle(ctx, kind, payload);
    if (this.done) return;
    if (kind === Settled.Value && this.options.classifyValue === undefined) {
      const status = (classifyValueDefault(payload) as { status: number }).status;
      if (isPlainAnswer(this.policy, status)) {
        this.done = true;
        clearTimerRecord(this);
        return this.resolve(payload as T);
      }
    }
    this.promote().settle(this, kind, payload);
  }

  onTimerFired(): void {
    if (this.runner !== null || this.done) return;
    this.promote().onTimerFired();
  }

  /** The Runner that takes over the attempt in flight (this object stays its context). */
  private promote(): Runner<T> {
    const r = new Runner(this.fn, this.options, this.policy);
    r.resolveValue = this.resolve;
    r.rejectValue = this.reject;
    r.opId = this.opId;
    r.startedAt = this.callStart;
    r.phase = Phase.Calling;
    r.ctx = this;
    this.runner = r;
    clearTimerRecord(this);
    return r;
  }
}

/** Whether a value that is not an object (status 200 by default) is a plain answer under `policy`; kept for the last policy run() resolved. */
function plain200(policy: Policy): boolean {
  if (policy !== lastPolicy) return isPlainAnswer(policy, 200);
  return lastPlain200;
}

type FleetFields = Pick<RunOptions<unknown>, 'fleet' | 'dependency' | 'breaker'>;

/** The fleet's budget of `dependency` (none without a fleet, a dependency or a policy budget). */
function fleetBudget(o: FleetFields, policy: Policy): RetryBudget | null {
  const fleet = o.fleet;
  if (fleet === undefined || fleet === null || policy.budget === null) return null;
  return fleet.budget(fleetDependency(o), policy.budget);
}

function fleetDependency(o: FleetFields): string {
  if (typeof o.dependency !== 'string' || o.dependency.length === 0) {
    throw new RelentError('ERR_INVALID_INPUT', 'Expected `dependency` (the name of what is called, e.g. "payments") with `fleet`', { field: 'dependency' });
  }
  return o.dependency;
}

function breakerOf(o: FleetFields): CircuitBreaker | null {
  const b = o.breaker;
  if (b === undefined || b === null) return null;
  if (typeof (b as CircuitBreaker).tryPass === 'function') return b as CircuitBreaker;
  if (o.fleet === undefined || o.fleet === null) {
    throw new RelentError('ERR_INVALID_INPUT', 'Expected `breaker` to be a CircuitBreaker (a breaker spec needs `fleet` and `dependency`)', { field: 'breaker' });
  }
  return o.fleet.breaker(fleetDependency(o), b === true ? null : b as BreakerSpec);
}

const TIMEOUT_OUTCOME = { kind: 'timeout' } as const;
const ABORTED_OUTCOME = { kind: 'aborted' } as const;

/**
 * What the shared promise executors start (no closure per call). The Runner is made
 * inside the executor, so that invalid options reject the promise instead of throwing.
 */
let startFn: AttemptFn<unknown> | null = null;
let startOptions: RunOptions<unknown> | null = null;

function takeRunner(): Runner<unknown> {
  const fn = startFn!;
  const options = startOptions!;
  startFn = null;
  startOptions = null;
  return new Runner(fn, options);
}

/**
 * The last policy input run() resolved, and its Policy: a loop of calls with one policy
 * skips resolvePolicy() (which returns the same Policy for the same input: a Policy is
 * itself, a spec object is resolved once, a preset name's policy is kept).
 */
let lastPolicyInput: RunOptions<unknown>['policy'] = undefined;
let lastPolicy: Policy | null = null;
/** isPlainAnswer(lastPolicy, 200). */
let lastPlain200 = true;

const START_RUN = (resolve: (v: unknown) => void, reject: (e: unknown) => void): void => {
  const options = startOptions!;
  if (options.signal === undefined && options.budget == null && options.fleet == null && options.breaker == null && options.bulkhead == null
    && options.concurrencyLimit == null && options.rateLimiter == null && !options.onEvent && !options.instrumentation
    && (options.clock === undefined || options.clock === systemClock)) {
    const fn = startFn!;
    startFn = null;
    startOptions = null;
    const input = options.policy;
    let policy = lastPolicy;
    if (input !== lastPolicyInput || policy === null) {
      policy = resolvePolicy(input);
      lastPolicy = policy;
      lastPolicyInput = input;
      lastPlain200 = isPlainAnswer(policy, 200);
    }
    const deadlineMs = policy.hedge === null && policy.chaos === null ? operationDeadlineMs(policy, options) : 0;
    if (deadlineMs > 0) {
      new FastRun(fn, options, policy, resolve, reject).start(deadlineMs);
      return;
    }
    const r = new Runner(fn, options, policy);
    r.resolveValue = resolve;
    r.rejectValue = reject;
    r.start();
    return;
  }
  const r = takeRunner();
  r.resolveValue = resolve;
  r.rejectValue = reject;
  r.start();
};

const START_EXECUTE = (resolve: (r: RunResult<unknown>) => void): void => {
  const r = takeRunner();
  r.settleRun = resolve;
  r.start();
};

/**
 * Runs an operation under a policy and reports how it ended, without throwing for
 * operation failures. `run()` is the same with the outcome unwrapped.
 */
export function execute<T>(fn: AttemptFn<T>, options: RunOptions<T> = NO_OPTIONS): Promise<RunResult<T>> {
  startFn = fn;
  startOptions = options as RunOptions<unknown>;
  return new Promise<RunResult<unknown>>(START_EXECUTE) as Promise<RunResult<T>>;
}

/**
 * execute() for the drivers of this package, with a callback instead of a promise: no
 * promise and no microtask between the operation's end and the caller. Invalid options
 * throw. (Not part of the public API.)
 */
export function executeThen<T>(fn: AttemptFn<T>, options: RunOptions<T>, done: (r: RunResult<T>) => void): void {
  const r = new Runner(fn, options);
  r.settleRun = done;
  r.start();
}

/** How a driver's own first attempt ended (see executeFrom): its value, its error, its time limit, or the caller's cancel. */
export type FirstAttemptEnd = 'value' | 'error' | 'timeout' | 'aborted';

/**
 * executeThen() for an operation whose first attempt the driver made itself, on its
 * success path, with the limits start() would have given it (the core's
 * operationDeadlineMs and attemptLimitMs, from the clock's reading `startedAt`): once
 * that attempt needs more than a plain answer, the executor decides it as if it had
 * made it — `how` it ended and its value or error — and carries the operation on with
 * `fn`. The driver must not have read the attempt's signal. (Not part of the public API.)
 */
export function executeFrom<T>(
  fn: AttemptFn<T>, options: RunOptions<T>, startedAt: number, timeoutMs: number, remainingMs: number,
  how: FirstAttemptEnd, payload: unknown, done: (r: RunResult<T>) => void,
): void {
  const r = new Runner(fn, options);
  r.settleRun = done;
  r.takeOver(startedAt, timeoutMs, remainingMs, how, payload);
}

const NO_OPTIONS: RunOptions<any> = Object.freeze({}); // eslint-disable-line @typescript-eslint/no-explicit-any


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
  circuit_open: 'the circuit breaker is open; calls fail fast until a trial call succeeds',
};

/** The end of every error message: which operation, how many attempts, what the last one saw. */
function messageTail(operationId: string, attempts: number, last: Observation | null): string {
  const what = last ? (last.status ?? last.errorClass) : 'no call made';
  return `(operation ${operationId}, ${attempts} attempt${attempts === 1 ? '' : 's'}, last: ${what})`;
}

/**
 * The outcome when a limit refused the call (the bulkhead's queue is full, the concurrency
 * limit's queue is full, the rate limit has no token in time): the last real answer or
 * error when a call was made (as when retries run out), else the limit's error
 * (ERR_BULKHEAD_FULL, ERR_CONCURRENCY_LIMITED, ERR_RATE_LIMITED) with the operation's reason.
 */
function refusalOutcome<T>(
  reason: TerminalReason, error: unknown, lastOutcome: AttemptOutcome<T> | null, last: Observation | null, operationId: string, attempts: number,
): Partial<RunResult<T>> {
  if (lastOutcome?.kind === 'value') return { outcome: { ok: true, value: lastOutcome.value } };
  if (lastOutcome?.kind === 'error') return { outcome: { ok: false, error: lastOutcome.error } };
  const code = RelentError.is(error) ? error.code : REASON_CODES[reason as Exclude<TerminalReason, 'return'>];
  const detail = error instanceof Error ? error.message.replace(/^The /, 'the ') : reason;
  const message = `${reason}: ${detail} ${messageTail(operationId, attempts, last)}`;
  return { outcome: { ok: false, error: new RelentError(code, message, { reason, attempts, operationId }) } };
}

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
  if (lastOutcome?.kind === 'value' && reason !== 'check_state' && reason !== 'defer' && reason !== 'cancelled') return new OkOutcome(lastOutcome.value);
  if (lastOutcome?.kind === 'error' && reason !== 'cancelled' && reason !== 'check_state' && reason !== 'defer') {
    return { ok: false, error: lastOutcome.error };
  }
  if (reason === 'return') return { ok: false, error: new RelentError('ERR_INVALID_INPUT', 'internal: return without a value') };
  const code = REASON_CODES[reason];
  const detail = d ? (MESSAGES[d.why] ?? d.why) : reason === 'cancelled' ? 'cancelled by the caller' : reason;
  const message = `${reason}: ${detail} ${messageTail(operationId, attempts, last)}`;
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
export function run<T>(fn: AttemptFn<T>, options: RunOptions<T> = NO_OPTIONS): Promise<T> {
  startFn = fn;
  startOptions = options as RunOptions<unknown>;
  return new Promise<unknown>(START_RUN) as Promise<T>;
}
