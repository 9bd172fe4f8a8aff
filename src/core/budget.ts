import { invalidPolicy } from './errors.js';

/**
 * Shared retry budgets: one budget is shared by all operations of a client (or of
 * one dependency), so a fleet of operations cannot multiply load on a dependency that
 * is failing. `decide()` and `preflight()` consult the budget they are handed; nothing
 * else does.
 *
 * relent's default is `ratio`: a token bucket in the manner of Finagle's RetryBudget and
 * the SRE book's per-client retry ratio, tuned so that it drops the load of an outage
 * and keeps the success of the recovery (docs/simulator.md, the overload scenario):
 * - deposits: `ratio` tokens for every attempt the dependency answered without a failure
 *   the policy retries (`deposit: "success"`, the default), or for every operation's
 *   first attempt (`deposit: "operation"`, Finagle's and the SRE book's rule). Time adds
 *   `minPerSecond` tokens per second (a floor for quiet clients, like Finagle's
 *   minRetriesPerSec and the SRE book's "60 retries per minute in a process"); the
 *   bucket holds at most `maxTokens`.
 * - a retry costs one token; with `refund` (default) a retry that succeeds gets its
 *   token back, as the AWS SDK's retry quota refunds a successful retry's cost.
 * So the tokens pay only for retries that fail: over any window,
 *   failed retries <= ratio × successes + minPerSecond × seconds + maxTokens
 * (with `deposit: "operation"`, ratio × operations). Against a dependency that fails
 * everything this is the floor alone; against one that serves S calls/s, retries stay
 * within the calls it can actually serve plus 10 % of them. (Finagle expires deposits
 * after a TTL; a capacity bound gives the same guarantee with O(1) state.)
 *
 * Also available, for the presets that copy them:
 * - `throttle`: gRPC A6 retryThrottling (failures −1, successes +tokenRatio, retries
 *   allowed only while tokens > maxTokens/2; kept in integer milli-tokens as gRPC does,
 *   and a "don't retry" pushback counts as a failure). It never waits: a preset with it
 *   sets `budgetExhausted: "stop"`.
 * - `quota`: the AWS SDK standard-mode retry quota (capacity 500; a retry costs 5 or 14,
 *   a timeout 10; a success refunds 1, or the retry's cost when it needed retries).
 */
export type BudgetSpec =
  | {
      readonly kind: 'ratio';
      readonly ratio?: number;
      readonly minPerSecond?: number;
      readonly maxTokens?: number;
      /** What earns `ratio` tokens: an answered attempt ("success", default) or an operation ("operation"). */
      readonly deposit?: 'success' | 'operation';
      /** A retry that succeeds gets its token back (default true). */
      readonly refund?: boolean;
    }
  | { readonly kind: 'throttle'; readonly maxTokens: number; readonly tokenRatio: number }
  | {
      readonly kind: 'quota';
      readonly capacity?: number;
      readonly retryCost?: number;
      readonly throttleCost?: number;
      readonly timeoutCost?: number;
      readonly successRefund?: number;
    };

export const RATIO_BUDGET_DEFAULTS = Object.freeze({
  kind: 'ratio' as const,
  ratio: 0.1,
  minPerSecond: 1,
  maxTokens: 10,
  deposit: 'success' as const,
  refund: true,
});

/** What decide() tells the budget about one observed attempt. */
export interface BudgetObservation {
  readonly attempt: number;
  /** An answer the policy counts as success (decision `return` for a non-error status). */
  readonly success: boolean;
  /** A failure the policy would retry (counts against gRPC throttling). */
  readonly retryableFailure: boolean;
  readonly throttled: boolean;
  readonly timeout: boolean;
  /** What the operation's previous retry cost (for the AWS refund). */
  readonly lastCost: number;
}

export interface RetryBudget {
  readonly spec: BudgetSpec;
  /** Records one observed attempt (deposits, refunds, throttling counts). */
  observe(o: BudgetObservation, now: number): void;
  /** Withdraws the cost of one retry and returns it; `false` when the budget cannot pay (no change then). */
  tryAcquire(o: { readonly throttled: boolean; readonly timeout: boolean }, now: number): number | false;
  /** Current tokens (after refill at `now`), for events and tests. */
  available(now: number): number;
  /**
   * When an attempt last came back answered (not a failure the policy retries), or null
   * if none has: a retry waits for an empty budget (budgetExhausted "wait") only while
   * the dependency is still answering someone (SERVING_WINDOW_MS).
   */
  lastAnswerAt(): number | null;
}

/** A dependency that answered an attempt within this long (ms) is still serving: waiting for the budget may pay off. */
export const SERVING_WINDOW_MS = 1000;

/** An answer that is not a failure the policy retries: the dependency is serving. */
export function isAnswer(o: BudgetObservation): boolean {
  return o.success || !o.retryableFailure;
}

/** A budget spec with every field filled in, as normalizeBudget returns it. */
export type ResolvedBudgetSpec =
  Required<Extract<BudgetSpec, { kind: 'ratio' }>> | Extract<BudgetSpec, { kind: 'throttle' }> | Required<Extract<BudgetSpec, { kind: 'quota' }>>;

export function normalizeBudget(input: unknown, field = 'budget'): ResolvedBudgetSpec {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw invalidPolicy(field, 'an object with `kind` ratio, throttle or quota (or null for none)', input);
  }
  const raw = input as Record<string, unknown>;
  const num = (key: string, fallback: number, min: number, max: number): number => {
    const v = raw[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) {
      throw invalidPolicy(`${field}.${key}`, `a number in [${min}, ${max}]`, v);
    }
    return v;
  };
  const only = (keys: string[]): void => {
    for (const k of Object.keys(raw))
      if (k !== 'kind' && !keys.includes(k)) throw invalidPolicy(`${field}.${k}`, `absent (a ${String(raw.kind)} budget takes ${keys.join(', ')})`, raw[k]);
  };
  switch (raw.kind) {
    case 'ratio': {
      only(['ratio', 'minPerSecond', 'maxTokens', 'deposit', 'refund']);
      const deposit = raw.deposit ?? RATIO_BUDGET_DEFAULTS.deposit;
      if (deposit !== 'success' && deposit !== 'operation') throw invalidPolicy(`${field}.deposit`, '"success" or "operation"', deposit);
      const refund = raw.refund ?? RATIO_BUDGET_DEFAULTS.refund;
      if (typeof refund !== 'boolean') throw invalidPolicy(`${field}.refund`, 'a boolean', refund);
      return Object.freeze({
        kind: 'ratio',
        ratio: num('ratio', RATIO_BUDGET_DEFAULTS.ratio, 0, 1000),
        minPerSecond: num('minPerSecond', RATIO_BUDGET_DEFAULTS.minPerSecond, 0, 1e6),
        maxTokens: num('maxTokens', RATIO_BUDGET_DEFAULTS.maxTokens, 1, 1e9),
        deposit,
        refund,
      });
    }
    case 'throttle': {
      only(['maxTokens', 'tokenRatio']);
      const maxTokens = num('maxTokens', NaN, 0.001, 1000);
      // gRPC keeps three decimals of tokenRatio (0.5466 → 0.546; 0.29 stays 0.29)
      const tokenRatio = toMilli(num('tokenRatio', NaN, 0.001, 1000)) / 1000;
      return Object.freeze({ kind: 'throttle', maxTokens, tokenRatio });
    }
    case 'quota':
      only(['capacity', 'retryCost', 'throttleCost', 'timeoutCost', 'successRefund']);
      return Object.freeze({
        kind: 'quota',
        capacity: num('capacity', 500, 1, 1e9),
        retryCost: num('retryCost', 14, 0, 1e9),
        throttleCost: num('throttleCost', 5, 0, 1e9),
        timeoutCost: num('timeoutCost', 14, 0, 1e9),
        successRefund: num('successRefund', 1, 0, 1e9),
      });
    default:
      throw invalidPolicy(`${field}.kind`, 'one of ratio, throttle, quota', raw.kind);
  }
}

/** Creates the shared state of a budget. Time is passed in (monotonic ms); no clock is read. */
export function createRetryBudget(input: BudgetSpec): RetryBudget {
  const spec = normalizeBudget(input);
  switch (spec.kind) {
    case 'ratio':
      return ratioBudget(spec);
    case 'throttle':
      return withAnswers(throttleBudget(spec.maxTokens, spec.tokenRatio, spec));
    case 'quota':
      return withAnswers(quotaBudget(spec));
  }
}

/** A budget kind's token rules, before `lastAnswerAt` is added. */
type TokenRules = Omit<RetryBudget, 'lastAnswerAt'>;

/** Adds `lastAnswerAt` to a budget kind that does not track answers itself. */
function withAnswers(rules: TokenRules): RetryBudget {
  let answerAt: number | null = null;
  return {
    spec: rules.spec,
    observe(o, now) {
      if (isAnswer(o)) answerAt = now;
      rules.observe(o, now);
    },
    tryAcquire: rules.tryAcquire,
    available: rules.available,
    lastAnswerAt: () => answerAt,
  };
}

/** A resolved `ratio` budget spec. */
export type RatioBudgetSpec = Extract<ResolvedBudgetSpec, { kind: 'ratio' }>;

/**
 * What one observed attempt deposits into a `ratio` budget: `ratio` for an answered
 * attempt (or, with `deposit: "operation"`, for a first attempt), plus the token back
 * for a retry that was answered (`refund`). The one home of the deposit rule: the
 * in-process budget and the fleet's leased budget (src/core/fleet.ts) both use it.
 */
export function ratioDeposit(spec: RatioBudgetSpec, o: BudgetObservation): number {
  const answered = isAnswer(o);
  let add = (spec.deposit === 'operation' ? o.attempt === 1 : answered) ? spec.ratio : 0;
  // A retry that succeeded paid for load the dependency could serve: its token comes back.
  if (spec.refund && answered && o.attempt > 1) add += 1;
  return add;
}

function ratioBudget(spec: RatioBudgetSpec): RetryBudget {
  const { minPerSecond, maxTokens } = spec;
  let tokens = maxTokens;
  let last: number | null = null;
  let answerAt: number | null = null;
  const refill = (now: number): void => {
    if (last !== null && now > last && minPerSecond > 0) {
      tokens = Math.min(maxTokens, tokens + ((now - last) / 1000) * minPerSecond);
    }
    if (last === null || now > last) last = now;
  };
  return {
    spec,
    observe(o, now) {
      refill(now);
      if (isAnswer(o)) answerAt = now;
      const add = ratioDeposit(spec, o);
      if (add > 0) tokens = Math.min(maxTokens, tokens + add);
    },
    tryAcquire(_o, now) {
      refill(now);
      if (tokens < 1) return false;
      tokens -= 1;
      return 1;
    },
    available(now) {
      refill(now);
      return tokens;
    },
    lastAnswerAt: () => answerAt,
  };
}

/**
 * gRPC A6 retryThrottling in integer milli-tokens, as gRPC core and grpc-java keep it
 * (tokenRatio "up to 3 decimal places": 0.5466 counts as 0.546): no floating-point drift,
 * so a retry is throttled at exactly the threshold, maxTokens / 2 (integer milli-tokens,
 * rounded down as they divide).
 */
/** Thousandths of `x`, the rest dropped, read as the decimal it was written as (0.29 → 290, not 289.99…). */
function toMilli(x: number): number {
  return Math.floor(Math.round(x * 1e6) / 1e3);
}

function throttleBudget(maxTokens: number, tokenRatio: number, spec: BudgetSpec): TokenRules {
  const max = toMilli(maxTokens);
  const ratio = toMilli(tokenRatio);
  const threshold = Math.floor(max / 2);
  let milli = max;
  return {
    spec,
    observe(o) {
      if (o.retryableFailure) milli = Math.max(0, milli - 1000);
      else if (o.success) milli = Math.min(max, milli + ratio);
    },
    tryAcquire() {
      return milli > threshold ? 0 : false;
    },
    available() {
      return milli / 1000;
    },
  };
}

function quotaBudget(spec: Extract<ResolvedBudgetSpec, { kind: 'quota' }>): TokenRules {
  const { capacity, retryCost, throttleCost, timeoutCost, successRefund } = spec;
  let tokens = capacity;
  return {
    spec,
    observe(o) {
      if (!o.success) return;
      tokens = Math.min(capacity, tokens + (o.attempt > 1 && o.lastCost > 0 ? o.lastCost : successRefund));
    },
    tryAcquire(o) {
      const cost = o.throttled ? throttleCost : o.timeout ? timeoutCost : retryCost;
      if (tokens < cost) return false;
      tokens -= cost;
      return cost;
    },
    available() {
      return tokens;
    },
  };
}
