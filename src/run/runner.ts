// The executor: one operation over the core's operation state machine, carried out on a
// clock with real (or test) timers, the dependency's guard, chaos, events and tracing.
import { attemptLimitMs, isPlainAnswer } from '../core/decide.js';
import {
  HEDGE_LOST,
  operationAttemptTimeoutMs,
  operationDeadlineMs,
  type CallCommand,
  type Command,
  type EndCommand,
  type HedgeCommand,
} from '../core/operation.js';
import type { ChaosInjection } from '../core/chaos.js';
import { attemptEvent } from '../core/events.js';
import { RelentError } from '../core/errors.js';
import type { Observation } from '../core/types.js';
import { noticeClientRetries, OK_200 } from './classify.js';
import {
  AttemptCtx,
  CANCELLED_ATTEMPT,
  classifyAttempt,
  CRASHED,
  ignore,
  lastOutcomeOf,
  Phase,
  Settled,
  thenableOf,
  UNTIMED_200,
  waitFor,
  type AttemptHandle,
  type WaitResult,
} from './attempt.js';
import { observation, refusalOutcome } from './outcome.js';
import type { AttemptFn, AttemptScope, Classified, FirstAttemptEnd } from './types.js';

import { OperationRun } from './operation-run.js';

/**
 * One operation in flight: the core's operation state machine (createOperation) decides
 * every step; this class only carries its commands out on the clock it is given —
 * calls with a timer and the caller's signal racing them, waits, the dependency's guard
 * (its protections, entered in the one gate order), chaos, events. It is driven by
 * callbacks rather than async/await, so that the success path costs the operation's own
 * promise and one more, not a chain of them; on the system clock it is its own lazy
 * timer and reads the clock once per turn.
 */
export class Runner<T> extends OperationRun<T> {
  start(): void {
    const at = this.options.startedAt;
    const now = at !== undefined && at <= this.clock.now() ? at : this.now();
    this.startedAt = now;
    if (this.gates.length === 0 && this.hedging === null && this.policy.chaos === null && !(this.callerSignal?.aborted ?? false)) {
      // The shortcut: the first call's limits are the core's (the same functions the
      // operation uses), and the operation itself is made only when the attempt needs
      // more than "a plain answer is the answer" (decide()'s first rule).
      const deadlineMs = operationDeadlineMs(this.policy, this.options);
      if (deadlineMs > 0) return this.invoke(now, 1, attemptLimitMs(operationAttemptTimeoutMs(this.policy, this.options), deadlineMs, 0), deadlineMs, null);
    }
    const op = this.operation();
    this.carry(this.callerSignal?.aborted ? op.cancelled() : op.start(now), now);
  }

  /**
   * Takes over an operation whose first attempt a driver made itself (see executeFrom),
   * as if start()'s shortcut had made it: at `startedAt`, given `timeoutMs` of the
   * operation's `remainingMs`. It has just ended as `how` says.
   */
  takeOver(startedAt: number, timeoutMs: number, remainingMs: number, how: FirstAttemptEnd, payload: unknown): void {
    this.startedAt = startedAt;
    this.callStart = startedAt;
    this.timeoutMs = timeoutMs;
    this.remainingMs = remainingMs;
    this.ctx = this;
    this.phase = Phase.Calling;
    switch (how) {
      case 'value':
        return this.settle(this, Settled.Value, payload);
      case 'error':
        return this.settle(this, Settled.Error, payload);
      case 'timeout':
        this.abortForTimeout();
        return this.settle(this, Settled.Timeout, undefined);
      default:
        return this.settle(this, Settled.Aborted, undefined);
    }
  }

  /** Carries out one command of the operation. */
  private carry(cmd: Command, now: number): void {
    switch (cmd.kind) {
      case 'call':
        return this.call(cmd, now);
      case 'hedge':
        return this.sendHedge(cmd, now);
      case 'await':
        return;
      case 'wait':
        this.stopHedging();
        if (cmd.delayMs > 0) return this.waitFor(cmd.delayMs, now);
        // A zero wait: the next attempt after the current call stack (a driver's attempt
        // may settle inside its transport's callback), before any timer.
        this.phase = Phase.Waiting;
        queueMicrotask(() => {
          if (this.phase === Phase.Waiting) this.afterWait(now);
        });
        return;
      case 'check_state':
        return this.invoke(now, cmd.attempt, cmd.timeoutMs, cmd.remainingMs, this.options.stateCheck!);
      case 'end':
        this.stopHedging();
        if (this.flying !== null && this.flying.length > 0) this.abortOthers(cmd);
        return this.end(cmd);
    }
  }

  /** A call: the guard's protections first, in their order (a refusal makes no attempt and no attempt event). */
  private call(cmd: CallCommand, now: number): void {
    if (this.admitted) {
      // The driver entered the first attempt's gates itself (guard.admit()).
      this.admitted = false;
      return this.invoke(now, cmd.attempt, cmd.timeoutMs, cmd.remainingMs, null, cmd.hedgeInMs, false, cmd.inject ?? null);
    }
    this.enter(0, cmd, now);
  }

  /**
   * Enters the gates from `from` on: each grants at once, or is waited for (the slow
   * path: in line for a token or a slot, within the deadline and the caller's signal), or
   * refuses; then the call.
   */
  private enter(from: number, cmd: CallCommand, now: number): void {
    const gates = this.gates;
    for (let i = from; i < gates.length; i++) {
      const g = gates[i]!;
      if (g.tryEnter(now, g.refusal === 'circuit_open' ? this.clock.wallNow() : 0)) continue;
      if (g.wait === null) return this.refused(i, this.operation().slotRefused(g.refusal), now, null);
      this.phase = Phase.Slot;
      waitFor((signal) => g.wait!(this.clock.now(), cmd.remainingMs, signal), g.code!, this.clock, this.callerSignal, cmd.remainingMs).then(
        (r) => this.afterGate(i, r),
        (e: unknown) => this.end(CRASHED, { outcome: { ok: false, error: e } }),
      );
      return;
    }
    this.invoke(now, cmd.attempt, cmd.timeoutMs, cmd.remainingMs, null, cmd.hedgeInMs, false, cmd.inject ?? null);
  }

  /** The wait at gate `i` is over: on with the next gate (time and the caller permitting), or the end. */
  private afterGate(i: number, r: WaitResult): void {
    const now = this.clock.now();
    if (r.result === 'ok') {
      const cmd = this.callerSignal?.aborted ? this.op!.slotRefused('cancelled') : this.op!.slotGranted(now);
      if (cmd.kind === 'call') return this.enter(i + 1, cmd, now);
      return this.refused(i + 1, cmd, now, null);
    }
    this.refused(i, this.op!.slotRefused(r.result === 'refused' ? this.gates[i]!.refusal : r.result), now, r.result === 'refused' ? r.error : null);
  }

  /**
   * No call is made: the gates before `entered` hand back what they gave (a half-open
   * trial goes back to the breaker, a slot is freed), and the operation goes on or ends
   * (a limit's refusal says why).
   */
  private refused(entered: number, cmd: Command, now: number, error: unknown): void {
    this.exitGates(entered, null, false, null, now, now, 0);
    if (error !== null && cmd.kind === 'end')
      return this.end(cmd, refusalOutcome(cmd.reason, error, lastOutcomeOf<T>(this.settled, this.payload), this.last, this.operationId, this.op!.attempt));
    this.carry(cmd, now);
  }

  /** A hedge: another call alongside those in flight, only if every gate grants it now (a hedge never waits). */
  private sendHedge(cmd: HedgeCommand, now: number): void {
    const gates = this.gates;
    for (let i = 0; i < gates.length; i++) {
      const g = gates[i]!;
      if (!g.tryEnter(now, g.refusal === 'circuit_open' ? this.clock.wallNow() : 0)) return this.refused(i, this.op!.slotRefused(g.refusal), now, null);
    }
    this.invoke(now, cmd.attempt, cmd.timeoutMs, cmd.remainingMs, null, cmd.hedgeInMs, true, cmd.inject ?? null);
  }

  private armHedge(ms: number, now: number): void {
    this.cancelHedge?.();
    this.cancelHedge = this.clock.setTimer(
      () => {
        this.cancelHedge = null;
        if (this.phase !== Phase.Calling || this.op === undefined) return;
        const t = this.clock.now();
        this.carry(this.op.hedgeDue(t), t);
      },
      ms,
      now,
    );
  }

  private stopHedging(): void {
    if (this.cancelHedge !== null) {
      this.cancelHedge();
      this.cancelHedge = null;
    }
  }

  /**
   * The operation ended with attempts still in flight: each is aborted (its body never
   * reaches the caller), its slot given back, and it is recorded with its own event — a
   * hedge that lost (or, when the caller cancelled, a cancelled attempt).
   */
  private abortOthers(cmd: EndCommand): void {
    const flying = this.flying!;
    const now = this.clock.now();
    const d = cmd.reason === 'cancelled' ? CANCELLED_ATTEMPT : HEDGE_LOST;
    const reason =
      cmd.reason === 'cancelled' ? this.callerSignal?.reason : new RelentError('ERR_CANCELLED', 'relent: another attempt of this operation answered first');
    const wallNow = this.options.onEvent || this.scope !== null ? this.clock.wallNow() : 0;
    for (const ctx of flying.splice(0)) {
      if (ctx.done) continue;
      ctx.done = true;
      if (ctx.cancel !== null) ctx.cancel();
      if (ctx.delay !== null) {
        ctx.delay();
        ctx.delay = null;
      }
      // The attempt's signal aborts: a driver cuts what it has in flight for it.
      ctx.abort(reason);
      this.exitGates(this.gates.length, null, true, null, ctx.callStart, now, ctx.generation);
      const elapsed = now - ctx.callStart;
      this.op!.lost(elapsed);
      if (this.options.onEvent || ctx.aScope !== null) {
        const ev = attemptEvent(
          this.operationId,
          ctx.attempt,
          this.method,
          this.endpoint,
          { status: null, errorClass: 'aborted', elapsedMs: elapsed },
          ctx.remainingMs,
          d,
          wallNow,
          ctx.isHedge,
          ctx.inject?.kind ?? null,
        );
        if (this.options.onEvent) this.emit(ev);
        ctx.aScope?.end(ev);
      }
    }
  }

  /** Calls the operation (or the state check) with a timer and the caller's signal racing it. */
  private invoke(
    now: number,
    attempt: number,
    timeoutMs: number,
    remaining: number,
    check: AttemptFn<T> | null,
    hedgeInMs: number | null = null,
    hedge = false,
    inject: ChaosInjection | null = null,
  ): void {
    let ctx: AttemptHandle;
    if (attempt === 1 && check === null && this.timeoutMs === 0 && !this.done) {
      // The first attempt's context is this object.
      this.timeoutMs = timeoutMs;
      this.remainingMs = remaining;
      ctx = this; // eslint-disable-line @typescript-eslint/no-this-alias
    } else {
      ctx = new AttemptCtx(this, this.callerSignal, attempt, timeoutMs, remaining);
    }
    this.ctx = ctx;
    this.checking = check !== null;
    ctx.callStart = now;
    ctx.isHedge = hedge;
    if (check === null && this.gates.length > 0) {
      // The gates' note for this attempt (the adaptive limit's generation), read when it entered.
      let note = 0;
      for (const g of this.gates) note += g.note();
      ctx.generation = note;
    }
    this.phase = Phase.Calling;
    const flying = check === null ? this.flying : null;
    if (flying !== null) flying.push(ctx);
    const aScope = check === null && this.scope !== null ? this.scope.attempt(attempt, ctx) : null;
    ctx.aScope = aScope;
    // The caller's cancel reaches the attempt's signal at once, even while its function runs.
    if (this.callerSignal !== undefined) this.listenForAbort();
    if (inject !== null) {
      ctx.inject = inject;
      // Chaos: a fault or an outcome is the attempt's answer, and nothing is sent.
      if (inject.kind !== 'latency') return this.settle(ctx, Settled.Injected, inject);
      // A latency: the attempt's time runs from now; the call goes when the delay is over.
      this.armAttempt(ctx, flying, timeoutMs, hedgeInMs, now);
      ctx.delay = this.clock.setTimer(
        () => {
          ctx.delay = null;
          if (ctx.done) return;
          const late = this.send(ctx, check, aScope);
          if (late !== null) this.subscribe(ctx, late);
        },
        inject.delayMs,
        now,
      );
      this.afterSend();
      return;
    }
    const p = this.send(ctx, check, aScope);
    if (p === null) return;
    // The timers before the answer is subscribed to: a driver's thenable may answer at once (undici's synchronous failures).
    this.armAttempt(ctx, flying, timeoutMs, hedgeInMs, now);
    this.subscribe(ctx, p);
    this.afterSend();
  }

  /** The attempt's timer (its own when several may be in flight), and the next hedge's. */
  private armAttempt(ctx: AttemptHandle, flying: AttemptHandle[] | null, timeoutMs: number, hedgeInMs: number | null, now: number): void {
    if (flying !== null) {
      // Several attempts may be in flight: each has its own timer.
      ctx.cancel = this.clock.setTimer(() => this.onAttemptTimer(ctx), timeoutMs, now);
      if (hedgeInMs !== null) this.armHedge(hedgeInMs, now);
    } else {
      this.setTimer(timeoutMs, now);
    }
  }

  /** A cancel while the function ran (its synchronous part) ends the attempt now, as one after would. */
  private afterSend(): void {
    const signal = this.callerSignal;
    if (signal !== undefined) {
      this.listenForAbort();
      if (signal.aborted) this.onCallerAbort();
    }
  }

  /** Calls the attempt's function (or the state check): its answer to subscribe to, or null when the attempt ended meanwhile. */
  private send(ctx: AttemptHandle, check: AttemptFn<T> | null, aScope: AttemptScope | null): PromiseLike<T> | null {
    const fn = check ?? this.fn;
    let p: PromiseLike<T>;
    try {
      p = thenableOf(aScope !== null ? aScope.run(fn, ctx) : check !== null && this.scope !== null ? this.scope.run(fn, ctx) : fn(ctx));
    } catch (error) {
      p = Promise.reject(error);
    }
    if (ctx.done) {
      // Ended while the function ran: what it answers later is nobody's (never an unhandled rejection).
      try {
        p.then(undefined, ignore);
      } catch {
        // a thenable whose then throws: nothing to observe
      }
      return null;
    }
    return p;
  }

  private subscribe(ctx: AttemptHandle, p: PromiseLike<T>): void {
    try {
      p.then(
        (value) => this.settleOrFail(ctx, Settled.Value, value),
        (error: unknown) => this.settleOrFail(ctx, Settled.Error, error),
      );
    } catch (error) {
      // A thenable whose then throws: a failed attempt.
      this.settle(ctx, Settled.Error, error);
    }
  }

  /**
   * settle() from an answer's callback: whatever throws there (an injected clock or
   * instrumentation that fails) ends the operation with its error, where it would
   * otherwise be lost in a promise nobody holds and leave the caller waiting for good.
   */
  private settleOrFail(ctx: AttemptHandle, kind: Settled, payload: unknown): void {
    try {
      this.settle(ctx, kind, payload);
    } catch (error) {
      this.fail(error);
    }
  }

  private onAttemptTimer(ctx: AttemptHandle): void {
    ctx.cancel = null;
    if (ctx.done) return;
    ctx.abortForTimeout();
    this.settle(ctx, Settled.Timeout, undefined);
  }

  onTimerFired(): void {
    this.cancelTimer = null;
    if (this.phase === Phase.Waiting) return this.afterWait(this.clock.now());
    const ctx = this.ctx;
    if (ctx === null || ctx.done) return;
    ctx.abortForTimeout();
    this.settle(ctx, Settled.Timeout, undefined);
  }

  protected onCallerAbort(): void {
    if (this.phase === Phase.Calling && this.flying !== null && this.flying.length > 0) {
      // Hedging: the latest attempt ends as cancelled; the operation then aborts the others.
      const ctx = this.flying[this.flying.length - 1]!;
      ctx.abort(this.callerSignal?.reason);
      this.settle(ctx, Settled.Aborted, undefined);
    } else if (this.phase === Phase.Calling && this.ctx !== null && !this.ctx.done) {
      this.ctx.abort(this.callerSignal?.reason);
      this.settle(this.ctx, Settled.Aborted, undefined);
    } else if (this.phase === Phase.Waiting) {
      this.clearTimer();
      this.carry(this.op!.cancelled(), 0);
    }
  }

  /** One attempt has settled: observe it, tell the operation (the core decides), report, carry out what comes next. */
  settle(ctx: AttemptHandle, kind: Settled, payload: unknown): void {
    if (ctx.done) {
      // Settled after its time (the client's own retries may have outlasted the attempt): does the client retry?
      if (kind === Settled.Error) noticeClientRetries(payload);
      return;
    }
    ctx.done = true;
    if (ctx.delay !== null) {
      ctx.delay();
      ctx.delay = null;
    }
    if (ctx.cancel !== null) {
      ctx.cancel();
      ctx.cancel = null;
    } else this.clearTimer();
    if (this.checking) return this.settleCheck(kind, payload);
    const flying = this.flying;
    if (flying !== null) {
      const i = flying.indexOf(ctx);
      if (i >= 0) flying.splice(i, 1);
    }
    this.settled = kind;
    this.payload = payload;
    const options = this.options;
    let c: Classified;
    try {
      c = classifyAttempt(this.options, this.policy, this.callerSignal?.aborted === true, ctx, kind, payload);
    } catch (error) {
      // A classifier that throws (the caller's, or a value no classifier can read): the
      // operation ends with its error; the gates hear of an attempt that told nothing.
      this.exitGates(this.gates.length, null, true, null, ctx.callStart, this.clock.now(), ctx.generation);
      return this.fail(error);
    }
    // A plain answer that nobody watches needs no clock reading (the core ignores the time then).
    const status = (c as { status?: number }).status;
    const untimed =
      status !== undefined &&
      this.settleRun === null &&
      this.budget === null &&
      this.gates.length === 0 &&
      !options.onEvent &&
      ctx.aScope === null &&
      this.hedging === null &&
      isPlainAnswer(this.policy, status);
    if (untimed && kind === Settled.Value && this.op === undefined) {
      // The shortcut's end: the core's rule for a plain answer nobody watches (decide()'s
      // first: the answer, nothing to record). Nothing else to build.
      this.phase = Phase.Done;
      if (this.abortListener !== null) this.callerSignal!.removeEventListener('abort', this.abortListener);
      return this.resolveValue!(payload as T);
    }
    let op = this.op;
    if (op === undefined) {
      // The shortcut's first attempt needs the core after all: the operation starts when the attempt did.
      op = this.operation();
      op.start(this.startedAt);
    }
    let now: number;
    let obs: Observation;
    if (untimed) {
      now = ctx.callStart;
      obs = c === OK_200 ? UNTIMED_200 : observation(c, 0);
    } else {
      now = this.clock.now();
      obs = observation(c, now - ctx.callStart);
    }
    this.last = obs;
    // The wall clock is read only when something needs it (HTTP dates).
    const wallNow = obs.headers !== undefined ? this.clock.wallNow() : undefined;
    const cmd = op.answered(obs, now, wallNow, ctx.attempt);
    // The gates hear how the attempt ended (the slot is freed, timeouts included: an
    // operation that ignores its signal cannot hold it past its time).
    this.exitGates(this.gates.length, obs, kind === Settled.Aborted, op.decision, ctx.callStart, now, ctx.generation);
    const aScope = ctx.aScope;
    if (options.onEvent || aScope !== null) {
      const ev = attemptEvent(
        this.operationId,
        ctx.attempt,
        this.method,
        this.endpoint,
        obs,
        ctx.remainingMs,
        op.decision!,
        wallNow ?? this.clock.wallNow(),
        ctx.isHedge,
        ctx.inject?.kind ?? null,
      );
      if (options.onEvent) this.emit(ev);
      if (aScope !== null) aScope.end(ev);
      if (this.thrown !== null) return this.fail(this.thrown.error);
    }
    this.carry(cmd, now);
  }

  /**
   * Ends the operation with `error` (a classifier or an event listener threw): attempts
   * still in flight are aborted, no further attempt is made.
   */
  fail(error: unknown): void {
    if (this.phase === Phase.Done) return;
    this.clearTimer();
    this.stopHedging();
    if (this.flying !== null && this.flying.length > 0) this.abortOthers(CRASHED);
    this.end(CRASHED, { outcome: { ok: false, error } });
  }

  private waitFor(delay: number, now: number): void {
    this.phase = Phase.Waiting;
    if (this.callerSignal?.aborted) return this.carry(this.op!.cancelled(), now);
    if (this.callerSignal !== undefined) this.listenForAbort();
    this.setTimer(delay, now);
  }

  private afterWait(now: number): void {
    this.phase = Phase.Idle;
    this.carry(this.callerSignal?.aborted ? this.op!.cancelled() : this.op!.timerFired(now), now);
  }
}
