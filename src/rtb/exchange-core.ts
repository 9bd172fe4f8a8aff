// The state every part of an exchange shares (ExchangeCore): its configuration, clock and
// timer lanes, partners, notice outlet, the listeners, whether it is ready or stopping,
// the auctions in flight and the counters. One object, handed to the HTTP front
// (exchange-http.ts), the auctions (auction.ts), the response builder
// (auction-response.ts) and the lifecycle (exchange-lifecycle.ts).
import { RelentError } from '../core/errors.js';
import type { Clock, Random } from '../core/types.js';
import { clockOption, systemClock, systemRandom } from '../shared/clock.js';
import { forDriver } from '../run/instrument.js';
import type { Instrumentation, RelentEvent } from '../run/run.js';
import type { ResolvedExchangeConfig } from './config-schema.js';
import type { AuctionOutcome, AuctionSummary, ExchangeOptions } from './exchange-types.js';
import { AuctionMetrics } from './exchange-stats.js';
import type { BillingEventResult, NoticeOutlet } from './notice-model.js';
import { NoticeHub } from './notices.js';
import { Partner } from './partner.js';
import { round } from './stats.js';
import { TimerLanes } from './timer-lanes.js';

/**
 * Process `index`'s part of `total` split over `processes`: the parts add up to `total`
 * (the first `total mod processes` get one more), and none is below 1.
 */
export function processPart(total: number, processes: number, index: number): number {
  const base = Math.floor(total / processes);
  return Math.max(1, base + (index < total - base * processes ? 1 : 0));
}

/** What the parts of one exchange share. */
export class ExchangeCore {
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
  readonly onAuction: ((s: AuctionSummary) => void) | null;
  readonly notices: NoticeOutlet;
  /** The notice outlet is this exchange's own (closed with it), not one handed in. */
  readonly ownNotices: boolean;
  readonly disabledSources: Set<string>;
  readonly metrics = new AuctionMetrics();
  /** Warmed up (ready() done, and not stopped before it). */
  isReady = false;
  /** close() was called: no new auctions, /readyz answers 503. */
  stopping = false;
  /** Auctions being run (from the request's body read to its answer written). */
  running = 0;
  private idleWaiters: (() => void)[] = [];

  constructor(config: ResolvedExchangeConfig, o: ExchangeOptions) {
    this.config = config;
    this.clock = clockOption(o.clock) ?? systemClock;
    this.lanes = new TimerLanes(this.clock);
    this.random = o.random ?? systemRandom;
    const userEvent = o.onEvent ?? null;
    this.onEvent =
      userEvent === null
        ? undefined
        : (e) => {
            try {
              userEvent(e);
            } catch {
              // A listener's error must not stop a partner call (its slot would never be freed).
            }
          };
    const userAuction = o.onAuction ?? null;
    this.onAuction =
      userAuction === null
        ? null
        : (s) => {
            try {
              userAuction(s);
            } catch {
              // as above
            }
          };
    const onBreaker = o.onBreakerStateChange ?? null;
    const onLimit = o.onLimitChange ?? null;
    if (onLimit !== null && typeof onLimit !== 'function')
      throw new RelentError('ERR_INVALID_INPUT', 'Expected `onLimitChange` to be a function', { field: 'onLimitChange' });
    const processes = o.processes ?? 1;
    if (!Number.isInteger(processes) || processes < 1 || processes > 1024) {
      throw new RelentError('ERR_INVALID_INPUT', `Expected \`processes\` to be an integer in [1, 1024], got ${JSON.stringify(processes)}`, {
        field: 'processes',
      });
    }
    const index = o.processIndex ?? 0;
    if (!Number.isInteger(index) || index < 0 || index >= processes) {
      throw new RelentError(
        'ERR_INVALID_INPUT',
        `Expected \`processIndex\` to be an integer in [0, ${processes - 1}] (\`processes\` is ${processes}), got ${JSON.stringify(index)}`,
        { field: 'processIndex' },
      );
    }
    this.partners = config.partners.map(
      (p, i) =>
        new Partner(i, p, config.auctionTimeoutMs, {
          dispatcher: o.dispatcherFor?.(p) ?? null,
          cap: processPart(p.maxConcurrency, processes, index),
          processes,
          fleet: o.fleet ?? null,
          wallNow: () => this.clock.wallNow(),
          clock: this.clock,
          onLimitEvent:
            onLimit === null
              ? null
              : (e) => {
                  try {
                    onLimit({ ...e, partner: p.name });
                  } catch {
                    // as above
                  }
                },
          onBreakerStateChange:
            onBreaker === null
              ? null
              : (change) => {
                  try {
                    onBreaker({ ...change, partner: p.name });
                  } catch {
                    // as above
                  }
                },
        }),
    );
    this.instrumentation = o.instrumentation ?? null;
    this.partnerInstrumentation = config.partners.map((p) => forDriver(this.instrumentation, 'exchange.partner', { 'relent.partner': p.name }));
    this.ownNotices = !o.noticeOutlet;
    this.notices =
      o.noticeOutlet ??
      new NoticeHub(config.notices, {
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

  /** Counts `p` as an auction in flight until it settles (a shutdown waits for it). */
  track<T>(p: Promise<T>): Promise<T> {
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

  /** Resolves once no auction is in flight (at once when none is). */
  idle(): Promise<void> {
    if (this.running === 0) return Promise.resolve();
    return new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  /** Counts an answered auction, emits its summary and fires its notices (once the answer is written). */
  completed(o: AuctionOutcome, fire: (() => void) | null, arrivedAt: number, answeredAt: number): void {
    const s = o.summary as { -readonly [K in keyof AuctionSummary]: AuctionSummary[K] };
    s.usedMs = round(answeredAt - arrivedAt);
    this.metrics.count(o, s);
    if (this.onAuction !== null) this.onAuction(s);
    // Notices have no deadline: they wait until no auction is due within 5 ms (at most 50 ms).
    if (fire !== null) this.lanes.whenQuiet(fire);
  }

  async billingEvent(requestId: string, impId: string): Promise<BillingEventResult> {
    return this.notices.billingEvent(requestId, impId);
  }
}
