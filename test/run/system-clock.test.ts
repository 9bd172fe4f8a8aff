import { describe, expect, it } from 'vitest';
import { run, type AttemptContext } from '../../src/run/run.js';
import { RelentError } from '../../src/core/errors.js';

// run() with nothing around its calls, on the system clock, takes a shortcut: its first
// attempt is carried out without the core's operation, which is made only when the
// attempt ends with more than a plain answer. These check that every way out of the
// shortcut behaves as the full executor does.
describe('run() on the system clock: the success path and every way out of it', () => {
  it('a plain answer is the result after one call; the first context is complete', async () => {
    const calls: AttemptContext[] = [];
    const value = await run(
      async (ctx) => {
        calls.push(ctx);
        return { status: 204, body: 'x' };
      },
      { operationId: 'op-fast', policy: { deadlineMs: 5_000, attemptTimeoutMs: 1_000 } },
    );
    expect(value).toEqual({ status: 204, body: 'x' });
    expect(calls).toHaveLength(1);
    const ctx = calls[0]!;
    expect([ctx.attempt, ctx.operationId, ctx.requestId, ctx.timeoutMs, ctx.remainingMs]).toEqual([1, 'op-fast', 'op-fast/attempt-1', 1_000, 5_000]);
    expect(ctx.signal.aborted).toBe(false);
  });

  it('a retryable status is retried; both attempts share the operation id', async () => {
    const calls: AttemptContext[] = [];
    const value = await run(
      async (ctx) => {
        calls.push(ctx);
        return { status: ctx.attempt === 1 ? 503 : 200 };
      },
      { policy: { backoff: { kind: 'constant', delayMs: 0 } } },
    );
    expect(value).toEqual({ status: 200 });
    expect(calls.map((c) => c.attempt)).toEqual([1, 2]);
    expect(calls[0]!.operationId).toBe(calls[1]!.operationId);
    expect(calls.map((c) => c.requestId)).toEqual([`${calls[0]!.operationId}/attempt-1`, `${calls[0]!.operationId}/attempt-2`]);
  });

  it('an id read during the first call is the one the later attempts carry', async () => {
    const ids: string[] = [];
    await run(
      async (ctx) => {
        ids.push(ctx.operationId);
        if (ctx.attempt === 1) throw Object.assign(new Error('refused'), { code: 'ECONNREFUSED' });
        return 'ok';
      },
      { policy: { backoff: { kind: 'constant', delayMs: 0 } } },
    );
    expect(ids).toHaveLength(2);
    expect(ids[1]).toBe(ids[0]);
  });

  it('a thrown error is classified and retried; the last error is rethrown as is', async () => {
    const error = Object.assign(new Error('refused'), { code: 'ECONNREFUSED' });
    let n = 0;
    await expect(
      run(
        async () => {
          n++;
          throw error;
        },
        { policy: { maxAttempts: 3, backoff: { kind: 'constant', delayMs: 0 } } },
      ),
    ).rejects.toBe(error);
    expect(n).toBe(3);
    // A synchronous throw is the same as a rejection.
    await expect(
      run(
        () => {
          throw error;
        },
        { policy: { maxAttempts: 1 } },
      ),
    ).rejects.toBe(error);
  });

  it('a caller classifier is asked once per answer, with the policy', async () => {
    const seen: unknown[] = [];
    const value = await run(async (ctx) => ctx.attempt, {
      policy: { backoff: { kind: 'constant', delayMs: 0 } },
      classifyValue: (v, policy) => {
        seen.push([v, typeof policy.deadlineMs]);
        return { status: v === 1 ? 503 : 200 };
      },
    });
    expect(value).toBe(2);
    expect(seen).toEqual([
      [1, 'number'],
      [2, 'number'],
    ]);
  });

  it('an attempt that outlives its timeout is aborted and retried; its late answer is ignored', async () => {
    const signals: AbortSignal[] = [];
    let release!: () => void;
    const value = await run(
      (ctx) => {
        signals.push(ctx.signal);
        if (ctx.attempt === 1)
          return new Promise<string>((resolve) => {
            release = () => resolve('late');
          }); // ignores its signal
        return Promise.resolve('second');
      },
      { policy: { attemptTimeoutMs: 20, deadlineMs: 5_000, backoff: { kind: 'constant', delayMs: 0 } } },
    );
    expect(value).toBe('second');
    expect(signals[0]!.aborted).toBe(true);
    expect(RelentError.is(signals[0]!.reason) && signals[0]!.reason.code).toBe('ERR_DEADLINE_EXCEEDED');
    release();
    await new Promise((r) => setImmediate(r));
  });

  it('the deadline ends an operation whose calls never answer', async () => {
    await expect(run(() => new Promise<never>(() => {}), { policy: { deadlineMs: 30, attemptTimeoutMs: 30 } })).rejects.toMatchObject({
      code: 'ERR_DEADLINE_EXCEEDED',
      attempts: 1,
    });
  });
});
