import http from 'node:http';
import { headerSafe, listenOn, plain } from './http-util.js';
import { createSeededRandom } from '../core/random.js';
import type { Clock, Random } from '../core/types.js';
import { createIdempotencyCache, noticeKey, type IdempotencyCache } from '../shared/idempotency-cache.js';
import { clockOption, systemClock, systemRandom } from '../shared/clock.js';
import { resolveBidderConfig, type BidderConfig, type LatencySpec, type PriceSpec, type ResolvedBidderConfig } from './config-bidder.js';
import { formatDecimal } from './macros.js';
import { checkBidRequest, type BidRequest } from './model.js';

/** What the bidder did with one bid request. */
export type BidderBehaviour =
  | 'bid' // 200 with bids
  | 'no_bid' // 204
  | 'no_bid_nbr' // 200 with seatbid: [] and an nbr
  | 'shed' // 204 at once: over maxConcurrency (load shedding)
  | 'short_tmax' // 204 at once: tmax below minTmaxMs
  | 'bad_request' // 400: unparseable or missing required fields
  | 'error500'
  | 'reset'
  | 'hang'
  | 'malformed';

/** One request as the bidder saw it (for tests and demos). */
export interface BidderRequestInfo {
  /** The bidder's clock when the request head arrived. */
  readonly at: number;
  readonly behaviour: BidderBehaviour;
  readonly requestId: string | null;
  /** The tmax the request carried. */
  readonly tmax: number | null;
  /** For 400: the field that was wrong. */
  readonly field: string | null;
}

export interface BidderStats {
  readonly requests: number;
  readonly byBehaviour: Readonly<Record<BidderBehaviour, number>>;
  readonly bidsMade: number;
  readonly inFlight: number;
  readonly maxInFlight: number;
  /** Win and billing notices: unique events counted once, repeats, injected failures, malformed calls. */
  readonly wins: number;
  readonly winDuplicates: number;
  readonly billed: number;
  readonly billingDuplicates: number;
  /** Sum of the billed clearing prices (CPM). */
  readonly billedCpm: number;
  readonly noticeFailures: number;
  readonly noticeBadRequests: number;
}

export interface BidderOptions {
  /** Overrides the config's seed. */
  readonly random?: Random;
  readonly clock?: Clock;
  /** Called for each bid request once its behaviour is chosen. */
  readonly onRequest?: ((info: BidderRequestInfo) => void) | null;
}

export interface BidderListenInfo {
  readonly host: string;
  readonly port: number;
  /** The bid endpoint's URL. */
  readonly url: string;
  /** The base of the notice endpoints (`/notice/win`, `/notice/billing`). */
  readonly publicUrl: string;
}

export interface Bidder {
  readonly config: ResolvedBidderConfig;
  readonly handler: (req: http.IncomingMessage, res: http.ServerResponse) => void;
  listen(port?: number, host?: string): Promise<BidderListenInfo>;
  stats(): BidderStats;
  /** Stops the server; hanging requests are dropped. */
  close(): Promise<void>;
}

const WIN_PATH = '/notice/win';
const BILLING_PATH = '/notice/billing';

/**
 * A configurable DSP for testing exchanges: bids with a configured price and
 * latency, declines a configured share (204, or 200 with an nbr), fails on purpose
 * (500, connection resets, hangs, malformed JSON), sheds load with 204 and no nbr when
 * more than `maxConcurrency` requests are in flight, and answers 400 (naming the
 * field in `x-relent-reason`) to a request without the required fields. Its win and
 * billing notice endpoints are idempotent: each request id + impression id is counted
 * once (relent/delivery's bounded idempotency cache), repeats are answered alike.
 */
export function createBidder(config: BidderConfig = {}, options: BidderOptions = {}): Bidder {
  return new BidderImpl(resolveBidderConfig(config), options);
}

class BidderImpl implements Bidder {
  readonly config: ResolvedBidderConfig;
  private readonly random: Random;
  private readonly clock: Clock;
  private readonly onRequest: ((info: BidderRequestInfo) => void) | null;
  private readonly wins: IdempotencyCache;
  private readonly billings: IdempotencyCache;
  private server: http.Server | null = null;
  private publicUrl: string | null;
  private inFlight = 0;
  private maxInFlight = 0;
  private requests = 0;
  private bidsMade = 0;
  private seq = 0;
  private readonly byBehaviour: Record<BidderBehaviour, number> = {
    bid: 0,
    no_bid: 0,
    no_bid_nbr: 0,
    shed: 0,
    short_tmax: 0,
    bad_request: 0,
    error500: 0,
    reset: 0,
    hang: 0,
    malformed: 0,
  };
  private readonly notice = { wins: 0, winDuplicates: 0, billed: 0, billingDuplicates: 0, billedCpm: 0, noticeFailures: 0, noticeBadRequests: 0 };
  private readonly hanging = new Set<http.ServerResponse>();
  private readonly timers = new Set<() => void>();

  constructor(config: ResolvedBidderConfig, o: BidderOptions) {
    this.config = config;
    this.random = o.random ?? (config.seed !== null ? createSeededRandom(config.seed) : systemRandom);
    this.clock = clockOption(o.clock) ?? systemClock;
    this.onRequest = o.onRequest ?? null;
    this.publicUrl = config.publicUrl;
    const cache = { maxKeys: config.noticeMaxKeys, ttlMs: config.noticeTtlMs, clock: this.clock };
    this.wins = createIdempotencyCache(cache);
    this.billings = createIdempotencyCache(cache);
  }

  readonly handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    try {
      if (path === this.config.path) {
        if (req.method !== 'POST') return plain(res, 405, 'POST only\n', { allow: 'POST' });
        return this.bidRequest(req, res);
      }
      if (path === WIN_PATH || path === BILLING_PATH) return this.noticeRequest(req, res, path === WIN_PATH ? 'win' : 'billing', q < 0 ? '' : url.slice(q + 1));
      if (path === '/healthz') return plain(res, 200, 'ok\n');
      plain(res, 404, 'not found\n');
    } catch {
      if (!res.headersSent) plain(res, 500, 'internal error\n');
      else res.destroy();
    }
  };

  private report(at: number, behaviour: BidderBehaviour, request: BidRequest | null, field: string | null = null): void {
    this.byBehaviour[behaviour]++;
    if (this.onRequest !== null) {
      const tmax = request !== null && typeof request.tmax === 'number' ? request.tmax : null;
      try {
        this.onRequest({ at, behaviour, requestId: request?.id ?? null, tmax, field });
      } catch {
        // a listener's error changes nothing
      }
    }
  }

  private bidRequest(req: http.IncomingMessage, res: http.ServerResponse): void {
    const at = this.clock.now();
    this.requests++;
    if (this.inFlight >= this.config.maxConcurrency) {
      // Load shedding: decline at once, 204 without a body (so without nbr).
      req.resume();
      res.writeHead(204);
      res.end();
      this.report(at, 'shed', null);
      return;
    }
    this.inFlight++;
    if (this.inFlight > this.maxInFlight) this.maxInFlight = this.inFlight;
    let released = false;
    res.on('close', () => {
      if (released) return;
      released = true;
      this.inFlight--;
      this.hanging.delete(res);
    });
    const max = this.config.maxRequestBytes;
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > max) {
      res.writeHead(400, { 'content-length': '0', connection: 'close', 'x-relent-reason': 'too_large' });
      res.end(() => req.socket.destroy());
      this.report(at, 'bad_request', null, '(body)');
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    req.on('data', (c: Buffer) => {
      if (refused) return;
      size += c.length;
      if (size > max) {
        refused = true;
        req.pause();
        res.writeHead(400, { 'content-length': '0', connection: 'close', 'x-relent-reason': 'too_large' });
        res.end(() => req.socket.destroy());
        this.report(at, 'bad_request', null, '(body)');
        return;
      }
      chunks.push(c);
    });
    req.on('error', () => res.destroy());
    req.on('end', () => {
      if (refused) return;
      let value: unknown;
      try {
        value = JSON.parse(Buffer.concat(chunks, size).toString('utf8'));
      } catch {
        res.writeHead(400, { 'content-length': '0', 'x-relent-reason': '(body): not valid JSON' });
        res.end();
        this.report(at, 'bad_request', null, '(body)');
        return;
      }
      const check = checkBidRequest(value);
      if (!check.ok) {
        res.writeHead(400, { 'content-length': '0', 'x-relent-reason': headerSafe(`${check.field}: ${check.reason}`) });
        res.end();
        this.report(at, 'bad_request', null, check.field);
        return;
      }
      this.respond(check.request, res, at);
    });
  }

  private respond(request: BidRequest, res: http.ServerResponse, at: number): void {
    const cfg = this.config;
    if (cfg.minTmaxMs > 0 && typeof request.tmax === 'number' && request.tmax > 0 && request.tmax < cfg.minTmaxMs) {
      res.writeHead(204);
      res.end();
      this.report(at, 'short_tmax', request);
      return;
    }
    const f = cfg.failures;
    const u = this.random();
    let behaviour: BidderBehaviour;
    if (u < f.error500) behaviour = 'error500';
    else if (u < f.error500 + f.reset) behaviour = 'reset';
    else if (u < f.error500 + f.reset + f.hang) behaviour = 'hang';
    else if (u < f.error500 + f.reset + f.hang + f.malformed) behaviour = 'malformed';
    else if (cfg.noBidRate > 0 && this.random() < cfg.noBidRate) behaviour = this.random() < cfg.nbrShare ? 'no_bid_nbr' : 'no_bid';
    else behaviour = 'bid';
    let body: string | null = null;
    if (behaviour === 'bid') {
      body = this.bidResponse(request);
      if (body === null) behaviour = 'no_bid'; // every impression's floor is above our price
    }
    this.report(at, behaviour, request);
    if (behaviour === 'hang') {
      this.hanging.add(res);
      return;
    }
    const delay = Math.max(0, this.latency(cfg.latency) - (this.clock.now() - at));
    const send = (): void => {
      if (res.destroyed || res.writableEnded) return;
      switch (behaviour) {
        case 'error500':
          return plain(res, 500, 'injected failure\n');
        case 'reset':
          res.socket?.destroy();
          return;
        case 'malformed':
          return json(res, 200, '{"id": "not json');
        case 'no_bid':
          res.writeHead(204);
          res.end();
          return;
        case 'no_bid_nbr': {
          const codes = cfg.nbr;
          const nbr = codes[Math.min(codes.length - 1, Math.floor(this.random() * codes.length))]!;
          return json(res, 200, JSON.stringify({ id: request.id, seatbid: [], nbr }));
        }
        default:
          return json(res, 200, body!);
      }
    };
    if (delay < 1) send();
    else {
      let cancel: (() => void) | null = null;
      cancel = this.clock.setTimer(() => {
        this.timers.delete(cancel!);
        send();
      }, delay);
      this.timers.add(cancel);
    }
  }

  private bidResponse(request: BidRequest): string | null {
    const cfg = this.config;
    const base = this.publicUrl ?? `http://${cfg.host}:${cfg.port}`;
    const q = 'id=${AUCTION_ID}&imp=${AUCTION_IMP_ID}&price=${AUCTION_PRICE}&cur=${AUCTION_CURRENCY}&bid=${AUCTION_BID_ID}';
    const bids: Record<string, unknown>[] = [];
    for (const imp of request.imp) {
      const price = Number(formatDecimal(this.price(cfg.price)));
      if (!cfg.bidBelowFloor && price < (imp.bidfloor ?? 0)) continue;
      const n = ++this.seq;
      bids.push({
        id: `${cfg.name}-${n}`,
        impid: imp.id,
        price,
        adid: `${cfg.name}-ad`,
        crid: `${cfg.name}-creative`,
        adm: `<div class="relent-ad" data-seat="${cfg.seat}">${cfg.name}: \${AUCTION_PRICE} \${AUCTION_CURRENCY}</div>`,
        nurl: `${base}${WIN_PATH}?${q}`,
        burl: `${base}${BILLING_PATH}?${q}`,
      });
    }
    if (bids.length === 0) return null;
    this.bidsMade += bids.length;
    return JSON.stringify({ id: request.id, bidid: `${cfg.name}-r${this.seq}`, cur: cfg.currency, seatbid: [{ seat: cfg.seat, bid: bids }] });
  }

  private latency(l: LatencySpec): number {
    switch (l.kind) {
      case 'fixed':
        return l.ms;
      case 'uniform':
        return l.minMs + this.random() * (l.maxMs - l.minMs);
      case 'lognormal': {
        // Box–Muller; sigma from the ratio of p99 to the median (z99 = 2.3263).
        const u1 = Math.max(this.random(), 1e-12);
        const z = Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * this.random());
        const sigma = Math.log(l.p99Ms / l.medianMs) / 2.3263;
        return Math.min(600_000, l.medianMs * Math.exp(sigma * z));
      }
    }
  }

  private price(p: PriceSpec): number {
    return p.kind === 'fixed' ? p.cpm : p.min + this.random() * (p.max - p.min);
  }

  private noticeRequest(req: http.IncomingMessage, res: http.ServerResponse, kind: 'win' | 'billing', query: string): void {
    req.resume();
    if (req.method !== 'GET' && req.method !== 'POST') return plain(res, 405, 'GET or POST\n', { allow: 'GET, POST' });
    const params = new URLSearchParams(query);
    const id = params.get('id');
    const imp = params.get('imp');
    if (!id || !imp) {
      this.notice.noticeBadRequests++;
      return plain(res, 400, 'expected ?id=…&imp=…\n');
    }
    if (this.config.noticeFailureRate > 0 && this.random() < this.config.noticeFailureRate) {
      this.notice.noticeFailures++;
      return plain(res, 500, 'injected failure\n');
    }
    // The dedupe key is request id + impression id (OpenRTB 2.6 implementation guide §7.8: an idempotent receiver); a repeat is answered alike, counted once.
    const cache = kind === 'win' ? this.wins : this.billings;
    const key = noticeKey(id, imp);
    const b = cache.begin(key);
    if (b.state === 'new') {
      cache.complete(key, { status: 204 });
      if (kind === 'win') this.notice.wins++;
      else {
        this.notice.billed++;
        const price = Number(params.get('price'));
        if (Number.isFinite(price)) this.notice.billedCpm += price;
      }
    } else if (kind === 'win') this.notice.winDuplicates++;
    else this.notice.billingDuplicates++;
    res.writeHead(204);
    res.end();
  }

  listen(port?: number, host?: string): Promise<BidderListenInfo> {
    if (this.server !== null) return Promise.reject(new Error('relent bidder: already listening'));
    const server = http.createServer(this.handler);
    server.keepAliveTimeout = 65_000;
    this.server = server;
    return listenOn(server, port ?? this.config.port, host ?? this.config.host).then(
      (addr) => {
        const shownHost = addr.address === '0.0.0.0' || addr.address === '::' ? '127.0.0.1' : addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
        const base = `http://${shownHost}:${addr.port}`;
        this.publicUrl ??= base;
        return { host: addr.address, port: addr.port, url: `${base}${this.config.path}`, publicUrl: this.publicUrl };
      },
      (e: unknown) => {
        this.server = null;
        throw e;
      },
    );
  }

  stats(): BidderStats {
    return {
      requests: this.requests,
      byBehaviour: { ...this.byBehaviour },
      bidsMade: this.bidsMade,
      inFlight: this.inFlight,
      maxInFlight: this.maxInFlight,
      ...this.notice,
    };
  }

  async close(): Promise<void> {
    for (const cancel of this.timers) cancel();
    this.timers.clear();
    for (const res of this.hanging) res.destroy();
    this.hanging.clear();
    const server = this.server;
    if (server === null) return;
    this.server = null;
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  }
}

function json(res: http.ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json', 'x-openrtb-version': '2.6', 'content-length': String(Buffer.byteLength(body)) });
  res.end(body);
}
