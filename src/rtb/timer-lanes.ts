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
 * fires early is re-armed); one host timer is armed at a time, for the earliest due.
 */
export class TimerLanes {
  /** Clock of the auctions' deadlines: due ones fire first. */
  readonly answers: Clock;
  /** Clock of the partner calls: due ones fire once the due answers are written. */
  readonly calls: Clock;
  private readonly heap: Entry[] = [];
  private seq = 0;
  /** Due time the host timer is armed for (Infinity: none). */
  private armedDue = Infinity;
  private cancelArmed: (() => void) | null = null;

  constructor(private readonly base: Clock) {
    const now = (): number => base.now();
    const wallNow = (): number => base.wallNow();
    this.answers = { now, wallNow, setTimer: (fn, ms, at) => this.add(fn, ms, at, 0) };
    this.calls = { now, wallNow, setTimer: (fn, ms, at) => this.add(fn, ms, at, 1) };
  }

  /** Timers set and not yet fired or cancelled (cancelled ones leave the queue when they come due). */
  get size(): number {
    let n = 0;
    for (const e of this.heap) if (e.fn !== null) n++;
    return n;
  }

  private add(fn: () => void, ms: number, at: number | undefined, lane: 0 | 1): () => void {
    const now = at ?? this.base.now();
    const e: Entry = { due: now + (!(ms > 0) ? 0 : ms > MAX_TIMER_MS ? MAX_TIMER_MS : ms), lane, seq: this.seq++, fn };
    push(this.heap, e);
    if (e.due < this.armedDue) this.arm(e.due);
    return () => {
      e.fn = null;
    };
  }

  private arm(due: number): void {
    this.cancelArmed?.();
    this.armedDue = due;
    this.cancelArmed = this.base.setTimer(this.onFire, due - this.base.now());
  }

  private readonly onFire = (): void => {
    this.cancelArmed = null;
    this.armedDue = Infinity;
    const now = this.base.now();
    const heap = this.heap;
    let later: (() => void)[] | null = null;
    const answers: (() => void)[] = [];
    while (heap.length > 0 && heap[0]!.due <= now) {
      const e = pop(heap)!;
      const fn = e.fn;
      if (fn === null) continue;
      e.fn = null;
      if (e.lane === 0) answers.push(fn);
      else (later ??= []).push(fn);
    }
    // Cancelled timers at the top are dropped now rather than arming the host timer for them.
    while (heap.length > 0 && heap[0]!.fn === null) pop(heap);
    if (heap.length > 0) this.arm(heap[0]!.due);
    for (const fn of answers) fn();
    if (later !== null) {
      const calls = later;
      // After the answers' own continuations (they were queued as the auctions finished).
      queueMicrotask(() => {
        for (const fn of calls) fn();
      });
    }
  };
}

interface Entry {
  readonly due: number;
  readonly lane: 0 | 1;
  readonly seq: number;
  /** null once fired or cancelled. */
  fn: (() => void) | null;
}

function before(a: Entry, b: Entry): boolean {
  return a.due !== b.due ? a.due < b.due : a.lane !== b.lane ? a.lane < b.lane : a.seq < b.seq;
}

function push(h: Entry[], e: Entry): void {
  let i = h.length;
  h.push(e);
  while (i > 0) {
    const p = (i - 1) >> 1;
    if (!before(e, h[p]!)) break;
    h[i] = h[p]!;
    i = p;
  }
  h[i] = e;
}

function pop(h: Entry[]): Entry | undefined {
  const top = h[0];
  const last = h.pop();
  if (h.length === 0 || last === undefined) return top;
  let i = 0;
  const n = h.length;
  for (;;) {
    const l = 2 * i + 1;
    if (l >= n) break;
    const r = l + 1;
    const c = r < n && before(h[r]!, h[l]!) ? r : l;
    if (!before(h[c]!, last)) break;
    h[i] = h[c]!;
    i = c;
  }
  h[i] = last;
  return top;
}
