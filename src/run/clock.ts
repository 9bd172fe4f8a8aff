import { MAX_TIMER_MS, type Clock, type Random } from '../core/types.js';

/**
 * The real clock: the only place relent reads time or arms timers (tests use
 * `relent/testing`'s createTestClock instead). Monotonic time from performance.now();
 * the wall clock only for HTTP dates.
 */
export const systemClock: Clock = Object.freeze({
  now: () => performance.now(),
  wallNow: () => Date.now(),
  setTimer(fn: () => void, ms: number): () => void {
    const t = setTimeout(fn, ms <= 0 ? 0 : ms > MAX_TIMER_MS ? MAX_TIMER_MS : ms);
    return () => clearTimeout(t);
  },
});

/** The real random source. */
export const systemRandom: Random = Math.random;
