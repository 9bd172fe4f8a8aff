import { SpanKind, SpanStatusCode, context, trace } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { createCircuitBreaker } from '../../src/core/breaker.js';
import { execute, run, type AttemptContext } from '../../src/run/run.js';
import { normalizeEndpoint } from '../../src/telemetry/endpoint.js';
import { OTEL_METRICS, createOtelInstrumentation } from '../../src/telemetry/otel.js';
import { createTestClock, type TestClock } from '../../src/testing/index.js';
import { points, setupOtel } from './otel-helpers.js';

const otel = setupOtel();
const instrumentation = createOtelInstrumentation({ tracerProvider: otel.tracerProvider, meterProvider: otel.meterProvider });
afterAll(() => otel.shutdown());
beforeEach(() => otel.spans.reset());

async function drive<T>(clock: TestClock, start: () => Promise<T>): Promise<T> {
  const p = start();
  await clock.runAll();
  return p;
}

const backoff = { kind: 'constant' as const, delayMs: 10 };
const childrenOf = (all: ReadableSpan[], parent: ReadableSpan) => all.filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId);

describe('relent/otel spans', () => {
  it('a span per operation and per call, HTTP semantic conventions, the call span active during the call', async () => {
    const clock = createTestClock();
    const endpoint = normalizeEndpoint('https://user:pw@API.example.com:8443/v1/items?token=abc#frag');
    expect(endpoint).toBe('https://api.example.com:8443/v1/items');
    const activeDuringCall: (string | undefined)[] = [];
    const op = async (ctx: AttemptContext) => {
      activeDuringCall.push(trace.getActiveSpan()?.spanContext().spanId);
      await Promise.resolve();
      activeDuringCall.push(trace.getActiveSpan()?.spanContext().spanId); // still active after an await
      return { status: ctx.attempt < 3 ? 503 : 200 };
    };
    const outer = otel.tracerProvider.getTracer('test').startSpan('caller');
    await context.with(trace.setSpan(context.active(), outer), () =>
      drive(clock, () => run(op, { policy: { backoff }, clock, method: 'get', endpoint, instrumentation })),
    );
    outer.end();

    const all = otel.spans.getFinishedSpans();
    const opSpan = all.find((s) => s.name === 'relent GET')!;
    expect(opSpan).toBeDefined();
    expect(opSpan.kind).toBe(SpanKind.INTERNAL);
    expect(opSpan.parentSpanContext?.spanId).toBe(outer.spanContext().spanId);
    expect(opSpan.attributes).toMatchObject({
      'http.request.method': 'GET',
      'server.address': 'api.example.com',
      'server.port': 8443,
      'url.full': endpoint,
      'relent.terminal_reason': 'return',
      'relent.attempts': 3,
      'http.response.status_code': 200,
    });
    expect(opSpan.attributes['relent.operation.id']).toMatch(/^op-/);
    expect(opSpan.status.code).not.toBe(SpanStatusCode.ERROR);

    const attempts = childrenOf(all, opSpan);
    expect(attempts.map((s) => s.name)).toEqual(['GET', 'GET', 'GET']);
    for (const s of attempts) {
      expect(s.kind).toBe(SpanKind.CLIENT);
      expect(s.attributes).toMatchObject({ 'http.request.method': 'GET', 'server.address': 'api.example.com', 'server.port': 8443, 'url.full': endpoint });
    }
    expect(attempts.map((s) => s.attributes['http.request.resend_count'])).toEqual([undefined, 1, 2]);
    expect(attempts.map((s) => s.attributes['http.response.status_code'])).toEqual([503, 503, 200]);
    expect(attempts.map((s) => s.attributes['error.type'])).toEqual(['503', '503', undefined]);
    expect(attempts.map((s) => s.attributes['relent.decision'])).toEqual(['retry', 'retry', 'return']);
    expect(attempts.map((s) => s.attributes['relent.delay_ms'])).toEqual([10, 10, undefined]);
    expect(attempts.map((s) => s.status.code)).toEqual([SpanStatusCode.ERROR, SpanStatusCode.ERROR, SpanStatusCode.UNSET]);
    expect(activeDuringCall).toEqual(attempts.flatMap((s) => [s.spanContext().spanId, s.spanContext().spanId]));
  });

  it.each([['/users/{id}'], ['/users/:id']])('names spans by route template %s, and sets url.template', async (template) => {
    const clock = createTestClock();
    const endpoint = normalizeEndpoint('https://api.example.com/users/42?x=1', template);
    await drive(clock, () => run(async () => ({ status: 200 }), { clock, method: 'DELETE', endpoint, instrumentation }));
    const names = otel.spans.getFinishedSpans().map((s) => s.name);
    expect(names).toEqual([`DELETE ${template}`, `relent DELETE ${template}`]);
    const attempt = otel.spans.getFinishedSpans()[0]!;
    expect(attempt.attributes['url.full']).toBe(`https://api.example.com:443${template}`);
    expect(attempt.attributes['url.template']).toBe(template);
    expect(attempt.attributes['server.port']).toBe(443);
    expect(attempt.attributes['server.address']).toBe('api.example.com');
  });

  it('error classes and terminal reasons become error.type', async () => {
    const clock = createTestClock();
    const op = () => Promise.reject(Object.assign(new Error('boom'), { code: 'ECONNREFUSED' }));
    await drive(clock, () => execute(op, { policy: { maxAttempts: 2, backoff }, clock, method: 'GET', endpoint: 'http://localhost:9/x', instrumentation }));
    const all = otel.spans.getFinishedSpans();
    const opSpan = all.find((s) => s.name === 'relent GET')!;
    expect(opSpan.attributes['error.type']).toBe('max_attempts');
    expect(opSpan.status).toEqual({ code: SpanStatusCode.ERROR, message: 'max_attempts' });
    const attempts = childrenOf(all, opSpan);
    expect(attempts.map((s) => s.attributes['error.type'])).toEqual(['connect_refused', 'connect_refused']);
    expect(attempts[0]!.attributes['server.port']).toBe(9);
    // Exceptions are not recorded: their messages may hold anything.
    expect(all.flatMap((s) => s.events)).toEqual([]);
  });

  it('an operation the breaker refuses has an operation span and no call span', async () => {
    const clock = createTestClock();
    const breaker = createCircuitBreaker({ minimumThroughput: 1 }, { onStateChange: instrumentation.onBreakerStateChange, name: 'https://api.example.com' });
    await execute(async () => ({ status: 500 }), { policy: { maxAttempts: 1 }, clock, breaker });
    otel.spans.reset();
    await execute(async () => ({ status: 200 }), { clock, breaker, method: 'GET', endpoint: 'https://api.example.com/', instrumentation });
    const all = otel.spans.getFinishedSpans();
    expect(all).toHaveLength(1);
    expect(all[0]!.attributes).toMatchObject({ 'relent.terminal_reason': 'circuit_open', 'relent.attempts': 0, 'error.type': 'circuit_open' });
    const changes = points(await otel.metrics(), OTEL_METRICS.breakerStateChanges);
    expect(changes.map((p) => [p.attributes, p.value])).toContainEqual([
      {
        'relent.breaker.name': 'https://api.example.com',
        'relent.breaker.from': 'closed',
        'relent.breaker.to': 'open',
        'relent.breaker.reason': 'failure_ratio',
      },
      1,
    ]);
  });

  it('a plain function (no method) gets INTERNAL spans without HTTP attributes', async () => {
    const clock = createTestClock();
    await drive(clock, () => run(async () => 'ok', { clock, instrumentation }));
    const [attempt, op] = otel.spans.getFinishedSpans();
    expect([attempt!.name, op!.name]).toEqual(['relent attempt', 'relent operation']);
    expect(attempt!.kind).toBe(SpanKind.INTERNAL);
    expect(Object.keys(attempt!.attributes).filter((k) => k.startsWith('http.') || k.startsWith('url.') || k.startsWith('server.'))).toEqual([
      'http.response.status_code',
    ]);
  });

  it('tracing off: the call runs directly and no span is made', async () => {
    const clock = createTestClock();
    const metricsOnly = createOtelInstrumentation({ tracing: false, meterProvider: otel.meterProvider });
    await drive(clock, () => run(async () => ({ status: 200 }), { clock, instrumentation: metricsOnly }));
    expect(otel.spans.getFinishedSpans()).toEqual([]);
  });
});

describe('relent/otel metrics', () => {
  it('count calls, operations by terminal reason, calls per operation and retry outcomes, with no ids as attributes', async () => {
    const o = setupOtel();
    const inst = createOtelInstrumentation({ tracerProvider: o.tracerProvider, meterProvider: o.meterProvider });
    const clock = createTestClock();
    const endpoint = 'https://api.example.com/v1/items';
    const ids: string[] = [];
    const statuses = [503, 200, 503, 503, 503];
    let i = 0;
    const op = async () => ({ status: statuses[i++]! });
    // Operation 1: 503, 200 (a retry that succeeded). Operation 2: 503 ×3 (max_attempts; retries that failed).
    for (let k = 0; k < 2; k++) {
      const r = await drive(clock, () => execute(op, { policy: { backoff }, clock, method: 'GET', endpoint, instrumentation: inst }));
      ids.push(r.operationId);
    }
    const ms = await o.metrics();
    const base = { 'http.request.method': 'GET', 'server.address': 'api.example.com', 'server.port': 443 };

    const attempts = points(ms, OTEL_METRICS.attempts).map((p) => [p.attributes, p.value]);
    expect(attempts).toEqual(
      expect.arrayContaining([
        [{ ...base, 'http.response.status_code': 503, 'error.type': '503', 'relent.decision': 'retry' }, 3],
        [{ ...base, 'http.response.status_code': 503, 'error.type': '503', 'relent.decision': 'max_attempts' }, 1],
        [{ ...base, 'http.response.status_code': 200, 'relent.decision': 'return' }, 1],
      ]),
    );
    expect(attempts).toHaveLength(3);

    const ops = points(ms, OTEL_METRICS.operations).map((p) => [p.attributes, p.value]);
    expect(ops).toEqual(
      expect.arrayContaining([
        [{ ...base, 'relent.terminal_reason': 'return', 'relent.retried': true }, 1],
        [{ ...base, 'relent.terminal_reason': 'max_attempts', 'relent.retried': true }, 1],
      ]),
    );

    const retries = points(ms, OTEL_METRICS.retries).map((p) => [p.attributes, p.value]);
    expect(retries).toEqual(
      expect.arrayContaining([
        [{ ...base, 'relent.retry.outcome': 'success' }, 1],
        [{ ...base, 'relent.retry.outcome': 'failure' }, 2],
      ]),
    );

    const hist = points(ms, OTEL_METRICS.operationAttempts);
    const byReason = Object.fromEntries(hist.map((p) => [p.attributes['relent.terminal_reason'], p.value as { count: number; sum: number }]));
    expect(byReason.return).toMatchObject({ count: 1, sum: 2 });
    expect(byReason.max_attempts).toMatchObject({ count: 1, sum: 3 });

    expect(points(ms, OTEL_METRICS.attemptDuration).length).toBeGreaterThan(0);

    // R14: no identifier or URL is a metric attribute.
    const allowed = new Set([
      'http.request.method',
      'server.address',
      'server.port',
      'http.response.status_code',
      'error.type',
      'relent.decision',
      'relent.terminal_reason',
      'relent.retried',
      'relent.retry.outcome',
    ]);
    for (const m of ms) {
      for (const p of m.dataPoints) {
        for (const [k, v] of Object.entries(p.attributes)) {
          expect(allowed.has(k), `${m.descriptor.name}: ${k}`).toBe(true);
          for (const id of ids) expect(String(v)).not.toContain(id);
        }
      }
    }
    await o.shutdown();
  });
});
