// What the client and the interceptor share: per-dependency protections, the state of one
// call around execute(), one attempt through an undici dispatcher, and per-call limits.
import type { Dispatcher } from 'undici';
import {
  createCircuitBreaker, type BreakerSnapshot, type BreakerSpec, type BreakerStateChange, type CircuitBreaker,
} from '../core/breaker.js';
import { createRetryBudget, type RetryBudget } from '../core/budget.js';
import { RelentError } from '../core/errors.js';
import type { Policy, PolicySpec } from '../core/policy.js';
import type { AttemptEvent, Clock } from '../core/types.js';
import { resolvePolicy, withOverrides } from '../presets/index.js';
import { createBulkhead, type Bulkhead, type BulkheadOptions } from '../run/bulkhead.js';
import type { AttemptContext, RelentEvent } from '../run/run.js';
import { AttemptHandler } from './attempt.js';
import { WireError } from './classify.js';

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
}

export interface Dependency {
  readonly budget: RetryBudget | null;
  readonly breaker: CircuitBreaker | null;
  readonly bulkhead: Bulkhead | null;
}

const MAX_DEPENDENCIES = 10_000;

/**
 * The budget, breaker and bulkhead of each dependency key, created on first use. The
 * budget is made from the `budget` spec of the first policy used with the key.
 * At most 10 000 keys are kept (the oldest is dropped, and recreated when used again).
 */
export class Dependencies {
  readonly breakers = new Map<string, CircuitBreaker>();
  readonly bulkheads = new Map<string, Bulkhead>();
  readonly budgets = new Map<string, RetryBudget>();
  private readonly deps = new Map<string, Dependency>();
  private readonly shareBudget: boolean;
  private readonly breakerSpec: BreakerSpec | false;
  private readonly bulkheadOpts: BulkheadOptions | false;

  constructor(private readonly o: ProtectionOptions) {
    this.shareBudget = o.budget ?? true;
    if (typeof this.shareBudget !== 'boolean') throw invalid('budget', 'Expected `budget` to be a boolean');
    this.breakerSpec = o.breaker ?? false;
    this.bulkheadOpts = o.bulkhead ?? false;
    // Validate now, with messages naming the field.
    if (this.breakerSpec !== false) createCircuitBreaker(this.breakerSpec);
    if (this.bulkheadOpts !== false) createBulkhead(this.bulkheadOpts);
  }

  get(key: string, policy: Policy): Dependency {
    let d = this.deps.get(key);
    if (d !== undefined) return d;
    if (this.deps.size >= MAX_DEPENDENCIES) {
      const oldest = this.deps.keys().next().value as string;
      this.deps.delete(oldest);
      this.breakers.delete(oldest);
      this.bulkheads.delete(oldest);
      this.budgets.delete(oldest);
    }
    const budget = this.shareBudget && policy.budget !== null ? createRetryBudget(policy.budget) : null;
    const breaker = this.breakerSpec === false ? null : createCircuitBreaker(this.breakerSpec, {
      name: key,
      initialState: this.o.breakerState?.[key] ?? null,
      onStateChange: this.o.onBreakerStateChange ?? null,
    });
    const bulkhead = this.bulkheadOpts === false ? null : createBulkhead(this.bulkheadOpts);
    d = { budget, breaker, bulkhead };
    this.deps.set(key, d);
    if (budget) this.budgets.set(key, budget);
    if (breaker) this.breakers.set(key, breaker);
    if (bulkhead) this.bulkheads.set(key, bulkhead);
    return d;
  }

  snapshot(): Record<string, BreakerSnapshot> {
    const out: Record<string, BreakerSnapshot> = {};
    for (const [k, b] of this.breakers) out[k] = b.toJSON();
    return out;
  }
}

/** The state of one call while the executor runs it. */
export class Call {
  /** The attempt in flight, or the last one that produced a response. */
  current: AttemptHandler | null = null;
  lastAttempt: AttemptEvent | null = null;
  private signal: AbortSignal | null = null;

  constructor(
    readonly onClientEvent: ((e: RelentEvent) => void) | null,
    readonly onCallEvent: ((e: RelentEvent) => void) | null,
  ) {}

  readonly onEvent = (e: RelentEvent): void => {
    if (e.type === 'attempt') {
      this.lastAttempt = e;
      // A retry: read the failed response's body now so its connection goes back to the pool.
      if (e.decision === 'retry' && this.current !== null) this.current.drain();
    }
    if (this.onClientEvent !== null) this.onClientEvent(e);
    if (this.onCallEvent !== null) this.onCallEvent(e);
  };

  /**
   * One listener on the caller's signal for the whole call (attempts and body): it aborts
   * whatever is in flight. (The executor ends the operation with its own listener.)
   */
  listen(signal: AbortSignal): void {
    this.signal = signal;
    signal.addEventListener('abort', this.onAbort);
  }

  private readonly onAbort = (): void => {
    this.current?.abort(asError(this.signal?.reason));
  };

  release(): void {
    if (this.signal !== null) this.signal.removeEventListener('abort', this.onAbort);
    this.signal = null;
  }
}

/**
 * One attempt: dispatches `opts` with a fresh AttemptHandler and settles at the response
 * head or the failure. The attempt arms its own timer for `ctx.timeoutMs` (the attempt
 * timeout, or the time left if shorter) instead of listening on `ctx.signal`: it fires
 * just before the executor's own, and knows whether undici had started the request, so
 * a timeout while still connecting is `connect_timeout` / `not_sent`, and one after is
 * `timeout` / `unknown`. The caller's signal is the Call's (one listener per call).
 */
export function dispatchAttempt(
  dispatch: (opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler) => boolean,
  opts: Dispatcher.DispatchOptions,
  ctx: AttemptContext,
  call: Call,
  timers: Clock,
  acceptStatus: ((status: number) => boolean) | null,
): Promise<AttemptHandler> {
  return new Promise<AttemptHandler>((resolve, reject) => {
    let cancelTimer: (() => void) | null = null;
    const h = new AttemptHandler((x) => {
      if (cancelTimer !== null) cancelTimer();
      resolve(x);
    }, (e) => {
      if (cancelTimer !== null) cancelTimer();
      reject(e);
    }, acceptStatus);
    call.current = h;
    cancelTimer = timers.setTimer(() => {
      cancelTimer = null;
      if (h.headed) return;
      const why = Object.assign(new Error(`relent: attempt timed out after ${Math.round(ctx.timeoutMs)} ms`), { code: 'ERR_RELENT_ATTEMPT_TIMEOUT' });
      reject(new WireError(why, h.started ? { errorClass: 'timeout', sent: 'unknown' } : { errorClass: 'connect_timeout', sent: 'not_sent' }));
      h.abort(why);
    }, ctx.timeoutMs > 1 ? ctx.timeoutMs - 1 : ctx.timeoutMs); // 1 ms early: always before the executor's own timer
    dispatch(opts, h);
  });
}

function checkMs(v: unknown, field: string): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0 || v > 2 ** 31 - 1) throw invalid(field, `Expected \`${field}\` to be a number of ms in (0, 2147483647]`);
  return v;
}

/** Resolves a per-call policy against the base (cached per object). */
export function callPolicy(base: Policy, p: string | PolicySpec | Policy | undefined, cache: WeakMap<object, Policy>): Policy {
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
 * A call's own deadline and attempt timeout, and the one-attempt limit of a stream body.
 * execute() can only shorten the policy's times, so a longer one is merged into the policy.
 */
export function callLimits(policy: Policy, o: { deadlineMs?: number; attemptTimeoutMs?: number; stream: boolean }): {
  policy: Policy; deadlineMs: number | undefined; attemptTimeoutMs: number | undefined; streamLimited: boolean;
} {
  let deadlineMs = checkMs(o.deadlineMs, 'deadlineMs');
  let attemptTimeoutMs = checkMs(o.attemptTimeoutMs, 'attemptTimeoutMs');
  const over: { deadlineMs?: number; attemptTimeoutMs?: number; maxAttempts?: number } = {};
  let changed = false;
  if (deadlineMs !== undefined && deadlineMs > policy.deadlineMs) {
    over.deadlineMs = deadlineMs;
    deadlineMs = undefined;
    changed = true;
  }
  if (attemptTimeoutMs !== undefined && policy.attemptTimeoutMs !== null && attemptTimeoutMs > policy.attemptTimeoutMs) {
    over.attemptTimeoutMs = attemptTimeoutMs;
    attemptTimeoutMs = undefined;
    changed = true;
  }
  // A stream is sent once: one attempt, and ERR_BODY_NOT_REPLAYABLE when the policy would have retried.
  const streamLimited = o.stream && policy.maxAttempts > 1;
  if (streamLimited) {
    over.maxAttempts = 1;
    changed = true;
  }
  return { policy: changed ? withOverrides(policy, over) : policy, deadlineMs, attemptTimeoutMs, streamLimited };
}
