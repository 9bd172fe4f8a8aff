// The closed vocabularies of relent. Everything that crosses a
// module boundary is one of these shapes; free text never decides anything.

/**
 * What the client saw when no response arrived. A closed set: drivers map every
 * transport failure onto one of these (see `ERROR_CLASSES` for the meaning of each).
 */
export type ErrorClass =
  | 'connect_refused' // nothing listens: request bytes never left the machine
  | 'dns' // name did not resolve: never sent
  | 'connect_timeout' // TCP connect did not finish: never sent
  | 'tls' // TLS handshake failed: never sent
  | 'timeout' // no (complete) response within the attempt time: outcome unknown
  | 'reset' // connection reset: outcome unknown
  | 'socket_closed' // connection closed before a full response: outcome unknown
  | 'protocol' // the peer answered something that is not valid HTTP: outcome unknown
  | 'aborted' // the caller cancelled: never retried
  | 'error'; // an operation threw something relent cannot classify (generic run())

/** Whether the request may have reached the server when the attempt failed. */
export type SendState = 'not_sent' | 'sent' | 'unknown';

/** One attempt's result: a status XOR an errorClass, never both, never neither. */
export interface Observation {
  readonly status?: number | null;
  readonly errorClass?: ErrorClass | null;
  /** Whether request bytes may have left the machine; inferred from the class when absent. */
  readonly sent?: SendState;
  /** Response headers with lower-case names, as received. */
  readonly headers?: Readonly<Record<string, string>>;
  /** An OpenRTB no-bid reason found in the body: an answer, never retried. */
  readonly nbr?: number | null;
  /** How long the attempt took, in ms. */
  readonly elapsedMs: number;
}

/**
 * What the caller does next. `retry` continues the operation; `await_hedge` and
 * `hedge_lost` are about one attempt of a hedged operation (it failed while another
 * attempt is still in flight; it was aborted because another attempt won); the rest end
 * the operation.
 */
export type Decision =
  | 'return'
  | 'retry'
  | 'check_state'
  | 'deadline_exceeded'
  | 'max_attempts'
  | 'not_retryable'
  | 'budget_exhausted'
  | 'circuit_open'
  | 'bulkhead_full'
  | 'concurrency_limited'
  | 'rate_limited'
  | 'cancelled'
  | 'defer'
  | 'await_hedge'
  | 'hedge_lost';

/** How an operation ends. */
export type TerminalReason = Exclude<Decision, 'retry' | 'await_hedge' | 'hedge_lost'>;

/**
 * Why the decision was taken, one level finer than `Decision` (also a closed set);
 * drivers turn it into error messages and error codes.
 */
export type DecisionWhy =
  | 'success' // status counts as an answer (2xx, 1xx, 3xx not in retryOn)
  | 'no_bid' // an OpenRTB nbr: an answer
  | 'retryable' // the retry is scheduled
  | 'status_not_retryable' // status outside retryOn
  | 'error_not_retryable' // error class outside retryOn
  | 'not_idempotent' // a retryable failure of an operation that may not be repeated
  | 'unknown_outcome' // sent but unanswered, and not idempotent → read state instead
  | 'attempts_exhausted'
  | 'deadline_spent' // no time left at all
  | 'delay_past_deadline' // the wait (plus the minimum attempt time) does not fit
  | 'retry_after_over_cap' // the server asked for a wait longer than the policy allows
  | 'retry_after_past_deadline' // the server's wait does not fit the deadline
  | 'retry_after_no_retry' // a hint that says "do not retry" (e.g. negative gRPC pushback)
  | 'budget_empty'
  | 'budget_wait' // the budget is empty; the retry waits for it (policy budgetExhausted: "wait")
  | 'defer_long_wait' // the wait is longer than the policy lets a process sleep
  | 'cancelled'
  | 'circuit_open';

export interface DecisionResult {
  readonly decision: Decision;
  readonly why: DecisionWhy;
  /** The chosen wait before the next attempt (retry or defer), integer ms; null otherwise. */
  readonly delayMs: number | null;
  /** The server-requested wait from Retry-After (or a RateLimit field), when a header was seen. */
  readonly retryAfterMs: number | null;
  /** true/false when a Retry-After header was seen, null when none was. */
  readonly retryAfterValid: boolean | null;
  /** What the retry cost the shared budget (0 when none was charged). */
  readonly budgetCost: number;
  /**
   * The attempt was throttled (429) under a policy whose throttled attempts do not count
   * against maxAttempts (`throttleCountsAsAttempt: false`); the operation remembers it (recordRetry).
   */
  readonly uncounted?: boolean;
  /** The retry has not been paid for: the driver must pass the budget gate in preflight() before sending it. */
  readonly budgetPending?: boolean;
  /** The wait is a gRPC server pushback (`grpc-retry-pushback-ms`): later retries back off from the start (A6). */
  readonly pushback?: boolean;
}

/** One event per attempt, emitted before the next call. */
export interface AttemptEvent {
  readonly type: 'attempt';
  readonly operationId: string;
  readonly requestId: string;
  readonly attempt: number;
  readonly method: string | null;
  readonly endpoint: string | null;
  readonly status: number | null;
  readonly errorClass: ErrorClass | null;
  readonly elapsedMs: number;
  readonly remainingMs: number;
  readonly decision: Decision;
  readonly delayMs: number | null;
  readonly retryAfterMs: number | null;
  readonly retryAfterValid: boolean | null;
  /** When the attempt was decided: wall-clock epoch ms, from the driver's (injected) clock. */
  readonly ts: number;
  /** Present (true) only on a hedge: an attempt sent while another of the operation was in flight. */
  readonly hedge?: true;
  /** Present only on an attempt the policy's chaos injected into: a fault or an outcome (nothing was sent), or a latency. */
  readonly injected?: 'fault' | 'outcome' | 'latency';
}

/** The terminal summary of one operation. */
export interface ResultEvent {
  readonly type: 'result';
  readonly operationId: string;
  readonly status: number | null;
  readonly errorClass: ErrorClass | null;
  readonly reason: TerminalReason;
  readonly attempts: number;
  /** When the operation ended: wall-clock epoch ms, from the driver's (injected) clock. */
  readonly ts: number;
  /** Present only when the operation sent hedges: how many (they are among `attempts`). */
  readonly hedges?: number;
  /** Present only with `hedges`: whether the answer came from a hedge. */
  readonly hedgeWon?: boolean;
}

/** A monotonic clock (ms) plus the wall clock, used only to read HTTP dates. */
export interface Clock {
  /** Monotonic milliseconds; only differences mean anything. */
  now(): number;
  /** Milliseconds since the Unix epoch: for HTTP dates and the `ts` of events. */
  wallNow(): number;
  /**
   * Calls `fn` after `ms` (clamped to [0, 2^31-1]); returns a function that cancels it.
   * `now`, when given, is the caller's reading of now() (saves a clock read): `ms` counts
   * from it (it may be a little earlier than now when the caller read the clock first).
   */
  setTimer(fn: () => void, ms: number, now?: number): () => void;
}

/** A source of uniform numbers in [0, 1). */
export type Random = () => number;

/** Largest delay a JavaScript timer accepts. */
export const MAX_TIMER_MS = 2 ** 31 - 1;
