// One operation through the undici interceptor (a handler at module level, as undici's
// are): the success path's first attempt, or the executor; the response handed on to the
// wrapped handler, body and all, under the deadline. It reads the interceptor's context.
import type { Dispatcher } from 'undici';
import { type Policy } from '../core/policy.js';
import { appendPropagation } from '../core/propagation.js';
import { executeFrom, executeThen, newOperationId, type AttemptContext, type FirstAttemptEnd, type ExecuteOptions, type RunResult } from '../run/run.js';
import type { IncomingCall } from '../run/incoming.js';
import type { HedgeState } from '../core/hedge.js';
import type { AttemptHandler } from './attempt.js';
import { beforeQuery, normalizeUrlEndpoint } from '../core/endpoint.js';
import { checkRouteTemplate } from './endpoint.js';
import { bodyDeadlineError, failureError, notReplayableError, tooLongError, waitTooLong, whereOf } from './errors.js';
import { IDEMPOTENCY_KEY_HEADER, keyFromHeader, resolveIdempotencyKey } from '../shared/idempotency.js';
import {
  asError,
  attemptHeaders,
  Call,
  callLimits,
  callPolicy,
  dispatchAttempt,
  inherit,
  invalid,
  limitsOf,
  optsWithHeaders,
  passOnNoRetry,
  plainPath,
  withHeaders,
  withHeadersKey,
  type Dependency,
} from './operation.js';
import { FirstAttempt } from './first-attempt.js';

import type { InterceptorContext, RelentDispatchOptions } from './interceptor.js';
import { callRunOptions } from './driver.js';

type IncomingHttpHeaders = Record<string, string | string[] | undefined>;
export type Dispatch = (opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler) => boolean;

const NO_OPTIONS: RelentDispatchOptions = Object.freeze({});
const EMPTY_CONTEXT = Object.freeze({});
const UPPER = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'TRACE']);

/** `http://host` → `http://host:80` (cached: a process talks to few origins). */
const originCache = new Map<string, string>();
function normalizedOrigin(origin: string): string {
  let o = originCache.get(origin);
  if (o === undefined) {
    o = normalizeUrlEndpoint(new URL(origin), '');
    if (originCache.size > 1000) originCache.clear();
    originCache.set(origin, o);
  }
  return o;
}

/** Whether undici can send this body again (strings, bytes, Blob and FormData are re-encoded per dispatch). */
function replayable(body: unknown): boolean {
  if (body === undefined || body === null || typeof body === 'string') return true;
  if (body instanceof Uint8Array || ArrayBuffer.isView(body) || body instanceof ArrayBuffer) return true;
  if (typeof Blob !== 'undefined' && body instanceof Blob) return true;
  if (typeof FormData !== 'undefined' && body instanceof FormData) return true;
  return false;
}

/** The Idempotency-Key of undici request headers (object, flat array, pairs or iterable), if any. */
function headerKey(headers: unknown): string | null {
  if (headers === null || headers === undefined) return null;
  if (Array.isArray(headers)) {
    if (headers.length > 0 && Array.isArray(headers[0])) {
      for (const [k, v] of headers as [string, string][]) if (String(k).toLowerCase() === IDEMPOTENCY_KEY_HEADER) return keyFromHeader(String(v));
      return null;
    }
    for (let i = 0; i + 1 < headers.length; i += 2)
      if (String(headers[i]).toLowerCase() === IDEMPOTENCY_KEY_HEADER) return keyFromHeader(String(headers[i + 1]));
    return null;
  }
  if (typeof headers === 'object') {
    if (typeof (headers as { [Symbol.iterator]?: unknown })[Symbol.iterator] === 'function') {
      for (const [k, v] of headers as Iterable<[string, string]>) if (String(k).toLowerCase() === IDEMPOTENCY_KEY_HEADER) return keyFromHeader(String(v));
      return null;
    }
    for (const k of Object.keys(headers)) {
      if (k.toLowerCase() === IDEMPOTENCY_KEY_HEADER) {
        const v = (headers as Record<string, unknown>)[k];
        return keyFromHeader(Array.isArray(v) ? String(v[0]) : String(v));
      }
    }
  }
  return null;
}

/** undici request headers in the flat-array form, without the names in `drop` (lower case). */
function flatHeaders(headers: unknown, drop: readonly string[]): string[] {
  const out = flatten(headers);
  if (drop.length === 0) return out;
  const kept: string[] = [];
  for (let i = 0; i + 1 < out.length; i += 2) if (!drop.includes(out[i]!.toLowerCase())) kept.push(out[i]!, out[i + 1]!);
  return kept;
}

/** undici request headers plus one header, in the flat-array form. */
function withHeader(headers: unknown, name: string, value: string): string[] {
  const out = flatten(headers);
  out.push(name, value);
  return out;
}

function flatten(headers: unknown): string[] {
  const out: string[] = [];
  if (Array.isArray(headers)) {
    if (headers.length > 0 && Array.isArray(headers[0])) for (const [k, v] of headers as [string, string][]) out.push(String(k), String(v));
    else for (const x of headers) out.push(String(x));
  } else if (headers !== null && typeof headers === 'object') {
    if (typeof (headers as { [Symbol.iterator]?: unknown })[Symbol.iterator] === 'function') {
      for (const [k, v] of headers as Iterable<[string, string]>) out.push(String(k), String(v));
    } else {
      for (const [k, v] of Object.entries(headers as Record<string, unknown>)) {
        if (v === undefined) continue;
        if (Array.isArray(v)) for (const x of v) out.push(k, String(x));
        else out.push(k, String(v));
      }
    }
  }
  return out;
}

/**
 * How the wrapped handler's abort reaches the executor: the part of an AbortSignal the
 * executor uses (aborted, reason, abort listeners). An AbortSignal costs ~5 µs to make
 * in Node 20 and its listeners ~1 µs each to add and remove (EventTarget), more than
 * the rest of the interceptor; this costs one small object.
 */
class Cancellation {
  aborted = false;
  reason: unknown = undefined;
  /** The first listener (the executor's; most calls have no other): no array per call. */
  private first: (() => void) | null = null;
  private more: (() => void)[] | null = null;

  addEventListener(_type: 'abort', fn: () => void): void {
    if (this.first === null && this.more === null) this.first = fn;
    else (this.more ??= new Array<() => void>()).push(fn);
  }

  removeEventListener(_type: 'abort', fn: () => void): void {
    if (this.first === fn) {
      this.first = null;
      return;
    }
    const l = this.more;
    if (l === null) return;
    const i = l.indexOf(fn);
    if (i >= 0) l.splice(i, 1);
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    const first = this.first;
    const l = this.more;
    this.first = null;
    this.more = null;
    if (first !== null) first();
    if (l !== null) for (const fn of l) fn();
  }

  /** As the executor's `signal` option (it reads only what this class has). */
  get signal(): AbortSignal {
    return this as unknown as AbortSignal;
  }
}

export class InterceptedOperation extends FirstAttempt implements Dispatcher.DispatchController {
  aborted = false;
  paused = false;
  reason: Error | null = null;
  private committed: AttemptHandler | null = null;
  private call: Call | null = null;
  private ctl: Cancellation | null = null;
  private done = false;
  /** The body deadline's timer when the executor ran the operation (on the success path it is this object). */
  private cancelBodyTimer: (() => void) | null = null;
  // The request as parsed, for the executor when it runs (or takes over) the operation.
  private next: Dispatch | null = null;
  private opts: Dispatcher.DispatchOptions | null = null;
  private per: RelentDispatchOptions = NO_OPTIONS;
  private origin = '';
  private method = '';
  private key: string | null = null;
  private lim: ReturnType<typeof callLimits> | null = null;
  private dep: Dependency | null = null;
  private callerDeadlineMs: number | undefined = undefined;
  private incoming: IncomingCall | undefined = undefined;
  private bodyDeadline = true;
  private endpoint: string | undefined = undefined;

  constructor(
    private readonly cx: InterceptorContext,
    private readonly handler: Dispatcher.DispatchHandler,
  ) {
    super();
  }

  start(dispatch: Dispatch, optsIn: Dispatcher.DispatchOptions): void {
    let opts = optsIn;
    const own = (opts as { relent?: RelentDispatchOptions }).relent;
    if (own !== undefined) {
      const { relent: _ignored, ...rest } = opts as Dispatcher.DispatchOptions & { relent?: unknown };
      opts = rest;
    }
    const per: RelentDispatchOptions = own ?? NO_OPTIONS;
    this.per = per;
    const origin = typeof opts.origin === 'string' ? opts.origin : opts.origin instanceof URL ? opts.origin.origin : '';
    if (origin === '') throw invalid('origin', 'relentInterceptor needs `origin` in the dispatch options');
    this.origin = origin;
    const method = opts.method.length <= 7 && UPPER.has(opts.method) ? opts.method : String(opts.method).toUpperCase();
    this.method = method;

    const inHeader = opts.headers === undefined || opts.headers === null ? null : headerKey(opts.headers);
    const { key, header } = resolveIdempotencyKey(per.idempotencyKey ?? null, inHeader, this.cx.autoKey, method, per.idempotent);
    this.key = key;
    if (header !== null) opts = withHeaders(withHeadersKey(opts), withHeader(opts.headers, IDEMPOTENCY_KEY_HEADER, header));

    const body = opts.body;
    const stream = body !== undefined && body !== null && !replayable(body);
    const lim =
      per === NO_OPTIONS && !stream
        ? null
        : callLimits(callPolicy(this.cx.basePolicy, per.policy, this.cx.policyCache), {
            deadlineMs: per.deadlineMs,
            attemptTimeoutMs: per.attemptTimeoutMs,
            stream,
          });
    this.lim = lim;
    const policy = lim === null ? this.cx.basePolicy : lim.policy;
    this.policy = policy;
    this.opts = opts;
    this.next = dispatch;
    // The endpoint is built only when someone listens (events, tracing); errors build it when they happen.
    const listened = this.cx.listened(per.onEvent);
    if (listened || this.cx.instrumentation !== null) this.endpoint = this.endpointOf();
    const dep = this.cx.deps.get(this.cx.keyOf !== null ? this.cx.keyOf(origin, opts.path) : origin, policy);
    this.dep = dep;
    const hedging = this.cx.deps.hedgingOf(dep, policy);
    this.bodyDeadline = this.cx.bodyDeadlineOf(per.bodyDeadline);
    const { callerDeadlineMs, incoming } = inherit(this.cx.prop);
    this.callerDeadlineMs = callerDeadlineMs;
    this.incoming = incoming;

    this.handler.onRequestStart?.(this, EMPTY_CONTEXT);
    if (this.aborted) {
      // The wrapped handler aborted at once.
      this.fail(this.reason ?? new Error('aborted'));
      return;
    }
    // The success path (plainPath).
    const prop = this.cx.prop;
    if (
      plainPath(listened, this.cx.instrumentation !== null, hedging, dep, stream) &&
      this.plan(policy, dep.guard.budget, limitsOf(lim?.deadlineMs, lim?.attemptTimeoutMs, callerDeadlineMs), this.cx.clock)
    ) {
      this.send(dispatch, prop.sends ? optsWithHeaders(opts, appendPropagation(flatHeaders(opts.headers, prop.names), prop, 1, this.timeoutMs)) : opts, null);
      return;
    }
    executeThen<AttemptHandler>(this.attemptFn(), this.runOptions(hedging), (r) => this.ended(r));
  }

  /** `origin` + the path (or its route template), for events and error messages. */
  private endpointOf(): string {
    const p = beforeQuery(this.opts!.path);
    let template = this.per.routeTemplate;
    if (template === undefined && this.cx.routeOf !== null) template = this.cx.routeOf(p) ?? undefined;
    return normalizedOrigin(this.origin) + (template === undefined ? p : checkRouteTemplate(template));
  }

  /** Each attempt through the next dispatcher, with the propagation headers. */
  private attemptFn(): (ctx: AttemptContext) => Promise<AttemptHandler> {
    const call = new Call(false);
    this.call = call;
    const dispatch = this.next!;
    const sendOpts = this.opts!;
    const prop = this.cx.prop;
    if (prop.sends) {
      const base = flatHeaders(sendOpts.headers, prop.names);
      const template = withHeadersKey(sendOpts);
      return (ctx) => dispatchAttempt(dispatch, withHeaders(template, attemptHeaders(base, prop, ctx)), call, null, ctx);
    }
    return (ctx) => dispatchAttempt(dispatch, sendOpts, call, null, ctx);
  }

  private runOptions(hedging: HedgeState | null): ExecuteOptions<AttemptHandler> {
    const ctl = new Cancellation();
    if (this.aborted) {
      ctl.aborted = true;
      ctl.reason = this.reason;
    }
    this.ctl = ctl;
    if (hedging !== null) (this.call as { attempts: Map<number, AttemptHandler> | null }).attempts = new Map();
    const per = this.per;
    const lim = this.lim;
    return callRunOptions<AttemptHandler>(this.cx, {
      policy: this.policy!,
      operationId: per.operationId,
      method: this.method,
      endpoint: this.endpoint,
      onEvent: per.onEvent,
      classifyValue: null,
      call: this.call!,
      dep: this.dep!,
      hedging,
      idempotencyKey: this.key,
      idempotent: per.idempotent,
      limits: limitsOf(lim?.deadlineMs, lim?.attemptTimeoutMs, this.callerDeadlineMs),
      signal: ctl.signal,
    });
  }

  /** The first attempt needs more than a plain answer: the executor decides it and carries on. */
  protected override handOver(how: FirstAttemptEnd, payload: unknown): void {
    const fn = this.attemptFn();
    this.call!.current = this.first;
    executeFrom<AttemptHandler>(fn, this.runOptions(null), this.startedAt, this.timeoutMs, this.deadlineMs, how, payload, (r) => this.ended(r));
  }

  /** The first attempt's plain answer: handed on, body and all, under the deadline. */
  protected override answered(h: AttemptHandler, now: number): void {
    if (this.aborted) {
      h.discard();
      this.fail(this.reason ?? new Error('aborted'));
      return;
    }
    this.commit(h);
    if (this.bodyDeadline && !this.done && !this.aborted) {
      const left = this.remainingAt(now);
      if (left <= 0) this.timerFired();
      else this.arm(left, now);
    }
  }

  /** The body deadline passed (success path). */
  protected override timerFired(): void {
    if (this.done) return;
    const e = bodyDeadlineError(
      this.firstResult(),
      this.deadlineMs,
      whereOf(this.method, this.endpoint ?? this.endpointOf(), this.firstResult()),
      this.committed!.status,
    );
    this.committed!.abort(e);
    this.fail(e);
  }

  /** What an error names of an operation that ended on its first attempt's answer. */
  private firstResult(): { operationId: string; attempts: number } {
    return { operationId: (this.opId ??= this.per.operationId ?? newOperationId()), attempts: 1 };
  }

  private opId: string | undefined = undefined;

  /** The operation's end, handed over at once (no promise between the last answer and the wrapped handler). */
  private ended(r: RunResult<AttemptHandler>): void {
    this.ctl = null;
    try {
      passOnNoRetry(this.incoming, r);
      const lim = this.lim;
      this.settle(
        r,
        this.call!,
        this.policy!,
        () => whereOf(this.method, this.endpoint ?? this.endpointOf(), r),
        lim !== null && lim.streamLimited,
        this.bodyDeadline ? r.deadlineMs : null,
      );
    } catch (e) {
      this.fail(asError(e));
    }
  }

  private settle(r: RunResult<AttemptHandler>, call: Call, policy: Policy, where: () => string, streamLimited: boolean, deadlineMs: number | null): void {
    if (this.aborted) {
      call.current?.discard();
      call.discardOthers(null);
      this.fail(this.reason ?? new Error('aborted'));
      return;
    }
    if (!r.outcome.ok) {
      call.current?.discard();
      call.discardOthers(null);
      this.fail(failureError(r, r.outcome.error, where(), streamLimited));
      return;
    }
    const v = r.outcome.value;
    // Hedging: the answer is this attempt's; the others' bodies never reach the wrapped handler.
    call.discardOthers(v);
    const tooLong = waitTooLong(r);
    if (tooLong !== null) {
      v.discard();
      this.fail(tooLongError(r, tooLong, policy, where(), v.status, null));
      return;
    }
    if (streamLimited && r.reason === 'max_attempts') {
      v.discard();
      this.fail(notReplayableError(r, where(), { status: v.status }));
      return;
    }
    this.commit(v);
    if (deadlineMs !== null && !this.done && !this.aborted) {
      // The deadline covers the body: one still arriving when it passes is cut.
      const expire = (): void => {
        this.cancelBodyTimer = null;
        if (this.done) return;
        const e = bodyDeadlineError(r, deadlineMs, where(), v.status);
        v.abort(e);
        this.fail(e);
      };
      if (r.remainingMs <= 0) expire();
      else this.cancelBodyTimer = this.cx.timers.setTimer(expire, r.remainingMs);
    }
  }

  private clearBodyTimer(): void {
    if (!this.inFlight) this.disarm();
    if (this.cancelBodyTimer !== null) {
      this.cancelBodyTimer();
      this.cancelBodyTimer = null;
    }
  }

  /** Hands the final response to the wrapped handler, body and all, with its backpressure. */
  private commit(h: AttemptHandler): void {
    this.committed = h;
    const handler = this.handler;
    try {
      handler.onResponseStart?.(this, h.status, h.headers as IncomingHttpHeaders, h.statusText);
    } catch (e) {
      h.abort(asError(e));
      this.fail(asError(e));
      return;
    }
    if (this.aborted) {
      h.abort(this.reason ?? new Error('aborted'));
      return;
    }
    h.attach(this);
    if (this.paused) h.pause();
  }

  // BodySink: the committed response's body, passed on to the wrapped handler.
  data(chunk: Buffer): void {
    if (this.done) return;
    try {
      this.handler.onResponseData?.(this, chunk);
    } catch (e) {
      this.committed?.abort(asError(e));
    }
  }

  end(trailers: Record<string, string | string[] | undefined>): void {
    if (this.done) return;
    try {
      this.clearBodyTimer();
      this.handler.onResponseEnd?.(this, trailers as IncomingHttpHeaders);
      this.done = true;
    } catch (e) {
      // As undici's core does: a handler that throws at the end gets its own error
      // (undici's retry handler throws there to ask for a retry).
      this.fail(asError(e));
    }
  }

  error(e: Error): void {
    this.fail(e);
  }

  fail(error: Error): void {
    if (this.done) return;
    this.done = true;
    this.clearBodyTimer();
    this.handler.onResponseError?.(this, error);
  }

  abort(reason: Error): void {
    if (this.aborted || this.done) return;
    this.aborted = true;
    this.reason = reason;
    if (this.committed !== null) {
      this.committed.abort(reason);
      return;
    }
    if (this.inFlight) {
      // The success path's first attempt: cut it; the executor ends the operation.
      this.cancelFirst(reason);
      return;
    }
    // Before the response: cancel the attempt in flight, and end the operation (also
    // during a backoff wait) through the executor's signal.
    this.call?.abortAll(reason);
    this.ctl?.abort(reason);
  }

  pause(): void {
    this.paused = true;
    this.committed?.pause();
  }

  resume(): void {
    this.paused = false;
    this.committed?.resume();
  }
}
