// Chaos injection through the executor on the test clock: faults and outcomes are
// answers nothing was sent for, latencies delay the send within the attempt's time,
// every injected attempt's event says so, a seed repeats exactly, and the kill switch
// turns it all off.
import { afterEach, describe, expect, it } from 'vitest';
import { execute, run, type AttemptContext, type RelentEvent } from '../../src/run/run.js';
import { createCircuitBreaker } from '../../src/core/breaker.js';
import { normalizeChaos } from '../../src/core/chaos.js';
import { createOperation } from '../../src/core/operation.js';
import { createPolicy } from '../../src/core/policy.js';
import { chaosSwitchedOff, resolvePolicy } from '../../src/presets/index.js';
import { createSeededRandom, createTestClock, type TestClock } from '../../src/testing/index.js';

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
    else if (++idle > 50) throw new Error('stalled');
  }
  return p;
}

const NO_BUDGET = { budget: null, backoff: { kind: 'constant', delayMs: 10 } } as const;

afterEach(() => {
  delete process.env.RELENT_CHAOS;
});

describe('the chaos spec', () => {
  it('validates every field and names the wrong one', () => {
    expect(() => createPolicy({ chaos: { fault: { rate: 2, errorClass: 'reset' } } })).toThrow(/chaos\.fault\.rate/);
    expect(() => createPolicy({ chaos: { fault: { rate: 0.1, errorClass: 'nope' as never } } })).toThrow(/chaos\.fault\.errorClass/);
    expect(() => createPolicy({ chaos: { outcome: { rate: 0.1, status: 42 } } })).toThrow(/chaos\.outcome\.status/);
    expect(() => createPolicy({ chaos: { outcome: { rate: 0.1, status: 503, headers: { 'retry-after': 1 as never } } } })).toThrow(
      /chaos\.outcome\.headers\.retry-after/,
    );
    expect(() => createPolicy({ chaos: { latency: { rate: 0.1, delayMs: -1 } } })).toThrow(/chaos\.latency\.delayMs/);
    expect(() => createPolicy({ chaos: { latency: { rate: 0.1, delayMs: 5 }, typo: 1 } as never })).toThrow(/chaos\.typo/);
    expect(() => createPolicy({ chaos: 'on' as never })).toThrow(/`chaos`/);
  });
  it('enabled: false, or nothing to inject, is no chaos; present means on', () => {
    expect(normalizeChaos({ enabled: false, fault: { rate: 1, errorClass: 'reset' } })).toBeNull();
    expect(normalizeChaos({})).toBeNull();
    expect(createPolicy({ chaos: { fault: { rate: 1, errorClass: 'reset' } } }).chaos).not.toBeNull();
  });
});

describe('chaos through run() and execute()', () => {
  it('outcome at rate 1 never calls the attempt function and ends by the normal rules (503 three times → max_attempts, ERR_INJECTED)', async () => {
    const clock = createTestClock();
    const events: RelentEvent[] = [];
    let calls = 0;
    const p = run(
      () => {
        calls++;
        return { status: 200 };
      },
      {
        clock,
        random: createSeededRandom(1),
        policy: { ...NO_BUDGET, chaos: { outcome: { rate: 1, status: 503 } } },
        onEvent: (e) => events.push(e),
      },
    );
    await expect(drive(clock, p)).rejects.toMatchObject({ code: 'ERR_INJECTED', injected: 'outcome', status: 503 });
    expect(calls).toBe(0);
    const attempts = events.filter((e) => e.type === 'attempt');
    expect(attempts.map((e) => e.type === 'attempt' && [e.status, e.decision, e.injected, e.elapsedMs])).toEqual([
      [503, 'retry', 'outcome', 0],
      [503, 'retry', 'outcome', 0],
      [503, 'max_attempts', 'outcome', 0],
    ]);
    expect(events.at(-1)).toMatchObject({ type: 'result', reason: 'max_attempts', status: 503, attempts: 3 });
  });

  it('an injected 429 with a Retry-After is waited for, as a real one', async () => {
    const clock = createTestClock();
    const sent: number[] = [];
    let n = 0;
    // rate 1 for the first attempt only: a policy per attempt is not a thing, so inject into every attempt and count.
    const r = await drive(
      clock,
      execute(
        () => {
          sent.push(clock.now());
          n++;
          return { status: 200 };
        },
        {
          clock,
          random: createSeededRandom(2),
          policy: { ...NO_BUDGET, maxAttempts: 2, chaos: { outcome: { rate: 1, status: 429, headers: { 'Retry-After': '2' } } } },
        },
      ),
    );
    expect(n).toBe(0);
    expect(r.reason).toBe('max_attempts');
    expect(r.retryAfterMs).toBe(2000);
    expect(clock.now()).toBeGreaterThanOrEqual(2000); // the second (injected) attempt came after the asked wait
  });

  it('a fault is observed as that error class with its send state: an injected timeout on a POST is an unknown outcome (check_state)', async () => {
    const clock = createTestClock();
    let calls = 0;
    const r = await drive(
      clock,
      execute(
        () => {
          calls++;
          return { status: 201 };
        },
        {
          clock,
          method: 'POST',
          policy: { ...NO_BUDGET, chaos: { fault: { rate: 1, errorClass: 'timeout' } } },
        },
      ),
    );
    expect(calls).toBe(0);
    expect(r.reason).toBe('check_state');
    expect(r.last).toMatchObject({ errorClass: 'timeout', sent: 'unknown' });
    // …and an injected refused connection is safe to retry for a POST (nothing was sent)
    const r2 = await drive(
      clock,
      execute(() => ({ status: 201 }), {
        clock,
        method: 'POST',
        policy: { ...NO_BUDGET, chaos: { fault: { rate: 1, errorClass: 'connect_refused' } } },
      }),
    );
    expect(r2.reason).toBe('max_attempts');
    expect(r2.attempts).toBe(3);
  });

  it('a latency delays the send and counts against the attempt timeout and the deadline', async () => {
    const clock = createTestClock();
    const sentAt: number[] = [];
    const answer = (ctx: AttemptContext) => {
      sentAt.push(clock.now());
      return new Promise<{ status: number }>((resolve, reject) => {
        const cancel = clock.setTimer(() => resolve({ status: 200 }), 30);
        ctx.signal.addEventListener('abort', () => {
          cancel();
          reject(ctx.signal.reason);
        });
      });
    };
    // 50 ms of latency + 30 ms of answer fits a 100 ms attempt
    const events: RelentEvent[] = [];
    const ok = await drive(
      clock,
      execute(answer, { clock, policy: { ...NO_BUDGET, attemptTimeoutMs: 100, chaos: { latency: { rate: 1, delayMs: 50 } } }, onEvent: (e) => events.push(e) }),
    );
    expect(ok.reason).toBe('return');
    expect(sentAt).toEqual([50]);
    expect(events[0]).toMatchObject({ type: 'attempt', elapsedMs: 80, injected: 'latency', status: 200 });
    // 90 ms of latency + 30 ms does not: the attempt times out at 100, and the retries the same
    sentAt.length = 0;
    const t0 = clock.now();
    const late = await drive(
      clock,
      execute(answer, { clock, policy: { ...NO_BUDGET, attemptTimeoutMs: 100, deadlineMs: 250, chaos: { latency: { rate: 1, delayMs: 90 } } } }),
    );
    expect(late.last).toMatchObject({ errorClass: 'timeout' });
    expect(sentAt.map((t) => t - t0)).toEqual([90, 200]);
    expect(late.reason).toBe('deadline_exceeded');
    // a latency longer than the attempt's time: nothing is ever sent
    sentAt.length = 0;
    const never = await drive(
      clock,
      execute(answer, { clock, policy: { ...NO_BUDGET, maxAttempts: 2, attemptTimeoutMs: 20, chaos: { latency: { rate: 1, delayMs: 500 } } } }),
    );
    expect(sentAt).toEqual([]);
    expect(never.last).toMatchObject({ errorClass: 'timeout' });
    expect(clock.pending()).toBe(0);
  });

  it('a cancel during an injected latency ends the operation at once; nothing is sent', async () => {
    const clock = createTestClock();
    const ac = new AbortController();
    let calls = 0;
    const p = execute(
      () => {
        calls++;
        return { status: 200 };
      },
      { clock, signal: ac.signal, policy: { ...NO_BUDGET, chaos: { latency: { rate: 1, delayMs: 1000 } } } },
    );
    await clock.advanceAsync(10);
    ac.abort();
    expect((await p).reason).toBe('cancelled');
    await clock.advanceAsync(2000);
    expect(calls).toBe(0);
    expect(clock.pending()).toBe(0);
  });

  it('the breaker hears injected failures like real ones (a game day can open it)', async () => {
    const clock = createTestClock();
    const breaker = createCircuitBreaker({ failureRatio: 0.5, minimumThroughput: 3, openMs: 60_000 });
    let calls = 0;
    for (let i = 0; i < 3; i++) {
      await drive(
        clock,
        execute(
          () => {
            calls++;
            return { status: 200 };
          },
          {
            clock,
            breaker,
            policy: { ...NO_BUDGET, maxAttempts: 1, chaos: { fault: { rate: 1, errorClass: 'connect_refused' } } },
          },
        ),
      );
    }
    const r = await drive(
      clock,
      execute(
        () => {
          calls++;
          return { status: 200 };
        },
        { clock, breaker, policy: { ...NO_BUDGET, maxAttempts: 1 } },
      ),
    );
    expect(r.reason).toBe('circuit_open');
    expect(calls).toBe(0);
  });

  it('hedges are injected into too (each attempt draws)', async () => {
    const clock = createTestClock();
    const { createHedgeState } = await import('../../src/core/hedge.js');
    const events: RelentEvent[] = [];
    let calls = 0;
    const fn = (ctx: AttemptContext) => {
      calls++;
      return new Promise<{ status: number }>((resolve, reject) => {
        const cancel = clock.setTimer(() => resolve({ status: 200 }), 50);
        ctx.signal.addEventListener('abort', () => {
          cancel();
          reject(ctx.signal.reason);
        });
      });
    };
    const r = await drive(
      clock,
      execute(fn, {
        clock,
        random: createSeededRandom(3),
        hedging: createHedgeState(),
        onEvent: (e) => events.push(e),
        policy: { budget: null, hedge: { delayMs: 10, maxExtraLoad: 1 }, chaos: { latency: { rate: 1, delayMs: 100 } } },
      }),
    );
    expect(r.reason).toBe('return');
    expect(events.filter((e) => e.type === 'attempt').every((e) => e.type === 'attempt' && e.injected === 'latency')).toBe(true);
    expect(calls).toBeGreaterThanOrEqual(1);
  });
});

describe('seeded, bounded, switchable', () => {
  /** Runs n operations under a seeded random and a chaos rate; returns the injected share and the events. */
  async function many(n: number, seed: number, rate: number) {
    const clock = createTestClock();
    const random = createSeededRandom(seed);
    const events: RelentEvent[] = [];
    let injected = 0;
    let attempts = 0;
    const policy = resolvePolicy({ budget: null, maxAttempts: 1, chaos: { outcome: { rate, status: 503 } } });
    for (let i = 0; i < n; i++) {
      const r = await drive(
        clock,
        execute(() => ({ status: 200 }), { clock, random, policy, operationId: `op-${i}`, onEvent: (e) => events.push(e) }),
      );
      attempts += r.attempts;
    }
    for (const e of events) if (e.type === 'attempt' && e.injected !== undefined) injected++;
    return { share: injected / attempts, events };
  }

  it('rate 0.2 over 10,000 seeded operations: the injected share is within binomial bounds (±4.5 σ)', async () => {
    const { share } = await many(10_000, 42, 0.2);
    const sigma = Math.sqrt((0.2 * 0.8) / 10_000);
    expect(Math.abs(share - 0.2)).toBeLessThan(4.5 * sigma);
  }, 60_000);

  it('the same seed gives the same events, byte for byte; another seed does not', async () => {
    const a = await many(300, 7, 0.3);
    const b = await many(300, 7, 0.3);
    const c = await many(300, 8, 0.3);
    expect(JSON.stringify(b.events)).toBe(JSON.stringify(a.events));
    expect(JSON.stringify(c.events)).not.toBe(JSON.stringify(a.events));
  });

  it('the operation machine draws the same injections from the same seed (replay and the simulator drive it)', () => {
    const policy = createPolicy({
      budget: null,
      maxAttempts: 5,
      backoff: { kind: 'constant', delayMs: 1 },
      chaos: { fault: { rate: 0.5, errorClass: 'reset' } },
    });
    const draws = (seed: number) => {
      const op = createOperation(policy, { method: 'GET', random: createSeededRandom(seed) });
      const out: (string | null)[] = [];
      let cmd = op.start(0);
      for (let t = 0; cmd.kind === 'call'; t += 2) {
        out.push(cmd.inject?.kind ?? null);
        cmd = op.answered({ status: 503, elapsedMs: 1 }, t + 1);
        if (cmd.kind === 'wait') cmd = op.timerFired(t + 2);
      }
      return out;
    };
    expect(draws(9)).toEqual(draws(9));
    expect(draws(9)).toContain('fault');
    // the driver's switch: chaos: false in the options turns it off
    const off = createOperation(policy, { method: 'GET', random: createSeededRandom(9), chaos: false });
    expect((off.start(0) as { inject?: unknown }).inject).toBeUndefined();
  });

  it('RELENT_CHAOS=off turns it off where a policy is resolved; the attempt function is called', async () => {
    process.env.RELENT_CHAOS = 'off';
    expect(chaosSwitchedOff()).toBe(true);
    const policy = resolvePolicy({ budget: null, chaos: { outcome: { rate: 1, status: 503 } } });
    expect(policy.chaos).toBeNull();
    let calls = 0;
    expect(
      await run(
        () => {
          calls++;
          return 'real';
        },
        { policy: { budget: null, chaos: { fault: { rate: 1, errorClass: 'reset' } } } },
      ),
    ).toBe('real');
    expect(calls).toBe(1);
    process.env.RELENT_CHAOS = 'on';
    expect(chaosSwitchedOff()).toBe(false);
    expect(resolvePolicy({ budget: null, chaos: { outcome: { rate: 1, status: 503 } } }).chaos).not.toBeNull();
  });
});

describe('relent replay with chaos', () => {
  it('an injected attempt takes no observation of the timeline: the next call gets it', async () => {
    const { replay } = await import('../../src/run/replay.js');
    const out = await replay({
      operationId: 'op-c',
      method: 'GET',
      seed: 1,
      policy: { maxAttempts: 4, backoff: { kind: 'constant', delayMs: 10 }, budget: null, chaos: { outcome: { rate: 0.5, status: 503 } } },
      observations: [
        { status: 503, elapsedMs: 5 },
        { status: 200, elapsedMs: 5 },
        { status: 200, elapsedMs: 5 },
        { status: 200, elapsedMs: 5 },
      ],
    });
    const attempts = out.events.filter((e) => e.type === 'attempt');
    // seed 1: attempt 1 injected; attempt 2 takes the timeline's first observation (503, 5 ms), not its second
    expect(attempts[0]).toMatchObject({ injected: 'outcome', status: 503, elapsedMs: 0 });
    expect(attempts[1]).toMatchObject({ status: 503, elapsedMs: 5 });
    expect(attempts[1]).not.toHaveProperty('injected');
  });
});
