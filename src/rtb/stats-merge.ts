// The statistics of several exchange processes (the CLI's --workers) as one: counters
// added, histograms merged bucket by bucket (so p50/p99 are those of all auctions, not an
// average of percentiles), breaker states listed when the processes disagree.
import type { ExchangeStats, PartnerLimitStats, PartnerStats } from './exchange.js';
import type { NoticeCounters, NoticeStats } from './notice-model.js';
import { Histogram, round, type SparseHistogram } from './stats.js';

/** The histograms behind an exchange's statistics, in a form that crosses processes. */
export interface ExchangeHistograms {
  readonly answerMs: SparseHistogram;
  /** In partner order. */
  readonly partners: readonly SparseHistogram[];
}

/** One process's share: its statistics and histograms. */
export interface StatsPart {
  readonly stats: ExchangeStats;
  readonly hist: ExchangeHistograms;
}

function addRecords(into: Record<string, number>, from: Readonly<Record<string, number>>): void {
  for (const [k, v] of Object.entries(from)) into[k] = (into[k] ?? 0) + v;
}

function merged(list: readonly SparseHistogram[]): Histogram {
  const h = new Histogram();
  for (const x of list) h.addSparse(x);
  return h;
}

function addNoticeCounters(list: readonly NoticeCounters[]): NoticeCounters {
  const out: NoticeCounters = { sent: 0, stored: 0, delivered: 0, failed: 0, dropped: 0, abandoned: 0, attempts: 0 };
  for (const c of list) for (const k of Object.keys(out) as (keyof NoticeCounters)[]) out[k] += c[k];
  return out;
}

/** Notice statistics of several outlets added up. */
export function mergeNoticeStats(list: readonly NoticeStats[]): NoticeStats {
  const events = { received: 0, fired: 0, duplicate: 0, unknown: 0 };
  for (const n of list) addRecords(events, n.events);
  return {
    win: addNoticeCounters(list.map((n) => n.win)),
    billing: addNoticeCounters(list.map((n) => n.billing)),
    loss: addNoticeCounters(list.map((n) => n.loss)),
    inFlight: list.reduce((s, n) => s + n.inFlight, 0),
    events,
    storeErrors: list.reduce((s, n) => s + n.storeErrors, 0),
  };
}

const PARTNER_SUMS = [
  'inFlight',
  'calls',
  'attempts',
  'retries',
  'bidAnswers',
  'bidsReceived',
  'bidsWon',
  'noBids',
  'errors',
  'timeouts',
  'late',
  'dropped',
] as const;

function mergePartner(list: readonly PartnerStats[], hists: readonly SparseHistogram[]): PartnerStats {
  const first = list[0]!;
  const sums = {} as Record<(typeof PARTNER_SUMS)[number], number>;
  for (const k of PARTNER_SUMS) sums[k] = list.reduce((s, p) => s + p[k], 0);
  const noBidForms: Record<string, number> = {};
  const noBidReasons: Record<string, number> = {};
  const errorKinds: Record<string, number> = {};
  const skipped = { circuit_open: 0, at_capacity: 0, concurrency_limited: 0, no_time: 0, disabled: 0 };
  for (const p of list) {
    addRecords(noBidForms, p.noBidForms);
    addRecords(noBidReasons, p.noBidReasons);
    addRecords(errorKinds, p.errorKinds);
    addRecords(skipped, p.skipped);
  }
  const states = [...new Set(list.map((p) => p.breaker))];
  return {
    ...first,
    ...sums,
    enabled: list.some((p) => p.enabled),
    breaker: states.length === 1 ? states[0]! : states.sort().join('/'),
    noBidForms,
    noBidReasons,
    errorKinds,
    skipped,
    concurrencyLimit: mergeLimit(list.map((p) => p.concurrencyLimit)),
    lateMaxMs: Math.max(...list.map((p) => p.lateMaxMs)),
    latency: merged(hists).toJSON(),
    lastTmaxMs: list.find((p) => p.lastTmaxMs !== null)?.lastTmaxMs ?? null,
  };
}

/** The processes' adaptive limits of one partner: limits, lowest limits and changes added up (each process holds its share), the lowest baseline. */
function mergeLimit(list: readonly (PartnerLimitStats | null)[]): PartnerLimitStats | null {
  const xs = list.filter((l): l is PartnerLimitStats => l !== null);
  if (xs.length === 0) return null;
  const changes = { decrease: 0, increase: 0, gradient: 0, probe: 0, probe_end: 0 };
  for (const l of xs) addRecords(changes, l.changes);
  const baselines = xs.map((l) => l.baselineMs).filter((b): b is number => b !== null);
  return {
    kind: xs[0]!.kind,
    limit: xs.reduce((s, l) => s + l.limit, 0),
    lowest: xs.reduce((s, l) => s + l.lowest, 0),
    changes,
    baselineMs: baselines.length === 0 ? null : Math.min(...baselines),
  };
}

/**
 * The statistics of several processes of one exchange (same configuration) as one.
 * `notices`: the notice statistics to report (the hub's, when the processes hand their
 * notices to one); default: those of the parts added up.
 */
export function mergeExchangeStats(parts: readonly StatsPart[], notices?: NoticeStats): ExchangeStats {
  if (parts.length === 0) throw new Error('mergeExchangeStats: nothing to merge');
  const byStatus: Record<string, number> = {};
  const byReason: Record<string, number> = {};
  const requests = { timedOut: 0, headerTooLarge: 0, malformed: 0, reset: 0 };
  for (const { stats: s } of parts) {
    addRecords(byStatus, s.auctions.byStatus);
    addRecords(byReason, s.auctions.byReason);
    addRecords(requests, s.requests);
  }
  const sum = (f: (s: ExchangeStats) => number): number => parts.reduce((n, p) => n + f(p.stats), 0);
  const partners = parts[0]!.stats.partners.map((_, i) =>
    mergePartner(
      parts.map((p) => p.stats.partners[i]!),
      parts.map((p) => p.hist.partners[i]!),
    ),
  );
  return {
    auctions: {
      total: sum((s) => s.auctions.total),
      inFlight: sum((s) => s.auctions.inFlight),
      byStatus,
      byReason,
      answerMs: merged(parts.map((p) => p.hist.answerMs)).toJSON(),
      afterDeadline: sum((s) => s.auctions.afterDeadline),
      maxOverDeadlineMs: round(Math.max(...parts.map((p) => p.stats.auctions.maxOverDeadlineMs))),
      winners: sum((s) => s.auctions.winners),
    },
    partners,
    notices: notices ?? mergeNoticeStats(parts.map((p) => p.stats.notices)),
    requests,
    ready: parts.every((p) => p.stats.ready),
    internalErrors: sum((s) => s.internalErrors),
  };
}
