import { createRetryBudget, type BudgetSpec, type RetryBudget } from '../core/budget.js';
import { createOperation, type Command, type Operation } from '../core/operation.js';
import { NO_RETRY_HEADER } from '../core/propagation.js';
import type { Decision } from '../core/types.js';
import { budgetFor, resolveSimPolicy, round, statusObservation, TIMED_OUT, type ProgressFn, type ResolvedSimPolicy, type SimObservation } from './common.js';
import { EventQueue, Sampler, streamSeed } from './engine.js';
import type { SimPolicy } from './policies.js';

/**
 * Retries at every layer of a stack (Google SRE book, ch. 22 "Addressing Cascading Failures",
 * https://sre.google/sre-book/addressing-cascading-failures/): a user
 * action goes through `layers` services, each retrying its call to the next; the
 * bottom one calls a database that is overloaded and answers 503 to everything. With
 * 4 attempts per layer and 3 layers, one user action becomes 4^3 = 64 attempts on the
 * database. Each layer is one process with one shared retry budget (when the variant
 * has budgets). The deadline is propagated: a layer's operation gets what is left of
 * its caller's attempt, minus the two network hops.
 *
 * The fleet case: each layer runs as P processes (`processes`), each with its own budget
 * (P floors of retries per layer) or one budget shared by the layer's processes (as
 * relent/fleet shares one through Redis); with `noRetry`, a layer that gives up says
 * "don't retry" (relent/server's marker), so only the layer above the database retries.
 */
export interface LayersVariant {
  readonly name: string;
  /** Each layer keeps `createRetryBudget(policy.budget)` (true), none (false), or a budget of this spec. */
  readonly budget: boolean | BudgetSpec;
  /** What a layer answers its caller when its own operation failed: 503 passes the overload up; a status the layers do not retry stops retries above (SRE ch. 21: "overloaded; don't retry"). */
  readonly giveUpStatus: number;
  /**
   * The fleet case: each layer runs as this many processes (default 1; `"fleet"`: the
   * config's `fleetProcesses`); its calls are spread over them in turn. Each process
   * keeps its own budget unless `sharedBudget`.
   */
  readonly processes?: number | 'fleet';
  /** The processes of a layer share one budget (what relent/fleet does through Redis) instead of one each. Default false. */
  readonly sharedBudget?: boolean;
  /**
   * A layer that gives up answers its caller `giveUpStatus` with relent's "don't retry"
   * marker (`x-relent-no-retry`, as relent/server does), which relent's clients honour
   * whatever the status. Default false.
   */
  readonly noRetry?: boolean;
}

export interface LayersConfig {
  readonly seed: number | string;
  readonly runs: number;
  /** User actions per second (Poisson), over `durationMs`. */
  readonly arrivalsPerSec: number;
  readonly durationMs: number;
  /** Services between the user and the database. */
  readonly layers: number;
  /** One-way delay between two layers (and to the database), ms. */
  readonly hopMs: number;
  /** How long the database takes to answer, ms. */
  readonly dbMs: number;
  /** Share of database calls answered 503 (1: overloaded, every call fails). */
  readonly dbFailureShare: number;
  /** The user action's deadline, ms. */
  readonly deadlineMs: number;
  /** The policy every layer runs. */
  readonly policy: SimPolicy;
  /** Processes per layer in the fleet variants (`processes: "fleet"`). */
  readonly fleetProcesses: number;
  readonly variants: readonly LayersVariant[];
}

export interface LayersRow {
  readonly variant: string;
  /** Processes per layer. */
  readonly processes: number;
  /** User actions started (per run). */
  readonly operations: number;
  /** Calls made by layer k (k = 1 the top), per user action. Layer `layers` calls the database. */
  readonly callsPerAction: readonly number[];
  /** Database calls per user action. */
  readonly amplification: number;
  /** Share of user actions that succeeded. */
  readonly successShare: number;
  /** How the top layer's operations ended, as shares. */
  readonly reasons: Readonly<Partial<Record<Decision, number>>>;
}

export interface LayersResult {
  readonly rows: LayersRow[];
  readonly attempts: number;
}

/** SRE ch. 22's example: 3 retries (4 attempts) per layer, retrying the overload (503). */
export const LAYER_POLICY: SimPolicy = Object.freeze({
  name: 'layer',
  summary: "4 attempts, full jitter 100 ms ×2, retry 503 only, relent's ratio budget (10 % + 1/s, 10 tokens)",
  policy: Object.freeze({ maxAttempts: 4, retryOn: Object.freeze({ status: Object.freeze([503]) }) }),
});

export const LAYERS_DEFAULTS: LayersConfig = Object.freeze({
  seed: 1,
  runs: 1,
  arrivalsPerSec: 100,
  durationMs: 20_000,
  layers: 3,
  hopMs: 1,
  dbMs: 1,
  dbFailureShare: 1,
  deadlineMs: 60_000,
  policy: LAYER_POLICY,
  fleetProcesses: 10,
  variants: Object.freeze([
    Object.freeze({ name: 'no budgets', budget: false, giveUpStatus: 503 }),
    Object.freeze({
      name: 'budgets (SRE rule: 10 % of requests)',
      budget: Object.freeze({ kind: 'ratio' as const, deposit: 'operation' as const, refund: false }),
      giveUpStatus: 503,
    }),
    Object.freeze({ name: 'budgets', budget: true, giveUpStatus: 503 }),
    Object.freeze({ name: 'budgets, give-up not retried', budget: true, giveUpStatus: 500 }),
    // The fleet case: every layer is `fleetProcesses` processes.
    Object.freeze({ name: 'fleet, budget per process', budget: true, giveUpStatus: 503, processes: 'fleet' as const }),
    Object.freeze({ name: 'fleet, shared budget', budget: true, giveUpStatus: 503, processes: 'fleet' as const, sharedBudget: true }),
    Object.freeze({ name: 'fleet, budget per process, "don\'t retry"', budget: true, giveUpStatus: 503, processes: 'fleet' as const, noRetry: true }),
    Object.freeze({
      name: 'fleet, shared budget, "don\'t retry"',
      budget: true,
      giveUpStatus: 503,
      processes: 'fleet' as const,
      sharedBudget: true,
      noRetry: true,
    }),
  ]),
});

/** A status code (beyond HTTP's) that stands for `giveUpStatus` with relent's "don't retry" marker, in the packed event. */
const MARKED = 1000;

const USER = 0;
const START = 1; // a layer's operation begins (the call reached it)
const ATTEMPT = 2; // a retry's wait is over
const ANSWER = 3; // an attempt's answer reaches its layer
const TIMEOUT = 4; // an attempt's time is up

/** One layer operation (a call being served by layer `layer`). */
interface LayerOp {
  readonly layer: number;
  /** Which of the layer's processes serves it. */
  readonly process: number;
  /** The caller's operation, or -1 for the user. */
  readonly parent: number;
  /** The caller's attempt this operation serves (its answer is dropped if the caller moved on). */
  readonly parentAttempt: number;
  /** Deadline handed down by the caller (ms from the start), or the user action's. */
  readonly deadlineMs: number;
  /** The core's operation (created when the call reaches the layer). */
  op: Operation | null;
  /** An attempt is out and not yet settled (answered or timed out). */
  pending: boolean;
  done: boolean;
}

export function runLayers(config: Partial<LayersConfig> = {}, onProgress?: ProgressFn): LayersResult {
  const c: LayersConfig = { ...LAYERS_DEFAULTS, ...config };
  const policy = resolveSimPolicy(c.policy, 'policy');
  const rows: LayersRow[] = [];
  let attempts = 0;
  const total = c.variants.length * c.runs;
  let done = 0;
  const queue = new EventQueue(4096);
  for (const v of c.variants) {
    const calls = new Float64Array(c.layers);
    let ops = 0;
    let ok = 0;
    const reasons: Partial<Record<Decision, number>> = {};
    for (let run = 0; run < c.runs; run++) {
      const r = layersRun(queue, policy, v, c, run);
      for (let k = 0; k < c.layers; k++) calls[k] = calls[k]! + r.calls[k]!;
      ops += r.operations;
      ok += r.successes;
      for (const [k, n] of Object.entries(r.reasons)) reasons[k as Decision] = (reasons[k as Decision] ?? 0) + n;
      done++;
      onProgress?.(done, total, `layers ${v.name}, run ${run + 1}`);
    }
    for (const k of Object.keys(reasons) as Decision[]) reasons[k] = round(reasons[k]! / Math.max(1, ops), 4);
    const callsPerAction = Array.from(calls, (n) => round(n / Math.max(1, ops), 3));
    attempts += calls.reduce((a, b) => a + b, 0);
    rows.push({
      variant: v.name,
      processes: processesOf(v, c),
      operations: round(ops / c.runs, 1),
      callsPerAction,
      amplification: callsPerAction[c.layers - 1] ?? 0,
      successShare: round(ok / Math.max(1, ops), 4),
      reasons,
    });
  }
  return { rows, attempts };
}

function layersRun(
  queue: EventQueue,
  p: ResolvedSimPolicy,
  v: LayersVariant,
  c: LayersConfig,
  run: number,
): { calls: Float64Array; operations: number; successes: number; reasons: Partial<Record<Decision, number>> } {
  const policy = p.policy;
  const arrivals = new Sampler(streamSeed(c.seed, 'layers', 'arrivals', run));
  const rng = new Sampler(streamSeed(c.seed, 'layers', 'decide', v.name, run));
  const dbRng = new Sampler(streamSeed(c.seed, 'layers', 'db', run));
  const processes = processesOf(v, c);
  const newBudget = (): RetryBudget | null =>
    typeof v.budget === 'object' ? createRetryBudget(v.budget) : v.budget ? budgetFor({ ...p, budgeted: true }) : null;
  // budgets[layer][process]: one per process, or one object shared by a layer's processes.
  const budgets: (RetryBudget | null)[][] = Array.from({ length: c.layers }, () => {
    const shared = v.sharedBudget === true ? newBudget() : null;
    return Array.from({ length: processes }, () => (v.sharedBudget === true ? shared : newBudget()));
  });
  const nextProcess = new Int32Array(c.layers);
  const observations = new Map<number, SimObservation>();
  const observation = (status: number): SimObservation => {
    let o = observations.get(status);
    if (!o) {
      o = status === MARKED ? { status: v.giveUpStatus, headers: { [NO_RETRY_HEADER]: 'upstream' }, elapsedMs: 0 } : statusObservation(status);
      observations.set(status, o);
    }
    return o;
  };
  const ops: LayerOp[] = [];
  const calls = new Float64Array(c.layers);
  const reasons: Partial<Record<Decision, number>> = {};
  let operations = 0;
  let successes = 0;
  const hop = c.hopMs;

  const newOp = (layer: number, parent: number, parentAttempt: number, deadlineMs: number): number => {
    const process = nextProcess[layer]!;
    nextProcess[layer] = (process + 1) % processes;
    ops.push({ layer, process, parent, parentAttempt, deadlineMs, op: null, pending: false, done: false });
    return ops.length - 1;
  };
  /**
   * Schedules what attempt `attempt` of operation `op` learns at `at`: a status, or 0 for
   * its timeout. The status and the attempt ride in the event's kind (4 + 10 + 17 bits),
   * so settling allocates nothing.
   */
  const settle = (at: number, kind: number, op: number, attempt: number, status: number): void => {
    queue.push(at, kind | (status << 4) | (attempt << 14), op);
  };

  /** Operation `i` ends at `now`; its caller hears of it one hop later. */
  const finish = (i: number, now: number, decision: Decision): void => {
    const op = ops[i]!;
    op.done = true;
    if (op.parent < 0) {
      reasons[decision] = (reasons[decision] ?? 0) + 1;
      if (decision === 'return') successes++;
      return;
    }
    settle(now + hop, ANSWER, op.parent, op.parentAttempt, decision === 'return' ? 200 : v.noRetry === true ? MARKED : v.giveUpStatus);
  };

  /** Carries out what operation `i` asks for next. */
  const carry = (i: number, cmd: Command, now: number): void => {
    switch (cmd.kind) {
      case 'call':
        return send(i, cmd.attempt, cmd.timeoutMs, now);
      case 'wait':
        // A retry's wait (or a wait for the process's budget): the operation asks again when it is over.
        return void queue.push(now + cmd.delayMs, ATTEMPT, i);
      case 'check_state':
        return finish(i, now, 'check_state'); // never for these idempotent calls; no state to read
      case 'end':
        return finish(i, now, cmd.reason);
      case 'hedge':
      case 'await':
        // Its operations are made without hedging state, so the machine never asks for a hedge.
        throw new Error(`relent sim: a "${cmd.kind}" command, but this model does not hedge`);
    }
  };

  /** Attempt `attempt` of operation `i`, bounded by `bound` ms. */
  const send = (i: number, attempt: number, bound: number, now: number): void => {
    const op = ops[i]!;
    op.pending = true;
    calls[op.layer] = calls[op.layer]! + 1;
    if (op.layer === c.layers - 1) {
      // The database: the answer, or the attempt's timeout if the answer would come later.
      const status = dbRng.uniform() < c.dbFailureShare ? 503 : 200;
      const at = now + hop + c.dbMs + hop;
      if (at - now <= bound) settle(at, ANSWER, i, attempt, status);
      else settle(now + bound, TIMEOUT, i, attempt, 0);
      return;
    }
    // The next layer: its operation gets what is left of this attempt, minus both hops, so
    // its answer is back by the end of this attempt; a timer is needed only when there is
    // not even that much time left.
    const childDeadline = bound - 2 * hop;
    if (childDeadline < 1) settle(now + bound, TIMEOUT, i, attempt, 0);
    const child = newOp(op.layer + 1, i, attempt, Math.max(1, childDeadline));
    queue.push(now + hop, START, child);
  };

  queue.clear();
  const gap = 1000 / c.arrivalsPerSec;
  queue.push(arrivals.exponential(gap), USER, -1);
  while (queue.pop()) {
    const now = queue.time;
    const packed = queue.kind;
    const kind = packed & 15;
    let i = queue.id;
    if (kind === USER) {
      operations++;
      const next = now + arrivals.exponential(gap);
      if (next < c.durationMs) queue.push(next, USER, -1);
      i = newOp(0, -1, 0, c.deadlineMs);
    }
    if (kind === USER || kind === START) {
      const o = ops[i]!;
      // The deadline handed down bounds the operation (with the policy's own).
      const op = createOperation(policy, { method: 'GET', callerDeadlineMs: o.deadlineMs, budget: budgets[o.layer]![o.process]!, random: rng.uniform });
      o.op = op;
      carry(i, op.start(now), now);
      continue;
    }
    if (kind === ATTEMPT) {
      const o = ops[i]!;
      if (!o.done) carry(i, o.op!.timerFired(now), now);
      continue;
    }
    // ANSWER or TIMEOUT of one attempt: only the first of the two counts, and only for the current attempt.
    const o = ops[i]!;
    const op = o.op!;
    if (o.done || !o.pending || op.attempt !== packed >>> 14) continue;
    o.pending = false;
    const status = (packed >>> 4) & 1023;
    carry(i, op.answered(status === 0 ? TIMED_OUT : observation(status), now), now);
  }
  return { calls, operations, successes, reasons };
}

function processesOf(v: LayersVariant, c: LayersConfig): number {
  return v.processes === 'fleet' ? c.fleetProcesses : (v.processes ?? 1);
}
