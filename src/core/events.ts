// The one builder of attempt events: every driver (the executor, the delivery worker)
// reports an attempt in the same shape, in the same field order.
import type { InjectedKind } from './chaos.js';
import type { AttemptEvent, DecisionResult, Observation } from './types.js';

const round = (ms: number): number => Math.round(ms * 1000) / 1000;

/**
 * One attempt, decided: who (operation, attempt, method, endpoint — an endpoint fit for
 * events, see safeEndpoint), what it observed, the time left, the decision and the
 * server's asked wait, when (`wallNow`, epoch ms). `hedge` and `injected` are said only
 * when true or set: other attempt events keep their shape.
 */
export function attemptEvent(
  operationId: string,
  attempt: number,
  method: string | null,
  endpoint: string | null,
  obs: Observation,
  remainingMs: number,
  d: DecisionResult,
  wallNow: number,
  hedge = false,
  injected: InjectedKind | null = null,
): AttemptEvent {
  const ev: AttemptEvent = {
    type: 'attempt',
    operationId,
    requestId: `${operationId}/attempt-${attempt}`,
    attempt,
    method,
    endpoint,
    status: obs.status ?? null,
    errorClass: obs.errorClass ?? null,
    elapsedMs: round(obs.elapsedMs),
    remainingMs: round(remainingMs),
    decision: d.decision,
    delayMs: d.delayMs,
    retryAfterMs: d.retryAfterMs,
    retryAfterValid: d.retryAfterValid,
    ts: Math.round(wallNow),
  };
  if (hedge) (ev as { hedge?: true }).hedge = true;
  if (injected !== null) (ev as { injected?: InjectedKind }).injected = injected;
  return ev;
}
