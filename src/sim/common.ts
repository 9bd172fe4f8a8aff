import { boundObservation } from '../core/decide.js';
import { createRetryBudget, type RetryBudget } from '../core/budget.js';
import { RelentError } from '../core/errors.js';
import type { Policy } from '../core/policy.js';
import type { Observation } from '../core/types.js';
import { resolvePolicyInput } from '../presets/index.js';
import type { SimPolicy } from './policies.js';

/** Called after each unit of work; `done` grows to `total`. Synchronous: the simulator never yields. */
export type ProgressFn = (done: number, total: number, label: string) => void;

/** A policy of a scenario, resolved and validated once. */
export interface ResolvedSimPolicy {
  readonly name: string;
  readonly policy: Policy;
  /** Whether each client gets `createRetryBudget(policy.budget)`. */
  readonly budgeted: boolean;
  readonly source: SimPolicy;
}

/** Resolves a scenario policy; errors name the field (`policies[2].policy.backoff.capMs`). */
export function resolveSimPolicy(p: SimPolicy, field: string): ResolvedSimPolicy {
  let policy: Policy;
  try {
    policy = resolvePolicyInput(p.policy);
  } catch (e) {
    if (RelentError.is(e)) {
      const inner = e.field ? `${field}.${e.field}` : field;
      throw new RelentError('ERR_INVALID_INPUT', `${field}: ${e.message}`, { field: inner, cause: e });
    }
    throw e;
  }
  return { name: p.name, policy, budgeted: p.budget !== false && policy.budget !== null, source: p };
}

/** A timed-out attempt, as the core's own rule makes one of an answer later than its bound. */
export const TIMED_OUT: Observation = boundObservation({ status: 200, elapsedMs: 1 }, 0);

/** A fresh shared budget for one client of a policy, or null. */
export function budgetFor(p: ResolvedSimPolicy): RetryBudget | null {
  return p.budgeted && p.policy.budget ? createRetryBudget(p.policy.budget) : null;
}

/** A mutable observation the simulator reuses (decide() keeps no reference to it). */
export type SimObservation = { -readonly [K in keyof Observation]: Observation[K] };

export function statusObservation(status: number): SimObservation {
  return { status, elapsedMs: 0 };
}

/** The q-quantile (0..1) of the first `n` values of `values` (sorted in place). */
export function quantile(values: Float64Array, n: number, q: number): number {
  if (n === 0) return Number.NaN;
  const view = values.subarray(0, n);
  view.sort();
  const i = Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1));
  return view[i]!;
}

export function round(v: number, digits: number): number {
  if (!Number.isFinite(v)) return v;
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}
