// What an operation in flight holds, and how it ends: the state the executor (runner.ts)
// carries the core's commands out on, its clock and timers, its events and its result.
import { safeEndpoint } from '../core/endpoint.js';
import type { RetryBudget } from '../core/budget.js';
import { OperationMachine, type EndCommand, type Operation } from '../core/operation.js';
import type { HedgeState } from '../core/hedge.js';
import type { ChaosInjection } from '../core/chaos.js';
import type { Policy } from '../core/policy.js';
import type { Clock, DecisionResult, Observation } from '../core/types.js';
import { resolvePolicy } from '../presets/index.js';
import { clearTimerRecord, clockOption, setTimerRecord, systemClock, systemRandom, turnNow, type TimerRecord } from '../shared/clock.js';
import { attemptSignal, fleetBudget, guardOf, hedgingOf, lastOutcomeOf, Phase, Settled, stateCheckEnd, timeOutAttempt, type AttemptHandle } from './attempt.js';
import type { AttemptExit, Protection } from './guard.js';
import { newOperationId, NO_EXTRA, outcomeFor, resultEvent, RunResultRecord } from './outcome.js';
import type { AttemptFn, AttemptScope, ExecuteOptions, OperationScope, RelentEvent, RunResult } from './types.js';

const NO_GATES: readonly Protection[] = Object.freeze([]);

/**
 * What an operation in flight holds, and how it ends (the result, its event, the
 * caller's promise or the driver's callback): the state the executor (Runner) carries
 * out the core's commands on.
 */
export abstract class OperationRun<T> implements TimerRecord, AttemptHandle {
  readonly policy: Policy;
  protected readonly clock: Clock;
  /** The system clock: timers are this object itself (no allocation), `now` is read once per turn. */
  protected readonly system: boolean;
  protected readonly callerSignal: AbortSignal | undefined;
  protected readonly budget: RetryBudget | null;
  /** The dependency's protections in the gate order (empty: nothing guards it). */
  protected readonly gates: readonly Protection[];
  /** What a protection hears when an attempt it let through ends (reused). */
  protected readonly exitInfo: AttemptExit;
  /** The first attempt was admitted by the driver (guard.admit()): it enters no gate. */
  protected admitted: boolean;
  /** The dependency's hedging state when the policy hedges (attempts then have timers of their own). */
  protected readonly hedging: HedgeState | null;
  /** Attempts in flight, when hedging. */
  protected flying: AttemptHandle[] | null = null;
  protected cancelHedge: (() => void) | null = null;
  protected readonly scope: OperationScope | null;
  /** The endpoint for events (never a query, userinfo or fragment), made on first use. */
  protected safe: string | null | undefined = undefined;
  opId: string | null;
  /**
   * The core's operation, made at the start; or, on the success path's shortcut, only if
   * the first attempt needs more than the core's plain-answer rule (see start()).
   */
  protected op: Operation | undefined = undefined;
  startedAt = 0;
  phase = Phase.Idle;
  ctx: AttemptHandle | null = null;
  // The first attempt's context (this object): see AttemptHandle.
  readonly attempt = 1;
  timeoutMs = 0;
  remainingMs = 0;
  done = false;
  timedOut = false;
  controller: AbortController | null = null;
  callStart = 0;
  aScope: AttemptScope | null = null;
  generation = 0;
  isHedge = false;
  cancel: (() => void) | null = null;
  inject: ChaosInjection | null = null;
  delay: (() => void) | null = null;
  protected checking = false;
  protected cancelTimer: (() => void) | null = null;
  protected last: Observation | null = null;
  protected settled = Settled.None;
  protected payload: unknown = undefined;
  protected abortListener: (() => void) | null = null;
  /** What the caller's event listener threw first, if it did. */
  protected thrown: { readonly error: unknown } | null = null;
  timerDue = 0;
  timerHandle: object | null = null;
  timerSet = false;
  timerQueued = 0;
  timerNext: TimerRecord | null = null;
  settleRun: ((r: RunResult<T>) => void) | null = null;
  resolveValue: ((v: T) => void) | null = null;
  rejectValue: ((e: unknown) => void) | null = null;

  constructor(
    protected readonly fn: AttemptFn<T>,
    protected readonly options: ExecuteOptions<T>,
    policy?: Policy,
  ) {
    this.callerSignal = options.signal;
    this.policy = policy ?? resolvePolicy(options.policy);
    const clock = options.clock === undefined ? undefined : clockOption(options.clock);
    this.clock = clock ?? systemClock;
    this.system = clock === undefined || clock === systemClock;
    const guard = guardOf(options as ExecuteOptions<unknown>, this.clock);
    this.budget = options.budget !== undefined ? options.budget : guard !== null && guard.budget !== null ? guard.budget : fleetBudget(options, this.policy);
    this.gates = guard === null ? NO_GATES : guard.protections;
    this.admitted = options.admitted === true;
    this.exitInfo = {
      obs: null,
      cut: false,
      decision: null,
      startedAt: 0,
      now: 0,
      wallNow: 0,
      note: 0,
      policy: this.policy,
      verdict: options.breakerVerdict ?? null,
    };
    this.hedging = this.policy.hedge === null ? null : hedgingOf(options, this.policy);
    if (this.hedging !== null) this.flying = [];
    this.opId = options.operationId ?? null;
    this.scope = options.instrumentation
      ? options.instrumentation.operation({ operationId: this.operationId, method: this.method, endpoint: this.endpoint })
      : null;
  }

  protected get method(): string | null {
    return this.options.method ?? null;
  }

  /** Whatever the caller passed, events never carry a query, userinfo or fragment. */
  protected get endpoint(): string | null {
    if (this.safe === undefined) this.safe = this.options.endpoint != null ? safeEndpoint(this.options.endpoint) : null;
    return this.safe;
  }

  /** Fixed for the operation; made on first use (nothing reads it on a quiet success path). */
  get operationId(): string {
    return (this.opId ??= newOperationId());
  }

  // As the first attempt's context (AttemptContext):
  get requestId(): string {
    return `${this.operationId}/attempt-1`;
  }

  get signal(): AbortSignal {
    return attemptSignal(this, this.callerSignal);
  }

  abort(reason: unknown): void {
    this.controller?.abort(reason);
  }

  abortForTimeout(): void {
    timeOutAttempt(this);
  }

  protected now(): number {
    return this.system ? turnNow() : this.clock.now();
  }

  /** The core's operation (the caller's options are its options: no object per call). */
  protected operation(): Operation {
    return (this.op ??= new OperationMachine(this.policy, this.options, this.budget, this.options.random ?? systemRandom, this.hedging));
  }

  protected setTimer(ms: number, now: number): void {
    if (this.system) setTimerRecord(this, ms, now);
    else this.cancelTimer = this.clock.setTimer(() => this.onTimerFired(), ms, now);
  }

  protected clearTimer(): void {
    if (this.system) clearTimerRecord(this);
    else if (this.cancelTimer !== null) {
      this.cancelTimer();
      this.cancelTimer = null;
    }
  }

  /** Tells the first `n` gates how their attempt ended (obs null: never made, or cut). */
  protected exitGates(n: number, obs: Observation | null, cut: boolean, decision: DecisionResult | null, startedAt: number, now: number, note: number): void {
    if (n === 0) return;
    const e = this.exitInfo;
    e.obs = obs;
    e.cut = cut;
    e.decision = decision;
    e.startedAt = startedAt;
    e.now = now;
    e.wallNow = this.clock.wallNow();
    e.note = note;
    const gates = this.gates;
    for (let i = 0; i < n; i++) gates[i]!.exit(e);
  }

  /** Hands an event to the caller's listener; what it throws is kept (the operation then ends with it) and never escapes. */
  protected emit(ev: RelentEvent): void {
    try {
      this.options.onEvent!(ev);
    } catch (error) {
      this.thrown ??= { error };
    }
  }

  /** Listens to the caller's signal (once per operation): a cancel ends a call or a wait at once. */
  protected listenForAbort(): void {
    if (this.abortListener === null) {
      this.abortListener = () => this.onCallerAbort();
      this.callerSignal!.addEventListener('abort', this.abortListener);
    }
  }

  protected settleCheck(kind: Settled, payload: unknown): void {
    const cmd = this.op!.checked() as EndCommand;
    this.end(cmd, stateCheckEnd(this.options, this.policy, kind, payload, this.op!.attempt, this.operationId));
  }

  protected end(cmd: EndCommand, extra: Partial<RunResult<T>> = NO_EXTRA): void {
    if (this.phase === Phase.Done) return;
    this.phase = Phase.Done;
    if (this.admitted) {
      // Admitted by the driver, ended before its first call (no time left): the gates get back what they gave.
      this.admitted = false;
      const now = this.clock.now();
      this.exitGates(this.gates.length, null, false, null, now, now, 0);
    }
    if (this.abortListener !== null) this.callerSignal!.removeEventListener('abort', this.abortListener);
    const reason = cmd.reason;
    const options = this.options;
    if (
      reason === 'return' &&
      this.resolveValue !== null &&
      extra.outcome === undefined &&
      this.settled === Settled.Value &&
      !options.onEvent &&
      this.scope === null
    ) {
      return this.resolveValue(this.payload as T); // run()'s success path: nothing else to build
    }
    const d = cmd.decision;
    const last = this.last;
    const attempts = this.op?.attempt ?? 0;
    let outcome = extra.outcome ?? outcomeFor(reason, d, lastOutcomeOf<T>(this.settled, this.payload), last, this.operationId, attempts, this.callerSignal);
    if (options.onEvent || this.scope !== null) {
      const ev = resultEvent(this.operationId, last, reason, attempts, this.clock.wallNow(), extra.stateCheck ?? null, d, this.op);
      if (options.onEvent) this.emit(ev);
      if (this.scope !== null) this.scope.end(ev);
      // A listener that threw ends the operation with its error (as p-retry's onFailedAttempt does).
      if (this.thrown !== null) outcome = { ok: false, error: this.thrown.error };
    }
    if (this.settleRun === null) {
      if (outcome.ok) this.resolveValue!(outcome.value);
      else this.rejectValue!(outcome.error);
      return;
    }
    this.settleRun(
      new RunResultRecord(
        this.operationId,
        reason,
        cmd.why,
        attempts,
        last,
        outcome,
        extra.stateCheck ?? null,
        d?.delayMs ?? null,
        d?.retryAfterMs ?? null,
        (this.op?.deadlineAt ?? this.startedAt) - this.clock.now(),
        this.op === undefined ? 0 : this.op.deadlineAt - this.op.startedAt,
      ) as RunResult<T>,
    );
  }

  /** The caller cancelled (the executor ends what is in flight or waiting). */
  protected abstract onCallerAbort(): void;
  /** The operation's timer fired (an attempt's time is up, or a wait is over). */
  abstract onTimerFired(): void;
}
