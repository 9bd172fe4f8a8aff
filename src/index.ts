// relent's public surface. Every export is named here (no `export *`).

// The decision core: pure, dependency-free.
export { decide, startOperation, beginAttempt, afterRetry, preflight, attemptBudgetMs, boundObservation, isIdempotent, sendStateOf } from './core/decide.js';
export type { OperationState, StartOptions, DecideContext } from './core/decide.js';
export type {
  ErrorClass, SendState, Observation, Decision, TerminalReason, DecisionWhy, DecisionResult, AttemptEvent, ResultEvent, Clock, Random,
} from './core/types.js';
export { MAX_TIMER_MS } from './core/types.js';
export { createPolicy, compileStatuses, DEFAULT_POLICY, POLICY_DEFAULTS, ERROR_CLASSES, ALL_ERROR_CLASSES, IDEMPOTENT_METHODS } from './core/policy.js';
export type { Policy, PolicySpec, RetryAfterSpec, StatusPattern, StatusSet } from './core/policy.js';
export { computeBackoff, normalizeBackoff, backoffCeiling, BACKOFF_KINDS } from './core/backoff.js';
export type { BackoffSpec, BackoffKind } from './core/backoff.js';
export { createRetryBudget, normalizeBudget, RATIO_BUDGET_DEFAULTS } from './core/budget.js';
export type { BudgetSpec, ResolvedBudgetSpec, RetryBudget, BudgetObservation } from './core/budget.js';
export { parseRetryAfter, MAX_SANE_RETRY_AFTER_MS } from './core/retry-after.js';
export type { RetryAfterParse, RetryAfterForm } from './core/retry-after.js';
export { parseHttpDate, formatImfFixdate } from './core/http-date.js';
export { readServerHint, pickHintHeaders, SERVER_HINT_HEADERS } from './core/hints.js';
export type { ServerHint } from './core/hints.js';
export {
  parseDeadlineMs, parseGrpcTimeout, parseAttempt, parsePreviousAttempts, parsePushback, formatDeadlineMs, formatGrpcTimeout, readIncomingHints, saysNoRetry,
  PROPAGATION_DEFAULTS, DEADLINE_HEADER, ATTEMPT_HEADER, NO_RETRY_HEADER, MAX_DEADLINE_MS,
} from './core/propagation.js';
export type { PropagationSpec, HeaderParse, HeaderProblem, IncomingHints, IncomingHeaderSpec } from './core/propagation.js';
export { ERROR_CODE_CLASSES, errorClassOfCode } from './core/error-codes.js';
export { RelentError, REASON_CODES } from './core/errors.js';
export type { RelentErrorCode } from './core/errors.js';
export { createSeededRandom } from './core/random.js';
export { createCircuitBreaker, normalizeBreakerSpec, breakerOutcome, BREAKER_DEFAULTS } from './core/breaker.js';
export type { Fleet } from './core/fleet.js';
export type {
  CircuitBreaker, BreakerSpec, ResolvedBreakerSpec, BreakerOptions, BreakerState, BreakerOutcome, BreakerStateChange, BreakerSnapshot,
  BreakerTransitionReason,
} from './core/breaker.js';

// Presets: documented policies of real services.
export { PRESETS, presetPolicy, resolvePolicy, withOverrides, mergeSpecs } from './presets/index.js';
export type { PresetDefinition } from './presets/index.js';

// The executor and its drivers.
export { run, execute, newOperationId } from './run/run.js';
export type { RunOptions, RunResult, AttemptContext, Classified, RelentEvent } from './run/run.js';
export type { Instrumentation, OperationInfo, OperationScope, AttemptScope, WorkInfo, WorkScope, DriverName, InstrumentationAttributes } from './run/run.js';
export { createBulkhead, BULKHEAD_DEFAULTS } from './run/bulkhead.js';
export type { Bulkhead, BulkheadOptions, ResolvedBulkheadOptions } from './run/bulkhead.js';
export { systemClock, systemRandom } from './shared/clock.js';
export { replay, parseTimeline, REPLAY_WALL_START } from './run/replay.js';
export type { Timeline, TimelineObservation, ReplayOutput } from './run/replay.js';
export { formatJsonLine, formatHuman } from './run/format.js';
export { createJsonlSink } from './run/sinks.js';
export type { JsonlSink } from './run/sinks.js';

// The HTTP client (also at relent/http, which adds the interceptor and the wire tables).
export { createClient } from './http/index.js';
export { normalizeEndpoint, safeEndpoint } from './core/endpoint.js';
