import { MAX_TIMER_MS, type Clock } from '../core/types.js';

/**
 * One queue for the timers of an exchange process, in two lanes: the auctions' deadlines
 * (`answers`) and everything the partner calls time (`calls`: attempt timeouts, cuts,
 * late-answer grace, retry waits). When several timers are due at once — a burst of
 * auctions shares one deadline, and a hanging partner's cut is due exactly at its
 * auction's deadline — every auction due is answered first, and the calls' timers run
 * after those answers are written (a microtask later), instead of each auction's answer
 * waiting behind the cleanup of the auctions answered before it.
 *
 * A timer fires when the clock has reached its due time, never before (a host timer that
 * fires early is re-armed), and within the millisecond after it, as a host timer does;
 * one host timer is armed at a time, for the earliest.
 *
 * Work that has no deadline of its own (the notices of an answered auction) waits for a
 * quiet moment (`whenQuiet`): it runs once no auction is due within `quietMs` (5 ms: an
 * answer counts as late 5 ms after its deadline, so work that takes less than that is
 * harmless even then), and at the latest `maxDeferMs` after it was queued. A burst of
 * auctions answered one after the other then writes its answers first and its notices
 * after, instead of the first answers' notices (a store write, a delivery, a new
 * connection: 10–15 ms in a process that has not run them yet) delaying the answers due
 * behind them.
 */
export class TimerLanes {
  /** Clock of the auctions' deadlines: due ones fire first. */
  readonly answers: Clock;
  /** Clock of the partner calls: due ones fire once the due answers are written. */
  readonly calls: Clock;
  /**
   * Timers by the millisecond they fire in (their due time rounded up: a host timer has
   * millisecond resolution anyway), so setting one is O(1); `keys` is a min-heap of the
   * milliseconds that have a bucket.
   */
  private readonly buckets = new Map<number, Entry[]>();
  private readonly keys: number[] = [];
  /** The millisecond the host timer is armed for (Infinity: none). */
  private armedKey = Infinity;
  private cancelArmed: (() => void) | null = null;
  /** Live answer timers per millisecond, and a min-heap of those milliseconds (cleaned lazily). */
  private readonly answerCount = new Map<number, number>();
  private readonly answerKeys: number[] = [];
  /** Work waiting for a quiet moment, oldest first. */
  private quiet: (() => void)[] = [];
  private quietCheck = false;
  private cancelQuietCap: (() => void) | null = null;
  private readonly quietMs: number;
  private readonly maxDeferMs: number;

  constructor(
    private readonly base: Clock,
    options: TimerLanesOptions = {},
  ) {
    this.quietMs = options.quietMs ?? DEFAULT_QUIET_MS;
    this.maxDeferMs = options.maxDeferMs ?? DEFAULT_MAX_DEFER_MS;
    const now = (): number => base.now();
    const wallNow = (): number => base.wallNow();
    this.answers = { now, wallNow, setTimer: (fn, ms, at) => this.add(fn, ms, at, 0) };
    this.calls = { now, wallNow, setTimer: (fn, ms, at) => this.add(fn, ms, at, 1) };
  }

  /** Timers set and not yet fired or cancelled. */
  get size(): number {
    let n = 0;
    for (const b of this.buckets.values()) for (const e of b) if (e.fn !== null) n++;
    return n;
  }

  private add(fn: () => void, ms: number, at: number | undefined, lane: 0 | 1): () => void {
    const now = at ?? this.base.now();
    const key = Math.ceil(now + (!(ms > 0) ? 0 : ms > MAX_TIMER_MS ? MAX_TIMER_MS : ms));
    const e: Entry = { lane, key, fn };
    if (lane === 0) {
      const n = this.answerCount.get(key);
      if (n === undefined) {
        this.answerCount.set(key, 1);
        pushKey(this.answerKeys, key);
      } else this.answerCount.set(key, n + 1);
    }
    let b = this.buckets.get(key);
    if (b === undefined) {
      b = [];
      this.buckets.set(key, b);
      pushKey(this.keys, key);
      if (key < this.armedKey) this.arm(key);
    }
    b.push(e);
    return () => {
      if (e.fn === null) return;
      e.fn = null;
      if (e.lane === 0) this.answerDone(e.key);
    };
  }

  private answerDone(key: number): void {
    const n = this.answerCount.get(key)!;
    if (n <= 1) this.answerCount.delete(key);
    else this.answerCount.set(key, n - 1);
  }

  /** The millisecond the next auction is due (Infinity: none is). */
  nextAnswerAt(): number {
    const keys = this.answerKeys;
    while (keys.length > 0 && !this.answerCount.has(keys[0]!)) popKey(keys);
    return keys.length > 0 ? keys[0]! : Infinity;
  }

  /**
   * Runs `fn` once no auction is due within `quietMs` (checked after the current turn of
   * the event loop and after every auction answered on its deadline), or `maxDeferMs`
   * after the oldest work waiting was queued, whichever comes first. Work runs in the
   * order it was queued.
   */
  whenQuiet(fn: () => void): void {
    // The cap is a timer of the second lane: at a millisecond it shares with answers, they go first.
    if (this.quiet.length === 0) this.cancelQuietCap = this.add(this.runQuiet, this.maxDeferMs, undefined, 1);
    this.quiet.push(fn);
    this.checkSoon();
  }

  /** Work waiting for a quiet moment. */
  get waiting(): number {
    return this.quiet.length;
  }

  /** Runs every work waiting for a quiet moment now (a shutdown hands the notices over). */
  readonly runQuiet = (): void => {
    this.cancelQuietCap?.();
    this.cancelQuietCap = null;
    const work = this.quiet;
    this.quiet = [];
    for (const fn of work) {
      try {
        fn();
      } catch (e) {
        // As from a timer of its own: the error is not swallowed, and the rest still runs.
        queueMicrotask(() => {
          throw e;
        });
      }
    }
  };

  private checkSoon(): void {
    if (this.quietCheck) return;
    this.quietCheck = true;
    setImmediate(this.checkQuiet);
  }

  private readonly checkQuiet = (): void => {
    this.quietCheck = false;
    if (this.quiet.length > 0 && this.nextAnswerAt() - this.base.now() > this.quietMs) this.runQuiet();
  };

  private arm(key: number): void {
    this.cancelArmed?.();
    this.armedKey = key;
    this.cancelArmed = this.base.setTimer(this.onFire, key - this.base.now());
  }

  private readonly onFire = (): void => {
    this.cancelArmed = null;
    this.armedKey = Infinity;
    const now = this.base.now();
    const keys = this.keys;
    let answers: (() => void)[] | null = null;
    let calls: (() => void)[] | null = null;
    while (keys.length > 0 && keys[0]! <= now) {
      const key = popKey(keys)!;
      const b = this.buckets.get(key)!;
      this.buckets.delete(key);
      for (const e of b) {
        const fn = e.fn;
        if (fn === null) continue;
        e.fn = null;
        if (e.lane === 0) (answers ??= []).push(fn);
        else (calls ??= []).push(fn);
      }
      this.answerCount.delete(key);
    }
    if (keys.length > 0) this.arm(keys[0]!);
    // The milliseconds passed leave the answers' heap here, whether or not anyone asks for
    // the next answer (its duplicates and cancelled keys would otherwise pile up).
    const ak = this.answerKeys;
    while (ak.length > 0 && ak[0]! <= now) popKey(ak);
    if (answers !== null) {
      for (const fn of answers) fn();
      // Once these answers are written, the next deadline may be far enough.
      if (this.quiet.length > 0) this.checkSoon();
    }
    if (calls !== null) {
      const due = calls;
      // After the answers' own continuations (they were queued as the auctions finished).
      queueMicrotask(() => {
        for (const fn of due) fn();
      });
    }
  };
}

/** Work without a deadline waits until no auction is due within this many ms… */
export const DEFAULT_QUIET_MS = 5;
/** …or at most this long. */
export const DEFAULT_MAX_DEFER_MS = 50;

export interface TimerLanesOptions {
  /** Work queued with `whenQuiet` runs once no auction is due within this many ms (default 5). */
  readonly quietMs?: number;
  /** …and at the latest this many ms after it was queued (default 50). */
  readonly maxDeferMs?: number;
}

interface Entry {
  readonly lane: 0 | 1;
  readonly key: number;
  /** null once fired or cancelled. */
  fn: (() => void) | null;
}

function pushKey(h: number[], k: number): void {
  let i = h.length;
  h.push(k);
  while (i > 0) {
    const p = (i - 1) >> 1;
    if (h[p]! <= k) break;
    h[i] = h[p]!;
    i = p;
  }
  h[i] = k;
}

function popKey(h: number[]): number | undefined {
  const top = h[0];
  const last = h.pop();
  if (h.length === 0 || last === undefined) return top;
  let i = 0;
  const n = h.length;
  for (;;) {
    const l = 2 * i + 1;
    if (l >= n) break;
    const r = l + 1;
    const c = r < n && h[r]! < h[l]! ? r : l;
    if (h[c]! >= last) break;
    h[i] = h[c]!;
    i = c;
  }
  h[i] = last;
  return top;
}
