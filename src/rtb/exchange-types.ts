// The exchange's public types: the options of createExchange(), the Exchange it returns,
// an auction's summary and outcome, and the statistics. Re-exported by exchange.ts (and
// index.ts); the code that fills them is in exchange.ts and the files it names.
import type http from 'node:http';
import type { Dispatcher } from 'undici';
import type { BreakerStateChange } from '../core/breaker.js';
import type { LimitChange } from '../core/concurrency.js';
import type { Fleet } from '../core/fleet.js';
import type { Clock, Random } from '../core/types.js';
import type { DeliveryEvent } from '../delivery/index.js';
import type { LimitEvent } from '../run/concurrency-limit.js';
import type { Instrumentation, RelentEvent } from '../run/run.js';
import type { ResolvedExchangeConfig, ResolvedPartner } from './config-schema.js';
import type { BillingEventResult, NoticeOutlet, NoticeStats } from './notice-model.js';
import type { SkipReason } from './partner.js';
import type { BidRejection } from './select.js';
import type { LatencySummary } from './stats.js';

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
  readonly bids: {
    readonly received: number;
    readonly valid: number;
    readonly won: number;
    readonly rejected: Readonly<Partial<Record<BidRejection, number>>>;
  };
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
