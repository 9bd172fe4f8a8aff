// The operation's contract with its drivers: the options it takes, the events it is fed
// and the commands it answers with (the Operation interface), and what a durable driver
// stores between attempts (OperationSnapshot). The machine itself is in operation.ts.
import type { RetryBudget } from './budget.js';
import type { SlotRefusal, Command } from './commands.js';
import type { OperationState } from './decide.js';
import type { HedgeState } from './hedge.js';
import type { Policy } from './policy.js';
import type { DecisionResult, Observation, Random } from './types.js';

export interface OperationOptions {
  /** For the idempotency rule and nothing else. */
  readonly method?: string | null;
  readonly idempotencyKey?: string | null;
  /** The caller's declaration: beats the key, the policy and the method. */
  readonly idempotent?: boolean | null;
  /** This operation's own deadline (ms from its start), instead of the policy's: longer or shorter. */
  readonly deadlineMs?: number | null;
  /** This operation's own attempt timeout (ms), instead of the policy's. */
  readonly attemptTimeoutMs?: number | null;
  /**
   * The deadline its caller was handed (ms from the start; e.g. what is left of an
   * incoming request's deadline): the operation ends by then, whatever its own deadline.
   */
  readonly callerDeadlineMs?: number | null;
  /** The shared retry budget (one per client or dependency). */
  readonly budget?: RetryBudget | null;
  /** The dependency's hedging state (one per dependency): with the policy's `hedge`, idempotent operations may hedge. */
  readonly hedging?: HedgeState | null;
  /** Uniform numbers in [0, 1) for jitter. */
  readonly random: Random;
  /** The driver is a durable queue: long waits are stored, never deferred, and an empty budget stops the operation. */
  readonly durable?: boolean;
  /**
   * The driver can read the real state after an unknown outcome (else the operation ends
   * with `check_state`). Anything but undefined, null or false says yes (a driver may pass
   * its state check function).
   */
  readonly stateCheck?: boolean | ((...args: never[]) => unknown) | null;
  /** false: no chaos injection, whatever the policy says (RELENT_CHAOS=off acts earlier, where policies are resolved). Default true. */
  readonly chaos?: boolean | null;
}

/** What a durable driver stores between attempts, to carry the operation on later (in another process). */
export interface OperationSnapshot {
  /** Attempts made so far. */
  readonly attempt: number;
  readonly startedAt: number;
  readonly deadlineAt: number;
  /** The last wait (decorrelated jitter), null before the first retry. */
  readonly prevDelayMs: number | null;
  /** Throttled attempts that did not count against maxAttempts. */
  readonly throttled: number;
  /** The attempt that carried the last gRPC pushback (absent: none; see OperationState.pushbackAt). */
  readonly pushbackAt?: number;
}

/** One operation in flight: the driver feeds it events and carries out the commands it returns. */
export interface Operation extends OperationState {
  readonly policy: Policy;
  /** The decision on the last attempt observed (null before the first answer). */
  readonly decision: DecisionResult | null;
  /** The operation begins at `now`: the first command (a call, unless nothing may be sent). */
  start(now: number): Command;
  /** Hedges sent so far. */
  readonly hedges: number;
  /** Whether the operation's answer came from a hedge. */
  readonly hedgeWon: boolean;
  /**
   * An attempt in flight ended: answered (`status`) or failed (`errorClass`; a timeout
   * is `timeout`, the caller's cancel `aborted`). `wallNow` (epoch ms) reads HTTP dates.
   * `attempt`: which one, when several are in flight (default: the latest).
   */
  answered(obs: Observation, now: number, wallNow?: number, attempt?: number): Command;
  /** The hedge timer of the last call or hedge command fired (a late one is ignored: `await`). */
  hedgeDue(now: number): Command;
  /** After the end: an attempt aborted because another answered first ran for `elapsedMs` (its latency is at least that). */
  lost(elapsedMs: number): void;
  /** The wait of the last `wait` command is over. */
  timerFired(now: number): Command;
  /** The driver could not make the call of the last `call` (or `hedge`) command: no attempt was made. A refused hedge is `await`. */
  slotRefused(why: SlotRefusal): Command;
  /** The driver waited for a slot and has it now: the call, with its time counted from `now`, or the end if the deadline passed (or less than the policy's minAttemptMs is left). */
  slotGranted(now: number): Command;
  /** While waiting for the shared budget: something else (a fleet budget) paid for the retry. */
  budgetGranted(now: number): Command;
  /** The caller cancelled between attempts (during a call, feed `answered` with `aborted`). */
  cancelled(): Command;
  /** The state check of the last `check_state` command is over (whatever it found). */
  checked(): Command;
  /** Time left before the deadline at `now`, ms (0 when spent). */
  remainingMs(now: number): number;
  /** For a durable driver: what to store while the operation waits. */
  snapshot(): OperationSnapshot;
}
