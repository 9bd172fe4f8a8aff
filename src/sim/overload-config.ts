// The overload scenario: the dependency model (DependencyModel, Fault), the configuration
// and its defaults (the calibration set-up), and the shape of the result (OverloadResult,
// OverloadRow, WindowStats). The simulation that runs it is in overload.ts.
import type { Decision } from '../core/types.js';
import { PEER_POLICIES, RELENT_POLICIES, type SimPolicy } from './policies.js';

/**
 * The dependency a fleet calls: a loopback HTTP server limited to C requests/s.
 *
 * The model, chosen to reproduce what the real libraries did against a real loopback
 * server (docs/simulator.md, "The dependency model"):
 * - Every request first costs the server a fixed `overheadMs` on one event loop
 *   (accept, parse, answer), served first come, first served. This is what bounds a
 *   client that retries with no delay at all: at ~16 000 requests/s the loop is full
 *   and each call waits its turn.
 * - Then a token bucket admits C(t) requests/s (bucket size `burst`). A request with a
 *   token is served in `serviceMs`; one without is answered `rejectStatus` (503) at
 *   once, unless `queueLimit` > 0, in which case it may wait in line for a future token
 *   while fewer than `queueLimit` requests are waiting.
 * - Each direction of the network takes `networkMs`.
 */
export interface DependencyModel {
  /** Requests per second the dependency serves (tokens per second). */
  readonly capacityPerSec: number;
  /** Token bucket size: how many requests above the rate a quiet moment lets through. */
  readonly burst: number;
  /** Requests that may wait for a token; 0 rejects at once (the calibrated model). */
  readonly queueLimit: number;
  /** How long an admitted request takes to serve (ms). */
  readonly serviceMs: number;
  /** How long a rejection takes beyond the front-end cost (ms). */
  readonly rejectMs: number;
  /** Front-end cost of every request on the server's one event loop (ms). */
  readonly overheadMs: number;
  /** One-way network delay (ms). */
  readonly networkMs: number;
  /** The status of a rejection. */
  readonly rejectStatus: number;
  /** A Retry-After (seconds) sent with rejections, or null for none. */
  readonly retryAfterSec: number | null;
}

/** A window in which the dependency's capacity drops. */
export interface Fault {
  readonly startMs: number;
  readonly endMs: number;
  readonly capacityPerSec: number;
}

export interface OverloadConfig {
  readonly seed: number | string;
  /** Runs per policy, pooled (each run draws its own arrivals; all policies see the same ones). */
  readonly runs: number;
  /** Operations arrive over [0, durationMs); the run ends when the last one has ended. */
  readonly durationMs: number;
  /** Operations started per second, over the whole fleet. */
  readonly arrivalsPerSec: number;
  /** `poisson` (exponential gaps) or `uniform` (evenly spaced). */
  readonly arrival: 'poisson' | 'uniform';
  /** Client processes sharing the arrivals round-robin; each keeps its own retry budget. */
  readonly clients: number;
  /** One deadline per operation (the caller's), ms. */
  readonly deadlineMs: number;
  readonly method: string;
  readonly dependency: DependencyModel;
  readonly faults: readonly Fault[];
  /** Length of the window after the (first) fault that is reported separately (ms). */
  readonly afterMs: number;
  readonly policies: readonly SimPolicy[];
}

export const DEPENDENCY_DEFAULTS: DependencyModel = Object.freeze({
  capacityPerSec: 400,
  burst: 20,
  queueLimit: 0,
  serviceMs: 2,
  rejectMs: 0,
  overheadMs: 0.06,
  networkMs: 0.1,
  rejectStatus: 503,
  retryAfterSec: null,
});

/** The calibration set-up (the one bench/overload.mjs measures the real libraries in): 400/s, 320 operations/s, 80/s for 10 s, 503, 2 s deadline. */
export const OVERLOAD_DEFAULTS: OverloadConfig = Object.freeze({
  seed: 1,
  runs: 3,
  durationMs: 30_000,
  arrivalsPerSec: 320,
  arrival: 'poisson' as const,
  clients: 10,
  deadlineMs: 2000,
  method: 'GET',
  dependency: DEPENDENCY_DEFAULTS,
  faults: Object.freeze([Object.freeze({ startMs: 10_000, endMs: 20_000, capacityPerSec: 80 })]),
  afterMs: 5000,
  policies: Object.freeze([...PEER_POLICIES, ...RELENT_POLICIES]),
});

/** How the operations of one window fared. */
export interface WindowStats {
  /** Operations started in the window. */
  readonly operations: number;
  /** Requests the dependency received in the window ÷ operations started in it. */
  readonly amplification: number;
  /** Share of the operations started in the window that succeeded. */
  readonly successShare: number;
  /** Successful operations ending in the window, per second. */
  readonly goodput: number;
  /** Operation latency (start to final answer, any outcome) of operations started in the window, ms. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** Terminal reasons of the operations started in the window, as shares. */
  readonly reasons: Readonly<Partial<Record<Decision, number>>>;
}

export interface OverloadRow {
  readonly policy: string;
  readonly summary: string;
  /** The fault window. */
  readonly fault: WindowStats;
  /** Before the fault (from 2 s in, after the start-up). */
  readonly before: WindowStats;
  /** The `afterMs` after the fault. */
  readonly after: WindowStats;
  /** Every operation from 2 s in to the end of the arrivals. */
  readonly overall: WindowStats;
  /** Requests in the busiest second after the fault (rolling, 100 ms steps), ÷ operations arriving per second. */
  readonly peakLoadAfter: number;
  /** From the fault's end to the end of the last 100 ms in which > 1 % of requests were rejected (ms). */
  readonly recoveryMs: number;
  /**
   * Requests in the busiest second from two deadlines after the fault to the end of the
   * arrivals, ÷ operations arriving per second. By then every operation started in the
   * fault has ended, and so has every one its retries delayed in the recovery, so load
   * above ~1.1x is load that feeds itself: a retry storm.
   */
  readonly settledLoad: number | null;
  /** Requests sent in all runs (each a decide() call). */
  readonly attempts: number;
  /** Requests reaching the dependency in each second of the run (mean over runs): the load over time. */
  readonly loadPerSecond: readonly number[];
  /** The figures measured with the real library, when there are any and the scenario is the calibration set-up. */
  readonly measured: {
    readonly amplification: number;
    readonly amplificationMax?: number;
    readonly successShare: number;
    readonly successShareMax?: number;
  } | null;
  /** Simulated ÷ measured fault-window amplification (against the range's nearest end). */
  readonly calibration: number | null;
}

export interface OverloadResult {
  readonly rows: OverloadRow[];
  readonly attempts: number;
  /** The dependency's capacity (requests/s) in each second of the run, faults included. */
  readonly capacityPerSecond: readonly number[];
  /** Operations started per second (the offered load, before any retry). */
  readonly arrivalsPerSec: number;
  /** The fault windows, ms. */
  readonly faults: readonly { readonly startMs: number; readonly endMs: number }[];
}
