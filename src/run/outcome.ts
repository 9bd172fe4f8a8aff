// How an operation ends for its caller: the result record, the outcome (the last real
// answer, the operation's own error, or a RelentError with a stable code), the messages.
import { RelentError, REASON_CODES } from '../core/errors.js';
import type { DecisionResult, DecisionWhy, ErrorClass, Observation, ResultEvent, SendState, TerminalReason } from '../core/types.js';
import { observedHeaders } from './classify.js';
import type { Classified, RunResult } from './types.js';

let idCounter = 0;
const idPrefix = Math.floor(Math.random() * 0xffffffff).toString(36);
/** A process-unique operation id, cheap enough for the success path. */
export function newOperationId(): string {
  idCounter = (idCounter + 1) | 0;
  return `op-${idPrefix}-${(idCounter >>> 0).toString(36)}`;
}

export type AttemptOutcome<T> =
  | { readonly kind: 'value'; readonly value: T }
  | { readonly kind: 'error'; readonly error: unknown }
  | { readonly kind: 'timeout' }
  | { readonly kind: 'aborted' };

/**
 * An observation with every field present, in one order: decide() reads absent fields,
 * and objects of one shape keep those reads fast (a spread-built object made decide()
 * 40x slower on the success path).
 */
export function observation(c: Classified, elapsedMs: number): Observation {
  const r = c as { status?: number; errorClass?: ErrorClass; sent?: SendState; headers?: unknown; nbr?: number | null };
  return new ObservationRecord(
    r.status ?? null,
    r.errorClass ?? null,
    r.sent ?? undefined,
    r.headers == null ? undefined : observedHeaders(r.headers),
    r.nbr ?? null,
    elapsedMs,
  );
}

/** An Observation made by `new` (a plain object all the same): see RunResultRecord. */
const ObservationRecord = function ObservationRecord(
  this: Record<string, unknown>,
  status: number | null,
  errorClass: ErrorClass | null,
  sent: SendState | undefined,
  headers: Readonly<Record<string, string>> | undefined,
  nbr: number | null,
  elapsedMs: number,
): void {
  this.status = status;
  this.errorClass = errorClass;
  this.sent = sent;
  this.headers = headers;
  this.nbr = nbr;
  this.elapsedMs = elapsedMs;
} as unknown as new (
  status: number | null,
  errorClass: ErrorClass | null,
  sent: SendState | undefined,
  headers: Readonly<Record<string, string>> | undefined,
  nbr: number | null,
  elapsedMs: number,
) => Observation;
ObservationRecord.prototype = Object.prototype;

/** A successful outcome made by `new` (a plain object all the same): see RunResultRecord. */
export const OkOutcome = function OkOutcome(this: Record<string, unknown>, value: unknown): void {
  this.ok = true;
  this.value = value;
} as unknown as new <T>(value: T) => { readonly ok: true; readonly value: T };
OkOutcome.prototype = Object.prototype;

/** How the last attempt ended with a value (made by `new`: see RunResultRecord). */
export class ValueOutcome<T> {
  readonly kind = 'value' as const;
  constructor(readonly value: T) {}
}

export const NO_EXTRA: Partial<RunResult<never>> = Object.freeze({});

type RunResultRecordConstructor = new (
  operationId: string,
  reason: TerminalReason,
  why: DecisionWhy | null,
  attempts: number,
  last: Observation | null,
  outcome: RunResult<unknown>['outcome'],
  stateCheck: Classified | null,
  delayMs: number | null,
  retryAfterMs: number | null,
  remainingMs: number,
  deadlineMs: number,
) => RunResult<unknown>;

/**
 * A RunResult made by `new`, not as an object literal: V8 tracks an allocation site per
 * literal and, when a site's objects survive a young-generation GC (as results did while
 * the process warmed up), allocates all later ones straight in the old generation; every
 * young object a result points to (the answer, its handler, the request behind it) then
 * survived each scavenge until the next full GC. An HTTP driver under load promoted
 * about 4x the memory a pass-through interceptor does and spent a third of its time in
 * scavenges. `new` has no such site. The prototype is Object.prototype: a result is the
 * plain object it always was.
 */
export const RunResultRecord = function RunResultRecord(
  this: Record<string, unknown>,
  operationId: string,
  reason: TerminalReason,
  why: DecisionWhy | null,
  attempts: number,
  last: Observation | null,
  outcome: RunResult<unknown>['outcome'],
  stateCheck: Classified | null,
  delayMs: number | null,
  retryAfterMs: number | null,
  remainingMs: number,
  deadlineMs: number,
): void {
  this.operationId = operationId;
  this.reason = reason;
  this.why = why;
  this.attempts = attempts;
  this.last = last;
  this.outcome = outcome;
  this.stateCheck = stateCheck;
  this.delayMs = delayMs;
  this.retryAfterMs = retryAfterMs;
  this.remainingMs = remainingMs;
  this.deadlineMs = deadlineMs;
} as unknown as RunResultRecordConstructor;
RunResultRecord.prototype = Object.prototype;

export const TIMEOUT_OUTCOME = { kind: 'timeout' } as const;
export const ABORTED_OUTCOME = { kind: 'aborted' } as const;

const MESSAGES: Partial<Record<string, string>> = {
  retry_after_over_cap: 'the server asked to wait longer than the policy allows',
  retry_after_past_deadline: 'the server asked to wait past the deadline',
  delay_past_deadline: 'the next wait does not fit in the deadline',
  deadline_spent: 'the deadline is spent',
  attempts_exhausted: 'no attempts left',
  budget_empty: 'the shared retry budget is empty',
  not_idempotent: 'the operation is not idempotent (send an idempotency key or declare it safe)',
  status_not_retryable: 'the status is not retryable',
  error_not_retryable: 'the error is not retryable',
  unknown_outcome: 'the request may have been applied; read the state before trying again',
  defer_long_wait: 'the wait is handed to a durable queue',
  retry_after_no_retry: 'the server said not to retry',
  circuit_open: 'the circuit breaker is open; calls fail fast until a trial call succeeds',
};

/** The end of every error message: which operation, how many attempts, what the last one saw. */
function messageTail(operationId: string, attempts: number, last: Observation | null): string {
  const what = last ? (last.status ?? last.errorClass) : 'no call made';
  return `(operation ${operationId}, ${attempts} attempt${attempts === 1 ? '' : 's'}, last: ${what})`;
}

/**
 * The outcome when a limit refused the call (the bulkhead's queue is full, the concurrency
 * limit's queue is full, the rate limit has no token in time): the last real answer or
 * error when a call was made (as when retries run out), else the limit's error
 * (ERR_BULKHEAD_FULL, ERR_CONCURRENCY_LIMITED, ERR_RATE_LIMITED) with the operation's reason.
 */
export function refusalOutcome<T>(
  reason: TerminalReason,
  error: unknown,
  lastOutcome: AttemptOutcome<T> | null,
  last: Observation | null,
  operationId: string,
  attempts: number,
): Partial<RunResult<T>> {
  if (lastOutcome?.kind === 'value') return { outcome: { ok: true, value: lastOutcome.value } };
  if (lastOutcome?.kind === 'error') return { outcome: { ok: false, error: lastOutcome.error } };
  const code = RelentError.is(error) ? error.code : REASON_CODES[reason as Exclude<TerminalReason, 'return'>];
  const detail = error instanceof Error ? error.message.replace(/^The /, 'the ') : reason;
  const message = `${reason}: ${detail} ${messageTail(operationId, attempts, last)}`;
  return { outcome: { ok: false, error: new RelentError(code, message, { reason, attempts, operationId }) } };
}

/**
 * How an operation ends for the caller (never a synthetic success): the last value
 * when a response arrived; the operation's own error when it threw; a RelentError
 * with a stable code when relent's own limits ended it (timeout, deadline, cancel,
 * unknown outcome, deferral) or no call was made.
 */
export function outcomeFor<T>(
  reason: TerminalReason,
  d: DecisionResult | null,
  lastOutcome: AttemptOutcome<T> | null,
  last: Observation | null,
  operationId: string,
  attempts: number,
  signal: AbortSignal | undefined,
): RunResult<T>['outcome'] {
  if (lastOutcome?.kind === 'value' && reason !== 'check_state' && reason !== 'defer' && reason !== 'cancelled') return new OkOutcome(lastOutcome.value);
  if (lastOutcome?.kind === 'error' && reason !== 'cancelled' && reason !== 'check_state' && reason !== 'defer') {
    return { ok: false, error: lastOutcome.error };
  }
  if (reason === 'return') return { ok: false, error: new RelentError('ERR_INVALID_INPUT', 'internal: return without a value') };
  const code = REASON_CODES[reason];
  const detail = d ? (MESSAGES[d.why] ?? d.why) : reason === 'cancelled' ? 'cancelled by the caller' : reason;
  const message = `${reason}: ${detail} ${messageTail(operationId, attempts, last)}`;
  const error = new RelentError(d?.why === 'retry_after_over_cap' ? 'ERR_RETRY_AFTER_TOO_LONG' : code, message, {
    reason,
    attempts,
    operationId,
    cause: reason === 'cancelled' ? signal?.reason : lastOutcome?.kind === 'error' ? lastOutcome.error : undefined,
  });
  return { ok: false, error };
}

/** The result event of an operation: how it ended, with what it said only when there is something to say. */
export function resultEvent(
  operationId: string,
  last: Observation | null,
  reason: TerminalReason,
  attempts: number,
  wallNow: number,
  stateCheck: Classified | null,
  d: DecisionResult | null,
  op: { readonly hedges: number; readonly hedgeWon: boolean } | undefined,
): ResultEvent {
  const ev: ResultEvent & { stateCheck?: Classified; why?: DecisionWhy; hedges?: number; hedgeWon?: boolean } = {
    type: 'result',
    operationId,
    status: last?.status ?? null,
    errorClass: last?.errorClass ?? null,
    reason,
    attempts,
    ts: Math.round(wallNow),
  };
  if (stateCheck !== null) ev.stateCheck = stateCheck;
  // Said only when the server asked not to retry (optional: other result events keep their shape).
  if (d?.why === 'retry_after_no_retry') ev.why = d.why;
  if (op !== undefined && op.hedges > 0) {
    ev.hedges = op.hedges;
    ev.hedgeWon = op.hedgeWon;
  }
  return ev;
}
