// Real loopback servers for the rtb tests: partners on node:http port 0 that log every
// request (arrival time, tmax, when the exchange hung up), and an exchange in front of them.
import http from 'node:http';
import type net from 'node:net';
import { Agent, request } from 'undici';
import type { AuctionSummary, Exchange, ExchangeOptions } from '../../src/rtb/exchange.js';
import { createExchange } from '../../src/rtb/exchange.js';
import type { ExchangeConfig, PartnerConfig } from '../../src/rtb/config.js';
import type { RelentEvent } from '../../src/run/run.js';

export interface PartnerSeen {
  /** performance.now() when the request head arrived. */
  readonly at: number;
  readonly body: Record<string, unknown> | null;
  readonly tmax: number | null;
  /** performance.now() when the exchange closed the connection while the request was unanswered. */
  closedAt: number | null;
}

export type PartnerReply = (req: http.IncomingMessage, res: http.ServerResponse, n: number, seen: PartnerSeen) => void;

export interface TestPartner {
  readonly url: string;
  readonly port: number;
  readonly seen: PartnerSeen[];
  reply: PartnerReply;
  close(): Promise<void>;
}

/** A partner whose `reply` decides each answer; every request is logged first. */
export async function startPartner(reply: PartnerReply): Promise<TestPartner> {
  const seen: PartnerSeen[] = [];
  const sockets = new Set<net.Socket>();
  const state = { reply };
  let n = 0;
  const server = http.createServer((req, res) => {
    const at = performance.now();
    const k = ++n;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: Record<string, unknown> | null = null;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
      } catch {
        body = null;
      }
      const s: PartnerSeen = { at, body, tmax: typeof body?.tmax === 'number' ? body.tmax : null, closedAt: null };
      seen.push(s);
      res.on('close', () => {
        if (!res.writableFinished) s.closedAt = performance.now();
      });
      state.reply(req, res, k, s);
    });
  });
  server.keepAliveTimeout = 10_000;
  server.on('connection', (s: net.Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/bid`,
    port,
    seen,
    get reply() {
      return state.reply;
    },
    set reply(r: PartnerReply) {
      state.reply = r;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A bid response with one bid per impression of the request. */
export function bidBody(seen: PartnerSeen, price: number, extra: Record<string, unknown> = {}): string {
  const imps = (seen.body?.imp as { id: string }[] | undefined) ?? [];
  return JSON.stringify({
    id: seen.body?.id,
    bidid: 'resp-1',
    seatbid: [{ seat: 'seat-1', bid: imps.map((imp, i) => ({ id: `b${i}`, impid: imp.id, price, adm: '<ad price="${AUCTION_PRICE}"/>', ...extra })) }],
  });
}

export function answer(res: http.ServerResponse, status: number, body?: string): void {
  if (body === undefined) {
    res.writeHead(status);
    res.end();
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) });
  res.end(body);
}

/** After `ms`, answer with a bid at `price`. */
export function bidAfter(ms: number, price: number): PartnerReply {
  return (_req, res, _n, s) => {
    setTimeout(() => answer(res, 200, bidBody(s, price)), ms);
  };
}

/** Never answers (until the exchange hangs up). */
export const hang: PartnerReply = () => {};

export function partnerConfig(name: string, url: string, over: Partial<PartnerConfig> = {}): PartnerConfig {
  return { name, url, timeoutMs: 150, maxConcurrency: 50, lateGraceMs: 0, breaker: false, ...over };
}

export interface TestExchange {
  readonly exchange: Exchange;
  readonly url: string;
  readonly origin: string;
  readonly summaries: AuctionSummary[];
  readonly events: RelentEvent[];
  close(): Promise<void>;
}

export async function startExchange(config: ExchangeConfig, options: ExchangeOptions = {}): Promise<TestExchange> {
  const summaries: AuctionSummary[] = [];
  const events: RelentEvent[] = [];
  const exchange = createExchange(config, {
    onAuction: (s) => summaries.push(s),
    onEvent: (e) => events.push(e),
    ...options,
  });
  const info = await exchange.listen(0, '127.0.0.1');
  return {
    exchange,
    url: info.url,
    origin: `http://127.0.0.1:${info.port}`,
    summaries,
    events,
    close: () => exchange.close({ force: true, noticeDrainMs: 0 }),
  };
}

const client = new Agent({ connections: 64, keepAliveTimeout: 5_000 });

export interface Answer {
  readonly status: number;
  readonly body: string;
  readonly json: Record<string, unknown> | null;
  readonly headers: Record<string, string | string[] | undefined>;
  /** Send → body read, ms. */
  readonly ms: number;
}

/** POSTs a bid request (an object is JSON-encoded; a string is sent as it is). */
export async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const t0 = performance.now();
  const res = await request(url, {
    method: 'POST',
    dispatcher: client,
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
  const text = await res.body.text();
  const ms = performance.now() - t0;
  let json: Record<string, unknown> | null = null;
  try {
    json = text ? (JSON.parse(text) as Record<string, unknown>) : null;
  } catch {
    json = null;
  }
  return { status: res.statusCode, body: text, json, headers: res.headers, ms };
}

let seq = 0;
/** A valid bid request. */
export function bidRequest(over: Record<string, unknown> = {}): Record<string, unknown> {
  return { id: `req-${++seq}`, imp: [{ id: '1', bidfloor: 0.5 }], tmax: 300, site: { publisher: { id: 'pub-1' } }, ...over };
}

/** Waits (a macrotask at a time, no timer: usable on a test clock) until a real socket event has happened. */
export async function untilSocket(what: string, cond: () => boolean): Promise<void> {
  for (let i = 0; !cond(); i++) {
    if (i > 200_000) throw new Error(`never happened: ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Partner-config defaults for an exchange whose auction is long enough for loaded CI machines. */
export function exchangeConfig(partners: PartnerConfig[], over: Partial<ExchangeConfig> = {}): ExchangeConfig {
  return { auctionTimeoutMs: 250, reserveMs: 20, partners, notices: { win: 'source', billing: 'source' }, ...over };
}
