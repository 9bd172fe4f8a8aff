// One auction, from the parsed request to its outcome: the checks that can answer at
// once (closing, invalid request, disabled source, no time left), the window (the tmax
// cut), the fan-out to every partner through execute(), the answers collected until the
// deadline, and the summary. The response it answers with is built by auction-response.ts.
import type { Clock } from '../core/types.js';
import { execute, type RunResult, type WorkScope } from '../run/run.js';
import type { PartnerAnswer } from './answer.js';
import { buildResponse } from './auction-response.js';
import type { ExchangeCore } from './exchange-core.js';
import type { AuctionOutcome, AuctionReason, AuctionSummary, PartnerOutcome, PartnerResult } from './exchange-types.js';
import { auctionCurrency, checkBidRequest, sourceIdOf, type BidRequest } from './model.js';
import type { Partner, SkipReason } from './partner.js';
import { answerObservation, PartnerCall, type CallOwner } from './partner-call.js';
import { selectWinners, type Candidate } from './select.js';
import { bump, round } from './stats.js';

let auctionCounter = 0;
const auctionPrefix = Math.floor(Math.random() * 0xffffff).toString(36);

/** An auction's outcome and the firing of its notices, which waits until the answer is written. */
export interface Finished {
  readonly outcome: AuctionOutcome;
  readonly fire: (() => void) | null;
}

/** Runs one auction of `input` (a parsed BidRequest, or its JSON text or bytes) that arrived at `arrivedAt`. */
export function runAuction(core: ExchangeCore, input: unknown, arrivedAt: number): Promise<Finished> {
  const cfg = core.config;
  const early = (status: 204 | 400, reason: AuctionReason, field: string | null, imps = 0, tmax: number | null = null): Promise<Finished> =>
    Promise.resolve({ outcome: earlyOutcome(status, reason, field, imps, core.clock.now() - arrivedAt, tmax), fire: null });
  if (core.stopping) return early(204, 'closing', null);
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
      return early(
        400,
        'invalid_request',
        `imp[${i}].bidfloorcur: ${JSON.stringify(String(imp.bidfloorcur ?? 'USD').slice(0, 8))} is not the auction currency ${currency} (no conversion)`,
        request.imp.length,
      );
    }
  }
  const tmaxGiven = typeof request.tmax === 'number' && request.tmax > 0;
  const tmax = tmaxGiven ? request.tmax! : cfg.defaultTmaxMs;
  const source = sourceIdOf(request);
  if (source !== null && core.disabledSources.has(source)) return early(204, 'source_disabled', null, request.imp.length, tmax);
  let base: string;
  try {
    // Serialised once; each partner's body only differs in tmax (spliced in front).
    const { tmax: _tmax, ...rest } = request;
    base = JSON.stringify(rest);
  } catch {
    return early(400, 'invalid_request', '(body): cannot be re-encoded');
  }
  const now = core.clock.now();
  const spent = now - arrivedAt;
  const windowMs = Math.min(cfg.auctionTimeoutMs, tmax - spent - cfg.reserveMs);
  if (!(windowMs >= 1)) return early(204, 'no_time', null, request.imp.length, tmax);
  const auction = new Auction(core, request, base, currency, arrivedAt, now, windowMs, tmax, tmaxGiven);
  return auction.start();
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

const NO_PARTNERS = Object.freeze({ asked: 0, bid: 0, noBid: 0, error: 0, timeout: 0, skipped: 0 });
const NO_BIDS = Object.freeze({ received: 0, valid: 0, won: 0, rejected: Object.freeze({}) });

/** The outcome of a request answered without a fan-out (204 or 400): no partner asked, no bids. */
export function earlyOutcome(
  status: 204 | 400,
  reason: AuctionReason,
  field: string | null,
  imps: number,
  spentMs: number,
  tmax: number | null,
): AuctionOutcome {
  return {
    status,
    body: null,
    reason,
    summary: {
      type: 'auction',
      auctionId: `${auctionPrefix}-${(++auctionCounter).toString(36)}`,
      status,
      reason,
      invalidField: field,
      imps,
      tmaxMs: tmax,
      tmaxGiven: false,
      spentMs: round(spentMs),
      windowMs: null,
      deadlineMs: null,
      usedMs: 0,
      partners: NO_PARTNERS,
      noBidReasons: {},
      errors: {},
      skipped: {},
      bids: NO_BIDS,
      results: [],
    },
  };
}

/** Starts every partner call of an auction (a plain function: it runs inside the auction's span). */
function callAll(a: Auction): void {
  for (const p of a.core.partners) a.call(p);
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
    readonly core: ExchangeCore,
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
    this.clock = core.lanes.calls;
    this.requestId = request.id;
    this.deadlineAt = startedAt + windowMs;
    this.results = new Array<PartnerResult | null>(core.partners.length).fill(null);
    this.calls = new Array<PartnerCall | null>(core.partners.length).fill(null);
  }

  body(tmaxMs: number): string {
    return `{"tmax":${tmaxMs},${this.base.slice(1)}`;
  }

  start(): Promise<Finished> {
    const inst = this.core.instrumentation;
    if (inst !== null && inst.work !== undefined) {
      this.work = inst.work({
        name: 'auction',
        attributes: {
          'relent.auction.id': this.id,
          'relent.auction.imps': this.request.imp.length,
          'relent.auction.tmax_ms': this.tmaxMs,
          'relent.auction.window_ms': Math.round(this.windowMs),
        },
      });
    }
    return new Promise<Finished>((resolve) => {
      this.resolve = resolve;
      // The partner calls start inside the auction's span: they are its children.
      if (this.work !== null) this.work.run(callAll, this);
      else callAll(this);
      if (this.pending === 0) this.finish();
      else if (!this.closed) this.cancelTimer = this.core.lanes.answers.setTimer(this.onDeadline, this.deadlineAt - this.clock.now());
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
        random: this.core.random,
        onEvent: this.core.onEvent,
        instrumentation: this.core.partnerInstrumentation[p.index] ?? null,
      });
    } catch (e) {
      run = Promise.reject(e);
    }
    run.then(
      (r) => this.done(p, call, r),
      () => this.done(p, call, null),
    );
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
    const partners = this.core.partners;
    let asked = 0,
      bid = 0,
      noBid = 0,
      error = 0,
      timeout = 0,
      skipped = 0;
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
        case 'bid':
          asked++;
          bid++;
          break;
        case 'no_bid':
          asked++;
          noBid++;
          bump(noBidReasons, r.nbr !== null ? `nbr:${r.nbr}` : (r.noBidForm ?? 'no_bid'));
          break;
        case 'error':
          asked++;
          error++;
          bump(errors, r.error ?? 'error');
          break;
        case 'timeout':
          asked++;
          timeout++;
          break;
        default:
          skipped++;
          bump(skips, r.outcome.slice('skipped_'.length));
      }
    }
    const sel = selectWinners(this.request, this.candidates, this.currency);
    const { body, fire } = buildResponse(this.core, this, sel, this.candidates);
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
          'relent.auction.status': status,
          'relent.auction.reason': summary.reason,
          'relent.auction.partners.asked': asked,
          'relent.auction.partners.bid': bid,
          'relent.auction.partners.no_bid': noBid,
          'relent.auction.partners.error': error,
          'relent.auction.partners.timeout': timeout,
          'relent.auction.partners.skipped': skipped,
          'relent.auction.bids.won': sel.winners.length,
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
  partner: string,
  outcome: PartnerOutcome,
  ms: number | null,
  attempts: number,
  tmaxMs: number | null,
  extra: { status?: number | null; error?: string | null; noBidForm?: string | null; nbr?: number | null; bids?: number } = {},
): PartnerResult {
  return {
    partner,
    outcome,
    ms,
    attempts,
    tmaxMs,
    status: extra.status ?? null,
    error: extra.error ?? null,
    noBidForm: extra.noBidForm ?? null,
    nbr: extra.nbr ?? null,
    bids: extra.bids ?? 0,
  };
}
