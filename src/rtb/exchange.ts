import http from 'node:http';
import type net from 'node:net';
import type { Dispatcher, Pool } from 'undici';
import { undici } from '../shared/undici.js';
import { headerSafe, listenOn, plain } from './http-util.js';
import type { BreakerStateChange } from '../core/breaker.js';
import { RelentError } from '../core/errors.js';
import type { Fleet } from '../core/fleet.js';
import type { Clock, Random } from '../core/types.js';
import { clockOption, systemClock, systemRandom } from '../shared/clock.js';
import { forDriver } from '../run/instrument.js';
import { execute, type Instrumentation, type RelentEvent, type RunResult, type WorkScope } from '../run/run.js';
import type { PartnerAnswer } from './answer.js';
import { resolveExchangeConfig, type ExchangeConfig, type ResolvedExchangeConfig, type ResolvedPartner } from './config.js';
import { substituteMacros, type MacroValues } from './macros.js';
import { auctionCurrency, checkBidRequest, sourceIdOf, type Bid, type BidRequest } from './model.js';
import type { DeliveryEvent } from '../delivery/index.js';
import { NoticeHub, noticeQueueKey, type Billable, type BillingEventResult, type Notice, type NoticeOutlet, type NoticeStats } from './notices.js';
import type { LimitChange } from '../core/concurrency.js';
import type { LimitEvent } from '../run/concurrency-limit.js';
import { answerObservation, Partner, PartnerCall, type CallOwner, type PartnerCounters, type SkipReason } from './partner.js';
import { selectWinners, type BidFate, type BidRejection, type Candidate, type Selection } from './select.js';
import { bump, Histogram, round, type LatencySummary } from './stats.js';
import type { ExchangeHistograms } from './stats-merge.js';
import { TimerLanes } from './timer-lanes.js';
import { collectGarbage, startStandIn } from './warm.js';

/** How one partner fared in one auction. */
export type PartnerOutcome = 'bid' | 'no_bid' | 'error' | 'timeout' | `skipped_${SkipReason}`;

export interface PartnerResult {
  readonly partner: string;
  readonly outcome: PartnerOutcome;
  /** From the fan-out's start to the partner's answer (or cut), ms; null when skipped. */
  readonly ms: number | null;
  /** Network attempts (more than 1 only with pre-send retries). */
  readonly attempts: number;
  /** The tmax sent on the last attempt; null when skipped. */
  readonly tmaxMs: number | null;
  /** The answer's status, when one came. */
  readonly status: number | null;
  /** What failed without an answer (`timeout`, `connect_refused`, `reset`…), or the answer's error (`malformed`…). */
  readonly error: string | null;
  /** No-bid: the form and the reason. */
  readonly noBidForm: string | null;
  readonly nbr: number | null;
  /** Bids in the answer. */
  readonly bids: number;
}

/** Why the source got what it got. */
export type AuctionReason =
  | 'bids' // 200 with the winning bids
  | 'no_bids' // 204: nobody bid (or no bid was valid)
  | 'source_disabled' // 204 without an auction
  | 'no_time' // 204: the source's tmax leaves no time for an auction
  | 'closing' // 204: the exchange is shutting down
  | 'invalid_request' // 400
  | 'too_large' // 400: the body is over maxRequestBytes (not read)
  | 'unsupported_encoding'; // 400: a compressed request body

/** One event per auction (`onAuction`): what was asked, what came back, and time used against the deadline. */
export interface AuctionSummary {
  readonly type: 'auction';
  /** The exchange's own id of the auction (also the `bidid` of its response). */
  readonly auctionId: string;
  readonly status: 200 | 204 | 400;
  readonly reason: AuctionReason;
  /** For 400: the field that is wrong, and why. */
  readonly invalidField: string | null;
  readonly imps: number;
  /** The tmax the auction ran under (the request's, or the configured default) and whether the request had one. */
  readonly tmaxMs: number | null;
  readonly tmaxGiven: boolean;
  /** Arrival → fan-out (body read, parse, validation), ms. */
  readonly spentMs: number;
  /** The fan-out's length: min(auctionTimeoutMs, tmax − spent − reserveMs). */
  readonly windowMs: number | null;
  /** Arrival → auction deadline, ms. */
  readonly deadlineMs: number | null;
  /** Arrival → answer written, ms. */
  readonly usedMs: number;
  readonly partners: {
    readonly asked: number;
    readonly bid: number;
    readonly noBid: number;
    readonly error: number;
    readonly timeout: number;
    readonly skipped: number;
  };
  /** No-bids by reason: `nbr:5`, or the form when there was no nbr (`http_204`, `empty_object`…). */
  readonly noBidReasons: Readonly<Record<string, number>>;
  /** Errors by kind: `status:500`, `malformed`, `too_large`, `connect_refused`… */
  readonly errors: Readonly<Record<string, number>>;
  readonly skipped: Readonly<Record<string, number>>;
  readonly bids: { readonly received: number; readonly valid: number; readonly won: number; readonly rejected: Readonly<Partial<Record<BidRejection, number>>> };
  readonly results: readonly PartnerResult[];
}

/** How an auction ends for the source. */
export interface AuctionOutcome {
  readonly status: 200 | 204 | 400;
  /** The BidResponse (JSON) for a 200; null otherwise. */
  readonly body: string | null;
  readonly reason: AuctionReason;
  readonly summary: AuctionSummary;
}

export interface PartnerBreakerChange extends BreakerStateChange {
  readonly partner: string;
}

/** A change of a partner's adaptive limit (`concurrencyLimit`): the limit event, with the partner named. */
export interface PartnerLimitChange extends LimitEvent {
  readonly partner: string;
}

export interface ExchangeOptions {
  /** Monotonic clock and timers (default: the system clock). */
  readonly clock?: Clock;
  readonly random?: Random;
  /** The core's events of every partner call and notice: one per attempt, then the result. */
  readonly onEvent?: ((event: RelentEvent) => void) | null;
  /** One summary per auction. */
  readonly onAuction?: ((summary: AuctionSummary) => void) | null;
  readonly onBreakerStateChange?: ((change: PartnerBreakerChange) => void) | null;
  /**
   * Every change of a partner's adaptive limit (partners with `concurrencyLimit`): the
   * new limit, the calls in flight and why (`decrease`, `increase`, `gradient`, `probe`,
   * `probe_end`).
   */
  readonly onLimitChange?: ((change: PartnerLimitChange) => void) | null;
  /** The dispatcher of a partner (default: an own undici Agent, keep-alive, connections = maxConcurrency). */
  readonly dispatcherFor?: ((partner: ResolvedPartner) => Dispatcher | null | undefined) | null;
  /** The dispatcher of notices (default: an own Agent). */
  readonly noticeDispatcher?: Dispatcher | null;
  /**
   * Where notices go (default: called from this process, from memory or through the
   * durable queue of `notices.store`). The CLI's worker processes hand theirs to one hub.
   */
  readonly noticeOutlet?: NoticeOutlet | null;
  /** The delivery worker's events, when notices go through the durable queue. */
  readonly onDeliveryEvent?: ((event: DeliveryEvent) => void) | null;
  /**
   * How many exchange processes serve the same partners (the CLI's `--workers`): each
   * partner's `maxConcurrency` is the whole exchange's, split between the processes so
   * that their shares add up to it (see `processIndex`; each gets at least 1). Default 1.
   */
  readonly processes?: number;
  /**
   * This process's place among `processes` (0-based; the CLI's worker slot): process i
   * takes ⌊maxConcurrency / processes⌋, plus one when i < maxConcurrency mod processes.
   * Default 0.
   */
  readonly processIndex?: number;
  /**
   * Shares each partner's circuit breaker and retry budget with the other processes of
   * the fleet (dependency `rtb:<partner>`; relent/fleet's `createRedisFleet()` makes one).
   * Default: per process. Connection caps stay per process (⌈maxConcurrency / processes⌉).
   */
  readonly fleet?: Fleet | null;
  /**
   * Spans and metrics (relent/otel): a span per auction (`relent auction`) whose children
   * are its partner calls (`relent.driver: "exchange.partner"`, `relent.partner`), each
   * with its attempt spans; notices are operations of their own (`exchange.notice`).
   */
  readonly instrumentation?: Instrumentation | null;
}

/** What `ready()` did before the exchange served. */
export interface WarmupReport {
  /** From ready() to ready, ms. */
  readonly ms: number;
  /** Dry-run auctions run against a stand-in partner (compiling the hot path). */
  readonly dryRunAuctions: number;
  /** Connections opened to each partner ahead of the first auction (and the first error, e.g. a partner that refuses). */
  readonly partners: readonly { readonly name: string; readonly connections: number; readonly wanted: number; readonly error: string | null }[];
  /** `memory`, or the durable store the notices go to. */
  readonly noticeStore: string;
  /** The warm-up ran out of `warmup.timeoutMs` (the exchange serves anyway). */
  readonly timedOut: boolean;
  /**
   * The garbage the warm-up left was collected before serving (a full collection, ms;
   * null when there was no warm-up or the runtime refused), so the first auctions do not
   * meet a collection of it.
   */
  readonly gcMs: number | null;
}

export interface PartnerStats {
  readonly name: string;
  readonly enabled: boolean;
  readonly breaker: string;
  readonly inFlight: number;
  readonly maxConcurrency: number;
  /** The adaptive limit (`concurrencyLimit`), or null for the fixed cap. */
  readonly concurrencyLimit: PartnerLimitStats | null;
  readonly timeoutMs: number;
  readonly calls: number;
  readonly attempts: number;
  readonly retries: number;
  readonly bidAnswers: number;
  readonly bidsReceived: number;
  readonly bidsWon: number;
  readonly noBids: number;
  readonly noBidForms: Readonly<Record<string, number>>;
  readonly noBidReasons: Readonly<Record<string, number>>;
  readonly errors: number;
  readonly errorKinds: Readonly<Record<string, number>>;
  readonly timeouts: number;
  readonly late: number;
  readonly lateMaxMs: number;
  readonly dropped: number;
  readonly skipped: Readonly<Record<SkipReason, number>>;
  readonly latency: LatencySummary;
  readonly lastTmaxMs: number | null;
}

/** A partner's adaptive limit in the statistics. */
export interface PartnerLimitStats {
  readonly kind: 'aimd' | 'gradient';
  /** Calls allowed in flight now (this process's; added up over the processes of a cluster). */
  readonly limit: number;
  /** The lowest it went since the start. */
  readonly lowest: number;
  /** Its changes by cause. */
  readonly changes: Readonly<Record<LimitChange, number>>;
  /** The gradient's latency without queueing, ms (null for aimd and before the first window). */
  readonly baselineMs: number | null;
}

export interface ExchangeStats {
  readonly auctions: {
    readonly total: number;
    readonly inFlight: number;
    readonly byStatus: Readonly<Record<string, number>>;
    readonly byReason: Readonly<Record<string, number>>;
    /** Arrival → answer of every auction that fanned out. */
    readonly answerMs: LatencySummary;
    /** Answers written more than 5 ms after their auction's deadline (goal: 0). */
    readonly afterDeadline: number;
    readonly maxOverDeadlineMs: number;
    readonly winners: number;
  };
  readonly partners: readonly PartnerStats[];
  readonly notices: NoticeStats;
  /**
   * Requests that never became auctions: `timedOut` (head or body not all there
   * `readTimeoutMs` after its first byte, or a new connection that sent nothing for that
   * long: 408, connection closed), `headerTooLarge` (431), `malformed` (not HTTP: 400),
   * `reset` (the client went away mid-request).
   */
  readonly requests: Readonly<{ timedOut: number; headerTooLarge: number; malformed: number; reset: number }>;
  /** Ready to serve (warmed up, not closing). */
  readonly ready: boolean;
  readonly internalErrors: number;
}

export interface ListenInfo {
  readonly host: string;
  readonly port: number;
  /** The auction endpoint's URL. */
  readonly url: string;
}

export interface CloseOptions {
  /** Abort partner calls and notices at once instead of letting them finish. Default false. */
  readonly force?: boolean;
  /**
   * Memory store: how long pending notices (and their retries) may take before they are
   * abandoned, ms. Default 2000. (A durable store keeps them: they are written, not drained.)
   */
  readonly noticeDrainMs?: number;
}

export interface Exchange {
  readonly config: ResolvedExchangeConfig;
  /** The node:http request listener (auction, billing events, /healthz, /readyz). */
  readonly handler: (req: http.IncomingMessage, res: http.ServerResponse) => void;
  /**
   * Gets ready to serve: opens the durable notice store, opens connections to every
   * partner and runs dry-run auctions against a stand-in partner on loopback (see
   * `warmup`). Once; later calls return the same report. `listen()` calls it first.
   */
  ready(): Promise<WarmupReport>;
  /**
   * Gets ready (`ready()`), then starts an HTTP server (default: the config's host and
   * port; 0 for any free port) with the stalled-client limits (`readTimeoutMs`,
   * `maxHeaderBytes`). `exclusive: false` shares the port with other cluster workers.
   */
  listen(port?: number, host?: string): Promise<ListenInfo>;
  /** Runs one auction in process (no HTTP on the source's side); `arrivedAt` is the clock's now by default. */
  auction(request: unknown, arrivedAt?: number): Promise<AuctionOutcome>;
  /**
   * A billing event for a won impression (`notices.billing` = `on-event`): fires its
   * billing notice once; repeats are `duplicate`, unknown or expired keys `unknown`.
   */
  billingEvent(requestId: string, impId: string): Promise<BillingEventResult>;
  setSourceEnabled(sourceId: string, enabled: boolean): void;
  setPartnerEnabled(name: string, enabled: boolean): void;
  stats(): ExchangeStats;
  /**
   * Runs `fn` at the first quiet moment of this process: once none of its auctions is due
   * within 5 ms, and at the latest 50 ms later. For work without a deadline of its own
   * (reporting statistics, flushing a log) that would otherwise delay an answer.
   */
  whenQuiet(fn: () => void): void;
  /** Auctions being run now. */
  readonly inFlight: number;
  /** Stops taking requests, answers every auction in flight, then closes connections. */
  close(options?: CloseOptions): Promise<void>;
}

/** After this many ms past its deadline an answer counts as late (the bench's and the summary's bound). */
export const AFTER_DEADLINE_SLACK_MS = 5;

/** How often the server looks for requests past `readTimeoutMs` (the cut is at most this late). */
export const READ_CHECK_INTERVAL_MS = 5;

/**
 * How many more of node:http's checks (5 ms apart) a request past `readTimeoutMs` gets
 * when bytes of it were read since the last (they waited behind a stall of this process).
 */
const STALL_GRACE_CHECKS = 4;

const BILLING_EVENT_PATH = '/openrtb2/billing';

/** Loss reason codes (OpenRTB 2.6 §5.25) of the losing bids whose lurl the exchange calls. */
export const LOSS_REASONS = Object.freeze({ invalidBidResponse: 3, belowAuctionFloor: 100, lostToHigherBid: 102 });

function lossCode(fate: BidFate): number {
  if (fate === 'lost') return LOSS_REASONS.lostToHigherBid;
  if (fate === 'below_floor') return LOSS_REASONS.belowAuctionFloor;
  return LOSS_REASONS.invalidBidResponse;
}

/** A notice outlet that takes nothing (the dry-run auctions). */
const DISCARD: NoticeOutlet = {
  store: 'memory',
  open: () => Promise.resolve(),
  send: () => true,
  stored: () => Promise.resolve(true),
  keepBillable: () => {},
  billingEvent: () => 'unknown',
  stats: () => {
    const z = { sent: 0, stored: 0, delivered: 0, failed: 0, dropped: 0, abandoned: 0, attempts: 0 };
    return { win: z, billing: z, loss: z, inFlight: 0, events: { received: 0, fired: 0, duplicate: 0, unknown: 0 }, storeErrors: 0 };
  },
  close: () => Promise.resolve(),
};

let auctionCounter = 0;

/**
 * Process `index`'s part of `total` split over `processes`: the parts add up to `total`
 * (the first `total mod processes` get one more), and none is below 1.
 */
export function processPart(total: number, processes: number, index: number): number {
  const base = Math.floor(total / processes);
  return Math.max(1, base + (index < total - base * processes ? 1 : 0));
}
const auctionPrefix = Math.floor(Math.random() * 0xffffff).toString(36);

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
  readonly clock: Clock;
  /** The auctions' deadlines and the partner calls' timers: at a shared deadline, answers first. */
  readonly lanes: TimerLanes;
  readonly random: Random;
  readonly partners: Partner[];
  readonly onEvent: ((e: RelentEvent) => void) | undefined;
  /** The tracing hooks, and each partner's (its calls marked with the partner's name). */
  readonly instrumentation: Instrumentation | null;
  readonly partnerInstrumentation: readonly (Instrumentation | null)[];
  private readonly onAuction: ((s: AuctionSummary) => void) | null;
  private readonly notices: NoticeOutlet;
  private readonly ownNotices: boolean;
  private readonly disabledSources: Set<string>;
  private server: http.Server | null = null;
  private serverClosed: Promise<void> | null = null;
  private closing: Promise<void> | null = null;
  private readying: Promise<WarmupReport> | null = null;
  private isReady = false;
  private stopping = false;
  private running = 0;
  private idleWaiters: (() => void)[] = [];
  private readonly answerMs = new Histogram();
  private readonly byStatus: Record<string, number> = {};
  private readonly byReason: Record<string, number> = {};
  private total = 0;
  private afterDeadline = 0;
  private maxOverDeadlineMs = 0;
  private winners = 0;
  private internalErrors = 0;
  private readonly requests = { timedOut: 0, headerTooLarge: 0, malformed: 0, reset: 0 };
  /** Sockets whose request timed out, answered a few per turn of the event loop (a burst of stalled clients must not stall the auctions). */
  private cutQueue: net.Socket[] = [];
  private readonly cutSeen = new WeakSet<net.Socket>();
  private cutScheduled = false;
  /** Sockets node:http reported past readTimeoutMs, looked at again after the loop's read phase. */
  private readonly stalled = new WeakMap<net.Socket, { lastAt: number; bytes: number; graces: number; pending: boolean }>();

  constructor(config: ResolvedExchangeConfig, o: ExchangeOptions) {
    this.config = config;
    this.clock = clockOption(o.clock) ?? systemClock;
    this.lanes = new TimerLanes(this.clock);
    this.random = o.random ?? systemRandom;
    const userEvent = o.onEvent ?? null;
    this.onEvent = userEvent === null ? undefined : (e) => {
      try {
        userEvent(e);
      } catch {
        // A listener's error must not stop a partner call (its slot would never be freed).
      }
    };
    const userAuction = o.onAuction ?? null;
    this.onAuction = userAuction === null ? null : (s) => {
      try {
        userAuction(s);
      } catch {
        // as above
      }
    };
    const onBreaker = o.onBreakerStateChange ?? null;
    const onLimit = o.onLimitChange ?? null;
    if (onLimit !== null && typeof onLimit !== 'function') throw new RelentError('ERR_INVALID_INPUT', 'Expected `onLimitChange` to be a function', { field: 'onLimitChange' });
    const processes = o.processes ?? 1;
    if (!Number.isInteger(processes) || processes < 1 || processes > 1024) {
      throw new RelentError('ERR_INVALID_INPUT', `Expected \`processes\` to be an integer in [1, 1024], got ${JSON.stringify(processes)}`, { field: 'processes' });
    }
    const index = o.processIndex ?? 0;
    if (!Number.isInteger(index) || index < 0 || index >= processes) {
      throw new RelentError('ERR_INVALID_INPUT', `Expected \`processIndex\` to be an integer in [0, ${processes - 1}] (\`processes\` is ${processes}), got ${JSON.stringify(index)}`, { field: 'processIndex' });
    }
    this.partners = config.partners.map((p, i) => new Partner(i, p, config.auctionTimeoutMs, {
      dispatcher: o.dispatcherFor?.(p) ?? null,
      cap: processPart(p.maxConcurrency, processes, index),
      processes,
      fleet: o.fleet ?? null,
      wallNow: () => this.clock.wallNow(),
      clock: this.clock,
      onLimitEvent: onLimit === null ? null : (e) => {
        try {
          onLimit({ ...e, partner: p.name });
        } catch {
          // as above
        }
      },
      onBreakerStateChange: onBreaker === null ? null : (change) => {
        try {
          onBreaker({ ...change, partner: p.name });
        } catch {
          // as above
        }
      },
    }));
    this.instrumentation = o.instrumentation ?? null;
    this.partnerInstrumentation = config.partners.map((p) => forDriver(this.instrumentation, 'exchange.partner', { 'relent.partner': p.name }));
    this.ownNotices = !o.noticeOutlet;
    this.notices = o.noticeOutlet ?? new NoticeHub(config.notices, {
      clock: this.clock,
      random: this.random,
      onEvent: this.onEvent,
      onDeliveryEvent: o.onDeliveryEvent ?? null,
      dispatcher: o.noticeDispatcher ?? null,
      partners: config.partners.map((p) => ({ name: p.name, url: p.url })),
      instrumentation: this.instrumentation,
    });
    this.disabledSources = new Set(config.disabledSources);
  }

  get inFlight(): number {
    return this.running;
  }

  // ─── ready before serving ────────────────────────────────────────────────

  ready(): Promise<WarmupReport> {
    this.readying ??= this.warm();
    return this.readying;
  }

  private async warm(): Promise<WarmupReport> {
    const t0 = this.clock.now();
    // A store that cannot be opened is an error of the configuration: nothing is served.
    await this.notices.open();
    const w = this.config.warmup;
    const connections = Promise.all(this.partners.map(async (p) => {
      const wanted = w === null ? 0 : p.warmTarget;
      const r = wanted > 0 && p.connector !== null ? await p.connector.open(p.config.url, wanted) : { opened: 0, error: null };
      return { name: p.name, connections: r.opened, wanted, error: r.error };
    }));
    const dry = w === null || w.auctions === 0 ? Promise.resolve(0) : this.dryRun(w.auctions).catch(() => 0);
    let timedOut = false;
    let cancel: (() => void) | null = null;
    const limit = new Promise<null>((resolve) => {
      cancel = this.clock.setTimer(() => {
        timedOut = true;
        resolve(null);
      }, w?.timeoutMs ?? 0);
    });
    const done = await Promise.race([Promise.all([connections, dry]), limit]);
    (cancel as (() => void) | null)?.();
    const partners = done === null
      ? this.partners.map((p) => ({ name: p.name, connections: p.connector?.available ?? 0, wanted: w === null ? 0 : p.warmTarget, error: 'warmup_timeout' }))
      : done[0];
    // The dry-run auctions filled the young generation; collected now, not in the first burst.
    const gcMs = w === null || w.auctions === 0 ? null : collectGarbage();
    this.isReady = !this.stopping;
    return { ms: round(this.clock.now() - t0), dryRunAuctions: done === null ? 0 : done[1], partners, noticeStore: this.notices.store, timedOut, gcMs };
  }

  /**
   * Dry-run auctions through the whole hot path — the HTTP server's parser, body read,
   * validation, the fan-out through execute() and undici, answer classification,
   * selection, macros, the answer — on a copy of this exchange whose partners are one
   * stand-in on loopback and whose notices go nowhere. Nothing leaves the machine.
   */
  private async dryRun(n: number): Promise<number> {
    const standIn = await startStandIn();
    const url = new URL(standIn.url);
    const shadow = new ExchangeImpl({
      ...this.config,
      warmup: null,
      partners: this.config.partners.map((p) => ({ ...p, url: new URL(`${url.href}?partner=${encodeURIComponent(p.name)}`), enabled: true, warmConnections: 0 })),
    }, { clock: this.clock, random: this.random, noticeOutlet: DISCARD });
    const server = http.createServer(shadow.handler);
    let client: Pool | null = null;
    let ran = 0;
    try {
      const addr = await listenOn(server, 0, '127.0.0.1', true);
      const burst = 16;
      client = new (undici().Pool)(`http://127.0.0.1:${addr.port}`, { connections: burst, pipelining: 1 });
      const c = client;
      const tmax = this.config.defaultTmaxMs;
      const one = async (k: number): Promise<void> => {
        const imps = k % 3 === 0 ? [{ id: '1', bidfloor: 0.5 }, { id: '2', bidfloor: 0.2 }] : [{ id: '1', bidfloor: 0.5 }];
        const body = JSON.stringify({
          id: `warmup-${k}`, imp: imps, tmax, cur: [this.config.currency],
          ...(k % 2 === 0 ? { site: { domain: 'warmup.example', publisher: { id: 'warmup' } } } : { app: { bundle: 'warmup', publisher: { id: 'warmup' } } }),
          device: { ua: 'warmup', ip: '192.0.2.1' },
        });
        const res = await c.request({ path: this.config.path, method: 'POST', headers: { 'content-type': 'application/json' }, body });
        await res.body.dump();
        ran++;
      };
      for (let k = 0; k < n; k += burst) {
        await Promise.all(Array.from({ length: Math.min(burst, n - k) }, (_, j) => one(k + j)));
      }
    } finally {
      await client?.close().catch(() => {});
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await shadow.close({ force: true, noticeDrainMs: 0 });
      await standIn.close();
    }
    return ran;
  }

  // ─── HTTP ────────────────────────────────────────────────────────────────

  readonly handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const arrivedAt = this.clock.now();
    try {
      const url = req.url ?? '/';
      const q = url.indexOf('?');
      const path = q < 0 ? url : url.slice(0, q);
      if (this.stopping) res.setHeader('connection', 'close');
      if (path === this.config.path) {
        if (req.method !== 'POST') return plain(res, 405, 'POST only\n', { allow: 'POST' });
        return this.readAuction(req, res, arrivedAt);
      }
      if (path === BILLING_EVENT_PATH && this.config.notices.billing === 'on-event') return this.onBillingEvent(req, res, q < 0 ? '' : url.slice(q + 1));
      if ((path === '/healthz' || path === '/readyz') && (req.method === 'GET' || req.method === 'HEAD')) {
        // healthz: the process serves (also while draining); readyz: send it auctions (warmed up, not closing).
        if (path === '/healthz') return plain(res, 200, 'ok\n');
        if (this.isReady && !this.stopping) return plain(res, 200, 'ready\n');
        return plain(res, 503, this.stopping ? 'closing\n' : 'starting\n');
      }
      return plain(res, 404, 'not found\n');
    } catch {
      this.internalErrors++;
      if (!res.headersSent) plain(res, 500, 'internal error\n');
      else res.destroy();
    }
  };

  /**
   * What node:http could not make a request of: a head or body not all there
   * `readTimeoutMs` after its first byte, or a new connection that sent nothing for that
   * long (408 and close), a head over `maxHeaderBytes` (431), bytes that are not HTTP
   * (400), a client that went away.
   */
  private readonly onClientError = (err: Error & { code?: string }, socket: net.Socket): void => {
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return this.onStalled(socket);
    if (err.code === 'ECONNRESET' || !socket.writable) {
      this.requests.reset++;
      socket.destroy();
      return;
    }
    let head: string;
    if (err.code === 'HPE_HEADER_OVERFLOW') {
      this.requests.headerTooLarge++;
      head = `HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\nx-relent-reason: header_too_large: over ${this.config.maxHeaderBytes} bytes\r\n\r\n`;
    } else {
      this.requests.malformed++;
      head = 'HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\nx-relent-reason: malformed_http\r\n\r\n';
    }
    if (!(socket as net.Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent) socket.write(head);
    socket.destroy();
  };

  /**
   * node:http checks for requests past readTimeoutMs in the timers phase, before the
   * loop reads what arrived meanwhile: after a stall of this process (a long GC, a busy
   * machine) a request whose bytes are waiting to be read would be cut with the stalled
   * ones. So the cut is decided after the read phase (setImmediate): a socket that got
   * new bytes there is left to node:http's next check (every 5 ms), at most
   * STALL_GRACE_CHECKS times (a client trickling bytes gains 20 ms, no more); one that got
   * none is cut. node:http reports a socket at every check until it is gone; a report
   * 50 ms after the last is a new request of the connection.
   */
  private onStalled(socket: net.Socket): void {
    if (this.cutSeen.has(socket)) return;
    const now = this.clock.now();
    let s = this.stalled.get(socket);
    if (s === undefined || now - s.lastAt > 50) {
      s = { lastAt: now, bytes: socket.bytesRead, graces: 0, pending: false };
      this.stalled.set(socket, s);
    }
    s.lastAt = now;
    if (s.pending) return;
    s.pending = true;
    const entry = s;
    setImmediate(() => {
      entry.pending = false;
      if (socket.destroyed || this.cutSeen.has(socket)) return;
      if (socket.bytesRead !== entry.bytes && entry.graces < STALL_GRACE_CHECKS) {
        entry.bytes = socket.bytesRead;
        entry.graces++;
        return;
      }
      this.cutSeen.add(socket);
      this.cutQueue.push(socket);
      if (!this.cutScheduled) {
        this.cutScheduled = true;
        setImmediate(this.cutSome);
      }
    });
  }

  private readonly cutSome = (): void => {
    this.cutScheduled = false;
    const batch = this.cutQueue.splice(0, 64);
    for (const socket of batch) {
      if (socket.destroyed) continue;
      // Also a new connection that sent nothing yet: RFC 9110 §15.5.9 lets a server send 408 on an idle connection.
      this.requests.timedOut++;
      const res = (socket as net.Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
      if (socket.writable && !res?.headersSent) {
        socket.write('HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\nx-relent-reason: request_timeout: the request did not arrive within readTimeoutMs\r\n\r\n');
      }
      socket.destroy();
    }
    if (this.cutQueue.length > 0) {
      this.cutScheduled = true;
      setImmediate(this.cutSome);
    }
  };

  /** Refuses a request whose body is not read: answer, then close the connection. */
  private refuse(req: http.IncomingMessage, res: http.ServerResponse, arrivedAt: number, reason: AuctionReason, detail: string): void {
    res.writeHead(400, { 'content-length': '0', connection: 'close', 'x-relent-reason': `${reason}: ${detail}` });
    res.end(() => req.socket.destroy());
    this.completed(earlyOutcome(400, reason, null, 0, this.clock.now() - arrivedAt, null), null, arrivedAt, this.clock.now());
  }

  private readAuction(req: http.IncomingMessage, res: http.ServerResponse, arrivedAt: number): void {
    const max = this.config.maxRequestBytes;
    const enc = req.headers['content-encoding'];
    if (enc !== undefined && enc.trim().toLowerCase() !== 'identity') return this.refuse(req, res, arrivedAt, 'unsupported_encoding', 'compressed request bodies are not accepted');
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > max) return this.refuse(req, res, arrivedAt, 'too_large', `over ${max} bytes`);
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    const onData = (c: Buffer): void => {
      size += c.length;
      if (size > max) {
        refused = true;
        req.off('data', onData);
        req.pause();
        this.refuse(req, res, arrivedAt, 'too_large', `over ${max} bytes`);
        return;
      }
      chunks.push(c);
    };
    req.on('data', onData);
    req.on('error', () => {
      // The client went away mid-body, or it stalled and was cut (counted there).
      if (!this.cutSeen.has(req.socket)) this.requests.reset++;
      refused = true;
      res.destroy();
    });
    req.on('end', () => {
      if (refused) return;
      const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
      // Tracked until the answer is written: a shutdown waits for it.
      void this.track(this.runAuction(body, arrivedAt).then((f) => this.write(res, f, arrivedAt), () => {
        this.internalErrors++;
        if (!res.headersSent && !res.destroyed) plain(res, 500, 'internal error\n');
      }));
    });
  }

  private write(res: http.ServerResponse, f: Finished, arrivedAt: number): void {
    const o = f.outcome;
    if (!res.destroyed && !res.writableEnded) {
      if (o.status === 200) {
        res.writeHead(200, { 'content-type': 'application/json', 'x-openrtb-version': '2.6', 'content-length': String(Buffer.byteLength(o.body!)) });
        res.end(o.body);
      } else if (o.status === 204) {
        res.writeHead(204, { 'x-openrtb-version': '2.6', 'x-relent-reason': o.reason });
        res.end();
      } else {
        const why = o.summary.invalidField === null ? o.reason : `${o.reason}: ${o.summary.invalidField}`;
        res.writeHead(400, { 'content-length': '0', 'x-relent-reason': headerSafe(why) });
        res.end();
      }
    }
    this.completed(o, f.fire, arrivedAt, this.clock.now());
  }

  /** Counts an answered auction, emits its summary and fires its notices (once the answer is written). */
  private completed(o: AuctionOutcome, fire: (() => void) | null, arrivedAt: number, answeredAt: number): void {
    const s = o.summary as { -readonly [K in keyof AuctionSummary]: AuctionSummary[K] };
    s.usedMs = round(answeredAt - arrivedAt);
    this.total++;
    bump(this.byStatus, String(o.status));
    bump(this.byReason, o.reason);
    if (s.deadlineMs !== null) {
      this.answerMs.record(s.usedMs);
      const over = s.usedMs - s.deadlineMs;
      if (over > AFTER_DEADLINE_SLACK_MS) this.afterDeadline++;
      if (over > this.maxOverDeadlineMs) this.maxOverDeadlineMs = over;
    }
    this.winners += s.bids.won;
    if (this.onAuction !== null) this.onAuction(s);
    // Notices have no deadline: they wait until no auction is due within 5 ms (at most 50 ms).
    if (fire !== null) this.lanes.whenQuiet(fire);
  }

  private onBillingEvent(req: http.IncomingMessage, res: http.ServerResponse, query: string): void {
    if (req.method !== 'GET' && req.method !== 'POST') return plain(res, 405, 'GET or POST\n', { allow: 'GET, POST' });
    req.resume();
    const params = new URLSearchParams(query);
    const id = params.get('id');
    const imp = params.get('imp');
    if (!id || !imp) return plain(res, 400, 'expected ?id=<bid request id>&imp=<impression id>\n');
    // 204 only once the billing notice is stored (durable store): an answered event is not lost.
    this.billingEvent(id, imp).then(async (r) => {
      if (r === 'unknown') return plain(res, 404, 'no won impression with this id (or it expired)\n');
      if (!(await this.notices.stored())) return plain(res, 503, 'the billing notice is not stored yet; send the event again\n', { 'retry-after': '1' });
      res.writeHead(204);
      res.end();
    }).catch(() => {
      this.internalErrors++;
      if (!res.headersSent) plain(res, 503, 'the billing notice could not be stored; send the event again\n');
    });
  }

  async billingEvent(requestId: string, impId: string): Promise<BillingEventResult> {
    return this.notices.billingEvent(requestId, impId);
  }

  listen(port?: number, host?: string): Promise<ListenInfo> {
    if (this.server !== null) return Promise.reject(new Error('relent exchange: already listening'));
    const cfg = this.config;
    const server = http.createServer({
      // A stalled client is cut when its request has not all arrived readTimeoutMs after its first byte (checked every few ms).
      requestTimeout: cfg.readTimeoutMs,
      headersTimeout: cfg.readTimeoutMs,
      connectionsCheckingInterval: READ_CHECK_INTERVAL_MS,
      maxHeaderSize: cfg.maxHeaderBytes,
    }, this.handler);
    server.keepAliveTimeout = 65_000;
    server.on('clientError', this.onClientError);
    this.server = server;
    return this.ready().then(() => {
      if (this.stopping) throw new Error('relent exchange: closed before it could listen');
      return listenOn(server, port ?? cfg.port, host ?? cfg.host);
    }).then((addr) => {
      const shown = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
      return { host: addr.address, port: addr.port, url: `http://${shown}:${addr.port}${cfg.path}` };
    }, (e: unknown) => {
      this.server = null;
      throw e;
    });
  }

  // ─── auctions ────────────────────────────────────────────────────────────

  private track<T>(p: Promise<T>): Promise<T> {
    this.running++;
    const done = (): void => {
      if (--this.running === 0 && this.idleWaiters.length > 0) {
        const w = this.idleWaiters;
        this.idleWaiters = [];
        for (const f of w) f();
      }
    };
    p.then(done, done);
    return p;
  }

  auction(request: unknown, arrivedAt?: number): Promise<AuctionOutcome> {
    const at = arrivedAt ?? this.clock.now();
    return this.track(this.runAuction(request, at).then((f) => {
      this.completed(f.outcome, f.fire, at, this.clock.now());
      return f.outcome;
    }));
  }

  private runAuction(input: unknown, arrivedAt: number): Promise<Finished> {
    const cfg = this.config;
    const early = (status: 204 | 400, reason: AuctionReason, field: string | null, imps = 0, tmax: number | null = null): Promise<Finished> =>
      Promise.resolve({ outcome: earlyOutcome(status, reason, field, imps, this.clock.now() - arrivedAt, tmax), fire: null });
    if (this.stopping) return early(204, 'closing', null);
    let value: unknown = input;
    if (Buffer.isBuffer(input) || typeof input === 'string') {
      const text = typeof input === 'string' ? input : input.toString('utf8');
      try {
        value = JSON.parse(text);
      } catch {
        return early(400, 'invalid_request', text.trim() === '' ? '(body): empty' : '(body): not valid JSON');
      }
    }
    const check = checkBidRequest(value, { maxImps: cfg.maxImps });
    if (!check.ok) return early(400, 'invalid_request', `${check.field}: ${check.reason}`);
    const request = check.request;
    const currency = auctionCurrency(request, cfg.currency);
    for (let i = 0; i < request.imp.length; i++) {
      const imp = request.imp[i]!;
      if ((imp.bidfloor ?? 0) > 0 && (imp.bidfloorcur ?? 'USD') !== currency) {
        return early(400, 'invalid_request', `imp[${i}].bidfloorcur: ${JSON.stringify(String(imp.bidfloorcur ?? 'USD').slice(0, 8))} is not the auction currency ${currency} (no conversion)`, request.imp.length);
      }
    }
    const tmaxGiven = typeof request.tmax === 'number' && request.tmax > 0;
    const tmax = tmaxGiven ? request.tmax! : cfg.defaultTmaxMs;
    const source = sourceIdOf(request);
    if (source !== null && this.disabledSources.has(source)) return early(204, 'source_disabled', null, request.imp.length, tmax);
    let base: string;
    try {
      // Serialised once; each partner's body only differs in tmax (spliced in front).
      const { tmax: _tmax, ...rest } = request;
      base = JSON.stringify(rest);
    } catch {
      return early(400, 'invalid_request', '(body): cannot be re-encoded');
    }
    const now = this.clock.now();
    const spent = now - arrivedAt;
    const windowMs = Math.min(cfg.auctionTimeoutMs, tmax - spent - cfg.reserveMs);
    if (!(windowMs >= 1)) return early(204, 'no_time', null, request.imp.length, tmax);
    const auction = new Auction(this, request, base, currency, arrivedAt, now, windowMs, tmax, tmaxGiven);
    return auction.start();
  }

  /** Called by an auction once it has its winners: builds the response and the notices. */
  answer(a: Auction, sel: Selection, candidates: readonly Candidate[]): { body: string | null; fire: (() => void) | null } {
    const winners = sel.winners;
    const cfg = this.config.notices;
    const request = a.request;
    const notices: Notice[] = [];
    const billable = request.test !== 1;
    if (billable && cfg.loss === 'exchange') this.lossNotices(a, sel, candidates, notices);
    if (winners.length === 0) return { body: null, fire: notices.length === 0 ? null : this.firing(notices) };
    const seats = new Map<string, { seat: string; bid: Bid[] }>();
    for (const w of winners) {
      const c = w.candidate;
      const seat = c.received.seat ?? c.partner;
      const values: MacroValues = {
        auctionId: request.id,
        bidId: c.bidid,
        impId: w.imp.id,
        seatId: seat,
        adId: typeof w.bid.adid === 'string' ? w.bid.adid : null,
        price: w.price,
        currency: a.currency,
        mbr: 1,
        loss: 0,
        minToWin: w.minToWin,
        multiplier: multiplierOf(w.imp),
      };
      const { lurl: _lurl, nurl, burl, adm, ...rest } = w.bid;
      const out: Record<string, unknown> = { ...rest, price: w.price };
      const hasAdm = typeof adm === 'string';
      if (hasAdm) out.adm = substituteMacros(adm, values);
      if (typeof nurl === 'string') {
        // The exchange fires the win notice itself, unless it is the markup's source (no adm).
        if (cfg.win === 'exchange' && hasAdm) {
          if (billable) notices.push({ kind: 'win', partner: c.partner, key: noticeQueueKey('win', request.id, w.imp.id), url: substituteMacros(nurl, values) });
        } else out.nurl = substituteMacros(nurl, values);
      }
      if (typeof burl === 'string') {
        if (cfg.billing === 'source') out.burl = substituteMacros(burl, values);
        else if (billable && cfg.billing === 'on-win') {
          notices.push({ kind: 'billing', partner: c.partner, key: noticeQueueKey('billing', request.id, w.imp.id), url: substituteMacros(burl, { ...values, impTs: Date.now() }) });
        } else if (billable) {
          const b: Billable = { partner: c.partner, requestId: request.id, impId: w.imp.id, burl, values };
          this.notices.keepBillable(b);
        }
      }
      const key = `${c.partnerIndex}\u0000${seat}`;
      let sb = seats.get(key);
      if (sb === undefined) {
        sb = { seat, bid: [] };
        seats.set(key, sb);
      }
      sb.bid.push(out as unknown as Bid);
      this.partners[c.partnerIndex]!.counters.bidsWon++;
    }
    const body = JSON.stringify({ id: request.id, bidid: a.id, cur: a.currency, seatbid: [...seats.values()] });
    return { body, fire: notices.length === 0 ? null : this.firing(notices) };
  }

  /** Loss notices of the bids that carry an `lurl` and did not win (OpenRTB 2.6 §5.25 codes: 102, 100, 3). */
  private lossNotices(a: Auction, sel: Selection, candidates: readonly Candidate[], out: Notice[]): void {
    const request = a.request;
    for (let i = 0; i < candidates.length; i++) {
      const fate = sel.fates[i]!;
      const c = candidates[i]!;
      const bid = c.received.bid;
      if (fate === 'won' || typeof bid.lurl !== 'string') continue;
      const impId = typeof bid.impid === 'string' ? bid.impid : '';
      const winner = sel.winners.find((w) => w.imp.id === impId);
      const floor = request.imp.find((imp) => imp.id === impId)?.bidfloor ?? null;
      const values: MacroValues = {
        auctionId: request.id,
        bidId: c.bidid,
        impId,
        seatId: c.received.seat ?? c.partner,
        adId: typeof bid.adid === 'string' ? bid.adid : null,
        // The clearing price is the winner's (empty when nothing won the impression).
        price: winner?.price ?? null,
        currency: a.currency,
        loss: lossCode(fate),
        minToWin: winner?.price ?? floor,
      };
      const bidId = typeof bid.id === 'string' ? bid.id : String(i);
      out.push({ kind: 'loss', partner: c.partner, key: noticeQueueKey('loss', request.id, impId, bidId), url: substituteMacros(bid.lurl, values) });
    }
  }

  private firing(notices: readonly Notice[]): () => void {
    return () => {
      for (const n of notices) this.notices.send(n);
    };
  }

  setSourceEnabled(sourceId: string, enabled: boolean): void {
    if (enabled) this.disabledSources.delete(sourceId);
    else this.disabledSources.add(sourceId);
  }

  setPartnerEnabled(name: string, enabled: boolean): void {
    const p = this.partners.find((x) => x.name === name);
    if (p === undefined) throw new Error(`relent exchange: no partner named ${JSON.stringify(name)}`);
    p.enabled = enabled;
  }

  histograms(): ExchangeHistograms {
    return { answerMs: this.answerMs.toSparse(), partners: this.partners.map((p) => p.counters.latency.toSparse()) };
  }

  whenQuiet(fn: () => void): void {
    this.lanes.whenQuiet(fn);
  }

  stats(): ExchangeStats {
    const wall = this.clock.wallNow();
    return {
      auctions: {
        total: this.total,
        inFlight: this.running,
        byStatus: { ...this.byStatus },
        byReason: { ...this.byReason },
        answerMs: this.answerMs.toJSON(),
        afterDeadline: this.afterDeadline,
        maxOverDeadlineMs: round(this.maxOverDeadlineMs),
        winners: this.winners,
      },
      partners: this.partners.map((p) => partnerStats(p, wall)),
      notices: this.notices.stats(),
      requests: { ...this.requests },
      ready: this.isReady && !this.stopping,
      internalErrors: this.internalErrors,
    };
  }

  close(options: CloseOptions = {}): Promise<void> {
    this.closing ??= this.shutdown(options);
    return this.closing;
  }

  /**
   * Stops accepting (the listening socket is closed, /readyz answers 503), answers every
   * auction in flight (each by its own deadline), closes the connections, then hands the
   * notices over: written to the durable store, or drained for `noticeDrainMs` in memory.
   */
  private async shutdown(o: CloseOptions): Promise<void> {
    this.stopping = true;
    if (this.readying !== null) await this.readying.catch(() => {});
    const server = this.server;
    if (server !== null) {
      this.serverClosed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
    }
    // Every auction in flight is answered (each ends by its own deadline).
    if (this.running > 0) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    if (server !== null) {
      server.closeIdleConnections();
      const timer = setTimeout(() => server.closeAllConnections(), 1000);
      await this.serverClosed;
      clearTimeout(timer);
    }
    await Promise.all(this.partners.map((p) => p.close(o.force === true)));
    // No auction is left: the notices still waiting for a quiet moment are handed over now.
    this.lanes.runQuiet();
    if (this.ownNotices) await this.notices.close({ drainMs: o.noticeDrainMs ?? 2000, force: o.force === true });
  }
}

/** An auction's outcome and the firing of its notices, which waits until the answer is written. */
interface Finished {
  readonly outcome: AuctionOutcome;
  readonly fire: (() => void) | null;
}

/**
 * The counter key of a no-bid reason: `nbr:<code>`, except that a partner sending ever new
 * unknown or exchange-specific codes cannot grow the counters without bound (at most 48
 * keys; the rest are `nbr:other`).
 */
function nbrKey(counters: Record<string, number>, code: number): string {
  const key = `nbr:${code}`;
  if (code <= 17 || counters[key] !== undefined || Object.keys(counters).length < 48) return key;
  return 'nbr:other';
}

function multiplierOf(imp: { readonly [k: string]: unknown }): number | null {
  const qty = imp.qty;
  if (typeof qty === 'object' && qty !== null) {
    const m = (qty as { multiplier?: unknown }).multiplier;
    if (typeof m === 'number' && Number.isFinite(m)) return m;
  }
  return null;
}

const NO_PARTNERS = Object.freeze({ asked: 0, bid: 0, noBid: 0, error: 0, timeout: 0, skipped: 0 });
const NO_BIDS = Object.freeze({ received: 0, valid: 0, won: 0, rejected: Object.freeze({}) });

function earlyOutcome(status: 204 | 400, reason: AuctionReason, field: string | null, imps: number, spentMs: number, tmax: number | null): AuctionOutcome {
  return {
    status,
    body: null,
    reason,
    summary: {
      type: 'auction', auctionId: `${auctionPrefix}-${(++auctionCounter).toString(36)}`, status, reason, invalidField: field, imps,
      tmaxMs: tmax, tmaxGiven: false, spentMs: round(spentMs), windowMs: null, deadlineMs: null, usedMs: 0,
      partners: NO_PARTNERS, noBidReasons: {}, errors: {}, skipped: {}, bids: NO_BIDS, results: [],
    },
  };
}

function partnerStats(p: Partner, wall: number): PartnerStats {
  const c: PartnerCounters = p.counters;
  return {
    name: p.name,
    enabled: p.enabled,
    breaker: p.breakerState(wall),
    inFlight: p.inFlight,
    maxConcurrency: p.config.maxConcurrency,
    concurrencyLimit: p.limit === null ? null : {
      kind: p.limit.spec.kind,
      limit: p.limit.limit,
      lowest: p.limitCounters!.lowest,
      changes: { ...p.limitCounters!.changes },
      baselineMs: p.limit.algorithm.baselineMs === null ? null : round(p.limit.algorithm.baselineMs),
    },
    timeoutMs: p.config.timeoutMs,
    calls: c.calls,
    attempts: c.attempts,
    retries: c.retries,
    bidAnswers: c.bidAnswers,
    bidsReceived: c.bidsReceived,
    bidsWon: c.bidsWon,
    noBids: c.noBids,
    noBidForms: { ...c.noBidForms },
    noBidReasons: { ...c.noBidReasons },
    errors: c.errors,
    errorKinds: { ...c.errorKinds },
    timeouts: c.timeouts,
    late: c.late,
    lateMaxMs: round(c.lateMaxMs),
    dropped: c.dropped,
    skipped: { ...c.skipped },
    latency: c.latency.toJSON(),
    lastTmaxMs: c.lastTmaxMs,
  };
}

/** Starts every partner call of an auction (a plain function: it runs inside the auction's span). */
function callAll(a: Auction): void {
  for (const p of a.exchange.partners) a.call(p);
}

/** One auction's fan-out: starts the partner calls, collects what arrives by the deadline, answers. */
class Auction implements CallOwner {
  readonly id: string;
  readonly clock: Clock;
  readonly requestId: string;
  readonly deadlineAt: number;
  private readonly results: (PartnerResult | null)[];
  private readonly calls: (PartnerCall | null)[];
  private readonly candidates: Candidate[] = [];
  private pending = 0;
  private closed = false;
  private cancelTimer: (() => void) | null = null;
  private resolve: ((f: Finished) => void) | null = null;
  private work: WorkScope | null = null;

  constructor(
    private readonly ex: ExchangeImpl,
    readonly request: BidRequest,
    private readonly base: string,
    readonly currency: string,
    private readonly arrivedAt: number,
    private readonly startedAt: number,
    private readonly windowMs: number,
    private readonly tmaxMs: number,
    private readonly tmaxGiven: boolean,
  ) {
    this.id = `${auctionPrefix}-${(++auctionCounter).toString(36)}`;
    this.clock = ex.lanes.calls;
    this.requestId = request.id;
    this.deadlineAt = startedAt + windowMs;
    this.results = new Array<PartnerResult | null>(ex.partners.length).fill(null);
    this.calls = new Array<PartnerCall | null>(ex.partners.length).fill(null);
  }

  body(tmaxMs: number): string {
    return `{"tmax":${tmaxMs},${this.base.slice(1)}`;
  }

  get exchange(): ExchangeImpl {
    return this.ex;
  }

  start(): Promise<Finished> {
    const inst = this.ex.instrumentation;
    if (inst !== null && inst.work !== undefined) {
      this.work = inst.work({
        name: 'auction',
        attributes: { 'relent.auction.id': this.id, 'relent.auction.imps': this.request.imp.length, 'relent.auction.tmax_ms': this.tmaxMs, 'relent.auction.window_ms': Math.round(this.windowMs) },
      });
    }
    return new Promise<Finished>((resolve) => {
      this.resolve = resolve;
      // The partner calls start inside the auction's span: they are its children.
      if (this.work !== null) this.work.run(callAll, this);
      else callAll(this);
      if (this.pending === 0) this.finish();
      else if (!this.closed) this.cancelTimer = this.ex.lanes.answers.setTimer(this.onDeadline, this.deadlineAt - this.clock.now());
    });
  }

  private readonly onDeadline = (): void => {
    this.cancelTimer = null;
    this.finish();
  };

  private skip(p: Partner, why: SkipReason): void {
    p.counters.skipped[why]++;
    this.results[p.index] = result(p.name, `skipped_${why}`, null, 0, null);
  }

  /** Asks one partner (or skips it). */
  call(p: Partner): void {
    const now = this.clock.now();
    if (!p.enabled) return this.skip(p, 'disabled');
    const left = this.deadlineAt - now;
    if (left < Math.max(1, p.config.minTimeMs)) return this.skip(p, 'no_time');
    const full = p.full();
    if (full !== null) return this.skip(p, full);
    // The partner's guard admits the call here, not inside execute(): a skipped partner costs no executor run.
    if (p.guard.admit(now, this.clock.wallNow()) !== null) return this.skip(p, 'circuit_open');
    p.take();
    const call = new PartnerCall(p, this);
    this.calls[p.index] = call;
    this.pending++;
    let run: Promise<RunResult<PartnerAnswer>>;
    try {
      run = execute(call.attempt, {
        policy: p.policy,
        deadlineMs: left,
        startedAt: now, // the reading `left` comes from: the partner gets every ms of it
        guard: p.guard,
        admitted: true,
        breakerVerdict: call.breakerVerdict,
        operationId: `${this.id}/${p.name}`,
        method: 'POST',
        endpoint: p.endpoint,
        idempotent: true,
        classifyValue: answerObservation,
        clock: this.clock,
        random: this.ex.random,
        onEvent: this.ex.onEvent,
        instrumentation: this.ex.partnerInstrumentation[p.index] ?? null,
      });
    } catch (e) {
      run = Promise.reject(e);
    }
    run.then((r) => this.done(p, call, r), () => this.done(p, call, null));
  }

  private done(p: Partner, call: PartnerCall, r: RunResult<PartnerAnswer> | null): void {
    call.settle();
    const c = p.counters;
    const ms = round(this.clock.now() - this.startedAt);
    let res: PartnerResult;
    if (r !== null && r.attempts === 0) {
      // No call was made (the deadline was spent before it): the executor handed the admission back.
      const why: SkipReason = r.reason === 'circuit_open' ? 'circuit_open' : 'no_time';
      c.skipped[why]++;
      res = result(p.name, `skipped_${why}`, null, 0, null);
    } else {
      c.calls++;
      const attempts = r?.attempts ?? 1;
      c.attempts += attempts;
      c.retries += attempts - 1;
      if (this.closed) {
        // Came after the source was answered: counted as a timeout there, dropped here.
        if (r !== null && r.outcome.ok) c.dropped++;
        this.pending--;
        return;
      }
      if (r !== null && r.outcome.ok) {
        const a = r.outcome.value;
        res = this.fromAnswer(p, a, ms, attempts, call.tmaxMs);
      } else {
        const cls = r?.last?.errorClass ?? 'error';
        if (cls === 'timeout') {
          c.timeouts++;
          res = result(p.name, 'timeout', ms, attempts, call.tmaxMs, { error: 'timeout' });
        } else {
          c.errors++;
          bump(c.errorKinds, cls);
          res = result(p.name, 'error', ms, attempts, call.tmaxMs, { error: cls });
        }
      }
    }
    this.results[p.index] = res;
    if (--this.pending === 0) this.finish();
  }

  private fromAnswer(p: Partner, a: PartnerAnswer, ms: number, attempts: number, tmax: number): PartnerResult {
    const c = p.counters;
    switch (a.kind) {
      case 'bid': {
        c.bidAnswers++;
        c.bidsReceived += a.bids.length;
        const bidid = typeof a.response.bidid === 'string' ? a.response.bidid : null;
        for (const received of a.bids) this.candidates.push({ partnerIndex: p.index, partner: p.name, received, currency: a.currency, bidid });
        return result(p.name, 'bid', ms, attempts, tmax, { status: 200, bids: a.bids.length });
      }
      case 'no_bid':
        c.noBids++;
        bump(c.noBidForms, a.form);
        if (a.nbr !== null) bump(c.noBidReasons, nbrKey(c.noBidReasons, a.nbr));
        return result(p.name, 'no_bid', ms, attempts, tmax, { status: a.status, noBidForm: a.form, nbr: a.nbr });
      case 'error': {
        c.errors++;
        const kind = a.error === 'status' ? `status:${a.status}` : a.error;
        bump(c.errorKinds, kind);
        return result(p.name, 'error', ms, attempts, tmax, { status: a.status, error: kind });
      }
    }
  }

  private finish(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.cancelTimer !== null) {
      this.cancelTimer();
      this.cancelTimer = null;
    }
    const partners = this.ex.partners;
    let asked = 0, bid = 0, noBid = 0, error = 0, timeout = 0, skipped = 0;
    const noBidReasons: Record<string, number> = {};
    const errors: Record<string, number> = {};
    const skips: Record<string, number> = {};
    const now = round(this.clock.now() - this.startedAt);
    for (let i = 0; i < partners.length; i++) {
      let r = this.results[i];
      if (r === null || r === undefined) {
        // Still out at the deadline: a timeout (its late answer, if any, is dropped).
        partners[i]!.counters.timeouts++;
        const call = this.calls[i];
        r = result(partners[i]!.name, 'timeout', now, call?.attempts ?? 1, call?.tmaxMs ?? null, { error: 'timeout' });
        this.results[i] = r;
      }
      switch (r.outcome) {
        case 'bid': asked++; bid++; break;
        case 'no_bid': asked++; noBid++; bump(noBidReasons, r.nbr !== null ? `nbr:${r.nbr}` : r.noBidForm ?? 'no_bid'); break;
        case 'error': asked++; error++; bump(errors, r.error ?? 'error'); break;
        case 'timeout': asked++; timeout++; break;
        default: skipped++; bump(skips, r.outcome.slice('skipped_'.length));
      }
    }
    const sel = selectWinners(this.request, this.candidates, this.currency);
    const { body, fire } = this.ex.answer(this, sel, this.candidates);
    const status = body === null ? 204 : 200;
    const summary: AuctionSummary = {
      type: 'auction',
      auctionId: this.id,
      status,
      reason: body === null ? 'no_bids' : 'bids',
      invalidField: null,
      imps: this.request.imp.length,
      tmaxMs: this.tmaxMs,
      tmaxGiven: this.tmaxGiven,
      spentMs: round(this.startedAt - this.arrivedAt),
      windowMs: round(this.windowMs),
      deadlineMs: round(this.deadlineAt - this.arrivedAt),
      usedMs: 0,
      partners: { asked, bid, noBid, error, timeout, skipped },
      noBidReasons,
      errors,
      skipped: skips,
      bids: { received: this.candidates.length, valid: sel.validBids, won: sel.winners.length, rejected: sel.rejected },
      results: this.results as PartnerResult[],
    };
    const outcome: AuctionOutcome = { status, body, reason: summary.reason, summary };
    if (this.work !== null) {
      this.work.end({
        error: null,
        attributes: {
          'relent.auction.status': status, 'relent.auction.reason': summary.reason, 'relent.auction.partners.asked': asked, 'relent.auction.partners.bid': bid,
          'relent.auction.partners.no_bid': noBid, 'relent.auction.partners.error': error, 'relent.auction.partners.timeout': timeout,
          'relent.auction.partners.skipped': skipped, 'relent.auction.bids.won': sel.winners.length,
        },
      });
      this.work = null;
    }
    const resolve = this.resolve!;
    this.resolve = null;
    resolve({ outcome, fire });
  }
}

function result(
  partner: string, outcome: PartnerOutcome, ms: number | null, attempts: number, tmaxMs: number | null,
  extra: { status?: number | null; error?: string | null; noBidForm?: string | null; nbr?: number | null; bids?: number } = {},
): PartnerResult {
  return {
    partner, outcome, ms, attempts, tmaxMs,
    status: extra.status ?? null, error: extra.error ?? null, noBidForm: extra.noBidForm ?? null, nbr: extra.nbr ?? null, bids: extra.bids ?? 0,
  };
}
