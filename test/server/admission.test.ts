// The load shedder as plain calls on a test clock.
import { describe, expect, it } from 'vitest';
import { Admission, type ShedReason, type Ticket } from '../../src/server/admission.js';
import { createTestClock } from '../../src/testing/index.js';

function tickets(clock: { now(): number }) {
  const log: string[] = [];
  const make = (name: string, o: { retry?: boolean; deadlineMs?: number } = {}): Ticket => ({
    retry: o.retry ?? false,
    arrivedAt: clock.now(),
    deadlineAt: o.deadlineMs === undefined ? Infinity : clock.now() + o.deadlineMs,
    admit: (q) => log.push(`${name} admitted after ${q}`),
    shed: (r: ShedReason) => log.push(`${name} shed ${r}`),
    expire: () => log.push(`${name} expired`),
  });
  return { log, make };
}

describe('Admission: concurrency limit, bounded queue, queue timeout, first attempts first', () => {
  it('no limit: everything is admitted at once', () => {
    const clock = createTestClock();
    const a = new Admission({ maxConcurrent: null, maxQueue: 0, queueTimeoutMs: 100 }, clock);
    const t = tickets(clock);
    for (let i = 0; i < 5; i++) a.arrive(t.make(`r${i}`), clock.now());
    expect(a.inFlight).toBe(5);
    expect(t.log.every((l) => l.endsWith('admitted after 0'))).toBe(true);
  });

  it('over the limit requests wait; a full queue sheds; a freed slot goes to the oldest waiting one', () => {
    const clock = createTestClock();
    const a = new Admission({ maxConcurrent: 1, maxQueue: 1, queueTimeoutMs: 100 }, clock);
    const t = tickets(clock);
    a.arrive(t.make('a'), clock.now());
    a.arrive(t.make('b'), clock.now());
    a.arrive(t.make('c'), clock.now());
    clock.advance(30);
    a.release();
    expect(t.log).toEqual(['a admitted after 0', 'c shed queue_full', 'b admitted after 30']);
    expect(a.inFlight).toBe(1);
    expect(a.queued).toBe(0);
  });

  it('a request that waits longer than queueTimeoutMs is shed; one whose deadline passes first expires', () => {
    const clock = createTestClock();
    const a = new Admission({ maxConcurrent: 1, maxQueue: 5, queueTimeoutMs: 100 }, clock);
    const t = tickets(clock);
    a.arrive(t.make('a'), clock.now());
    a.arrive(t.make('b'), clock.now());
    a.arrive(t.make('c', { deadlineMs: 40 }), clock.now());
    clock.advance(40);
    expect(t.log.at(-1)).toBe('c expired');
    clock.advance(60);
    expect(t.log.at(-1)).toBe('b shed queue_timeout');
    expect(a.queued).toBe(0);
    a.release();
    expect(a.inFlight).toBe(0);
  });

  it("a queued request whose deadline timer fires a little early (as Node's may) still expires, not shed", () => {
    const clock = createTestClock();
    // Node's timers may fire up to 1 ms before performance.now() reaches their due time.
    const early = {
      now: () => clock.now(),
      wallNow: () => clock.wallNow(),
      setTimer: (fn: () => void, ms: number, at?: number) => clock.setTimer(fn, Math.max(0, ms - 0.6), at),
    };
    const a = new Admission({ maxConcurrent: 1, maxQueue: 5, queueTimeoutMs: 60 }, early);
    const t = tickets(clock);
    a.arrive(t.make('a'), clock.now());
    a.arrive(t.make('b', { deadlineMs: 20 }), clock.now());
    a.arrive(t.make('c'), clock.now());
    clock.advance(20);
    expect(t.log.at(-1)).toBe('b expired');
    clock.advance(40);
    expect(t.log.at(-1)).toBe('c shed queue_timeout');
    expect(a.queued).toBe(0);
  });

  it('under overload retries go after first attempts, and a first attempt evicts a queued retry', () => {
    const clock = createTestClock();
    const a = new Admission({ maxConcurrent: 1, maxQueue: 2, queueTimeoutMs: 1000 }, clock);
    const t = tickets(clock);
    a.arrive(t.make('first-0'), clock.now());
    a.arrive(t.make('retry-1', { retry: true }), clock.now());
    a.arrive(t.make('first-1'), clock.now());
    // full: a retry is shed, a first attempt takes the newest retry's place
    a.arrive(t.make('retry-2', { retry: true }), clock.now());
    a.arrive(t.make('first-2'), clock.now());
    expect(t.log).toEqual(['first-0 admitted after 0', 'retry-2 shed queue_full', 'retry-1 shed evicted']);
    a.release();
    a.release();
    expect(t.log.slice(3)).toEqual(['first-1 admitted after 0', 'first-2 admitted after 0']);
  });

  it('a queued retry is served after every queued first attempt', () => {
    const clock = createTestClock();
    const a = new Admission({ maxConcurrent: 1, maxQueue: 10, queueTimeoutMs: 1000 }, clock);
    const t = tickets(clock);
    a.arrive(t.make('x'), clock.now());
    a.arrive(t.make('r', { retry: true }), clock.now());
    a.arrive(t.make('f1'), clock.now());
    a.arrive(t.make('f2'), clock.now());
    for (let i = 0; i < 3; i++) a.release();
    expect(t.log.slice(1)).toEqual(['f1 admitted after 0', 'f2 admitted after 0', 'r admitted after 0']);
  });

  it('a caller that goes away while queued is withdrawn (no answer, its timer cancelled)', () => {
    const clock = createTestClock();
    const a = new Admission({ maxConcurrent: 1, maxQueue: 5, queueTimeoutMs: 100 }, clock);
    const t = tickets(clock);
    a.arrive(t.make('a'), clock.now());
    const withdraw = a.arrive(t.make('b'), clock.now());
    expect(clock.pending()).toBe(1);
    withdraw();
    expect(a.queued).toBe(0);
    expect(clock.pending()).toBe(0);
    a.release();
    expect(t.log).toEqual(['a admitted after 0']);
  });

  it('a handler that throws when admitted: its error comes out, the counts stay right, the next one is served', () => {
    const clock = createTestClock();
    const a = new Admission({ maxConcurrent: 1, maxQueue: 5, queueTimeoutMs: 100 }, clock);
    const t = tickets(clock);
    a.arrive(t.make('a'), clock.now());
    a.arrive(
      {
        ...t.make('bad'),
        admit: () => {
          throw new Error('handler');
        },
      },
      clock.now(),
    );
    a.arrive(t.make('c'), clock.now());
    expect(() => a.release()).toThrow('handler');
    expect([a.inFlight, a.queued]).toEqual([1, 1]); // 'bad' holds its slot until its response closes
    a.release();
    expect(t.log).toEqual(['a admitted after 0', 'c admitted after 0']);
  });

  it('a request whose deadline passed while it waited expires when its turn comes', () => {
    const clock = createTestClock();
    const a = new Admission({ maxConcurrent: 1, maxQueue: 5, queueTimeoutMs: 100 }, clock);
    const t = tickets(clock);
    a.arrive(t.make('a'), clock.now());
    a.arrive(t.make('b', { deadlineMs: 50 }), clock.now());
    a.arrive(t.make('c'), clock.now());
    clock.now = (
      (n) => () =>
        n
    )(clock.now() + 60); // time moved, timers not yet fired
    a.release();
    expect(t.log.slice(1)).toEqual(['b expired', 'c admitted after 60']);
  });
});
