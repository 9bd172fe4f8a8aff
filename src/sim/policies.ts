import type { PolicySpec } from '../core/policy.js';
import type { ErrorClass } from '../core/types.js';

/**
 * A policy compared by a scenario: a relent policy (preset name or spec) plus whether
 * the simulated clients keep the policy's shared retry budget.
 *
 * The peers' defaults are written as relent policy specs, as faithfully as relent's
 * vocabulary allows, so that one decision core (`decide()`) drives every client in the
 * simulator. What a spec cannot express is listed in `gaps`.
 */
export interface SimPolicy {
  readonly name: string;
  /** A preset name, or a policy spec (which may name a `preset` to start from). */
  readonly policy: string | PolicySpec;
  /** Create `createRetryBudget(policy.budget)` for each client (ignored when the policy has none). Default true. */
  readonly budget?: boolean;
  /** One line for tables and docs. */
  readonly summary?: string;
  /** Where the numbers come from. */
  readonly source?: string;
  /** Behaviour of the original that a relent policy spec cannot express. */
  readonly gaps?: readonly string[];
}

/** Largest wait relent accepts (2^31−1 ms ≈ 24.8 days): stands in for a library's `Infinity`. */
const INF_MS = 2 ** 31 - 1;
/** The peers' own deadline: none. The scenario's per-operation deadline (the caller's signal) applies. */
const NO_DEADLINE = INF_MS;
const NETWORK: readonly ErrorClass[] = ['connect_refused', 'dns', 'connect_timeout', 'tls', 'reset', 'socket_closed'];
const ALL_ERRORS: readonly ErrorClass[] = [...NETWORK, 'timeout', 'protocol', 'error'];
/** A server-requested wait is taken as is: none of the peers adds jitter to it. */
const NO_HINT_JITTER = { jitterRatio: 0, jitterMinMs: 0, jitterMaxMs: 0 } as const;

/**
 * The peers' defaults, checked in the installed packages (node_modules): their sources
 * and documentation. Every peer retries the GET of the scenarios (all of them
 * treat GET as idempotent); none has a shared retry budget.
 */
export const PEER_POLICIES: readonly SimPolicy[] = Object.freeze([
  {
    name: 'none',
    summary: 'no retries: one call per operation',
    policy: { maxAttempts: 1, deadlineMs: NO_DEADLINE, budget: null },
  },
  {
    name: 'p-retry',
    summary: 'p-retry 9 defaults: 10 retries, 1 s ×2, no jitter (randomize false), maxTimeout ∞',
    source:
      'p-retry 9.0.0 index.js (unchanged since 7): retries 10, factor 2, minTimeout 1000, maxTimeout Infinity, randomize false; delay = minTimeout·factor^(retry−1)',
    gaps: [
      'maxTimeout Infinity is written as the largest relent wait (2^31−1 ms)',
      'p-retry clamps the last wait to what is left of maxRetryTime; relent stops instead (the same calls are made: no attempt fits after the deadline either way)',
      'p-retry retries whatever the caller throws; here: 408, 429 and 5xx statuses and every transport error',
    ],
    policy: {
      maxAttempts: 11,
      deadlineMs: NO_DEADLINE,
      backoff: { kind: 'exponential', baseMs: 1000, capMs: INF_MS, multiplier: 2 },
      retryOn: { status: [408, 429, '5xx'], errors: [...ALL_ERRORS] },
      retryAfter: { honor: false },
      idempotent: true,
      budget: null,
    },
  },
  {
    name: 'got',
    summary: 'got 16 defaults: 2 retries, 2^(n−1)·1 s + U[0,100) ms noise',
    source:
      'got 16.2.0 options.js (unchanged since 14): retry.limit 2, noise 100, backoffLimit Infinity, statusCodes 408 413 429 500 502 503 504 521 522 524; calculate-retry-delay.js',
    gaps: [
      "got adds the noise after the backoffLimit cap, relent's truncated-exponential before it; identical with got's infinite cap",
      "got waits for any Retry-After up to maxRetryAfter (unset by default: no cap); relent's cap is 2^31−1 ms",
    ],
    policy: {
      maxAttempts: 3,
      deadlineMs: NO_DEADLINE,
      backoff: { kind: 'truncated-exponential', baseMs: 1000, capMs: INF_MS, fractionMs: 100 },
      retryOn: { status: [408, 413, 429, 500, 502, 503, 504, 521, 522, 524], errors: [...NETWORK, 'connect_timeout'] },
      retryAfter: { honor: true, statuses: [408, 413, 429, 500, 502, 503, 504, 521, 522, 524], maxMs: INF_MS, ...NO_HINT_JITTER },
      budget: null,
    },
  },
  {
    name: 'ky',
    summary: 'ky 2 defaults: 2 retries, 0.3 s ×2, no jitter',
    source:
      'ky 2.1.0 utils/normalize.js (unchanged since 1): limit 2, delay 0.3·2^(n−1) s, backoffLimit Infinity, jitter off, statusCodes 408 413 429 500 502 503 504, afterStatusCodes 413 429 503, retryOnTimeout false',
    gaps: ["ky clamps Retry-After to maxRetryAfter (Infinity by default); relent's cap is 2^31−1 ms"],
    policy: {
      maxAttempts: 3,
      deadlineMs: NO_DEADLINE,
      backoff: { kind: 'exponential', baseMs: 300, capMs: INF_MS, multiplier: 2 },
      retryOn: { status: [408, 413, 429, 500, 502, 503, 504], errors: [...NETWORK] },
      retryAfter: { honor: true, statuses: [413, 429, 503], maxMs: INF_MS, ...NO_HINT_JITTER },
      budget: null,
    },
  },
  {
    name: 'undici',
    summary: 'undici 8 retry interceptor defaults: 5 retries, 0.5 s ×2 up to 30 s, no jitter',
    source:
      'undici 8.14.0 lib/handler/retry-handler.js (unchanged since 7): maxRetries 5, minTimeout 500, timeoutFactor 2, maxTimeout 30 s, statusCodes 500 502 503 504 429, retryAfter honoured',
    gaps: ['undici clamps a Retry-After above maxTimeout to 30 s and waits; relent stops (retry_after_over_cap)'],
    policy: {
      maxAttempts: 6,
      deadlineMs: NO_DEADLINE,
      backoff: { kind: 'exponential', baseMs: 500, capMs: 30_000, multiplier: 2 },
      retryOn: { status: [500, 502, 503, 504, 429], errors: [...NETWORK] },
      retryAfter: { honor: true, statuses: [500, 502, 503, 504, 429], maxMs: 30_000, ...NO_HINT_JITTER },
      budget: null,
    },
  },
  {
    name: 'axios-retry',
    summary: 'axios-retry 4 defaults: 3 retries, no delay',
    source: 'axios-retry 4.5.0: retries 3, retryDelay noDelay (0, or Retry-After), retryCondition isNetworkOrIdempotentRequestError (429 and 5xx on GET)',
    gaps: ['axios-retry does not retry its own timeouts (ECONNABORTED); neither does this spec'],
    policy: {
      maxAttempts: 4,
      deadlineMs: NO_DEADLINE,
      backoff: { kind: 'constant', delayMs: 0 },
      retryOn: { status: [429, '5xx'], errors: [...NETWORK] },
      retryAfter: { honor: true, statuses: [429, '5xx'], maxMs: INF_MS, ...NO_HINT_JITTER },
      budget: null,
    },
  },
  {
    name: 'cockatiel',
    summary: "cockatiel 4 defaults: unlimited retries, no delay (until the caller's signal aborts)",
    source: 'cockatiel 4.0.0 Policy.js retry() (unchanged since 3): maxAttempts Infinity (counts retries), backoff ConstantBackoff(0)',
    gaps: ["unlimited attempts are written as relent's largest maxAttempts, 10000; the 2 s deadline ends every operation long before that"],
    policy: {
      maxAttempts: 10_000,
      deadlineMs: NO_DEADLINE,
      backoff: { kind: 'constant', delayMs: 0 },
      retryOn: { status: ['4xx', '5xx'], errors: [...ALL_ERRORS] },
      retryAfter: { honor: false },
      idempotent: true,
      budget: null,
    },
  },
  {
    name: 'typical',
    summary: 'a typical hand-written setting: 3 attempts, exponential from 100 ms, no jitter',
    policy: {
      maxAttempts: 3,
      deadlineMs: NO_DEADLINE,
      backoff: { kind: 'exponential', baseMs: 100, capMs: INF_MS, multiplier: 2 },
      retryOn: { status: [429, '5xx'], errors: [...NETWORK] },
      retryAfter: { honor: false },
      budget: null,
    },
  },
] satisfies SimPolicy[]);

/** relent's own contenders: the defaults and the http-429 preset, each with its shared budget. */
export const RELENT_POLICIES: readonly SimPolicy[] = Object.freeze([
  {
    name: 'relent',
    summary:
      'relent defaults (POLICY_DEFAULTS): 3 attempts, full jitter 100 ms ×2, ratio budget (10 % of answered calls + 1/s, 10 tokens, a successful retry refunded), retries wait for the budget within the deadline',
    policy: {},
    budget: true,
  },
  {
    name: 'relent-no-budget',
    summary: 'relent defaults without the shared budget (for comparison)',
    policy: {},
    budget: false,
  },
  {
    name: 'relent-fail-fast',
    summary: 'relent defaults with budgetExhausted "stop": an unpaid retry ends the operation at once (budget_exhausted)',
    policy: { budgetExhausted: 'stop' },
    budget: true,
  },
  {
    name: 'relent-sre-budget',
    summary: "the SRE book / Finagle budget rule: 10 % of operations + 1/s, no refund, fail fast (relent's earlier default)",
    policy: { budgetExhausted: 'stop', budget: { kind: 'ratio', deposit: 'operation', refund: false } },
    budget: true,
  },
  {
    name: 'http-429',
    summary: 'relent preset http-429: 5 attempts, full jitter 1 s ×2 up to 30 s, Retry-After first, ratio budget',
    policy: 'http-429',
    budget: true,
  },
] satisfies SimPolicy[]);

/**
 * Calls-per-operation measured with the real libraries against a real loopback
 * dependency (bench/overload.mjs: capacity 400/s, 320 operations/s, capacity 80/s for a 10 s fault
 * window, 503 over capacity, 2 s deadline): amplification and success share of the
 * operations started in the fault window.
 */
export const MEASURED_OVERLOAD: Readonly<
  Record<string, { readonly amplification: number; readonly amplificationMax?: number; readonly successShare: number; readonly successShareMax?: number }>
> = Object.freeze({
  none: { amplification: 1.0, successShare: 0.25 },
  'p-retry': { amplification: 1.93, successShare: 0.29 },
  got: { amplification: 1.74, successShare: 0.31 },
  undici: { amplification: 2.39, successShare: 0.32 },
  ky: { amplification: 2.58, successShare: 0.3 },
  'axios-retry': { amplification: 3.52, successShare: 0.25 },
  cockatiel: { amplification: 49.7, successShare: 0.32 },
  typical: { amplification: 2.6, amplificationMax: 2.7, successShare: 0.26, successShareMax: 0.28 },
});
