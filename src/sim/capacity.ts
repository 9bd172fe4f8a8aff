import { createLimitAlgorithm, normalizeLimitSpec, type LimitAlgorithm, type LimitSpec } from '../core/concurrency.js';
import { createSeededRandom } from '../core/random.js';
import type { ProgressFn } from './common.js';
import { round2, sortedQuantile, streamSeed, Timeline } from './engine.js';

/**
 * A dependency that loses capacity, in virtual time: operations arrive open-loop
 * (Poisson) at `arrivalsPerSec`; a client keeps its calls in flight within a limit — the
 * core's adaptive algorithms (`gradient`, `aimd`), a fixed cap (a bulkhead), or none —
 * and queues the rest within their deadline (a queued call with less than `minAttemptMs`
 * left is not sent); the dependency has `capacity` workers, each taking `serviceMs` ×
 * U[0.8, 1.2], and one FIFO queue, and from `dropAtMs` for `dropForMs` only `degraded`
 * workers. A call not answered by its deadline fails and its connection closes: the
 * dependency drops it from its queue, or finishes it if it was already at work. What the adaptive limit is for, next to a fixed bulkhead and no
 * limit: the real-socket version is `npm run bench -- slow`.
 */
export interface CapacityConfig {
  readonly seed: number | string;
  readonly arrivalsPerSec: number;
  readonly serviceMs: number;
  readonly capacity: number;
  readonly degraded: number;
  readonly dropAtMs: number;
  readonly dropForMs: number;
  /** Operations arrive over [0, durationMs). */
  readonly durationMs: number;
  readonly deadlineMs: number;
  readonly minAttemptMs: number;
  readonly contenders: readonly CapacityContender[];
}

/** A limit: `{ name, limit: { kind: "gradient" | "aimd", … } }`, `{ name, fixed: N }`, or `{ name }` for none. */
export interface CapacityContender {
  readonly name: string;
  readonly limit?: LimitSpec;
  readonly fixed?: number;
}

export const CAPACITY_DEFAULTS: Readonly<CapacityConfig> = Object.freeze({
  seed: 1,
  arrivalsPerSec: 400,
  serviceMs: 50,
  capacity: 50,
  degraded: 10,
  dropAtMs: 10_000,
  dropForMs: 20_000,
  durationMs: 40_000,
  deadlineMs: 1000,
  minAttemptMs: 100,
  contenders: Object.freeze([
    { name: 'relent gradient', limit: { kind: 'gradient', initial: 20, max: 200 } },
    { name: 'relent aimd (slowMs 100)', limit: { kind: 'aimd', initial: 20, max: 200, slowMs: 100 } },
    { name: 'fixed 10 (degraded capacity)', fixed: 10 },
    { name: 'fixed 20 (healthy need)', fixed: 20 },
    { name: 'fixed 50 (healthy capacity)', fixed: 50 },
    { name: 'no limit' },
  ] as CapacityContender[]),
});

export interface CapacityRow {
  readonly name: string;
  /** From the drop until calls in flight stay within 1.5x the new capacity to its end, ms; null: never. */
  readonly convergedMs: number | null;
  /** Calls in flight from 2 s after the drop to its end. */
  readonly inFlightP50: number;
  readonly inFlightP99: number;
  /** The dependency's latency (its queue and its work) at healthy capacity, and from 2 s after the drop, p50, ms. */
  readonly healthyLatencyP50: number;
  readonly dropLatencyP50: number;
  readonly latencyRatio: number;
  readonly ok: number;
  readonly failed: number;
  /** Failures of operations that arrived during the drop. */
  readonly failedInDrop: number;
  /** The limit (or the cap; null for none) and calls in flight, one sample per 250 ms. */
  readonly limitTrace: readonly (number | null)[];
  readonly inFlightTrace: readonly number[];
}

export interface CapacityResult {
  readonly config: CapacityConfig;
  readonly rows: readonly CapacityRow[];
}

function runOne(c: CapacityConfig, contender: CapacityContender): CapacityRow {
  const alg: LimitAlgorithm | null = contender.limit ? createLimitAlgorithm(contender.limit, 'contenders[].limit') : null;
  const fixed = contender.fixed ?? null;
  const limit = (): number => (alg !== null ? alg.limit : (fixed ?? Infinity));
  // The same arrivals and service times for every contender.
  const arrivals = createSeededRandom(streamSeed(c.seed, 'capacity', 'arrivals'));
  const service = createSeededRandom(streamSeed(c.seed, 'capacity', 'service'));
  const q = new Timeline();
  const dropEnd = c.dropAtMs + c.dropForMs;
  let now = 0;
  let inFlight = 0;
  let busy = 0;
  let ok = 0;
  let failed = 0;
  let failedInDrop = 0;
  const inDrop = (t: number): boolean => t >= c.dropAtMs && t < dropEnd;
  const fail = (t0: number): void => {
    failed++;
    if (inDrop(t0)) failedInDrop++;
  };
  interface Op {
    t0: number;
    done: boolean;
    queued: boolean;
  }
  const clientQueue: Op[] = [];
  let head = 0;
  const serverQueue: { arrived: number; answer: () => void; gone: () => boolean }[] = [];
  let serverHead = 0;
  const healthy: number[] = [];
  const degraded: number[] = [];
  const samples: [number, number][] = [];
  const limitTrace: (number | null)[] = [];
  const inFlightTrace: number[] = [];

  const serve = (): void => {
    const cap = inDrop(now) ? c.degraded : c.capacity;
    while (busy < cap && serverHead < serverQueue.length) {
      const r = serverQueue[serverHead++]!;
      if (r.gone()) continue; // its caller gave up (the connection closed) before it was taken
      busy++;
      q.push(now + c.serviceMs * (0.8 + 0.4 * service()), () => {
        busy--;
        const lat = now - r.arrived;
        if (r.arrived < c.dropAtMs) healthy.push(lat);
        else if (r.arrived >= c.dropAtMs + 2000 && r.arrived < dropEnd) degraded.push(lat);
        r.answer();
        serve();
      });
    }
    if (serverHead > 4096 && serverHead * 2 > serverQueue.length) {
      serverQueue.splice(0, serverHead);
      serverHead = 0;
    }
  };
  const send = (op: Op): void => {
    inFlight++;
    const startedAt = now;
    const generation = alg?.generation ?? 0;
    const end = (): void => {
      alg?.sample({ startedAt, now, inFlight, generation, dropped: false });
      inFlight--;
      drain();
    };
    serverQueue.push({
      arrived: now,
      gone: () => op.done,
      answer: () => {
        if (op.done) return;
        op.done = true;
        ok++;
        end();
      },
    });
    q.push(op.t0 + c.deadlineMs, () => {
      if (op.done) return;
      op.done = true;
      fail(op.t0);
      end();
    });
    serve();
  };
  const drain = (): void => {
    while (head < clientQueue.length && inFlight < limit()) {
      const op = clientQueue[head++]!;
      if (op.done) continue;
      op.queued = false;
      if (op.t0 + c.deadlineMs - now < c.minAttemptMs) {
        op.done = true;
        fail(op.t0);
        continue;
      }
      send(op);
    }
    if (head > 4096 && head * 2 > clientQueue.length) {
      clientQueue.splice(0, head);
      head = 0;
    }
  };
  const arrive = (): void => {
    const op: Op = { t0: now, done: false, queued: false };
    if (head >= clientQueue.length && inFlight < limit()) send(op);
    else {
      op.queued = true;
      clientQueue.push(op);
      q.push(now + c.deadlineMs, () => {
        if (op.done || !op.queued) return;
        op.done = true;
        fail(op.t0);
      });
    }
    const gap = (-Math.log(1 - arrivals()) * 1000) / c.arrivalsPerSec;
    if (now + gap < c.durationMs) q.push(now + gap, arrive);
  };
  // Capacity coming back: the dependency takes from its queue again.
  q.push(dropEnd, serve);
  q.push(0, arrive);
  let nextSample = 0;
  while (q.size > 0) {
    const { t, f: fn } = q.pop();
    while (nextSample <= t) {
      samples.push([nextSample, inFlight]);
      if (nextSample % 250 === 0) {
        limitTrace.push(alg !== null ? alg.limit : fixed);
        inFlightTrace.push(inFlight);
      }
      nextSample += 50;
    }
    now = t;
    fn();
  }
  return capacityRow(c, contender.name, { samples, healthy, degraded, ok, failed, failedInDrop, limitTrace, inFlightTrace });
}

/** What one contender's run left behind, for its row. */
interface CapacityRun {
  /** [t, calls in flight], one per 50 ms. */
  readonly samples: readonly [number, number][];
  /** The dependency's latencies at healthy capacity and from 2 s after the drop (sorted here). */
  readonly healthy: number[];
  readonly degraded: number[];
  readonly ok: number;
  readonly failed: number;
  readonly failedInDrop: number;
  readonly limitTrace: readonly (number | null)[];
  readonly inFlightTrace: readonly number[];
}

/** A contender's row: when calls in flight converged after the drop, their spread, and the latency change. */
function capacityRow(c: CapacityConfig, name: string, run: CapacityRun): CapacityRow {
  const { samples, healthy, degraded } = run;
  const dropEnd = c.dropAtMs + c.dropForMs;
  const inDrop = (t: number): boolean => t >= c.dropAtMs && t < dropEnd;
  let converged: number | null = null;
  for (let i = samples.length - 1; i >= 0; i--) {
    const [t, n] = samples[i]!;
    if (!inDrop(t)) continue;
    if (n > 1.5 * c.degraded) break;
    converged = t - c.dropAtMs;
  }
  const during = samples
    .filter(([t]) => t >= c.dropAtMs + 2000 && t < dropEnd)
    .map(([, n]) => n)
    .sort((a, b) => a - b);
  healthy.sort((a, b) => a - b);
  degraded.sort((a, b) => a - b);
  const h = sortedQuantile(healthy, 0.5);
  const d = sortedQuantile(degraded, 0.5);
  return {
    name,
    convergedMs: converged,
    inFlightP50: sortedQuantile(during, 0.5),
    inFlightP99: sortedQuantile(during, 0.99),
    healthyLatencyP50: round2(h),
    dropLatencyP50: round2(d),
    latencyRatio: h > 0 ? round2(d / h) : 0,
    ok: run.ok,
    failed: run.failed,
    failedInDrop: run.failedInDrop,
    limitTrace: run.limitTrace,
    inFlightTrace: run.inFlightTrace,
  };
}

/** Runs every contender on the same arrivals and service times. */
export function runCapacity(config: Partial<CapacityConfig> = {}, onProgress?: ProgressFn): CapacityResult {
  const c: CapacityConfig = { ...CAPACITY_DEFAULTS, ...config };
  for (const k of c.contenders) if (k.limit) normalizeLimitSpec(k.limit);
  const rows: CapacityRow[] = [];
  c.contenders.forEach((k, i) => {
    onProgress?.(i, c.contenders.length, k.name);
    rows.push(runOne(c, k));
  });
  onProgress?.(c.contenders.length, c.contenders.length, 'done');
  return { config: c, rows };
}
