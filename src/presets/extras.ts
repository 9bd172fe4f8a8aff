import type { PresetDefinition } from './types.js';

const TRANSPORT = ['connect_refused', 'dns', 'connect_timeout', 'tls', 'reset', 'socket_closed'] as const;

/**
 * gRPC A6 retry design, current text (since 2024-08): the n-th retry waits
 * min(initialBackoff·multiplier^(n−1), maxBackoff)·U(0.8, 1.2); the A6 example policy
 * (maxAttempts 4, 0.1 s, 1 s, ×2, UNAVAILABLE ≈ HTTP 503) and its retryThrottling
 * example (maxTokens 10, tokenRatio 0.1). gRFC A6 "gRPC Retry Design".
 */
export const grpc: PresetDefinition = {
  name: 'grpc',
  summary: 'gRPC A6 (2024+): ±20 % jittered exponential backoff, 4 attempts, retryThrottling 10/0.1',
  source: 'gRFC A6 "gRPC Retry Design" — https://github.com/grpc/proposal/blob/master/A6-client-retries.md (the backoff text since 2024-08-29)',
  schedule: 'min(100 ms·2^(n−1), 1 s)·U(0.8, 1.2); 4 calls (at most 5); throttled while tokens <= 5 of 10',
  notes: [
    'UNAVAILABLE maps to HTTP 503 and transport failures; a deadline across all attempts as in A6',
    'grpc-retry-pushback-ms: exactly that wait, no jitter; later retries back off from initialBackoff again; negative or unparseable: no retry, counted as a throttling failure',
    'a throttled retry fails at once (budgetExhausted "stop"): A6 retries and hedges never block on the token count',
    'maxAttempts over 5 is taken as 5, as A6 clients do by default',
  ],
  spec: {
    maxAttempts: 4,
    deadlineMs: 10_000,
    backoff: { kind: 'proportional-jitter', baseMs: 100, capMs: 1000, multiplier: 2, jitter: 0.2 },
    retryOn: { status: [503], errors: [...TRANSPORT], statusWithWait: [] },
    budget: { kind: 'throttle', maxTokens: 10, tokenRatio: 0.1 },
    budgetExhausted: 'stop',
  },
  maxAttemptsCap: 5,
};

/** gRPC A6 as written 2017–2024: full jitter random(0, min(initial·m^(n−1), max)). */
export const grpc2017: PresetDefinition = {
  name: 'grpc-2017',
  summary: 'gRPC A6 original text (2017–2024): full-jitter exponential backoff',
  source:
    'gRFC A6 "gRPC Retry Design" as written from 2017 to August 2024 — https://github.com/grpc/proposal/blob/master/A6-client-retries.md (see its history)',
  schedule: 'U[0, min(100 ms·2^(n−1), 1 s)); 4 calls (at most 5); throttled while tokens <= 5 of 10',
  notes: ['kept for comparison with services that still follow the original text', 'pushback, throttling and the cap of 5 attempts as in `grpc`'],
  spec: {
    maxAttempts: 4,
    deadlineMs: 10_000,
    backoff: { kind: 'full-jitter', baseMs: 100, capMs: 1000, multiplier: 2 },
    retryOn: { status: [503], errors: [...TRANSPORT], statusWithWait: [] },
    budget: { kind: 'throttle', maxTokens: 10, tokenRatio: 0.1 },
    budgetExhausted: 'stop',
  },
  maxAttemptsCap: 5,
};

/**
 * AWS SDK standard retry mode, 2026 behaviour ("v2.1", default since 2026-11-10):
 * 3 attempts, U(0,1)·min(b·2^(i−1), 20 s) with b = 50 ms (transient) or 1 s
 * (throttling), retry quota 500 with cost 14 (transient) / 5 (throttling), refund 1
 * on success. AWS SDKs and Tools Reference Guide, "Retry behavior".
 */
export const awsStandard: PresetDefinition = {
  name: 'aws-standard',
  summary: 'AWS SDK standard mode (2026 "v2.1"): 3 attempts, full jitter 50 ms / 1 s base, 20 s cap, quota 500',
  source:
    'AWS SDKs and Tools Reference Guide, "Retry behavior" — https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html; botocore retries/standard.py and quota.py (the 2026 values) — https://github.com/boto/botocore/tree/develop/botocore/retries',
  schedule: 'U[0, min(50 ms·2^(i−1), 20 s)) transient, U[0, min(1 s·2^(i−1), 20 s)) throttling; 3 calls; quota 500, cost 14 / 5',
  notes: [
    'HTTP 429 stands for the throttling error codes (ThrottlingException, SlowDown…); 500/502/503/504 and transport failures are transient',
    'x-amz-retry-after (ms) lengthens the own wait t_i by at most 5 s: max(t_i, min(asked, t_i + 5 s)); a Retry-After header, when present, is read first, as for every relent policy',
    'an empty retry quota fails the retry at once (budgetExhausted "stop"), as the SDKs do',
    'the SDKs retry every operation; relent retries a POST only when it is safe: pass `idempotent: true` (or an idempotency key) for AWS APIs that are idempotent by design or carry a client token (most AWS APIs are POSTs)',
  ],
  spec: {
    maxAttempts: 3,
    deadlineMs: 60_000,
    backoff: { kind: 'full-jitter', baseMs: 50, capMs: 20_000, multiplier: 2 },
    throttleBackoff: { kind: 'full-jitter', baseMs: 1000, capMs: 20_000, multiplier: 2 },
    retryOn: { status: [429, 500, 502, 503, 504], errors: [...TRANSPORT, 'timeout'], statusWithWait: [] },
    budget: { kind: 'quota', capacity: 500, retryCost: 14, throttleCost: 5, timeoutCost: 14, successRefund: 1 },
    budgetExhausted: 'stop',
  },
};

/**
 * Envoy's default router retry: one retry (num_retries defaults to 1), fully jittered
 * back-off U[0, (2^N − 1)·25 ms) capped at 250 ms, retry_on "5xx" (any 5xx, reset,
 * connect failure). Envoy's route RetryPolicy and router filter documentation.
 */
export const envoyDefault: PresetDefinition = {
  name: 'envoy-default',
  summary: 'Envoy router defaults: 1 retry on 5xx/reset/connect failure, U[0, (2^N−1)·25 ms) capped at 250 ms',
  source:
    'Envoy, RetryPolicy (route_components.proto) — https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/route/v3/route_components.proto; router filter, x-envoy-retry-on — https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/router_filter',
  schedule: 'retry 1 waits U[0, 25 ms); 2 calls; retry_on 5xx',
  notes: [
    "Envoy's retry budget limits concurrent retries (20 % of active requests, min 3); it is not modelled, so the preset has no budget",
    "the back-off follows Envoy's docs, U[0, (2^N − 1)·B); Envoy's code (JitteredExponentialBackOffStrategy since 2020) doubles the interval instead, U[0, B·2^(N−1)). They agree on the one retry this preset makes (N = 1: U[0, 25 ms)); with more retries the docs' form is kept because it is Envoy's stated contract and what users configure from",
  ],
  spec: {
    maxAttempts: 2,
    deadlineMs: 15_000,
    backoff: { kind: 'envoy', baseMs: 25, capMs: 250 },
    retryOn: { status: ['5xx'], errors: [...TRANSPORT, 'timeout'] },
    retryAfter: { honor: false },
    budget: null,
  },
};
