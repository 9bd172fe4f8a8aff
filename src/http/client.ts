import { createRequire } from 'node:module';
import type { Agent, Dispatcher } from 'undici';
import type * as Undici from 'undici';
import type { BreakerSnapshot, CircuitBreaker } from '../core/breaker.js';
import type { RetryBudget } from '../core/budget.js';
import { type Policy, type PolicySpec, type PresetName } from '../core/policy.js';
import { PROPAGATION_DEFAULTS, resolvePropagation, type PropagationSpec, type ResolvedPropagation } from '../core/propagation.js';
import type { Clock, Random } from '../core/types.js';
import { resolvePolicy } from '../presets/index.js';
import type { Bulkhead } from '../run/bulkhead.js';
import { systemClock } from '../shared/clock.js';
import type { ConcurrencyLimit } from '../run/concurrency-limit.js';
import type { RateLimiter } from '../run/rate-limiter.js';
import { forDriver } from '../run/instrument.js';
import { execute, newOperationId, type AttemptContext, type Classified, type Instrumentation, type RelentEvent, type RunOptions, type RunResult } from '../run/run.js';
import { AttemptHandler, headerPairs } from './attempt.js';
import { prepareBody, type PreparedBody } from './body.js';
import { checkRouteTemplate, normalizeUrlEndpoint, originKey } from './endpoint.js';
import { bodyDeadlineError, failureError, notReplayableError, RelentFetchError, tooLongError, waitTooLong, whereOf } from './errors.js';
import { IDEMPOTENCY_KEY_HEADER, keyFromHeader, resolveIdempotencyKey } from '../shared/idempotency.js';
import {
  asError, attemptHeaders, Call, callLimits, callPolicy, Dependencies, dispatchAttempt, inherit, invalid, listenerOf, observeRateLimited, observeResponse, passOnNoRetry,
  PROTECTION_DEFAULTS, timeoutOf, withHeaders, type ProtectionOptions,
} from './operation.js';

/**
 * undici, loaded when the first client is made: `import 'relent'` for run() alone should
 * not pay for an HTTP stack (~160 ms of a ~215 ms import on the 2-core machine). undici
 * is CommonJS, so this is the same module instance an `import 'undici'` gives the caller.
 */
let undiciModule: typeof Undici | null = null;
function undici(): typeof Undici {
  return (undiciModule ??= createRequire(import.meta.url)('undici') as typeof Undici);
}

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

async function prepareRequest(input: string | URL | Request, init: RelentRequestInit, autoKeyDefault: boolean, prop: ResolvedPropagation): Promise<Prepared> {
  const { url, request } = parseInput(input);
  const method = normalizeMethod(init.method ?? request?.method ?? 'GET');
  let rawBody: unknown = init.body;
  if (rawBody === undefined && request !== null && request.body !== null) rawBody = await request.arrayBuffer();
  if (rawBody !== undefined && rawBody !== null && (method === 'GET' || method === 'HEAD')) throw invalid('body', `A ${method} request cannot have a body`);
  const bodyIn = prepareBody(rawBody);
  const body = bodyIn instanceof Promise ? await bodyIn : bodyIn;

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
  return { url, method, headers, body, signal, redirect, idempotencyKey: key };
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

  const fetch = async (input: string | URL | Request, init: RelentRequestInit = {}): Promise<Response> => {
    if (typeof init !== 'object' || init === null) throw invalid('init', 'Expected `init` to be an object');
    const req = await prepareRequest(input, init, autoKey, prop);
    const bodyDeadline = init.bodyDeadline ?? bodyDeadlineDefault;
    if (typeof bodyDeadline !== 'boolean') throw invalid('bodyDeadline', 'Expected `bodyDeadline` to be a boolean');
    const lim = callLimits(callPolicy(basePolicy, init.policy, policyCache), {
      deadlineMs: init.deadlineMs, attemptTimeoutMs: init.attemptTimeoutMs, stream: req.body.kind === 'stream',
    });
    const policy = lim.policy;
    let template = init.routeTemplate;
    if (template === undefined && routeOf !== null) template = routeOf(req.url) ?? undefined;
    const endpoint = normalizeUrlEndpoint(req.url, template === undefined ? null : checkRouteTemplate(template));
    const dep = deps.get(keyOf(req.url), policy);
    const hedging = deps.hedgingOf(dep, policy);
    const call = new Call(hedging !== null);

    const dispatchOpts: Dispatcher.DispatchOptions & { maxRedirections: number } = {
      origin: req.url.origin,
      path: req.url.pathname + req.url.search,
      method: req.method as Dispatcher.HttpMethod,
      headers: req.headers,
      body: req.body.kind === 'bytes' ? req.body.bytes : req.body.kind === 'stream' ? (req.body.stream as Dispatcher.DispatchOptions['body']) : null,
      maxRedirections: req.redirect === 'follow' ? maxRedirections : 0,
    };
    const attempt = prop.sends
      ? (ctx: AttemptContext): Promise<AttemptHandler> => dispatchAttempt(dispatch, withHeaders(dispatchOpts, attemptHeaders(req.headers, prop, ctx)), call, validStatus, ctx)
      : (ctx: AttemptContext): Promise<AttemptHandler> => dispatchAttempt(dispatch, dispatchOpts, call, validStatus, ctx);
    const { callerDeadlineMs, incoming } = inherit(prop);
    const runOptions: RunOptions<AttemptHandler | Response> = {
      policy,
      operationId: init.operationId ?? newOperationId(),
      method: req.method,
      endpoint,
      onEvent: listenerOf(onClientEvent, init.onEvent),
      classifyValue: dep.rateLimiter === null ? classifyClientValue : classifyRateLimitedValue,
      classifyTimeout: timeoutOf(call),
      budget: dep.budget,
      breaker: dep.breaker,
      bulkhead: dep.bulkhead,
      concurrencyLimit: dep.concurrencyLimit,
      rateLimiter: dep.rateLimiter,
      hedging,
      idempotent: init.idempotent,
      idempotencyKey: req.idempotencyKey ?? undefined,
      deadlineMs: lim.deadlineMs,
      callerDeadlineMs,
      attemptTimeoutMs: lim.attemptTimeoutMs,
      stateCheck: init.stateCheck,
      signal: req.signal,
      clock,
      random,
      instrumentation,
    };
    if (req.signal !== undefined) call.listen(req.signal);
    let result: RunResult<AttemptHandler | Response>;
    try {
      result = await execute<AttemptHandler | Response>(attempt, runOptions);
    } catch (e) {
      call.release();
      throw e;
    }
    passOnNoRetry(incoming, result);
    const limit: BodyLimit | null = bodyDeadline ? { clock: timers, remainingMs: result.remainingMs, deadlineMs: result.deadlineMs } : null;
    return settle(result, call, req, policy, endpoint, lim.streamLimited, limit);
  };

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
  r: RunResult<AttemptHandler | Response>, call: Call, req: Prepared, policy: Policy, endpoint: string, streamLimited: boolean, limitIn: BodyLimit | null,
): Response {
  // Built only for an error: a success never needs it.
  const where = (): string => whereOf(req.method, endpoint, r);
  // Not `{ ...limitIn, where, r }` (keys added after a spread take V8's slow path, ~1.5 µs), nor a
  // literal (V8 may allocate a literal's objects in the old generation: see RunResultRecord in run.ts).
  const limit: BoundBodyLimit | null = limitIn === null ? null : new BoundLimit(limitIn.clock, limitIn.remainingMs, limitIn.deadlineMs, where, r);
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
      throw new RelentFetchError('ERR_NOT_RETRYABLE', `return: unexpected redirect (${v.status}) with redirect: "error" (${where()})`, {
        reason: r.reason, attempts: r.attempts, operationId: r.operationId, status: v.status,
      });
    }
    return toResponse(v, req, call, limit, false);
  }
  // Nothing of a response is handed over: let its connection go.
  call.current?.discard();
  call.discardOthers(null);
  call.release();
  throw failureError(r, r.outcome.error, where(), streamLimited);
}

/** The deadline over a response body: the operation's time left when it ended. */
interface BodyLimit {
  readonly clock: Clock;
  readonly remainingMs: number;
  /** The operation's deadline, for the error message. */
  readonly deadlineMs: number;
}

/** A body limit with what its error names. */
type BoundBodyLimit = BodyLimit & { readonly where: () => string; readonly r: RunResult<unknown> };

class BoundLimit implements BoundBodyLimit {
  constructor(
    readonly clock: Clock, readonly remainingMs: number, readonly deadlineMs: number, readonly where: () => string, readonly r: RunResult<unknown>,
  ) {}
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
  } else body = webBody(h, call, limit);
  let headers = headerPairs(h.headers);
  if (forError) headers = headers.filter(([name]) => name !== 'set-cookie' && name !== 'set-cookie2');
  let res: Response;
  try {
    res = new Response(body, { status: h.status, statusText: h.statusText, headers });
  } catch {
    res = new Response(body, { status: h.status, headers }); // a reason phrase a Response refuses
  }
  const hist = h.history;
  const final = hist !== null && hist.length > 0 ? hist[hist.length - 1]! : req.url;
  const url = forError ? final.origin + final.pathname : final.href.replace(/#.*$/, '');
  Object.defineProperty(res, 'url', { value: url, enumerable: true });
  if (hist !== null && hist.length > 1) Object.defineProperty(res, 'redirected', { value: true, enumerable: true });
  return res;
}

/**
 * The body as a web stream: backpressure pauses the socket; the caller's signal (via
 * `call`) aborts it, and so does the deadline when `limit` is given.
 */
function webBody(h: AttemptHandler, call: Call, limit: BoundBodyLimit | null): ReadableStream<Uint8Array> {
  let done = false;
  let cancelTimer: (() => void) | null = null;
  const finish = (): void => {
    done = true;
    if (cancelTimer !== null) {
      cancelTimer();
      cancelTimer = null;
    }
    call.release();
  };
  return new ReadableStream<Uint8Array>({
    start(c) {
      h.attach({
        data(chunk) {
          if (done) return;
          c.enqueue(chunk);
          if ((c.desiredSize ?? 0) <= 0) h.pause();
        },
        end() {
          if (done) return;
          finish();
          c.close();
        },
        error(e) {
          if (done) return;
          finish();
          c.error(e);
        },
      });
      if (done || limit === null) return;
      const expire = (): void => {
        cancelTimer = null;
        if (done) return;
        const e = bodyDeadlineError(limit.r, limit.deadlineMs, limit.where(), h.status);
        finish();
        c.error(e);
        h.abort(e);
      };
      if (limit.remainingMs <= 0) expire();
      else cancelTimer = limit.clock.setTimer(expire, limit.remainingMs);
    },
    pull() {
      h.resume();
    },
    cancel(reason) {
      finish();
      h.abort(asError(reason));
    },
  }, BODY_QUEUE);
}

/**
 * Up to 64 KiB of body are read ahead (as undici's own request() does), so a small
 * response completes and frees its connection even before the caller reads it.
 */
const BODY_QUEUE: QueuingStrategy<Uint8Array> = { highWaterMark: 64 * 1024, size: (chunk) => chunk.byteLength };
