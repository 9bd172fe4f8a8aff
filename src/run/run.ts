// The executor's entry points: run(), execute(), and the drivers' executeThen() and
// executeFrom(). The executor itself is runner.ts (one operation over the core's state
// machine) and fast-run.ts (run()'s success path); the dependency's protections are a
// guard (guard.ts); the types are types.ts.
import { operationDeadlineMs } from '../core/operation.js';
import { resolvePolicy } from '../presets/index.js';
import { systemClock } from '../shared/clock.js';
import { FastRun } from './fast-run.js';
import { Runner } from './runner.js';
import type { AttemptFn, ExecuteOptions, FirstAttemptEnd, RunOptions, RunResult } from './types.js';

export type {
  AttemptContext,
  AttemptFn,
  AttemptScope,
  Classified,
  DriverHooks,
  DriverName,
  ExecuteOptions,
  FirstAttemptEnd,
  Instrumentation,
  InstrumentationAttributes,
  OperationInfo,
  OperationScope,
  RelentEvent,
  RunOptions,
  RunResult,
  WorkInfo,
  WorkScope,
} from './types.js';
export { newOperationId } from './outcome.js';

const NO_OPTIONS: RunOptions<any> = Object.freeze({}); // eslint-disable-line @typescript-eslint/no-explicit-any

/** Whether an operation may take run()'s success path (FastRun): nothing guards, watches or cancels it, on the system clock. */
function bare(o: ExecuteOptions<unknown>): boolean {
  return (
    o.signal === undefined &&
    o.budget == null &&
    o.fleet == null &&
    o.breaker == null &&
    o.bulkhead == null &&
    o.concurrencyLimit == null &&
    o.rateLimiter == null &&
    o.guard == null &&
    !o.onEvent &&
    !o.instrumentation &&
    (o.clock === undefined || o.clock === systemClock)
  );
}

/** Starts an operation for run(): the success path when it may take it, else a Runner. Throws on invalid options (the caller's promise rejects). */
function startRun<T>(fn: AttemptFn<T>, options: ExecuteOptions<T>, resolve: (v: T) => void, reject: (e: unknown) => void): void {
  if (bare(options as ExecuteOptions<unknown>)) {
    const policy = resolvePolicy(options.policy);
    const deadlineMs = policy.hedge === null && policy.chaos === null ? operationDeadlineMs(policy, options) : 0;
    if (deadlineMs > 0) return new FastRun(fn, options, policy, resolve, reject).start(deadlineMs);
    const r = new Runner(fn, options, policy);
    r.resolveValue = resolve;
    r.rejectValue = reject;
    return r.start();
  }
  const r = new Runner(fn, options);
  r.resolveValue = resolve;
  r.rejectValue = reject;
  r.start();
}

/**
 * Runs `fn` under a policy: deadline, per-attempt timeout, backoff, budget, events.
 * Resolves with the operation's value (the last real one when retries ran out);
 * rejects with the operation's own error, or a RelentError with a stable `code`.
 */
export function run<T>(fn: AttemptFn<T>, options: RunOptions<T> = NO_OPTIONS): Promise<T> {
  return new Promise<T>((resolve, reject) => startRun(fn, options, resolve, reject));
}

/**
 * Runs an operation under a policy and reports how it ended, without throwing for
 * operation failures. `run()` is the same with the outcome unwrapped.
 */
export function execute<T>(fn: AttemptFn<T>, options: ExecuteOptions<T> = NO_OPTIONS): Promise<RunResult<T>> {
  return new Promise<RunResult<T>>((resolve) => {
    // The Runner is made inside the executor, so that invalid options reject the promise instead of throwing.
    const r = new Runner(fn, options);
    r.settleRun = resolve;
    r.start();
  });
}

/**
 * execute() for the drivers of this package, with a callback instead of a promise: no
 * promise and no microtask between the operation's end and the caller. Invalid options
 * throw. (Not part of the public API.)
 */
export function executeThen<T>(fn: AttemptFn<T>, options: ExecuteOptions<T>, done: (r: RunResult<T>) => void): void {
  const r = new Runner(fn, options);
  r.settleRun = done;
  r.start();
}

/**
 * executeThen() for an operation whose first attempt the driver made itself, on its
 * success path, with the limits start() would have given it (the core's
 * operationDeadlineMs and attemptLimitMs, from the clock's reading `startedAt`): once
 * that attempt needs more than a plain answer, the executor decides it as if it had
 * made it — `how` it ended and its value or error — and carries the operation on with
 * `fn`. The driver must not have read the attempt's signal. (Not part of the public API.)
 */
export function executeFrom<T>(
  fn: AttemptFn<T>,
  options: ExecuteOptions<T>,
  startedAt: number,
  timeoutMs: number,
  remainingMs: number,
  how: FirstAttemptEnd,
  payload: unknown,
  done: (r: RunResult<T>) => void,
): void {
  const r = new Runner(fn, options);
  r.settleRun = done;
  r.takeOver(startedAt, timeoutMs, remainingMs, how, payload);
}
