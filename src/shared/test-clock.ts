import { MAX_TIMER_MS, type Clock, type Random } from '../core/types.js';
import { createSeededRandom } from '../core/random.js';
import { nextTurn } from './turn.js';

/**
 * A clock whose time moves only when told: for testing retry code (relent's or yours)
 * without fake timers or wall-clock sleeps. Timers fire in due-time order (registration
 * order for equal times), and `now()` reads each timer's due time while it fires.
 */
export interface TestClock extends Clock {
  /** Moves time forward by `ms`, firing due timers synchronously. */
  advance(ms: number): void;
  /** Moves time forward by `ms`, letting promise callbacks run after each timer. */
  advanceAsync(ms: number): Promise<void>;
  /** Fires the next timer (moving time to it) and lets promise callbacks run; false when none is pending. */
  next(): Promise<boolean>;
  /** Fires timers until none is pending (at most `limit`, default 100 000). Returns the number fired. */
  runAll(limit?: number): Promise<number>;
  /** Lets pending promise callbacks run without moving time. */
  flush(): Promise<void>;
  /** Number of pending timers. */
  pending(): number;
  /** Due time of the next timer, or null. */
  nextAt(): number | null;
}

export interface TestClockOptions {
  /** Monotonic start, ms (default 0). */
  readonly now?: number;
  /** Wall clock at the start, epoch ms (default 2026-01-01T00:00:00Z). */
  readonly wallNow?: number;
}

interface Timer {
  readonly due: number;
  readonly seq: number;
  readonly fn: () => void;
  cancelled: boolean;
}

/** Lets every queued promise callback run (one macrotask turn). */
const drain = (): Promise<void> => new Promise((resolve) => nextTurn(resolve));

export function createTestClock(options: TestClockOptions = {}): TestClock {
  const start = options.now ?? 0;
  const wallStart = options.wallNow ?? Date.UTC(2026, 0, 1);
  let now = start;
  let seq = 0;
  let live = 0;
  // A binary min-heap on (due, seq): O(log n) to add and to take the next timer, so tests
  // (and the delivery worker's virtual-time runs) with many timers stay fast.
  const heap: Timer[] = [];
  const before = (a: Timer, b: Timer): boolean => a.due < b.due || (a.due === b.due && a.seq < b.seq);
  const push = (t: Timer): void => {
    heap.push(t);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(heap[i]!, heap[parent]!)) break;
      [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
      i = parent;
    }
  };
  const pop = (): Timer | undefined => {
    const top = heap[0];
    const last = heap.pop();
    if (heap.length > 0 && last !== undefined) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && before(heap[l]!, heap[m]!)) m = l;
        if (r < heap.length && before(heap[r]!, heap[m]!)) m = r;
        if (m === i) break;
        [heap[i], heap[m]] = [heap[m]!, heap[i]!];
        i = m;
      }
    }
    return top;
  };
  const prune = (): void => {
    while (heap.length > 0 && heap[0]!.cancelled) pop();
  };
  const fireOne = (limit: number): boolean => {
    prune();
    const t = heap[0];
    if (!t || t.due > limit) return false;
    pop();
    live--;
    t.cancelled = true; // fired: a later cancel() is a no-op
    if (t.due > now) now = t.due;
    t.fn();
    return true;
  };

  const clock: TestClock = {
    now: () => now,
    wallNow: () => wallStart + (now - start),
    setTimer(fn, ms, at) {
      const delay = !(ms > 0) ? 0 : ms > MAX_TIMER_MS ? MAX_TIMER_MS : ms;
      // Counted from the caller's reading of now() when given, as the system clock does.
      const from = at !== undefined && at <= now ? at : now;
      const t: Timer = { due: from + delay, seq: seq++, fn, cancelled: false };
      push(t);
      live++;
      return () => {
        if (t.cancelled) return;
        t.cancelled = true;
        live--;
      };
    },
    advance(ms) {
      const target = now + Math.max(0, ms);
      while (fireOne(target));
      now = target;
    },
    async advanceAsync(ms) {
      const target = now + Math.max(0, ms);
      await drain();
      while (fireOne(target)) await drain();
      now = target;
    },
    async next() {
      await drain();
      const fired = fireOne(Number.POSITIVE_INFINITY);
      await drain();
      return fired;
    },
    async runAll(limit = 100_000) {
      let n = 0;
      await drain();
      while (n < limit && fireOne(Number.POSITIVE_INFINITY)) {
        n++;
        await drain();
      }
      return n;
    },
    flush: drain,
    pending() {
      return live;
    },
    nextAt() {
      prune();
      return heap[0]?.due ?? null;
    },
  };
  return clock;
}

/** A seeded random source and the numbers it has drawn (for asserting on jitter). */
export function createRecordingRandom(seed: number | string): Random & { readonly drawn: readonly number[] } {
  const r = createSeededRandom(seed);
  const drawn: number[] = [];
  const f = (() => {
    const v = r();
    drawn.push(v);
    return v;
  }) as Random & { drawn: number[] };
  f.drawn = drawn;
  return f;
}

/** A random source that always returns `value` (0 → shortest jittered waits, 0.999… → longest). */
export function constantRandom(value: number): Random {
  if (!(value >= 0 && value < 1)) throw new RangeError('constantRandom: value must be in [0, 1)');
  return () => value;
}
