// What the client and the interceptor share: per-dependency protections, the state of one
// call around execute(), one attempt through an undici dispatcher, and per-call limits.
// (The success path of a call's first attempt, FirstAttempt, is in first-attempt.ts.)
import type { Dispatcher } from 'undici';
import { createCircuitBreaker, type BreakerSnapshot, type BreakerSpec, type BreakerStateChange, type CircuitBreaker } from '../core/breaker.js';
import type { RetryBudget } from '../core/budget.js';
import type { Fleet } from '../core/fleet.js';
import { RelentError } from '../core/errors.js';
import { type Policy, type PolicySpec, type PresetName } from '../core/policy.js';
import { resolvePolicy, withOverrides } from '../presets/index.js';
import { createBulkhead, type Bulkhead, type BulkheadOptions } from '../run/bulkhead.js';
import { createConcurrencyLimit, type ConcurrencyLimit, type ConcurrencyLimitOptions, type LimitEvent } from '../run/concurrency-limit.js';
import type { RateLimiter } from '../run/rate-limiter.js';
import { createGuard, type Guard } from '../run/guard.js';
import { createHedgeState, type HedgeState } from '../core/hedge.js';
import { normalizeRateLimit, type RateLimitSpec } from '../core/token-bucket.js';
import type { Clock } from '../core/types.js';
import { systemClock } from '../shared/clock.js';
import type { AttemptContext, Classified, RelentEvent, RunResult } from '../run/run.js';
import { incomingCall, type IncomingCall } from '../run/incoming.js';
import { appendPropagation, saysNoRetry, type ResolvedPropagation } from '../core/propagation.js';
import { AttemptHandler } from './attempt.js';
import { pickHintHeaders } from '../core/hints.js';

/** What the client and the interceptor protect a dependency with by default: a shared budget, no breaker, no bulkhead, no limits. */
export const PROTECTION_DEFAULTS = Object.freeze({
  budget: true,
  breaker: false as const,
  breakerState: null,
  onBreakerStateChange: null,
  bulkhead: false as const,
  fleet: null,
  concurrencyLimit: false as const,
  rateLimit: false as const,
  onLimitEvent: null,
});

export function invalid(field: string, message: string): RelentError {
  return new RelentError('ERR_INVALID_INPUT', message, { field });
}

export function asError(reason: unknown): Error {
  return reason instanceof Error ? reason : new Error('relent: the request was aborted');
}

/** Per-dependency protection options (shared by createClient and relentInterceptor). */
export interface ProtectionOptions {
  /** Share the policy's retry budget (`policy.budget`) among all calls to one key. Default true. */
  readonly budget?: boolean;
  /** A circuit breaker per key with these settings, or false for none (default). */
  readonly breaker?: BreakerSpec | false;
  /** Breaker snapshots by key (from `breakerSnapshot()`), to start from. */
  readonly breakerState?: Readonly<Record<string, BreakerSnapshot>> | null;
  /** Breaker state changes (the breaker's name is the key). */
  readonly onBreakerStateChange?: ((change: BreakerStateChange) => void) | null;
  /** A bulkhead per key (max concurrent calls + bounded queue), or false for none (default). */
  readonly bulkhead?: BulkheadOptions | false;
  /**
   * An adaptive concurrency limit per key (`{ kind: "gradient" | "aimd", … , maxQueue }`),
   * in place of a fixed bulkhead, or false for none (default).
   */
  readonly concurrencyLimit?: ConcurrencyLimitOptions | false;
  /** Every change of a key's concurrency limit (its name is the key). */
  readonly onLimitEvent?: ((event: LimitEvent) => void) | null;
  /**
   * A rate limit per key (`{ ratePerSecond, burst, maxWaitMs, … }`), or false for none
   * (default). With `fleet`, the key's rate is shared by the fleet (each process its share).
   */
  readonly rateLimit?: RateLimitSpec | false;
  /**
   * Share each key's budget and breaker with every process that calls it (relent/fleet's
   * `createRedisFleet()`): the key is the dependency's name in the fleet. `breakerState` is not used then.
   */
  readonly fleet?: Fleet | null;
}

/** What a client keeps per dependency key: its guard (budget and protections) and its hedging state. */
export interface Dependency {
  readonly guard: Guard;
  /** Hedging's state of the key (made when a policy with `hedge` first calls it). */
  hedging: HedgeState | null;
}

/**
 * Whether a call may take the success path (its first attempt sent without execute(),
 * which takes over only if that attempt does not succeed): nobody watches it (events,
 * tracing), no hedging, nothing guards the dependency, and its body can be sent again.
 * The client and the interceptor ask the same question; each adds its own last checks.
 */
export function plainPath(listened: boolean, instrumented: boolean, hedging: HedgeState | null, dep: Dependency, stream: boolean): boolean {
  return !listened && !instrumented && hedging === null && !stream && dep.guard.open;
}

const MAX_DEPENDENCIES = 10_000;

/**
 * The guard of each dependency key (createGuard(): the fleet-or-local choice is made
 * there), created on first use. The budget is made from the `budget` spec of the first
 * policy used with the key. At most 10 000 keys are kept (the oldest is dropped, and
 * recreated when used again).
 */
export class Dependencies {
  readonly breakers = new Map<string, CircuitBreaker>();
  readonly bulkheads = new Map<string, Bulkhead>();
  readonly budgets = new Map<string, RetryBudget>();
  readonly concurrencyLimits = new Map<string, ConcurrencyLimit>();
  readonly rateLimiters = new Map<string, RateLimiter>();
  private readonly deps = new Map<string, Dependency>();
  private readonly limitOpts: ConcurrencyLimitOptions | false;
  private readonly rateSpec: RateLimitSpec | false;
  private readonly clock: Clock;
  private readonly shareBudget: boolean;
  private readonly breakerSpec: BreakerSpec | false;
  private readonly bulkheadOpts: BulkheadOptions | false;
  private readonly fleet: Fleet | null;

  constructor(
    private readonly o: ProtectionOptions,
    clock: Clock | null = null,
  ) {
    this.clock = clock ?? systemClock;
    this.fleet = o.fleet ?? null;
    if (this.fleet !== null && (typeof this.fleet !== 'object' || typeof this.fleet.budget !== 'function' || typeof this.fleet.breaker !== 'function')) {
      throw invalid('fleet', 'Expected `fleet` to be a fleet (relent/fleet createRedisFleet())');
    }
    this.shareBudget = o.budget ?? PROTECTION_DEFAULTS.budget;
    if (typeof this.shareBudget !== 'boolean') throw invalid('budget', 'Expected `budget` to be a boolean');
    this.breakerSpec = o.breaker ?? PROTECTION_DEFAULTS.breaker;
    this.bulkheadOpts = o.bulkhead ?? PROTECTION_DEFAULTS.bulkhead;
    this.limitOpts = o.concurrencyLimit ?? PROTECTION_DEFAULTS.concurrencyLimit;
    this.rateSpec = o.rateLimit ?? PROTECTION_DEFAULTS.rateLimit;
    // Validate now, with messages naming the field.
    if (this.breakerSpec !== false) createCircuitBreaker(this.breakerSpec);
    if (this.bulkheadOpts !== false) createBulkhead(this.bulkheadOpts);
    if (this.limitOpts !== false) {
      if (this.bulkheadOpts !== false)
        throw invalid('concurrencyLimit', 'Expected one of `bulkhead` and `concurrencyLimit` (an adaptive limit replaces the fixed bulkhead)');
      createConcurrencyLimit(this.limitOpts);
    }
    if (this.rateSpec !== false) normalizeRateLimit(this.rateSpec);
    const onLimit = o.onLimitEvent ?? null;
    if (onLimit !== null && typeof onLimit !== 'function') throw invalid('onLimitEvent', 'Expected `onLimitEvent` to be a function');
  }

  private lastKey: string | null = null;
  private lastDep: Dependency | null = null;

  get(key: string, policy: Policy): Dependency {
    // Most clients call one dependency over and over: compare before hashing.
    if (key === this.lastKey && this.lastDep !== null) return this.lastDep;
    let d = this.deps.get(key);
    if (d !== undefined) {
      this.lastKey = key;
      this.lastDep = d;
      return d;
    }
    if (this.deps.size >= MAX_DEPENDENCIES) {
      const oldest = this.deps.keys().next().value as string;
      this.deps.delete(oldest);
      this.breakers.delete(oldest);
      this.bulkheads.delete(oldest);
      this.budgets.delete(oldest);
      this.concurrencyLimits.delete(oldest);
      this.rateLimiters.delete(oldest);
    }
    this.lastKey = null;
    this.lastDep = null;
    const guard = createGuard({
      dependency: key,
      fleet: this.fleet,
      budget: this.shareBudget ? policy.budget : null,
      breaker: this.breakerSpec === false ? null : this.breakerSpec,
      breakerState: this.fleet === null ? (this.o.breakerState?.[key] ?? null) : null,
      onBreakerStateChange: this.o.onBreakerStateChange ?? null,
      rateLimit: this.rateSpec === false ? null : this.rateSpec,
      bulkhead: this.bulkheadOpts === false ? null : createBulkhead(this.bulkheadOpts),
      concurrencyLimit:
        this.limitOpts === false
          ? null
          : createConcurrencyLimit(this.limitOpts, { name: key, onEvent: this.o.onLimitEvent ?? null, wallNow: () => this.clock.wallNow() }),
      clock: this.clock,
    });
    d = { guard, hedging: null };
    this.deps.set(key, d);
    if (guard.budget) this.budgets.set(key, guard.budget);
    if (guard.breaker) this.breakers.set(key, guard.breaker);
    if (guard.bulkhead) this.bulkheads.set(key, guard.bulkhead);
    if (guard.concurrencyLimit) this.concurrencyLimits.set(key, guard.concurrencyLimit);
    if (guard.rateLimiter) this.rateLimiters.set(key, guard.rateLimiter);
    return d;
  }

  /** The key's hedging state for a policy that hedges (null for one that does not). */
  hedgingOf(d: Dependency, policy: Policy): HedgeState | null {
    if (policy.hedge === null) return null;
    return (d.hedging ??= createHedgeState());
  }

  snapshot(): Record<string, BreakerSnapshot> {
    const out: Record<string, BreakerSnapshot> = {};
    for (const [k, b] of this.breakers) out[k] = b.toJSON();
    return out;
  }
}

/** The events listener of a call: the client's (or interceptor's) and the call's own, or none. */
export function listenerOf(a: ((e: RelentEvent) => void) | null, b: ((e: RelentEvent) => void) | null | undefined): ((e: RelentEvent) => void) | undefined {
  if (a !== null && b)
    return (e) => {
      a(e);
      b(e);
    };
  return a ?? b ?? undefined;
}

/** The state of one call while the executor runs it. */
export class Call {
  /** The attempt in flight, or the last one that produced a response. */
  current: AttemptHandler | null = null;
  /**
   * Hedging: every attempt by number (several may be in flight; the executor aborts a
   * loser through its attempt's signal). null for a call whose policy does not hedge.
   */
  readonly attempts: Map<number, AttemptHandler> | null;
  private signal: AbortSignal | null = null;

  constructor(hedging = false) {
    this.attempts = hedging ? new Map() : null;
  }

  /** The handler of attempt `n` (hedging), or the current one. */
  handlerOf(n: number): AttemptHandler | null {
    return this.attempts?.get(n) ?? this.current;
  }

  /** Gives up every attempt but `winner`: a loser still in flight is aborted, a drained body let go. */
  discardOthers(winner: AttemptHandler | null): void {
    const all = this.attempts;
    if (all === null) return;
    for (const h of all.values()) {
      if (h === winner) continue;
      if (h.headed) h.discard();
      else h.abort(HEDGE_LOST_ERROR);
    }
    all.clear();
  }

  /**
   * One listener on the caller's signal for the whole call (attempts and body): it aborts
   * whatever is in flight. (The executor ends the operation with its own listener.)
   */
  listen(signal: AbortSignal, then: ((reason: Error) => void) | null = null): void {
    this.signal = signal;
    this.onAbort = () => {
      const reason = asError(signal.reason);
      this.abortAll(reason);
      if (then !== null) then(reason);
    };
    signal.addEventListener('abort', this.onAbort);
  }

  /** Aborts whatever is in flight (every attempt, when hedging). */
  abortAll(reason: Error): void {
    if (this.attempts !== null) for (const h of this.attempts.values()) if (h !== this.current) h.abort(reason);
    this.current?.abort(reason);
  }

  private onAbort: (() => void) | null = null;

  release(): void {
    if (this.signal !== null && this.onAbort !== null) this.signal.removeEventListener('abort', this.onAbort);
    this.signal = null;
    this.onAbort = null;
  }
}

/**
 * How a response is observed (the executor's classifyValue): its status, and for a
 * failure status its hint headers — and a failure's body starts draining at once (read
 * into memory, up to 64 KiB), so its connection is free again before any backoff; if the
 * executor returns it after all, the drained body is handed over intact.
 */
export function observeResponse(h: AttemptHandler, policy: Policy): Classified {
  const status = h.status;
  if (status < 400 && !policy.retryOnStatus.has(status)) return { status };
  return observeFailure(h, status);
}

/**
 * observeResponse for a dependency with a rate limit: every answer's hint headers are
 * read (a RateLimit field on a success caps the calls to its quota).
 */
export function observeRateLimited(h: AttemptHandler, policy: Policy): Classified {
  const status = h.status;
  if (status < 400 && !policy.retryOnStatus.has(status)) {
    const headers = h.headers['ratelimit'] !== undefined ? pickHintHeaders(h.headers) : null;
    return headers ? { status, headers } : { status };
  }
  return observeFailure(h, status);
}

function observeFailure(h: AttemptHandler, status: number): Classified {
  h.drain();
  const headers = pickHintHeaders(h.headers);
  return headers ? { status, headers } : { status };
}

/**
 * One attempt: dispatches `opts` with a fresh AttemptHandler and settles at the response
 * head or the failure. The attempt's time limit is the executor's (one timer per
 * attempt): when it runs out, the executor asks `timeoutOf(call)`, which cuts the
 * request. The caller's signal is the Call's (one listener per call).
 */
export function dispatchAttempt(
  dispatch: (opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler) => boolean,
  opts: Dispatcher.DispatchOptions,
  call: Call,
  acceptStatus: ((status: number) => boolean) | null,
  ctx?: AttemptContext,
): Promise<AttemptHandler> {
  const h = new AttemptHandler(acceptStatus);
  const prev = call.current;
  const attempts = call.attempts;
  if (attempts === null) {
    // A failed attempt whose body is still arriving (over the drain limit) is given up now.
    prev?.discard();
  } else {
    // Hedging: an attempt still in flight goes on (only a failed answer's body is given up);
    // this one is cut when the executor aborts it (it lost, or the caller cancelled).
    if (prev !== null && prev.headed) prev.discard();
    if (ctx !== undefined) {
      attempts.set(ctx.attempt, h);
      const signal = ctx.signal;
      signal.addEventListener('abort', () => h.abort(asError(signal.reason)), { once: true });
    }
  }
  call.current = h;
  try {
    dispatch(opts, h);
  } catch (e) {
    h.failToStart(e);
  }
  // The executor's only use of it is `then` (see AttemptHandler.then): no promise per attempt.
  return h as unknown as Promise<AttemptHandler>;
}

const HEDGE_LOST_ERROR = Object.assign(new Error('relent: another attempt of this call answered first'), { code: 'ERR_RELENT_HEDGE_LOST' });

const SENT_TIMEOUT: Classified = Object.freeze({ errorClass: 'timeout', sent: 'unknown' });
const CONNECT_TIMEOUT: Classified = Object.freeze({ errorClass: 'connect_timeout', sent: 'not_sent' });

/**
 * The executor's `classifyTimeout` for a call: called exactly when an attempt's time is
 * up, it cuts the request in flight and says what the timeout means — still connecting
 * (undici had not started writing) is `connect_timeout` / `not_sent`, safe to retry for
 * any method; after that the outcome is unknown.
 */
export function timeoutOf(call: Call): (ctx: AttemptContext) => Classified {
  return (ctx) => {
    const h = call.handlerOf(ctx.attempt);
    if (h === null || h.headed) return SENT_TIMEOUT;
    const started = h.started;
    h.abort(Object.assign(new Error(`relent: attempt timed out after ${Math.round(ctx.timeoutMs)} ms`), { code: 'ERR_RELENT_ATTEMPT_TIMEOUT' }));
    return started ? SENT_TIMEOUT : CONNECT_TIMEOUT;
  };
}

function checkMs(v: unknown, field: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0 || v > 2 ** 31 - 1)
    throw invalid(field, `Expected \`${field}\` to be a number of ms in (0, 2147483647]`);
  return v;
}

/** Resolves a per-call policy against the base (cached per object). */
export function callPolicy(base: Policy, p: PresetName | PolicySpec | Policy | undefined, cache: WeakMap<object, Policy>): Policy {
  if (p === undefined) return base;
  if (typeof p === 'string') return resolvePolicy(p);
  if (typeof p !== 'object' || p === null) throw invalid('policy', 'Expected `policy` to be a preset name, a policy spec or a Policy');
  let cached = cache.get(p);
  if (cached === undefined) {
    const isPolicy = 'retryOnStatus' in p && 'spec' in p;
    cached = isPolicy || (p as PolicySpec).preset !== undefined ? resolvePolicy(p) : withOverrides(base, p as PolicySpec);
    cache.set(p, cached);
  }
  return cached;
}

/**
 * A call's own deadline and attempt timeout (checked here; the operation takes them
 * instead of the policy's, longer or shorter), and the one-attempt limit of a stream body.
 */
export function callLimits(
  policy: Policy,
  o: { deadlineMs?: number; attemptTimeoutMs?: number; stream: boolean },
): {
  policy: Policy;
  deadlineMs: number | undefined;
  attemptTimeoutMs: number | undefined;
  streamLimited: boolean;
} {
  const deadlineMs = checkMs(o.deadlineMs, 'deadlineMs');
  const attemptTimeoutMs = checkMs(o.attemptTimeoutMs, 'attemptTimeoutMs');
  // A stream is sent once: one attempt, and ERR_BODY_NOT_REPLAYABLE when the policy would have retried.
  const streamLimited = o.stream && policy.maxAttempts > 1;
  return { policy: streamLimited ? withOverrides(policy, { maxAttempts: 1 }) : policy, deadlineMs, attemptTimeoutMs, streamLimited };
}

/**
 * What a call inherits from the request a relent server is serving (relent/server): at
 * most what is left of that request's deadline (SRE book ch. 22: pass on what is left,
 * never a fresh deadline). Returns that time as the operation's caller deadline (ms
 * from now; 0 when the caller's time is already spent: no call is made; the operation's
 * own deadline still applies when shorter) and the incoming call to tell about a
 * "don't retry" answer; both undefined outside a relent server or with inheritance off.
 */
export function inherit(p: ResolvedPropagation): { readonly callerDeadlineMs: number | undefined; readonly incoming: IncomingCall | undefined } {
  const incoming = p.inheritDeadline ? incomingCall() : undefined;
  if (incoming === undefined) return NOT_INHERITED;
  const left = incoming.remainingMs();
  if (!(left < Infinity)) return { callerDeadlineMs: undefined, incoming };
  return { callerDeadlineMs: Math.max(0, left), incoming };
}

const NOT_INHERITED = Object.freeze({ callerDeadlineMs: undefined, incoming: undefined });

/** Tells the incoming request (if any) that this operation's last answer said "don't retry". */
export function passOnNoRetry(incoming: IncomingCall | undefined, r: RunResult<unknown>): void {
  if (incoming === undefined) return;
  if (r.why === 'retry_after_no_retry' || saysNoRetry(r.last?.headers)) incoming.dependencySaidNoRetry();
}

/**
 * Dispatch options with a `headers` key (`opts` itself when it has one): what
 * `withHeaders()` copies. On Node 20, a property added to an object just made by a spread
 * (`{ ...opts, headers }` when `opts` has no `headers`) takes V8's slow path, about 1 µs
 * each time; a copy of an object that already has the key, then a store into it, does not.
 */
export function withHeadersKey(opts: Dispatcher.DispatchOptions): Dispatcher.DispatchOptions {
  return 'headers' in opts ? opts : Object.assign({ headers: undefined }, opts);
}

/** A copy of dispatch options with these headers: `{ ...opts, headers }`, in one copy and without the slow path. */
export function optsWithHeaders(opts: Dispatcher.DispatchOptions, headers: Dispatcher.DispatchOptions['headers']): Dispatcher.DispatchOptions {
  return 'headers' in opts ? withHeaders(opts, headers) : Object.assign({ headers }, opts);
}

/** A copy of `template` (one with a `headers` key: see withHeadersKey) with these headers: `{ ...template, headers }`, without the slow path. */
export function withHeaders<O extends Dispatcher.DispatchOptions>(template: O, headers: Dispatcher.DispatchOptions['headers']): O {
  const o = { ...template };
  o.headers = headers;
  return o;
}

/** Flat undici headers (`[name, value, …]`) of one attempt: the call's own plus the propagation headers. */
export function attemptHeaders(base: readonly string[], p: ResolvedPropagation, ctx: AttemptContext): string[] {
  return appendPropagation(base.slice(), p, ctx.attempt, ctx.timeoutMs);
}

/** A call's own limits (absent: the policy's), as operationDeadlineMs and operationAttemptTimeoutMs read them. */
export interface CallLimits {
  readonly deadlineMs?: number;
  readonly attemptTimeoutMs?: number;
  readonly callerDeadlineMs?: number;
}

const NO_LIMITS: CallLimits = Object.freeze({});

/** A call's own limits as one object (a shared empty one when it has none). */
export function limitsOf(deadlineMs: number | undefined, attemptTimeoutMs: number | undefined, callerDeadlineMs: number | undefined): CallLimits {
  return deadlineMs === undefined && attemptTimeoutMs === undefined && callerDeadlineMs === undefined
    ? NO_LIMITS
    : { deadlineMs, attemptTimeoutMs, callerDeadlineMs };
}
