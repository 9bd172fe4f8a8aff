import { computeBackoff } from './backoff.js';
import { SERVING_WINDOW_MS, type BudgetObservation, type RetryBudget } from './budget.js';
import { RelentError } from './errors.js';
import { AMZ_RETRY_AFTER_HEADER, AMZ_RETRY_AFTER_SLACK_MS, readServerHint } from './hints.js';
import { GRPC_PUSHBACK_HEADER } from './propagation.js';
import { ERROR_CLASSES, IDEMPOTENT_METHODS, type Policy } from './policy.js';
import type { Decision, DecisionResult, DecisionWhy, Observation, Random, SendState } from './types.js';

/**
 * What the core knows about one operation between attempts; decide() reads it. The
 * operation state machine (`createOperation()`, operation.ts) keeps it and moves it
 * forward in place (advanceAttempt, recordRetry, below); drivers feed the machine events
 * and never change or interpret the state themselves.
 */
export interface OperationState {
  /** The attempt being made or just observed (1-based); 0 before the first call. */
  readonly attempt: number;
  /** Monotonic ms when the operation began. */
  readonly startedAt: number;
  /** Monotonic ms when the operation's deadline passes. */
  readonly deadlineAt: number;
  /** Whether repeating the operation is safe, fixed at the operation's start. */
  readonly idempotent: boolean;
  /** The previous wait (decorrelated jitter), null before the first retry. */
  readonly prevDelayMs: number | null;
  /** What the previous retry cost the budget (AWS refunds it on success). */
  readonly lastBudgetCost: number;
  /** Throttled attempts so far that did not count against maxAttempts (absent: 0). */
  readonly throttled?: number;
  /** The next retry is not paid for yet (budgetExhausted: "wait"): preflight must pass the budget gate. */
  readonly budgetPending?: boolean;
  /**
   * The attempt whose answer carried the last valid `grpc-retry-pushback-ms` (absent: 0):
   * the backoff counts its retries from there (gRPC A6: "n counts since the last server
   * pushback response").
   */
  readonly pushbackAt?: number;
}

/** What the idempotency rule reads of an operation's options. */
export interface IdempotencyOptions {
  readonly method?: string | null;
  readonly idempotencyKey?: string | null;
  /** The caller's declaration: beats the key, the policy and the method. */
  readonly idempotent?: boolean | null;
}

export interface DecideContext {
  /** Monotonic now, in ms. */
  readonly now: number;
  /** Wall clock (epoch ms), used only to read HTTP dates. */
  readonly wallNow?: number;
  readonly random: Random;
  /** The shared retry budget, when the driver keeps one. decide() records into it. */
  readonly budget?: RetryBudget | null;
  /** True when the driver IS the durable queue: long waits are scheduled, never deferred. */
  readonly durable?: boolean;
}

/**
 * Idempotency: the caller's declaration beats an idempotency key, which beats the
 * policy's declaration, which beats the method. An operation without a method (a
 * plain function given to run()) is idempotent unless declared otherwise.
 */
export function isIdempotent(policy: Policy, o: IdempotencyOptions): boolean {
  if (typeof o.idempotent === 'boolean') return o.idempotent;
  if (typeof o.idempotencyKey === 'string' && o.idempotencyKey.length > 0) return true;
  if (policy.idempotent !== null) return policy.idempotent;
  if (typeof o.method === 'string' && o.method.length > 0) return IDEMPOTENT_METHODS.has(o.method.toUpperCase());
  return true;
}

/** A state the core moves forward in place (the operation state machine's own, see operation.ts). */
export type MutableState = { -readonly [K in keyof OperationState]: OperationState[K] };

/** In place: the next attempt begins. */
export function advanceAttempt(state: MutableState): void {
  state.attempt += 1;
  state.throttled = state.throttled ?? 0;
  state.budgetPending = false;
}

/** In place: a `retry` (or `defer`) decision is remembered: its wait, its cost, a throttle that did not count, an unpaid budget. */
export function recordRetry(state: MutableState, result: DecisionResult): void {
  state.prevDelayMs = result.delayMs;
  state.lastBudgetCost = result.budgetCost;
  state.throttled = (state.throttled ?? 0) + (result.uncounted === true ? 1 : 0);
  state.budgetPending = result.budgetPending === true;
  if (result.pushback === true) state.pushbackAt = state.attempt;
}

/** What preflight() needs to charge a retry that waited for the budget. */
export interface BudgetGate {
  readonly policy: Policy;
  readonly budget: RetryBudget | null;
  readonly random: Random;
}

/**
 * Before an attempt: null to go ahead; a terminal decision that forbids the call;
 * or, for a retry still waiting for the shared budget (budgetExhausted: "wait"), a
 * `retry` to wait `delayMs` more and ask again. A driver that passes no gate cannot wait:
 * an unpaid retry then ends with budget_exhausted, as under budgetExhausted: "stop".
 */
export function preflight(state: OperationState, now: number, gate?: BudgetGate): DecisionResult | null {
  const remaining = state.deadlineAt - now;
  if (remaining <= 0) return terminal('deadline_exceeded', 'deadline_spent', null);
  if (state.budgetPending !== true) return null;
  if (!gate) return terminal('budget_exhausted', 'budget_empty', null);
  if (gate.budget === null) return null;
  if (gate.budget.tryAcquire({ throttled: false, timeout: false }, now) !== false) return null;
  // Still empty: wait one more backoff slot (at least 10 ms), if another attempt still
  // fits and the dependency is still answering someone (else waiting cannot pay off).
  if (!serving(gate.budget, now)) return terminal('budget_exhausted', 'budget_empty', null);
  const policy = gate.policy;
  const slot = Math.max(10, computeBackoff(policy.backoff, state.attempt - 1, state.prevDelayMs, gate.random));
  if (!(slot < remaining - policy.minAttemptMs)) return terminal('budget_exhausted', 'budget_empty', null);
  return { decision: 'retry', why: 'budget_wait', delayMs: slot, retryAfterMs: null, retryAfterValid: null, budgetCost: 0, budgetPending: true };
}

/** Whether the dependency answered an attempt of this budget's client recently (see SERVING_WINDOW_MS). */
function serving(budget: RetryBudget, now: number): boolean {
  const at = budget.lastAnswerAt();
  return at !== null && now - at <= SERVING_WINDOW_MS;
}

/** The time one attempt may take: min(attemptTimeoutMs, remaining). */
export function attemptBudgetMs(policy: Policy, state: OperationState, now: number): number {
  return attemptLimitMs(policy.attemptTimeoutMs, state.deadlineAt, now);
}

/** min(attempt timeout, time left before `deadlineAt`), never negative: the one rule for an attempt's time. */
export function attemptLimitMs(attemptTimeoutMs: number | null, deadlineAt: number, now: number): number {
  const remaining = deadlineAt - now;
  if (!(remaining > 0)) return 0;
  return attemptTimeoutMs !== null && attemptTimeoutMs < remaining ? attemptTimeoutMs : remaining;
}

/**
 * An observation that took longer than the attempt was allowed becomes a `timeout`
 * at that bound (used by drivers that replay or simulate time).
 */
export function boundObservation(obs: Observation, boundMs: number): Observation {
  if (obs.elapsedMs > boundMs) return { errorClass: 'timeout', elapsedMs: boundMs, sent: 'unknown' };
  return obs;
}

/** Whether request bytes may have left the machine. */
export function sendStateOf(obs: Observation): SendState {
  if (obs.sent) return obs.sent;
  if (obs.status !== undefined && obs.status !== null) return 'sent';
  return obs.errorClass ? ERROR_CLASSES[obs.errorClass].sent : 'unknown';
}

export const RETURN_SUCCESS: DecisionResult = Object.freeze({
  decision: 'return',
  why: 'success',
  delayMs: null,
  retryAfterMs: null,
  retryAfterValid: null,
  budgetCost: 0,
});
/** An OpenRTB no-bid: the answer, built once (an exchange's most frequent answer). */
export const RETURN_NO_BID: DecisionResult = Object.freeze({ ...RETURN_SUCCESS, why: 'no_bid' });

function terminal(decision: Decision, why: DecisionWhy, hint: { ms: number | null; valid: boolean | null } | null): DecisionResult {
  return { decision, why, delayMs: null, retryAfterMs: hint?.ms ?? null, retryAfterValid: hint?.valid ?? null, budgetCost: 0 };
}

/**
 * A status the policy takes as the answer, no questions asked (below 400 and not in
 * retryOn). For such an attempt decide() needs neither the time nor randomness, so a
 * driver with nothing else to do (no events, budget or breaker) may skip reading the
 * clock.
 */
export function isPlainAnswer(policy: Policy, status: number): boolean {
  return status < 400 && !policy.retryOnStatus.has(status);
}

const FIRST_PLAIN_ANSWER: BudgetObservation = Object.freeze({
  attempt: 1,
  success: true,
  retryableFailure: false,
  throttled: false,
  timeout: false,
  lastCost: 0,
});

/**
 * What a plain answer (isPlainAnswer) tells the shared budget, in decide() and in a
 * driver that takes a plain answer to its first attempt as the answer without decide().
 */
export function observePlainAnswer(budget: RetryBudget, attempt: number, lastCost: number, now: number): void {
  budget.observe(
    attempt === 1 && lastCost === 0 ? FIRST_PLAIN_ANSWER : { attempt, success: true, retryableFailure: false, throttled: false, timeout: false, lastCost },
    now,
  );
}

/**
 * The one answer to "retry, stop, or check state, and after how long?"
 *
 * Pure: reads no clock and draws no randomness of its own (both come in `ctx`), does
 * no I/O. Its only effect is on the shared budget handed in `ctx.budget`, which it
 * tells about the attempt and, for a retry, charges.
 *
 * `state.attempt` is the attempt that produced `obs`.
 */
export function decide(policy: Policy, state: OperationState, obs: Observation, ctx: DecideContext): DecisionResult {
  const status = obs.status ?? null;
  const errorClass = obs.errorClass ?? null;
  if ((status === null) === (errorClass === null)) {
    throw new RelentError('ERR_INVALID_INPUT', 'An observation has exactly one of `status` and `errorClass`', { field: 'observation' });
  }
  const budget = ctx.budget ?? null;

  // Fast path: an answer the policy does not retry.
  if (status !== null && isPlainAnswer(policy, status)) {
    if (budget) observePlainAnswer(budget, state.attempt, state.lastBudgetCost, ctx.now);
    return obs.nbr !== undefined && obs.nbr !== null ? RETURN_NO_BID : RETURN_SUCCESS;
  }
  if (errorClass === 'aborted') return terminal('cancelled', 'cancelled', null);
  // An OpenRTB no-bid reason is an answer, whatever the status.
  if (obs.nbr !== undefined && obs.nbr !== null) return RETURN_NO_BID;

  const hint = status !== null ? readServerHint(policy, obs, ctx.wallNow) : null;
  // retryAfterValid is about the Retry-After header: null when the hint came from a rate-limit field.
  const hintSeen = hint ? { ms: hint.valid && !hint.noRetry ? hint.delayMs : null, valid: hint.source === 'retry-after' ? hint.valid : null } : null;
  const throttled = status !== null && policy.throttleStatuses.has(status);
  const timeout = errorClass === 'timeout';

  let retryable: boolean;
  let safe: boolean;
  if (status !== null) {
    // retryOn.statusWithWait (413 by default): retryable only when the server said how long to wait.
    retryable = policy.retryOnStatus.has(status) || (hint !== null && hint.valid && !hint.noRetry && policy.retryOnStatusWithWait.has(status));
    safe = state.idempotent || policy.safeStatuses.has(status);
  } else {
    retryable = policy.retryOnErrors.has(errorClass!);
    safe = state.idempotent || sendStateOf(obs) === 'not_sent';
  }
  if (budget) {
    // gRPC A6 counts a "don't retry" pushback as a failure too, whatever the status.
    const failure = retryable || (hint !== null && hint.noRetry && hint.source === GRPC_PUSHBACK_HEADER);
    budget.observe({ attempt: state.attempt, success: false, retryableFailure: failure, throttled, timeout, lastCost: state.lastBudgetCost }, ctx.now);
  }

  // Sent but unanswered, and not safe to repeat → read the state, never send again.
  if (status === null && !safe && policy.unknownOutcome === 'check_state') return terminal('check_state', 'unknown_outcome', null);
  if (!retryable) return terminal('not_retryable', status !== null ? 'status_not_retryable' : 'error_not_retryable', hintSeen);
  if (!safe) return terminal('not_retryable', 'not_idempotent', hintSeen);

  // The deadline and the attempt count are separate reasons.
  const remaining = state.deadlineAt - ctx.now;
  if (remaining <= 0) return terminal('deadline_exceeded', 'deadline_spent', hintSeen);
  // A throttled attempt may not count against maxAttempts (the policy's choice); then
  // maxThrottledAttempts bounds how often the operation may be throttled.
  const prevUncounted = state.throttled ?? 0;
  const uncounted = throttled && !policy.throttleCountsAsAttempt;
  if (uncounted) {
    if (prevUncounted + 1 > policy.maxThrottledAttempts) return terminal('max_attempts', 'attempts_exhausted', hintSeen);
  } else if (state.attempt - prevUncounted >= policy.maxAttempts) {
    return terminal('max_attempts', 'attempts_exhausted', hintSeen);
  }

  const mayDefer = policy.deferOverMs !== null && ctx.durable !== true;
  const room = remaining - policy.minAttemptMs;
  // The policy's own wait: the throttle backoff after a throttling status, else the backoff.
  const ownDelay = (): number => {
    const spec = throttled && policy.throttleBackoff ? policy.throttleBackoff : policy.backoff;
    // n counts retries of this kind: throttled ones for a throttle backoff that does not count;
    // after a gRPC pushback, the retries since it (A6: back to initialBackoff).
    const n = uncounted ? prevUncounted : Math.max(0, state.attempt - 1 - (policy.throttleCountsAsAttempt ? 0 : prevUncounted) - (state.pushbackAt ?? 0));
    return computeBackoff(spec, n, state.prevDelayMs, ctx.random);
  };
  let delay: number;
  let pushback = false;
  if (hint && hint.valid && hint.noRetry) {
    return terminal('not_retryable', 'retry_after_no_retry', hintSeen);
  } else if (hint && hint.valid && hint.source === GRPC_PUSHBACK_HEADER) {
    // gRPC A6: "retry after exactly that delay" (no jitter; never lengthened), within the
    // cap and the deadline like any server wait; later retries back off from the start.
    delay = hint.delayMs;
    pushback = true;
    if (delay > policy.retryAfter.maxMs) return terminal('not_retryable', 'retry_after_over_cap', hintSeen);
    if (!(delay < room)) return mayDefer ? deferred(delay, hintSeen, uncounted) : terminal('deadline_exceeded', 'retry_after_past_deadline', hintSeen);
  } else if (hint && hint.valid && hint.source === AMZ_RETRY_AFTER_HEADER) {
    // The AWS SDKs (2026): max(t_i, min(asked, t_i + 5 s)) — the policy's own wait,
    // lengthened by the server's, by at most 5 s.
    const own = ownDelay();
    delay = Math.max(own, Math.min(hint.delayMs, own + AMZ_RETRY_AFTER_SLACK_MS));
    if (!(delay < room)) return mayDefer ? deferred(delay, hintSeen, uncounted) : terminal('deadline_exceeded', 'retry_after_past_deadline', hintSeen);
  } else if (hint && hint.valid) {
    // Never earlier than the server asked; a small positive jitter after it. Over the
    // cap stops, however far away the server's wait is (never a quick retry instead).
    const asked = hint.delayMs;
    if (asked > policy.retryAfter.maxMs) return terminal('not_retryable', 'retry_after_over_cap', hintSeen);
    const ra = policy.retryAfter;
    const spread = Math.min(ra.jitterMaxMs, Math.max(ra.jitterMinMs, asked * ra.jitterRatio));
    let jitter = Math.floor(ctx.random() * spread);
    if (asked + jitter > ra.maxMs) jitter = ra.maxMs - asked;
    if (asked < room && asked + jitter >= room) jitter = Math.max(0, Math.ceil(room) - 1 - asked);
    delay = asked + jitter;
    // lengthenOnly: the server's wait may lengthen the policy's own wait, never shorten it.
    let why: DecisionWhy = 'retry_after_past_deadline';
    if (ra.lengthenOnly) {
      const own = ownDelay();
      if (own > delay) {
        delay = own;
        why = 'delay_past_deadline';
      }
    }
    if (!(delay < room)) {
      return mayDefer ? deferred(delay, hintSeen, uncounted) : terminal('deadline_exceeded', why, hintSeen);
    }
  } else {
    delay = ownDelay();
    if (!(delay < room)) {
      return mayDefer ? deferred(delay, hintSeen, uncounted) : terminal('deadline_exceeded', 'delay_past_deadline', hintSeen);
    }
  }
  if (mayDefer && delay > policy.deferOverMs!) return deferred(delay, hintSeen, uncounted);

  // The shared budget is the last gate, so a retry that would not happen anyway costs nothing.
  let cost = 0;
  if (budget) {
    const paid = budget.tryAcquire({ throttled, timeout }, ctx.now);
    if (paid === false) {
      // A durable queue stores the state between attempts and has no gate to wait at: it stops.
      if (policy.budgetExhausted !== 'wait' || ctx.durable === true || !serving(budget, ctx.now)) return terminal('budget_exhausted', 'budget_empty', hintSeen);
      // Keep the retry; preflight() charges the budget when it is about to be sent.
      const waiting: DecisionResult = {
        decision: 'retry',
        why: 'budget_wait',
        delayMs: delay,
        retryAfterMs: hintSeen?.ms ?? null,
        retryAfterValid: hintSeen?.valid ?? null,
        budgetCost: 0,
        uncounted,
        budgetPending: true,
      };
      return pushback ? { ...waiting, pushback } : waiting;
    }
    cost = paid;
  }
  const result: DecisionResult = {
    decision: 'retry',
    why: 'retryable',
    delayMs: delay,
    retryAfterMs: hintSeen?.ms ?? null,
    retryAfterValid: hintSeen?.valid ?? null,
    budgetCost: cost,
    uncounted,
  };
  return pushback ? { ...result, pushback } : result;
}

/** A wait too long to sleep through: hand it to a durable queue (always why 'defer_long_wait'). */
function deferred(delay: number, hint: { ms: number | null; valid: boolean | null } | null, uncounted: boolean): DecisionResult {
  return {
    decision: 'defer',
    why: 'defer_long_wait',
    delayMs: delay,
    retryAfterMs: hint?.ms ?? null,
    retryAfterValid: hint?.valid ?? null,
    budgetCost: 0,
    uncounted,
  };
}
