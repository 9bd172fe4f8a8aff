import { errorClassOfCode } from './error-codes.js';
import type { ErrorClass, SendState } from './types.js';

/**
 * Where an undici request was when it failed.
 * - `before_request`: undici never handed the request to a connected socket (the
 *   handler's `onRequestStart` was not called): connecting, resolving the name, the TLS
 *   handshake or waiting in the pool. No request byte can have left the machine.
 * - `after_request`: `onRequestStart` was called, so undici began writing the request
 *   on a connected socket (it calls it right before the first write). The server may
 *   have received the request, or all of it, and acted on it.
 */
export type RequestPhase = 'before_request' | 'after_request';

/** What a failed attempt tells the decision core. */
export interface WireClass {
  readonly errorClass: ErrorClass;
  readonly sent: SendState;
}

/**
 * THE mapping from undici/Node failures to observations, in one place.
 *
 * The error code gives the class (core table `ERROR_CODE_CLASSES` in
 * src/core/error-codes.ts, looked up through `cause` chains); the phase gives `sent`
 * and refines the class. Rows, tested one by one against real sockets on loopback
 * (test/core/wire.test.ts):
 *
 * | failure (codes)                                              | before_request             | after_request            |
 * |--------------------------------------------------------------|----------------------------|--------------------------|
 * | refused: ECONNREFUSED (also ENETUNREACH, EHOSTUNREACH, …)    | connect_refused, not_sent  | connect_refused, unknown |
 * |   Deno's fetch, no code: "tcp connect error: Connection refused" |                         |                          |
 * | DNS: ENOTFOUND, EAI_AGAIN, EAI_NONAME, …                     | dns, not_sent              | dns, unknown             |
 * |   Deno's fetch, no code: "client error (Connect): dns error" |                            |                          |
 * | connect timeout: UND_ERR_CONNECT_TIMEOUT, ETIMEDOUT          | connect_timeout, not_sent  | timeout, unknown         |
 * | TLS: cert errors, ERR_SSL_*, ERR_TLS_*, EPROTO               | tls, not_sent              | tls, unknown             |
 * | reset: ECONNRESET, EPIPE, ECONNABORTED                       | reset, not_sent            | reset, unknown           |
 * | socket closed: UND_ERR_SOCKET, UND_ERR_CLOSED                | socket_closed, not_sent    | socket_closed, unknown   |
 * | headers / body timeout: UND_ERR_HEADERS_TIMEOUT, …BODY…      | timeout, not_sent          | timeout, unknown         |
 * | not HTTP: HPE_*, HTTPParserError, UND_ERR_RES_CONTENT_…      | protocol, not_sent         | protocol, unknown        |
 * | anything else                                                | error, not_sent            | error, unknown           |
 * | the caller's AbortSignal (handled by the executor)           | aborted (never retried)    | aborted                  |
 * | relent's attempt timeout (handled by the executor)           | timeout, unknown           | timeout, unknown         |
 *
 * `unknown` is what makes a POST without an idempotency key end in `check_state`;
 * `not_sent` makes any method retryable. A connect-phase error after the request
 * started cannot normally happen; if it does, the row stays conservative (`unknown`).
 * The last row is the executor's: its attempt timer fires without asking the driver,
 * so a timeout while still connecting is reported as `unknown` (conservative).
 */
export const WIRE_ERROR_TABLE: Readonly<Record<ErrorClass, { readonly before_request: WireClass; readonly after_request: WireClass }>> = Object.freeze({
  connect_refused: row('connect_refused', 'connect_refused'),
  dns: row('dns', 'dns'),
  connect_timeout: row('connect_timeout', 'timeout'),
  tls: row('tls', 'tls'),
  reset: row('reset', 'reset'),
  socket_closed: row('socket_closed', 'socket_closed'),
  timeout: row('timeout', 'timeout'),
  protocol: row('protocol', 'protocol'),
  error: row('error', 'error'),
  aborted: Object.freeze({
    before_request: Object.freeze({ errorClass: 'aborted', sent: 'not_sent' }),
    after_request: Object.freeze({ errorClass: 'aborted', sent: 'unknown' }),
  }),
});

function row(before: ErrorClass, after: ErrorClass): { readonly before_request: WireClass; readonly after_request: WireClass } {
  return Object.freeze({
    before_request: Object.freeze({ errorClass: before, sent: 'not_sent' as const }),
    after_request: Object.freeze({ errorClass: after, sent: 'unknown' as const }),
  });
}

/** Classifies an undici/Node error by its code (through `cause` chains) and the request's phase. */
export function classifyWireError(error: unknown, phase: RequestPhase): WireClass {
  const cls = errorClassOfCode(error) ?? errorClassOfName(error) ?? 'error';
  return WIRE_ERROR_TABLE[cls][phase];
}

/** undici errors that carry no code: llhttp failures without a known HPE_ code (e.g. "Expected HTTP/"). */
const NAME_CLASSES: Readonly<Record<string, ErrorClass>> = Object.freeze({ HTTPParserError: 'protocol' });

function errorClassOfName(error: unknown): ErrorClass | null {
  let e: unknown = error;
  for (let depth = 0; depth < 5 && typeof e === 'object' && e !== null; depth++) {
    const name = (e as { name?: unknown }).name;
    if (typeof name === 'string' && NAME_CLASSES[name]) return NAME_CLASSES[name]!;
    e = (e as { cause?: unknown }).cause;
  }
  return null;
}

const BRAND = Symbol.for('relent.wireError');

/**
 * The error one attempt rejects with when undici fails: the original error in `cause`
 * (its message never holds the URL's path or query, headers or body), plus what the
 * executor's default classifier reads (`errorClass`, `sent`).
 */
export class WireError extends Error {
  readonly errorClass: ErrorClass;
  readonly sent: SendState;
  readonly code: string | null;
  constructor(cause: unknown, wire: WireClass) {
    const code = codeOf(cause);
    super(
      `${wire.errorClass}${code ? ` (${code})` : ''}: ${wire.sent === 'not_sent' ? 'the request was not sent' : 'the request may have reached the server'}`,
      { cause },
    );
    this.name = 'WireError';
    this.errorClass = wire.errorClass;
    this.sent = wire.sent;
    this.code = code;
    Object.defineProperty(this, BRAND, { value: true });
  }

  static is(value: unknown): value is WireError {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
  }
}

/** The first string `code` along an error's cause chain. */
export function codeOf(error: unknown): string | null {
  let e: unknown = error;
  for (let depth = 0; depth < 5 && typeof e === 'object' && e !== null; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code.length > 0) return code;
    e = (e as { cause?: unknown }).cause;
  }
  return null;
}
