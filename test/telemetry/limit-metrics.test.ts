// Metrics of adaptive concurrency limits (relent/otel createLimitMetrics), read with the
// OpenTelemetry SDK's in-memory exporter: a client's limit per origin and an exchange's
// partner limits (limit, in flight, queued; changes by cause), against real loopback servers.
import http from 'node:http';
import type net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createClient } from '../../src/http/client.js';
import { createExchange } from '../../src/rtb/exchange.js';
import { createLimitMetrics, LIMIT_METRICS } from '../../src/telemetry/otel.js';
import { points, setupOtel } from './otel-helpers.js';

let otel: ReturnType<typeof setupOtel> | null = null;
const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
  await otel?.shutdown();
  otel = null;
});

type Point = { attributes: Record<string, unknown>; value: unknown };
const value = (ps: Point[], attrs: Record<string, unknown>): unknown => ps.find((p) => Object.entries(attrs).every(([k, v]) => p.attributes[k] === v))?.value;

/** A server answering `status()` (a bid for the exchange's requests when 200). */
async function server(status: () => number): Promise<string> {
  const s = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const st = status();
      if (st !== 200) return void res.writeHead(st, { 'content-length': '0' }).end();
      const id = /"id":"([^"]+)"/.exec(Buffer.concat(chunks).toString())?.[1];
      const body = id === undefined ? 'ok' : JSON.stringify({ id, seatbid: [{ seat: 's', bid: [{ id: 'b', impid: '1', price: 1, adm: '<ad/>' }] }] });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) }).end(body);
    });
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  cleanup.push(
    () =>
      new Promise<void>((r) => {
        s.closeAllConnections();
        s.close(() => r());
      }),
  );
  return `http://127.0.0.1:${(s.address() as net.AddressInfo).port}/x`;
}

describe('adaptive concurrency limit metrics', () => {
  it("a client: limit, in flight and queued per origin (gauges), and a 503's decrease counted by cause", async () => {
    otel = setupOtel();
    let status = 200;
    const url = await server(() => status);
    const origin = new URL(url).origin;
    // eslint-disable-next-line prefer-const
    let client: ReturnType<typeof createClient>;
    const m = createLimitMetrics(() => client.concurrencyLimits, { meterProvider: otel.meterProvider });
    client = createClient({ policy: { maxAttempts: 1 }, concurrencyLimit: { kind: 'aimd', initial: 8 }, onLimitEvent: m.onEvent });
    cleanup.push(() => client.close());
    await (await client.fetch(url)).arrayBuffer();
    let ms = await otel.metrics();
    expect(value(points(ms, LIMIT_METRICS.limit) as unknown as Point[], { 'relent.dependency': origin })).toBe(8);
    expect(value(points(ms, LIMIT_METRICS.inFlight) as unknown as Point[], { 'relent.dependency': origin })).toBe(0);
    expect(value(points(ms, LIMIT_METRICS.queued) as unknown as Point[], { 'relent.dependency': origin })).toBe(0);
    status = 503;
    await (await client.fetch(url)).arrayBuffer();
    ms = await otel.metrics();
    expect(value(points(ms, LIMIT_METRICS.limit) as unknown as Point[], { 'relent.dependency': origin })).toBe(4);
    expect(value(points(ms, LIMIT_METRICS.changes) as unknown as Point[], { 'relent.dependency': origin, 'relent.concurrency_limit.cause': 'decrease' })).toBe(
      1,
    );
    m.close();
  });

  it('an exchange: each partner with an adaptive limit (not those with the fixed cap), and its changes from onLimitChange', async () => {
    otel = setupOtel();
    let status = 200;
    const url = await server(() => status);
    const meterProvider = otel.meterProvider;
    let onLimitChange: ((e: { type: string; partner: string; cause: string }) => void) | null = null;
    const ex = createExchange(
      {
        auctionTimeoutMs: 200,
        reserveMs: 10,
        warmup: false,
        notices: { win: 'source', billing: 'source' },
        partners: [
          { name: 'adaptive', url, timeoutMs: 100, maxConcurrency: 12, breaker: false, concurrencyLimit: { kind: 'aimd' } },
          { name: 'fixed', url, timeoutMs: 100, maxConcurrency: 12, breaker: false },
        ],
      },
      { onLimitChange: (e) => onLimitChange?.(e) },
    );
    cleanup.push(() => ex.close({ force: true, noticeDrainMs: 0 }));
    const m = createLimitMetrics(ex, { meterProvider });
    onLimitChange = m.onEvent;
    status = 429;
    await ex.auction({ id: 'r1', imp: [{ id: '1' }], tmax: 300, site: { publisher: { id: 'p' } } });
    for (let i = 0; i < 100 && ex.stats().partners[0]!.inFlight > 0; i++) await new Promise((r) => setTimeout(r, 5));
    const ms = await otel.metrics();
    const limits = points(ms, LIMIT_METRICS.limit) as unknown as Point[];
    expect(value(limits, { 'relent.dependency': 'adaptive' })).toBe(6);
    expect(value(limits, { 'relent.dependency': 'fixed' })).toBeUndefined();
    expect(
      value(points(ms, LIMIT_METRICS.changes) as unknown as Point[], { 'relent.dependency': 'adaptive', 'relent.concurrency_limit.cause': 'decrease' }),
    ).toBe(1);
  });

  it('refuses a source that is not one', () => {
    expect(() => createLimitMetrics(5 as never)).toThrow(/`source`/);
  });
});
