// relent as an undici interceptor (`agent.compose(relentInterceptor(options))`): the
// options and defaults, and the interceptor's context; each request is an
// InterceptedOperation (intercepted.ts).
import type { Policy, PolicySpec, PresetName } from '../core/policy.js';
import type { RelentEvent } from '../run/run.js';
import { DriverContext, HTTP_DRIVER_DEFAULTS, type DependencyState, type HttpDriverOptions } from './driver.js';
import { InterceptedOperation, type Dispatch } from './intercepted.js';
import { asError } from './operation.js';

/** relentInterceptor(options): every field optional (see INTERCEPTOR_DEFAULTS). */
export interface InterceptorOptions extends HttpDriverOptions {
  /** The dependency key of a request (budget, breaker, bulkhead are shared per key). Default: its origin. */
  readonly key?: ((origin: string, path: string) => string) | null;
  /** The route template (e.g. `/users/:id`) of a request path for events; null/undefined → the path. */
  readonly routeTemplate?: ((path: string) => string | null | undefined) | null;
}

export const INTERCEPTOR_DEFAULTS = Object.freeze({ ...HTTP_DRIVER_DEFAULTS, key: null, routeTemplate: null });

/** Per-request options, passed as `relent` in undici's request/dispatch options (removed before sending). */
export interface RelentDispatchOptions {
  readonly deadlineMs?: number;
  readonly attemptTimeoutMs?: number;
  /** This request's choice of `bodyDeadline` (see InterceptorOptions). */
  readonly bodyDeadline?: boolean;
  /** Sent as `Idempotency-Key` (quoted) on every attempt; makes POST/PATCH retryable. */
  readonly idempotencyKey?: string;
  readonly idempotent?: boolean;
  readonly operationId?: string;
  readonly policy?: PresetName | PolicySpec | Policy;
  readonly routeTemplate?: string;
  readonly onEvent?: (event: RelentEvent) => void;
}

/** The interceptor as undici's `compose` takes it, with its breakers, bulkheads and budgets by key. */
export interface RelentInterceptor extends DependencyState {
  (dispatch: Dispatch): Dispatch;
}

/** An interceptor's settings, resolved once and read by every operation (InterceptedOperation). */
export class InterceptorContext extends DriverContext {
  readonly keyOf: ((origin: string, path: string) => string) | null;
  readonly routeOf: ((path: string) => string | null | undefined) | null;

  constructor(options: InterceptorOptions) {
    super(options, 'interceptor');
    this.keyOf = options.key ?? null;
    this.routeOf = options.routeTemplate ?? null;
  }
}

/**
 * An undici interceptor that runs every request it sees as a relent operation: each
 * attempt is dispatched to the next dispatcher, every retry/stop decision comes from
 * relent's decision core (`execute()` → `decide()`), and the wrapped handler sees one
 * request: `onRequestStart` at once, then the final response (or one error).
 *
 *     const agent = new Agent().compose(relentInterceptor({ policy: 'http-429' }));
 *     const { statusCode, body } = await request(url, { dispatcher: agent });
 *
 * How a request ends is the same as for `client.fetch` (see createClient): the final
 * response is handed on as is — including the last 503 when retries run out — except
 * that a server wait longer than relent will sleep (ERR_RETRY_AFTER_TOO_LONG) and a
 * stream body that would need a retry (ERR_BODY_NOT_REPLAYABLE) become errors; a call
 * that ends without a response fails with a RelentFetchError whose `cause` is undici's
 * error. Failed attempts' bodies are read (up to 64 KiB) so their sockets are reused.
 *
 * Compose order: undici's `compose(a, b)` wraps `b` around `a`, so the LAST interceptor
 * listed runs FIRST (outermost). Put relent last:
 * - `compose(interceptors.redirect(), relentInterceptor())`: one operation per request;
 *   each attempt follows the redirects, and the deadline covers them all (recommended).
 * - `compose(relentInterceptor(), interceptors.redirect())`: every redirect hop is a
 *   separate relent operation with its own deadline and events.
 * - Do not combine with `interceptors.retry()`: whichever is outer repeats the inner
 *   one's whole retry loop, so calls multiply (3 × 3 = 9 calls for two 3-attempt
 *   policies), and undici's retry knows nothing of deadlines, budgets or idempotency keys.
 */
export function relentInterceptor(options: InterceptorOptions = {}): RelentInterceptor {
  const cx = new InterceptorContext(options);
  const deps = cx.deps;
  const interceptor = ((dispatch: Dispatch): Dispatch =>
    (opts, handler) => {
      const op = new InterceptedOperation(cx, handler);
      try {
        op.start(dispatch, opts);
      } catch (e) {
        op.fail(asError(e));
      }
      return true;
    }) as RelentInterceptor;

  Object.defineProperties(interceptor, {
    breakers: { value: deps.breakers, enumerable: true },
    bulkheads: { value: deps.bulkheads, enumerable: true },
    budgets: { value: deps.budgets, enumerable: true },
    concurrencyLimits: { value: deps.concurrencyLimits, enumerable: true },
    rateLimiters: { value: deps.rateLimiters, enumerable: true },
    breakerSnapshot: { value: () => deps.snapshot(), enumerable: true },
  });
  return interceptor;
}
