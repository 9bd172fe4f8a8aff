// The commands the operation state machine (operation.ts) hands its driver, and why a
// driver could not make a call. Types only.
import type { ChaosInjection } from './chaos.js';
import type { DecisionResult, DecisionWhy, TerminalReason } from './types.js';

export type Command = CallCommand | HedgeCommand | WaitCommand | AwaitCommand | CheckStateCommand | EndCommand;

/** Make attempt `attempt` now; it may take `timeoutMs`, then it is a `timeout`. (The operation reuses this object: read it at once.) */
export interface CallCommand {
  readonly kind: 'call';
  /** 1-based attempt number (the identity of this call). */
  readonly attempt: number;
  /** min(attempt timeout, remaining), ms. */
  readonly timeoutMs: number;
  /** Time left in the operation when the attempt starts, ms. */
  readonly remainingMs: number;
  /** Hedging: if no attempt has answered after this many ms, feed `hedgeDue(now)`; null: no hedge is planned. */
  readonly hedgeInMs: number | null;
  /**
   * The policy's chaos for this attempt (undefined: a plain call). `fault` and `outcome`: make
   * no call, feed `answered(injectedObservation(inject), now)` at once; `latency`: make
   * the call `delayMs` later, within `timeoutMs`.
   */
  readonly inject?: ChaosInjection;
}

/** Make attempt `attempt` now, alongside the attempts in flight (a hedge); as a call otherwise. */
export interface HedgeCommand {
  readonly kind: 'hedge';
  readonly attempt: number;
  readonly timeoutMs: number;
  readonly remainingMs: number;
  /** The next hedge: after this many more ms without an answer, feed `hedgeDue(now)` again; null: no more. */
  readonly hedgeInMs: number | null;
  /** As a call's. */
  readonly inject?: ChaosInjection;
}

/** Nothing to do now: the attempts in flight (`inFlight`) go on; feed their answers as they come. */
export interface AwaitCommand {
  readonly kind: 'await';
  readonly inFlight: number;
}

/** Wait `delayMs` (0: the next attempt may start at once), then feed `timerFired(now)`. */
export interface WaitCommand {
  readonly kind: 'wait';
  readonly delayMs: number;
  /** `retryable`: a backoff or the server's wait; `budget_wait`: the shared budget is empty, ask it again after the wait. */
  readonly why: 'retryable' | 'budget_wait';
}

/** The outcome is unknown and the operation may not be repeated: read the real state within `timeoutMs`, then feed `checked()`. */
export interface CheckStateCommand {
  readonly kind: 'check_state';
  /** The attempt whose outcome is unknown. */
  readonly attempt: number;
  readonly timeoutMs: number;
  readonly remainingMs: number;
}

/** The operation is over. */
export interface EndCommand {
  readonly kind: 'end';
  readonly reason: TerminalReason;
  /** Why, one level finer (null when the caller cancelled between attempts or a slot was refused). */
  readonly why: DecisionWhy | null;
  /** The decision that ended the operation (its `retryAfterMs` is the server's asked wait, its `delayMs` a deferral's wait). */
  readonly decision: DecisionResult | null;
}

/** Why a driver could not make the call the operation asked for. */
export type SlotRefusal =
  /** The dependency's circuit breaker is open. */
  | 'circuit_open'
  /** The dependency's bulkhead queue is full. */
  | 'bulkhead_full'
  /** The dependency's adaptive concurrency limit is reached and its queue is full. */
  | 'concurrency_limited'
  /** The dependency's rate limit has no token for this call within the time it may wait. */
  | 'rate_limited'
  /** The deadline passed while waiting for a slot. */
  | 'deadline'
  /** The caller cancelled while waiting for a slot. */
  | 'cancelled';
