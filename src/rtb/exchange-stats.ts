// The exchange's own counters (AuctionMetrics: auctions by status and reason, answer
// times against the deadline, requests that never became auctions) and the statistics
// built from them and the partners' counters (`stats()`).
import type { AuctionOutcome, AuctionSummary, ExchangeStats, PartnerStats } from './exchange-types.js';
import type { NoticeOutlet } from './notice-model.js';
import type { Partner, PartnerCounters } from './partner.js';
import { bump, Histogram, round } from './stats.js';
import type { ExchangeHistograms } from './stats-merge.js';

/** After this many ms past its deadline an answer counts as late (the bench's and the summary's bound). */
export const AFTER_DEADLINE_SLACK_MS = 5;

export class AuctionMetrics {
  readonly answerMs = new Histogram();
  readonly byStatus: Record<string, number> = {};
  readonly byReason: Record<string, number> = {};
  total = 0;
  afterDeadline = 0;
  maxOverDeadlineMs = 0;
  winners = 0;
  internalErrors = 0;
  readonly requests = { timedOut: 0, headerTooLarge: 0, malformed: 0, reset: 0 };

  /** Counts one answered auction (`s` is its summary, `usedMs` set). */
  count(o: AuctionOutcome, s: AuctionSummary): void {
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
  }

  stats(inFlight: number, partners: readonly Partner[], notices: NoticeOutlet, ready: boolean, wall: number): ExchangeStats {
    return {
      auctions: {
        total: this.total,
        inFlight,
        byStatus: { ...this.byStatus },
        byReason: { ...this.byReason },
        answerMs: this.answerMs.toJSON(),
        afterDeadline: this.afterDeadline,
        maxOverDeadlineMs: round(this.maxOverDeadlineMs),
        winners: this.winners,
      },
      partners: partners.map((p) => partnerStats(p, wall)),
      notices: notices.stats(),
      requests: { ...this.requests },
      ready,
      internalErrors: this.internalErrors,
    };
  }

  histograms(partners: readonly Partner[]): ExchangeHistograms {
    return { answerMs: this.answerMs.toSparse(), partners: partners.map((p) => p.counters.latency.toSparse()) };
  }
}

function partnerStats(p: Partner, wall: number): PartnerStats {
  const c: PartnerCounters = p.counters;
  return {
    name: p.name,
    enabled: p.enabled,
    breaker: p.breakerState(wall),
    inFlight: p.inFlight,
    maxConcurrency: p.config.maxConcurrency,
    concurrencyLimit:
      p.limit === null
        ? null
        : {
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
