import { describe, expect, it } from 'vitest';
import { createOperation } from '../../src/core/operation.js';
import { createSeededRandom } from '../../src/core/random.js';
import type { Observation, Random } from '../../src/core/types.js';
import { PRESETS, presetPolicy, resolvePolicy, type PresetName } from '../../src/presets/index.js';
import { constantRandom } from '../../src/testing/index.js';

/** Drives one operation through the operation state machine with the given observations; returns the chosen waits and the end. */
function schedule(name: PresetName, observations: Observation[], o: { method?: string; random?: Random; key?: string } = {}) {
  const policy = typeof name === 'string' ? presetPolicy(name) : name;
  const op = createOperation(policy, { method: o.method ?? 'POST', idempotencyKey: o.key ?? null, random: o.random ?? constantRandom(0) });
  let now = 0;
  let cmd = op.start(now);
  const delays: number[] = [];
  for (const obs of observations) {
    if (cmd.kind === 'wait') {
      now += cmd.delayMs;
      cmd = op.timerFired(now);
    }
    if (cmd.kind !== 'call') throw new Error(`expected a call, got ${cmd.kind}`);
    now += obs.elapsedMs;
    cmd = op.answered(obs, now, Date.UTC(2026, 0, 1) + now);
    const d = op.decision!;
    if (cmd.kind !== 'wait') return { delays, end: d.decision, why: d.why, attempts: op.attempt };
    delays.push(cmd.delayMs);
  }
  return { delays, end: 'timeline_exhausted', why: null, attempts: op.attempt };
}
const many = (obs: Observation, n = 40): Observation[] => Array.from({ length: n }, () => obs);

describe('every preset', () => {
  it('is valid, cites its source and describes its schedule', () => {
    expect([...PRESETS.keys()]).toEqual(
      expect.arrayContaining([
        'model-armor',
        'adobe-best-effort',
        'adobe-configurable',
        'openrtb-bid',
        'openrtb-billing-notice',
        'background-full-jitter',
        'http-429',
        'grpc',
        'aws-standard',
        'envoy-default',
      ]),
    );
    for (const [name, def] of PRESETS) {
      expect(presetPolicy(name).name).toBe(name);
      // A public document: its title and address; nothing that does not ship with relent.
      expect(def.source, name).toMatch(/\S.* — https:\/\/\S+/);
      expect(def.source, name).not.toMatch(/REFERENCE|\bSPEC\b|\bR\d{1,2}\b|\bseed\b|[Ii]ssue \d/);
      expect(def.schedule.length).toBeGreaterThan(10);
    }
  });
});

describe('model-armor (Google Cloud "Retry strategy"): min(2^n + U[0,1), 32) s until 300 s', () => {
  it('waits 1, 2, 4, 8, 16, 32, 32… s plus up to a second of jitter, and stops at the deadline', () => {
    const lo = schedule('model-armor', many({ status: 503, elapsedMs: 0 }));
    expect(lo.delays.slice(0, 8)).toEqual([1000, 2000, 4000, 8000, 16_000, 32_000, 32_000, 32_000]);
    expect(lo.end).toBe('deadline_exceeded');
    expect(lo.delays.reduce((a, b) => a + b, 0)).toBeLessThan(300_000);
    const hi = schedule('model-armor', many({ status: 503, elapsedMs: 0 }), { random: constantRandom(0.999) });
    expect(hi.delays.slice(0, 6)).toEqual([1999, 2999, 4999, 8999, 16_999, 32_000]);
  });
  it('retries 500, 502, 503, 504 but not 429 (optional in the doc) or 400', () => {
    for (const s of [500, 502, 503, 504])
      expect(
        schedule(
          'model-armor',
          [
            { status: s, elapsedMs: 1 },
            { status: 200, elapsedMs: 1 },
          ],
          { method: 'GET' },
        ).end,
      ).toBe('return');
    for (const s of [429, 400]) expect(schedule('model-armor', [{ status: s, elapsedMs: 1 }], { method: 'GET' }).end).toBe('not_retryable');
    expect(
      schedule(
        resolvePolicy({ preset: 'model-armor', retryOn: { status: [429, 500, 502, 503, 504] } }) as never,
        [
          { status: 429, elapsedMs: 1 },
          { status: 200, elapsedMs: 1 },
        ],
        { method: 'GET' },
      ).end,
    ).toBe('return');
  });
});

describe('adobe-best-effort (Adobe "Rate limiting and retry policy"): 403/408/409/429/5xx at +15 s, +30 s, then dropped', () => {
  it('two retries after 15 s and 30 s, then max_attempts with the last status', () => {
    const r = schedule('adobe-best-effort', many({ status: 503, elapsedMs: 100 }, 5));
    expect(r).toMatchObject({ delays: [15_000, 30_000], end: 'max_attempts', attempts: 3 });
  });
  it.each([403, 408, 409, 429, 500, 502, 503, 504])('retries %i (a POST: Adobe resends activations)', (status) => {
    expect(
      schedule('adobe-best-effort', [
        { status, elapsedMs: 1 },
        { status: 200, elapsedMs: 1 },
      ]).end,
    ).toBe('return');
  });
  it.each([400, 401, 404, 501])('does not retry %i', (status) => {
    expect(schedule('adobe-best-effort', [{ status, elapsedMs: 1 }])).toMatchObject({ end: 'not_retryable', attempts: 1 });
  });
});

describe('adobe-configurable (Adobe "Rate limiting and retry policy"): 420, 429 and >500 after 30 min', () => {
  it('"greater than 500" excludes 500 itself', () => {
    expect(schedule('adobe-configurable', [{ status: 500, elapsedMs: 1 }]).end).toBe('not_retryable');
    for (const s of [420, 429, 501, 503, 599]) expect(schedule('adobe-configurable', [{ status: s, elapsedMs: 1 }]).end).toBe('defer');
  });
  it('a 429 deferral does not use up an attempt; 5xx failures do', () => {
    const durable = (obs: Observation[]) => {
      const op = createOperation(presetPolicy('adobe-configurable'), { method: 'POST', random: constantRandom(0), durable: true });
      let cmd = op.start(0);
      const out: string[] = [];
      for (const o of obs) {
        if (cmd.kind !== 'call') throw new Error(`expected a call, got ${cmd.kind}`);
        cmd = op.answered(o, 0);
        out.push(op.decision!.decision);
        if (cmd.kind !== 'wait') break;
        cmd = op.timerFired(0);
      }
      return out;
    };
    expect(durable([429, 429, 429, 429, 200].map((status) => ({ status, elapsedMs: 1 })))).toEqual(['retry', 'retry', 'retry', 'retry', 'return']);
    expect(durable([503, 503, 503].map((status) => ({ status, elapsedMs: 1 })))).toEqual(['retry', 'retry', 'max_attempts']);
  });
  it('in-process drivers defer the 30 min wait; the durable queue schedules it', () => {
    const policy = presetPolicy('adobe-configurable');
    const first = (durable: boolean) => {
      const op = createOperation(policy, { method: 'POST', random: constantRandom(0), durable });
      op.start(0);
      return { cmd: op.answered({ status: 429, elapsedMs: 10 }, 10), decision: op.decision };
    };
    const inProcess = first(false);
    expect(inProcess.decision).toMatchObject({ decision: 'defer', delayMs: 1_800_000 });
    expect(inProcess.cmd).toMatchObject({ kind: 'end', reason: 'defer' });
    const durable = first(true);
    expect(durable.decision).toMatchObject({ decision: 'retry', delayMs: 1_800_000 });
    expect(durable.cmd).toEqual({ kind: 'wait', delayMs: 1_800_000, why: 'retryable' });
  });
});

describe('openrtb-bid (the worked example: tmax 300, partner timeout 120, deadline 260)', () => {
  it('(A) refused after 15 ms → one immediate retry, finishing by 135 ms', () => {
    const r = schedule('openrtb-bid', [
      { errorClass: 'connect_refused', elapsedMs: 15 },
      { errorClass: 'connect_refused', elapsedMs: 15 },
    ]);
    expect(r).toMatchObject({ delays: [0], end: 'max_attempts', attempts: 2 });
  });
  it('(B) no answer in 120 ms → no retry', () => {
    expect(schedule('openrtb-bid', [{ errorClass: 'timeout', elapsedMs: 120 }])).toMatchObject({ end: 'not_retryable', attempts: 1 });
  });
  it('(C) nbr 5 after 30 ms → an answer, no retry; 204 likewise', () => {
    expect(schedule('openrtb-bid', [{ status: 200, nbr: 5, elapsedMs: 30 }])).toMatchObject({ end: 'return', attempts: 1 });
    expect(schedule('openrtb-bid', [{ status: 204, elapsedMs: 30 }])).toMatchObject({ end: 'return', attempts: 1 });
  });
  it('a refusal late in the auction is not retried when a full partner timeout no longer fits', () => {
    expect(schedule('openrtb-bid', [{ errorClass: 'connect_refused', elapsedMs: 150 }]).end).toBe('deadline_exceeded');
  });
});

describe('openrtb-billing-notice (OpenRTB 2.6 implementation guide §7.8): every 10 s for a minute unless 200/204', () => {
  it('1 call + 6 retries 10 s apart, then gives up', () => {
    const r = schedule('openrtb-billing-notice', many({ status: 500, elapsedMs: 50 }, 10), { method: 'GET' });
    expect(r).toMatchObject({ delays: [10_000, 10_000, 10_000, 10_000, 10_000, 10_000], end: 'max_attempts', attempts: 7 });
  });
  it('only 200 and 204 are success: 201 and 404 are retried', () => {
    for (const s of [201, 202, 404, 302])
      expect(
        schedule('openrtb-billing-notice', [
          { status: s, elapsedMs: 1 },
          { status: 204, elapsedMs: 1 },
        ]).end,
      ).toBe('return');
    expect(schedule('openrtb-billing-notice', [{ status: 200, elapsedMs: 1 }])).toMatchObject({ end: 'return', attempts: 1 });
  });
});

describe('background-full-jitter (full jitter): U[0, min(10 s, 200 ms·2^n))', () => {
  it('upper envelope 200, 400, 800 … 10 s', () => {
    const r = schedule('background-full-jitter', many({ status: 503, elapsedMs: 0 }), { method: 'GET', random: constantRandom(0.999999) });
    expect(r.delays).toEqual([199, 399, 799, 1599, 3199, 6399, 9999]);
  });
  it('never a tight loop: spread across seeds', () => {
    const first = Array.from(
      { length: 50 },
      (_, s) =>
        schedule(
          'background-full-jitter',
          [
            { status: 503, elapsedMs: 0 },
            { status: 503, elapsedMs: 0 },
          ],
          { method: 'GET', random: createSeededRandom(s) },
        ).delays[1]!,
    );
    expect(new Set(first).size).toBeGreaterThan(40);
  });
});

describe('http-429 (RFC 6585, RFC 9110 Retry-After)', () => {
  it('Retry-After first; capped full jitter otherwise; stop when over 30 s', () => {
    const withHeader = schedule(
      'http-429',
      [
        { status: 429, headers: { 'retry-after': '3' }, elapsedMs: 10 },
        { status: 200, elapsedMs: 1 },
      ],
      { method: 'GET' },
    );
    expect(withHeader.delays[0]).toBeGreaterThanOrEqual(3000);
    expect(withHeader.delays[0]).toBeLessThan(3300);
    const without = schedule('http-429', many({ status: 429, elapsedMs: 10 }), { method: 'GET', random: constantRandom(0.999999) });
    expect(without.delays).toEqual([999, 1999, 3999, 7999]);
    expect(schedule('http-429', [{ status: 429, headers: { 'retry-after': '31' }, elapsedMs: 10 }], { method: 'GET' })).toMatchObject({
      end: 'not_retryable',
      why: 'retry_after_over_cap',
    });
  });
});

describe('named extras', () => {
  it('grpc (A6 since 2024): min(100·2^(n−1), 1000)·U(0.8, 1.2), 4 attempts', () => {
    expect(schedule('grpc', many({ status: 503, elapsedMs: 0 }), { method: 'GET' }).delays).toEqual([80, 160, 320]);
    expect(schedule('grpc', many({ status: 503, elapsedMs: 0 }), { method: 'GET', random: constantRandom(0.999999) }).delays).toEqual([119, 239, 479]);
  });
  it('grpc-2017: full jitter random(0, min(100·2^(n−1), 1000))', () => {
    expect(schedule('grpc-2017', many({ status: 503, elapsedMs: 0 }), { method: 'GET', random: constantRandom(0.999999) }).delays).toEqual([99, 199, 399]);
  });
  it('aws-standard (2026): 50 ms base for transient errors, 1 s for throttling, 20 s cap, 3 attempts', () => {
    expect(schedule('aws-standard', many({ status: 500, elapsedMs: 0 }), { method: 'GET', random: constantRandom(0.999999) }).delays).toEqual([49, 99]);
    expect(schedule('aws-standard', many({ status: 429, elapsedMs: 0 }), { method: 'GET', random: constantRandom(0.999999) }).delays).toEqual([999, 1999]);
  });
  it('envoy-default: one retry in U[0, 25 ms)', () => {
    expect(schedule('envoy-default', many({ status: 502, elapsedMs: 0 }), { method: 'GET', random: constantRandom(0.999999) })).toMatchObject({
      delays: [24],
      end: 'max_attempts',
    });
  });
});

describe('resolvePolicy', () => {
  it('a spec may start from a preset and override fields (deep for retryOn/retryAfter, by kind for backoff)', () => {
    const p = resolvePolicy({ preset: 'http-429', maxAttempts: 2, retryAfter: { maxMs: 5000 }, backoff: { capMs: 2000 } as never });
    expect(p.maxAttempts).toBe(2);
    expect(p.retryAfter.maxMs).toBe(5000);
    expect(p.retryAfter.statuses.has(429)).toBe(true);
    expect(p.backoff).toMatchObject({ kind: 'full-jitter', baseMs: 1000, capMs: 2000 });
    expect(resolvePolicy({ preset: 'http-429', backoff: { kind: 'constant', delayMs: 5 } }).backoff).toEqual({ kind: 'constant', delayMs: 5 });
  });
  it('unknown presets and fields are clear errors', () => {
    // @ts-expect-error a misspelt preset name does not compile (and is refused at run time too)
    expect(() => resolvePolicy('nope')).toThrow(/Unknown preset "nope".*http-429/);
    expect(() => resolvePolicy({ preset: 'http-429', maxAtempts: 3 } as never)).toThrow(/Unknown policy field `maxAtempts`/);
  });
});
