// relent's public surface: what a user of the core needs, every export named (no
// `export *`). The other entry points (relent/http, /server, /fleet, /telemetry, /otel,
// /rtb, /delivery, /sim, /report, /testing) add their drivers. api/relent.api.md is the
// reviewed report of this surface (`npm run api:update` after a change).

// Run an operation under a policy.
export { run, execute } from './run/run.js';
export type { RunOptions, RunResult, AttemptContext, AttemptFn, Classified, RelentEvent } from './run/run.js';
export type { AttemptEvent, ResultEvent, Observation, Decision, TerminalReason, DecisionWhy, DecisionResult, ErrorClass, Clock, Random } from './core/types.js';

// Policies: presets of real services, specs, defaults.
export { resolvePolicy, presetPolicy, PRESETS } from './presets/index.js';
export { POLICY_DEFAULTS, ERROR_CLASSES, IDEMPOTENT_METHODS } from './core/policy.js';
export type { Policy, PolicySpec, PresetName } from './core/policy.js';
export type { BackoffSpec } from './core/backoff.js';

// Protections shared per dependency.
export { createRetryBudget, RATIO_BUDGET_DEFAULTS } from './core/budget.js';
export type { BudgetSpec, RetryBudget } from './core/budget.js';
export { createCircuitBreaker, BREAKER_DEFAULTS } from './core/breaker.js';
export type { BreakerSpec, CircuitBreaker } from './core/breaker.js';
export { createBulkhead, BULKHEAD_DEFAULTS } from './run/bulkhead.js';
export type { Bulkhead, BulkheadOptions } from './run/bulkhead.js';
// Slow, not failing: an adaptive concurrency limit, a rate limit, hedging's state per dependency.
export { createConcurrencyLimit } from './run/concurrency-limit.js';
export type { LimitEvent } from './run/concurrency-limit.js';
export { createRateLimiter } from './run/rate-limiter.js';
export { createHedgeState } from './core/hedge.js';
export type { Fleet } from './core/fleet.js';

// The decision core, for drivers of your own: one step, or the whole loop of one operation.
export { decide } from './core/decide.js';
export { createOperation, restoreOperation } from './core/operation.js';
export type { Operation, OperationOptions, Command } from './core/operation.js';
export { parseRetryAfter } from './core/retry-after.js';

// The types the functions above take and return, so that a caller can name them: the
// protections' specs, states and snapshots, the operation machine's commands and snapshot,
// the decision's state and context, the executor's options with the drivers' hooks.
export type {
  BreakerOptions,
  BreakerOutcome,
  BreakerSnapshot,
  BreakerState,
  BreakerStateChange,
  BreakerTransitionReason,
  ResolvedBreakerSpec,
} from './core/breaker.js';
export type { BudgetObservation, ResolvedBudgetSpec } from './core/budget.js';
export type { ChaosInjection, ChaosSpec, ResolvedChaos } from './core/chaos.js';
export type { AwaitCommand, CallCommand, CheckStateCommand, EndCommand, HedgeCommand, SlotRefusal, WaitCommand } from './core/commands.js';
export type { AimdLimitSpec, GradientLimitSpec, LimitAlgorithm, LimitChange, LimitSample, LimitSpec, ResolvedLimitSpec } from './core/concurrency.js';
export type { DecideContext, OperationState } from './core/decide.js';
export type { HedgePercentile, HedgeSpec, HedgeState, HedgeStats, ResolvedHedgeSpec } from './core/hedge.js';
export type { LatencyEstimator } from './core/latency.js';
export type { OperationSnapshot } from './core/operation.js';
export type { ResolvedPolicySpec, RetryAfterSpec, StatusPattern, StatusSet } from './core/policy.js';
export type { ResolvedPropagation } from './core/propagation.js';
export type { RetryAfterForm, RetryAfterParse } from './core/retry-after.js';
export type { RateLimitSpec, ResolvedRateLimitSpec, TokenBucket, TokenBucketState } from './core/token-bucket.js';
export type { SendState } from './core/types.js';
export type { PresetDefinition } from './presets/types.js';
export type { ResolvedBulkheadOptions } from './run/bulkhead.js';
export type { ConcurrencyLimit, ConcurrencyLimitContext, ConcurrencyLimitOptions, LimitOutcome } from './run/concurrency-limit.js';
export type { AttemptExit, BreakerVerdict, Guard, Protection } from './run/guard.js';
export type { RateLimiter } from './run/rate-limiter.js';
export type { ReplayOutput, TimelineObservation } from './run/replay.js';
export type {
  DriverHooks,
  ExecuteOptions,
  Instrumentation,
  InstrumentationAttributes,
  OperationInfo,
  OperationScope,
  AttemptScope,
  WorkInfo,
  WorkScope,
  DriverName,
} from './run/types.js';

// Errors.
export { RelentError } from './core/errors.js';
export type { RelentErrorCode } from './core/errors.js';

// Replay a recorded timeline in virtual time.
export { replay, parseTimeline } from './run/replay.js';
export type { Timeline } from './run/replay.js';

// Endpoints fit for events. (The HTTP client, createClient, is relent/http's: it is built on
// undici and Node's modules, which this entry point, fit for browsers and edge runtimes, leaves out.)
export { normalizeEndpoint } from './core/endpoint.js';
