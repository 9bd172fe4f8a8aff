import type { OperationState } from '../core/decide.js';
import type { DecisionResult } from '../core/types.js';

/**
 * The simulator keeps one operation state per simulated operation and moves it
 * forward in place. The state is created by the core's `startOperation`, every
 * decision is the core's `decide()`, and the two transitions below do exactly what the
 * core's `beginAttempt` / `afterRetry` do — without allocating a copy per attempt
 * (`{ ...state }` costs ~0.3 µs per call, which alone would cap the simulator well
 * below a million attempts per second). test/sim/state.test.ts checks, over random
 * states, that both stay equal to the core's functions.
 */
export type SimState = { -readonly [K in keyof OperationState]: OperationState[K] };

/** The core's state object, now owned by the simulator (startOperation returns a fresh, unfrozen object). */
export function ownState(state: OperationState): SimState {
  return state as SimState;
}

/** In place: `beginAttempt(state)`. */
export function nextAttempt(state: SimState): void {
  state.attempt += 1;
  state.throttled = state.throttled ?? 0;
  state.budgetPending = false;
}

/** In place: `afterRetry(state, result)`. */
export function recordRetry(state: SimState, result: DecisionResult): void {
  state.prevDelayMs = result.delayMs;
  state.lastBudgetCost = result.budgetCost;
  state.throttled = (state.throttled ?? 0) + (result.uncounted === true ? 1 : 0);
  state.budgetPending = result.budgetPending === true;
}
