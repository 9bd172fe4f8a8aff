import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { createCircuitBreaker } from '../../src/core/breaker.js';
import { RelentError } from '../../src/core/errors.js';
import { createBulkhead } from '../../src/run/bulkhead.js';
import { execute, type AttemptContext, type RelentEvent } from '../../src/run/run.js';
import { publishBreakerChange, publishEvent } from '../../src/telemetry/diagnostics.js';
import { normalizeEndpoint } from '../../src/telemetry/endpoint.js';
import { createOtelInstrumentation } from '../../src/telemetry/otel.js';
import { combineSinks, createConsoleSink } from '../../src/telemetry/sinks.js';
import { createTestClock } from '../../src/testing/index.js';
import { setupOtel } from './otel-helpers.js';

/**
 * R14 as a property: secrets planted in the query string, the userinfo, the fragment,
 * the path (behind a route template), Authorization / Cookie headers and bodies never
 * reach any sink: console lines (human and JSON), diagnostics_channel messages, spans,
 * metrics, the events themselves, or the errors relent makes.
 */
const otel = setupOtel();
const instrumentation = createOtelInstrumentation({ tracerProvider: otel.tracerProvider, meterProvider: otel.meterProvider });
afterAll(() => otel.shutdown());

type Step = { status: number; retryAfter: string | null } | { code: string };
const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ status: fc.constantFrom(200, 201, 204, 400, 401, 404, 408, 429, 500, 502, 503, 504), retryAfter: fc.constantFrom(null, '0', '1', 'soon') }),
  fc.record({ code: fc.constantFrom('ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'UND_ERR_HEADERS_TIMEOUT', 'WHATEVER') }),
);
const secretArb = fc.stringMatching(/^[A-Za-z0-9]{12,24}$/).map((s) => `Zx9${s}`);

describe('no secret reaches any sink (R14)', () => {
  it('property', async () => {
    const channelMessages: unknown[] = [];
    const onMessage = (m: unknown) => channelMessages.push(m);
    for (const ch of ['relent:attempt', 'relent:result', 'relent:breaker']) subscribe(ch, onMessage);
    try {
      await fc.assert(
        fc.asyncProperty(
          secretArb,
          fc.constantFrom('query', 'userinfo', 'user', 'fragment', 'path', 'header', 'cookie', 'body'),
          fc.constantFrom('GET', 'POST', 'PUT'),
          fc.array(step, { minLength: 1, maxLength: 5 }),
          fc.boolean(),
          fc.boolean(),
          async (secret, where, method, steps, withTemplate, useBreaker) => {
            channelMessages.length = 0;
            otel.spans.reset();
            const clock = createTestClock();
            const user = where === 'userinfo' ? `user:${secret}@` : where === 'user' ? `${secret}@` : '';
            const path = where === 'path' ? `/users/${secret}` : '/users/42';
            const query = where === 'query' ? `?token=${secret}&page=2` : '?page=2';
            const fragment = where === 'fragment' ? `#${secret}` : '';
            const url = `https://${user}api.example.com${path}${query}${fragment}`;
            // The HTTP client normalises endpoints (path secrets need a route template, as documented).
            const endpoint = normalizeEndpoint(url, where === 'path' || withTemplate ? '/users/{id}' : undefined);

            const headers = new Headers({ 'content-type': 'application/json' });
            if (where === 'header') headers.set('authorization', `Bearer ${secret}`);
            if (where === 'cookie') headers.set('set-cookie', `sid=${secret}; HttpOnly`);
            const body = where === 'body' ? JSON.stringify({ password: secret }) : '{}';
            let i = 0;
            const op = async (_ctx: AttemptContext) => {
              const s = steps[Math.min(i++, steps.length - 1)]!;
              if ('code' in s) throw Object.assign(new Error(`request to ${url} failed with body ${body}`), { code: s.code, headers });
              const h = new Headers(headers);
              if (s.retryAfter !== null) h.set('retry-after', s.retryAfter);
              return { status: s.status, headers: h, body, url };
            };

            const lines: string[] = [];
            const events: RelentEvent[] = [];
            const onEvent = combineSinks<RelentEvent>(
              createConsoleSink({ write: (l) => lines.push(l) }),
              createConsoleSink({ write: (l) => lines.push(l), format: 'json' }),
              publishEvent,
              (e) => events.push(e),
            );
            const breaker = useBreaker
              ? createCircuitBreaker(
                  { minimumThroughput: 1 },
                  {
                    name: normalizeEndpoint(url).replace(/\/users.*/, ''),
                    onStateChange: combineSinks(publishBreakerChange, instrumentation.onBreakerStateChange),
                  },
                )
              : null;
            const p = execute(op, {
              policy: { maxAttempts: 4, deadlineMs: 60_000, backoff: { kind: 'constant', delayMs: 5 } },
              clock,
              method,
              endpoint,
              idempotencyKey: method === 'POST' ? 'key-1' : undefined,
              onEvent,
              instrumentation,
              breaker,
              bulkhead: createBulkhead({ maxConcurrent: 1 }),
            });
            await clock.runAll();
            const r = await p;

            const ms = await otel.metrics();
            const spans = otel.spans.getFinishedSpans().map((s) => ({ name: s.name, attributes: s.attributes, status: s.status, events: s.events }));
            const outputs: [string, string][] = [
              ['console', lines.join('\n')],
              ['events', JSON.stringify(events)],
              ['diagnostics_channel', JSON.stringify(channelMessages)],
              ['spans', JSON.stringify(spans)],
              ['metrics', JSON.stringify(ms.map((m) => ({ name: m.descriptor.name, attributes: m.dataPoints.map((d) => d.attributes) })))],
            ];
            // An error relent made itself (not the operation's own error, which the caller threw).
            if (!r.outcome.ok && RelentError.is(r.outcome.error)) outputs.push(['relent error', r.outcome.error.message]);
            for (const [sink, text] of outputs) {
              expect(text.includes(secret), `${where} secret leaked into ${sink}: ${text}`).toBe(false);
            }
            expect(lines.length).toBeGreaterThan(0);
            expect(spans.length).toBeGreaterThan(0);
          },
        ),
        { numRuns: 150 },
      );
    } finally {
      for (const ch of ['relent:attempt', 'relent:result', 'relent:breaker']) unsubscribe(ch, onMessage);
    }
  });
});
