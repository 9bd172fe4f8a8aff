// OpenTelemetry from every driver, checked with the SDK's in-memory exporters: the HTTP
// client, the undici interceptor, an auction (a span with a child per partner call) and a
// delivery batch; attempt spans carry requestId, attempt, remainingMs and the HTTP
// semantic-convention names; metrics carry no ids.
import { SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { MetricData } from '@opentelemetry/sdk-metrics';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { Agent, request, type Dispatcher } from 'undici';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDeliveryQueue } from '../../src/delivery/queue.js';
import type { DeliveryRequest, TransportResult } from '../../src/delivery/transport.js';
import { createClient } from '../../src/http/client.js';
import { relentInterceptor } from '../../src/http/interceptor.js';
import { OTEL_METRICS, createOtelInstrumentation } from '../../src/telemetry/otel.js';
import { createSeededRandom, createTestClock } from '../../src/testing/index.js';
import { startServer, type TestServer } from '../http/helpers.js';
import { answer, bidAfter, bidBody, bidRequest, exchangeConfig, partnerConfig, startExchange, startPartner } from '../rtb/helpers.js';
import { points, setupOtel } from './otel-helpers.js';

// One SDK setup for the file: it registers the global context manager, which a second setup's shutdown would disable.
const otel = setupOtel();
const instrumentation = createOtelInstrumentation({ tracerProvider: otel.tracerProvider, meterProvider: otel.meterProvider });
const open: { close(): Promise<void> }[] = [];
const track = <T extends { close(): Promise<void> }>(x: T): T => {
  open.push(x);
  return x;
};
afterAll(() => otel.shutdown());
beforeEach(() => otel.spans.reset());
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

/** Every id the tests saw (operation, request, auction, batch ids): none may be a metric attribute. */
const seenIds: string[] = [];
const childrenOf = (all: readonly ReadableSpan[], parent: ReadableSpan) => all.filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId);
const flaky = (n: number) => (_q: unknown, res: { writeHead(s: number): void; end(b?: string): void }, k: number) => {
  res.writeHead(k <= n ? 503 : 200);
  res.end(k <= n ? 'busy' : 'ok');
};

/** The attempt spans' checks every driver passes: names, kinds, ids, times, semantic conventions. */
function expectAttemptSpans(attempts: readonly ReadableSpan[], opId: string, opts: { url: string; port: number; statuses: number[] }) {
  expect(attempts.map((s) => s.kind)).toEqual(attempts.map(() => SpanKind.CLIENT));
  expect(attempts.map((s) => s.attributes['relent.attempt'])).toEqual(attempts.map((_s, i) => i + 1));
  expect(attempts.map((s) => s.attributes['http.request.resend_count'])).toEqual(attempts.map((_s, i) => (i === 0 ? undefined : i)));
  expect(attempts.map((s) => s.attributes['relent.request_id'])).toEqual(attempts.map((_s, i) => `${opId}/attempt-${i + 1}`));
  expect(attempts.map((s) => s.attributes['http.response.status_code'])).toEqual(opts.statuses);
  const remaining = attempts.map((s) => s.attributes['relent.remaining_ms'] as number);
  for (const r of remaining) expect(typeof r).toBe('number');
  for (let i = 1; i < remaining.length; i++) expect(remaining[i]!).toBeLessThan(remaining[i - 1]!); // time passes between attempts
  for (const s of attempts) {
    expect(s.attributes).toMatchObject({
      'http.request.method': expect.any(String),
      'server.address': '127.0.0.1',
      'server.port': opts.port,
      'url.full': opts.url,
    });
    expect(typeof s.attributes['relent.timeout_ms']).toBe('number');
  }
}

/** R14: metric attributes hold only closed vocabularies, never an id. */
function expectNoIdsInMetrics(ms: MetricData[], ids: string[]) {
  const allowed = new Set([
    'http.request.method',
    'server.address',
    'server.port',
    'http.response.status_code',
    'error.type',
    'relent.driver',
    'relent.decision',
    'relent.terminal_reason',
    'relent.retried',
    'relent.retry.outcome',
  ]);
  expect(ms.length).toBeGreaterThan(0);
  for (const m of ms) {
    for (const p of m.dataPoints) {
      for (const [k, v] of Object.entries(p.attributes)) {
        expect(allowed.has(k), `${m.descriptor.name}: ${k}`).toBe(true);
        for (const id of ids) expect(String(v)).not.toContain(id);
      }
    }
  }
}

describe('client.fetch', () => {
  it('an operation span (relent.driver client.fetch) and an attempt span per call, the call made inside it', async () => {
    const s: TestServer = track(await startServer(flaky(1)));
    const client = track(createClient({ instrumentation, policy: { backoff: { kind: 'constant', delayMs: 5 } } }));
    const res = await client.fetch(`${s.url}items?token=secret`, { operationId: 'op-fetch-1' });
    expect(await res.text()).toBe('ok');

    const all = otel.spans.getFinishedSpans();
    const op = all.find((x) => x.name === 'relent GET')!;
    expect(op.attributes).toMatchObject({
      'relent.driver': 'client.fetch',
      'relent.operation.id': 'op-fetch-1',
      'relent.terminal_reason': 'return',
      'relent.attempts': 2,
    });
    const attempts = childrenOf(all, op);
    expect(attempts.map((x) => x.name)).toEqual(['GET', 'GET']);
    expectAttemptSpans(attempts, 'op-fetch-1', { url: `${s.origin.replace('127.0.0.1', '127.0.0.1')}/items`, port: s.port, statuses: [503, 200] });
    expect(JSON.stringify(all.map((x) => x.attributes))).not.toContain('secret');

    const ms = await otel.metrics();
    const calls = points(ms, OTEL_METRICS.attempts).filter((p) => p.attributes['relent.driver'] === 'client.fetch');
    expect(calls.reduce((n, p) => n + (p.value as number), 0)).toBe(2);
    expectNoIdsInMetrics(ms, ['op-fetch-1', 'secret']);
  });
});

describe('the undici interceptor', () => {
  it('the same spans through undici.request, the attempt span active while undici sends', async () => {
    const s: TestServer = track(await startServer(flaky(2)));
    // An interceptor inside relent's (compose runs the last one listed first): it sees each attempt's dispatch.
    const activeAtDispatch: (string | undefined)[] = [];
    const recorder =
      (dispatch: Dispatcher['dispatch']): Dispatcher['dispatch'] =>
      (opts, handler) => {
        activeAtDispatch.push(trace.getActiveSpan()?.spanContext().spanId);
        return dispatch(opts, handler);
      };
    const agent = track(new Agent().compose(recorder, relentInterceptor({ instrumentation, policy: { backoff: { kind: 'constant', delayMs: 5 } } })));
    const r = await request(`${s.url}x?k=v`, { dispatcher: agent, relent: { operationId: 'op-int-1' } } as Parameters<typeof request>[1]);
    await r.body.text();
    expect(r.statusCode).toBe(200);
    const all = otel.spans.getFinishedSpans();
    const op = all.find((x) => x.name === 'relent GET' && x.attributes['relent.operation.id'] === 'op-int-1')!;
    expect(op.attributes['relent.driver']).toBe('interceptor');
    const attempts = childrenOf(all, op);
    expectAttemptSpans(attempts, 'op-int-1', { url: `${s.origin}/x`, port: s.port, statuses: [503, 503, 200] });
    expect(attempts.map((x) => x.attributes['error.type'])).toEqual(['503', '503', undefined]);
    expect(activeAtDispatch).toEqual(attempts.map((x) => x.spanContext().spanId));
  });
});

describe('an auction', () => {
  it('a span per auction, a child span per partner call (each with its attempt spans), the outcome on the auction span', async () => {
    const bidder = track(await startPartner(bidAfter(5, 2)));
    const noBid = track(await startPartner((_q, res) => answer(res, 204)));
    const flakyBidder = track(await startPartner((_q, res, n, seen) => (n === 1 ? answer(res, 503) : answer(res, 200, bidBody(seen, 1)))));
    // Time enough on a loaded machine: every partner answers before the auction's deadline.
    const ex = track(
      await startExchange(
        exchangeConfig(
          [
            partnerConfig('alpha', bidder.url, { timeoutMs: 1500 }),
            partnerConfig('beta', noBid.url, { timeoutMs: 1500 }),
            partnerConfig('gamma', flakyBidder.url, { timeoutMs: 1500, preSendRetries: 1 }),
          ],
          { auctionTimeoutMs: 2000 },
        ),
        { instrumentation },
      ),
    );
    otel.spans.reset();
    const outcome = await ex.exchange.auction(bidRequest({ tmax: 3000 }));
    expect(outcome.status).toBe(200);
    seenIds.push(outcome.summary.auctionId);

    const all = otel.spans.getFinishedSpans();
    const auction = all.find((x) => x.name === 'relent auction' && x.attributes['relent.auction.id'] === outcome.summary.auctionId)!;
    expect(auction).toBeDefined();
    expect(auction.attributes).toMatchObject({
      'relent.auction.status': 200,
      'relent.auction.reason': 'bids',
      'relent.auction.partners.asked': 3,
      'relent.auction.partners.bid': 2,
      'relent.auction.partners.no_bid': 1,
      'relent.auction.imps': 1,
      'relent.auction.bids.won': 1,
    });
    expect(auction.status.code).not.toBe(SpanStatusCode.ERROR);
    const calls = childrenOf(all, auction);
    expect(calls.map((x) => x.attributes['relent.partner']).sort()).toEqual(['alpha', 'beta', 'gamma']);
    for (const c of calls) {
      expect(c.name).toBe('relent POST');
      expect(c.attributes['relent.driver']).toBe('exchange.partner');
      expect(c.attributes['relent.operation.id']).toBe(`${outcome.summary.auctionId}/${c.attributes['relent.partner']}`);
      const attempts = childrenOf(all, c);
      expect(attempts.length).toBeGreaterThanOrEqual(1);
      expect(attempts[0]!.attributes['relent.request_id']).toBe(`${c.attributes['relent.operation.id']}/attempt-1`);
      expect(attempts[0]!.kind).toBe(SpanKind.CLIENT);
    }
    // The partner call spans lie within the auction span.
    const t = (x: ReadableSpan) => x.startTime[0] * 1e9 + x.startTime[1];
    for (const c of calls) expect(t(c)).toBeGreaterThanOrEqual(t(auction));
  });
});

describe('a delivery batch', () => {
  it('a span per batch delivery (destination, batch id, items, round) with the attempt span under it; the transport runs inside it', async () => {
    const clock = createTestClock();
    const activeDuringSend: (string | undefined)[] = [];
    let n = 0;
    const transport = async (_req: DeliveryRequest): Promise<TransportResult> => {
      activeDuringSend.push(trace.getActiveSpan()?.spanContext().spanId);
      return { status: ++n === 1 ? 503 : 200 };
    };
    const queue = await openDeliveryQueue({
      store: 'sqlite::memory:',
      clock,
      destinations: { adobe: { url: 'https://dest.example/in?key=secret', policy: 'adobe-best-effort', batch: { maxItems: 5, maxAgeMs: 0 } } },
    });
    const worker = queue.createWorker({ clock, random: createSeededRandom(1), transport, pollMs: 1_000, instrumentation });
    worker.start();
    await queue.enqueueMany(
      'adobe',
      [1, 2, 3].map((i) => ({ key: `k${i}`, payload: { i } })),
    );
    await clock.advanceAsync(60_000);
    await worker.stop();
    await queue.close();

    const all = otel.spans.getFinishedSpans();
    const batches = all.filter((x) => x.name === 'relent delivery batch');
    expect(batches).toHaveLength(2); // 503 → stored for 15 s (this delivery ends as a deferral), then 200
    const key = batches[0]!.attributes['relent.operation.id'] as string;
    seenIds.push(key);
    expect(key).toMatch(/^rb-/);
    expect(
      batches.map((b) => [
        b.attributes['relent.driver'],
        b.attributes['relent.delivery.destination'],
        b.attributes['relent.delivery.items'],
        b.attributes['relent.terminal_reason'],
      ]),
    ).toEqual([
      ['delivery', 'adobe', 3, 'defer'],
      ['delivery', 'adobe', 3, 'return'],
    ]);
    expect(typeof batches[0]!.attributes['relent.delivery.batch_id']).toBe('number');
    const attempts = batches.map((b) => childrenOf(all, b));
    expect(attempts.map((a) => a.length)).toEqual([1, 1]);
    const [a1, a2] = [attempts[0]![0]!, attempts[1]![0]!];
    expect([a1.name, a1.kind, a1.attributes['relent.attempt'], a1.attributes['http.request.resend_count'], a1.attributes['http.response.status_code']]).toEqual(
      ['POST', SpanKind.CLIENT, 1, undefined, 503],
    );
    expect([a2.attributes['relent.attempt'], a2.attributes['http.request.resend_count'], a2.attributes['http.response.status_code']]).toEqual([2, 1, 200]);
    expect(a1.attributes['relent.request_id']).toBe(`${key}/attempt-1`);
    expect([a1.attributes['url.full'], a1.attributes['server.address'], a1.attributes['server.port']]).toEqual([
      'https://dest.example/in',
      'dest.example',
      443,
    ]);
    expect(a2.attributes['relent.remaining_ms'] as number).toBeLessThan(a1.attributes['relent.remaining_ms'] as number);
    expect(activeDuringSend).toEqual([a1.spanContext().spanId, a2.spanContext().spanId]);
    expect(JSON.stringify(all.map((x) => x.attributes))).not.toContain('secret');

    const ms = await otel.metrics();
    const calls = points(ms, OTEL_METRICS.attempts).filter((p) => p.attributes['relent.driver'] === 'delivery');
    expect(calls.map((p) => [p.attributes['http.response.status_code'], p.value])).toEqual([
      [503, 1],
      [200, 1],
    ]);
    expectNoIdsInMetrics(ms, [key, 'secret']);
  });
});

describe('metrics from every driver', () => {
  it('count calls by driver, with no id among their attributes', async () => {
    const ms = await otel.metrics();
    const drivers = new Set(points(ms, OTEL_METRICS.attempts).map((p) => p.attributes['relent.driver']));
    expect([...drivers].sort()).toEqual(['client.fetch', 'delivery', 'exchange.partner', 'interceptor']);
    expect(points(ms, OTEL_METRICS.operations).length).toBeGreaterThan(0);
    expectNoIdsInMetrics(ms, [...seenIds, 'op-fetch-1', 'op-int-1', '/attempt-', 'rb-']);
  });
});
