import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const BIN = fileURLToPath(new URL('../../bin/relent', import.meta.url));
const EXAMPLES = fileURLToPath(new URL('../../examples/timelines/', import.meta.url));

function relent(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [BIN, ...args], { input, encoding: 'utf8', timeout: 20_000 });
  return {
    code: r.status,
    out: r.stdout,
    err: r.stderr,
    lines: r.stdout
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

describe('relent replay (DESIGN.md CLI contract)', () => {
  it('reproduces the S3 fixture exactly', () => {
    const r = relent(['replay', `${EXAMPLES}s3-read.json`]);
    expect(r.code).toBe(0);
    const W = Date.UTC(2026, 0, 1); // `ts`: the replay's virtual wall clock (the timeline's wallClock, else 2026-01-01)
    expect(r.lines).toEqual([
      {
        type: 'attempt',
        operationId: 'op-42',
        requestId: 'op-42/attempt-1',
        attempt: 1,
        method: 'GET',
        endpoint: null,
        status: 503,
        errorClass: null,
        elapsedMs: 80,
        remainingMs: 400,
        decision: 'retry',
        delayMs: 40,
        retryAfterMs: null,
        retryAfterValid: null,
        ts: W + 80,
      },
      {
        type: 'attempt',
        operationId: 'op-42',
        requestId: 'op-42/attempt-2',
        attempt: 2,
        method: 'GET',
        endpoint: null,
        status: 503,
        errorClass: null,
        elapsedMs: 80,
        remainingMs: 280,
        decision: 'retry',
        delayMs: 40,
        retryAfterMs: null,
        retryAfterValid: null,
        ts: W + 200,
      },
      {
        type: 'attempt',
        operationId: 'op-42',
        requestId: 'op-42/attempt-3',
        attempt: 3,
        method: 'GET',
        endpoint: null,
        status: 200,
        errorClass: null,
        elapsedMs: 50,
        remainingMs: 160,
        decision: 'return',
        delayMs: null,
        retryAfterMs: null,
        retryAfterValid: null,
        ts: W + 290,
      },
      { type: 'result', operationId: 'op-42', status: 200, errorClass: null, reason: 'return', attempts: 3, ts: W + 290 },
    ]);
  });

  it('POST timeout: one attempt, check_state, exit 9 with the reason on stderr', () => {
    const timeline = {
      operationId: 'op-43',
      method: 'POST',
      policy: { maxAttempts: 3, deadlineMs: 400, backoff: { kind: 'constant', delayMs: 40 } },
      seed: 1,
      observations: [
        { errorClass: 'timeout', elapsedMs: 120 },
        { status: 201, elapsedMs: 10 },
      ],
    };
    const r = relent(['replay', '-'], JSON.stringify(timeline));
    expect(r.code).toBe(9);
    expect(r.lines).toHaveLength(2);
    expect(r.lines[0]).toMatchObject({ attempt: 1, errorClass: 'timeout', status: null, decision: 'check_state' });
    expect(r.lines[1]).toEqual({
      type: 'result',
      operationId: 'op-43',
      status: null,
      errorClass: 'timeout',
      reason: 'check_state',
      attempts: 1,
      ts: Date.UTC(2026, 0, 1) + 120,
    });
    expect(r.err).toMatch(/check_state/);
  });

  it('repeated GET timeouts: bounded calls and their own terminal reason', () => {
    const timeline = {
      operationId: 'op-44',
      method: 'GET',
      policy: { maxAttempts: 3, deadlineMs: 400, attemptTimeoutMs: 100, backoff: { kind: 'constant', delayMs: 40 } },
      seed: 1,
      observations: Array.from({ length: 8 }, () => ({ errorClass: 'timeout', elapsedMs: 100 })),
    };
    const r = relent(['replay', '-'], JSON.stringify(timeline));
    expect(r.lines.filter((l) => l.type === 'attempt')).toHaveLength(3);
    expect(r.lines.at(-1)).toMatchObject({ reason: 'max_attempts', attempts: 3, errorClass: 'timeout' });
    expect(r.code).toBe(4);
  });

  it('an observation slower than the remaining time becomes a timeout at that bound', () => {
    const timeline = { operationId: 'op-45', method: 'GET', policy: { deadlineMs: 100 }, seed: 1, observations: [{ status: 200, elapsedMs: 150 }] };
    const r = relent(['replay', '-'], JSON.stringify(timeline));
    expect(r.lines[0]).toMatchObject({ status: null, errorClass: 'timeout', elapsedMs: 100 });
    expect(r.lines.at(-1)).toMatchObject({ reason: 'deadline_exceeded' });
    expect(r.code).toBe(3);
  });

  it('a preset name with overrides; the same timeline and seed give byte-identical output', () => {
    const timeline = {
      operationId: 'op-46',
      method: 'GET',
      policy: { preset: 'background-full-jitter', maxAttempts: 5 },
      seed: 'fixed',
      observations: [
        { status: 503, elapsedMs: 10 },
        { errorClass: 'reset', elapsedMs: 5 },
        { status: 503, elapsedMs: 10 },
        { status: 200, elapsedMs: 10 },
      ],
    };
    const a = relent(['replay', '-'], JSON.stringify(timeline));
    const b = relent(['replay', '-'], JSON.stringify(timeline));
    expect(a.code).toBe(0);
    expect(a.out).toBe(b.out);
    const delays = a.lines.filter((l) => l.decision === 'retry').map((l) => l.delayMs as number);
    expect(delays).toHaveLength(3);
    const other = relent(['replay', '-'], JSON.stringify({ ...timeline, seed: 'other' }));
    expect(other.out).not.toBe(a.out);
  });

  it("Retry-After with a skewed Date header: the wait is the server's 2 s", () => {
    const timeline = {
      operationId: 'op-47',
      method: 'GET',
      policy: 'http-429',
      seed: 1,
      wallClock: 'Thu, 01 Jan 2026 11:00:00 GMT',
      observations: [
        { status: 429, elapsedMs: 10, headers: { 'Retry-After': 'Thu, 01 Jan 2026 12:00:02 GMT', Date: 'Thu, 01 Jan 2026 12:00:00 GMT' } },
        { status: 200, elapsedMs: 10 },
      ],
    };
    const r = relent(['replay', '-'], JSON.stringify(timeline));
    expect(r.lines[0]).toMatchObject({ retryAfterMs: 2000, retryAfterValid: true, decision: 'retry' });
    expect(r.lines[0]!.delayMs as number).toBeGreaterThanOrEqual(2000);
    expect(r.lines[0]!.delayMs as number).toBeLessThan(2300);
  });

  it('arrays and JSON lines of timelines', () => {
    const t = (id: string) => ({ operationId: id, method: 'GET', seed: 1, observations: [{ status: 200, elapsedMs: 1 }] });
    expect(relent(['replay', '-'], JSON.stringify([t('a'), t('b')])).lines.filter((l) => l.type === 'result')).toHaveLength(2);
    expect(relent(['replay', '-'], `${JSON.stringify(t('a'))}\n${JSON.stringify(t('b'))}\n`).lines.filter((l) => l.type === 'result')).toHaveLength(2);
  });
});

describe('malformed input → exit 2 and a message naming the problem and where', () => {
  it.each([
    ['{"operationId": "x", "observations": [}', /invalid JSON at line 1, column \d+/],
    [
      '{"operationId": "x", "seed": 1, "observations": [{"status": 200, "errorClass": "timeout", "elapsedMs": 1}]}',
      /observations\[0\]: needs exactly one of `status` and `errorClass`/,
    ],
    ['{"operationId": "x", "seed": 1, "observations": [{"status": 200}]}', /observations\[0\]\.elapsedMs/],
    ['{"operationId": "x", "seed": 1, "observations": [{"errorClass": "boom", "elapsedMs": 1}]}', /observations\[0\]\.errorClass: expected one of/],
    ['{"operationId": "x", "seed": 1, "policy": {"maxAttempts": -1}, "observations": [{"status": 200, "elapsedMs": 1}]}', /policy: Expected `maxAttempts`/],
    [
      '{"operationId": "x", "seed": 1, "policy": {"backoff": {"kind": "full-jitter", "baseMs": 10}}, "observations": [{"status": 200, "elapsedMs": 1}]}',
      /policy: Expected `backoff\.capMs`/,
    ],
    ['{"operationId": "x", "seed": 1, "policy": "no-such-preset", "observations": [{"status": 200, "elapsedMs": 1}]}', /Unknown preset "no-such-preset"/],
    ['{"operationId": "x", "seed": 1, "observations": []}', /observations: expected a non-empty array/],
    ['[1]', /stdin\[0\]: expected a JSON object/],
    ['', /empty input/],
  ])('%s', (input, message) => {
    const r = relent(['replay', '-'], input);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(message);
    expect(r.out).toBe('');
  });
  it('a missing file, a missing argument, an unknown flag, an unknown command', () => {
    expect(relent(['replay', '/nonexistent.json'])).toMatchObject({ code: 2, err: expect.stringMatching(/no such file/) });
    expect(relent(['replay'])).toMatchObject({ code: 2 });
    expect(relent(['replay', '--bogus', 'x'])).toMatchObject({ code: 2, err: expect.stringMatching(/bogus/) });
    expect(relent(['frobnicate'])).toMatchObject({ code: 2, err: expect.stringMatching(/unknown command/) });
  });
  it('unknown timeline fields are warned about, not fatal', () => {
    const r = relent(['replay', '-'], JSON.stringify({ operationId: 'x', seed: 1, colour: 'red', observations: [{ status: 200, elapsedMs: 1 }] }));
    expect(r.code).toBe(0);
    expect(r.err).toMatch(/stdin\.colour: unknown field ignored/);
  });
});

describe('relent presets', () => {
  it('lists every preset with parameters and source', () => {
    const r = spawnSync(process.execPath, [BIN, 'presets'], { encoding: 'utf8' });
    expect(r.status).toBe(0);
    for (const name of [
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
    ]) {
      expect(r.stdout).toContain(`${name}\n`);
    }
    expect(r.stdout).toContain(
      'source: Adobe Experience Platform, "Rate limiting and retry policy for streaming destinations built with Destination SDK" — https://experienceleague.adobe.com/',
    );
    const json = JSON.parse(spawnSync(process.execPath, [BIN, 'presets', 'adobe-best-effort', '--json'], { encoding: 'utf8' }).stdout);
    expect(json.presets[0].policy).toMatchObject({ maxAttempts: 3, backoff: { kind: 'schedule', delaysMs: [15000, 30000] } });
  });
  it("npm start's demo replays the bundled examples as expected", () => {
    const r = spawnSync(process.execPath, [BIN, 'demo'], { encoding: 'utf8' });
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/all as expected/);
  });
});
