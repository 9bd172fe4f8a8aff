import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  BREAKER_DEFAULTS,
  breakerOutcome,
  createCircuitBreaker,
  normalizeBreakerSpec,
  type BreakerOutcome,
  type BreakerSpec,
  type BreakerStateChange,
} from '../../src/core/breaker.js';
import { RelentError } from '../../src/core/errors.js';

const spec: BreakerSpec = { failureRatio: 0.5, minimumThroughput: 4, windowMs: 10_000, buckets: 10, openMs: 1_000 };

function fail(b: ReturnType<typeof createCircuitBreaker>, n: number, now: number): void {
  for (let i = 0; i < n; i++) {
    expect(b.tryPass(now)).toBe(true);
    b.record('failure', now);
  }
}

describe('createCircuitBreaker: closed → open', () => {
  it('opens after the configured volume at 100 % failure, then fails fast', () => {
    const changes: BreakerStateChange[] = [];
    const b = createCircuitBreaker(spec, { name: 'https://api.example.com', onStateChange: (c) => changes.push(c) });
    fail(b, 3, 100);
    expect(b.state(100)).toBe('closed'); // 3 < minimumThroughput
    fail(b, 1, 200);
    expect(b.state(200)).toBe('open');
    expect(b.tryPass(201)).toBe(false);
    expect(b.tryPass(1199)).toBe(false);
    expect(changes).toEqual([{ name: 'https://api.example.com', from: 'closed', to: 'open', at: 200, reason: 'failure_ratio' }]);
  });

  it('stays closed below the minimum throughput, however many of the calls fail', () => {
    const b = createCircuitBreaker({ ...spec, minimumThroughput: 20 });
    fail(b, 19, 0);
    expect(b.state(0)).toBe('closed');
    expect(b.window(0)).toEqual({ successes: 0, failures: 19 });
  });

  it('stays closed while the failure share is under the ratio', () => {
    const b = createCircuitBreaker(spec);
    for (let i = 0; i < 10; i++) {
      b.record('success', i);
      b.record('success', i);
      b.record('failure', i); // 1 in 3 < 0.5
    }
    expect(b.state(10)).toBe('closed');
  });

  it('ignored outcomes count for nothing', () => {
    const b = createCircuitBreaker(spec);
    for (let i = 0; i < 10; i++) b.record('ignored', 0);
    fail(b, 3, 0);
    expect(b.state(0)).toBe('closed');
    expect(b.window(0)).toEqual({ successes: 0, failures: 3 });
  });

  it('old failures slide out of the window', () => {
    const b = createCircuitBreaker(spec); // 10 buckets of 1 s
    fail(b, 3, 0);
    expect(b.window(9_999).failures).toBe(3);
    expect(b.window(10_000).failures).toBe(0); // bucket 0 has left the window
    fail(b, 1, 10_000);
    expect(b.state(10_000)).toBe('closed'); // only 1 failure in the window
    fail(b, 3, 10_500);
    expect(b.state(10_500)).toBe('open');
  });

  it('slides a bucket at a time', () => {
    const b = createCircuitBreaker(spec);
    b.record('failure', 500); // bucket 0
    b.record('failure', 1_500); // bucket 1
    expect(b.window(10_400).failures).toBe(1);
    expect(b.window(11_000).failures).toBe(0);
  });
});

describe('open → half_open → closed / open', () => {
  const opened = (s: BreakerSpec = spec) => {
    const changes: BreakerStateChange[] = [];
    const b = createCircuitBreaker(s, { onStateChange: (c) => changes.push(c) });
    fail(b, 4, 0);
    expect(b.state(0)).toBe('open');
    return { b, changes };
  };

  it('moves to half-open by time alone, without a timer', () => {
    const { b, changes } = opened();
    expect(b.state(999)).toBe('open');
    expect(b.state(1_000)).toBe('half_open');
    expect(changes.at(-1)).toEqual({ name: null, from: 'open', to: 'half_open', at: 1_000, reason: 'open_elapsed' });
  });

  it('admits exactly the trial portion while half-open', () => {
    const { b } = opened({ ...spec, halfOpenTrials: 3, successThreshold: 3 });
    const admitted = [0, 1, 2, 3, 4].map(() => b.tryPass(1_000));
    expect(admitted).toEqual([true, true, true, false, false]);
    b.record('success', 1_010); // one trial back: one more may go
    expect(b.state(1_010)).toBe('half_open');
    expect(b.tryPass(1_010)).toBe(true);
    expect(b.tryPass(1_010)).toBe(false);
  });

  it('closes after successThreshold trial successes, with a fresh window', () => {
    const { b, changes } = opened({ ...spec, successThreshold: 2 });
    expect(b.tryPass(1_000)).toBe(true);
    expect(b.tryPass(1_000)).toBe(false); // one trial at a time
    b.record('success', 1_050);
    expect(b.state(1_050)).toBe('half_open');
    expect(b.tryPass(1_060)).toBe(true);
    b.record('success', 1_100);
    expect(b.state(1_100)).toBe('closed');
    expect(changes.at(-1)).toMatchObject({ from: 'half_open', to: 'closed', reason: 'trial_success', at: 1_100 });
    expect(b.window(1_100)).toEqual({ successes: 0, failures: 0 });
    fail(b, 3, 1_200);
    expect(b.state(1_200)).toBe('closed'); // the old failures do not reopen it
  });

  it('reopens on a trial failure, for another openMs', () => {
    const { b, changes } = opened();
    expect(b.tryPass(1_500)).toBe(true);
    b.record('failure', 1_600);
    expect(b.state(1_600)).toBe('open');
    expect(changes.at(-1)).toMatchObject({ from: 'half_open', to: 'open', reason: 'trial_failure', at: 1_600 });
    expect(b.tryPass(2_599)).toBe(false);
    expect(b.tryPass(2_600)).toBe(true);
  });

  it('an ignored trial (cancelled call) hands its slot back', () => {
    const { b } = opened();
    expect(b.tryPass(1_000)).toBe(true);
    expect(b.tryPass(1_000)).toBe(false);
    b.record('ignored', 1_001);
    expect(b.state(1_001)).toBe('half_open');
    expect(b.tryPass(1_001)).toBe(true);
  });

  it('a trial that never reports is presumed lost after openMs', () => {
    const { b } = opened();
    expect(b.tryPass(1_000)).toBe(true);
    expect(b.tryPass(1_999)).toBe(false);
    expect(b.tryPass(2_000)).toBe(true);
  });

  it('late results of calls admitted before the circuit opened change nothing', () => {
    const { b } = opened();
    b.record('success', 10);
    b.record('success', 20);
    expect(b.state(20)).toBe('open');
    expect(b.tryPass(500)).toBe(false);
  });

  it('a clock that jumps back cannot keep the circuit open longer than openMs', () => {
    const { b } = opened();
    expect(b.tryPass(-500)).toBe(false);
    expect(b.state(-1_000)).toBe('half_open');
  });
});

describe('snapshot and hydrate', () => {
  it('round-trips an open circuit through JSON, and the open period keeps running', () => {
    const a = createCircuitBreaker(spec);
    fail(a, 4, 50_000);
    const json = JSON.stringify(a);
    const snap = JSON.parse(json);
    expect(snap).toMatchObject({ version: 1, state: 'open', openedAt: 50_000 });
    const changes: BreakerStateChange[] = [];
    const b = createCircuitBreaker(spec, { initialState: snap, onStateChange: (c) => changes.push(c) });
    expect(b.tryPass(50_500)).toBe(false);
    expect(b.state(51_000)).toBe('half_open');
    expect(changes).toEqual([{ name: null, from: 'open', to: 'half_open', at: 51_000, reason: 'open_elapsed' }]);
    expect(b.toJSON()).toMatchObject({ state: 'half_open', openedAt: 50_000 });
  });

  it('round-trips the window of a closed circuit', () => {
    const a = createCircuitBreaker(spec);
    fail(a, 3, 1_000);
    a.record('success', 2_000);
    const b = createCircuitBreaker(spec, { initialState: JSON.parse(JSON.stringify(a.toJSON())) });
    expect(b.toJSON()).toEqual(a.toJSON());
    expect(b.window(2_000)).toEqual({ successes: 1, failures: 3 });
    fail(b, 1, 2_500);
    expect(b.state(2_500)).toBe('open'); // 4 failures of 5 calls ≥ 0.5
  });

  it('a cold start after the open period begins half-open (no timer needed)', () => {
    const a = createCircuitBreaker(spec);
    fail(a, 4, 0);
    const b = createCircuitBreaker(spec, { initialState: a.toJSON() });
    expect(b.tryPass(60_000)).toBe(true);
    expect(b.tryPass(60_000)).toBe(false);
    b.record('success', 60_010);
    expect(b.state(60_010)).toBe('closed');
  });

  it('drops a window kept with another bucket width, and keeps the state', () => {
    const a = createCircuitBreaker(spec);
    fail(a, 2, 0);
    const b = createCircuitBreaker({ ...spec, buckets: 5 }, { initialState: a.toJSON() });
    expect(b.window(0)).toEqual({ successes: 0, failures: 0 });
    expect(b.state(0)).toBe('closed');
  });

  it('rejects a malformed snapshot with an error that names the field', () => {
    const bad = (initialState: unknown) => () => createCircuitBreaker(spec, { initialState: initialState as never });
    expect(bad({ version: 2 })).toThrow(/initialState\.version/);
    expect(bad({ version: 1, state: 'ajar', openedAt: 0, trialSuccesses: 0, bucketMs: 1000, buckets: [] })).toThrow(/initialState\.state/);
    expect(bad({ version: 1, state: 'open', openedAt: null, trialSuccesses: 0, bucketMs: 1000, buckets: [] })).toThrow(/initialState\.openedAt/);
    expect(bad({ version: 1, state: 'closed', openedAt: null, trialSuccesses: 0, bucketMs: 1000, buckets: [[1, -1, 0]] })).toThrow(
      /initialState\.buckets\[0\]/,
    );
  });
});

describe('spec validation', () => {
  it('fills the frozen defaults', () => {
    expect(normalizeBreakerSpec()).toEqual(BREAKER_DEFAULTS);
    expect(Object.isFrozen(BREAKER_DEFAULTS)).toBe(true);
    expect(createCircuitBreaker().spec).toEqual(BREAKER_DEFAULTS);
  });

  it.each([
    [{ failureRatio: 0 }, 'breaker.failureRatio'],
    [{ failureRatio: 1.5 }, 'breaker.failureRatio'],
    [{ minimumThroughput: 0.5 }, 'breaker.minimumThroughput'],
    [{ windowMs: Number.NaN }, 'breaker.windowMs'],
    [{ buckets: 0 }, 'breaker.buckets'],
    [{ buckets: 2.5 }, 'breaker.buckets'],
    [{ openMs: -1 }, 'breaker.openMs'],
    [{ openMs: Number.POSITIVE_INFINITY }, 'breaker.openMs'],
    [{ halfOpenTrials: 0 }, 'breaker.halfOpenTrials'],
    [{ successThreshold: '2' }, 'breaker.successThreshold'],
    [{ threshold: 3 }, 'breaker.threshold'],
  ])('rejects %j naming %s', (input, field) => {
    let caught: unknown;
    try {
      createCircuitBreaker(input as BreakerSpec);
    } catch (e) {
      caught = e;
    }
    expect(RelentError.is(caught)).toBe(true);
    expect((caught as RelentError).code).toBe('ERR_INVALID_POLICY');
    expect((caught as RelentError).field).toBe(field);
    expect((caught as RelentError).message).toContain(`\`${field}\``);
  });
});

describe('breakerOutcome', () => {
  it.each([
    [{ status: 200, elapsedMs: 1 }, 'success'],
    [{ status: 204, elapsedMs: 1 }, 'success'],
    [{ status: 404, elapsedMs: 1 }, 'success'],
    [{ status: 400, elapsedMs: 1 }, 'success'],
    [{ status: 408, elapsedMs: 1 }, 'failure'],
    [{ status: 429, elapsedMs: 1 }, 'failure'],
    [{ status: 500, elapsedMs: 1 }, 'failure'],
    [{ status: 503, elapsedMs: 1 }, 'failure'],
    [{ errorClass: 'timeout', elapsedMs: 1 }, 'failure'],
    [{ errorClass: 'connect_refused', elapsedMs: 1 }, 'failure'],
    [{ errorClass: 'error', elapsedMs: 1 }, 'failure'],
    [{ errorClass: 'aborted', elapsedMs: 1 }, 'ignored'],
  ] as const)('%j → %s', (obs, want) => {
    expect(breakerOutcome(obs)).toBe(want);
  });
});

describe('properties', () => {
  type Op = { kind: 'pass' } | { kind: 'record'; outcome: BreakerOutcome } | { kind: 'state' } | { kind: 'snapshot' };
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.constant({ kind: 'pass' as const }),
    fc.constantFrom<BreakerOutcome>('success', 'failure', 'ignored').map((outcome) => ({ kind: 'record' as const, outcome })),
    fc.constant({ kind: 'state' as const }),
    fc.constant({ kind: 'snapshot' as const }),
  );
  const specArb: fc.Arbitrary<BreakerSpec> = fc.record({
    failureRatio: fc.double({ min: 0.01, max: 1, noNaN: true }),
    minimumThroughput: fc.integer({ min: 1, max: 20 }),
    windowMs: fc.integer({ min: 1, max: 60_000 }),
    buckets: fc.integer({ min: 1, max: 20 }),
    openMs: fc.integer({ min: 1, max: 10_000 }),
    halfOpenTrials: fc.integer({ min: 1, max: 5 }),
    successThreshold: fc.integer({ min: 1, max: 5 }),
  });

  it('never admits a call while open before openMs has elapsed (monotonic time)', () => {
    fc.assert(
      fc.property(specArb, fc.array(fc.tuple(op, fc.integer({ min: 0, max: 3_000 })), { maxLength: 300 }), (s, steps) => {
        let openedAt: number | null = null;
        let b = createCircuitBreaker(s, {
          onStateChange: (c) => {
            openedAt = c.to === 'open' ? c.at : null;
          },
        });
        let now = 0;
        for (const [o, dt] of steps) {
          now += dt;
          switch (o.kind) {
            case 'pass': {
              const ok = b.tryPass(now);
              if (openedAt !== null && now - openedAt < s.openMs!) expect(ok).toBe(false);
              break;
            }
            case 'record':
              b.record(o.outcome, now);
              break;
            case 'state':
              b.state(now);
              break;
            case 'snapshot':
              // A restart: the new breaker must honour the open period too.
              b = createCircuitBreaker(s, {
                initialState: JSON.parse(JSON.stringify(b)),
                onStateChange: (c) => {
                  openedAt = c.to === 'open' ? c.at : null;
                },
              });
              break;
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('admits at most halfOpenTrials calls at a time while half-open', () => {
    fc.assert(
      fc.property(specArb, fc.array(fc.tuple(op, fc.integer({ min: 0, max: 50 })), { maxLength: 300 }), (s, steps) => {
        const b = createCircuitBreaker({ ...s, openMs: 1_000_000 });
        fail(b, s.minimumThroughput!, 0); // 100 % failure at the minimum volume: open
        expect(b.state(0)).toBe('open');
        let now = 1_000_000;
        let inFlight = 0;
        for (const [o, dt] of steps) {
          now += dt;
          if (o.kind === 'pass') {
            if (b.state(now) === 'half_open' && b.tryPass(now)) inFlight++;
            expect(inFlight).toBeLessThanOrEqual(s.halfOpenTrials!);
          } else if (o.kind === 'record' && inFlight > 0) {
            inFlight--;
            b.record(o.outcome, now);
            if (b.state(now) !== 'half_open') return; // the trial portion is over
          }
        }
      }),
      { numRuns: 200 },
    );
  });

  it('never throws on any sequence of operations, any times, any outcome', () => {
    const anyTime = fc.oneof(fc.double(), fc.integer(), fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, -0, 2 ** 53));
    fc.assert(
      fc.property(specArb, fc.array(fc.tuple(op, anyTime, fc.string()), { maxLength: 200 }), (s, steps) => {
        let b = createCircuitBreaker(s);
        for (const [o, t, junk] of steps) {
          if (o.kind === 'pass') b.tryPass(t);
          else if (o.kind === 'record') b.record(junk.length % 4 === 0 ? (junk as BreakerOutcome) : o.outcome, t);
          else if (o.kind === 'state') expect(['closed', 'open', 'half_open']).toContain(b.state(t));
          else b = createCircuitBreaker(s, { initialState: JSON.parse(JSON.stringify(b)) });
          const w = b.window(t);
          expect(Number.isFinite(w.successes) && Number.isFinite(w.failures)).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('docs/protection-and-telemetry.md', () => {
  it('lists BREAKER_DEFAULTS as they are', async () => {
    const { readFileSync } = await import('node:fs');
    const doc = readFileSync(new URL('../../docs/protection-and-telemetry.md', import.meta.url), 'utf8');
    for (const [k, v] of Object.entries(BREAKER_DEFAULTS)) expect(doc, k).toContain(`| \`${k}\` | \`${v}\` |`);
  });
});
