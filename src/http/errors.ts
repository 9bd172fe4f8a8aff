import { RelentError, REASON_CODES, type RelentErrorCode } from '../core/errors.js';
import type { Policy } from '../core/policy.js';
import type { ErrorClass, SendState, TerminalReason } from '../core/types.js';
import type { RunResult } from '../run/run.js';
import { WireError } from '../core/wire.js';

/** The error the HTTP client and interceptor end an operation with: a RelentError plus what the last attempt saw. */
export class RelentFetchError extends RelentError {
  /** The last response's status, when the operation ended on a response. */
  readonly status: number | null;
  /** The last attempt's error class, when it ended without a response. */
  readonly errorClass: ErrorClass | null;
  /** Whether the last attempt's request may have reached the server (error classes only). */
  readonly sent: SendState | null;
  /** The response, for ERR_RETRY_AFTER_TOO_LONG and ERR_BODY_NOT_REPLAYABLE after a response (client.fetch only; body unread). */
  readonly response: Response | null;
  constructor(
    code: RelentErrorCode,
    message: string,
    o: {
      cause?: unknown;
      reason: TerminalReason | null;
      attempts: number;
      operationId: string;
      status?: number | null;
      errorClass?: ErrorClass | null;
      sent?: SendState | null;
      response?: Response | null;
    },
  ) {
    super(code, message, { cause: o.cause, reason: o.reason, attempts: o.attempts, operationId: o.operationId });
    this.name = 'RelentFetchError';
    this.status = o.status ?? null;
    this.errorClass = o.errorClass ?? null;
    this.sent = o.sent ?? null;
    this.response = o.response ?? null;
  }
}

/**
 * The server's wait that relent would not sleep, or null: the core ended the operation
 * because a valid hint (Retry-After or a RateLimit field) was over the policy's
 * `retryAfter.maxMs` (why retry_after_over_cap, reason not_retryable) or did not fit
 * the deadline (why retry_after_past_deadline, reason deadline_exceeded). Read from the
 * result (the decision's `why` and the asked wait): nothing is parsed again here.
 */
export function waitTooLong(r: RunResult<unknown>): number | null {
  if (r.why === 'retry_after_over_cap') return r.retryAfterMs;
  if (r.why === 'retry_after_past_deadline' && r.retryAfterMs !== null && r.retryAfterMs > 0) return r.retryAfterMs;
  return null;
}

const plural = (n: number): string => `${n} attempt${n === 1 ? '' : 's'}`;

/** `GET http://host:443/path, operation op-1, 2 attempts` — never a query, header or body. */
export function whereOf(method: string, endpoint: string, r: { operationId: string; attempts: number }): string {
  return `${method} ${endpoint}, operation ${r.operationId}, ${plural(r.attempts)}`;
}

export function tooLongError(
  r: RunResult<unknown>,
  waitMs: number,
  policy: Policy,
  where: string,
  status: number,
  response: Response | null,
): RelentFetchError {
  const over = r.reason === 'not_retryable';
  const msg = `${r.reason}: the server asked to wait ${waitMs} ms, ${over ? `over the policy's cap of ${policy.retryAfter.maxMs} ms` : 'past the deadline'}; not waiting (${where}, last: ${status})`;
  return new RelentFetchError('ERR_RETRY_AFTER_TOO_LONG', msg, { reason: r.reason, attempts: r.attempts, operationId: r.operationId, status, response });
}

/** A body still arriving when the operation's deadline passed (the deadline covers the body by default). */
export function bodyDeadlineError(
  r: { readonly operationId: string; readonly attempts: number },
  deadlineMs: number,
  where: string,
  status: number,
): RelentFetchError {
  return new RelentFetchError(
    'ERR_DEADLINE_EXCEEDED',
    `deadline_exceeded: the response body was still arriving when the deadline of ${Math.round(deadlineMs)} ms passed, so it was aborted (${where}; pass bodyDeadline: false for long downloads)`,
    { reason: 'deadline_exceeded', attempts: r.attempts, operationId: r.operationId, status },
  );
}

const REPLAY_HINT = 'pass a string, bytes or a Blob to make it replayable';

export function notReplayableError(
  r: RunResult<unknown>,
  where: string,
  o: { status?: number; response?: Response | null; cause?: unknown },
): RelentFetchError {
  const last = r.last ? (r.last.status ?? r.last.errorClass) : 'no call made';
  return new RelentFetchError(
    'ERR_BODY_NOT_REPLAYABLE',
    `max_attempts: a retry is needed but the body is a stream, sent once (${where}, last: ${last}); ${REPLAY_HINT}`,
    {
      reason: r.reason,
      attempts: r.attempts,
      operationId: r.operationId,
      status: o.status ?? null,
      errorClass: r.last?.errorClass ?? null,
      sent: r.last?.sent ?? null,
      response: o.response ?? null,
      cause: o.cause,
    },
  );
}

/** The error of an operation that ended without a response to hand over. */
export function failureError(r: RunResult<unknown>, error: unknown, where: string, streamLimited: boolean): RelentFetchError {
  const lastStatus = r.last?.status ?? null;
  const lastClass = r.last?.errorClass ?? null;
  const sent = r.last?.sent ?? (WireError.is(error) ? error.sent : null);
  if (streamLimited && r.reason === 'max_attempts') return notReplayableError(r, where, { cause: WireError.is(error) ? error.cause : error });
  if (RelentError.is(error)) {
    // The executor's own ending (timeout, deadline, cancel, unknown outcome, breaker, bulkhead, defer).
    const cause = WireError.is(error.cause) ? error.cause.cause : error.cause;
    return new RelentFetchError(error.code, `${error.message} [${where.split(',')[0]}]`, {
      cause,
      reason: r.reason,
      attempts: r.attempts,
      operationId: r.operationId,
      status: lastStatus,
      errorClass: lastClass,
      sent,
    });
  }
  const code: RelentErrorCode = r.reason === 'return' ? 'ERR_NOT_RETRYABLE' : REASON_CODES[r.reason];
  const what = WireError.is(error)
    ? `${error.errorClass}${error.code ? ` (${error.code})` : ''}, ${error.sent === 'not_sent' ? 'the request was not sent' : 'the request may have reached the server'}`
    : (lastClass ?? 'error');
  return new RelentFetchError(code, `${r.reason}: ${what} (${where})`, {
    cause: WireError.is(error) ? error.cause : error,
    reason: r.reason,
    attempts: r.attempts,
    operationId: r.operationId,
    errorClass: lastClass,
    sent,
  });
}
