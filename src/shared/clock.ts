import { MAX_TIMER_MS, type Clock, type Random } from '../core/types.js';

/**
 * Timers armed lazily. Most attempts settle within the macrotask that started them (a
 * cache hit, a fast local call) and their timeout never matters; arming a Node timer
 * for each would cost more than the call. So setTimer only records the timer, and one
 * setImmediate per macrotask arms real timers for the ones still pending. The check
 * phase runs before the loop's next timers phase, so no timer fires late (at most one
 * loop turn when set from inside a setImmediate callback); due times are kept from the
 * moment setTimer was called.
 */
interface LazyTimer {
  fn: (() => void) | null;
  due: number;
  handle: ReturnType<typeof setTimeout> | null;
}

let pending: LazyTimer[] = [];
let live = 0;
let scheduled = false;

function armPending(): void {
  scheduled = false;
  const batch = pending;
  pending = [];
  live = 0;
  const now = performance.now();
  for (const t of batch) {
    if (t.fn === null) continue;
    const ms = t.due - now;
    t.handle = setTimeout(fire, ms <= 0 ? 0 : ms > MAX_TIMER_MS ? MAX_TIMER_MS : Math.ceil(ms), t);
  }
}

function fire(t: LazyTimer): void {
  const fn = t.fn;
  t.fn = null;
  t.handle = null;
  if (fn) fn();
}

function setLazyTimer(fn: () => void, ms: number, now?: number): () => void {
  const delay = !(ms > 0) ? 0 : ms > MAX_TIMER_MS ? MAX_TIMER_MS : ms;
  const t: LazyTimer = { fn, due: (now ?? performance.now()) + delay, handle: null };
  pending.push(t);
  live++;
  if (!scheduled) {
    scheduled = true;
    setImmediate(armPending);
  }
  return () => {
    if (t.fn === null) return;
    t.fn = null;
    if (t.handle !== null) {
      clearTimeout(t.handle);
      t.handle = null;
    } else if (--live === 0 && pending.length > 256) {
      pending = []; // nothing left to arm: keep the list from growing in tight loops
    }
  };
}

/**
 * The real clock: the only place relent reads time or arms timers (tests use
 * `relent/testing`'s createTestClock instead). Monotonic time from performance.now();
 * the wall clock only for HTTP dates.
 */
export const systemClock: Clock = Object.freeze({
  now: () => performance.now(),
  wallNow: () => Date.now(),
  setTimer: setLazyTimer,
});

/** The real random source. */
export const systemRandom: Random = Math.random;
