// Pure unit tests of the rate-limit hint parsing (src/core/ratelimit.ts) and its wiring
// into readServerHint / decide. No sockets, no clocks: the wall clock is an argument.
import { describe, it, expect } from 'vitest';
import fc from 'fast-check';
import { parseRateLimit, parseResetValue, parseSfDictionary, parseSfList, rateLimitWait, readRateLimitWait } from '../../src/core/ratelimit.js';
import { readServerHint, SERVER_HINT_HEADERS } from '../../src/core/hints.js';
import { createPolicy } from '../../src/core/policy.js';
import { createOperation } from '../../src/core/operation.js';
import type { Observation } from '../../src/core/types.js';
import { formatImfFixdate } from '../../src/core/http-date.js';

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);
const ctx = { wallNowMs: NOW };

describe('Structured Field parsing (RFC 9651)', () => {
  it('parses the draft -11 examples', () => {
    const l = parseSfList('"default";r=50;t=30');
    expect(l).toHaveLength(1);
    expect(l![0]!.value).toEqual({ type: 'string', value: 'default' });
    expect(l![0]!.params.get('r')).toEqual({ type: 'integer', value: 50 });
    expect(l![0]!.params.get('t')).toEqual({ type: 'integer', value: 30 });
    const p = parseSfList('"burst";q=100;w=60,"daily";q=1000;w=86400');
    expect(p).toHaveLength(2);
    const pk = parseSfList('"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:');
    expect(pk![0]!.params.get('pk')).toEqual({ type: 'bytes', value: 'sdfjLJUOUH==' });
  });

  it('parses every bare item type, inner lists and boolean parameters', () => {
    const l = parseSfList('1, -2.5, "s\\"q", tok/en:x, :YQ==:, ?0, @1700000000, %"caf%c3%a9", (1 2);a, x;flag');
    expect(l!.map((i) => (Array.isArray(i.value) ? 'inner' : (i.value as { type: string }).type))).toEqual([
      'integer',
      'decimal',
      'string',
      'token',
      'bytes',
      'boolean',
      'date',
      'display',
      'inner',
      'token',
    ]);
    expect((l![2]!.value as { value: string }).value).toBe('s"q');
    expect((l![7]!.value as { value: string }).value).toBe('café');
    expect(l![9]!.params.get('flag')).toEqual({ type: 'boolean', value: true });
  });

  it('rejects malformed lists', () => {
    for (const bad of ['"a",', '"a" "b"', 'r=0', '"unterminated', '1234567890123456', '1.2345', '"a";R=1', '"a";r=', ',', '(1 2', 'é', '"a\\x"']) {
      expect(parseSfList(bad), bad).toBeNull();
    }
  });

  it('parses dictionaries', () => {
    const d = parseSfDictionary('limit=100, remaining=0, reset=30, flag');
    expect([...d!.keys()]).toEqual(['limit', 'remaining', 'reset', 'flag']);
    expect(parseSfDictionary('a=1,')).toBeNull();
  });

  it('never throws and stays linear on any input', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 200 }), (s) => {
        parseSfList(s);
        parseSfDictionary(s);
        parseRateLimit(s);
      }),
      { numRuns: 2000 },
    );
    const t0 = performance.now();
    parseSfList('('.repeat(50_000));
    parseSfList('"'.padEnd(100_000, 'a'));
    expect(performance.now() - t0).toBeLessThan(500);
  });
});

describe('RateLimit (draft -11)', () => {
  it('r=0 with t means wait t seconds', () => {
    expect(rateLimitWait(parseRateLimit('"default";r=0;t=30'))).toEqual({ kind: 'wait', delayMs: 30_000, source: 'ratelimit' });
  });

  it('r>0 means quota is available: no wait', () => {
    expect(rateLimitWait(parseRateLimit('"default";r=50;t=30'))).toEqual({ kind: 'available', source: 'ratelimit' });
  });

  it('several policies: the longest window among the exhausted ones', () => {
    expect(rateLimitWait(parseRateLimit('"burst";r=0;t=5, "daily";r=0;t=3600, "hourly";r=10;t=60'))).toMatchObject({ kind: 'wait', delayMs: 3_600_000 });
    expect(rateLimitWait(parseRateLimit('"burst";r=0;t=5, "daily";r=100;t=3600'))).toMatchObject({ kind: 'wait', delayMs: 5_000 });
  });

  it('r=0 without t: exhausted, but no usable wait', () => {
    expect(rateLimitWait(parseRateLimit('"default";r=0'))).toEqual({ kind: 'none' });
  });

  it('malformed fields are ignored (§7 "MUST be ignored")', () => {
    for (const bad of [
      '"default";t=30',
      '"default";r=-1;t=30',
      '"default";r=0;t=1.5',
      '"default";r=0;t="30"',
      'garbage ;;',
      '',
      '"a";r=0;t=30,',
      '("a");r=0;t=5',
    ]) {
      expect(parseRateLimit(bad), bad).toMatchObject({ present: true, valid: false });
      expect(rateLimitWait(parseRateLimit(bad)), bad).toEqual({ kind: 'none' });
    }
    expect(parseRateLimit(undefined)).toEqual({ present: false });
  });

  it('accepts the -07/-08 dictionary form', () => {
    expect(rateLimitWait(parseRateLimit('limit=100, remaining=0, reset=30'))).toMatchObject({ kind: 'wait', delayMs: 30_000 });
    expect(rateLimitWait(parseRateLimit('limit=100, remaining=3, reset=30'))).toMatchObject({ kind: 'available' });
  });

  it('absurd windows (over 366 days) are ignored', () => {
    expect(rateLimitWait(parseRateLimit('"d";r=0;t=99999999'))).toEqual({ kind: 'none' });
  });
});

describe('*-Reset fallbacks (ky heuristic, Date-corrected)', () => {
  it('delta seconds below 10^9', () => {
    expect(parseResetValue('30', ctx)).toBe(30_000);
    expect(parseResetValue('1.25', ctx)).toBe(1250);
    expect(parseResetValue('0', ctx)).toBe(0);
  });

  it('epoch seconds at or above 10^9, measured against the Date header', () => {
    const epoch = Math.floor(NOW / 1000) + 20;
    expect(parseResetValue(String(epoch), ctx)).toBe(20_000);
    // The server's clock is an hour ahead of ours: its Date header says so, and the wait is still 20 s.
    const serverNow = NOW + 3_600_000;
    const serverEpoch = Math.floor(serverNow / 1000) + 20;
    expect(parseResetValue(String(serverEpoch), { wallNowMs: NOW, dateHeader: formatImfFixdate(serverNow) })).toBe(20_000);
    // Without the Date header it would have been an hour and 20 s.
    expect(parseResetValue(String(serverEpoch), ctx)).toBe(3_620_000);
  });

  it('epoch milliseconds at or above 10^12; the past means 0', () => {
    expect(parseResetValue(String(NOW + 1500), ctx)).toBe(1500);
    expect(parseResetValue(String(Math.floor(NOW / 1000) - 100), ctx)).toBe(0);
  });

  it('garbage, negatives and absurd values give null', () => {
    for (const bad of ['soon', '-5', '1e3', '', ' ', '0x10', '5s', '99999999']) expect(parseResetValue(bad, ctx), bad).toBeNull();
    expect(parseResetValue(String(Math.floor(NOW / 1000) + 1), { wallNowMs: Number.NaN })).toBeNull();
  });

  it('precedence: RateLimit, then RateLimit-Reset, then X-RateLimit-Reset; remaining > 0 means no wait', () => {
    expect(readRateLimitWait({ ratelimit: '"a";r=0;t=2', 'x-ratelimit-reset': '9' }, ctx)).toMatchObject({ kind: 'wait', delayMs: 2000, source: 'ratelimit' });
    expect(readRateLimitWait({ ratelimit: '"a";r=5;t=2', 'x-ratelimit-reset': '9' }, ctx)).toMatchObject({ kind: 'available', source: 'ratelimit' });
    expect(readRateLimitWait({ ratelimit: 'broken;;', 'ratelimit-reset': '3' }, ctx)).toMatchObject({ kind: 'wait', delayMs: 3000, source: 'ratelimit-reset' });
    expect(readRateLimitWait({ 'ratelimit-reset': '3', 'ratelimit-remaining': '4' }, ctx)).toMatchObject({ kind: 'available' });
    expect(readRateLimitWait({ 'x-ratelimit-reset': '7', 'x-ratelimit-remaining': '0' }, ctx)).toMatchObject({
      kind: 'wait',
      delayMs: 7000,
      source: 'x-ratelimit-reset',
    });
    expect(readRateLimitWait({ 'x-rate-limit-reset': '7' }, ctx)).toMatchObject({ kind: 'wait', delayMs: 7000 });
    expect(readRateLimitWait({ 'x-ratelimit-retry-after': '7' }, ctx)).toMatchObject({ kind: 'wait', delayMs: 7000 });
    expect(readRateLimitWait({ 'x-ratelimit-reset': '7', 'x-ratelimit-remaining': '12' }, ctx)).toMatchObject({ kind: 'available' });
    expect(readRateLimitWait({ 'x-ratelimit-reset': 'soon' }, ctx)).toEqual({ kind: 'none' });
    expect(readRateLimitWait({}, ctx)).toEqual({ kind: 'none' });
  });

  it('cached responses (Age > 0) are ignored', () => {
    expect(readRateLimitWait({ ratelimit: '"a";r=0;t=2', age: '5' }, ctx)).toEqual({ kind: 'none' });
    expect(readRateLimitWait({ ratelimit: '"a";r=0;t=2', age: '0' }, ctx)).toMatchObject({ kind: 'wait' });
  });
});

describe('readServerHint and decide()', () => {
  const policy = createPolicy({ maxAttempts: 3, deadlineMs: 120_000, backoff: { kind: 'constant', delayMs: 10 } });
  const hint = (status: number, headers: Record<string, string>) => readServerHint(policy, { status, headers, elapsedMs: 5 }, NOW);

  it('Retry-After takes precedence over RateLimit (draft -11 §7)', () => {
    expect(hint(429, { 'retry-after': '4', ratelimit: '"a";r=0;t=30' })).toMatchObject({ source: 'retry-after', valid: true, delayMs: 4000 });
  });

  it('an invalid Retry-After gives an invalid hint even with RateLimit present (own backoff)', () => {
    expect(hint(429, { 'retry-after': 'soon', ratelimit: '"a";r=0;t=30' })).toMatchObject({ source: 'retry-after', valid: false });
  });

  it('without Retry-After the rate-limit fields are read', () => {
    expect(hint(429, { ratelimit: '"a";r=0;t=30' })).toMatchObject({ source: 'ratelimit', valid: true, delayMs: 30_000 });
    expect(hint(503, { 'x-ratelimit-reset': '2' })).toMatchObject({ source: 'x-ratelimit-reset', delayMs: 2000 });
    expect(hint(429, { ratelimit: '"a";r=9;t=30' })).toBeNull();
    expect(hint(500, { ratelimit: '"a";r=0;t=30' })).toBeNull(); // 500 is not in retryAfter.statuses
  });

  /** The decision on the first attempt of a GET, answered at 5 ms, as the operation state machine takes it. */
  const first = (obs: Observation) => {
    const op = createOperation(policy, { method: 'GET', random: () => 0 });
    op.start(0);
    op.answered(obs, 5, NOW);
    return op.decision!;
  };

  it('decide: a RateLimit wait is retryAfterMs, and retryAfterValid stays null (no Retry-After header)', () => {
    const d = first({ status: 429, headers: { ratelimit: '"a";r=0;t=2' }, elapsedMs: 5 });
    expect(d.decision).toBe('retry');
    expect(d.retryAfterMs).toBe(2000);
    expect(d.retryAfterValid).toBeNull();
    expect(d.delayMs).toBeGreaterThanOrEqual(2000);
    const withRa = first({ status: 429, headers: { 'retry-after': '1' }, elapsedMs: 5 });
    expect(withRa.retryAfterValid).toBe(true);
  });

  it('decide: a RateLimit wait over the cap stops at once', () => {
    const d = first({ status: 429, headers: { ratelimit: '"a";r=0;t=3600' }, elapsedMs: 5 });
    expect(d).toMatchObject({ decision: 'not_retryable', why: 'retry_after_over_cap', retryAfterMs: 3_600_000, retryAfterValid: null });
  });

  it('SERVER_HINT_HEADERS lists every header the hints read', () => {
    for (const h of [
      'retry-after',
      'date',
      'ratelimit',
      'ratelimit-reset',
      'ratelimit-remaining',
      'x-ratelimit-reset',
      'x-ratelimit-remaining',
      'x-rate-limit-reset',
      'x-ratelimit-retry-after',
      'age',
    ]) {
      expect(SERVER_HINT_HEADERS).toContain(h);
    }
  });
});
