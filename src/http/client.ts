// relent's HTTP client: fetch with relent's decisions, over undici. The options and
// defaults (createClient), and the client's context; each call is a ClientCall
// (client-call.ts), its request prepared in request.ts, its Response made in response.ts.
import type { Agent, Dispatcher } from 'undici';
import type { Policy, PolicySpec, PresetName } from '../core/policy.js';
import type { AttemptContext, RelentEvent } from '../run/run.js';
import { undici } from '../shared/undici.js';
import { ClientCall } from './client-call.js';
import { DriverContext, HTTP_DRIVER_DEFAULTS, type DependencyState, type HttpDriverOptions } from './driver.js';
import { originKey } from './endpoint.js';
import { invalid } from './operation.js';
import { prepareRequest } from './request.js';

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
export interface ClientOptions extends HttpDriverOptions {
  /** The undici dispatcher to send through (not closed by `client.close()`). Default: an own keep-alive Agent. */
  readonly dispatcher?: Dispatcher | null;
  /** Options for the own Agent (ignored with `dispatcher`). */
  readonly agent?: Agent.Options | null;
  /** The dependency key of a URL (budget, breaker, bulkhead are shared per key). Default: the origin. */
  readonly key?: ((url: URL) => string) | null;
  /** The route template of a URL for events (when the call gives none); null/undefined → the path. */
  readonly routeTemplate?: ((url: URL) => string | null | undefined) | null;
  /** Redirects followed within one attempt with `redirect: 'follow'`. Default 20 (as fetch). */
  readonly maxRedirections?: number;
}

/** The client defaults, written once. */
export const CLIENT_DEFAULTS = Object.freeze({
  ...HTTP_DRIVER_DEFAULTS,
  dispatcher: null,
  agent: null,
  key: null,
  routeTemplate: null,
  maxRedirections: 20,
});

export interface RelentClient extends DependencyState {
  /** fetch with relent's decisions: see the contract in `createClient`. Bound: `const { fetch } = client` works. */
  readonly fetch: (input: string | URL | Request, init?: RelentRequestInit) => Promise<Response>;
  /** The dispatcher the client sends through. */
  readonly dispatcher: Dispatcher;
  /** Closes the own Agent (not a dispatcher that was passed in). */
  close(): Promise<void>;
}

/** A client's settings, resolved once and read by every call (ClientCall). */
export class ClientContext extends DriverContext {
  readonly dispatch: (opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler) => boolean;
  readonly keyOf: (url: URL) => string;
  readonly routeOf: ((url: URL) => string | null | undefined) | null;
  readonly maxRedirections: number;

  constructor(
    options: ClientOptions,
    readonly dispatcher: Dispatcher,
  ) {
    super(options, 'client.fetch');
    this.dispatch = dispatcher.dispatch.bind(dispatcher) as (opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler) => boolean;
    this.keyOf = options.key ?? originKey;
    this.routeOf = options.routeTemplate ?? null;
    const maxRedirections = options.maxRedirections ?? CLIENT_DEFAULTS.maxRedirections;
    if (!Number.isInteger(maxRedirections) || maxRedirections < 0 || maxRedirections > 100)
      throw invalid('maxRedirections', 'Expected `maxRedirections` to be an integer in [0, 100]');
    this.maxRedirections = maxRedirections;
  }
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
  const { Agent: AgentClass, interceptors } = undici();
  const ownAgent: Agent | null = options.dispatcher ? null : new AgentClass(options.agent ?? {});
  const base: Dispatcher = options.dispatcher ?? ownAgent!;
  if (typeof base.compose !== 'function') {
    // Bun answers `import { Agent } from 'undici'` with its own partial copy, whose Agent has no compose().
    throw invalid(
      'dispatcher',
      "Expected `dispatcher` to be an undici Dispatcher with compose() (undici ≥ 6; under Bun, `import 'undici'` is Bun's own partial copy: load the npm package by its path, or leave `dispatcher` out)",
    );
  }
  const cx = new ClientContext(options, base.compose(interceptors.redirect({ maxRedirections: 0 })));
  const deps = cx.deps;
  const fetch = (input: string | URL | Request, init: RelentRequestInit = {}): Promise<Response> => {
    try {
      if (typeof init !== 'object' || init === null) throw invalid('init', 'Expected `init` to be an object');
      const req = prepareRequest(input, init, cx.autoKey, cx.prop);
      return req instanceof Promise ? req.then((r) => new ClientCall(cx, r, init).start()) : new ClientCall(cx, req, init).start();
    } catch (e) {
      return Promise.reject(e);
    }
  };
  return {
    fetch,
    dispatcher: cx.dispatcher,
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
