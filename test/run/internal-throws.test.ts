// What the executor is handed besides the attempt function — an injected clock, the
// instrumentation — may be wrong too (JavaScript has no type check). A clock missing a
// method is refused at the call with a message naming it; anything that throws while an
// answer is being settled ends the operation with its error. Before, an answer that came
// through a thenable answering synchronously (as the HTTP drivers' handlers do) lost the
// error inside the driver, and the caller's promise never settled.
import { describe, expect, it } from 'vitest';
import { execute, run, type Instrumentation } from '../../src/run/run.js';
import { createTestClock } from '../../src/testing/index.js';
import { RelentError } from '../../src/core/errors.js';

/** A thenable that answers at once, inside then(), as an undici handler answers from its parser. */
function syncAnswer<T>(value: T): PromiseLike<T> {
  return { then: (ok) => (ok ? ok(value) : undefined) } as PromiseLike<T>;
}

describe('an injected clock is checked where it is given', () => {
  for (const missing of ['now', 'wallNow', 'setTimer'] as const) {
    it(`a clock without ${missing}() is ERR_INVALID_INPUT naming it`, async () => {
      const clock = createTestClock() as unknown as Record<string, unknown>;
      const broken = { ...clock, [missing]: undefined };
      const err = await run(() => 'ok', { clock: broken as never, onEvent: () => {} }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(RelentError);
      expect((err as RelentError).code).toBe('ERR_INVALID_INPUT');
      expect((err as Error).message).toContain(`\`clock\` to have a ${missing}() function`);
    });
  }

  it('a clock that is not an object is refused too', async () => {
    const err = await run(() => 'ok', { clock: 42 as never }).then(
      () => null,
      (e: unknown) => e,
    );
    expect((err as RelentError).code).toBe('ERR_INVALID_INPUT');
    expect((err as Error).message).toContain('`clock` to be a clock');
  });
});

describe('a throw while an answer is settled ends the operation with it', () => {
  it('an attempt scope whose end() throws: the operation rejects with that error', async () => {
    const boom = new Error('instrumentation failed');
    const through = <A, R>(fn: (arg: A) => R, arg: A): R => fn(arg);
    const instrumentation: Instrumentation = {
      operation: () => ({
        attempt: () => ({
          run: through,
          end: () => {
            throw boom;
          },
        }),
        run: through,
        end: () => {},
      }),
    };
    const clock = createTestClock();
    let result: Awaited<ReturnType<typeof execute<string>>> | null = null;
    void execute(() => syncAnswer('ok'), { clock, instrumentation }).then((r) => {
      result = r;
    });
    // The answer came synchronously: a few turns of the event loop are more than enough (no wall-clock wait).
    for (let i = 0; i < 10 && result === null; i++) await new Promise((resolve) => setImmediate(resolve));
    expect(result, 'the operation never settled').not.toBeNull();
    expect(result!.outcome.ok).toBe(false);
    expect((result!.outcome as { error: unknown }).error).toBe(boom);
  });
});
