// A dependency that loses capacity, in virtual time: open-loop arrivals (Poisson), a
// client that keeps calls in flight within a limit (an adaptive algorithm, a fixed cap,
// or none) and queues the rest within their deadline, and a server with `capacity`
// workers and a FIFO queue that serves abandoned requests too (it cannot know). For the
// limit algorithms' tests; the benchmark runs the same story on real sockets.
import type { LimitAlgorithm } from '../../src/core/concurrency.js';
import type { Random } from '../../src/core/types.js';

export interface CapacityScenario {
  readonly algorithm?: LimitAlgorithm | null;
  readonly fixed?: number | null;
  readonly random: Random;
  /** Arrivals per second. */
  readonly rate: number;
  /** Service time, ms (each request: serviceMs × U[0.8, 1.2]). */
  readonly serviceMs: number;
  readonly capacity: number;
  /** Capacity while degraded, from `dropAt` for `dropFor` ms. */
  readonly degraded: number;
  readonly dropAt: number;
  readonly dropFor: number;
  readonly totalMs: number;
  /** Each request's deadline, ms; a queued one not sent with `minAttemptMs` left fails. */
  readonly deadlineMs: number;
  readonly minAttemptMs: number;
}

export interface CapacityResult {
  readonly ok: number;
  readonly failed: number;
  /** [time, limit, in flight, server queue] every 50 ms. */
  readonly trace: [number, number, number, number][];
  /** [arrival at the server, time it waited in the server's queue]. */
  readonly serverWaits: [number, number][];
}

export function runCapacity(s: CapacityScenario): CapacityResult {
  const alg = s.algorithm ?? null;
  const limit = (): number => (alg !== null ? alg.limit : s.fixed ?? Infinity);
  const events: { t: number; seq: number; f: () => void }[] = [];
  let seq = 0;
  const push = (t: number, f: () => void): void => {
    const e = { t, seq: seq++, f };
    let i = events.length;
    events.push(e);
    while (i > 0 && (events[i - 1]!.t > t || (events[i - 1]!.t === t && events[i - 1]!.seq > e.seq))) {
      events[i] = events[i - 1]!;
      i--;
    }
    events[i] = e;
  };
  let now = 0;
  let inFlight = 0;
  let busy = 0;
  let ok = 0;
  let failed = 0;
  const clientQueue: { t0: number; done: boolean; queued?: boolean }[] = [];
  const serverQueue: { arrived: number; abandoned: boolean; answer: () => void }[] = [];
  const serverWaits: [number, number][] = [];
  const trace: [number, number, number, number][] = [];
  const cap = (): number => (now >= s.dropAt && now < s.dropAt + s.dropFor ? s.degraded : s.capacity);

  const serve = (): void => {
    while (busy < cap() && serverQueue.length > 0) {
      const r = serverQueue.shift()!;
      busy++;
      serverWaits.push([r.arrived, now - r.arrived]);
      push(now + s.serviceMs * (0.8 + 0.4 * s.random()), () => {
        busy--;
        if (!r.abandoned) r.answer();
        serve();
      });
    }
  };
  const send = (req: { t0: number; done: boolean }): void => {
    inFlight++;
    const startedAt = now;
    const generation = alg?.generation ?? 0;
    const end = (): void => {
      req.done = true;
      alg?.sample({ startedAt, now, inFlight, generation, dropped: false });
      inFlight--;
      drain();
    };
    const r = { arrived: now, abandoned: false, answer: () => { if (!req.done) { ok++; end(); } } };
    push(req.t0 + s.deadlineMs, () => {
      if (req.done) return;
      r.abandoned = true;
      failed++;
      end();
    });
    serverQueue.push(r);
    serve();
  };
  const drain = (): void => {
    while (clientQueue.length > 0 && inFlight < limit()) {
      const q = clientQueue.shift()!;
      q.queued = false;
      if (q.done) continue;
      if (q.t0 + s.deadlineMs - now < s.minAttemptMs) {
        q.done = true;
        failed++;
        continue;
      }
      send(q);
    }
  };
  const arrive = (): void => {
    const req = { t0: now, done: false, queued: false };
    if (inFlight < limit()) send(req);
    else {
      req.queued = true;
      clientQueue.push(req);
      push(now + s.deadlineMs, () => {
        if (req.done || !req.queued) return;
        req.done = true;
        failed++;
      });
    }
    const gap = (-Math.log(1 - s.random()) * 1000) / s.rate;
    if (now + gap < s.totalMs) push(now + gap, arrive);
  };
  push(0, arrive);
  let nextTrace = 0;
  while (events.length > 0) {
    const e = events.shift()!;
    now = e.t;
    e.f();
    while (now >= nextTrace) {
      trace.push([nextTrace, limit(), inFlight, serverQueue.length]);
      nextTrace += 50;
    }
  }
  return { ok, failed, trace, serverWaits };
}
