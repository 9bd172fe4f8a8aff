import { describe, expect, it } from 'vitest';
import { analyzeEventText, EventLogAnalyzer } from '../../src/report/analyze.js';
import { formatReport } from '../../src/report/format.js';
import { LineSplitter } from '../../src/report/lines.js';
import { AdaptiveSeries, nextWidth } from '../../src/report/series.js';
import { LogSketch } from '../../src/report/sketch.js';

type Fields = Record<string, unknown>;
const attempt = (f: Fields): string =>
  JSON.stringify({
    type: 'attempt',
    requestId: `${String(f.operationId)}/attempt-${String(f.attempt)}`,
    method: 'GET',
    endpoint: null,
    status: null,
    errorClass: null,
    elapsedMs: 10,
    remainingMs: 1000,
    delayMs: null,
    retryAfterMs: null,
    retryAfterValid: null,
    ...f,
  });
const result = (f: Fields): string => JSON.stringify({ type: 'result', status: null, errorClass: null, ...f });

const ITEMS = 'https://api.example.com:443/items';
const CHARGE = 'https://pay.example.com:443/charge';

/** A small log whose every figure is counted by hand below. Line numbers matter. */
const LOG =
  [
    /* 1 */ attempt({ operationId: 'a', attempt: 1, endpoint: ITEMS, status: 503, elapsedMs: 80, decision: 'retry', delayMs: 40 }),
    /* 2 */ attempt({ operationId: 'a', attempt: 2, endpoint: ITEMS, status: 503, elapsedMs: 80, decision: 'retry', delayMs: 40 }),
    /* 3 */ attempt({ operationId: 'a', attempt: 3, endpoint: ITEMS, status: 200, elapsedMs: 50, decision: 'return' }),
    /* 4 */ result({ operationId: 'a', status: 200, reason: 'return', attempts: 3 }),
    /* 5 */ attempt({
      operationId: 'b',
      attempt: 1,
      endpoint: `https://user:pw@api.example.com/items?token=s3cret#frag`,
      status: 200,
      elapsedMs: 20,
      decision: 'return',
    }),
    /* 6 */ result({ operationId: 'b', status: 200, reason: 'return', attempts: 1 }),
    /* 7 */ '{"type":"attempt", oops}',
    /* 8 */ attempt({ operationId: 'c', attempt: 1, method: 'POST', endpoint: CHARGE, errorClass: 'timeout', elapsedMs: 120, decision: 'check_state' }),
    /* 9 */ result({ operationId: 'c', errorClass: 'timeout', reason: 'check_state', attempts: 1 }),
    /* 10 */ '   ',
    /* 11 */ attempt({ operationId: 'd', attempt: 1, endpoint: '/orders', errorClass: 'connect_refused', elapsedMs: 5, decision: 'retry', delayMs: 0 }),
    /* 12 */ attempt({ operationId: 'd', attempt: 2, endpoint: '/orders', errorClass: 'timeout', elapsedMs: 300, decision: 'retry', delayMs: 100 }),
    /* 13 */ attempt({ operationId: 'd', attempt: 3, endpoint: '/orders', errorClass: 'timeout', elapsedMs: 300, decision: 'deadline_exceeded' }),
    /* 14 */ result({ operationId: 'd', errorClass: 'timeout', reason: 'deadline_exceeded', attempts: 3 }),
    /* 15 */ attempt({ operationId: 'e', attempt: 0, endpoint: ITEMS, status: 500, decision: 'retry' }),
    /* 16 */ attempt({
      operationId: 'e',
      attempt: 1,
      endpoint: ITEMS,
      status: 429,
      elapsedMs: 30,
      decision: 'retry',
      delayMs: 1000,
      retryAfterMs: 1000,
      retryAfterValid: true,
    }),
    /* 17 */ JSON.stringify({ type: 'delivered', destination: 'x', batchId: 1, key: 'k', items: 1, attempts: 1 }),
    /* 18 */ attempt({ operationId: 'f', attempt: 1, endpoint: '/orders', status: 503, elapsedMs: 15, decision: 'max_attempts' }),
  ].join('\n') + '\n';

describe('aggregates of a hand-written log', () => {
  const r = analyzeEventText(LOG, { source: 'hand.jsonl' });

  it('counts lines, events, malformed lines with their numbers, and operations', () => {
    expect(r.lines).toBe(18);
    expect(r.blankLines).toBe(1);
    expect(r.events).toEqual({ attempt: 10, result: 4, other: { delivered: 1 } });
    expect(r.malformed.count).toBe(2);
    expect(r.malformed.lines).toEqual([
      { line: 7, reason: 'not valid JSON' },
      { line: 15, reason: 'attempt: "attempt" is not a whole number ≥ 1' },
    ]);
    // a, b, c, d by their result line; f by its last attempt's decision; e still retrying.
    expect(r.operations).toEqual({ ended: 5, withResult: 4, inferred: 1, unfinished: 1, evicted: 0, maxOpen: 50_000 });
  });

  it('attempts per operation, load and terminal reasons', () => {
    expect(r.attemptsPerOperation.histogram).toEqual([
      { attempts: 1, operations: 3, share: 0.6 },
      { attempts: 3, operations: 2, share: 0.4 },
    ]);
    expect(r.attemptsPerOperation.mean).toBe(1.8);
    expect(r.attemptsPerOperation.max).toBe(3);
    expect(r.attemptsPerOperation.more).toBeNull();
    expect(r.load).toEqual({ attempts: 10, operations: 6, attemptsPerOperation: 10 / 6, retries: 4, retryShare: 0.4 });
    expect(r.reasons).toEqual([
      { reason: 'return', operations: 2, share: 0.4 },
      { reason: 'check_state', operations: 1, share: 0.2 },
      { reason: 'deadline_exceeded', operations: 1, share: 0.2 },
      { reason: 'max_attempts', operations: 1, share: 0.2 },
    ]);
    expect(r.outcomes).toEqual({ '2xx': 2, timeout: 2, '5xx': 1 });
  });

  it('statuses, error classes, decisions and timeouts per attempt', () => {
    expect(r.perAttempt.statuses).toEqual([
      { status: 200, attempts: 2 },
      { status: 429, attempts: 1 },
      { status: 503, attempts: 3 },
    ]);
    expect(r.perAttempt.statusClasses).toEqual({ '2xx': 2, '4xx': 1, '5xx': 3 });
    expect(r.perAttempt.errorClasses).toEqual([
      { errorClass: 'timeout', attempts: 3 },
      { errorClass: 'connect_refused', attempts: 1 },
    ]);
    expect(r.perAttempt.decisions).toEqual([
      { decision: 'return', attempts: 2 },
      { decision: 'retry', attempts: 5 },
      { decision: 'check_state', attempts: 1 },
      { decision: 'deadline_exceeded', attempts: 1 },
      { decision: 'max_attempts', attempts: 1 },
    ]);
    expect(r.timeouts).toEqual({ attempts: 3, share: 0.3 });
    expect(r.retryAfter).toEqual({ seen: 1, valid: 1, invalid: 0 });
  });

  it('delays and attempt durations', () => {
    // delays 40, 40, 0, 100, 1000
    expect(r.delays).toMatchObject({ count: 5, min: 0, max: 1000, mean: 236, p50: 40, p90: 1000, p99: 1000 });
    expect(r.delays.bins).toEqual([
      { lo: 0, hi: 0, count: 1 },
      { lo: 20, hi: 50, count: 2 },
      { lo: 50, hi: 100, count: 0 },
      { lo: 100, hi: 200, count: 1 },
      { lo: 200, hi: 500, count: 0 },
      { lo: 500, hi: 1000, count: 0 },
      { lo: 1000, hi: 2000, count: 1 },
    ]);
    // 80 80 50 20 120 5 300 300 30 15
    expect(r.elapsed).toMatchObject({ count: 10, min: 5, max: 300, mean: 100, p50: 50, p90: 300 });
  });

  it('retry success per endpoint, with endpoints scrubbed of userinfo, query and fragment', () => {
    const rows = Object.fromEntries(r.retrySuccess.endpoints.map((e) => [e.endpoint, e]));
    expect(Object.keys(rows).sort()).toEqual(['/orders', CHARGE, ITEMS].sort());
    expect(rows[ITEMS]).toMatchObject({
      operations: 2,
      attempts: 5,
      attemptsPerOperation: 5 / 3,
      returned: 2,
      retried: 1,
      retriedReturned: 1,
      retrySuccessRate: 1,
      timeouts: 0,
      unfinished: 1,
      reasons: { return: 2 },
    });
    expect(rows[ITEMS]!.verdict.kind).toBe('not-enough-data');
    expect(rows['/orders']).toMatchObject({
      operations: 2,
      attempts: 4,
      retried: 1,
      retriedReturned: 0,
      retrySuccessRate: 0,
      timeouts: 2,
      timeoutShare: 0.5,
      reasons: { deadline_exceeded: 1, max_attempts: 1 },
    });
    expect(rows[CHARGE]).toMatchObject({ operations: 1, attempts: 1, retried: 0, retrySuccessRate: null, timeouts: 1, reasons: { check_state: 1 } });
    expect(rows[CHARGE]!.verdict).toEqual({ kind: 'no-retries', successRate: null, text: 'no operation was retried' });
    expect(r.retrySuccess.overall).toMatchObject({
      endpoint: 'all endpoints',
      operations: 5,
      attempts: 10,
      retried: 2,
      retriedReturned: 1,
      retrySuccessRate: 0.5,
      timeouts: 3,
    });
    const json = JSON.stringify(r);
    expect(json).not.toContain('s3cret');
    expect(json).not.toContain('user:pw');
  });

  it('a load-vs-retries series by line order when events carry no time', () => {
    expect(r.series.basis).toBe('line');
    expect(r.series.field).toBeNull();
    expect(r.series.unit).toBe('lines');
    expect(r.series.bucketWidth).toBe(1);
    expect(r.series.note).toMatch(/by line order: the events carry no time/);
    const total = r.series.buckets.reduce((s, b) => s + b.attempts, 0);
    expect(total).toBe(10);
    expect(r.series.buckets.reduce((s, b) => s + b.retries, 0)).toBe(4);
    expect(r.series.buckets.find((b) => b.start === 12)).toEqual({ start: 12, attempts: 1, firstAttempts: 0, retries: 1, failures: 1 });
  });

  it('prints tables that name the malformed lines', () => {
    const text = formatReport(r);
    expect(text).toMatch(/^relent report — hand\.jsonl\n18 lines: 10 attempts, 4 results, 1 other event \(delivered 1\), 1 blank; 2 malformed\n/);
    expect(text).toContain('Malformed lines (skipped): line 7 (not valid JSON), line 15 (attempt: "attempt" is not a whole number ≥ 1)');
    expect(text).toContain('Load sent: 1.67 attempts per operation (10 attempts, 6 operations); retries are 40 % of attempts');
    expect(text).toMatch(/\nreturn +2 +40 %\n/);
    expect(text).toMatch(/\nall endpoints +5 +1\.67 +2 +50 % +30 % +not enough data: 2 retried operations \(50 % succeeded\); a verdict needs 20\n/);
    expect(text).not.toContain('s3cret');
  });
});

describe('malformed lines are counted, never fatal', () => {
  it('names each kind of fault with its line number and goes on', () => {
    const lines = [
      'garbage',
      '[1,2]',
      '{"no":"type"}',
      attempt({ operationId: '', attempt: 1, status: 200, decision: 'return' }),
      attempt({ operationId: 'x', attempt: 1.5, status: 200, decision: 'return' }),
      attempt({ operationId: 'x', attempt: 1, status: 200, decision: 'maybe' }),
      attempt({ operationId: 'x', attempt: 1, status: 700, decision: 'return' }),
      attempt({ operationId: 'x', attempt: 1, status: 503, errorClass: 'timeout', decision: 'retry' }),
      attempt({ operationId: 'x', attempt: 1, decision: 'retry' }),
      attempt({ operationId: 'x', attempt: 1, status: 503, decision: 'retry', delayMs: -5 }),
      result({ operationId: 'x', reason: 'retry', attempts: 1 }),
      result({ operationId: 'x', reason: 'return', attempts: -1 }),
      attempt({ operationId: 'ok', attempt: 1, status: 200, decision: 'return' }),
      result({ operationId: 'ok', status: 200, reason: 'return', attempts: 1 }),
      '{"type":"result","operationId":"trunc',
    ];
    const r = analyzeEventText(lines.join('\n'), { malformedLinesKept: 100 });
    expect(r.malformed.count).toBe(13);
    expect(r.malformed.lines.map((m) => m.line)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15]);
    expect(r.malformed.lines.map((m) => m.reason)).toEqual([
      'not a JSON object',
      'not a JSON object',
      'no "type"',
      'attempt: "operationId" is not a non-empty string',
      'attempt: "attempt" is not a whole number ≥ 1',
      'attempt: "decision" is not one of relent\'s decisions',
      'attempt: "status" is not an HTTP status',
      'attempt: needs exactly one of "status" and "errorClass"',
      'attempt: needs exactly one of "status" and "errorClass"',
      'attempt: "delayMs" is not a number ≥ 0',
      'result: "reason" is not a terminal reason',
      'result: "attempts" is not a whole number ≥ 0',
      'not valid JSON',
    ]);
    expect(r.malformed.byReason['not a JSON object']).toBe(2);
    expect(r.operations.ended).toBe(1);
    expect(r.reasons).toEqual([{ reason: 'return', operations: 1, share: 1 }]);
  });

  it('keeps the first N line numbers and counts the rest', () => {
    const text = Array.from({ length: 50 }, (_, i) =>
      i % 2 === 0 ? 'nope' : attempt({ operationId: `o${i}`, attempt: 1, status: 200, decision: 'return' }),
    ).join('\n');
    const r = analyzeEventText(text, { malformedLinesKept: 3 });
    expect(r.malformed.count).toBe(25);
    expect(r.malformed.lines.map((m) => m.line)).toEqual([1, 3, 5]);
    expect(formatReport(r)).toContain('line 1 (not a JSON object), line 3 (not a JSON object), line 5 (not a JSON object), and 22 more');
    expect(r.operations.inferred).toBe(25);
  });

  it('a line longer than the limit is malformed and never held whole; the next line is read', () => {
    const a = new EventLogAnalyzer({ maxLineBytes: 200 });
    a.push(attempt({ operationId: 'a', attempt: 1, status: 200, decision: 'return' }).slice(0, 150));
    a.push('x'.repeat(150));
    a.push('y'.repeat(10_000));
    a.push('\n' + result({ operationId: 'b', status: 200, reason: 'return', attempts: 1 }) + '\n');
    const r = a.finish();
    expect(r.malformed.lines).toEqual([{ line: 1, reason: 'line too long' }]);
    expect(r.events.result).toBe(1);
  });

  it('control characters and bidi overrides in names from the log do not reach the output', () => {
    const r = analyzeEventText(
      [attempt({ operationId: 'a', attempt: 1, endpoint: '/evil\u001b[31m\u202e', errorClass: 'weird\u0007', decision: 'not_retryable' })].join('\n'),
    );
    expect(r.retrySuccess.endpoints[0]!.endpoint).toBe('/evil\ufffd[31m\ufffd');
    expect(r.perAttempt.errorClasses[0]!.errorClass).toBe('weird\ufffd');
    expect([...formatReport(r)].filter((c) => (c < ' ' && c !== '\n') || c === '\u202e')).toEqual([]);
  });
});

describe('bounded state', () => {
  it('evicts the oldest open operation beyond maxOpenOperations and counts it', () => {
    const lines = [
      attempt({ operationId: 'a', attempt: 1, status: 503, decision: 'retry', delayMs: 1 }),
      attempt({ operationId: 'b', attempt: 1, status: 503, decision: 'not_retryable' }),
      attempt({ operationId: 'c', attempt: 1, status: 503, decision: 'retry', delayMs: 1 }), // evicts a (unfinished)
      attempt({ operationId: 'd', attempt: 1, status: 200, decision: 'return' }), // evicts b (ended by its decision)
      result({ operationId: 'd', status: 200, reason: 'return', attempts: 1 }),
      result({ operationId: 'c', status: 503, reason: 'max_attempts', attempts: 1 }),
    ];
    const r = analyzeEventText(lines.join('\n'), { maxOpenOperations: 2 });
    expect(r.operations).toEqual({ ended: 3, withResult: 2, inferred: 1, unfinished: 1, evicted: 2, maxOpen: 2 });
    expect(r.reasons.map((x) => [x.reason, x.operations])).toEqual([
      ['return', 1],
      ['max_attempts', 1],
      ['not_retryable', 1],
    ]);
  });

  it('folds endpoints beyond maxEndpoints into one row', () => {
    const lines: string[] = [];
    for (let i = 0; i < 10; i++) {
      lines.push(attempt({ operationId: `o${i}`, attempt: 1, endpoint: `/items/${i}`, status: 200, decision: 'return' }));
      lines.push(result({ operationId: `o${i}`, status: 200, reason: 'return', attempts: 1 }));
    }
    const r = analyzeEventText(lines.join('\n'), { maxEndpoints: 3 });
    expect(r.retrySuccess.endpointsFolded).toBe(true);
    expect(r.retrySuccess.endpoints.map((e) => [e.endpoint, e.operations])).toEqual([
      ['(other endpoints)', 7],
      ['/items/0', 1],
      ['/items/1', 1],
      ['/items/2', 1],
    ]);
    expect(r.retrySuccess.overall.operations).toBe(10);
  });

  it('chunks may split lines and characters anywhere', () => {
    const text = `\ufeff${attempt({ operationId: 'é', attempt: 1, endpoint: '/café', status: 200, decision: 'return' })}\r\n${result({ operationId: 'é', status: 200, reason: 'return', attempts: 1 })}`;
    const bytes = Buffer.from(text, 'utf8');
    const whole = analyzeEventText(text);
    for (const size of [1, 2, 3, 7, 64]) {
      const a = new EventLogAnalyzer();
      for (let i = 0; i < bytes.length; i += size) a.push(bytes.subarray(i, i + size));
      const r = a.finish();
      expect(r).toEqual(whole);
    }
    expect(whole.malformed.count).toBe(0);
    expect(whole.retrySuccess.endpoints[0]!.endpoint).toBe('/café');
    expect(whole.operations.withResult).toBe(1);
  });
});

describe('load vs retries over time', () => {
  it("uses the events' ts (ms) when the first attempt carries one", () => {
    const lines: string[] = [];
    for (let i = 0; i < 300; i++) {
      lines.push(attempt({ operationId: `o${i}`, attempt: 1, status: 503, decision: 'retry', delayMs: 10, ts: 1_000_000 + i * 1000 }));
      lines.push(attempt({ operationId: `o${i}`, attempt: 2, status: 200, decision: 'return', ts: 1_000_000 + i * 1000 + 500 }));
    }
    lines.push(attempt({ operationId: 'late', attempt: 1, status: 200, decision: 'return' })); // no ts: counted at the last one
    const r = analyzeEventText(lines.join('\n'));
    expect(r.series.basis).toBe('time');
    expect(r.series.field).toBe('ts');
    expect(r.series.unit).toBe('ms');
    expect(r.series.attemptsWithoutTime).toBe(1);
    expect(r.series.bucketWidth).toBe(10_000);
    expect(r.series.buckets).toHaveLength(30);
    expect(r.series.buckets[0]).toEqual({ start: 1_000_000, attempts: 20, firstAttempts: 10, retries: 10, failures: 10 });
    expect(r.series.buckets.reduce((s, b) => s + b.attempts, 0)).toBe(601);
  });

  it('accepts a date text in "time", and times that go back a little', () => {
    const lines = [
      attempt({ operationId: 'a', attempt: 1, status: 200, decision: 'return', time: '2026-03-01T10:00:05Z' }),
      attempt({ operationId: 'b', attempt: 1, status: 200, decision: 'return', time: '2026-03-01T10:00:01Z' }),
      attempt({ operationId: 'c', attempt: 1, status: 200, decision: 'return', time: '2026-03-01T10:00:09Z' }),
    ];
    const r = analyzeEventText(lines.join('\n'));
    expect(r.series.field).toBe('time');
    const b = r.series.buckets;
    expect(b.reduce((s, x) => s + x.attempts, 0)).toBe(3);
    expect(b[0]!.start).toBe(Date.parse('2026-03-01T10:00:01Z'));
    expect(formatReport(r)).toContain('starting 2026-03-01T10:00:01.000Z');
  });

  it('the series keeps a fixed number of buckets; widening keeps every count', () => {
    const s = new AdaptiveSeries('lines', 10);
    for (let line = 1; line <= 12_345; line++) s.add(line, line % 3 === 0 ? 2 : 1, line % 5 === 0);
    const b = s.buckets();
    expect(b.length).toBeLessThanOrEqual(10);
    expect(s.bucketWidth).toBe(2000);
    expect(b.reduce((x, y) => x + y.attempts, 0)).toBe(12_345);
    expect(b.reduce((x, y) => x + y.retries, 0)).toBe(4115);
    expect(b.reduce((x, y) => x + y.failures, 0)).toBe(2469);
    expect([1, 2, 10, 20, 100].map((w) => nextWidth(w, 'lines'))).toEqual([2, 10, 20, 100, 200]);
    expect([1000, 20_000, 60_000, 86_400_000].map((w) => nextWidth(w, 'ms'))).toEqual([2000, 60_000, 120_000, 172_800_000]);
  });
});

describe('LogSketch', () => {
  it('whole numbers below 4096 give exact quantiles; others within 2.2 %', () => {
    const s = new LogSketch();
    for (let i = 1; i <= 1000; i++) s.add(i);
    expect(s.summary()).toMatchObject({ count: 1000, min: 1, max: 1000, mean: 500.5, p50: 500, p90: 900, p99: 990 });
    const t = new LogSketch();
    const values: number[] = [];
    for (let i = 0; i < 5000; i++) values.push(0.5 + ((i * 7919) % 100_000) * 1.37);
    for (const v of values) t.add(v);
    values.sort((a, b) => a - b);
    for (const q of [0.1, 0.5, 0.9, 0.99]) {
      const exact = values[Math.ceil(q * values.length) - 1]!;
      expect(Math.abs(t.quantile(q)! - exact) / exact).toBeLessThan(0.023);
    }
  });

  it('has fixed size whatever it counts, and bins with round edges', () => {
    const s = new LogSketch();
    for (const v of [0, 0, 0.3, 1, 1.5, 7, 2500, 2_000_000_000]) s.add(v);
    s.add(-1);
    s.add(Number.NaN);
    expect(s.count).toBe(8);
    const bins = s.bins();
    expect(bins[0]).toEqual({ lo: 0, hi: 0, count: 2 });
    expect(bins[1]).toEqual({ lo: 0, hi: 1, count: 1 });
    expect(bins[2]).toEqual({ lo: 1, hi: 2, count: 2 });
    expect(bins.find((b) => b.lo === 5)).toEqual({ lo: 5, hi: 10, count: 1 });
    expect(bins.find((b) => b.lo === 2000)).toEqual({ lo: 2000, hi: 5000, count: 1 });
    expect(bins[bins.length - 1]).toEqual({ lo: 2e9, hi: 5e9, count: 1 }); // an edge belongs to the bin above it
    expect(bins.reduce((x, b) => x + b.count, 0)).toBe(8);
  });
});

describe('LineSplitter', () => {
  it('numbers lines, strips CR, and hands on the last line without a newline', () => {
    const got: [string | null, number][] = [];
    const s = new LineSplitter((t, n) => got.push([t, n]), 8);
    s.push('ab\r\ncd');
    s.push('e\n\n0123456789\nlast');
    s.end();
    expect(got).toEqual([
      ['ab', 1],
      ['cde', 2],
      ['', 3],
      [null, 4],
      ['last', 5],
    ]);
  });
});
