// A worker's load shedding: what a destination's answers do to its concurrency and pace.
import type { DecisionResult } from '../core/types.js';
import type { Dest, WorkerCore } from './worker-state.js';

/**
 * A throttling answer (a status in the destination's `backoffOn`) halves the
 * destination's concurrency (once per wave, when adaptive) and, with a Retry-After the
 * core found valid, pauses the destination for that long (at most maxPauseMs); a success
 * lets the concurrency grow again. `startedAt`/`generation`: when the attempt started
 * (monotonic) and under which limit; `now`: the wall time of its answer.
 */
export function shed(w: WorkerCore, dest: Dest, status: number | null, res: DecisionResult, generation: number, startedAt: number, now: number): void {
  const d = dest.d;
  const adaptive = d.concurrency.adaptive;
  if (status !== null && d.concurrency.backoffOn.includes(status)) {
    if (adaptive && dest.aimd.sample({ startedAt, now: w.clock.now(), inFlight: dest.inflight, generation, dropped: true }) !== null) {
      w.emit({ type: 'concurrency', destination: d.name, limit: dest.aimd.limit, cause: 'throttled' });
    }
    if (d.maxPauseMs > 0 && res.retryAfterMs !== null && res.retryAfterValid !== false && res.retryAfterMs > 0) {
      const until = now + Math.min(res.retryAfterMs, d.maxPauseMs);
      if (until > dest.pausedUntil) {
        dest.pausedUntil = until;
        w.emit({ type: 'paused', destination: d.name, untilMs: until });
      }
    }
  } else if (res.decision === 'return') {
    if (adaptive && dest.aimd.sample({ startedAt, now: w.clock.now(), inFlight: dest.inflight, generation, dropped: false }) !== null) {
      w.emit({ type: 'concurrency', destination: d.name, limit: dest.aimd.limit, cause: 'recovered' });
    }
  }
}
