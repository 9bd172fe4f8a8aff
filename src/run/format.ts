import type { AttemptEvent, ResultEvent } from '../core/types.js';

/** One event as one JSON line, keys in a fixed order (the one `relent replay` prints). */
export function formatJsonLine(event: AttemptEvent | ResultEvent): string {
  return JSON.stringify(event);
}

const ms = (v: number | null): string => (v === null ? '-' : v >= 10_000 ? `${(v / 1000).toFixed(v % 1000 === 0 ? 0 : 1)}s` : `${Math.round(v * 10) / 10}ms`);

/** One event for people: `op-42 #2 GET /items 503 in 80ms (280ms left) → retry in 40ms`. */
export function formatHuman(event: AttemptEvent | ResultEvent): string {
  if (event.type === 'result') {
    const what = event.status !== null ? `status ${event.status}` : event.errorClass !== null ? event.errorClass : 'no call';
    return `${event.operationId} ⇒ ${event.reason} after ${event.attempts} attempt${event.attempts === 1 ? '' : 's'} (${what})`;
  }
  const what = event.status !== null ? String(event.status) : event.errorClass!;
  const target = [event.method, event.endpoint].filter(Boolean).join(' ');
  let next: string = event.decision;
  if (event.delayMs !== null) next += ` in ${ms(event.delayMs)}`;
  if (event.retryAfterValid !== null) next += event.retryAfterValid ? ` (Retry-After ${ms(event.retryAfterMs)})` : ' (Retry-After invalid, own backoff)';
  return `${event.operationId} #${event.attempt}${target ? ' ' + target : ''} ${what} in ${ms(event.elapsedMs)} (${ms(event.remainingMs)} left) → ${next}`;
}
