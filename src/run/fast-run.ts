// run()'s success path: the first attempt of an operation nothing guards or watches,
// with no operation object unless the attempt needs more than a plain answer.
import { attemptLimitMs, isPlainAnswer } from '../core/decide.js';
import { operationAttemptTimeoutMs } from '../core/operation.js';
import type { ChaosInjection } from '../core/chaos.js';
import type { Policy } from '../core/policy.js';
import { clearTimerRecord, setTimerRecord, turnNow, type TimerRecord } from '../shared/clock.js';
import { attemptSignal, Phase, Settled, thenableOf, timeOutAttempt, type AttemptHandle } from './attempt.js';
import { classifyValueDefault } from './classify.js';
import { newOperationId } from './outcome.js';
import { Runner } from './runner.js';
import type { AttemptFn, AttemptScope, ExecuteOptions } from './types.js';

/**
 * run()'s success path: an operation with nothing around its calls (no breaker, limit,
 * rate, budget, hedging, caller's signal, events or tracing) on the system clock. Its
 * first call's limits are the core's (the functions the operation uses); it is the
 * first attempt's context and its own lazy timer; and when that call ends with a plain
 * answer (decide()'s first rule: the answer, nothing to record) it resolves with it.
 * Anything else — an error, a timeout, a status the policy retries — hands the attempt
 * to a Runner, which makes the core's operation as if it had run from the start.
 */
export class FastRun<T> implements AttemptHandle, TimerRecord {
  // Fields are set in the constructor (not as class fields): V8 then inlines the whole
  // initialisation into run() instead of calling a separate field initialiser. As few
  // as the attempt needs: every byte of it is allocated (and later scavenged) per call.
  declare timeoutMs: number;
  declare remainingMs: number;
  declare done: boolean;
  declare timedOut: boolean;
  declare controller: AbortController | null;
  declare callStart: number;
  declare timerDue: number;
  declare timerHandle: object | null;
  declare timerSet: boolean;
  declare timerQueued: number;
  declare timerNext: TimerRecord | null;
  /** Set once the attempt needs more than the success path (see promote()). */
  declare private runner: Runner<T> | null;
  declare private opId: string | null;
  declare private readonly fn: AttemptFn<T>;
  declare private readonly options: ExecuteOptions<T>;
  declare private readonly policy: Policy;
  declare private readonly resolve: (v: T) => void;
  declare private readonly reject: (e: unknown) => void;

  constructor(fn: AttemptFn<T>, options: ExecuteOptions<T>, policy: Policy, resolve: (v: T) => void, reject: (e: unknown) => void) {
    this.fn = fn;
    this.options = options;
    this.policy = policy;
    this.resolve = resolve;
    this.reject = reject;
    this.opId = options.operationId ?? null;
    this.runner = null;
    this.timeoutMs = 0;
    this.remainingMs = 0;
    this.done = false;
    this.timedOut = false;
    this.controller = null;
    this.callStart = 0;
    this.timerDue = 0;
    this.timerHandle = null;
    this.timerSet = false;
    this.timerQueued = 0;
    this.timerNext = null;
  }

  // What a Runner reads of its attempts' contexts, fixed for this one (the first attempt; no tracing, no limit, no hedging).
  get attempt(): number {
    return 1;
  }

  get aScope(): AttemptScope | null {
    return null;
  }

  get generation(): number {
    return 0;
  }

  get isHedge(): boolean {
    return false;
  }

  get cancel(): (() => void) | null {
    return null;
  }

  // No chaos on the success path (a policy with chaos never takes it).
  get inject(): ChaosInjection | null {
    return null;
  }

  get delay(): (() => void) | null {
    return null;
  }

  get operationId(): string {
    if (this.runner !== null) return this.runner.operationId;
    return (this.opId ??= newOperationId());
  }

  get requestId(): string {
    return `${this.operationId}/attempt-1`;
  }

  get signal(): AbortSignal {
    return attemptSignal(this, undefined);
  }

  abort(reason: unknown): void {
    this.controller?.abort(reason);
  }

  abortForTimeout(): void {
    timeOutAttempt(this);
  }

  start(deadlineMs: number): void {
    const at = this.options.startedAt;
    const now = at === undefined ? turnNow() : at <= performance.now() ? at : turnNow();
    const timeoutMs = attemptLimitMs(operationAttemptTimeoutMs(this.policy, this.options), deadlineMs, 0);
    this.timeoutMs = timeoutMs;
    this.remainingMs = deadlineMs;
    this.callStart = now;
    let p: PromiseLike<T>;
    try {
      p = thenableOf(this.fn(this));
    } catch (error) {
      p = Promise.reject(error);
    }
    setTimerRecord(this, timeoutMs, now);
    // Bound methods rather than arrow functions: a bound function is smaller than a closure
    // and its context, and needs no lazy-compile step on its first (and only) call.
    try {
      p.then(this.onValue.bind(this), this.onError.bind(this));
    } catch (error) {
      this.onError(error);
    }
  }

  onError(error: unknown): void {
    this.settle(this, Settled.Error, error);
  }

  /** The call answered: a plain answer (decide()'s first rule) is the result; anything else goes to a Runner. */
  onValue(value: T): void {
    try {
      if (
        this.runner === null &&
        !this.done &&
        this.options.classifyValue === undefined &&
        (typeof value !== 'object' || value === null
          ? isPlainAnswer(this.policy, 200)
          : isPlainAnswer(this.policy, (classifyValueDefault(value) as { status: number }).status))
      ) {
        this.done = true;
        clearTimerRecord(this);
        return this.resolve(value);
      }
    } catch (error) {
      // A value the default classifier cannot read (a getter that throws): the operation ends with that error.
      if (this.runner === null && !this.done) return this.promote().fail(error);
      return;
    }
    this.settle(this, Settled.Value, value);
  }

  settle(ctx: AttemptHandle, kind: Settled, payload: unknown): void {
    const runner = this.runner;
    if (runner !== null) return runner.settle(ctx, kind, payload);
    if (this.done) return;
    if (kind === Settled.Value && this.options.classifyValue === undefined) {
      const status = (classifyValueDefault(payload) as { status: number }).status;
      if (isPlainAnswer(this.policy, status)) {
        this.done = true;
        clearTimerRecord(this);
        return this.resolve(payload as T);
      }
    }
    this.promote().settle(this, kind, payload);
  }

  onTimerFired(): void {
    if (this.runner !== null || this.done) return;
    this.promote().onTimerFired();
  }

  /** The Runner that takes over the attempt in flight (this object stays its context). */
  private promote(): Runner<T> {
    const r = new Runner(this.fn, this.options, this.policy);
    r.resolveValue = this.resolve;
    r.rejectValue = this.reject;
    r.opId = this.opId;
    r.startedAt = this.callStart;
    r.phase = Phase.Calling;
    r.ctx = this;
    this.runner = r;
    clearTimerRecord(this);
    return r;
  }
}
