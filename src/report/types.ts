// The shapes of relent/report: the options of an analysis and the report it returns
// (plain JSON, what `relent report --json` writes). The analyzer is analyze.ts.
import type { Decision, TerminalReason } from '../core/types.js';
import type { SeriesBucket } from './series.js';
import type { SketchBin, SketchSummary } from './sketch.js';
import type { RetryVerdict, VERDICT_THRESHOLDS } from './verdict.js';

export interface ReportOptions {
  readonly maxOpenOperations?: number;
  readonly maxEndpoints?: number;
  readonly malformedLinesKept?: number;
  readonly maxLineBytes?: number;
  readonly seriesBuckets?: number;
  /** What the log is called in the report (a file name); not read. */
  readonly source?: string | null;
}

export interface MalformedLine {
  readonly line: number;
  /** What is wrong, in words; never the line's content (it may hold what must not leak). */
  readonly reason: string;
}

/** Retry figures of one endpoint (or of all: `retrySuccess.overall`). */
export interface EndpointReport {
  /** Normalised: no query, fragment or userinfo, whatever the log held. */
  readonly endpoint: string;
  /** Operations that ended (by a result line, or by their last attempt's terminal decision). */
  readonly operations: number;
  /** Attempt lines seen. */
  readonly attempts: number;
  /** Load sent: attempts ÷ operations seen (ended or not); null without operations. */
  readonly attemptsPerOperation: number | null;
  /** Operations that ended with `return`. */
  readonly returned: number;
  /** Operations that needed at least one retry (2 attempts or more). */
  readonly retried: number;
  /** …of which ended with `return`. */
  readonly retriedReturned: number;
  /** retriedReturned ÷ retried; null without retried operations. */
  readonly retrySuccessRate: number | null;
  /** Attempts that timed out (`timeout` or `connect_timeout`). */
  readonly timeouts: number;
  readonly timeoutShare: number | null;
  /** Operations seen whose end is not in the log. */
  readonly unfinished: number;
  readonly reasons: Readonly<Partial<Record<TerminalReason, number>>>;
  readonly verdict: RetryVerdict;
}

export interface Distribution extends SketchSummary {
  /** One bar per doubling (ms): see LogSketch.bins. */
  readonly bins: readonly SketchBin[];
}

/** Everything `relent report` prints; plain JSON (what `--json` writes). */
export interface EventReport {
  readonly source: string | null;
  readonly lines: number;
  readonly blankLines: number;
  readonly events: { readonly attempt: number; readonly result: number; readonly other: Readonly<Record<string, number>> };
  readonly malformed: { readonly count: number; readonly lines: readonly MalformedLine[]; readonly byReason: Readonly<Record<string, number>> };
  readonly operations: {
    /** Operations that ended: withResult + inferred. */
    readonly ended: number;
    /** Ended by their result line. */
    readonly withResult: number;
    /** No result line, but their last attempt's decision ended them (logs of attempts only, e.g. the delivery worker's). */
    readonly inferred: number;
    /** Seen, but their last attempt decided `retry` and nothing followed (open at the end, or evicted). */
    readonly unfinished: number;
    /** Operations dropped from the open set to keep memory bounded (counted as inferred or unfinished). */
    readonly evicted: number;
    /** The bound on operations held open at once. */
    readonly maxOpen: number;
  };
  /** Load sent to the dependencies: attempts ÷ operations seen. */
  readonly load: {
    readonly attempts: number;
    readonly operations: number;
    readonly attemptsPerOperation: number | null;
    readonly retries: number;
    readonly retryShare: number | null;
  };
  /**
   * Hedged requests: attempts sent while another of their operation was in flight, those
   * whose answer was the operation's, and the extra load they added (hedges ÷ operations).
   */
  readonly hedging: { readonly hedges: number; readonly won: number; readonly extraLoad: number | null };
  /**
   * Attempts the policy's chaos injected into (their events say `injected`), counted
   * apart: faults and outcomes reached no dependency; latencies delayed a real call.
   * They are in `load` and every other count too, as the attempts they were.
   */
  readonly chaos: { readonly injected: number; readonly fault: number; readonly outcome: number; readonly latency: number; readonly share: number | null };
  readonly attemptsPerOperation: {
    /** Operations that ended, by their number of attempts (only counts that occur). */
    readonly histogram: readonly { readonly attempts: number; readonly operations: number; readonly share: number }[];
    /** Operations with more attempts than maxAttemptsBar, together. */
    readonly more: { readonly from: number; readonly operations: number } | null;
    readonly mean: number | null;
    readonly max: number | null;
  };
  /** Share of ended operations per terminal reason (only reasons that occur, in vocabulary order). */
  readonly reasons: readonly { readonly reason: TerminalReason; readonly operations: number; readonly share: number }[];
  /** How ended operations ended: `2xx`…`5xx` of the final status, the final error class, or `no call`. */
  readonly outcomes: Readonly<Record<string, number>>;
  /** Per attempt: status classes, statuses, error classes, decisions. */
  readonly perAttempt: {
    readonly statusClasses: Readonly<Record<string, number>>;
    readonly statuses: readonly { readonly status: number; readonly attempts: number }[];
    readonly errorClasses: readonly { readonly errorClass: string; readonly attempts: number }[];
    readonly decisions: readonly { readonly decision: Decision; readonly attempts: number }[];
  };
  readonly timeouts: { readonly attempts: number; readonly share: number | null };
  /** The chosen waits (`delayMs` of attempts that set one), ms. */
  readonly delays: Distribution;
  /** How long attempts took (`elapsedMs`), ms. */
  readonly elapsed: Distribution;
  readonly retryAfter: { readonly seen: number; readonly valid: number; readonly invalid: number };
  readonly retrySuccess: {
    readonly overall: EndpointReport;
    /** By operations, most first. */
    readonly endpoints: readonly EndpointReport[];
    /** Operations of endpoints beyond maxEndpoints, counted in the row "(other endpoints)". */
    readonly endpointsFolded: boolean;
    readonly thresholds: typeof VERDICT_THRESHOLDS;
  };
  /** Load vs retries over time (or over the log's lines when events carry no time). */
  readonly series: {
    readonly basis: 'time' | 'line';
    /** The event field the times came from, or null (line order). */
    readonly field: 'ts' | 'time' | null;
    readonly unit: 'ms' | 'lines';
    readonly bucketWidth: number;
    readonly buckets: readonly SeriesBucket[];
    /** In time mode: attempts without a usable time, counted at the last time seen. */
    readonly attemptsWithoutTime: number;
    readonly note: string;
  };
}
