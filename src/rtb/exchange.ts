// relent's OpenRTB exchange: createExchange() and the Exchange it returns. This file
// puts the parts together; each part is a file of its own, on one shared state
// (ExchangeCore, exchange-core.ts):
//   exchange-types.ts      the public types (options, summary, statistics, Exchange)
//   exchange-http.ts       the HTTP side: request listener, body reading, stalled clients
//   auction.ts             one auction: checks, the tmax cut, the fan-out, collecting answers
//   auction-response.ts    the BidResponse and the win, billing and loss notices
//   exchange-lifecycle.ts  ready() (warm-up, dry runs) and close()
//   exchange-stats.ts      the counters and stats()
import type http from 'node:http';
import { resolveExchangeConfig } from './config.js';
import type { ExchangeConfig, ResolvedExchangeConfig } from './config-schema.js';
import { runAuction } from './auction.js';
import { ExchangeCore } from './exchange-core.js';
import { HttpFront } from './exchange-http.js';
import { shutdown, warmUp } from './exchange-lifecycle.js';
import type { AuctionOutcome, CloseOptions, Exchange, ExchangeOptions, ExchangeStats, ListenInfo, WarmupReport } from './exchange-types.js';
import { listenOn } from './http-util.js';
import type { BillingEventResult } from './notice-model.js';
import type { ExchangeHistograms } from './stats-merge.js';

export type {
  PartnerOutcome,
  PartnerResult,
  AuctionReason,
  AuctionSummary,
  AuctionOutcome,
  PartnerBreakerChange,
  PartnerLimitChange,
  ExchangeOptions,
  WarmupReport,
  PartnerStats,
  PartnerLimitStats,
  ExchangeStats,
  ListenInfo,
  CloseOptions,
  Exchange,
} from './exchange-types.js';
export { processPart } from './exchange-core.js';
export { AFTER_DEADLINE_SLACK_MS } from './exchange-stats.js';
export { READ_CHECK_INTERVAL_MS } from './exchange-http.js';
export { LOSS_REASONS } from './auction-response.js';

/**
 * An OpenRTB exchange that holds its deadline. Per auction:
 *
 * - deadline = min(auctionTimeoutMs, tmax − time spent since arrival − reserveMs), where
 *   tmax is the request's or `defaultTmaxMs` (never an unbounded auction);
 * - every partner in parallel, each through execute() → decide() with the `openrtb-bid`
 *   preset made per partner (no retries, except pre-send failures when
 *   `preSendRetries` > 0 and a whole partner timeout still fits);
 * - each call gets min(timeoutMs, time left) and is told that time as its `tmax`;
 * - a partner whose breaker is open, whose connection cap is full, whose adaptive
 *   limit (`concurrencyLimit`) is reached, or for whom less than `minTimeMs` is left is
 *   skipped (counted), never waited for;
 * - first price per impression, floors respected, ties to the partner listed first;
 * - 200 with the winners, 204 when none (or the source is disabled), 400 for a request
 *   that cannot be parsed or lacks required fields.
 */
export function createExchange(config: ExchangeConfig, options: ExchangeOptions = {}): Exchange {
  return new ExchangeImpl(resolveExchangeConfig(config), options);
}

/** The histograms behind `stats()` (answer time, partner latency), to merge the statistics of several processes. */
export function exchangeHistograms(exchange: Exchange): ExchangeHistograms {
  if (!(exchange instanceof ExchangeImpl)) throw new TypeError('exchangeHistograms: not an exchange of createExchange()');
  return exchange.histograms();
}

class ExchangeImpl implements Exchange {
  readonly config: ResolvedExchangeConfig;
  private readonly core: ExchangeCore;
  private readonly front: HttpFront;
  readonly handler: (req: http.IncomingMessage, res: http.ServerResponse) => void;
  private server: http.Server | null = null;
  private closing: Promise<void> | null = null;
  private readying: Promise<WarmupReport> | null = null;

  constructor(config: ResolvedExchangeConfig, o: ExchangeOptions) {
    this.config = config;
    this.core = new ExchangeCore(config, o);
    this.front = new HttpFront(this.core);
    this.handler = this.front.handler;
  }

  get inFlight(): number {
    return this.core.running;
  }

  ready(): Promise<WarmupReport> {
    this.readying ??= warmUp(this.core);
    return this.readying;
  }

  listen(port?: number, host?: string): Promise<ListenInfo> {
    if (this.server !== null) return Promise.reject(new Error('relent exchange: already listening'));
    const cfg = this.config;
    const server = this.front.createServer();
    this.server = server;
    return this.ready()
      .then(() => {
        if (this.core.stopping) throw new Error('relent exchange: closed before it could listen');
        return listenOn(server, port ?? cfg.port, host ?? cfg.host);
      })
      .then(
        (addr) => {
          const shown = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
          return { host: addr.address, port: addr.port, url: `http://${shown}:${addr.port}${cfg.path}` };
        },
        (e: unknown) => {
          this.server = null;
          throw e;
        },
      );
  }

  auction(request: unknown, arrivedAt?: number): Promise<AuctionOutcome> {
    const core = this.core;
    const at = arrivedAt ?? core.clock.now();
    return core.track(
      runAuction(core, request, at).then((f) => {
        core.completed(f.outcome, f.fire, at, core.clock.now());
        return f.outcome;
      }),
    );
  }

  billingEvent(requestId: string, impId: string): Promise<BillingEventResult> {
    return this.core.billingEvent(requestId, impId);
  }

  setSourceEnabled(sourceId: string, enabled: boolean): void {
    if (enabled) this.core.disabledSources.delete(sourceId);
    else this.core.disabledSources.add(sourceId);
  }

  setPartnerEnabled(name: string, enabled: boolean): void {
    const p = this.core.partners.find((x) => x.name === name);
    if (p === undefined) throw new Error(`relent exchange: no partner named ${JSON.stringify(name)}`);
    p.enabled = enabled;
  }

  histograms(): ExchangeHistograms {
    return this.core.metrics.histograms(this.core.partners);
  }

  whenQuiet(fn: () => void): void {
    this.core.lanes.whenQuiet(fn);
  }

  stats(): ExchangeStats {
    const core = this.core;
    const wall = core.clock.wallNow();
    return core.metrics.stats(core.running, core.partners, core.notices, core.isReady && !core.stopping, wall);
  }

  close(options: CloseOptions = {}): Promise<void> {
    this.closing ??= shutdown(this.core, options, this.readying, () => this.server);
    return this.closing;
  }
}
