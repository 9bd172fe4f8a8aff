import { MAX_TIMER_MS, type Clock, type Random } from '../core/types.js';
import { RelentError } from '../core/errors.js';
import { nextTurn } from './turn.js';

/**
 * A timer the lazy timer queue can hold without allocating: the executor's own state
 * object implements it (one timer at a time per operation).
 */
export interface TimerRecord {
  /** Monotonic ms when it is due. */
  timerDue: number;
  /** Its place among the armed timers (null before the end of the turn, or after it fired or was cancelled). */
  timerHandle: object | null;
  /** Set: due; cleared when it fires or is cancelled. */
  timerSet: boolean;
  /** The queue generation it was last queued in (see `generation`): queued when equal to the current one. */
  timerQueued: number;
  /** The next record in the queue (an intrusive list: queueing allocates nothing). */
  timerNext: TimerRecord | null;
  /** Called when it fires. */
  onTimerFired(): void;
}

/**
 * Timers armed lazily. Most attempts settle within the macrotask that started them (a
 * cache hit, a fast local call) and their timeout never matters; arming a real timer
 * for each would cost more than the call. So a timer is only queued, and one callback
 * at the end of the turn (nextTurn: setImmediate where there is one, else a
 * MessageChannel message) arms real timers for the ones still set. In Node the check
 * phase runs before the loop's next timers phase, so no timer fires late (at most one
 * loop turn when set from inside a setImmediate callback); elsewhere a timer may fire
 * one task late. Due times are kept from the moment the timer was set.
 */
class TimerQueue {
  /** The timers to arm at the end of the turn, newest first (linked through `timerNext`). */
  head: TimerRecord | null;
  /** The queue generation: a record is in the list when its `timerQueued` equals it. */
  gen: number;
  constructor(head: TimerRecord | null, gen: number) {
    this.head = head;
    this.gen = gen;
  }
}

/**
 * The queue's list head lives in an object replaced by a fresh copy each time the turn's
 * clock reading is renewed (every TICK_SHARE operations at most), rather than in a
 * module variable: a fresh object is in V8's young generation, where storing the newest
 * record (itself young) needs no write barrier; a module variable is old, and each such
 * store would go through the barrier and the remembered set (about a tenth of the
 * success path of run()).
 */
let queue = new TimerQueue(null, 1);
/** Timers in the queue still set. When it drops to 0 the queue is emptied at once, so settled operations are not kept alive. */
let live = 0;
/** The last queue generation handed out: emptying the queue gives it a new one (records queued before are not in it any more). */
let generation = 1;
let scheduled = false;

/**
 * The monotonic clock read once per turn: a deadline in milliseconds does not need a
 * fresh performance.now() (~0.1 µs on a virtual machine) for every operation started
 * in the same macrotask. Whole milliseconds (small integers, not boxed numbers, in the
 * objects that keep them; an operation may start up to 1 ms early). The reading is dropped at the end of the turn and after
 * TICK_SHARE operations, so it is never older than the synchronous work of a few
 * dozen operations: a deadline counted from it starts at most that much early.
 */
let tick = -1;
let tickShared = 0;
const TICK_SHARE = 32;

function schedule(): void {
  scheduled = true;
  nextTurn(endOfTurn);
}

function endOfTurn(): void {
  scheduled = false;
  tick = -1;
  const q = queue;
  let t = q.head;
  if (t === null) return;
  q.head = null;
  q.gen = ++generation;
  live = 0;
  const now = performance.now();
  while (t !== null) {
    const next: TimerRecord | null = t.timerNext;
    t.timerNext = null;
    if (t.timerSet && t.timerHandle === null) t.timerHandle = armShared(t, now);
    t = next;
  }
}

/**
 * The armed timers share one Node timer: a heap by due time (ties in arming order),
 * and a Node timer for the earliest. Arming and cancelling cost a small object and a
 * few comparisons instead of a Node timer each (~1 µs with its bookkeeping and its
 * garbage); the Node timer is moved only when an earlier timer is armed, and cleared
 * when none is left (so that it does not keep the process alive).
 */
class Armed {
  constructor(
    readonly record: TimerRecord,
    readonly due: number,
    readonly seq: number,
    public index: number,
  ) {}
}

const armed: Armed[] = [];
let armedSeq = 0;
/** The Node timer, and the due time it was set for (Infinity: none). */
let sharedTimer: ReturnType<typeof setTimeout> | null = null;
let sharedDue = Infinity;

function earlier(a: Armed, b: Armed): boolean {
  return a.due < b.due || (a.due === b.due && a.seq < b.seq);
}

function siftUp(i: number): void {
  const x = armed[i]!;
  while (i > 0) {
    const p = (i - 1) >> 1;
    const y = armed[p]!;
    if (!earlier(x, y)) break;
    armed[i] = y;
    y.index = i;
    i = p;
  }
  armed[i] = x;
  x.index = i;
}

function siftDown(i: number): void {
  const n = armed.length;
  const x = armed[i]!;
  for (;;) {
    const l = 2 * i + 1;
    if (l >= n) break;
    const r = l + 1;
    const c = r < n && earlier(armed[r]!, armed[l]!) ? r : l;
    const y = armed[c]!;
    if (!earlier(y, x)) break;
    armed[i] = y;
    y.index = i;
    i = c;
  }
  armed[i] = x;
  x.index = i;
}

function armShared(t: TimerRecord, now: number): Armed {
  const a = new Armed(t, t.timerDue, armedSeq++, armed.length);
  armed.push(a);
  siftUp(a.index);
  if (a.due < sharedDue) setShared(a.due, now);
  return a;
}

function disarmShared(a: Armed): void {
  const last = armed.pop()!;
  if (last !== a) {
    const i = a.index;
    armed[i] = last;
    last.index = i;
    siftDown(i);
    siftUp(last.index);
  }
  if (armed.length === 0 && sharedTimer !== null) {
    clearTimeout(sharedTimer);
    sharedTimer = null;
    sharedDue = Infinity;
  }
}

function setShared(due: number, now: number): void {
  if (sharedTimer !== null) clearTimeout(sharedTimer);
  const ms = due - now;
  sharedDue = due;
  sharedTimer = setTimeout(fireShared, ms <= 0 ? 0 : ms > MAX_TIMER_MS ? MAX_TIMER_MS : Math.ceil(ms));
}

/** The Node timer fired: every timer due by then (the one it was set for included) fires, in order. */
function fireShared(): void {
  sharedTimer = null;
  const target = sharedDue;
  sharedDue = Infinity;
  const now = performance.now();
  try {
    while (armed.length > 0) {
      const a = armed[0]!;
      if (a.due > target && a.due > now) break;
      disarmShared(a);
      const t = a.record;
      t.timerHandle = null;
      if (!t.timerSet) continue;
      t.timerSet = false;
      t.onTimerFired();
    }
  } finally {
    if (armed.length > 0 && sharedTimer === null) setShared(armed[0]!.due, performance.now());
  }
}

/** A new reading for the turn (see `tick`), and a fresh queue object (see `queue`). */
function renewTick(): number {
  tick = Math.floor(performance.now());
  tickShared = 0;
  queue = new TimerQueue(queue.head, queue.gen);
  if (!scheduled) schedule();
  return tick;
}

/** The monotonic clock as read once for this turn (see `tick`). */
export function turnNow(): number {
  return tick < 0 || ++tickShared > TICK_SHARE ? renewTick() : tick;
}

/** Sets `t` to fire `ms` after `now` (clamped to [0, 2^31-1]); a timer already set is moved. */
export function setTimerRecord(t: TimerRecord, ms: number, now: number): void {
  if (t.timerSet) clearTimerRecord(t);
  t.timerDue = now + (!(ms > 0) ? 0 : ms > MAX_TIMER_MS ? MAX_TIMER_MS : ms);
  t.timerSet = true;
  const q = queue;
  if (t.timerQueued !== q.gen) {
    t.timerQueued = q.gen;
    t.timerNext = q.head;
    q.head = t;
  }
  live++;
  if (!scheduled) schedule();
}

/** Cancels `t` (no effect when it is not set). */
export function clearTimerRecord(t: TimerRecord): void {
  if (!t.timerSet) return;
  t.timerSet = false;
  if (t.timerHandle !== null) {
    disarmShared(t.timerHandle as Armed);
    t.timerHandle = null;
  } else if (--live <= 0) {
    // Nothing left to arm: empty the queue now (in a loop of quick calls, nothing piles up).
    live = 0;
    const q = queue;
    q.head = null;
    q.gen = ++generation;
  }
}

class CallbackTimer implements TimerRecord {
  timerDue = 0;
  timerHandle: object | null = null;
  timerSet = false;
  timerQueued = 0;
  timerNext: TimerRecord | null = null;
  constructor(private readonly fn: () => void) {}
  onTimerFired(): void {
    this.fn();
  }
}

function setLazyTimer(fn: () => void, ms: number, now?: number): () => void {
  const t = new CallbackTimer(fn);
  setTimerRecord(t, ms, now ?? performance.now());
  return () => clearTimerRecord(t);
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

const CLOCK_METHODS = ['now', 'wallNow', 'setTimer'] as const;

/**
 * An injected clock as an option (`field` names it in the error): undefined when none is
 * given; ERR_INVALID_INPUT naming the missing method otherwise. A clock missing one
 * (JavaScript has no type check) would fail later, inside a timer or an answer's
 * callback, where nothing could end the operation with its error.
 */
export function clockOption(value: unknown, field = 'clock'): Clock | undefined {
  if (value === undefined || value === null) return undefined;
  if (value === systemClock) return systemClock;
  if (typeof value !== 'object' && typeof value !== 'function') {
    throw new RelentError(
      'ERR_INVALID_INPUT',
      `Expected \`${field}\` to be a clock with now(), wallNow() and setTimer(fn, ms) (relent/testing's createTestClock() makes one)`,
      { field },
    );
  }
  for (const m of CLOCK_METHODS) {
    if (typeof (value as Record<string, unknown>)[m] !== 'function') {
      throw new RelentError(
        'ERR_INVALID_INPUT',
        `Expected \`${field}\` to have a ${m}() function (a clock needs now(), wallNow() and setTimer(fn, ms); relent/testing's createTestClock() makes one)`,
        { field },
      );
    }
  }
  return value as Clock;
}
