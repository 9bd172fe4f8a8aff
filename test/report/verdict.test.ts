import { describe, expect, it } from 'vitest';
import { analyzeEventText } from '../../src/report/analyze.js';
import { percent, retryVerdict, VERDICT_THRESHOLDS } from '../../src/report/verdict.js';

describe('retry verdicts', () => {
  it('thresholds: 20 retried operations for a verdict; helps from 20 %; almost never below 5 %', () => {
    expect(VERDICT_THRESHOLDS).toEqual({ minRetried: 20, helps: 0.2, almostNever: 0.05 });
    expect(retryVerdict(0, 0)).toEqual({ kind: 'no-retries', successRate: null, text: 'no operation was retried' });
    expect(retryVerdict(19, 19)).toEqual({
      kind: 'not-enough-data',
      successRate: 1,
      text: 'not enough data: 19 retried operations (100 % succeeded); a verdict needs 20',
    });
    expect(retryVerdict(1, 0).text).toBe('not enough data: 1 retried operation (0 % succeeded); a verdict needs 20');
    expect(retryVerdict(20, 4).kind).toBe('help'); // exactly 20 %
    expect(retryVerdict(20, 3).kind).toBe('help-a-little'); // 15 %
    expect(retryVerdict(100, 5).kind).toBe('help-a-little'); // exactly 5 %
    expect(retryVerdict(100, 4).kind).toBe('almost-never'); // 4 %
    expect(retryVerdict(1000, 0).kind).toBe('almost-never');
  });

  it('says it in plain words', () => {
    expect(retryVerdict(100, 41).text).toBe('retries help: 41 % of retried operations succeed');
    expect(retryVerdict(1000, 20).text).toBe('retries almost never help (2 % of retried operations succeed): consider switching them off');
    expect(retryVerdict(200, 20).text).toBe('retries help a little: 10 % of retried operations succeed; keep them few and under a retry budget');
    expect(retryVerdict(1000, 4).text).toBe('retries almost never help (0.4 % of retried operations succeed): consider switching them off');
  });

  it('percent: whole numbers from 10 %, one decimal below, never a false 0 or 100', () => {
    expect([0, 0.0004, 0.004, 0.02, 0.0567, 0.1, 0.41, 0.996, 0.9996, 1].map(percent)).toEqual([
      '0 %',
      '< 0.1 %',
      '0.4 %',
      '2 %',
      '5.7 %',
      '10 %',
      '41 %',
      '99.6 %',
      '99.9 %',
      '100 %',
    ]);
  });

  it('gives each endpoint of a log its own verdict', () => {
    const lines: string[] = [];
    let n = 0;
    const op = (endpoint: string, attempts: number, ok: boolean): void => {
      const id = `op-${n++}`;
      for (let a = 1; a <= attempts; a++) {
        const last = a === attempts;
        const status = last && ok ? 200 : 503;
        const decision = last ? (ok ? 'return' : 'max_attempts') : 'retry';
        lines.push(
          JSON.stringify({
            type: 'attempt',
            operationId: id,
            requestId: `${id}/${a}`,
            attempt: a,
            method: 'GET',
            endpoint,
            status,
            errorClass: null,
            elapsedMs: 5,
            remainingMs: 1000,
            decision,
            delayMs: last ? null : 10,
            retryAfterMs: null,
            retryAfterValid: null,
          }),
        );
      }
      lines.push(
        JSON.stringify({ type: 'result', operationId: id, status: ok ? 200 : 503, errorClass: null, reason: ok ? 'return' : 'max_attempts', attempts }),
      );
    };
    // /flaky: 50 retried operations, 25 recover (50 %); plus 100 that succeed at once.
    for (let i = 0; i < 50; i++) op('https://a.example:443/flaky', 2, i % 2 === 0);
    for (let i = 0; i < 100; i++) op('https://a.example:443/flaky', 1, true);
    // /down: 60 retried operations, 1 recovers (1.7 %).
    for (let i = 0; i < 60; i++) op('https://a.example:443/down', 3, i === 0);
    // /meh: 40 retried, 4 recover (10 %).
    for (let i = 0; i < 40; i++) op('https://a.example:443/meh', 2, i < 4);
    // /rare: 5 retried.
    for (let i = 0; i < 5; i++) op('https://a.example:443/rare', 2, true);
    const r = analyzeEventText(lines.join('\n'));
    const v = Object.fromEntries(r.retrySuccess.endpoints.map((e) => [e.endpoint.replace('https://a.example:443', ''), e.verdict]));
    expect(v['/flaky']).toEqual({ kind: 'help', successRate: 0.5, text: 'retries help: 50 % of retried operations succeed' });
    expect(v['/down']!.kind).toBe('almost-never');
    expect(v['/down']!.text).toBe('retries almost never help (1.7 % of retried operations succeed): consider switching them off');
    expect(v['/meh']!.kind).toBe('help-a-little');
    expect(v['/rare']!.kind).toBe('not-enough-data');
    expect(r.retrySuccess.overall.retried).toBe(155);
    expect(r.retrySuccess.overall.retriedReturned).toBe(25 + 1 + 4 + 5);
  });
});
