import { createReadStream } from 'node:fs';
import type { Decision, TerminalReason } from '../core/types.js';
import { safeEndpoint } from '../core/endpoint.js';
import { clip, idKey, MAX_ENDPOINT, NameCounts, NO_ENDPOINT, optNonNeg, OTHER_ENDPOINTS, printable, statusClass, timeOf, type Json } from './fields.js';
import { LineSplitter } from './lines.js';
import { AdaptiveSeries } from './series.js';
import { LogSketch } from './sketch.js';
import type { EndpointReport, EventReport, MalformedLine, ReportOptions } from './types.js';
import { retryVerdict, VERDICT_THRESHOLDS } from './verdict.js';

export type { Distribution, EndpointReport, EventReport, MalformedLine, ReportOptions } from './types.js';
export { printable } from './fields.js';

/** relent's decisions (a closed set), in the order reports list them. */
export const REPORT_DECISIONS: readonly Decision[] = Object.freeze([
  'return',
  'retry',
  'check_state',
  'deadline_exceeded',
  'max_attempts',
  'not_retryable',
  'budget_exhausted',
  'circuit_open',
  'bulkhead_full',
  'concurrency_limited',
  'rate_limited',
  'cancelled',
  'defer',
  'await_hedge',
  'hedge_lost',
] as const);
/** Whether a decision ends the operation (every one but `retry` and the two about one attempt of a hedged operation). */
export function isTerminal(d: Decision): d is TerminalReason {
  return d !== 'retry' && d !== 'await_hedge' && d !== 'hedge_lost';
}
/** The reasons an operation ends with. */
export const REPORT_REASONS: readonly TerminalReason[] = Object.freeze(REPORT_DECISIONS.filter(isTerminal));

const DECISION_INDEX = new Map<string, number>(REPORT_DECISIONS.map((d, i) => [d, i]));
const RETURN = DECISION_INDEX.get('return')!;

/** Limits that keep the memory of a report constant, whatever the size of the log. */
export const REPORT_DEFAULTS = Object.freeze({
  /** Operations between their first attempt and their result line held at once; the oldest is evicted beyond. */
  maxOpenOperations: 50_000,
  /** Endpoints with their own row; later new endpoints share the row "(other endpoints)". */
  maxEndpoints: 1000,
  /** Malformed lines whose number (and what is wrong) the report keeps. */
  malformedLinesKept: 20,
  /** A longer line is malformed (and never held in memory whole). */
  maxLineBytes: 1024 * 1024,
  /** Buckets of the load-vs-retries series. */
  seriesBuckets: 120,
  /** Distinct names kept per list (error classes, other event types); further ones are counted as "(other)". */
  maxNames: 64,
  /** Attempts per operation counted one by one up to here; larger counts share one bar. */
  maxAttemptsBar: 100,
});

interface EndpointAcc {
  readonly key: string;
  operations: number;
  attempts: number;
  returned: number;
  retried: number;
  retriedReturned: number;
  timeouts: number;
  unfinished: number;
  readonly reasons: Float64Array;
}

interface OpenOp {
  readonly ep: EndpointAcc;
  maxAttempt: number;
  last: number;
  status: number | null;
  errorClass: string | null;
}

/**
 * Reads relent's JSONL event log (one `{"type":"attempt",…}` per attempt, one
 * `{"type":"result",…}` per operation) in constant memory and computes the figures that say whether retries help:
 * attempts per operation, terminal reasons, status and error classes, delays, timeouts,
 * load, retry success per endpoint with a verdict, and load vs retries over time.
 *
 * Memory: fixed-size counters and sketches, plus the operations between their first
 * attempt and their result line (at most `maxOpenOperations`; the oldest is evicted
 * beyond, and counted) and at most `maxEndpoints` endpoint rows. Nothing is kept of an
 * operation once its result line is read. A line that is not a valid event is counted
 * with its number (the first `malformedLinesKept` numbers are kept), never fatal.
 *
 * Feed bytes with `push` (or lines with `pushLine`), then call `finish` once.
 */
export class EventLogAnalyzer {
  private readonly maxOpen: number;
  private readonly maxEndpoints: number;
  private readonly keepMalformed: number;
  private readonly source: string | null;
  private readonly splitter: LineSplitter;
  private done = false;

  private lineCount = 0;
  private blank = 0;
  private attemptLines = 0;
  private resultLines = 0;
  private readonly otherTypes = new NameCounts(REPORT_DEFAULTS.maxNames);
  private malformedCount = 0;
  private readonly malformedLines: MalformedLine[] = [];
  private readonly malformedReasons = new NameCounts(REPORT_DEFAULTS.maxNames);

  private readonly open = new Map<string, OpenOp>();
  private readonly endpoints = new Map<string, EndpointAcc>();
  private endpointsFolded = false;

  private withResult = 0;
  private inferred = 0;
  private unfinished = 0;
  private evicted = 0;
  private readonly perOp = new Float64Array(REPORT_DEFAULTS.maxAttemptsBar + 1);
  private perOpMore = 0;
  private perOpMax = -1;
  private perOpSum = 0;
  private readonly reasons = new Float64Array(REPORT_DECISIONS.length);
  private readonly outcomes = new NameCounts(REPORT_DEFAULTS.maxNames);

  private retries = 0;
  private hedges = 0;
  private hedgesWon = 0;
  private readonly injected = { fault: 0, outcome: 0, latency: 0 };
  private readonly statuses = new Float64Array(600);
  private readonly errorClasses = new NameCounts(REPORT_DEFAULTS.maxNames);
  private readonly decisions = new Float64Array(REPORT_DECISIONS.length);
  private timeouts = 0;
  private readonly delays = new LogSketch();
  private readonly elapsed = new LogSketch();
  private raSeen = 0;
  private raValid = 0;
  private raInvalid = 0;

  private readonly seriesBuckets: number;
  private series: AdaptiveSeries | null = null;
  private timeField: 'ts' | 'time' | null = null;
  private lastTime = 0;
  private withoutTime = 0;

  constructor(options: ReportOptions = {}) {
    const int = (v: number | undefined, def: number, min: number, name: string): number => {
      if (v === undefined) return def;
      if (!Number.isInteger(v) || v < min) throw new RangeError(`EventLogAnalyzer: ${name} must be an integer ≥ ${min}, got ${String(v)}`);
      return v;
    };
    this.maxOpen = int(options.maxOpenOperations, REPORT_DEFAULTS.maxOpenOperations, 1, 'maxOpenOperations');
    this.maxEndpoints = int(options.maxEndpoints, REPORT_DEFAULTS.maxEndpoints, 1, 'maxEndpoints');
    this.keepMalformed = int(options.malformedLinesKept, REPORT_DEFAULTS.malformedLinesKept, 0, 'malformedLinesKept');
    this.seriesBuckets = int(options.seriesBuckets, REPORT_DEFAULTS.seriesBuckets, 10, 'seriesBuckets');
    const maxLineBytes = int(options.maxLineBytes, REPORT_DEFAULTS.maxLineBytes, 16, 'maxLineBytes');
    this.source = options.source ?? null;
    this.splitter = new LineSplitter((text, n) => this.pushLine(text, n), maxLineBytes);
  }

  /** Feeds bytes of the log (chunks may split lines anywhere). */
  push(chunk: Buffer | Uint8Array | string): void {
    if (this.done) throw new Error('EventLogAnalyzer: push after finish');
    this.splitter.push(chunk);
  }

  /** Feeds one line (without its newline); `null` is a line that was too long to read. */
  pushLine(text: string | null, lineNo = this.lineCount + 1): void {
    this.lineCount = lineNo;
    if (text === null) {
      this.bad(lineNo, 'line too long');
      return;
    }
    let i = 0;
    while (i < text.length && (text.charCodeAt(i) === 32 || text.charCodeAt(i) === 9)) i++;
    if (i === text.length) {
      this.blank++;
      return;
    }
    if (text.charCodeAt(i) !== 123 /* { */) {
      this.bad(lineNo, 'not a JSON object');
      return;
    }
    let o: unknown;
    try {
      o = JSON.parse(text);
    } catch {
      this.bad(lineNo, 'not valid JSON');
      return;
    }
    if (typeof o !== 'object' || o === null || Array.isArray(o)) {
      this.bad(lineNo, 'not a JSON object');
      return;
    }
    const ev = o as Json;
    const type = ev.type;
    if (type === 'attempt') this.attempt(ev, lineNo);
    else if (type === 'result') this.result(ev, lineNo);
    else if (typeof type === 'string') this.otherTypes.add(type);
    else this.bad(lineNo, 'no "type"');
  }

  private bad(line: number, reason: string): void {
    this.malformedCount++;
    if (this.malformedLines.length < this.keepMalformed) this.malformedLines.push({ line, reason });
    this.malformedReasons.add(reason);
  }

  private endpoint(raw: unknown): EndpointAcc {
    const key = typeof raw === 'string' && raw.length > 0 ? clip(safeEndpoint(raw), MAX_ENDPOINT) : NO_ENDPOINT;
    let acc = this.endpoints.get(key);
    if (acc) return acc;
    if (this.endpoints.size >= this.maxEndpoints) {
      this.endpointsFolded = true;
      acc = this.endpoints.get(OTHER_ENDPOINTS);
      if (acc) return acc;
      return this.newEndpoint(OTHER_ENDPOINTS);
    }
    return this.newEndpoint(key);
  }

  private newEndpoint(key: string): EndpointAcc {
    const acc: EndpointAcc = {
      key: printable(key),
      operations: 0,
      attempts: 0,
      returned: 0,
      retried: 0,
      retriedReturned: 0,
      timeouts: 0,
      unfinished: 0,
      reasons: new Float64Array(REPORT_DECISIONS.length),
    };
    this.endpoints.set(key, acc);
    return acc;
  }

  private attempt(o: Json, lineNo: number): void {
    const id = o.operationId;
    if (typeof id !== 'string' || id.length === 0) return this.bad(lineNo, 'attempt: "operationId" is not a non-empty string');
    const n = o.attempt;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1) return this.bad(lineNo, 'attempt: "attempt" is not a whole number ≥ 1');
    const d = typeof o.decision === 'string' ? DECISION_INDEX.get(o.decision) : undefined;
    if (d === undefined) return this.bad(lineNo, 'attempt: "decision" is not one of relent\'s decisions');
    const status = o.status ?? null;
    if (status !== null && (typeof status !== 'number' || !Number.isInteger(status) || status < 100 || status > 599))
      return this.bad(lineNo, 'attempt: "status" is not an HTTP status');
    const errorClass = o.errorClass ?? null;
    if (errorClass !== null && (typeof errorClass !== 'string' || errorClass.length === 0))
      return this.bad(lineNo, 'attempt: "errorClass" is not a non-empty string');
    if ((status === null) === (errorClass === null)) return this.bad(lineNo, 'attempt: needs exactly one of "status" and "errorClass"');
    if (o.endpoint !== undefined && o.endpoint !== null && typeof o.endpoint !== 'string') return this.bad(lineNo, 'attempt: "endpoint" is not a string');
    const delay = optNonNeg(o.delayMs);
    if (Number.isNaN(delay)) return this.bad(lineNo, 'attempt: "delayMs" is not a number ≥ 0');
    const elapsed = optNonNeg(o.elapsedMs);
    if (Number.isNaN(elapsed)) return this.bad(lineNo, 'attempt: "elapsedMs" is not a number ≥ 0');

    this.attemptLines++;
    const key = idKey(id);
    let op = this.open.get(key);
    if (op === undefined) {
      if (this.open.size >= this.maxOpen) this.evictOldest();
      op = { ep: this.endpoint(o.endpoint), maxAttempt: n, last: d, status: null, errorClass: null };
      this.open.set(key, op);
    }
    if (n >= op.maxAttempt) {
      op.maxAttempt = n;
      op.last = d;
      op.status = status as number | null;
      op.errorClass = errorClass as string | null;
    }
    const ep = op.ep;
    ep.attempts++;
    // A hedge is extra load of its own kind, not a retry.
    if (o.hedge === true) {
      this.hedges++;
      if (d === RETURN) this.hedgesWon++;
    } else if (n > 1) this.retries++;
    const inj = o.injected;
    if (inj === 'fault' || inj === 'outcome' || inj === 'latency') this.injected[inj]++;
    this.decisions[d]!++;
    if (status !== null) this.statuses[status as number]!++;
    else {
      this.errorClasses.add(errorClass as string);
      if (errorClass === 'timeout' || errorClass === 'connect_timeout') {
        this.timeouts++;
        ep.timeouts++;
      }
    }
    if (delay !== undefined) this.delays.add(delay);
    if (elapsed !== undefined) this.elapsed.add(elapsed);
    if (o.retryAfterValid === true || o.retryAfterValid === false) {
      this.raSeen++;
      if (o.retryAfterValid) this.raValid++;
      else this.raInvalid++;
    }

    // Load vs retries: by time when the first attempt carries one, else by line.
    if (this.series === null) {
      const t = timeOf(o);
      this.timeField = t ? t.field : null;
      this.series = new AdaptiveSeries(t ? 'ms' : 'lines', this.seriesBuckets);
    }
    let at = lineNo;
    if (this.timeField !== null) {
      const t = timeOf(o);
      if (t) this.lastTime = t.at;
      else this.withoutTime++;
      at = this.lastTime;
    }
    this.series.add(at, n, d !== RETURN);
  }

  private result(o: Json, lineNo: number): void {
    const id = o.operationId;
    if (typeof id !== 'string' || id.length === 0) return this.bad(lineNo, 'result: "operationId" is not a non-empty string');
    const r = typeof o.reason === 'string' ? DECISION_INDEX.get(o.reason) : undefined;
    if (r === undefined || !isTerminal(REPORT_DECISIONS[r]!)) return this.bad(lineNo, 'result: "reason" is not a terminal reason');
    const n = o.attempts;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) return this.bad(lineNo, 'result: "attempts" is not a whole number ≥ 0');
    const status = o.status ?? null;
    if (status !== null && (typeof status !== 'number' || !Number.isInteger(status) || status < 100 || status > 599))
      return this.bad(lineNo, 'result: "status" is not an HTTP status');
    const errorClass = o.errorClass ?? null;
    if (errorClass !== null && (typeof errorClass !== 'string' || errorClass.length === 0))
      return this.bad(lineNo, 'result: "errorClass" is not a non-empty string');
    if (status !== null && errorClass !== null) return this.bad(lineNo, 'result: has both "status" and "errorClass"');

    this.resultLines++;
    const key = idKey(id);
    const op = this.open.get(key);
    let ep: EndpointAcc;
    if (op !== undefined) {
      this.open.delete(key);
      ep = op.ep;
    } else {
      ep = this.endpoint(o.endpoint);
    }
    this.withResult++;
    this.end(ep, n, r, status as number | null, errorClass as string | null);
  }

  /** Counts an ended operation; nothing of it is kept. */
  private end(ep: EndpointAcc, attempts: number, reason: number, status: number | null, errorClass: string | null): void {
    if (attempts <= REPORT_DEFAULTS.maxAttemptsBar) this.perOp[attempts]!++;
    else this.perOpMore++;
    if (attempts > this.perOpMax) this.perOpMax = attempts;
    this.perOpSum += attempts;
    this.reasons[reason]!++;
    this.outcomes.add(status !== null ? statusClass(status) : errorClass !== null ? errorClass : 'no call');
    ep.operations++;
    ep.reasons[reason]!++;
    if (reason === RETURN) ep.returned++;
    if (attempts >= 2) {
      ep.retried++;
      if (reason === RETURN) ep.retriedReturned++;
    }
  }

  /** An operation that leaves the open set without a result line. */
  private close(op: OpenOp): void {
    if (!isTerminal(REPORT_DECISIONS[op.last]!)) {
      this.unfinished++;
      op.ep.unfinished++;
    } else {
      this.inferred++;
      this.end(op.ep, op.maxAttempt, op.last, op.status, op.errorClass);
    }
  }

  private evictOldest(): void {
    const first = this.open.entries().next();
    if (first.done) return;
    const [key, op] = first.value;
    this.open.delete(key);
    this.evicted++;
    this.close(op);
  }

  /** Ends the log (an unterminated last line still counts) and returns the report. Call once. */
  finish(): EventReport {
    if (this.done) throw new Error('EventLogAnalyzer: finish called twice');
    this.splitter.end();
    this.done = true;
    for (const op of this.open.values()) this.close(op);
    this.open.clear();
    return this.build();
  }

  private build(): EventReport {
    const ended = this.withResult + this.inferred;
    const seen = ended + this.unfinished;
    const share = (n: number, of: number): number => (of > 0 ? n / of : 0);

    const histogram: { attempts: number; operations: number; share: number }[] = [];
    for (let a = 0; a < this.perOp.length; a++)
      if (this.perOp[a]! > 0) histogram.push({ attempts: a, operations: this.perOp[a]!, share: share(this.perOp[a]!, ended) });

    const reasons: { reason: TerminalReason; operations: number; share: number }[] = [];
    REPORT_DECISIONS.forEach((d, i) => {
      if (isTerminal(d) && this.reasons[i]! > 0) reasons.push({ reason: d, operations: this.reasons[i]!, share: share(this.reasons[i]!, ended) });
    });

    const statusClasses: Record<string, number> = {};
    const statuses: { status: number; attempts: number }[] = [];
    for (let s = 100; s < 600; s++) {
      const c = this.statuses[s]!;
      if (c === 0) continue;
      statuses.push({ status: s, attempts: c });
      statusClasses[statusClass(s)] = (statusClasses[statusClass(s)] ?? 0) + c;
    }

    const endpointRows = [...this.endpoints.values()]
      .map((e) => endpointReport(e))
      .sort((a, b) => b.operations - a.operations || b.attempts - a.attempts || (a.endpoint < b.endpoint ? -1 : 1));
    const all: EndpointAcc = {
      key: 'all endpoints',
      operations: 0,
      attempts: 0,
      returned: 0,
      retried: 0,
      retriedReturned: 0,
      timeouts: 0,
      unfinished: 0,
      reasons: new Float64Array(REPORT_DECISIONS.length),
    };
    for (const e of this.endpoints.values()) {
      all.operations += e.operations;
      all.attempts += e.attempts;
      all.returned += e.returned;
      all.retried += e.retried;
      all.retriedReturned += e.retriedReturned;
      all.timeouts += e.timeouts;
      all.unfinished += e.unfinished;
      for (let i = 0; i < all.reasons.length; i++) all.reasons[i]! += e.reasons[i]!;
    }

    const series = this.series ?? new AdaptiveSeries('lines', this.seriesBuckets);
    const basis = this.timeField !== null ? 'time' : 'line';
    const note =
      this.timeField !== null
        ? `by time (the events' "${this.timeField}" field), buckets of ${series.bucketWidth} ms` +
          (this.withoutTime > 0 ? `; ${this.withoutTime} attempt${this.withoutTime === 1 ? '' : 's'} without a time counted at the last time seen` : '')
        : `by line order: the events carry no time (no "ts" or "time" field), buckets of ${series.bucketWidth} line${series.bucketWidth === 1 ? '' : 's'}`;

    return {
      source: this.source,
      lines: this.lineCount,
      blankLines: this.blank,
      events: { attempt: this.attemptLines, result: this.resultLines, other: this.otherTypes.record() },
      malformed: { count: this.malformedCount, lines: [...this.malformedLines], byReason: this.malformedReasons.record() },
      operations: { ended, withResult: this.withResult, inferred: this.inferred, unfinished: this.unfinished, evicted: this.evicted, maxOpen: this.maxOpen },
      load: {
        attempts: this.attemptLines,
        operations: seen,
        attemptsPerOperation: seen > 0 ? this.attemptLines / seen : null,
        retries: this.retries,
        retryShare: this.attemptLines > 0 ? this.retries / this.attemptLines : null,
      },
      hedging: {
        hedges: this.hedges,
        won: this.hedgesWon,
        extraLoad: seen > 0 ? this.hedges / seen : null,
      },
      chaos: ((i) => ({ injected: i, ...this.injected, share: this.attemptLines > 0 ? i / this.attemptLines : null }))(
        this.injected.fault + this.injected.outcome + this.injected.latency,
      ),
      attemptsPerOperation: {
        histogram,
        more: this.perOpMore > 0 ? { from: REPORT_DEFAULTS.maxAttemptsBar + 1, operations: this.perOpMore } : null,
        mean: ended > 0 ? this.perOpSum / ended : null,
        max: this.perOpMax >= 0 ? this.perOpMax : null,
      },
      reasons,
      outcomes: this.outcomes.record(),
      perAttempt: {
        statusClasses,
        statuses,
        errorClasses: this.errorClasses.entries().map(([errorClass, attempts]) => ({ errorClass, attempts })),
        decisions: REPORT_DECISIONS.map((decision, i) => ({ decision, attempts: this.decisions[i]! })).filter((x) => x.attempts > 0),
      },
      timeouts: { attempts: this.timeouts, share: this.attemptLines > 0 ? this.timeouts / this.attemptLines : null },
      delays: { ...this.delays.summary(), bins: this.delays.bins() },
      elapsed: { ...this.elapsed.summary(), bins: this.elapsed.bins() },
      retryAfter: { seen: this.raSeen, valid: this.raValid, invalid: this.raInvalid },
      retrySuccess: { overall: endpointReport(all), endpoints: endpointRows, endpointsFolded: this.endpointsFolded, thresholds: VERDICT_THRESHOLDS },
      series: {
        basis,
        field: this.timeField,
        unit: series.unit,
        bucketWidth: series.bucketWidth,
        buckets: series.buckets(),
        attemptsWithoutTime: this.withoutTime,
        note,
      },
    };
  }
}

function endpointReport(e: EndpointAcc): EndpointReport {
  const seen = e.operations + e.unfinished;
  const reasons: Partial<Record<TerminalReason, number>> = {};
  REPORT_DECISIONS.forEach((d, i) => {
    if (isTerminal(d) && e.reasons[i]! > 0) reasons[d] = e.reasons[i]!;
  });
  return {
    endpoint: e.key,
    operations: e.operations,
    attempts: e.attempts,
    attemptsPerOperation: seen > 0 ? e.attempts / seen : null,
    returned: e.returned,
    retried: e.retried,
    retriedReturned: e.retriedReturned,
    retrySuccessRate: e.retried > 0 ? e.retriedReturned / e.retried : null,
    timeouts: e.timeouts,
    timeoutShare: e.attempts > 0 ? e.timeouts / e.attempts : null,
    unfinished: e.unfinished,
    reasons,
    verdict: retryVerdict(e.retried, e.retriedReturned),
  };
}

/** Analyses a log already in memory (tests, small logs). */
export function analyzeEventText(text: string, options: ReportOptions = {}): EventReport {
  const a = new EventLogAnalyzer(options);
  a.push(text);
  return a.finish();
}

/** Analyses a stream of the log's bytes chunk by chunk (one chunk in memory at a time). */
export async function analyzeEventStream(stream: AsyncIterable<Buffer | Uint8Array | string>, options: ReportOptions = {}): Promise<EventReport> {
  const a = new EventLogAnalyzer(options);
  for await (const chunk of stream) a.push(chunk);
  return a.finish();
}

/** Analyses a log file, or standard input for `-`. */
export async function analyzeEventFile(path: string, options: ReportOptions = {}): Promise<EventReport> {
  const stream = path === '-' ? process.stdin : createReadStream(path, { highWaterMark: 1024 * 1024 });
  return analyzeEventStream(stream, { source: path === '-' ? 'standard input' : path, ...options });
}
