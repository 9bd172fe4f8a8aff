// A partner of the exchange: its pool, guard (breaker, retry budget), cap or adaptive
// limit, policy and counters. One call to it in an auction is in partner-call.ts.
import type { Dispatcher, Pool } from 'undici';
import { undici } from '../shared/undici.js';
import type { BreakerState, BreakerStateChange, CircuitBreaker } from '../core/breaker.js';
import type { LimitChange, ResolvedLimitSpec } from '../core/concurrency.js';
import type { Fleet } from '../core/fleet.js';
import type { Policy } from '../core/policy.js';
import type { Clock } from '../core/types.js';
import { normalizeUrlEndpoint } from '../core/endpoint.js';
import { presetPolicy, withOverrides } from '../presets/index.js';
import { createBulkhead, type Bulkhead } from '../run/bulkhead.js';
import { createConcurrencyLimit, type ConcurrencyLimit, type LimitEvent } from '../run/concurrency-limit.js';
import { createGuard, type Guard } from '../run/guard.js';
import { systemClock } from '../shared/clock.js';
import type { ResolvedPartner } from './config-schema.js';
import { Histogram } from './stats.js';
import { WarmConnector } from './warm.js';

/**
 * Why a partner was not called in an auction (each counted, none waited for):
 * `at_capacity`: its calls in flight are at `maxConcurrency` (this process's share);
 * `concurrency_limited`: at its adaptive limit (`concurrencyLimit`), below that ceiling.
 */
export type SkipReason = 'circuit_open' | 'at_capacity' | 'concurrency_limited' | 'no_time' | 'disabled';

/** What the adaptive limit of a partner did: its changes by cause, and the lowest it went. */
export interface PartnerLimitCounters {
  readonly changes: Record<LimitChange, number>;
  /** The lowest limit since the start. */
  lowest: number;
}

/** Cumulative counters of one partner. */
export interface PartnerCounters {
  /** Partner calls made (one per auction the partner took part in; retries are attempts of the same call). */
  calls: number;
  /** Network attempts (calls plus pre-send retries). */
  attempts: number;
  retries: number;
  /** Answers with at least one bid, and the bids in them. */
  bidAnswers: number;
  bidsReceived: number;
  bidsWon: number;
  noBids: number;
  /** No-bids by form (`http_204`, `empty_object`, …) and by reason (`nbr:5`). */
  noBidForms: Record<string, number>;
  noBidReasons: Record<string, number>;
  errors: number;
  /** Errors by kind: `status:500`, `malformed`, `too_large`, `id_mismatch`, or a wire error class (`connect_refused`, `reset`…). */
  errorKinds: Record<string, number>;
  /** The partner did not answer within its time (cut at min(timeoutMs, time left)). */
  timeouts: number;
  /** Of the timeouts: answers that arrived within `lateGraceMs` after the cut (dropped), and by how much. */
  late: number;
  lateMaxMs: number;
  /** Answers that came after their auction had been answered (dropped; counted as timeouts there). */
  dropped: number;
  skipped: Record<SkipReason, number>;
  /** Time of each answered call (first byte sent to body read), ms. */
  readonly latency: Histogram;
  /** The tmax sent on the latest call. */
  lastTmaxMs: number | null;
}

function newCounters(): PartnerCounters {
  return {
    calls: 0,
    attempts: 0,
    retries: 0,
    bidAnswers: 0,
    bidsReceived: 0,
    bidsWon: 0,
    noBids: 0,
    noBidForms: {},
    noBidReasons: {},
    errors: 0,
    errorKinds: {},
    timeouts: 0,
    late: 0,
    lateMaxMs: 0,
    dropped: 0,
    skipped: { circuit_open: 0, at_capacity: 0, concurrency_limited: 0, no_time: 0, disabled: 0 },
    latency: new Histogram(),
    lastTmaxMs: null,
  };
}

/** A partner with everything the exchange keeps for it: connection pool, breaker, bulkhead, policy, counters. */
export class Partner {
  readonly index: number;
  readonly config: ResolvedPartner;
  readonly name: string;
  readonly origin: string;
  readonly path: string;
  /** The endpoint as events show it (no query, no userinfo). */
  readonly endpoint: string;
  readonly dispatcher: Dispatcher;
  private readonly ownDispatcher: boolean;
  /** Hands the pool the connections opened before serving (null with a dispatcher of the caller's). */
  readonly connector: WarmConnector | null;
  /** Calls in flight at most in this process (its share of `maxConcurrency`), and the pool's connections. */
  readonly cap: number;
  /**
   * The partner's breaker and pre-send retries' budget (`retryBudget`), as a guard made by
   * createGuard() (the fleet's shared state of `rtb:<name>` with a fleet). The connection
   * cap and the adaptive limit are the partner's own: a call holds its slot until every
   * request of it has left the socket (the late-answer grace included).
   */
  readonly guard: Guard;
  /** The fixed cap (`maxConcurrency`), used when the partner has no adaptive limit. */
  readonly bulkhead: Bulkhead;
  /**
   * The adaptive limit (`concurrencyLimit`, this process's share), in place of the fixed
   * cap; null without one. Its `max` is at most `cap`.
   */
  readonly limit: ConcurrencyLimit | null;
  /** What the adaptive limit did (null without one). */
  readonly limitCounters: PartnerLimitCounters | null;
  /**
   * The `openrtb-bid` preset made per partner: attempt timeout and minimum attempt time =
   * the partner's timeout (a retry only when a whole partner timeout still fits), deadline
   * = the longest auction, and maxAttempts = 1 + preSendRetries (1: retries off).
   */
  readonly policy: Policy;
  readonly headers: readonly string[];
  readonly counters: PartnerCounters = newCounters();
  enabled: boolean;

  constructor(
    index: number,
    config: ResolvedPartner,
    auctionTimeoutMs: number,
    o: {
      dispatcher?: Dispatcher | null;
      onBreakerStateChange?: ((change: BreakerStateChange) => void) | null;
      /** This process's share of maxConcurrency (default: all of it). */
      cap?: number;
      /** Shares the breaker and the retry budget with other processes (dependency `rtb:<name>`). */
      fleet?: Fleet | null;
      /** How many processes share the partner (each takes ⌈x / processes⌉ of the adaptive limit's numbers). Default 1. */
      processes?: number;
      /** Every change of the adaptive limit. */
      onLimitEvent?: ((event: LimitEvent) => void) | null;
      /** The wall clock of limit events. */
      wallNow?: () => number;
      /** The exchange's clock. */
      clock?: Clock;
    },
  ) {
    this.index = index;
    this.config = config;
    this.name = config.name;
    this.enabled = config.enabled;
    this.origin = config.url.origin;
    this.path = `${config.url.pathname}${config.url.search}`;
    this.endpoint = normalizeUrlEndpoint(config.url);
    this.cap = o.cap ?? config.maxConcurrency;
    this.ownDispatcher = !o.dispatcher;
    this.connector = o.dispatcher ? null : new WarmConnector(undici().buildConnector({ timeout: config.timeoutMs + config.lateGraceMs + 100 }));
    this.dispatcher =
      o.dispatcher ??
      new (undici().Pool)(this.origin, {
        connections: this.cap,
        pipelining: 1,
        keepAliveTimeout: 30_000,
        keepAliveMaxTimeout: 600_000,
        connect: this.connector!.connect,
      });
    this.guard = createGuard({
      dependency: `rtb:${config.name}`,
      fleet: o.fleet ?? null,
      breaker: config.breaker,
      breakerName: config.name,
      onBreakerStateChange: o.onBreakerStateChange ?? null,
      budget: config.retryBudget,
      clock: o.clock ?? systemClock,
    });
    this.bulkhead = createBulkhead({ maxConcurrent: this.cap, maxQueue: 0 });
    if (config.concurrencyLimit === null) {
      this.limit = null;
      this.limitCounters = null;
    } else {
      const spec = processShare(config.concurrencyLimit, o.processes ?? 1, this.cap);
      const counters: PartnerLimitCounters = { changes: { decrease: 0, increase: 0, gradient: 0, probe: 0, probe_end: 0 }, lowest: spec.initial };
      const onLimit = o.onLimitEvent ?? null;
      this.limitCounters = counters;
      this.limit = createConcurrencyLimit(
        { ...spec, maxQueue: 0 },
        {
          name: config.name,
          field: `partners[${index}].concurrencyLimit`,
          ...(o.wallNow ? { wallNow: o.wallNow } : {}),
          onEvent: (e) => {
            counters.changes[e.cause]++;
            if (e.limit < counters.lowest) counters.lowest = e.limit;
            if (onLimit !== null) onLimit(e);
          },
        },
      );
    }
    this.policy = withOverrides(presetPolicy('openrtb-bid'), {
      maxAttempts: 1 + config.preSendRetries,
      deadlineMs: Math.max(auctionTimeoutMs, config.timeoutMs),
      attemptTimeoutMs: config.timeoutMs,
      minAttemptMs: config.timeoutMs,
      // An auction never waits for retry tokens: an empty budget ends the call (the partner's answer is a timeout or an error).
      budgetExhausted: 'stop',
      chaos: config.chaos,
    });
    const h: string[] = ['content-type', 'application/json', 'x-openrtb-version', '2.6'];
    for (const [k, v] of Object.entries(config.headers)) h.push(k, v);
    this.headers = h;
  }

  /** Calls in flight in this process. */
  get inFlight(): number {
    return this.limit !== null ? this.limit.active : this.bulkhead.active;
  }

  /** Why a call cannot be made now (the cap, then the adaptive limit), or null. Takes nothing. */
  full(): SkipReason | null {
    const active = this.inFlight;
    if (active >= this.cap) return 'at_capacity';
    if (this.limit !== null && active >= this.limit.limit) return 'concurrency_limited';
    return null;
  }

  /** Takes a slot (after `full()` said there is one). */
  take(): void {
    if (this.limit !== null) this.limit.tryAcquire();
    else this.bulkhead.tryAcquire();
  }

  /** The partner's breaker, null for none. */
  get breaker(): CircuitBreaker | null {
    return this.guard.breaker;
  }

  breakerState(now: number): BreakerState | 'none' {
    const b = this.guard.breaker;
    return b === null ? 'none' : b.state(now);
  }

  /** Connections to open before serving: `warmConnections`, else min(the pool's size, 32). */
  get warmTarget(): number {
    if (this.connector === null || !this.enabled) return 0;
    return Math.min(this.cap, this.config.warmConnections ?? 32);
  }

  async close(force: boolean): Promise<void> {
    this.connector?.close();
    if (!this.ownDispatcher) return;
    const d = this.dispatcher as Pool;
    if (d.destroyed || d.closed) return;
    if (force) await d.destroy();
    else await d.close();
  }
}

/** This process's share of an adaptive limit: ⌈x / processes⌉ of its bounds, within the process's cap. */
function processShare(spec: ResolvedLimitSpec, processes: number, cap: number): ResolvedLimitSpec {
  const share = (x: number): number => Math.max(1, Math.ceil(x / processes));
  const max = Math.min(cap, share(spec.max));
  const min = Math.min(max, share(spec.min));
  const initial = Math.min(max, Math.max(min, share(spec.initial)));
  if (spec.kind === 'aimd') return { ...spec, max, min, initial };
  return { ...spec, max, min, initial, probeLimit: Math.min(max, Math.max(min, spec.probeLimit)) };
}
