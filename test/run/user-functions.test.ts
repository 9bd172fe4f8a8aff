// What a user's attempt function may do (issue 21, bugs 1 and 2): return a plain value,
// throw synchronously, return a thenable or anything at all, and cancel the operation
// while it runs. Every case ends the operation by the normal rules; nothing escapes as
// an uncaught exception or an unhandled rejection (vitest fails the run on either).
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { execute, run, type AttemptContext, type RelentEvent } from '../../src/run/run.js';
import { createHedgeState } from '../../src/core/hedge.js';
import { createBulkhead } from '../../src/run/bulkhead.js';
import { createTestClock, createSeededRandom, type TestClock } from '../../src/testing/index.js';

/** Moves the test clock until the promise settles (never sleeps on the wall clock). */
async function drive<T>(clock: TestClock, p: Promise<T>): Promise<T> {
  let done = false;
  p.then(
    () => {
      done = true;
    },
    () => {
      done = true;
    },
  );
  for (let idle = 0; !done;) {
    if (await clock.next()) idle = 0;
    else if (++idle > 50) throw new Error('stalled: the operation never settled');
  }
  return p;
}

const FAST = { budget: null, backoff: { kind: 'constant', delayMs: 1 } } as const;

describe('plain values and synchronous throws (bug 1)', () => {
  it('a function returning a plain value resolves with it (the system clock, the success path)', async () => {
    expect(await run(() => 42)).toBe(42);
    expect(await run(() => 'ok', { policy: FAST })).toBe('ok');
    expect(await run(() => undefined)).toBeUndefined();
    expect(await run(() => null)).toBeNull();
  });

  it('the example of the issue: a sync function that throws once, then returns, on the real clock', async () => {
    let n = 0;
    const value = await run(
      () => {
        if (n++ === 0) throw Object.assign(new Error('first fails'), { code: 'ECONNRESET' });
        return 'ok';
      },
      { policy: FAST },
    );
    expect(value).toBe('ok');
    expect(n).toBe(2);
  });

  it('a plain value on a retry (the Runner path, with events, on the test clock)', async () => {
    const clock = createTestClock();
    const events: RelentEvent[] = [];
    let n = 0;
    const fn = (): { status: number } | Promise<{ status: number }> => (n++ === 0 ? Promise.resolve({ status: 503 }) : { status: 200 });
    const value = await drive(clock, run(fn, { clock, policy: FAST, onEvent: (e) => events.push(e) }));
    expect(value).toEqual({ status: 200 });
    expect(events.map((e) => (e.type === 'attempt' ? e.decision : e.reason))).toEqual(['retry', 'return', 'return']);
  });

  it('a synchronous throw is classified like a rejection (retried by its code, rethrown when final)', async () => {
    const clock = createTestClock();
    const boom = Object.assign(new Error('refused'), { code: 'ECONNREFUSED' });
    let calls = 0;
    const p = run(
      () => {
        calls++;
        throw boom;
      },
      { clock, policy: { ...FAST, maxAttempts: 3 } },
    );
    await expect(drive(clock, p)).rejects.toBe(boom);
    expect(calls).toBe(3);
  });

  it('a thenable that is not a promise is followed, and one whose then throws is a failure', async () => {
    const clock = createTestClock();
    const thenable = { then: (ok: (v: unknown) => void) => ok({ status: 200 }) };
    expect(
      await drive(
        clock,
        run(() => thenable as unknown as PromiseLike<{ status: number }>, { clock }),
      ),
    ).toEqual({ status: 200 });
    const bad = {
      then: () => {
        throw new Error('bad then');
      },
    };
    await expect(
      drive(
        clock,
        run(() => bad as unknown as PromiseLike<unknown>, { clock, policy: FAST }),
      ),
    ).rejects.toThrow('bad then');
  });

  it("a thenable is called once and answers as is (one that answers with itself, as the HTTP drivers' attempt handler does, is no loop)", async () => {
    const clock = createTestClock();
    let thens = 0;
    const self: { status: number; then(ok: (v: unknown) => void): void } = {
      status: 200,
      then(ok) {
        thens++;
        ok(self);
      },
    };
    const r = await drive(
      clock,
      execute(() => self as unknown as PromiseLike<unknown>, { clock }),
    );
    expect(r.outcome).toEqual({ ok: true, value: self });
    expect(thens).toBe(1);
  });

  it('a state check may return a plain value too', async () => {
    const clock = createTestClock();
    const p = execute((ctx: AttemptContext) => new Promise<never>((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason))), {
      clock,
      method: 'POST',
      policy: { attemptTimeoutMs: 10, deadlineMs: 100 },
      stateCheck: () => ({ status: 200, found: true }),
    });
    const r = await drive(clock, p);
    expect(r.reason).toBe('check_state');
    expect(r.outcome).toEqual({ ok: true, value: { status: 200, found: true } });
  });

  it('a classifier that throws ends the operation with its error instead of hanging or crashing', async () => {
    const clock = createTestClock();
    const wrong = new Error('classifier bug');
    await expect(
      drive(
        clock,
        run(async () => ({ status: 200 }), {
          clock,
          classifyValue: () => {
            throw wrong;
          },
        }),
      ),
    ).rejects.toBe(wrong);
    await expect(
      drive(
        clock,
        run(
          async () => {
            throw new Error('x');
          },
          {
            clock,
            classifyError: () => {
              throw wrong;
            },
          },
        ),
      ),
    ).rejects.toBe(wrong);
  });
});

describe("an event listener that throws (as p-retry's onFailedAttempt: the operation ends with its error)", () => {
  it("on an attempt event: no further attempt, the listener's error is the outcome; no crash, no hang", async () => {
    const clock = createTestClock();
    const oops = new Error('logger broke');
    let calls = 0;
    const p = run(
      async () => {
        calls++;
        return { status: 503 };
      },
      {
        clock,
        policy: FAST,
        onEvent: (e) => {
          if (e.type === 'attempt') throw oops;
        },
      },
    );
    await expect(drive(clock, p)).rejects.toBe(oops);
    expect(calls).toBe(1);
    expect(clock.pending()).toBe(0);
  });
  it('on the result event, after a success', async () => {
    const clock = createTestClock();
    const oops = new Error('logger broke');
    const r = await drive(
      clock,
      execute(async () => ({ status: 200 }), {
        clock,
        onEvent: (e) => {
          if (e.type === 'result') throw oops;
        },
      }),
    );
    expect(r.outcome).toEqual({ ok: false, error: oops });
  });
  it('on a timed-out attempt (the listener runs inside a timer): the operation still ends', async () => {
    const clock = createTestClock();
    const oops = new Error('logger broke');
    const p = run(() => new Promise(() => {}), {
      clock,
      policy: { ...FAST, attemptTimeoutMs: 5 },
      onEvent: () => {
        throw oops;
      },
    });
    await expect(drive(clock, p)).rejects.toBe(oops);
  });
});

describe('a cancel at any point ends the operation cancelled at once (bug 2)', () => {
  /** An attempt that hands its signal on (as to fetch) and answers after `ms`, unless aborted. */
  function slow(clock: TestClock, ms: number, onCall?: () => void) {
    const seen: AbortSignal[] = [];
    const fn = (ctx: AttemptContext): Promise<{ status: number }> => {
      const signal = ctx.signal;
      seen.push(signal);
      onCall?.();
      return new Promise((resolve, reject) => {
        const cancel = clock.setTimer(() => resolve({ status: 200 }), ms);
        signal.addEventListener(
          'abort',
          () => {
            cancel();
            reject(signal.reason);
          },
          { once: true },
        );
        if (signal.aborted) {
          cancel();
          reject(signal.reason);
        }
      });
    };
    return { fn, seen };
  }

  it('during the synchronous part of the first attempt', async () => {
    const clock = createTestClock();
    const ac = new AbortController();
    const { fn, seen } = slow(clock, 300, () => ac.abort(new Error('caller left')));
    const p = execute(fn, { clock, signal: ac.signal });
    const r = await drive(clock, p);
    expect(r.reason).toBe('cancelled');
    expect(clock.now()).toBe(0); // at once, not when the attempt would have answered
    expect(seen[0]!.aborted).toBe(true); // the attempt was told to stop
    expect(clock.pending()).toBe(0);
  });

  it('the attempt\'s own signal aborts at once when the caller aborts inside the function (cockatiel\'s "links parent cancellation")', async () => {
    const clock = createTestClock();
    const ac = new AbortController();
    const seen: boolean[] = [];
    const r = await drive(
      clock,
      execute(
        (ctx) => {
          seen.push(ctx.signal.aborted);
          ac.abort();
          seen.push(ctx.signal.aborted);
          return { status: 200 };
        },
        { clock, signal: ac.signal },
      ),
    );
    expect(seen).toEqual([false, true]);
    expect(r.reason).toBe('cancelled');
  });

  it('during the synchronous part of a retry', async () => {
    const clock = createTestClock();
    const ac = new AbortController();
    let n = 0;
    const inner = slow(clock, 300);
    const fn = (ctx: AttemptContext) => {
      if (++n === 1) return Promise.resolve({ status: 503 });
      const p = inner.fn(ctx);
      ac.abort();
      return p;
    };
    const r = await drive(clock, execute(fn, { clock, signal: ac.signal, policy: FAST }));
    expect(r.reason).toBe('cancelled');
    expect(r.attempts).toBe(2);
    expect(clock.now()).toBe(1);
    expect(inner.seen[0]!.aborted).toBe(true);
  });

  it('during the synchronous part of a hedge', async () => {
    const clock = createTestClock();
    const ac = new AbortController();
    let n = 0;
    const inner = slow(clock, 300);
    const fn = (ctx: AttemptContext) => {
      const p = inner.fn(ctx);
      if (++n === 2) ac.abort();
      return p;
    };
    const r = await drive(
      clock,
      execute(fn, { clock, signal: ac.signal, hedging: createHedgeState(), policy: { budget: null, hedge: { delayMs: 10, maxExtraLoad: 1 } } }),
    );
    expect(r.reason).toBe('cancelled');
    expect(clock.now()).toBe(10);
    expect(inner.seen.map((s) => s.aborted)).toEqual([true, true]);
  });

  it('before, during the wait, during the call, and while queued for a slot', async () => {
    const clock = createTestClock();
    // before
    const before = new AbortController();
    before.abort();
    expect((await drive(clock, execute(slow(clock, 5).fn, { clock, signal: before.signal }))).reason).toBe('cancelled');
    // during the wait
    const waiting = new AbortController();
    const w = execute(() => Promise.resolve({ status: 503 }), {
      clock,
      signal: waiting.signal,
      policy: { budget: null, backoff: { kind: 'constant', delayMs: 1000 } },
    });
    await clock.advanceAsync(10);
    waiting.abort();
    expect((await w).reason).toBe('cancelled');
    // during the call
    const calling = new AbortController();
    const c = execute(slow(clock, 1000).fn, { clock, signal: calling.signal });
    await clock.advanceAsync(10);
    calling.abort();
    expect((await c).reason).toBe('cancelled');
    // queued for a bulkhead slot
    const bulkhead = createBulkhead({ maxConcurrent: 1, maxQueue: 5 });
    const t0 = clock.now();
    const holder = execute(slow(clock, 1000).fn, { clock, bulkhead });
    const queued = new AbortController();
    const q = execute(slow(clock, 5).fn, { clock, bulkhead, signal: queued.signal });
    await clock.advanceAsync(10);
    queued.abort();
    expect((await q).reason).toBe('cancelled');
    await drive(clock, holder);
    expect(clock.now() - t0).toBe(1000);
  });
});

/** Anything a JavaScript function might hand back or throw. */
const anyValue = fc.oneof(
  fc.anything(),
  fc.record({
    status: fc.oneof(fc.integer({ min: -5, max: 1200 }), fc.double(), fc.string()),
    headers: fc.oneof(fc.anything(), fc.dictionary(fc.string(), fc.string())),
  }),
  fc.record({
    status: fc.constantFrom(200, 404, 429, 500, 503),
    headers: fc.dictionary(fc.constantFrom('retry-after', 'date', 'grpc-retry-pushback-ms', 'x-other'), fc.string()),
  }),
  fc.constant(Symbol('s')),
  fc.bigInt(),
  fc.func(fc.anything()),
);
const anyError = fc.oneof(
  fc.anything(),
  fc.record({
    code: fc.oneof(fc.constantFrom('ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'UND_ERR_SOCKET', 'ENOTFOUND'), fc.string(), fc.integer()),
    errorClass: fc.anything(),
    sent: fc.anything(),
    cause: fc.anything(),
  }),
  fc.string().map((m) => new Error(m)),
);
/** One attempt's behaviour: how it answers and whether synchronously. */
const anyAttempt = fc.oneof(
  anyValue.map((v) => ({ kind: 'sync-value' as const, v })),
  anyError.map((v) => ({ kind: 'sync-throw' as const, v })),
  anyValue.map((v) => ({ kind: 'resolve' as const, v })),
  anyError.map((v) => ({ kind: 'reject' as const, v })),
  fc.nat(50).map((ms) => ({ kind: 'late' as const, v: { status: 200 }, ms })),
  fc.constant({ kind: 'never' as const, v: undefined }),
);
type AnyAttempt = { kind: 'sync-value' | 'sync-throw' | 'resolve' | 'reject' | 'late' | 'never'; v: unknown; ms?: number };

function scriptOf(clock: TestClock, script: AnyAttempt[]) {
  return (ctx: AttemptContext): unknown => {
    const a = script[(ctx.attempt - 1) % script.length]!;
    switch (a.kind) {
      case 'sync-value':
        return a.v;
      case 'sync-throw':
        throw a.v;
      case 'resolve':
        return Promise.resolve(a.v);
      case 'reject':
        return Promise.reject(a.v);
      case 'late':
        return new Promise((resolve, reject) => {
          const cancel = clock.setTimer(() => resolve(a.v), a.ms!);
          ctx.signal.addEventListener(
            'abort',
            () => {
              cancel();
              reject(ctx.signal.reason);
            },
            { once: true },
          );
        });
      case 'never':
        return new Promise(() => {});
    }
  };
}

describe('nothing a user function returns or throws crashes the process (property, test clock)', () => {
  const policy = fc.record({
    maxAttempts: fc.integer({ min: 1, max: 4 }),
    attemptTimeoutMs: fc.integer({ min: 1, max: 100 }),
    deadlineMs: fc.integer({ min: 1, max: 400 }),
    backoff: fc.constant({ kind: 'constant' as const, delayMs: 2 }),
    budget: fc.constant(null),
  });
  const method = fc.constantFrom('GET', 'POST', undefined);

  it('through run(), execute() and the hedging path: 10,000 cases, each settles', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(anyAttempt, { minLength: 1, maxLength: 4 }),
        policy,
        method,
        fc.constantFrom('run', 'execute', 'hedge', 'events'),
        fc.integer(),
        async (script, pol, m, path, seed) => {
          const clock = createTestClock();
          const fn = scriptOf(clock, script as AnyAttempt[]);
          const base = { clock, random: createSeededRandom(seed), method: m };
          let p: Promise<unknown>;
          if (path === 'run') p = run(fn, { ...base, policy: pol });
          else if (path === 'execute') p = execute(fn, { ...base, policy: pol });
          else if (path === 'events') p = run(fn, { ...base, policy: pol, onEvent: () => {} });
          else p = execute(fn, { ...base, hedging: createHedgeState(), policy: { ...pol, hedge: { delayMs: 3, maxExtraLoad: 1 } } });
          let settled = false;
          await drive(
            clock,
            p.then(
              () => {
                settled = true;
              },
              () => {
                settled = true;
              },
            ),
          );
          expect(settled).toBe(true);
          expect(clock.pending()).toBe(0);
        },
      ),
      { numRuns: 10_000 },
    );
  }, 120_000);

  it('on the system clock, the success path: a plain value of any kind resolves as itself or settles', async () => {
    await fc.assert(
      fc.asyncProperty(anyValue, async (v) => {
        let settled = false;
        await run(() => v, { policy: { budget: null, maxAttempts: 1 } }).then(
          () => {
            settled = true;
          },
          () => {
            settled = true;
          },
        );
        expect(settled).toBe(true);
      }),
      { numRuns: 2_000 },
    );
  });
});
