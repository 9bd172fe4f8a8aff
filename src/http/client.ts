import type { Agent, Dispatcher } from 'undici';
import type { BreakerSnapshot, CircuitBreaker } from '../core/breaker.js';
import type { RetryBudget } from '../core/budget.js';
import { type Policy, type PolicySpec, type PresetName } from '../core/policy.js';
import { appendPropagation, PROPAGATION_DEFAULTS, resolvePropagation, type PropagationSpec, type ResolvedPropagation } from '../core/propagation.js';
import type { HedgeState } from '../core/hedge.js';
import type { Clock, Random, TerminalReason } from '../core/types.js';
import { resolvePolicy } from '../presets/index.js';
import type { Bulkhead } from '../run/bulkhead.js';
import { systemClock } from '../shared/clock.js';
import { undici } from '../shared/undici.js';
import type { ConcurrencyLimit } from '../run/concurrency-limit.js';
import type { RateLimiter } from '../run/rate-limiter.js';
import { forDriver } from '../run/instrument.js';
import {
  executeFrom, executeThen, newOperationId, type AttemptContext, type Classified, type FirstAttemptEnd, type Instrumentation, type RelentEvent, type ExecuteOptions, type RunResult,
} from '../run/run.js';
import type { IncomingCall } from '../run/incoming.js';
import { AttemptHandler, type BodySink } from './attempt.js';
import { prepareBody, type PreparedBody } from './body.js';
import { checkRouteTemplate, normalizeUrlEndpoint, originKey } from './endpoint.js';
import { bodyDeadlineError, failureError, notReplayableError, RelentFetchError, tooLongError, waitTooLong, whereOf } from './errors.js';
import { IDEMPOTENCY_KEY_HEADER, keyFromHeader, resolveIdempotencyKey } from '../shared/idempotency.js';
import {
  asError, attemptHeaders, Call, callLimits, callPolicy, Dependencies, dispatchAttempt, FirstAttempt, inherit, invalid, limitsOf, listenerOf, observeRateLimited, observeResponse,
  passOnNoRetry, PROTECTION_DEFAULTS, plainPath, timeoutOf, withHeaders, type Dependency, type ProtectionOptions,
} from './operation.js';

/** The client's observation of an attempt: a response head (a failure's hint headers read, its body drained), or a state check's Response. */
function classifyClientValue(v: AttemptHandler | Response, policy: Policy): Classified {
  return v instanceof AttemptHandler ? observeResponse(v, policy) : { status: v.status };
}

/** classifyClientValue for a dependency with a rate limit: a success's RateLimit field is read too. */
function classifyRateLimitedValue(v: AttemptHandler | Response, policy: Policy): Classified {
  return v instanceof AttemptHandler ? observeRateLimited(v, policy) : { status: v.status };
}

/** Header values as fetch accepts them. */
export type HeadersLike = Headers | Record<string, string | readonly string[]> | Iterable<readonly [string, string]>;

/** A request body: everything fetch takes, plus Node streams and async iterables. */
export type RequestBody = RequestInit['body'] | AsyncIterable<Uint8Array> | NodeJS.ReadableStream | null;

/** `client.fetch(input, init)`: fetch's init plus relent's per-call options. */
export interface RelentRequestInit {
  readonly method?: string;
  readonly headers?: HeadersLike;
  readonly body?: RequestBody;
  /** Cancels the whole operation at once (the call in flight and any wait); also the response body. */
  readonly signal?: AbortSignal | null;
  /** `follow` (default, up to `maxRedirections`), `manual` (return the 3xx) or `error` (reject on a 3xx). */
  readonly redirect?: 'follow' | 'manual' | 'error';
  /** Accepted for fetch compatibility (streams are always sent half-duplex). */
  readonly duplex?: 'half';
  /** This call's deadline (ms from now) for the whole operation, waits included, and the body unless `bodyDeadline: false`. */
  readonly deadlineMs?: number;
  /**
   * The deadline also covers reading the response body (default: the client's option, true).
   * A body still arriving when the deadline passes is aborted: reading it rejects with
   * ERR_DEADLINE_EXCEEDED naming the deadline. false for long downloads: the body then
   * streams under the caller's `signal` only.
   */
  readonly bodyDeadline?: boolean;
  /** This call's per-attempt timeout (ms); each attempt gets min(this, remaining). */
  readonly attemptTimeoutMs?: number;
  /** Sent as `Idempotency-Key` (a quoted Structured Field String) on every attempt; makes POST/PATCH retryable. */
  readonly idempotencyKey?: string;
  /** Create a random key for this POST/PATCH when none is given (overrides the client option). */
  readonly autoIdempotencyKey?: boolean;
  /** Declares the operation safe (true) or unsafe (false) to repeat; beats method and key. */
  readonly idempotent?: boolean;
  /** Stable across attempts; created when absent. */
  readonly operationId?: string;
  /** A preset name, a policy spec (merged over the client's policy; `preset` starts from that preset) or a Policy. */
  readonly policy?: PresetName | PolicySpec | Policy;
  /** The path as events show it, e.g. `/users/:id` (ids in paths stay out of logs and metrics). */
  readonly routeTemplate?: string;
  /** After an unknown outcome (sent, unanswered, not safe to repeat), reads the real state (e.g. GET by the idempotency key); its Response is returned. */
  readonly stateCheck?: (ctx: AttemptContext) => Promise<Response>;
  /** Events of this call only (in addition to the client's `onEvent`). */
  readonly onEvent?: (event: RelentEvent) => void;
}

/** `createClient(options)`: every field optional (see CLIENT_DEFAULTS). */
export interface ClientOptions extends ProtectionOptions {
  /** The base policy: a preset name, a spec or a Policy. Default: relent's defaults. */
  readonly policy?: PresetName | PolicySpec | Policy;
  /** The undici dispatcher to send through (not closed by `client.close()`). Default: an own keep-alive Agent. */
  readonly dispatcher?: Dispatcher | null;
  /** Options for the own Agent (ignored with `dispatcher`). */
  readonly agent?: Agent.Options | null;
  /** One event per attempt, then the result. Nothing is built when no listener is given. */
  readonly onEvent?: ((event: RelentEvent) => void) | null;
  /** The dependency key of a URL (budget, breaker, bulkhead are shared per key). Default: the origin. */
  readonly key?: ((url: URL) => string) | null;
  /** Create a random Idempotency-Key for POST and PATCH calls without one. Default false. */
  readonly autoIdempotencyKey?: boolean;
  /** The route template of a URL for events (when the call gives none); null/undefined → the path. */
  readonly routeTemplate?: ((url: URL) => string | null | undefined) | null;
  /** Redirects followed within one attempt with `redirect: 'follow'`. Default 20 (as fetch). */
  readonly maxRedirections?: number;
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
  /** The deadline covers reading the body too (default true; see RelentRequestInit.bodyDeadline). */
  readonly bodyDeadline?: boolean;
  /** Spans and metrics (relent/otel's createOtelInstrumentation()); every operation is marked `relent.driver: "client.fetch"`. */
  readonly instrumentation?: Instrumentation | null;
}

/** The client defaults, written once. */
export const CLIENT_DEFAULTS = Object.freeze({
  policy: null,
  dispatcher: null,
  agent: null,
  onEvent: null,
  key: null,
  ...PROTECTION_DEFAULTS,
  autoIdempotencyKey: false,
  routeTemplate: null,
  maxRedirections: 20,
  propagate: PROPAGATION_DEFAULTS,
  clock: null,
  random: null,
  bodyDeadline: true,
  instrumentation: null,
});

export interface RelentClient {
  /** fetch with relent's decisions: see the contract in `createClient`. Bound: `const { fetch } = client` works. */
  readonly fetch: (input: string | URL | Request, init?: RelentRequestInit) => Promise<Response>;
  /** The dispatcher the client sends through. */
  readonly dispatcher: Dispatcher;
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
  /** Closes the own Agent (not a dispatcher that was passed in). */
  close(): Promise<void>;
}

const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** Headers undici manages itself or refuses; setting them is a caller error. */
const REFUSED_HEADERS = new Set(['transfer-encoding', 'keep-alive', 'upgrade', 'expect', 'connection']);
const validStatus = (s: number): boolean => s >= 200 && s <= 599;

/** What one call knows after preparing its request (nothing here is ever logged). */
interface Prepared {
  readonly url: URL;
  readonly method: string;
  readonly headers: string[];
  readonly body: PreparedBody;
  readonly signal: AbortSignal | undefined;
  readonly redirect: 'follow' | 'manual' | 'error';
  readonly idempotencyKey: string | null;
}

function parseInput(input: string | URL | Request): { url: URL; request: Request | null } {
  let url: URL;
  let request: Request | null = null;
  if (typeof input === 'string') {
    try {
      url = new URL(input);
    } catch {
      // The input is not echoed: it may hold a token.
      throw invalid('input', 'Expected `input` to be an absolute http: or https: URL');
    }
  } else if (input instanceof URL) {
    url = input;
  } else if (typeof Request !== 'undefined' && input instanceof Request) {
    request = input;
    url = new URL(input.url);
  } else {
    throw invalid('input', 'Expected `input` to be a URL string, a URL or a Request');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid('input', 'Expected `input` to be an http: or https: URL');
  if (url.username !== '' || url.password !== '') throw invalid('input', 'A URL with credentials is refused (send them in an Authorization header)');
  return { url, request };
}

const METHOD = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const NORMALIZED = new Set(['DELETE', 'GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH']);

function normalizeMethod(m: unknown): string {
  if (typeof m !== 'string' || !METHOD.test(m)) throw invalid('method', 'Expected `method` to be an HTTP method token');
  const up = m.toUpperCase();
  if (up === 'CONNECT' || up === 'TRACK') throw invalid('method', `The method ${up} is not supported`);
  return NORMALIZED.has(up) ? up : m;
}

function toHeaders(h: HeadersLike): Headers {
  if (h instanceof Headers) return h;
  try {
    return new Headers(h as ConstructorParameters<typeof Headers>[0]);
  } catch {
    // The platform's message names the value, which may be a secret.
    throw invalid('headers', 'Invalid header name or value in `headers` (values are not shown)');
  }
}

/** The call's request, checked and encoded; a promise only when the body must be read first (a Request's, a Blob, FormData). */
function prepareRequest(input: string | URL | Request, init: RelentRequestInit, autoKeyDefault: boolean, prop: ResolvedPropagation): Prepared | Promise<Prepared> {
  const { url, request } = parseInput(input);
  const method = normalizeMethod(init.method ?? request?.method ?? 'GET');
  const rawBody: unknown = init.body;
  if (rawBody === undefined && request !== null && request.body !== null) {
    return request.arrayBuffer().then((ab) => prepareWithBody(url, request, method, ab, init, autoKeyDefault, prop));
  }
  return prepareWithBody(url, request, method, rawBody, init, autoKeyDefault, prop);
}

function prepareWithBody(
  url: URL, request: Request | null, method: string, rawBody: unknown, init: RelentRequestInit, autoKeyDefault: boolean, prop: ResolvedPropagation,
): Prepared | Promise<Prepared> {
  if (rawBody !== undefined && rawBody !== null && (method === 'GET' || method === 'HEAD')) throw invalid('body', `A ${method} request cannot have a body`);
  const body = prepareBody(rawBody);
  if (body instanceof Promise) return body.then((b) => prepared(url, request, method, b, init, autoKeyDefault, prop));
  return prepared(url, request, method, body, init, autoKeyDefault, prop);
}

function prepared(
  url: URL, request: Request | null, method: string, body: PreparedBody, init: RelentRequestInit, autoKeyDefault: boolean, prop: ResolvedPropagation,
): Prepared {
  const headers: string[] = [];
  let headerKey: string | null = null;
  let hasContentType = false;
  const hIn = init.headers ?? request?.headers;
  if (hIn !== undefined && hIn !== null) {
    for (const [name, value] of toHeaders(hIn)) {
      if (REFUSED_HEADERS.has(name)) {
        if (name === 'connection' && /^\s*(close|keep-alive)\s*$/i.test(value)) { /* allowed by undici */ } else throw invalid('headers', `The \`${name}\` header is managed by the HTTP client and cannot be set`);
      }
      if (name === 'content-length' && body.kind !== 'stream') continue; // we know the length
      if (name === 'content-type') hasContentType = true;
      if (name === IDEMPOTENCY_KEY_HEADER) headerKey = keyFromHeader(value);
      if (prop.sends && prop.names.includes(name)) continue; // relent sets these per attempt
      headers.push(name, value);
    }
  }
  if (body.kind === 'bytes' && body.contentType !== null && !hasContentType) headers.push('content-type', body.contentType);

  const { key, header } = resolveIdempotencyKey(init.idempotencyKey ?? null, headerKey, init.autoIdempotencyKey ?? autoKeyDefault, method, init.idempotent);
  if (header !== null) headers.push(IDEMPOTENCY_KEY_HEADER, header);

  const redirect = init.redirect ?? (request?.redirect as 'follow' | 'manual' | 'error' | undefined) ?? 'follow';
  if (redirect !== 'follow' && redirect !== 'manual' && redirect !== 'error') throw invalid('redirect', 'Expected `redirect` to be "follow", "manual" or "error"');
  const signal = init.signal ?? request?.signal ?? undefined;
  return new PreparedRequest(url, method, headers, body, signal, redirect, key);
}

class PreparedRequest implements Prepared {
  constructor(
    readonly url: URL, readonly method: string, readonly headers: string[], readonly body: PreparedBody, readonly signal: AbortSignal | undefined,
    readonly redirect: 'follow' | 'manual' | 'error', readonly idempotencyKey: string | null,
  ) {}
}

/**
 * An HTTP client whose every retry and stop decision comes from relent's decision core
 * (`execute()` → `decide()`), over undici with a shared keep-alive Agent.
 *
 * `client.fetch(input, init)` returns a standard WHATWG `Response` (streamed, resolved
 * at the response head). How an operation ends:
 *
 * | terminal reason                         | ended on a response                 | ended without one (error class)    |
 * |-----------------------------------------|-------------------------------------|------------------------------------|
 * | return                                  | resolves with the Response          | —                                  |
 * | not_retryable (400, 404, POST 503 …)    | resolves with the Response          | rejects ERR_NOT_RETRYABLE           |
 * | max_attempts                            | resolves with the LAST Response     | rejects ERR_MAX_ATTEMPTS            |
 * | deadline_exceeded                       | resolves with the last Response     | rejects ERR_DEADLINE_EXCEEDED       |
 * | budget_exhausted (retry budget)         | resolves with the last Response     | rejects ERR_RETRY_BUDGET_EXHAUSTED  |
 * | bulkhead_full                           | resolves with the last Response     | rejects ERR_BULKHEAD_FULL           |
 * | concurrency_limited (limit's queue full)| resolves with the last Response     | rejects ERR_CONCURRENCY_LIMITED     |
 * | rate_limited (no token in time)         | resolves with the last Response     | rejects ERR_RATE_LIMITED            |
 * | circuit_open                            | resolves with the last Response     | rejects ERR_CIRCUIT_OPEN            |
 * | check_state (POST timed out / reset)    | —                                   | rejects ERR_UNKNOWN_OUTCOME, or resolves with `stateCheck`'s Response |
 * | cancelled (the caller's signal)         | rejects ERR_CANCELLED               | rejects ERR_CANCELLED               |
 * | defer (policy.deferOverMs)              | rejects ERR_DEFERRED                | rejects ERR_DEFERRED                |
 *
 * Two exceptions turn a response into a rejection, with `error.response` set:
 * - ERR_RETRY_AFTER_TOO_LONG: the last response carried a valid server wait
 *   (Retry-After or a RateLimit field) that relent would not sleep — over the policy's
 *   `retryAfter.maxMs` (reason not_retryable) or past the deadline (reason
 *   deadline_exceeded). It is raised at once, without sleeping.
 * - ERR_BODY_NOT_REPLAYABLE: the body is a stream (sent once) and the policy would
 *   have retried (reason max_attempts). Without a response, `cause` is the wire error.
 *
 * Never a synthetic success. Every rejection is a RelentFetchError (a RelentError):
 * `code`, `reason`, `attempts`, `operationId`, `status`/`errorClass`/`sent` of the last
 * attempt, and `cause` (undici's error, or the signal's reason). Messages name the
 * method and the normalised endpoint, never the query, headers or body. Invalid input
 * (URL, method, headers, body, options) rejects with ERR_INVALID_INPUT before any call.
 *
 * The attempt timeout covers each attempt up to the response head; the deadline covers
 * the whole operation and, by default, reading the body too: a body still arriving when
 * the deadline passes is aborted, and reading it rejects with ERR_DEADLINE_EXCEEDED
 * naming the deadline (`bodyDeadline: false` for long downloads: the body then streams
 * under the caller's `signal` only). A Response attached to an error has no query in its
 * `url` and no Set-Cookie. Read or cancel every body you get, or its connection stays busy.
 */
export function createClient(options: ClientOptions = {}): RelentClient {
  if (typeof options !== 'object' || options === null) throw invalid('options', 'Expected `options` to be an object');
  const basePolicy = resolvePolicy(options.policy ?? null);
  const { Agent: AgentClass, interceptors } = undici();
  const ownAgent: Agent | null = options.dispatcher ? null : new AgentClass(options.agent ?? {});
  const base: Dispatcher = options.dispatcher ?? ownAgent!;
  const maxRedirections = options.maxRedirections ?? CLIENT_DEFAULTS.maxRedirections;
  if (!Number.isInteger(maxRedirections) || maxRedirections < 0 || maxRedirections > 100) throw invalid('maxRedirections', 'Expected `maxRedirections` to be an integer in [0, 100]');
  if (typeof base.compose !== 'function') {
    // Bun answers `import { Agent } from 'undici'` with its own partial copy, whose Agent has no compose().
    throw invalid('dispatcher', 'Expected `dispatcher` to be an undici Dispatcher with compose() (undici ≥ 6; under Bun, `import \'undici\'` is Bun\'s own partial copy: load the npm package by its path, or leave `dispatcher` out)');
  }
  const dispatcher = base.compose(interceptors.redirect({ maxRedirections: 0 }));
  const dispatch = dispatcher.dispatch.bind(dispatcher) as (opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler) => boolean;
  const onClientEvent = options.onEvent ?? null;
  const keyOf = options.key ?? originKey;
  const autoKey = options.autoIdempotencyKey ?? CLIENT_DEFAULTS.autoIdempotencyKey;
  const routeOf = options.routeTemplate ?? null;
  const clock = options.clock ?? undefined;
  const random = options.random ?? undefined;
  const timers: Clock = clock ?? systemClock;
  const instrumentation = forDriver(options.instrumentation, 'client.fetch');
  const bodyDeadlineDefault = options.bodyDeadline ?? CLIENT_DEFAULTS.bodyDeadline;
  if (typeof bodyDeadlineDefault !== 'boolean') throw invalid('bodyDeadline', 'Expected `bodyDeadline` to be a boolean');
  const deps = new Dependencies(options, clock ?? null);
  const policyCache = new WeakMap<object, Policy>();
  const prop = resolvePropagation(options.propagate);

  const fetch = (input: string | URL | Request, init: RelentRequestInit = {}): Promise<Response> => {
    try {
      if (typeof init !== 'object' || init === null) throw invalid('init', 'Expected `init` to be an object');
      const req = prepareRequest(input, init, autoKey, prop);
      return req instanceof Promise ? req.then((r) => new ClientCall(r, init).start()) : new ClientCall(req, init).start();
    } catch (e) {
      return Promise.reject(e);
    }
  };

  /** One call of client.fetch: the success path's first attempt (FirstAttempt), or the executor from the start. */
  class ClientCall extends FirstAttempt implements BoundBodyLimit {
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

    constructor(private readonly req: Prepared, private readonly init: RelentRequestInit) {
      super();
      const bodyDeadline = init.bodyDeadline ?? bodyDeadlineDefault;
      if (typeof bodyDeadline !== 'boolean') throw invalid('bodyDeadline', 'Expected `bodyDeadline` to be a boolean');
      this.bodyDeadline = bodyDeadline;
      const lim = callLimits(callPolicy(basePolicy, init.policy, policyCache), {
        deadlineMs: init.deadlineMs, attemptTimeoutMs: init.attemptTimeoutMs, stream: req.body.kind === 'stream',
      });
      this.lim = lim;
      this.policy = lim.policy;
      let template = init.routeTemplate;
      if (template === undefined && routeOf !== null) template = routeOf(req.url) ?? undefined;
      this.template = template === undefined ? undefined : checkRouteTemplate(template);
      this.origin = req.url.origin;
      this.dep = deps.get(keyOf === originKey ? this.origin : keyOf(req.url), lim.policy);
      this.call = new Call(false);
      this.opId = init.operationId;
    }

    /** Scheme, host, port and path (or the route template), made when events, tracing or an error need it. */
    private get endpoint(): string {
      return (this.endpointValue ??= normalizeUrlEndpoint(this.req.url, this.template ?? null));
    }

    // As a BoundBodyLimit (the success path's):
    get clock(): Clock {
      return timers;
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
      const hedging = deps.hedgingOf(dep, policy);
      const { callerDeadlineMs, incoming } = inherit(prop);
      this.callerDeadlineMs = callerDeadlineMs;
      this.incoming = incoming;
      const p = newPromise(this);
      const signal = req.signal;
      // The success path (plainPath), for a caller still waiting.
      if (plainPath(onClientEvent !== null || this.init.onEvent !== undefined, instrumentation !== null, hedging, dep, req.body.kind === 'stream')
        && !(signal?.aborted ?? false) && this.plan(policy, dep.guard.budget, limitsOf(this.lim.deadlineMs, this.lim.attemptTimeoutMs, callerDeadlineMs), clock)) {
        this.send(dispatch, this.dispatchOptions(prop.sends ? appendPropagation(req.headers.slice(), prop, 1, this.timeoutMs) : req.headers), validStatus);
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
        maxRedirections: req.redirect === 'follow' ? maxRedirections : 0,
      };
    }

    private attemptFn(): (ctx: AttemptContext) => Promise<AttemptHandler> {
      const call = this.call;
      const headers = this.req.headers;
      const dispatchOpts = this.dispatchOptions(headers);
      return prop.sends
        ? (ctx) => dispatchAttempt(dispatch, withHeaders(dispatchOpts, attemptHeaders(headers, prop, ctx)), call, validStatus, ctx)
        : (ctx) => dispatchAttempt(dispatch, dispatchOpts, call, validStatus, ctx);
    }

    private runOptions(hedging: HedgeState | null): ExecuteOptions<AttemptHandler | Response> {
      const init = this.init;
      const dep = this.dep;
      const call = this.call;
      if (hedging !== null) (call as { attempts: Map<number, AttemptHandler> | null }).attempts = new Map();
      return {
        policy: this.policy!,
        operationId: (this.opId ??= newOperationId()),
        method: this.req.method,
        endpoint: this.endpoint,
        onEvent: listenerOf(onClientEvent, init.onEvent),
        classifyValue: dep.guard.rateLimiter === null ? classifyClientValue : classifyRateLimitedValue,
        classifyTimeout: timeoutOf(call),
        guard: dep.guard,
        hedging,
        idempotent: init.idempotent,
        idempotencyKey: this.req.idempotencyKey ?? undefined,
        deadlineMs: this.lim.deadlineMs,
        callerDeadlineMs: this.callerDeadlineMs,
        attemptTimeoutMs: this.lim.attemptTimeoutMs,
        stateCheck: init.stateCheck,
        signal: this.req.signal,
        clock,
        random,
        instrumentation,
      };
    }

    /** The first attempt needs more than a plain answer: the executor decides it and carries on. */
    protected override handOver(how: FirstAttemptEnd, payload: unknown): void {
      this.call.current = this.first;
      try {
        executeFrom<AttemptHandler | Response>(this.attemptFn(), this.runOptions(null), this.startedAt, this.timeoutMs, this.deadlineMs, how, payload, (r) => this.ended(r));
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
        const limit = this.bodyDeadline ? new BoundLimit(timers, r.remainingMs, r.deadlineMs, where, r) : null;
        this.resolve!(settle(r, this.call, this.req, this.policy!, where, this.lim.streamLimited, limit));
      } catch (e) {
        this.reject!(e);
      }
    }

    /** The promise's functions (see newPromise). */
    settleWith(resolve: (r: Response) => void, reject: (e: unknown) => void): void {
      this.resolve = resolve;
      this.reject = reject;
    }
  }

  return {
    fetch,
    dispatcher,
    breakers: deps.breakers,
    bulkheads: deps.bulkheads,
    budgets: deps.budgets,
    concurrencyLimits: deps.concurrencyLimits,
    rateLimiters: deps.rateLimiters,
    breakerSnapshot: () => deps.snapshot(),
    async close() {
      if (ownAgent !== null && !ownAgent.closed && !ownAgent.destroyed) await ownAgent.close();
    },
  };
}

function settle(
  r: RunResult<AttemptHandler | Response>, call: Call, req: Prepared, policy: Policy, where: () => string, streamLimited: boolean, limit: BoundBodyLimit | null,
): Response {
  if (r.outcome.ok) {
    const v = r.outcome.value;
    if (!(v instanceof AttemptHandler)) {
      call.release();
      return v; // the state check's Response
    }
    call.current = v;
    // Hedging: the answer is this attempt's; the others' bodies never reach the caller.
    call.discardOthers(v);
    const tooLong = waitTooLong(r);
    if (tooLong !== null) throw tooLongError(r, tooLong, policy, where(), v.status, toResponse(v, req, call, limit, true));
    if (streamLimited && r.reason === 'max_attempts') throw notReplayableError(r, where(), { status: v.status, response: toResponse(v, req, call, limit, true) });
    if (req.redirect === 'error' && REDIRECT_STATUSES.has(v.status)) {
      v.discard();
      call.release();
      throw unexpectedRedirect(v.status, r.reason, r, where());
    }
    return toResponse(v, req, call, limit, false);
  }
  // Nothing of a response is handed over: let its connection go.
  call.current?.discard();
  call.discardOthers(null);
  call.release();
  throw failureError(r, r.outcome.error, where(), streamLimited);
}

/** A 3xx answer with `redirect: "error"`. */
function unexpectedRedirect(status: number, reason: TerminalReason, r: { readonly operationId: string; readonly attempts: number }, where: string): RelentFetchError {
  return new RelentFetchError('ERR_NOT_RETRYABLE', `return: unexpected redirect (${status}) with redirect: "error" (${where})`, {
    reason, attempts: r.attempts, operationId: r.operationId, status,
  });
}

/** The deadline over a response body: the operation's time left when it answered, and what its error names. */
interface BoundBodyLimit {
  readonly clock: Clock;
  readonly remainingMs: number;
  /** The operation's deadline, for the error message. */
  readonly deadlineMs: number;
  where(): string;
  result(): { readonly operationId: string; readonly attempts: number };
}

/** The body limit of an operation the executor ran (not a literal: see RunResultRecord in run.ts). */
class BoundLimit implements BoundBodyLimit {
  constructor(
    readonly clock: Clock, readonly remainingMs: number, readonly deadlineMs: number, private readonly whereFn: () => string, private readonly r: RunResult<unknown>,
  ) {}

  where(): string {
    return this.whereFn();
  }

  result(): RunResult<unknown> {
    return this.r;
  }
}

/** The promise of a call: its executor hands the functions to the call (no closure per call). */
let settling: ClientCallLike | null = null;
interface ClientCallLike {
  settleWith(resolve: (r: Response) => void, reject: (e: unknown) => void): void;
}
const SETTLE_WITH = (resolve: (r: Response) => void, reject: (e: unknown) => void): void => {
  const c = settling!;
  settling = null;
  c.settleWith(resolve, reject);
};
function newPromise(c: ClientCallLike): Promise<Response> {
  settling = c;
  return new Promise<Response>(SETTLE_WITH);
}

/**
 * A committed attempt as a WHATWG Response whose body streams from the socket with
 * backpressure, under the body deadline when one is given. A Response handed over on
 * an error (`forError`) carries no secret: its `url` has no query or fragment, and the
 * server's Set-Cookie is dropped (an error may be logged whole).
 */
function toResponse(h: AttemptHandler, req: Prepared, call: Call, limit: BoundBodyLimit | null, forError: boolean): Response {
  const nullBody = NULL_BODY_STATUSES.has(h.status) || req.method === 'HEAD';
  let body: ReadableStream<Uint8Array> | null = null;
  if (nullBody) {
    h.drain();
    call.release();
  } else {
    const source = new WebBody(h, call, limit);
    // Deno keeps a Response's stream, and the stream its source, under symbol keys that an
    // error logged whole would walk down to the handler (the request's URL and headers, the
    // server's Set-Cookie): a Response for an error reaches its source through closures only.
    body = new ReadableStream<Uint8Array>(forError ? sealed(source) : source, BODY_QUEUE);
  }
  let res: Response;
  try {
    res = new Response(body, { status: h.status, statusText: h.statusText });
  } catch {
    res = new Response(body, { status: h.status }); // a reason phrase a Response refuses
  }
  // Appended to the Response's own headers, with the checks a `headers` init gets (on
  // Node 20 converting an init's headers first costs ~2 µs more).
  const out = res.headers;
  const hs = h.headers;
  for (const name in hs) {
    const v = hs[name];
    if (v === undefined || (forError && (name === 'set-cookie' || name === 'set-cookie2'))) continue;
    if (typeof v === 'string') out.append(name, v);
    else for (const x of v) out.append(name, x);
  }
  const hist = h.history;
  const final = hist !== null && hist.length > 0 ? hist[hist.length - 1]! : req.url;
  let url: string;
  if (forError) url = final.origin + final.pathname;
  else {
    const href = final.href;
    const hash = href.indexOf('#');
    url = hash < 0 ? href : href.slice(0, hash);
  }
  Object.defineProperty(res, 'url', { value: url, enumerable: true });
  if (hist !== null && hist.length > 1) Object.defineProperty(res, 'redirected', { value: true, enumerable: true });
  return res;
}

/**
 * The body as a web stream's source: backpressure pauses the socket; the caller's
 * signal (via `call`) aborts it, and so does the deadline when `limit` is given. One
 * object (the stream calls its methods with it as `this`), not a closure per method.
 */
class WebBody implements BodySink {
  private c: ReadableStreamDefaultController<Uint8Array> | null = null;
  private done = false;
  private cancelTimer: (() => void) | null = null;

  constructor(private readonly h: AttemptHandler, private readonly call: Call, private readonly limit: BoundBodyLimit | null) {}

  start(c: ReadableStreamDefaultController<Uint8Array>): void {
    this.c = c;
    this.h.attach(this);
    const limit = this.limit;
    if (this.done || limit === null) return;
    if (limit.remainingMs <= 0) this.expire();
    else this.cancelTimer = limit.clock.setTimer(() => this.expire(), limit.remainingMs);
  }

  pull(): void {
    this.h.resume();
  }

  cancel(reason: unknown): void {
    this.finish();
    this.h.abort(asError(reason));
  }

  data(chunk: Buffer): void {
    if (this.done) return;
    const c = this.c!;
    c.enqueue(chunk);
    if ((c.desiredSize ?? 0) <= 0) this.h.pause();
  }

  end(): void {
    if (this.done) return;
    this.finish();
    this.c!.close();
  }

  error(e: Error): void {
    if (this.done) return;
    this.finish();
    this.c!.error(e);
  }

  private expire(): void {
    this.cancelTimer = null;
    if (this.done) return;
    const limit = this.limit!;
    const e = bodyDeadlineError(limit.result(), limit.deadlineMs, limit.where(), this.h.status);
    this.finish();
    this.c!.error(e);
    this.h.abort(e);
  }

  private finish(): void {
    this.done = true;
    if (this.cancelTimer !== null) {
      this.cancelTimer();
      this.cancelTimer = null;
    }
    this.call.release();
  }
}

/** A body source whose methods call `s`, with nothing of `s` reachable as a property. */
function sealed(s: WebBody): { start(c: ReadableStreamDefaultController<Uint8Array>): void; pull(): void; cancel(reason: unknown): void } {
  return { start: (c) => s.start(c), pull: () => s.pull(), cancel: (reason) => s.cancel(reason) };
}

/**
 * Up to 64 KiB of body are read ahead (as undici's own request() does), so a small
 * response completes and frees its connection even before the caller reads it.
 */
const BODY_QUEUE: QueuingStrategy<Uint8Array> = { highWaterMark: 64 * 1024, size: (chunk) => chunk.byteLength };
