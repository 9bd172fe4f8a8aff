import { type BackoffSpec, backoffCeiling, normalizeBackoff } from './backoff.js';
import { type BudgetSpec, normalizeBudget, RATIO_BUDGET_DEFAULTS } from './budget.js';
import { RelentError, describe, invalidPolicy } from './errors.js';
import { normalizeHedge, type HedgeSpec, type ResolvedHedgeSpec } from './hedge.js';
import { chaosSpecOf, normalizeChaos, type ChaosSpec, type ResolvedChaos } from './chaos.js';
import type { ErrorClass } from './types.js';

export { ERROR_CLASSES } from './error-codes.js';
import { ERROR_CLASSES } from './error-codes.js';

export const ALL_ERROR_CLASSES = Object.freeze(Object.keys(ERROR_CLASSES) as ErrorClass[]);

/**
 * Methods that RFC 9110 §9.2.2 makes idempotent, and QUERY ("The HTTP QUERY Method",
 * draft-ietf-httpbis-safe-method-w-body: safe and idempotent, a GET with a body).
 */
export const IDEMPOTENT_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE', 'QUERY']);

/** A status pattern: a code (`503`), a class (`"5xx"`), a range (`"500-599"`) or a bound (`">500"`, `">=500"`). */
export type StatusPattern = number | string;

/** The JSON form of a policy, as users and presets write it. All fields are optional. */
/**
 * The names of relent's presets (src/presets): a closed set, so that a misspelt name
 * fails to compile. Untyped input (JSON, flags) is checked when it is resolved.
 */
export type PresetName =
  | 'model-armor'
  | 'adobe-best-effort'
  | 'adobe-configurable'
  | 'openrtb-bid'
  | 'openrtb-billing-notice'
  | 'background-full-jitter'
  | 'http-429'
  | 'grpc'
  | 'grpc-2017'
  | 'aws-standard'
  | 'envoy-default';

export interface PolicySpec {
  /** Start from this preset (resolved by `resolvePolicy` in `relent/presets`, not by the core). */
  readonly preset?: PresetName;
  /** Calls in all, the first included (3 → at most 2 retries). */
  readonly maxAttempts?: number;
  /** One deadline for the whole operation, waits included (monotonic). */
  readonly deadlineMs?: number;
  /** Each attempt gets min(attemptTimeoutMs, remaining); null: the remaining time. */
  readonly attemptTimeoutMs?: number | null;
  /** A retry is made only if at least this much time remains after its wait. */
  readonly minAttemptMs?: number;
  readonly backoff?: BackoffSpec;
  /** The backoff after a throttling status (AWS uses a longer base for throttling). */
  readonly throttleBackoff?: BackoffSpec | null;
  readonly retryOn?: {
    readonly status?: readonly StatusPattern[];
    readonly errors?: readonly ErrorClass[];
    /**
     * Statuses retried only when the response says how long to wait (a valid Retry-After
     * or RateLimit field; their hints are read as for `retryAfter.statuses`). Default
     * [413]: RFC 9110 §15.5.14 lets a server answer "Content Too Large" with a Retry-After
     * when the condition is temporary; without one, 413 is final.
     */
    readonly statusWithWait?: readonly StatusPattern[];
  };
  /** Statuses that mean "refused before processing": retryable for any method (408, 429). */
  readonly safeStatuses?: readonly StatusPattern[];
  /** Statuses that mean "too much load from you" (429): throttleBackoff, budget cost. */
  readonly throttleStatuses?: readonly StatusPattern[];
  readonly retryAfter?: RetryAfterSpec;
  /** What a sent-but-unanswered non-idempotent attempt leads to. */
  readonly unknownOutcome?: 'check_state' | 'stop';
  /** Declares the operation idempotent (true) or not (false); null: decided by key and method. */
  readonly idempotent?: boolean | null;
  /** Waits longer than this are handed to a durable queue (`defer`) instead of slept in-process. */
  readonly deferOverMs?: number | null;
  /** The shared retry budget that drivers create for this policy; null for none. */
  readonly budget?: BudgetSpec | null;
  /**
   * Whether an attempt answered with a throttling status (429) uses up one of
   * maxAttempts. false: a rate-limited attempt is deferred without using an attempt
   * (Adobe's "retried 30 minutes later"), bounded by maxThrottledAttempts.
   */
  readonly throttleCountsAsAttempt?: boolean;
  /** With throttleCountsAsAttempt false: how many throttled attempts an operation may have. */
  readonly maxThrottledAttempts?: number;
  /**
   * What an empty shared budget means for a retry. "wait" (default) keeps the retry,
   * charges the budget just before it would be sent (preflight) and, while the budget is
   * empty and the dependency still answers some calls (one in the last second), waits for
   * tokens within the deadline; an operation whose deadline comes first, or whose
   * dependency answers nothing, ends with budget_exhausted, and nothing unpaid is ever
   * sent. Retries so land
   * when the dependency serves again instead of during the outage. "stop" ends the
   * operation with budget_exhausted at once (fail fast). Drivers that cannot wait (the
   * durable queue, or any that calls preflight() without a gate) stop.
   */
  readonly budgetExhausted?: 'stop' | 'wait';
  /**
   * Hedged requests for idempotent operations (never a POST without an idempotency key):
   * after `delayMs` (ms, or "p90" … "p99" of the dependency's observed latency) without an
   * answer, another attempt goes while the first runs; the first acceptable answer wins.
   * Bounded by `maxHedges` per operation, `maxExtraLoad` (a fraction of the operations)
   * and the retry budget; stopped while the dependency is failing. null: no hedging.
   */
  readonly hedge?: HedgeSpec | null;
  /**
   * Chaos injection, for testing that retries, budgets, breakers and hedges do what you
   * think (staging, game days): a share of attempts fails with an error class, answers a
   * status, or is delayed, drawn from the operation's random. Present means on (`enabled`
   * default true); RELENT_CHAOS=off in the environment turns it off everywhere. null: none.
   */
  readonly chaos?: ChaosSpec | null;
}

export interface RetryAfterSpec {
  /** Read server hints at all (Retry-After, RateLimit). */
  readonly honor?: boolean;
  /** Statuses whose hints are read. */
  readonly statuses?: readonly StatusPattern[];
  /** The longest server-requested wait the policy accepts; longer → stop now, however far away. */
  readonly maxMs?: number;
  /**
   * false (default): the server's wait replaces the policy's backoff. true: the later of
   * the two — a server's wait can lengthen the policy's own wait, never shorten it
   * (Adobe's configurable aggregation retries a rate-limited batch 30 minutes later).
   */
  readonly lengthenOnly?: boolean;
  /** Positive jitter added after a server-requested wait: U[0, clamp(wait·ratio, minMs, maxMs)). */
  readonly jitterRatio?: number;
  readonly jitterMinMs?: number;
  readonly jitterMaxMs?: number;
}

/** A compiled set of statuses (100–999). */
export interface StatusSet {
  has(status: number): boolean;
  readonly patterns: readonly StatusPattern[];
}

/** A validated, resolved, frozen policy: every field present. */
export interface Policy {
  readonly name: string | null;
  readonly maxAttempts: number;
  readonly deadlineMs: number;
  readonly attemptTimeoutMs: number | null;
  readonly minAttemptMs: number;
  readonly backoff: BackoffSpec;
  readonly throttleBackoff: BackoffSpec | null;
  readonly retryOnStatus: StatusSet;
  readonly retryOnErrors: ReadonlySet<ErrorClass>;
  /** Statuses retried only with a valid server wait (retryOn.statusWithWait). */
  readonly retryOnStatusWithWait: StatusSet;
  readonly safeStatuses: StatusSet;
  readonly throttleStatuses: StatusSet;
  /** `statuses`: whose hints are read — retryAfter.statuses plus retryOn.statusWithWait. */
  readonly retryAfter: Required<Omit<RetryAfterSpec, 'statuses'>> & { readonly statuses: StatusSet };
  readonly unknownOutcome: 'check_state' | 'stop';
  readonly idempotent: boolean | null;
  readonly deferOverMs: number | null;
  readonly budget: BudgetSpec | null;
  readonly throttleCountsAsAttempt: boolean;
  readonly maxThrottledAttempts: number;
  readonly budgetExhausted: 'stop' | 'wait';
  /** Hedging (null: none). */
  readonly hedge: ResolvedHedgeSpec | null;
  /** Chaos injection (null: none, or turned off). */
  readonly chaos: ResolvedChaos | null;
  /** The longest wait this policy can choose (backoff ceiling or server-hint cap plus jitter). */
  readonly maxDelayMs: number;
  /** The normalised spec (JSON), for display and for `relent presets`. */
  readonly spec: ResolvedPolicySpec;
}

/** A policy spec with every field filled in (the JSON form of a Policy). */
export interface ResolvedPolicySpec extends Required<Omit<PolicySpec, 'preset' | 'retryOn' | 'retryAfter' | 'hedge' | 'chaos'>> {
  readonly chaos: ChaosSpec | null;
  readonly hedge: { readonly delayMs: HedgeSpec['delayMs']; readonly maxHedges: number; readonly maxExtraLoad: number } | null;
  readonly retryOn: { readonly status: readonly StatusPattern[]; readonly errors: readonly ErrorClass[]; readonly statusWithWait: readonly StatusPattern[] };
  readonly retryAfter: Required<RetryAfterSpec>;
}

/** relent's defaults, written once (README's table is tested against this). */
export const POLICY_DEFAULTS = Object.freeze({
  maxAttempts: 3,
  deadlineMs: 10_000,
  attemptTimeoutMs: null,
  minAttemptMs: 0,
  backoff: Object.freeze({ kind: 'full-jitter', baseMs: 100, capMs: 10_000, multiplier: 2 }) as BackoffSpec,
  throttleBackoff: null,
  retryOn: Object.freeze({
    status: Object.freeze([408, 429, 500, 502, 503, 504]) as readonly StatusPattern[],
    errors: Object.freeze([
      'connect_refused',
      'dns',
      'connect_timeout',
      'tls',
      'timeout',
      'reset',
      'socket_closed',
      'protocol',
      'error',
    ]) as readonly ErrorClass[],
    statusWithWait: Object.freeze([413]) as readonly StatusPattern[],
  }),
  safeStatuses: Object.freeze([408, 429]) as readonly StatusPattern[],
  throttleStatuses: Object.freeze([429]) as readonly StatusPattern[],
  retryAfter: Object.freeze({
    honor: true,
    statuses: Object.freeze([429, 503]) as readonly StatusPattern[],
    maxMs: 60_000,
    jitterRatio: 0.1,
    jitterMinMs: 100,
    jitterMaxMs: 10_000,
    lengthenOnly: false,
  }),
  unknownOutcome: 'check_state' as const,
  idempotent: null,
  deferOverMs: null,
  budget: RATIO_BUDGET_DEFAULTS as BudgetSpec,
  throttleCountsAsAttempt: true,
  maxThrottledAttempts: 10,
  budgetExhausted: 'wait' as const,
  hedge: null,
  chaos: null,
});

const MAX_MS = 2 ** 31 - 1;
const POLICY_KEYS = new Set([
  'preset',
  'maxAttempts',
  'deadlineMs',
  'attemptTimeoutMs',
  'minAttemptMs',
  'backoff',
  'throttleBackoff',
  'retryOn',
  'safeStatuses',
  'throttleStatuses',
  'retryAfter',
  'unknownOutcome',
  'idempotent',
  'deferOverMs',
  'budget',
  'throttleCountsAsAttempt',
  'maxThrottledAttempts',
  'budgetExhausted',
  'hedge',
  'chaos',
]);

export function compileStatuses(patterns: unknown, field: string): StatusSet {
  if (!Array.isArray(patterns)) throw invalidPolicy(field, 'an array of statuses (503, "5xx", "500-599", ">500")', patterns);
  const bits = new Uint8Array(1000);
  patterns.forEach((p: unknown, i: number) => {
    const f = `${field}[${i}]`;
    const range = statusRange(p);
    if (!range) throw invalidPolicy(f, 'a status 100-999 or a pattern like "5xx", "500-599", ">500", ">=500"', p);
    for (let s = range[0]; s <= range[1]; s++) bits[s] = 1;
  });
  const frozen = Object.freeze([...patterns] as StatusPattern[]);
  return Object.freeze({ has: (status: number) => bits[status] === 1, patterns: frozen });
}

function statusRange(p: unknown): [number, number] | null {
  const ok = (n: number): boolean => Number.isInteger(n) && n >= 100 && n <= 999;
  if (typeof p === 'number') return ok(p) ? [p, p] : null;
  if (typeof p !== 'string') return null;
  const t = p.trim();
  let m = /^([1-9])xx$/i.exec(t);
  if (m) return [Number(m[1]) * 100, Number(m[1]) * 100 + 99];
  m = /^(\d{3})\s*-\s*(\d{3})$/.exec(t);
  if (m) {
    const a = Number(m[1]);
    const b = Number(m[2]);
    return ok(a) && ok(b) && a <= b ? [a, b] : null;
  }
  m = /^(>=?)\s*(\d{3})$/.exec(t);
  if (m) {
    const n = Number(m[2]);
    // ">500" is 501–599 (Adobe's "greater than 500"), not 501–999: a bound stays in its class.
    const lo = m[1] === '>' ? n + 1 : n;
    const hi = Math.floor(n / 100) * 100 + 99;
    return ok(n) && lo <= hi ? [lo, hi] : null;
  }
  m = /^(\d{3})$/.exec(t);
  if (m) return ok(Number(m[1])) ? [Number(m[1]), Number(m[1])] : null;
  return null;
}

function finiteMs(v: unknown, field: string, min = 0, max = MAX_MS): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) {
    throw invalidPolicy(field, `a finite number of ms in [${min}, ${max}]`, v);
  }
  return v;
}

/**
 * Validates a policy spec and fills every default. Throws a RelentError
 * (`ERR_INVALID_POLICY`) whose message names the field: ``Expected `backoff.capMs` …``.
 * A spec that names a `preset` must be resolved first (see `resolvePolicy`).
 */
export function createPolicy(input: PolicySpec = {}, name: string | null = null): Policy {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw invalidPolicy('policy', 'an object', input);
  for (const key of Object.keys(input)) {
    if (!POLICY_KEYS.has(key)) {
      throw new RelentError('ERR_INVALID_POLICY', `Unknown policy field \`${key}\` (known: ${[...POLICY_KEYS].join(', ')})`, { field: key });
    }
  }
  if (input.preset !== undefined) {
    throw new RelentError('ERR_INVALID_POLICY', `\`preset\` ${describe(input.preset)} must be resolved with resolvePolicy() before createPolicy()`, {
      field: 'preset',
    });
  }
  const d = POLICY_DEFAULTS;
  const maxAttempts = input.maxAttempts ?? d.maxAttempts;
  if (typeof maxAttempts !== 'number' || !Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 10_000) {
    throw invalidPolicy('maxAttempts', 'an integer in [1, 10000] (it counts every call, the first included)', maxAttempts);
  }
  const deadlineMs = finiteMs(input.deadlineMs ?? d.deadlineMs, 'deadlineMs', 1);
  const attemptTimeoutMs =
    input.attemptTimeoutMs === undefined || input.attemptTimeoutMs === null ? null : finiteMs(input.attemptTimeoutMs, 'attemptTimeoutMs', 1);
  const minAttemptMs = finiteMs(input.minAttemptMs ?? d.minAttemptMs, 'minAttemptMs');
  const backoff = normalizeBackoff(input.backoff ?? d.backoff, 'backoff');
  const throttleBackoff =
    input.throttleBackoff === undefined || input.throttleBackoff === null ? null : normalizeBackoff(input.throttleBackoff, 'throttleBackoff');

  const retryOnIn = input.retryOn ?? {};
  if (typeof retryOnIn !== 'object' || retryOnIn === null || Array.isArray(retryOnIn))
    throw invalidPolicy('retryOn', 'an object with `status`, `errors` and/or `statusWithWait`', retryOnIn);
  for (const k of Object.keys(retryOnIn)) {
    if (k !== 'status' && k !== 'errors' && k !== 'statusWithWait')
      throw invalidPolicy(`retryOn.${k}`, 'absent (retryOn takes status, errors, statusWithWait)', (retryOnIn as Record<string, unknown>)[k]);
  }
  const retryOnStatus = compileStatuses(retryOnIn.status ?? d.retryOn.status, 'retryOn.status');
  const retryOnStatusWithWait = compileStatuses(retryOnIn.statusWithWait ?? d.retryOn.statusWithWait, 'retryOn.statusWithWait');
  const errorsIn = retryOnIn.errors ?? d.retryOn.errors;
  if (!Array.isArray(errorsIn)) throw invalidPolicy('retryOn.errors', `an array of error classes (${ALL_ERROR_CLASSES.join(', ')})`, errorsIn);
  errorsIn.forEach((e: unknown, i: number) => {
    if (typeof e !== 'string' || !(e in ERROR_CLASSES)) throw invalidPolicy(`retryOn.errors[${i}]`, `one of ${ALL_ERROR_CLASSES.join(', ')}`, e);
    if (e === 'aborted') throw invalidPolicy(`retryOn.errors[${i}]`, 'not "aborted" (a cancelled operation is never retried)', e);
  });
  const retryOnErrors = new Set(errorsIn as ErrorClass[]);

  const safeStatuses = compileStatuses(input.safeStatuses ?? d.safeStatuses, 'safeStatuses');
  const throttleStatuses = compileStatuses(input.throttleStatuses ?? d.throttleStatuses, 'throttleStatuses');

  const raIn = input.retryAfter ?? {};
  if (typeof raIn !== 'object' || raIn === null || Array.isArray(raIn)) throw invalidPolicy('retryAfter', 'an object', raIn);
  const raKeys = ['honor', 'statuses', 'maxMs', 'jitterRatio', 'jitterMinMs', 'jitterMaxMs', 'lengthenOnly'];
  for (const k of Object.keys(raIn))
    if (!raKeys.includes(k)) throw invalidPolicy(`retryAfter.${k}`, `absent (retryAfter takes ${raKeys.join(', ')})`, (raIn as Record<string, unknown>)[k]);
  const honor = raIn.honor ?? d.retryAfter.honor;
  if (typeof honor !== 'boolean') throw invalidPolicy('retryAfter.honor', 'a boolean', honor);
  const jitterRatio = raIn.jitterRatio ?? d.retryAfter.jitterRatio;
  if (typeof jitterRatio !== 'number' || !Number.isFinite(jitterRatio) || jitterRatio < 0 || jitterRatio > 10)
    throw invalidPolicy('retryAfter.jitterRatio', 'a number in [0, 10]', jitterRatio);
  const jitterMinMs = finiteMs(raIn.jitterMinMs ?? d.retryAfter.jitterMinMs, 'retryAfter.jitterMinMs');
  const jitterMaxMs = finiteMs(raIn.jitterMaxMs ?? d.retryAfter.jitterMaxMs, 'retryAfter.jitterMaxMs');
  if (jitterMaxMs < jitterMinMs) throw invalidPolicy('retryAfter.jitterMaxMs', `>= retryAfter.jitterMinMs (${jitterMinMs})`, jitterMaxMs);
  const lengthenOnly = raIn.lengthenOnly ?? d.retryAfter.lengthenOnly;
  if (typeof lengthenOnly !== 'boolean') throw invalidPolicy('retryAfter.lengthenOnly', 'a boolean', lengthenOnly);
  const hintStatuses = compileStatuses(raIn.statuses ?? d.retryAfter.statuses, 'retryAfter.statuses');
  const retryAfter = Object.freeze({
    honor,
    // A status retried only with a wait must have its wait read.
    statuses: Object.freeze({ has: (st: number) => hintStatuses.has(st) || retryOnStatusWithWait.has(st), patterns: hintStatuses.patterns }),
    maxMs: finiteMs(raIn.maxMs ?? d.retryAfter.maxMs, 'retryAfter.maxMs'),
    jitterRatio,
    jitterMinMs,
    jitterMaxMs,
    lengthenOnly,
  });

  const unknownOutcome = input.unknownOutcome ?? d.unknownOutcome;
  if (unknownOutcome !== 'check_state' && unknownOutcome !== 'stop') throw invalidPolicy('unknownOutcome', '"check_state" or "stop"', unknownOutcome);
  const idempotent = input.idempotent ?? null;
  if (idempotent !== null && typeof idempotent !== 'boolean') throw invalidPolicy('idempotent', 'a boolean or null', idempotent);
  const deferOverMs = input.deferOverMs === undefined || input.deferOverMs === null ? null : finiteMs(input.deferOverMs, 'deferOverMs');
  const budget = input.budget === null ? null : normalizeBudget(input.budget ?? d.budget, 'budget');
  const throttleCountsAsAttempt = input.throttleCountsAsAttempt ?? d.throttleCountsAsAttempt;
  if (typeof throttleCountsAsAttempt !== 'boolean') throw invalidPolicy('throttleCountsAsAttempt', 'a boolean', throttleCountsAsAttempt);
  const maxThrottledAttempts = input.maxThrottledAttempts ?? d.maxThrottledAttempts;
  if (typeof maxThrottledAttempts !== 'number' || !Number.isInteger(maxThrottledAttempts) || maxThrottledAttempts < 0 || maxThrottledAttempts > 10_000) {
    throw invalidPolicy('maxThrottledAttempts', 'an integer in [0, 10000]', maxThrottledAttempts);
  }
  const budgetExhausted = input.budgetExhausted ?? d.budgetExhausted;
  if (budgetExhausted !== 'stop' && budgetExhausted !== 'wait') throw invalidPolicy('budgetExhausted', '"stop" or "wait"', budgetExhausted);
  const hedge = input.hedge === undefined || input.hedge === null ? null : normalizeHedge(input.hedge, 'hedge');
  const chaos = normalizeChaos(input.chaos, 'chaos');

  const maxDelayMs = Math.max(backoffCeiling(backoff), throttleBackoff ? backoffCeiling(throttleBackoff) : 0, honor ? retryAfter.maxMs : 0);

  const spec = Object.freeze({
    maxAttempts,
    deadlineMs,
    attemptTimeoutMs,
    minAttemptMs,
    backoff,
    throttleBackoff,
    retryOn: Object.freeze({ status: retryOnStatus.patterns, errors: Object.freeze([...retryOnErrors]), statusWithWait: retryOnStatusWithWait.patterns }),
    safeStatuses: safeStatuses.patterns,
    throttleStatuses: throttleStatuses.patterns,
    retryAfter: Object.freeze({ honor, statuses: retryAfter.statuses.patterns, maxMs: retryAfter.maxMs, jitterRatio, jitterMinMs, jitterMaxMs, lengthenOnly }),
    unknownOutcome,
    idempotent,
    deferOverMs,
    budget,
    throttleCountsAsAttempt,
    maxThrottledAttempts,
    budgetExhausted,
    hedge: hedge === null ? null : Object.freeze({ delayMs: hedge.delayMs, maxHedges: hedge.maxHedges, maxExtraLoad: hedge.maxExtraLoad }),
    chaos: chaosSpecOf(chaos),
  });

  return Object.freeze({
    name,
    maxAttempts,
    deadlineMs,
    attemptTimeoutMs,
    minAttemptMs,
    backoff,
    throttleBackoff,
    retryOnStatus,
    retryOnErrors,
    retryOnStatusWithWait,
    safeStatuses,
    throttleStatuses,
    retryAfter,
    unknownOutcome,
    idempotent,
    deferOverMs,
    budget,
    throttleCountsAsAttempt,
    maxThrottledAttempts,
    budgetExhausted,
    hedge,
    chaos,
    maxDelayMs,
    spec,
  });
}

/** A policy with relent's defaults. */
export const DEFAULT_POLICY: Policy = createPolicy({});
