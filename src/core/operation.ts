import type { RetryBudget } from './budget.js';
import type { HedgeState } from './hedge.js';
import {
  advanceAttempt,
  attemptLimitMs,
  decide,
  isIdempotent,
  preflight,
  recordRetry,
  RETURN_NO_BID,
  RETURN_SUCCESS,
  type BudgetGate,
  type DecideContext,
  type MutableState,
} from './decide.js';
import { RelentError } from './errors.js';
import { drawChaos, type ChaosInjection, type ResolvedChaos } from './chaos.js';
import type { Policy } from './policy.js';
import type { DecisionResult, Observation, Random, TerminalReason } from './types.js';

/**
 * The loop of one operation, as a state machine that does no I/O (the "sans-I/O" shape
 * of h11 and quinn-proto). A driver feeds it what happened — the operation started, an
 * attempt was answered or failed, a timer fired, a slot was refused or granted, the
 * budget granted a retry — and carries out the command it returns:
 *
 *     let cmd = op.start(clock.now());
 *     for (;;) {
 *       switch (cmd.kind) {
 *         case 'call':        // make attempt cmd.attempt, cut it after cmd.timeoutMs
 *           cmd = op.answered(await attempt(cmd), clock.now()); break;
 *         case 'wait':        // sleep cmd.delayMs (abortable)
 *           await sleep(cmd.delayMs); cmd = op.timerFired(clock.now()); break;
 *         case 'check_state': // read the real state within cmd.timeoutMs
 *           await readState(cmd.timeoutMs); cmd = op.checked(); break;
 *         case 'end':         // cmd.reason, cmd.why, cmd.decision
 *           return cmd;
 *       }
 *     }
 *
 * (A driver that runs attempts side by side also handles `hedge` and `await`, below.)
 *
 * Every rule is decided here, once, for every driver: the deadline and the attempt
 * timeout, the decision on each attempt (`decide()`), the wait for an
 * empty shared budget, the state check's time, what a refused slot means. The driver
 * owns time (it passes `now`), randomness (`random`) and I/O; it never changes the
 * state itself. A command is read at once: the next event may replace it.
 *
 * Hedging (policy `hedge`, idempotent operations only, given a `hedging` state): a call
 * command says after how long without an answer another attempt may go (`hedgeInMs`);
 * the driver then feeds `hedgeDue(now)`, which answers `hedge` (make another call,
 * alongside those in flight) or `await` (nothing to do: extra load, budget, attempts or
 * time do not allow one, or the dependency is failing). While several attempts are in
 * flight `answered()` names the attempt; the first acceptable answer ends the
 * operation (the driver aborts the others and records them with the `HEDGE_LOST`
 * decision, and tells `lost()` how long each ran); a failure while others are in flight
 * is `await` (its decision `await_hedge`); the last one in flight is decided as ever.
 */
export type { AwaitCommand, CallCommand, CheckStateCommand, Command, EndCommand, HedgeCommand, SlotRefusal, WaitCommand } from './commands.js';
import type { CallCommand, Command, EndCommand, AwaitCommand, SlotRefusal } from './commands.js';

export type { Operation, OperationOptions, OperationSnapshot } from './operation-types.js';
import type { Operation, OperationOptions, OperationSnapshot } from './operation-types.js';

/**
 * A state check is made even when the deadline is already spent (the outcome must be
 * known): it then gets the attempt timeout, or this long when the policy has none.
 */
export const STATE_CHECK_TIMEOUT_MS = 1000;

/** An operation's deadline, ms from its start: its own (longer or shorter than the policy's) or the policy's, within its caller's. */
export function operationDeadlineMs(policy: Policy, o: Pick<OperationOptions, 'deadlineMs' | 'callerDeadlineMs'>): number {
  const own = o.deadlineMs;
  const deadlineMs = own !== undefined && own !== null && own > 0 ? own : policy.deadlineMs;
  const caller = o.callerDeadlineMs;
  return caller !== undefined && caller !== null && caller >= 0 && caller < deadlineMs ? caller : deadlineMs;
}

/** An operation's attempt timeout: its own or the policy's (null: each attempt gets the remaining time). */
export function operationAttemptTimeoutMs(policy: Policy, o: Pick<OperationOptions, 'attemptTimeoutMs'>): number | null {
  const own = o.attemptTimeoutMs;
  return own !== undefined && own !== null && own > 0 ? own : policy.attemptTimeoutMs;
}

const enum Phase {
  New,
  Calling,
  Waiting,
  Checking,
  Ended,
}

const END_SUCCESS: EndCommand = Object.freeze({ kind: 'end', reason: 'return', why: 'success', decision: RETURN_SUCCESS });
const END_NO_BID: EndCommand = Object.freeze({ kind: 'end', reason: 'return', why: 'no_bid', decision: RETURN_NO_BID });
const END_CANCELLED: EndCommand = Object.freeze({ kind: 'end', reason: 'cancelled', why: null, decision: null });
const END_BULKHEAD_FULL: EndCommand = Object.freeze({ kind: 'end', reason: 'bulkhead_full', why: null, decision: null });
const END_CONCURRENCY_LIMITED: EndCommand = Object.freeze({ kind: 'end', reason: 'concurrency_limited', why: null, decision: null });
const END_RATE_LIMITED: EndCommand = Object.freeze({ kind: 'end', reason: 'rate_limited', why: null, decision: null });

/** The decision of an attempt aborted because another attempt of its operation answered first. */
export const HEDGE_LOST: DecisionResult = Object.freeze({
  decision: 'hedge_lost',
  why: 'cancelled',
  delayMs: null,
  retryAfterMs: null,
  retryAfterValid: null,
  budgetCost: 0,
});
const DEADLINE_SPENT: DecisionResult = Object.freeze({
  decision: 'deadline_exceeded',
  why: 'deadline_spent',
  delayMs: null,
  retryAfterMs: null,
  retryAfterValid: null,
  budgetCost: 0,
});
const END_DEADLINE: EndCommand = Object.freeze({ kind: 'end', reason: 'deadline_exceeded', why: 'deadline_spent', decision: DEADLINE_SPENT });
const CIRCUIT_OPEN: DecisionResult = Object.freeze({
  decision: 'circuit_open',
  why: 'circuit_open',
  delayMs: null,
  retryAfterMs: null,
  retryAfterValid: null,
  budgetCost: 0,
});
const END_CIRCUIT_OPEN: EndCommand = Object.freeze({ kind: 'end', reason: 'circuit_open', why: 'circuit_open', decision: CIRCUIT_OPEN });

/**
 * decide()'s context for an attempt that ended while others of its operation are still
 * in flight: no retry is scheduled then, so the budget hears about the attempt but is
 * never charged for a retry.
 */
class ObserveOnly implements DecideContext {
  now = 0;
  wallNow: number | undefined = undefined;
  readonly budget: RetryBudget | null;

  constructor(
    readonly random: Random,
    b: RetryBudget | null,
    readonly durable: boolean,
  ) {
    this.budget =
      b === null
        ? null
        : {
            spec: b.spec,
            observe: (o, now) => b.observe(o, now),
            tryAcquire: () => 0,
            available: (now) => b.available(now),
            lastAnswerAt: () => b.lastAnswerAt(),
          };
  }
}

/** What a hedge costs the retry budget: one retry's price. */
const HEDGE_COST = Object.freeze({ throttled: false, timeout: false });

function endWith(d: DecisionResult): EndCommand {
  if (d === RETURN_SUCCESS) return END_SUCCESS;
  if (d === RETURN_NO_BID) return END_NO_BID;
  return { kind: 'end', reason: d.decision as TerminalReason, why: d.why, decision: d };
}

function misuse(event: string, phase: Phase): RelentError {
  const names = ['not started', 'calling', 'waiting', 'checking state', 'ended'];
  return new RelentError('ERR_INVALID_INPUT', `operation: \`${event}\` while ${names[phase]}`, { field: 'event' });
}

/**
 * The machine. Exported for the drivers of this package that pass their own options
 * object and defaults (no object per operation); users call createOperation().
 */
export class OperationMachine implements Operation, MutableState, BudgetGate, DecideContext {
  attempt = 0;
  startedAt = 0;
  deadlineAt = 0;
  idempotent: boolean;
  prevDelayMs: number | null = null;
  lastBudgetCost = 0;
  throttled = 0;
  budgetPending = false;
  pushbackAt = 0;
  decision: DecisionResult | null = null;
  readonly policy: Policy;
  readonly budget: RetryBudget | null;
  readonly random: Random;
  private phase = Phase.New;
  private readonly deadlineMs: number;
  private readonly attemptTimeoutMs: number | null;
  private readonly stateCheck: boolean;
  /** The decision context is the machine itself (no object per operation): `now` and `wallNow` of the event being decided. */
  now = 0;
  wallNow: number | undefined = undefined;
  readonly durable: boolean;
  /** Hedging: the dependency's state, when this operation may hedge (else null). */
  private readonly hedging: HedgeState | null;
  /** Attempts in flight. */
  private inFlight = 0;
  hedges = 0;
  hedgeWon = false;
  /** Attempt numbers that were hedges (only made when the operation hedges). */
  private hedgeAttempts: number[] | null = null;
  /** No more hedges in this operation (an attempt failed while another was in flight). */
  private noMoreHedges = false;
  /** The last command that started a call was a hedge (for slotRefused). */
  private lastWasHedge = false;
  /** decide()'s context for an attempt that fails while others are in flight: the budget is told, never charged. */
  private observeOnly: ObserveOnly | null = null;

  /** The call command, reused for every call of this operation. */
  private readonly callCmd: {
    kind: 'call';
    attempt: number;
    timeoutMs: number;
    remainingMs: number;
    hedgeInMs: number | null;
    inject: ChaosInjection | undefined;
  } = {
    kind: 'call',
    attempt: 0,
    timeoutMs: 0,
    remainingMs: 0,
    hedgeInMs: null,
    inject: undefined,
  };
  /** The policy's chaos, unless the driver turned it off. */
  private readonly chaos: ResolvedChaos | null;

  constructor(
    policy: Policy,
    o: Omit<OperationOptions, 'random' | 'budget' | 'hedging'>,
    budget: RetryBudget | null,
    random: Random,
    hedging: HedgeState | null = null,
  ) {
    this.policy = policy;
    this.budget = budget;
    this.random = random;
    this.idempotent = isIdempotent(policy, o);
    this.deadlineMs = operationDeadlineMs(policy, o);
    this.attemptTimeoutMs = operationAttemptTimeoutMs(policy, o);
    this.stateCheck = o.stateCheck !== undefined && o.stateCheck !== null && o.stateCheck !== false;
    this.durable = o.durable === true;
    this.chaos = o.chaos === false ? null : policy.chaos;
    // Only an idempotent operation hedges (never a POST without a key), and never in a durable queue.
    this.hedging = hedging !== null && policy.hedge !== null && this.idempotent && !this.durable ? hedging : null;
  }

  start(now: number): Command {
    if (this.phase !== Phase.New) throw misuse('start', this.phase);
    this.startedAt = now;
    this.deadlineAt = now + this.deadlineMs;
    if (this.hedging !== null) this.hedging.started(this.policy.hedge!);
    return this.next(now);
  }

  /** Restores a stored operation, waiting for its next attempt (see restoreOperation). */
  restore(s: OperationSnapshot): this {
    this.attempt = s.attempt;
    this.startedAt = s.startedAt;
    this.deadlineAt = s.deadlineAt;
    this.prevDelayMs = s.prevDelayMs;
    this.throttled = s.throttled;
    this.pushbackAt = s.pushbackAt ?? 0;
    this.phase = Phase.Waiting;
    return this;
  }

  /** The next attempt, if nothing forbids it (the deadline; a retry waiting for the budget asks it here). */
  private next(now: number): Command {
    const pre = preflight(this, now, this);
    if (pre !== null) {
      if (pre.decision === 'retry') {
        this.phase = Phase.Waiting;
        return { kind: 'wait', delayMs: pre.delayMs!, why: 'budget_wait' };
      }
      return this.end(endWith(pre));
    }
    advanceAttempt(this);
    this.phase = Phase.Calling;
    this.inFlight = 1;
    return this.call(now);
  }

  private call(now: number): CallCommand {
    const remaining = this.deadlineAt - now;
    const cmd = this.callCmd;
    cmd.attempt = this.attempt;
    cmd.timeoutMs = attemptLimitMs(this.attemptTimeoutMs, this.deadlineAt, now);
    cmd.remainingMs = remaining > 0 ? remaining : 0;
    cmd.hedgeInMs = this.hedging === null ? null : this.nextHedgeIn(now);
    cmd.inject = this.chaos === null ? undefined : (drawChaos(this.chaos, this.random) ?? undefined);
    return cmd;
  }

  /** When the next hedge may go (ms from now), or null when none may. */
  private nextHedgeIn(now: number): number | null {
    const spec = this.policy.hedge!;
    if (this.noMoreHedges || this.hedges >= spec.maxHedges) return null;
    const delay = this.hedging!.delayMs(spec);
    if (delay === null || !(delay < this.deadlineAt - now - this.policy.minAttemptMs)) return null;
    return delay;
  }

  hedgeDue(now: number): Command {
    this.lastWasHedge = false;
    if (this.phase !== Phase.Calling || this.hedging === null) return this.awaiting();
    const spec = this.policy.hedge!;
    const remaining = this.deadlineAt - now;
    // Attempts that count against maxAttempts, as decide() counts them.
    const counted = this.attempt - this.throttled;
    if (this.noMoreHedges || this.hedges >= spec.maxHedges || counted >= this.policy.maxAttempts || !(remaining > this.policy.minAttemptMs))
      return this.awaiting();
    // Extra load within maxExtraLoad, a dependency not failing, and a retry budget that pays for it.
    if (!this.hedging.mayHedge() || (this.budget !== null && this.budget.tryAcquire(HEDGE_COST, now) === false)) {
      this.hedging.skipped();
      return this.awaiting();
    }
    this.hedging.hedged();
    this.hedges++;
    advanceAttempt(this);
    (this.hedgeAttempts ??= []).push(this.attempt);
    this.inFlight++;
    this.lastWasHedge = true;
    return {
      kind: 'hedge',
      attempt: this.attempt,
      timeoutMs: attemptLimitMs(this.attemptTimeoutMs, this.deadlineAt, now),
      remainingMs: remaining,
      hedgeInMs: this.nextHedgeIn(now),
      inject: this.chaos === null ? undefined : (drawChaos(this.chaos, this.random) ?? undefined),
    };
  }

  private awaiting(): AwaitCommand {
    return { kind: 'await', inFlight: this.inFlight };
  }

  lost(elapsedMs: number): void {
    this.hedging?.observe(elapsedMs, false);
  }

  private end(cmd: EndCommand): EndCommand {
    this.phase = Phase.Ended;
    return cmd;
  }

  answered(obs: Observation, now: number, wallNow?: number, attempt?: number): Command {
    if (this.phase !== Phase.Calling) throw misuse('answered', this.phase);
    this.lastWasHedge = false;
    this.now = now;
    this.wallNow = wallNow;
    this.inFlight--;
    const hedging = this.hedging;
    if (hedging !== null) hedging.observe(obs.elapsedMs, this.isFailure(obs));
    if (this.inFlight > 0) return this.answeredWithOthers(obs, attempt ?? this.attempt);
    const d = decide(this.policy, this, obs, this);
    this.decision = d;
    switch (d.decision) {
      case 'return':
        if (this.hedgeAttempts !== null && this.hedgeAttempts.includes(attempt ?? this.attempt)) this.won();
        return this.end(endWith(d));
      case 'retry': {
        // Always a wait, even of 0 ms: a driver may fire a zero wait at once, a simulator
        // queues it behind what is already due, a durable queue stores it.
        recordRetry(this, d);
        this.phase = Phase.Waiting;
        return { kind: 'wait', delayMs: d.delayMs!, why: d.why === 'budget_wait' ? 'budget_wait' : 'retryable' };
      }
      case 'check_state': {
        if (!this.stateCheck) return this.end(endWith(d));
        this.phase = Phase.Checking;
        const remaining = this.deadlineAt - now;
        // The state must be read even when the deadline is spent: give it at least one attempt timeout.
        const timeoutMs = remaining > 0 ? attemptLimitMs(this.attemptTimeoutMs, this.deadlineAt, now) : (this.attemptTimeoutMs ?? STATE_CHECK_TIMEOUT_MS);
        return { kind: 'check_state', attempt: this.attempt, timeoutMs, remainingMs: remaining > 0 ? remaining : 0 };
      }
      case 'defer':
        // A wait handed to a durable queue: the driver stores it (decision.delayMs) with the snapshot.
        recordRetry(this, d);
        return this.end(endWith(d));
      default:
        return this.end(endWith(d));
    }
  }

  /** A failure that says the dependency is failing, not slow: one the policy retries, a timeout aside. */
  private isFailure(obs: Observation): boolean {
    const status = obs.status ?? null;
    if (status !== null) return this.policy.retryOnStatus.has(status);
    const e = obs.errorClass ?? null;
    return e !== null && e !== 'timeout' && e !== 'aborted' && this.policy.retryOnErrors.has(e);
  }

  private won(): void {
    this.hedgeWon = true;
    this.hedging?.won();
  }

  /**
   * An attempt ended while others of the operation are still in flight. An answer ends
   * the operation (the driver aborts the others); so do a cancel, a spent deadline and a
   * failure the policy would not retry. A failure it would retry (or one past
   * maxAttempts) waits for the others, and no more hedges go.
   */
  private answeredWithOthers(obs: Observation, attempt: number): Command {
    const d = decide(this.policy, this, obs, this.observeContext());
    switch (d.decision) {
      case 'return':
        this.decision = d;
        if (this.hedgeAttempts !== null && this.hedgeAttempts.includes(attempt)) this.won();
        return this.end(endWith(d));
      case 'retry':
      case 'max_attempts':
      case 'budget_exhausted':
        break;
      case 'not_retryable':
        if (d.why === 'retry_after_no_retry') {
          this.hedging?.noRetry();
          break;
        }
        this.decision = d;
        return this.end(endWith(d));
      default:
        this.decision = d;
        return this.end(endWith(d));
    }
    this.noMoreHedges = true;
    this.decision = {
      decision: 'await_hedge',
      why: d.why,
      delayMs: null,
      retryAfterMs: d.retryAfterMs,
      retryAfterValid: d.retryAfterValid,
      budgetCost: 0,
    };
    return this.awaiting();
  }

  /** decide()'s context with a budget that is told about the attempt but never charged (no retry is scheduled). */
  private observeContext(): DecideContext {
    const c = (this.observeOnly ??= new ObserveOnly(this.random, this.budget, this.durable));
    c.now = this.now;
    c.wallNow = this.wallNow;
    return c;
  }

  timerFired(now: number): Command {
    if (this.phase !== Phase.Waiting) throw misuse('timerFired', this.phase);
    return this.next(now);
  }

  slotRefused(why: SlotRefusal): Command {
    if (this.phase !== Phase.Calling) throw misuse('slotRefused', this.phase);
    // No call was made: the attempt does not count.
    this.attempt -= 1;
    this.inFlight -= 1;
    if (this.lastWasHedge) {
      // A hedge that found no slot is not made; the attempts in flight go on.
      this.lastWasHedge = false;
      this.hedges -= 1;
      this.hedgeAttempts!.pop();
      return this.awaiting();
    }
    switch (why) {
      case 'circuit_open':
        return this.end(END_CIRCUIT_OPEN);
      case 'bulkhead_full':
        return this.end(END_BULKHEAD_FULL);
      case 'concurrency_limited':
        return this.end(END_CONCURRENCY_LIMITED);
      case 'rate_limited':
        return this.end(END_RATE_LIMITED);
      case 'deadline':
        return this.end(END_DEADLINE);
      case 'cancelled':
        return this.end(END_CANCELLED);
    }
  }

  slotGranted(now: number): Command {
    if (this.phase !== Phase.Calling) throw misuse('slotGranted', this.phase);
    this.lastWasHedge = false;
    // After a wait for a slot or a token: a call with less than minAttemptMs left is not worth sending.
    const left = this.deadlineAt - now;
    if (left <= 0 || left <= this.policy.minAttemptMs) return this.slotRefused('deadline');
    return this.call(now);
  }

  budgetGranted(now: number): Command {
    if (this.phase !== Phase.Waiting) throw misuse('budgetGranted', this.phase);
    this.budgetPending = false;
    return this.next(now);
  }

  cancelled(): Command {
    if (this.phase === Phase.Ended) throw misuse('cancelled', this.phase);
    return this.end(END_CANCELLED);
  }

  checked(): Command {
    if (this.phase !== Phase.Checking) throw misuse('checked', this.phase);
    return this.end(endWith(this.decision!));
  }

  remainingMs(now: number): number {
    const r = this.deadlineAt - now;
    return r > 0 ? r : 0;
  }

  snapshot(): OperationSnapshot {
    const s: OperationSnapshot = {
      attempt: this.attempt,
      startedAt: this.startedAt,
      deadlineAt: this.deadlineAt,
      prevDelayMs: this.prevDelayMs,
      throttled: this.throttled,
    };
    // Said only after a pushback: stored snapshots keep their shape otherwise.
    return this.pushbackAt > 0 ? { ...s, pushbackAt: this.pushbackAt } : s;
  }
}

/** A new operation under `policy`; `start(now)` gives its first command. */
export function createOperation(policy: Policy, options: OperationOptions): Operation {
  return new OperationMachine(policy, options, options.budget ?? null, options.random, options.hedging ?? null);
}

/**
 * An operation a durable driver stored between attempts (see `snapshot()`), waiting
 * for its next attempt: feed `timerFired(now)` when the wait is over.
 */
export function restoreOperation(policy: Policy, snapshot: OperationSnapshot, options: OperationOptions): Operation {
  return new OperationMachine(policy, options, options.budget ?? null, options.random).restore(snapshot);
}
