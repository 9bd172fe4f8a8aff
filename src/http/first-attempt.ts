// The success path of one HTTP operation (FirstAttempt), shared by the client and the
// interceptor: the driver sends the first attempt itself and hands anything but a plain
// answer over to the executor.
import type { Dispatcher } from 'undici';
import type { RetryBudget } from '../core/budget.js';
import type { Policy } from '../core/policy.js';
import type { Clock } from '../core/types.js';
import { clearTimerRecord, setTimerRecord, systemClock, turnNow, type TimerRecord } from '../shared/clock.js';
import { attemptLimitMs, isPlainAnswer, observePlainAnswer } from '../core/decide.js';
import { operationAttemptTimeoutMs, operationDeadlineMs } from '../core/operation.js';
import type { FirstAttemptEnd } from '../run/run.js';
import { AttemptHandler, type HeadListener } from './attempt.js';
import type { CallLimits } from './operation.js';

const enum Fast {
  Off,
  InFlight,
  Over,
}

/**
 * The success path of one HTTP operation, for the client and the interceptor: the
 * driver makes the first attempt itself, with the limits the executor would give it
 * (the core's operationDeadlineMs and attemptLimitMs) and a timer of its own (this
 * object: nothing is allocated for it on the system clock). A plain answer — the
 * core's isPlainAnswer, decide()'s first rule — is the operation's answer, and the
 * shared budget hears of it as decide() tells it (observePlainAnswer). Anything else
 * (another status, an error, the attempt's time limit, the caller's cancel) is handed
 * to the executor (executeFrom), which decides that attempt as if it had made it and
 * carries the operation on: every decision beyond "a plain answer is the answer" is
 * the core's. Only for calls nobody watches (no events, no tracing) to a dependency
 * with no breaker, bulkhead or limit, without hedging.
 *
 * After the answer, the timer is free for the driver's own use (the interceptor's
 * body deadline): `arm`, `disarm`, `timerFired`.
 */
export abstract class FirstAttempt implements TimerRecord, HeadListener {
  timerDue = 0;
  timerHandle: object | null = null;
  timerSet = false;
  timerQueued = 0;
  timerNext: TimerRecord | null = null;
  /** The clock's reading when the first attempt was sent (the operation's start). */
  startedAt = 0;
  /** The first attempt's time limit (ms). */
  timeoutMs = 0;
  /** The operation's deadline (ms from its start). */
  deadlineMs = 0;
  /** The first attempt's handler. */
  first: AttemptHandler | null = null;
  private fast = Fast.Off;
  private cancelTimer: (() => void) | null = null;
  /** The injected clock; null: the system clock (timers are this object, `now` read once per turn). */
  protected clockIn: Clock | null = null;
  protected policy: Policy | null = null;
  protected budget: RetryBudget | null = null;

  /**
   * The first attempt's limits, from the clock's reading now: false when the success
   * path is not for this call (the policy injects chaos, or the operation has no time
   * at all): the executor then runs it.
   */
  protected plan(policy: Policy, budget: RetryBudget | null, limits: CallLimits, clock: Clock | undefined): boolean {
    // A policy with chaos goes through the executor, which carries out what it injects.
    if (policy.chaos !== null) return false;
    const deadlineMs = operationDeadlineMs(policy, limits);
    if (!(deadlineMs > 0)) return false;
    const c = clock === undefined || clock === systemClock ? null : clock;
    this.clockIn = c;
    this.policy = policy;
    this.budget = budget;
    this.startedAt = c === null ? turnNow() : c.now();
    this.deadlineMs = deadlineMs;
    this.timeoutMs = attemptLimitMs(operationAttemptTimeoutMs(policy, limits), deadlineMs, 0);
    return true;
  }

  /** Whether the first attempt is in flight on the success path. */
  protected get inFlight(): boolean {
    return this.fast === Fast.InFlight;
  }

  /** Sends the first attempt (after plan()) with these options. */
  protected send(
    dispatch: (opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler) => boolean,
    opts: Dispatcher.DispatchOptions,
    acceptStatus: ((status: number) => boolean) | null,
  ): void {
    const h = new AttemptHandler(acceptStatus);
    this.first = h;
    this.fast = Fast.InFlight;
    h.listen(this);
    try {
      dispatch(opts, h);
    } catch (e) {
      h.failToStart(e);
    }
    if (this.fast === Fast.InFlight) this.arm(this.timeoutMs, this.startedAt);
  }

  attemptAnswered(h: AttemptHandler): void {
    if (this.fast !== Fast.InFlight) return;
    this.disarm();
    this.fast = Fast.Over;
    const status = h.status;
    if (!isPlainAnswer(this.policy!, status)) return this.handOver('value', h);
    const now = this.clockIn === null ? performance.now() : this.clockIn.now();
    if (this.budget !== null) observePlainAnswer(this.budget, 1, 0, now);
    this.answered(h, now);
  }

  attemptFailed(error: unknown): void {
    if (this.fast !== Fast.InFlight) return;
    this.disarm();
    this.fast = Fast.Over;
    this.handOver('error', error);
  }

  /** The caller cancelled while the first attempt is in flight: it is cut, and the executor ends the operation. */
  protected cancelFirst(reason: Error): void {
    if (this.fast !== Fast.InFlight) return;
    this.disarm();
    this.fast = Fast.Over;
    this.first!.abort(reason);
    this.handOver('aborted', undefined);
  }

  onTimerFired(): void {
    this.cancelTimer = null;
    if (this.fast === Fast.InFlight) {
      this.fast = Fast.Over;
      return this.handOver('timeout', undefined);
    }
    this.timerFired();
  }

  protected arm(ms: number, now: number): void {
    if (this.clockIn === null) setTimerRecord(this, ms, now);
    else this.cancelTimer = this.clockIn.setTimer(() => this.onTimerFired(), ms, now);
  }

  protected disarm(): void {
    if (this.clockIn === null) clearTimerRecord(this);
    else if (this.cancelTimer !== null) {
      this.cancelTimer();
      this.cancelTimer = null;
    }
  }

  /** The operation's time left at `now` (ms, negative once past). */
  protected remainingAt(now: number): number {
    return this.startedAt + this.deadlineMs - now;
  }

  /** The first attempt's plain answer is the operation's answer (`now`: the clock's reading). */
  protected abstract answered(h: AttemptHandler, now: number): void;
  /** The executor takes the operation over: executeFrom(…, startedAt, timeoutMs, deadlineMs, how, payload, …). */
  protected abstract handOver(how: FirstAttemptEnd, payload: unknown): void;
  /** The driver's own timer (armed after the answer) fired. */
  protected timerFired(): void {}
}
