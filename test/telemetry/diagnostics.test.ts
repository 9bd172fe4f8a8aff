import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import { createCircuitBreaker, type BreakerStateChange } from '../../src/core/breaker.js';
import type { AttemptEvent, ResultEvent } from '../../src/core/types.js';
import { execute } from '../../src/run/run.js';
import { DIAGNOSTICS_CHANNELS, publishBreakerChange, publishEvent } from '../../src/telemetry/diagnostics.js';
import { createTestClock } from '../../src/testing/index.js';

const subs: [string, (m: unknown) => void][] = [];
function listen<T>(name: string): T[] {
  const got: T[] = [];
  const fn = (m: unknown) => got.push(m as T);
  subscribe(name, fn);
  subs.push([name, fn]);
  return got;
}
afterEach(() => {
  for (const [name, fn] of subs.splice(0)) unsubscribe(name, fn);
});

describe('diagnostics_channel publisher', () => {
  it('names the channels', () => {
    expect(DIAGNOSTICS_CHANNELS).toEqual({ attempt: 'relent:attempt', result: 'relent:result', breaker: 'relent:breaker' });
  });

  it('publishes every attempt, the result and breaker state changes', async () => {
    const attempts = listen<AttemptEvent>('relent:attempt');
    const results = listen<ResultEvent>('relent:result');
    const changes = listen<BreakerStateChange>('relent:breaker');
    const clock = createTestClock();
    const breaker = createCircuitBreaker({ minimumThroughput: 2 }, { name: 'https://api.example.com', onStateChange: publishBreakerChange });
    const p = execute(async () => ({ status: 503 }), {
      policy: { maxAttempts: 3, backoff: { kind: 'constant', delayMs: 5 } },
      clock,
      breaker,
      onEvent: publishEvent,
      method: 'GET',
      endpoint: 'https://api.example.com/items',
    });
    await clock.runAll();
    const r = await p;
    expect(r.reason).toBe('circuit_open');
    expect(attempts.map((e) => [e.type, e.attempt, e.status, e.decision, e.endpoint])).toEqual([
      ['attempt', 1, 503, 'retry', 'https://api.example.com/items'],
      ['attempt', 2, 503, 'retry', 'https://api.example.com/items'],
    ]);
    expect(results).toEqual([
      { type: 'result', operationId: r.operationId, status: 503, errorClass: null, reason: 'circuit_open', attempts: 2, ts: Date.UTC(2026, 0, 1) + 10 },
    ]); // refused after the second wait
    // Opened when attempt 2 failed, at t = 5 ms (the wall clock of the test clock starts at 2026-01-01).
    expect(changes).toEqual([{ name: 'https://api.example.com', from: 'closed', to: 'open', at: Date.UTC(2026, 0, 1) + 5, reason: 'failure_ratio' }]);
  });

  it('scrubs an endpoint that was not normalised', () => {
    const got = listen<AttemptEvent>('relent:attempt');
    const ev: AttemptEvent = {
      type: 'attempt',
      operationId: 'op-1',
      requestId: 'op-1/attempt-1',
      attempt: 1,
      method: 'GET',
      endpoint: 'https://u:secret@h.example/p?token=secret#secret',
      status: 200,
      errorClass: null,
      elapsedMs: 1,
      remainingMs: 100,
      decision: 'return',
      delayMs: null,
      retryAfterMs: null,
      retryAfterValid: null,
      ts: 0,
    };
    publishEvent(ev);
    expect(got[0]!.endpoint).toBe('https://h.example:443/p');
    expect(ev.endpoint).toContain('secret'); // the caller's object is not changed
  });

  it('costs nothing and throws nothing without subscribers', () => {
    expect(() => publishEvent({ type: 'result', operationId: 'x', status: 200, errorClass: null, reason: 'return', attempts: 1, ts: 0 })).not.toThrow();
    expect(() => publishBreakerChange({ name: null, from: 'closed', to: 'open', at: 0, reason: 'failure_ratio' })).not.toThrow();
  });
});
