// One call of client.fetch (a handler at module level, as undici's are): the success
// path's first attempt, or the executor from the start; it reads the client's context.
import type { Dispatcher } from 'undici';
import type { Policy } from '../core/policy.js';
import { appendPropagation } from '../core/propagation.js';
import type { HedgeState } from '../core/hedge.js';
import type { Clock } from '../core/types.js';
import {
  executeFrom,
  executeThen,
  newOperationId,
  type AttemptContext,
  type Classified,
  type ExecuteOptions,
  type FirstAttemptEnd,
  type RunResult,
} from '../run/run.js';
import type { IncomingCall } from '../run/incoming.js';
import { AttemptHandler } from './attempt.js';
import type { ClientContext, RelentRequestInit } from './client.js';
import { callRunOptions } from './driver.js';
import { checkRouteTemplate, normalizeUrlEndpoint, originKey } from './endpoint.js';
import { whereOf } from './errors.js';
import {
  attemptHeaders,
  Call,
  callLimits,
  callPolicy,
  dispatchAttempt,
  inherit,
  invalid,
  limitsOf,
  observeRateLimited,
  observeResponse,
  passOnNoRetry,
  plainPath,
  withHeaders,
  type Dependency,
} from './operation.js';
import { FirstAttempt } from './first-attempt.js';
import type { Prepared } from './request.js';
import { BoundLimit, REDIRECT_STATUSES, settle, toResponse, unexpectedRedirect, type BoundBodyLimit } from './response.js';

const validStatus = (s: number): boolean => s >= 200 && s <= 599;

/** The client's observation of an attempt: a response head (a failure's hint headers read, its body drained), or a state check's Response. */
function classifyClientValue(v: AttemptHandler | Response, policy: Policy): Classified {
  return v instanceof AttemptHandler ? observeResponse(v, policy) : { status: v.status };
}

/** classifyClientValue for a dependency with a rate limit: a success's RateLimit field is read too. */
function classifyRateLimitedValue(v: AttemptHandler | Response, policy: Policy): Classified {
  return v instanceof AttemptHandler ? observeRateLimited(v, policy) : { status: v.status };
}

/** One call of client.fetch: the success path's first attempt (FirstAttempt), or the executor from the start. */
export class ClientCall extends FirstAttempt implements BoundBodyLimit {
  private readonly call: Call;
  private readonly lim: ReturnType<typeof callLimits>;
  private readonly dep: Dependency;
  private readonly template: string | undefined;
  private readonly bodyDeadline: boolean;
  private readonly origin: string;
  private endpointValue: string | undefined = undefined;
  private opId: string | undefined;
  private callerDeadlineMs: number | undefined = undefined;
  private incoming: IncomingCall | undefined = undefined;
  private resolve: ((r: Response) => void) | null = null;
  private reject: ((e: unknown) => void) | null = null;
  /** As the body limit of the success path's Response: the operation's time left at its answer. */
  remainingMs = 0;

  constructor(
    private readonly cx: ClientContext,
    private readonly req: Prepared,
    private readonly init: RelentRequestInit,
  ) {
    super();
    const bodyDeadline = init.bodyDeadline ?? this.cx.bodyDeadline;
    if (typeof bodyDeadline !== 'boolean') throw invalid('bodyDeadline', 'Expected `bodyDeadline` to be a boolean');
    this.bodyDeadline = bodyDeadline;
    const lim = callLimits(callPolicy(this.cx.basePolicy, init.policy, this.cx.policyCache), {
      deadlineMs: init.deadlineMs,
      attemptTimeoutMs: init.attemptTimeoutMs,
      stream: req.body.kind === 'stream',
    });
    this.lim = lim;
    this.policy = lim.policy;
    let template = init.routeTemplate;
    if (template === undefined && this.cx.routeOf !== null) template = this.cx.routeOf(req.url) ?? undefined;
    this.template = template === undefined ? undefined : checkRouteTemplate(template);
    this.origin = req.url.origin;
    this.dep = this.cx.deps.get(this.cx.keyOf === originKey ? this.origin : this.cx.keyOf(req.url), lim.policy);
    this.call = new Call(false);
    this.opId = init.operationId;
  }

  /** Scheme, host, port and path (or the route template), made when events, tracing or an error need it. */
  private get endpoint(): string {
    return (this.endpointValue ??= normalizeUrlEndpoint(this.req.url, this.template ?? null));
  }

  // As a BoundBodyLimit (the success path's):
  get clock(): Clock {
    return this.cx.timers;
  }

  where(): string {
    return whereOf(this.req.method, this.endpoint, this.result());
  }

  result(): { operationId: string; attempts: number } {
    return { operationId: (this.opId ??= newOperationId()), attempts: 1 };
  }

  start(): Promise<Response> {
    const req = this.req;
    const policy = this.policy!;
    const dep = this.dep;
    const hedging = this.cx.deps.hedgingOf(dep, policy);
    const { callerDeadlineMs, incoming } = inherit(this.cx.prop);
    this.callerDeadlineMs = callerDeadlineMs;
    this.incoming = incoming;
    const p = new Promise<Response>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    const signal = req.signal;
    // The success path (plainPath), for a caller still waiting.
    if (
      plainPath(this.cx.onEvent !== null || this.init.onEvent !== undefined, this.cx.instrumentation !== null, hedging, dep, req.body.kind === 'stream') &&
      !(signal?.aborted ?? false) &&
      this.plan(policy, dep.guard.budget, limitsOf(this.lim.deadlineMs, this.lim.attemptTimeoutMs, callerDeadlineMs), this.cx.clock)
    ) {
      this.send(
        this.cx.dispatch,
        this.dispatchOptions(this.cx.prop.sends ? appendPropagation(req.headers.slice(), this.cx.prop, 1, this.timeoutMs) : req.headers),
        validStatus,
      );
      if (this.inFlight) {
        this.call.current = this.first;
        if (signal !== undefined) this.call.listen(signal, (reason) => this.cancelFirst(reason));
      }
      return p;
    }
    if (signal !== undefined) this.call.listen(signal);
    try {
      executeThen<AttemptHandler | Response>(this.attemptFn(), this.runOptions(hedging), (r) => this.ended(r));
    } catch (e) {
      this.call.release();
      this.reject!(e);
    }
    return p;
  }

  private dispatchOptions(headers: string[]): Dispatcher.DispatchOptions & { maxRedirections: number } {
    const req = this.req;
    const url = req.url;
    return {
      origin: this.origin,
      path: url.pathname + url.search,
      method: req.method as Dispatcher.HttpMethod,
      headers,
      body: req.body.kind === 'bytes' ? req.body.bytes : req.body.kind === 'stream' ? (req.body.stream as Dispatcher.DispatchOptions['body']) : null,
      maxRedirections: req.redirect === 'follow' ? this.cx.maxRedirections : 0,
    };
  }

  private attemptFn(): (ctx: AttemptContext) => Promise<AttemptHandler> {
    const call = this.call;
    const headers = this.req.headers;
    const dispatchOpts = this.dispatchOptions(headers);
    const { dispatch, prop } = this.cx;
    return prop.sends
      ? (ctx) => dispatchAttempt(dispatch, withHeaders(dispatchOpts, attemptHeaders(headers, prop, ctx)), call, validStatus, ctx)
      : (ctx) => dispatchAttempt(dispatch, dispatchOpts, call, validStatus, ctx);
  }

  private runOptions(hedging: HedgeState | null): ExecuteOptions<AttemptHandler | Response> {
    const init = this.init;
    if (hedging !== null) (this.call as { attempts: Map<number, AttemptHandler> | null }).attempts = new Map();
    return callRunOptions<AttemptHandler | Response>(this.cx, {
      policy: this.policy!,
      operationId: (this.opId ??= newOperationId()),
      method: this.req.method,
      endpoint: this.endpoint,
      onEvent: init.onEvent,
      classifyValue: this.dep.guard.rateLimiter === null ? classifyClientValue : classifyRateLimitedValue,
      call: this.call,
      dep: this.dep,
      hedging,
      idempotencyKey: this.req.idempotencyKey,
      idempotent: init.idempotent,
      limits: limitsOf(this.lim.deadlineMs, this.lim.attemptTimeoutMs, this.callerDeadlineMs),
      stateCheck: init.stateCheck,
      signal: this.req.signal,
    });
  }

  /** The first attempt needs more than a plain answer: the executor decides it and carries on. */
  protected override handOver(how: FirstAttemptEnd, payload: unknown): void {
    this.call.current = this.first;
    try {
      executeFrom<AttemptHandler | Response>(this.attemptFn(), this.runOptions(null), this.startedAt, this.timeoutMs, this.deadlineMs, how, payload, (r) =>
        this.ended(r),
      );
    } catch (e) {
      this.call.release();
      this.reject!(e);
    }
  }

  /** The first attempt's plain answer is the Response. */
  protected override answered(h: AttemptHandler, now: number): void {
    const call = this.call;
    const req = this.req;
    try {
      if (req.redirect === 'error' && REDIRECT_STATUSES.has(h.status)) {
        h.discard();
        call.release();
        throw unexpectedRedirect(h.status, 'return', this.result(), this.where());
      }
      this.remainingMs = this.remainingAt(now);
      this.resolve!(toResponse(h, req, call, this.bodyDeadline ? this : null, false));
    } catch (e) {
      this.reject!(e);
    }
  }

  /** The operation's end, from the executor. */
  private ended(r: RunResult<AttemptHandler | Response>): void {
    try {
      passOnNoRetry(this.incoming, r);
      // Built only for an error: a success never needs it.
      const where = (): string => whereOf(this.req.method, this.endpoint, r);
      const limit = this.bodyDeadline ? new BoundLimit(this.cx.timers, r.remainingMs, r.deadlineMs, where, r) : null;
      this.resolve!(settle(r, this.call, this.req, this.policy!, where, this.lim.streamLimited, limit));
    } catch (e) {
      this.reject!(e);
    }
  }
}
