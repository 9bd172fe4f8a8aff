import type { RetryBudget } from '../core/budget.js';
import { createOperation, type Command, type Operation } from '../core/operation.js';
import type { Decision } from '../core/types.js';
import { injectedObservation } from '../core/chaos.js';
import {
  budgetFor,
  quantile,
  resolveSimPolicy,
  round,
  statusObservation,
  TIMED_OUT,
  type ProgressFn,
  type ResolvedSimPolicy,
  type SimObservation,
} from './common.js';
import { EventQueue, Sampler, streamSeed } from './engine.js';
import { MEASURED_OVERLOAD } from './policies.js';
import {
  DEPENDENCY_DEFAULTS,
  OVERLOAD_DEFAULTS,
  type DependencyModel,
  type Fault,
  type OverloadConfig,
  type OverloadResult,
  type OverloadRow,
  type WindowStats,
} from './overload-config.js';

export { DEPENDENCY_DEFAULTS, OVERLOAD_DEFAULTS } from './overload-config.js';
export type { DependencyModel, Fault, OverloadConfig, OverloadResult, OverloadRow, WindowStats } from './overload-config.js';

const ARRIVAL = 0;
const ATTEMPT = 1;
const ANSWER = 2;
/** A call the policy's chaos delayed (an injected latency) goes now. */
const SEND = 3;
const BIN_MS = 100;
const TERMINALS: readonly Decision[] = [
  'return',
  'max_attempts',
  'deadline_exceeded',
  'not_retryable',
  'budget_exhausted',
  'check_state',
  'circuit_open',
  'cancelled',
  'defer',
];
const TERMINAL_INDEX = Object.fromEntries(TERMINALS.map((d, i) => [d, i])) as Record<Decision, number>;

/** Piecewise-constant capacity: the base rate, overridden inside each fault. */
class Capacity {
  private readonly bounds: number[];
  private readonly rates: number[];

  constructor(base: number, faults: readonly Fault[]) {
    // Segment i is [bounds[i], bounds[i+1]) with rate rates[i]; faults may not overlap.
    const sorted = [...faults].sort((a, b) => a.startMs - b.startMs);
    this.bounds = [0];
    this.rates = [base];
    for (const f of sorted) {
      this.bounds.push(f.startMs, f.endMs);
      this.rates.push(f.capacityPerSec, base);
    }
  }

  /** Tokens accrued over [a, b). */
  integrate(a: number, b: number): number {
    const bounds = this.bounds;
    const rates = this.rates;
    let sum = 0;
    for (let i = 0; i < bounds.length; i++) {
      const lo = Math.max(a, bounds[i]!);
      const hi = Math.min(b, i + 1 < bounds.length ? bounds[i + 1]! : Infinity);
      if (hi > lo) sum += ((hi - lo) * rates[i]!) / 1000;
    }
    return sum;
  }

  /** The time from `t` until `amount` tokens have accrued (Infinity if never). */
  timeToAccrue(t: number, amount: number): number {
    const bounds = this.bounds;
    const rates = this.rates;
    let need = amount;
    for (let i = 0; i < bounds.length; i++) {
      const end = i + 1 < bounds.length ? bounds[i + 1]! : Infinity;
      if (end <= t) continue;
      const lo = Math.max(t, bounds[i]!);
      const rate = rates[i]! / 1000;
      if (rate > 0) {
        const span = end - lo;
        if (need <= span * rate) return lo + need / rate - t;
        need -= span * rate;
      }
    }
    return Infinity;
  }
}

/**
 * Whether a configuration is the set-up the peers were measured in (bench/overload.mjs): only then
 * are the measured figures shown beside the simulated ones. Runs, seed, the length of
 * the run and the policies may differ.
 */
function isCalibrationSetup(c: OverloadConfig): boolean {
  const d = OVERLOAD_DEFAULTS;
  const f = c.faults[0];
  const g = d.faults[0]!;
  const deps = Object.keys(d.dependency) as (keyof DependencyModel)[];
  return (
    c.arrivalsPerSec === d.arrivalsPerSec &&
    c.arrival === d.arrival &&
    c.clients === d.clients &&
    c.deadlineMs === d.deadlineMs &&
    c.method === d.method &&
    c.faults.length === 1 &&
    f !== undefined &&
    f.endMs - f.startMs === g.endMs - g.startMs &&
    f.capacityPerSec === g.capacityPerSec &&
    deps.every((k) => c.dependency[k] === d.dependency[k])
  );
}

/** Runs every policy of the scenario; rows in the policies' order. */
export function runOverload(config: Partial<OverloadConfig> = {}, onProgress?: ProgressFn): OverloadResult {
  const c: OverloadConfig = { ...OVERLOAD_DEFAULTS, ...config, dependency: { ...DEPENDENCY_DEFAULTS, ...config.dependency } };
  const policies = c.policies.map((p, i) => resolveSimPolicy(p, `policies[${i}]`));
  const rows: OverloadRow[] = [];
  let attempts = 0;
  const total = policies.length * c.runs;
  let done = 0;
  const queue = new EventQueue(4096);
  for (const p of policies) {
    const acc = new Accumulator(c);
    for (let run = 0; run < c.runs; run++) {
      overloadRun(queue, p, c, run, acc);
      done++;
      onProgress?.(done, total, `overload ${p.name}, run ${run + 1}`);
    }
    const row = acc.row(p);
    attempts += row.attempts;
    rows.push(row);
  }
  const capacity = new Capacity(c.dependency.capacityPerSec, c.faults);
  const seconds = Math.ceil(c.durationMs / 1000);
  const capacityPerSecond = Array.from({ length: seconds }, (_, i) => round(capacity.integrate(i * 1000, (i + 1) * 1000), 1));
  return { rows, attempts, capacityPerSecond, arrivalsPerSec: c.arrivalsPerSec, faults: c.faults.map((f) => ({ startMs: f.startMs, endMs: f.endMs })) };
}

/** Per-window tallies, pooled over runs. */
class WindowTally {
  operations = 0;
  requests = 0;
  successes = 0;
  successEnds = 0;
  latencies = new Float64Array(1024);
  n = 0;
  reasons = new Float64Array(TERMINALS.length);

  constructor(
    readonly startMs: number,
    readonly endMs: number,
  ) {}

  inside(t: number): boolean {
    return t >= this.startMs && t < this.endMs;
  }

  /** An operation started at t0 ended at `now`. */
  end(t0: number, now: number, success: boolean, reason: number): void {
    if (t0 >= this.startMs && t0 < this.endMs) {
      if (success) this.successes++;
      this.reasons[reason] = this.reasons[reason]! + 1;
      this.addLatency(now - t0);
    }
    if (success && now >= this.startMs && now < this.endMs) this.successEnds++;
  }

  addLatency(ms: number): void {
    if (this.n === this.latencies.length) {
      const next = new Float64Array(this.latencies.length * 2);
      next.set(this.latencies);
      this.latencies = next;
    }
    this.latencies[this.n++] = ms;
  }

  stats(runs: number): WindowStats {
    const reasons: Partial<Record<Decision, number>> = {};
    TERMINALS.forEach((r, i) => {
      const v = this.reasons[i]!;
      if (v > 0) reasons[r] = round(v / Math.max(1, this.operations), 4);
    });
    const seconds = ((this.endMs - this.startMs) / 1000) * runs;
    return {
      operations: round(this.operations / runs, 1),
      amplification: round(this.requests / Math.max(1, this.operations), 3),
      successShare: round(this.successes / Math.max(1, this.operations), 4),
      goodput: round(this.successEnds / seconds, 1),
      p50Ms: round(quantile(this.latencies, this.n, 0.5), 1),
      p99Ms: round(quantile(this.latencies, this.n, 0.99), 1),
      reasons,
    };
  }
}

class Accumulator {
  readonly fault: WindowTally;
  readonly before: WindowTally;
  readonly after: WindowTally;
  readonly overall: WindowTally;
  attempts = 0;
  peakAfter = 0;
  settled = 0;
  /** Runs whose arrivals lasted past two deadlines after the fault (else nothing settled to measure). */
  settledRuns = 0;
  recovery = 0;
  runs = 0;
  /** Requests per second of the run, summed over runs. */
  readonly load: Float64Array;

  /** An operation started at t0 ended at `now` with `decision`. */
  end(t0: number, now: number, decision: Decision): void {
    const success = decision === 'return';
    const r = TERMINAL_INDEX[decision];
    this.before.end(t0, now, success, r);
    this.fault.end(t0, now, success, r);
    this.after.end(t0, now, success, r);
    this.overall.end(t0, now, success, r);
  }

  constructor(readonly c: OverloadConfig) {
    const f = c.faults[0];
    const fs = f ? f.startMs : c.durationMs / 3;
    const fe = f ? f.endMs : (2 * c.durationMs) / 3;
    this.before = new WindowTally(Math.min(2000, fs / 2), fs);
    this.fault = new WindowTally(fs, fe);
    this.after = new WindowTally(fe, fe + c.afterMs);
    this.overall = new WindowTally(this.before.startMs, c.durationMs);
    this.load = new Float64Array(Math.ceil(c.durationMs / 1000));
  }

  row(p: ResolvedSimPolicy): OverloadRow {
    const runs = Math.max(1, this.runs);
    const measured = isCalibrationSetup(this.c) ? (MEASURED_OVERLOAD[p.name] ?? null) : null;
    const fault = this.fault.stats(runs);
    let calibration: number | null = null;
    if (measured) {
      const hi = measured.amplificationMax ?? measured.amplification;
      const target = fault.amplification > hi ? hi : fault.amplification < measured.amplification ? measured.amplification : fault.amplification;
      calibration = round(fault.amplification / target, 3);
    }
    return {
      policy: p.name,
      summary: p.source.summary ?? '',
      fault,
      before: this.before.stats(runs),
      after: this.after.stats(runs),
      overall: this.overall.stats(runs),
      peakLoadAfter: round(this.peakAfter / runs, 2),
      recoveryMs: round(this.recovery / runs, 0),
      settledLoad: this.settledRuns > 0 ? round(this.settled / this.settledRuns, 2) : null,
      attempts: this.attempts,
      loadPerSecond: Array.from(this.load, (v) => round(v / runs, 1)),
      measured,
      calibration,
    };
  }
}

/**
 * The dependency's state during one run (see DependencyModel). `request()` must be
 * called in non-decreasing time order, which the event loop guarantees: it computes,
 * at send time, when the one front-end loop handles the request, whether the bucket
 * admits it, and when the answer is back at the client.
 */
class Dependency {
  private frontFree = 0;
  private tokens: number;
  private refillAt = 0;
  /** The last request's answer: its status and when the client has it. */
  status = 0;
  answerAt = 0;
  /** When the last request reached the dependency. */
  arriveAt = 0;
  readonly binRequests: Float64Array;
  readonly binRejected: Float64Array;

  constructor(
    private readonly m: DependencyModel,
    private readonly capacity: Capacity,
    bins: number,
  ) {
    this.tokens = m.burst;
    this.binRequests = new Float64Array(bins);
    this.binRejected = new Float64Array(bins);
  }

  request(now: number): void {
    const m = this.m;
    const arrive = now + m.networkMs;
    this.arriveAt = arrive;
    // Front end: one event loop, first come first served.
    const start = arrive > this.frontFree ? arrive : this.frontFree;
    const at = start + m.overheadMs;
    this.frontFree = at;
    // Admission: the token bucket at the moment the loop handles the request.
    let tokens = this.tokens;
    if (at > this.refillAt) {
      tokens += this.capacity.integrate(this.refillAt, at);
      if (tokens > m.burst) tokens = m.burst;
      this.refillAt = at;
    }
    const left = tokens - 1;
    const bin = Math.floor(arrive / BIN_MS);
    const inBins = bin < this.binRequests.length;
    if (inBins) this.binRequests[bin]!++;
    if (left >= 0 || (m.queueLimit > 0 && -left <= m.queueLimit)) {
      tokens = left;
      const wait = left >= 0 ? 0 : this.capacity.timeToAccrue(at, -left);
      this.answerAt = at + wait + m.serviceMs + m.networkMs;
      this.status = 200;
    } else {
      this.answerAt = at + m.rejectMs + m.networkMs;
      this.status = m.rejectStatus;
      if (inBins) this.binRejected[bin]!++;
    }
    this.tokens = tokens;
  }
}

/** One run of one policy. */
function overloadRun(queue: EventQueue, p: ResolvedSimPolicy, c: OverloadConfig, run: number, acc: Accumulator): void {
  const policy = p.policy;
  const arrivals = new Sampler(streamSeed(c.seed, 'overload', 'arrivals', run));
  const rng = new Sampler(streamSeed(c.seed, 'overload', 'decide', p.name, run));
  const bins = Math.ceil((c.durationMs + c.deadlineMs + 1000) / BIN_MS) + 1;
  const dep = new Dependency(c.dependency, new Capacity(c.dependency.capacityPerSec, c.faults), bins);
  const clients = Math.max(1, Math.floor(c.clients));
  const budgets: (RetryBudget | null)[] = Array.from({ length: clients }, () => budgetFor(p));
  const random = rng.uniform;
  const ok = statusObservation(200);
  const rejected: SimObservation = statusObservation(c.dependency.rejectStatus);
  if (c.dependency.retryAfterSec !== null) rejected.headers = { 'retry-after': String(c.dependency.retryAfterSec) };
  // A timed-out attempt: the core's own rule turns an answer later than the bound into a timeout.
  const { fault, before, after, overall } = acc;
  const deadlineMs = c.deadlineMs;
  const meanGap = 1000 / c.arrivalsPerSec;
  const poisson = c.arrival === 'poisson';

  // Per operation (index = arrival order).
  const ops: Operation[] = [];
  const startAt: number[] = [];
  const seen: number[] = []; // the pending attempt's status as the client sees it; 0 = timeout
  const sendBound: number[] = []; // a delayed call's time left when it goes (chaos latency)
  let requests = 0;

  /** Carries out what operation `i` asks for next. */
  const carry = (i: number, cmd: Command, now: number): void => {
    switch (cmd.kind) {
      case 'call': {
        const inject = cmd.inject;
        if (inject !== undefined) {
          // Chaos: a fault or an outcome is the answer, nothing reaches the dependency;
          // a latency sends later, within the attempt's time.
          if (inject.kind !== 'latency') return carry(i, ops[i]!.answered(injectedObservation(inject), now), now);
          if (inject.delayMs >= cmd.timeoutMs) {
            seen[i] = 0;
            return void queue.push(now + cmd.timeoutMs, ANSWER, i);
          }
          sendBound[i] = cmd.timeoutMs - inject.delayMs;
          return void queue.push(now + inject.delayMs, SEND, i);
        }
        return send(i, cmd.timeoutMs, now);
      }
      case 'wait':
        // A retry's wait (or a wait for the client's budget): the operation asks again when it is over.
        return void queue.push(now + cmd.delayMs, ATTEMPT, i);
      case 'check_state':
        return acc.end(startAt[i]!, now, 'check_state'); // no state to read in this model
      case 'end':
        return acc.end(startAt[i]!, now, cmd.reason);
      case 'hedge':
      case 'await':
        // Its operations are made without hedging state, so the machine never asks for a hedge.
        throw new Error(`relent sim: a "${cmd.kind}" command, but this model does not hedge`);
    }
  };

  /** Attempt of operation `i` reaches the dependency now; it may take `bound` ms. */
  function send(i: number, bound: number, now: number): void {
    requests++;
    dep.request(now);
    const arrive = dep.arriveAt;
    if (fault.inside(arrive)) fault.requests++;
    else if (before.inside(arrive)) before.requests++;
    if (after.inside(arrive)) after.requests++;
    if (overall.inside(arrive)) overall.requests++;
    // What the client sees: the answer, or a timeout at the attempt's bound.
    if (dep.answerAt - now > bound) {
      seen[i] = 0;
      queue.push(now + bound, ANSWER, i);
    } else {
      seen[i] = dep.status;
      queue.push(dep.answerAt, ANSWER, i);
    }
  }

  queue.clear();
  queue.push(poisson ? arrivals.exponential(meanGap) : 0, ARRIVAL, 0);
  while (queue.pop()) {
    const now = queue.time;
    const kind = queue.kind;
    const i = queue.id;
    if (kind === ARRIVAL) {
      const id = ops.length;
      // The scenario's deadline bounds the operation (with the policy's own).
      const op = createOperation(policy, { method: c.method, callerDeadlineMs: deadlineMs, budget: budgets[id % clients]!, random });
      ops.push(op);
      startAt.push(now);
      seen.push(0);
      if (before.inside(now)) before.operations++;
      if (fault.inside(now)) fault.operations++;
      if (after.inside(now)) after.operations++;
      if (overall.inside(now)) overall.operations++;
      const next = now + (poisson ? arrivals.exponential(meanGap) : meanGap);
      if (next < c.durationMs) queue.push(next, ARRIVAL, 0);
      carry(id, op.start(now), now);
      continue;
    }
    if (kind === ATTEMPT) {
      // A retry whose wait is over.
      carry(i, ops[i]!.timerFired(now), now);
      continue;
    }
    if (kind === SEND) {
      send(i, sendBound[i]!, now);
      continue;
    }
    // ANSWER: the client's operation hears it.
    const status = seen[i]!;
    carry(i, ops[i]!.answered(status === 200 ? ok : status === 0 ? TIMED_OUT : rejected, now), now);
  }

  // Load after the fault: peak rate and the end of the last bin with > 1 % rejections.
  const fe = after.startMs;
  const feBin = Math.floor(fe / BIN_MS);
  const endBin = Math.min(bins, Math.floor(c.durationMs / BIN_MS));
  const perSecond = Math.round(1000 / BIN_MS);
  const afterEndBin = Math.min(endBin, Math.floor(after.endMs / BIN_MS));
  const settleBin = Math.floor((fe + 2 * deadlineMs) / BIN_MS);
  let peak = 0;
  let settled = 0;
  let lastBad = -1;
  let rolling = 0;
  for (let b = feBin; b < endBin; b++) {
    const r = dep.binRequests[b]!;
    // The busiest second (rolling, in 100 ms steps) after the fault, and once it has settled.
    rolling += r - (b - perSecond >= feBin ? dep.binRequests[b - perSecond]! : 0);
    if (b < afterEndBin && b - feBin + 1 >= perSecond && rolling > peak) peak = rolling;
    if (b - settleBin + 1 >= perSecond && rolling > settled) settled = rolling;
    if (r > 0 && dep.binRejected[b]! / r > 0.01) lastBad = b;
  }
  acc.peakAfter += peak / c.arrivalsPerSec;
  if (endBin - settleBin >= perSecond) {
    acc.settled += settled / c.arrivalsPerSec;
    acc.settledRuns++;
  }
  acc.recovery += lastBad < 0 ? 0 : (lastBad + 1) * BIN_MS - fe;
  const perSec = 1000 / BIN_MS;
  for (let b = 0; b < bins && b / perSec < acc.load.length; b++) acc.load[Math.floor(b / perSec)]! += dep.binRequests[b]!;
  acc.attempts += requests;
  acc.runs++;
}
