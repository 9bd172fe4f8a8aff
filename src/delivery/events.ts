// What a delivery worker reports: one event per attempt (the core's attempt event, with the
// batch as the operation), then what happened to the batch, and the worker's own news.
import type { InjectedKind } from '../core/chaos.js';
import { attemptEvent } from '../core/events.js';
import type { AttemptEvent, Decision, DecisionResult, DecisionWhy, ErrorClass, Observation } from '../core/types.js';
import type { DeliveryError } from './errors.js';

/** Fields every delivery event about a batch carries. */
export interface BatchRef {
  readonly destination: string;
  readonly batchId: number;
  /** The batch's idempotency key (also the operationId of its attempts). */
  readonly key: string;
  readonly items: number;
}

/**
 * One attempt at delivering a batch: every field of the core's attempt event (the
 * operation is the batch, its id the batch's idempotency key), plus the batch, its round
 * and the decision's reason. No payload, header or query string ever appears in it.
 */
export interface DeliveryAttemptEvent extends AttemptEvent, BatchRef {
  readonly method: string;
  readonly endpoint: string;
  /** 1 + the number of times the batch was requeued. */
  readonly round: number;
  readonly why: DecisionWhy;
}

/**
 * One event per attempt, then what happened to the batch (delivered, deferred,
 * dropped), and the worker's own news (a lease lost, the concurrency limit, a pause, a
 * store that failed).
 */
export type DeliveryEvent =
  | DeliveryAttemptEvent
  | (BatchRef & { readonly type: 'delivered'; readonly attempts: number; readonly ts: number })
  | (BatchRef & { readonly type: 'deferred'; readonly notBefore: number; readonly delayMs: number; readonly ts: number })
  | (BatchRef & {
      readonly type: 'dropped';
      readonly reason: Decision;
      readonly why: DecisionWhy | null;
      readonly status: number | null;
      readonly errorClass: ErrorClass | null;
      readonly attempts: number;
      readonly ts: number;
    })
  /** The lease expired and another worker claimed the batch: this worker's result was not written. */
  | { readonly type: 'lease_lost'; readonly destination: string; readonly batchId: number }
  | { readonly type: 'concurrency'; readonly destination: string; readonly limit: number; readonly cause: 'throttled' | 'recovered' }
  /** A throttling answer with Retry-After paused the destination. */
  | { readonly type: 'paused'; readonly destination: string; readonly untilMs: number }
  | { readonly type: 'store_error'; readonly during: string; readonly error: DeliveryError };

/** The request id of an attempt: `<key>/attempt-<n>`, and `<key>/round-<r>/attempt-<n>` after a requeue. */
export function deliveryRequestId(key: string, round: number, attempt: number): string {
  return round > 1 ? `${key}/round-${round}/attempt-${attempt}` : `${key}/attempt-${attempt}`;
}

/** Who made an attempt: the batch, its round and attempt, and where it went. */
export interface AttemptWho {
  readonly ref: BatchRef;
  readonly round: number;
  readonly attempt: number;
  readonly method: string;
  readonly endpoint: string;
}

/**
 * A decided attempt's event: the core's attemptEvent() (the batch key as the operation)
 * with the round's request id, the batch and the decision's reason.
 */
export function deliveryAttemptEvent(
  who: AttemptWho,
  obs: Observation,
  remainingMs: number,
  d: DecisionResult,
  wallNow: number,
  injected: InjectedKind | null,
): DeliveryAttemptEvent {
  const ev = attemptEvent(who.ref.key, who.attempt, who.method, who.endpoint, obs, remainingMs, d, wallNow, false, injected);
  return {
    ...ev,
    requestId: deliveryRequestId(who.ref.key, who.round, who.attempt),
    method: who.method,
    endpoint: who.endpoint,
    ...who.ref,
    round: who.round,
    why: d.why,
  };
}

/**
 * The attempt event of an attempt whose answer is not recorded (the worker stopped, or the
 * lease was lost): cancelled, for the attempt's span only.
 */
export function cancelledAttemptEvent(who: AttemptWho, elapsedMs: number, remainingMs: number, wallNow: number): AttemptEvent {
  const cancelled: DecisionResult = { decision: 'cancelled', why: 'cancelled', delayMs: null, retryAfterMs: null, retryAfterValid: null, budgetCost: 0 };
  const ev = attemptEvent(who.ref.key, who.attempt, who.method, who.endpoint, { errorClass: 'aborted', elapsedMs }, remainingMs, cancelled, wallNow);
  return { ...ev, requestId: deliveryRequestId(who.ref.key, who.round, who.attempt) };
}
