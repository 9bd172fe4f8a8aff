import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { afterRetry, beginAttempt, type OperationState } from '../../src/core/decide.js';
import type { DecisionResult } from '../../src/core/types.js';
import { nextAttempt, recordRetry, type SimState } from '../../src/sim/state.js';

// The simulator moves operation states forward in place (no copy per attempt). These
// must stay exactly the core's beginAttempt / afterRetry.
const stateArb: fc.Arbitrary<OperationState> = fc.record({
  attempt: fc.integer({ min: 0, max: 10_000 }),
  startedAt: fc.double({ min: 0, max: 1e9, noNaN: true }),
  deadlineAt: fc.double({ min: 0, max: 2e9, noNaN: true }),
  idempotent: fc.boolean(),
  prevDelayMs: fc.option(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { nil: null }),
  lastBudgetCost: fc.integer({ min: 0, max: 14 }),
});

const resultArb: fc.Arbitrary<DecisionResult> = fc.record({
  decision: fc.constantFrom('retry' as const, 'defer' as const),
  why: fc.constant('retryable' as const),
  delayMs: fc.option(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { nil: null }),
  retryAfterMs: fc.constant(null),
  retryAfterValid: fc.constant(null),
  budgetCost: fc.integer({ min: 0, max: 14 }),
});

describe('simulator state transitions equal the core\'s', () => {
  it('nextAttempt(s) ≡ beginAttempt(s)', () => {
    fc.assert(
      fc.property(stateArb, (s) => {
        const mine = { ...s } as SimState;
        nextAttempt(mine);
        expect(mine).toEqual(beginAttempt(s));
      }),
    );
  });

  it('recordRetry(s, r) ≡ afterRetry(s, r)', () => {
    fc.assert(
      fc.property(stateArb, resultArb, (s, r) => {
        const mine = { ...s } as SimState;
        recordRetry(mine, r);
        expect(mine).toEqual(afterRetry(s, r));
      }),
    );
  });
});
