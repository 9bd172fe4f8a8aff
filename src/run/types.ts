// The executor's public types: what an attempt receives and returns, the options of
// run()/execute() (and the hooks a driver adds), and how an operation ends.
import type { BreakerSpec, CircuitBreaker } from '../core/breaker.js';
import type { RetryBudget } from '../core/budget.js';
import type { Fleet } from '../core/fleet.js';
import type { HedgeState } from '../core/hedge.js';
import type { Policy, PolicySpec, PresetName } from '../core/policy.js';
import type { AttemptEvent, Clock, DecisionWhy, ErrorClass, Observation, Random, ResultEvent, SendState, TerminalReason } from '../core/types.js';
import type { Bulkhead } from './bulkhead.js';
import type { ConcurrencyLimit } from './concurrency-limit.js';
import type { BreakerVerdict, Guard } from './guard.js';
import type { RateLimiter } from './rate-limiter.js';

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

/**
 * What a driver adds to run()'s options (the HTTP client, the interceptor, the exchange,
 * your own): hooks into the executor, not options a caller of run() needs.
 */
export interface DriverHooks {
  /**
   * When the caller already read `clock.now()` for this call (a deadline it computed from
   * that reading): the operation starts there. Without it, the executor shares one
   * reading of the system clock, in whole ms, among the calls started in the same turn of
   * the event loop, which may be a few ms old on a busy loop: fine for a 5 s deadline, not
   * for a 100 ms auction, whose partners must get every ms they were given. Ignored when
   * it is not a number or is later than now.
   */
  readonly startedAt?: number;
  /** The dependency's guard (createGuard()): its protections, in place of `breaker`, `bulkhead`, `concurrencyLimit` and `rateLimiter`. */
  readonly guard?: Guard | null;
  /** The driver entered the guard for the first attempt itself (`guard.admit()`): it is not entered again. */
  readonly admitted?: boolean;
  /** The driver's own verdict on an answer for the guard's breaker (see BreakerVerdict). */
  readonly breakerVerdict?: BreakerVerdict | null;
}

/** run()'s options with the driver hooks: what execute() and the drivers' entry points take. */
export type ExecuteOptions<T> = RunOptions<T> & DriverHooks;

/** How a driver's own first attempt ended (see executeFrom): its value, its error, its time limit, or the caller's cancel. */
export type FirstAttemptEnd = 'value' | 'error' | 'timeout' | 'aborted';
