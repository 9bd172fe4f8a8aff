// The exchange configuration as written (ExchangeConfig, PartnerConfig, NoticeConfig,
// WarmupConfig), as resolved (every default filled: ResolvedExchangeConfig, …) and its
// defaults. The checks that turn one into the other are config.ts (the exchange's
// settings) and config-partner.ts (each partner's).
import type { BreakerSpec, ResolvedBreakerSpec } from '../core/breaker.js';
import type { BudgetSpec, ResolvedBudgetSpec } from '../core/budget.js';
import type { LimitSpec, ResolvedLimitSpec } from '../core/concurrency.js';
import type { PolicySpec } from '../core/policy.js';
import type { ChaosSpec } from '../core/chaos.js';

/** Breaker defaults of exchange partners (the core's, with a window and volume sized for auction traffic). */
export const PARTNER_BREAKER_DEFAULTS: ResolvedBreakerSpec = Object.freeze({
  failureRatio: 0.5,
  minimumThroughput: 20,
  windowMs: 10_000,
  buckets: 10,
  openMs: 5_000,
  halfOpenTrials: 1,
  successThreshold: 1,
});

/** One demand partner as written in the configuration. Only name, url, timeoutMs and maxConcurrency are required. */
export interface PartnerConfig {
  /** Letters, digits and `._-` (it appears in events and metrics). */
  readonly name: string;
  /** Where bid requests are POSTed (no credentials in it; use `headers`). */
  readonly url: string;
  /** The longest this partner may take; each call gets min(timeoutMs, time left in the auction). */
  readonly timeoutMs: number;
  /**
   * Calls in flight at most (the bulkhead, no queue: when full the partner is skipped,
   * `at_capacity`), and the Agent's connections. With `concurrencyLimit`, the ceiling of
   * the adaptive limit.
   */
  readonly maxConcurrency: number;
  /**
   * An adaptive concurrency limit in place of the fixed cap: `{ "kind": "gradient" }` or
   * `{ "kind": "aimd", "slowMs": … }` with the core's fields (initial, min, max, …; no
   * `maxQueue`: an auction never waits for a partner). The limit moves between `min` and
   * `max` (default and at most `maxConcurrency`) from what the partner's answers show;
   * it starts at `initial` (default `max`). A call over the limit is not made: the
   * partner is skipped for that auction (`concurrency_limited`). Like `maxConcurrency`,
   * the numbers are the whole exchange's: each of N processes takes ⌈x / N⌉. Default
   * none (the fixed cap).
   */
  readonly concurrencyLimit?: LimitSpec | null;
  /** Circuit breaker settings (see PARTNER_BREAKER_DEFAULTS), or false for none. */
  readonly breaker?: BreakerSpec | false;
  /** Skip the partner when less than this is left in the auction (ms). Default 10. */
  readonly minTimeMs?: number;
  /** Keep listening this long after a partner's cut to count (and drop) a late answer. Default 50. */
  readonly lateGraceMs?: number;
  /** Extra attempts after a failure before sending (refused, DNS, TLS, connect timeout, an immediate 503): 0–2, default 0. */
  readonly preSendRetries?: number;
  /** Largest answer read (bytes); larger → an error, never parsed. Default: the exchange's `maxResponseBytes`. */
  readonly maxResponseBytes?: number;
  /** Static request headers (e.g. an API key). Never logged. */
  readonly headers?: Readonly<Record<string, string>>;
  /** false → never called (counted as skipped). Default true. */
  readonly enabled?: boolean;
  /**
   * Connections opened to the partner before the exchange serves (TCP, and TLS for
   * https), handed to the keep-alive pool on first use. Default min(maxConcurrency, 32)
   * (per worker process: min(its share of maxConcurrency, 32)); 0: none.
   */
  readonly warmConnections?: number;
  /**
   * A retry budget for the pre-send retries (`preSendRetries`): `{ "kind": "ratio", … }`
   * (the core's budget kinds). Shared by the fleet when the exchange has one. Default none.
   */
  readonly retryBudget?: BudgetSpec | null;
  /** Chaos injection into this partner's calls (the policy field `chaos`, see docs/chaos.md). Default none. */
  readonly chaos?: ChaosSpec | null;
}

export interface NoticeConfig {
  /** Who calls `nurl`: the exchange, after answering (default), or the source (the URL stays in the bid). */
  readonly win?: 'exchange' | 'source';
  /**
   * When `burl` is called: `on-win` (the exchange fires it right after answering; default),
   * `on-event` (the exchange fires it when told the impression happened: POST /openrtb2/billing),
   * `source` (the substituted URL stays in the bid for the source to fire).
   */
  readonly billing?: 'on-win' | 'on-event' | 'source';
  /** Overrides of the `openrtb-billing-notice` preset (e.g. a shorter deadline). */
  readonly billingPolicy?: PolicySpec;
  /** Overrides of the `background-full-jitter` preset used for win notices. */
  readonly winPolicy?: PolicySpec;
  /** Notices in flight or waiting to retry, at most; more are dropped and counted. Default 10 000. */
  readonly maxPending?: number;
  /** `on-event`: how long a won impression waits for its billing event (ms). Default 1 h. */
  readonly eventTtlMs?: number;
  /** `on-event`: won impressions kept at most. Default 100 000. */
  readonly eventMaxKeys?: number;
  /**
   * Who calls `lurl` of a bid that lost: the exchange, after answering (default; only
   * bids that carry an `lurl`), or nobody (`off`; `lurl` is removed from winning bids
   * either way).
   */
  readonly loss?: 'exchange' | 'off';
  /** Overrides of the `background-full-jitter` preset used for loss notices. */
  readonly lossPolicy?: PolicySpec;
  /**
   * Where notices wait until delivered: `memory` (in process; lost when it stops), or a
   * delivery-queue store, `sqlite:FILE` or `postgres://…`, which keeps them across
   * restarts and crashes (`relent queue --store … ls` shows them). Default `memory` for
   * createExchange(); `relent exchange` defaults to a SQLite file next to its config.
   */
  readonly store?: string;
  /** The delivery worker of a durable store (relent/delivery's worker settings: leaseMs, pollMs, stopTimeoutMs…). */
  readonly worker?: Readonly<Record<string, number>>;
}

/** How an exchange gets ready before it serves (`listen()`). */
export interface WarmupConfig {
  /** Internal dry-run auctions (against a stand-in partner on loopback) that compile the hot path. Default 48. */
  readonly auctions?: number;
  /** The longest the warm-up (connections and dry runs) may take before the exchange serves anyway, ms. Default 3000. */
  readonly timeoutMs?: number;
}

/** The exchange configuration (`relent exchange --config FILE`). */
export interface ExchangeConfig {
  readonly host?: string;
  readonly port?: number;
  /** The auction endpoint. Default `/openrtb2/auction`. */
  readonly path?: string;
  /** The longest auction (fan-out) the exchange runs, ms. */
  readonly auctionTimeoutMs: number;
  /** Time kept back from the source's tmax for the exchange's own reply, ms. */
  readonly reserveMs: number;
  /** The tmax assumed when a request has none (never an unbounded auction). Default auctionTimeoutMs + reserveMs. */
  readonly defaultTmaxMs?: number;
  /** Largest request body (bytes); larger → 400 without reading it. Default 256 KiB. */
  readonly maxRequestBytes?: number;
  /** Largest partner answer (bytes). Default 256 KiB. */
  readonly maxResponseBytes?: number;
  /** Most impressions in one request. Default 100. */
  readonly maxImps?: number;
  /** The auction currency when a request has no `cur`. Default USD. */
  readonly currency?: string;
  /** Publisher ids (site/app/dooh `publisher.id`) answered 204 without an auction. */
  readonly disabledSources?: readonly string[];
  /**
   * A request whose head and body have not all arrived this long after its first byte is
   * answered 408 and its connection closed (a stalled client holds no connection past
   * its auction). Default: defaultTmaxMs.
   */
  readonly readTimeoutMs?: number;
  /** Largest request head (request line and headers), bytes; larger → 431 and the connection closed. Default 16 KiB. */
  readonly maxHeaderBytes?: number;
  /** Warm-up before serving: `false` to serve at once (tests). */
  readonly warmup?: WarmupConfig | false;
  /**
   * Shared state of the partners' breakers and retry budgets across processes and
   * machines: relent/fleet's `createRedisFleet()` options (`url`, `prefix`, …), read by
   * `relent exchange` (createExchange() takes a Fleet object in its options instead).
   */
  readonly fleet?: Readonly<Record<string, unknown>> | null;
  readonly notices?: NoticeConfig;
  readonly partners: readonly PartnerConfig[];
}

export interface ResolvedPartner {
  readonly name: string;
  readonly url: URL;
  readonly timeoutMs: number;
  readonly maxConcurrency: number;
  /** The adaptive limit (its numbers the whole exchange's), or null: the fixed cap. */
  readonly concurrencyLimit: ResolvedLimitSpec | null;
  readonly breaker: ResolvedBreakerSpec | null;
  readonly minTimeMs: number;
  readonly lateGraceMs: number;
  readonly preSendRetries: number;
  readonly maxResponseBytes: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly enabled: boolean;
  /** null: the default, min(the pool's size, 32). */
  readonly warmConnections: number | null;
  readonly retryBudget: ResolvedBudgetSpec | null;
  /** The partner's chaos (validated), or null. */
  readonly chaos: ChaosSpec | null;
}

export interface ResolvedNotices {
  readonly win: 'exchange' | 'source';
  readonly billing: 'on-win' | 'on-event' | 'source';
  readonly billingPolicy: PolicySpec | null;
  readonly winPolicy: PolicySpec | null;
  readonly maxPending: number;
  readonly eventTtlMs: number;
  readonly eventMaxKeys: number;
  readonly loss: 'exchange' | 'off';
  readonly lossPolicy: PolicySpec | null;
  /** `memory`, `sqlite:FILE` or a postgres URL. */
  readonly store: string;
  readonly worker: Readonly<Record<string, number>>;
}

export interface ResolvedExchangeConfig {
  readonly host: string;
  readonly port: number;
  readonly path: string;
  readonly auctionTimeoutMs: number;
  readonly reserveMs: number;
  readonly defaultTmaxMs: number;
  readonly maxRequestBytes: number;
  readonly maxResponseBytes: number;
  readonly maxImps: number;
  readonly currency: string;
  readonly disabledSources: readonly string[];
  readonly readTimeoutMs: number;
  readonly maxHeaderBytes: number;
  /** null: no warm-up. */
  readonly warmup: Readonly<Required<WarmupConfig>> | null;
  /** The `fleet` options as written (validated by relent/fleet where the fleet is made); null: none. */
  readonly fleet: Readonly<Record<string, unknown>> | null;
  readonly notices: ResolvedNotices;
  readonly partners: readonly ResolvedPartner[];
}

/** The exchange's optional settings, written once. */
export const EXCHANGE_DEFAULTS = Object.freeze({
  host: '127.0.0.1',
  port: 8080,
  path: '/openrtb2/auction',
  maxRequestBytes: 256 * 1024,
  maxResponseBytes: 256 * 1024,
  maxImps: 100,
  currency: 'USD',
  maxHeaderBytes: 16 * 1024,
  warmup: Object.freeze({ auctions: 48, timeoutMs: 3_000 }),
  notices: Object.freeze({
    win: 'exchange' as const,
    billing: 'on-win' as const,
    loss: 'exchange' as const,
    maxPending: 10_000,
    eventTtlMs: 3_600_000,
    eventMaxKeys: 100_000,
    store: 'memory',
  }),
  partner: Object.freeze({ minTimeMs: 10, lateGraceMs: 50, preSendRetries: 0, enabled: true, maxWarmConnections: 32 }),
});
