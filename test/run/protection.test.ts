import { describe, expect, it } from 'vitest';
import { createCircuitBreaker, type BreakerStateChange } from '../../src/core/breaker.js';
import { RelentError } from '../../src/core/errors.js';
import type { AttemptEvent, ResultEvent } from '../../src/core/types.js';
import { createBulkhead } from '../../src/run/bulkhead.js';
import { execute, run, type AttemptContext, type Instrumentation, type RelentEvent } from '../../src/run/run.js';
import { createTestClock, type TestClock } from '../../src/testing/index.js';

const sleep = (clock: TestClock, ms: number): Promise<void> => new Promise((resolve) => clock.setTimer(resolve, ms));

/** Runs `start()` while firing the test clock's timers, then returns its result. */
async function drive<T>(clock: TestClock, start: () => Promise<T>): Promise<T> {
  const p = start();
  await clock.runAll();
  return p;
}

describe('run() with a circuit breaker', () => {
  const breakerSpec = { minimumThroughput: 5, failureRatio: 0.5, windowMs: 10_000, openMs: 1_000 };
  const once = { maxAttempts: 1, deadlineMs: 5_000 };

  it('opens on failures, then fails fast without calling the operation; one trial after the open period; closes on success', async () => {
    const clock = createTestClock();
    const changes: BreakerStateChange[] = [];
    const breaker = createCircuitBreaker(breakerSpec, { name: 'dep', onStateChange: (c) => changes.push(c) });
    let calls = 0;
    let status = 503;
    const op = async () => {
      calls++;
      return { status };
    };

    for (let i = 0; i < 5; i++) {
      const r = await execute(op, { policy: once, clock, breaker });
      expect(r.reason).toBe('max_attempts');
    }
    expect(calls).toBe(5);
    expect(breaker.state(clock.wallNow())).toBe('open');

    // Open: no call, no attempt event, a result event, ERR_CIRCUIT_OPEN.
    for (let i = 0; i < 3; i++) {
      const events: RelentEvent[] = [];
      const err = await run(op, { policy: once, clock, breaker, onEvent: (e) => events.push(e) }).catch((e: unknown) => e);
      expect(RelentError.is(err)).toBe(true);
      expect((err as RelentError).code).toBe('ERR_CIRCUIT_OPEN');
      expect((err as RelentError).reason).toBe('circuit_open');
      expect((err as RelentError).attempts).toBe(0);
      expect(events).toEqual([
        { type: 'result', operationId: expect.any(String), status: null, errorClass: null, reason: 'circuit_open', attempts: 0, ts: expect.any(Number) },
      ]);
      clock.advance(100);
    }
    expect(calls).toBe(5);

    // After the open period: one trial goes through while another caller still fails fast.
    clock.advance(1_000);
    status = 200;
    const trial = execute(
      async () => {
        calls++;
        await sleep(clock, 50);
        return { status };
      },
      { policy: once, clock, breaker },
    );
    await clock.flush();
    const concurrent = await execute(op, { policy: once, clock, breaker });
    expect(concurrent.reason).toBe('circuit_open');
    expect(calls).toBe(6);
    await clock.runAll();
    expect((await trial).reason).toBe('return');
    expect(breaker.state(clock.wallNow())).toBe('closed');
    expect(changes.map((c) => `${c.from}→${c.to}:${c.reason}`)).toEqual([
      'closed→open:failure_ratio',
      'open→half_open:open_elapsed',
      'half_open→closed:trial_success',
    ]);

    // Closed again: calls go through.
    expect((await execute(op, { policy: once, clock, breaker })).reason).toBe('return');
    expect(calls).toBe(7);
  });

  it('a failed trial reopens the circuit and the retry after it is refused', async () => {
    const clock = createTestClock();
    const breaker = createCircuitBreaker({ ...breakerSpec, minimumThroughput: 2 });
    let calls = 0;
    const op = async () => {
      calls++;
      return { status: 503 };
    };
    const policy = { maxAttempts: 5, deadlineMs: 60_000, backoff: { kind: 'constant' as const, delayMs: 10 } };
    const events: RelentEvent[] = [];
    // Attempts 1 and 2 fail and open the circuit; attempt 3 is refused.
    const r = await drive(clock, () => execute(op, { policy, clock, breaker, onEvent: (e) => events.push(e) }));
    expect(calls).toBe(2);
    expect(r.reason).toBe('circuit_open');
    expect(r.attempts).toBe(2);
    expect(r.outcome).toEqual({ ok: true, value: { status: 503 } }); // the last real answer, as when retries run out
    expect(events.map((e) => (e.type === 'attempt' ? e.decision : `result:${e.reason}`))).toEqual(['retry', 'retry', 'result:circuit_open']);

    clock.advance(1_000);
    const r2 = await drive(clock, () => execute(op, { policy, clock, breaker }));
    expect(calls).toBe(3); // exactly one trial, then fail fast
    expect(r2.reason).toBe('circuit_open');
    expect(breaker.state(clock.wallNow())).toBe('open');
  });

  it('a cancelled call is ignored by the breaker (the trial slot is handed back)', async () => {
    const clock = createTestClock();
    const breaker = createCircuitBreaker({ ...breakerSpec, minimumThroughput: 1 });
    await execute(async () => ({ status: 500 }), { policy: once, clock, breaker });
    clock.advance(1_000);
    const ac = new AbortController();
    const p = execute(() => sleep(clock, 1_000).then(() => ({ status: 200 })), { policy: once, clock, breaker, signal: ac.signal });
    await clock.flush();
    ac.abort();
    expect((await p).reason).toBe('cancelled');
    expect(breaker.state(clock.wallNow())).toBe('half_open');
    expect(breaker.tryPass(clock.wallNow())).toBe(true);
  });

  it('an attempt timeout counts as a failure', async () => {
    const clock = createTestClock();
    const breaker = createCircuitBreaker({ ...breakerSpec, minimumThroughput: 1 });
    const r = await drive(clock, () => execute(() => new Promise(() => {}), { policy: { ...once, attemptTimeoutMs: 100 }, clock, breaker }));
    expect(r.last?.errorClass).toBe('timeout');
    expect(breaker.state(clock.wallNow())).toBe('open');
  });
});

describe('run() with a bulkhead', () => {
  it('never exceeds the cap under 50 concurrent run() calls; every call completes', async () => {
    const clock = createTestClock();
    const bulkhead = createBulkhead({ maxConcurrent: 5, maxQueue: 50 });
    let active = 0;
    let max = 0;
    let calls = 0;
    const op = async () => {
      calls++;
      active++;
      max = Math.max(max, active);
      await sleep(clock, 10);
      active--;
      return { status: 200 };
    };
    const all = Promise.all(Array.from({ length: 50 }, () => run(op, { policy: { deadlineMs: 60_000 }, clock, bulkhead })));
    await clock.runAll();
    const values = await all;
    expect(values).toHaveLength(50);
    expect(calls).toBe(50);
    expect(max).toBe(5);
    expect(bulkhead.active).toBe(0);
    expect(bulkhead.queued).toBe(0);
    expect(clock.now()).toBe(100); // 10 waves of 10 ms
  });

  it('rejects overflow at once with ERR_BULKHEAD_FULL (terminal bulkhead_full, its own word, no call)', async () => {
    const clock = createTestClock();
    const bulkhead = createBulkhead({ maxConcurrent: 2, maxQueue: 3 });
    let calls = 0;
    const op = async () => {
      calls++;
      await sleep(clock, 10);
      return { status: 200 };
    };
    const events: RelentEvent[][] = [];
    const results = Array.from({ length: 10 }, () => {
      const ev: RelentEvent[] = [];
      events.push(ev);
      return execute(op, { policy: { deadlineMs: 60_000 }, clock, bulkhead, onEvent: (e) => ev.push(e) });
    });
    await clock.flush();
    expect(bulkhead.active).toBe(2);
    expect(bulkhead.queued).toBe(3);
    await clock.runAll();
    const done = await Promise.all(results);
    const rejected = done.filter((r) => r.reason === 'bulkhead_full');
    expect(rejected).toHaveLength(5);
    for (const r of rejected) {
      expect(r.attempts).toBe(0);
      expect(r.outcome.ok).toBe(false);
      expect((r.outcome as { error: RelentError }).error.code).toBe('ERR_BULKHEAD_FULL');
    }
    expect(calls).toBe(5);
    expect(events.filter((ev) => ev.length === 1 && ev[0]!.type === 'result' && ev[0]!.reason === 'bulkhead_full')).toHaveLength(5);
  });

  it('waits in the queue no longer than the deadline (deadline_exceeded, no call)', async () => {
    const clock = createTestClock();
    const bulkhead = createBulkhead({ maxConcurrent: 1, maxQueue: 5 });
    const long = execute(() => sleep(clock, 1_000).then(() => ({ status: 200 })), { policy: { deadlineMs: 5_000 }, clock, bulkhead });
    let called = false;
    const events: RelentEvent[] = [];
    const queued = execute(
      async () => {
        called = true;
        return { status: 200 };
      },
      { policy: { deadlineMs: 100 }, clock, bulkhead, onEvent: (e) => events.push(e) },
    );
    await clock.flush();
    expect(bulkhead.queued).toBe(1);
    await clock.advanceAsync(100);
    const r = await queued;
    expect(r.reason).toBe('deadline_exceeded');
    expect(r.attempts).toBe(0);
    expect(called).toBe(false);
    expect((r.outcome as { error: RelentError }).error.code).toBe('ERR_DEADLINE_EXCEEDED');
    expect(events).toHaveLength(1);
    expect(bulkhead.queued).toBe(0);
    await clock.runAll();
    expect((await long).reason).toBe('return');
    expect(bulkhead.active).toBe(0);
  });

  it('a caller abort while queued leaves the queue at once (cancelled)', async () => {
    const clock = createTestClock();
    const bulkhead = createBulkhead({ maxConcurrent: 1, maxQueue: 5 });
    const long = execute(() => sleep(clock, 1_000).then(() => ({ status: 200 })), { policy: { deadlineMs: 5_000 }, clock, bulkhead });
    const ac = new AbortController();
    const queued = execute(async () => ({ status: 200 }), { policy: { deadlineMs: 5_000 }, clock, bulkhead, signal: ac.signal });
    await clock.flush();
    expect(bulkhead.queued).toBe(1);
    ac.abort();
    const r = await queued;
    expect(r.reason).toBe('cancelled');
    expect((r.outcome as { error: RelentError }).error.code).toBe('ERR_CANCELLED');
    expect(bulkhead.queued).toBe(0);
    expect(clock.now()).toBe(0);
    await clock.runAll();
    await long;
    expect(bulkhead.active).toBe(0);
  });

  it('releases the slot when an attempt times out, even if the operation ignores its signal', async () => {
    const clock = createTestClock();
    const bulkhead = createBulkhead({ maxConcurrent: 1, maxQueue: 1 });
    const hung = execute(() => new Promise<never>(() => {}), { policy: { maxAttempts: 1, deadlineMs: 5_000, attemptTimeoutMs: 50 }, clock, bulkhead });
    const next = execute(async () => ({ status: 200 }), { policy: { deadlineMs: 5_000 }, clock, bulkhead });
    await clock.runAll();
    expect((await hung).last?.errorClass).toBe('timeout');
    expect((await next).reason).toBe('return');
    expect(bulkhead.active).toBe(0);
  });

  it('holds the slot per call, not during the backoff between calls', async () => {
    const clock = createTestClock();
    const bulkhead = createBulkhead({ maxConcurrent: 1 });
    const seen: number[] = [];
    const op = async (ctx: AttemptContext) => {
      seen.push(bulkhead.active);
      return { status: ctx.attempt < 3 ? 503 : 200 };
    };
    const p = execute(op, { policy: { maxAttempts: 3, deadlineMs: 5_000, backoff: { kind: 'constant', delayMs: 100 } }, clock, bulkhead });
    await clock.flush();
    expect(bulkhead.active).toBe(0); // waiting out the backoff: the slot is free
    await clock.runAll();
    expect((await p).reason).toBe('return');
    expect(seen).toEqual([1, 1, 1]);
  });

  it('a bulkhead wait that fails hands the half-open trial back to the breaker', async () => {
    const clock = createTestClock();
    const breaker = createCircuitBreaker({ minimumThroughput: 1, openMs: 1_000 });
    const bulkhead = createBulkhead({ maxConcurrent: 1, maxQueue: 1 });
    await execute(async () => ({ status: 500 }), { policy: { maxAttempts: 1 }, clock, breaker });
    clock.advance(1_000);
    bulkhead.tryAcquire(); // someone else holds the only slot
    const r = await drive(clock, () => execute(async () => ({ status: 200 }), { policy: { deadlineMs: 50 }, clock, breaker, bulkhead }));
    expect(r.reason).toBe('deadline_exceeded');
    expect(breaker.state(clock.wallNow())).toBe('half_open');
    expect(breaker.tryPass(clock.wallNow())).toBe(true); // the trial slot is free again
  });
});

describe('instrumentation hooks', () => {
  function recorder() {
    const log: string[] = [];
    const instrumentation: Instrumentation = {
      operation(info) {
        log.push(`op:${info.method}:${info.endpoint}`);
        return {
          attempt(n) {
            log.push(`attempt:${n}`);
            return {
              run(fn, arg) {
                log.push(`run:${n}`);
                return fn(arg);
              },
              end(ev: AttemptEvent) {
                log.push(`end:${ev.attempt}:${ev.decision}`);
              },
            };
          },
          run(fn, arg) {
            log.push('run:check');
            return fn(arg);
          },
          end(ev: ResultEvent) {
            log.push(`result:${ev.reason}:${ev.attempts}`);
          },
        };
      },
    };
    return { log, instrumentation };
  }

  it('are told of the operation, each call (around it) and the end, without onEvent', async () => {
    const clock = createTestClock();
    const { log, instrumentation } = recorder();
    const op = async (ctx: AttemptContext) => {
      log.push(`call:${ctx.attempt}`);
      return { status: ctx.attempt === 1 ? 503 : 200 };
    };
    await drive(clock, () =>
      run(op, { policy: { backoff: { kind: 'constant', delayMs: 10 } }, clock, instrumentation, method: 'GET', endpoint: 'https://api.example.com/items' }),
    );
    expect(log).toEqual([
      'op:GET:https://api.example.com/items',
      'attempt:1',
      'run:1',
      'call:1',
      'end:1:retry',
      'attempt:2',
      'run:2',
      'call:2',
      'end:2:return',
      'result:return:2',
    ]);
  });

  it('an operation refused by the breaker has a scope with no attempt', async () => {
    const clock = createTestClock();
    const breaker = createCircuitBreaker({ minimumThroughput: 1 });
    await execute(async () => ({ status: 500 }), { policy: { maxAttempts: 1 }, clock, breaker });
    const { log, instrumentation } = recorder();
    await execute(async () => ({ status: 200 }), { clock, breaker, instrumentation });
    expect(log).toEqual(['op:null:null', 'result:circuit_open:0']);
  });

  it('run the state check in the operation scope', async () => {
    const clock = createTestClock();
    const { log, instrumentation } = recorder();
    const r = await drive(clock, () =>
      execute(() => new Promise(() => {}), {
        policy: { attemptTimeoutMs: 100 },
        method: 'POST',
        clock,
        instrumentation,
        stateCheck: async () => ({ status: 200 }),
      }),
    );
    expect(r.reason).toBe('check_state');
    expect(log).toEqual(['op:POST:null', 'attempt:1', 'run:1', 'end:1:check_state', 'run:check', 'result:check_state:1']);
  });
});
