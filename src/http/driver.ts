// What every HTTP driver of relent shares (the client and the undici interceptor): the
// options they both take, their resolved form — one context per client or interceptor,
// read by the handler of each call (as undici's handlers share their dispatcher's) — and
// the one builder of the executor's options for a call.
import type { Policy, PolicySpec, PresetName } from '../core/policy.js';
import { PROPAGATION_DEFAULTS, resolvePropagation, type PropagationSpec, type ResolvedPropagation } from '../core/propagation.js';
import type { HedgeState } from '../core/hedge.js';
import type { BreakerSnapshot, CircuitBreaker } from '../core/breaker.js';
import type { RetryBudget } from '../core/budget.js';
import type { Bulkhead } from '../run/bulkhead.js';
import type { ConcurrencyLimit } from '../run/concurrency-limit.js';
import type { RateLimiter } from '../run/rate-limiter.js';
import type { Clock, Random } from '../core/types.js';
import { resolvePolicy } from '../presets/index.js';
import { forDriver } from '../run/instrument.js';
import type { AttemptContext, Classified, DriverName, ExecuteOptions, Instrumentation, RelentEvent } from '../run/run.js';
import { clockOption, systemClock } from '../shared/clock.js';
import {
  Dependencies,
  invalid,
  PROTECTION_DEFAULTS,
  listenerOf,
  observeRateLimited,
  observeResponse,
  timeoutOf,
  type Call,
  type CallLimits,
  type Dependency,
  type ProtectionOptions,
} from './operation.js';

/** The options both HTTP drivers take (createClient and relentInterceptor add their own). */
export interface HttpDriverOptions extends ProtectionOptions {
  /** The base policy: a preset name, a spec or a Policy. Default: relent's defaults. */
  readonly policy?: PresetName | PolicySpec | Policy;
  /** One event per attempt, then the result. Nothing is built when no listener is given. */
  readonly onEvent?: ((event: RelentEvent) => void) | null;
  /** Create a random Idempotency-Key for POST and PATCH calls without one. Default false. */
  readonly autoIdempotencyKey?: boolean;
  /**
   * What every attempt tells the server: `x-relent-attempt` (1-based) and
   * `x-relent-deadline-ms` (the time the caller waits for this attempt), optionally
   * `grpc-timeout` and Envoy's form; and, under a relent server, whether a call inherits
   * what is left of the incoming request's deadline. `false`: no headers, no inheritance.
   */
  readonly propagate?: PropagationSpec | false;
  /** Injected time and randomness (tests without sockets). Default: the system clock and Math.random. */
  readonly clock?: Clock | null;
  readonly random?: Random | null;
  /**
   * The deadline covers reading the response body too (default true): a body still
   * arriving when it passes is aborted with ERR_DEADLINE_EXCEEDED. false for long downloads.
   */
  readonly bodyDeadline?: boolean;
  /** Spans and metrics (relent/otel's createOtelInstrumentation()); every operation is marked with the driver's name. */
  readonly instrumentation?: Instrumentation | null;
}

/** What the client and the interceptor keep per dependency key, for the caller to read. */
export interface DependencyState {
  /** The breakers by key (empty without the `breaker` option). */
  readonly breakers: ReadonlyMap<string, CircuitBreaker>;
  /** The bulkheads by key (empty without the `bulkhead` option). */
  readonly bulkheads: ReadonlyMap<string, Bulkhead>;
  /** The shared retry budgets by key. */
  readonly budgets: ReadonlyMap<string, RetryBudget>;
  /** The adaptive concurrency limits by key (empty without the `concurrencyLimit` option). */
  readonly concurrencyLimits: ReadonlyMap<string, ConcurrencyLimit>;
  /** The rate limiters by key (empty without the `rateLimit` option). */
  readonly rateLimiters: ReadonlyMap<string, RateLimiter>;
  /** Every breaker's state as JSON, by key (for `breakerState` after a restart). */
  breakerSnapshot(): Record<string, BreakerSnapshot>;
}

/** The defaults of the options both drivers take, written once. */
export const HTTP_DRIVER_DEFAULTS = Object.freeze({
  policy: null,
  onEvent: null,
  ...PROTECTION_DEFAULTS,
  autoIdempotencyKey: false,
  propagate: PROPAGATION_DEFAULTS,
  clock: null,
  random: null,
  bodyDeadline: true,
  instrumentation: null,
});

/** One HTTP driver's settings, resolved and checked once, shared by the handlers of all its calls. */
export class DriverContext {
  readonly basePolicy: Policy;
  readonly onEvent: ((event: RelentEvent) => void) | null;
  readonly autoKey: boolean;
  /** The injected clock, or undefined for the system clock (as the executor takes it). */
  readonly clock: Clock | undefined;
  readonly random: Random | undefined;
  /** The clock timers are set on (the injected one, or the system's). */
  readonly timers: Clock;
  readonly deps: Dependencies;
  readonly instrumentation: Instrumentation | null;
  readonly bodyDeadline: boolean;
  readonly prop: ResolvedPropagation;
  /** Per-call policy specs, resolved once each. */
  readonly policyCache = new WeakMap<object, Policy>();

  constructor(options: HttpDriverOptions, driver: DriverName) {
    if (typeof options !== 'object' || options === null) throw invalid('options', 'Expected `options` to be an object');
    this.basePolicy = resolvePolicy(options.policy ?? null);
    this.onEvent = options.onEvent ?? null;
    this.autoKey = options.autoIdempotencyKey ?? HTTP_DRIVER_DEFAULTS.autoIdempotencyKey;
    this.clock = clockOption(options.clock);
    this.random = options.random ?? undefined;
    this.timers = this.clock ?? systemClock;
    this.deps = new Dependencies(options, this.clock ?? null);
    this.instrumentation = forDriver(options.instrumentation, driver);
    const bodyDeadline = options.bodyDeadline ?? HTTP_DRIVER_DEFAULTS.bodyDeadline;
    if (typeof bodyDeadline !== 'boolean') throw invalid('bodyDeadline', 'Expected `bodyDeadline` to be a boolean');
    this.bodyDeadline = bodyDeadline;
    this.prop = resolvePropagation(options.propagate);
  }

  /** A call's choice of `bodyDeadline`, or the driver's. */
  bodyDeadlineOf(own: unknown): boolean {
    const v = own ?? this.bodyDeadline;
    if (typeof v !== 'boolean') throw invalid('bodyDeadline', 'Expected `bodyDeadline` to be a boolean');
    return v;
  }

  /** Whether anybody listens to a call's events (the driver's listener or the call's own). */
  listened(own: ((event: RelentEvent) => void) | undefined): boolean {
    return this.onEvent !== null || own !== undefined;
  }
}

/** What one call gives the executor beyond the driver's settings. */
export interface CallFields<V> {
  readonly policy: Policy;
  readonly operationId: string | undefined;
  readonly method: string;
  readonly endpoint: string | undefined;
  /** The call's own listener (in addition to the driver's). */
  readonly onEvent: ((event: RelentEvent) => void) | undefined;
  /** How a response of this driver is observed (null: the drivers' own observeResponse, or observeRateLimited with a rate limit). */
  readonly classifyValue: ((value: V, policy: Policy) => Classified | undefined) | null;
  readonly call: Call;
  readonly dep: Dependency;
  readonly hedging: HedgeState | null;
  readonly idempotencyKey: string | null;
  readonly idempotent: boolean | undefined;
  readonly limits: CallLimits | null;
  readonly stateCheck?: ((ctx: AttemptContext) => Promise<V>) | undefined;
  readonly signal: AbortSignal | undefined;
}

/** The executor's options of one call: the one builder both drivers use. */
export function callRunOptions<V>(cx: DriverContext, f: CallFields<V>): ExecuteOptions<V> {
  const lim = f.limits;
  return {
    policy: f.policy,
    operationId: f.operationId,
    method: f.method,
    endpoint: f.endpoint,
    onEvent: cx.listened(f.onEvent) ? listenerOf(cx.onEvent, f.onEvent) : undefined,
    classifyValue:
      f.classifyValue ?? ((f.dep.guard.rateLimiter === null ? observeResponse : observeRateLimited) as unknown as (value: V, policy: Policy) => Classified),
    classifyTimeout: timeoutOf(f.call),
    guard: f.dep.guard,
    hedging: f.hedging,
    idempotent: f.idempotent,
    idempotencyKey: f.idempotencyKey ?? undefined,
    deadlineMs: lim?.deadlineMs,
    callerDeadlineMs: lim?.callerDeadlineMs,
    attemptTimeoutMs: lim?.attemptTimeoutMs,
    stateCheck: f.stateCheck,
    signal: f.signal,
    clock: cx.clock,
    random: cx.random,
    instrumentation: cx.instrumentation,
  };
}
