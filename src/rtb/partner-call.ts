// One call to a partner in one auction (PartnerCall: the attempt function given to
// execute(), its breaker verdict and its slot) and the HTTP request of each attempt
// (PartnerRequest, an undici dispatch handler with the late-answer grace).
import type { Dispatcher } from 'undici';
import type { BreakerOutcome } from '../core/breaker.js';
import { limitDropped } from '../core/concurrency.js';
import type { Clock } from '../core/types.js';
import { classifyWireError, WireError } from '../core/wire.js';
import type { BreakerVerdict } from '../run/guard.js';
import type { AttemptContext, Classified } from '../run/run.js';
import { answerBreakerOutcome, classifyBidAnswer, tooLargeAnswer, type PartnerAnswer } from './answer.js';
import type { Partner } from './partner.js';

/** The observation an answer gives the decision core: its status, and the nbr of a no-bid. */
export function answerObservation(a: PartnerAnswer): Classified {
  if (a.kind === 'no_bid' && a.nbr !== null) return { status: a.status, nbr: a.nbr };
  return { status: a.status };
}

/** How a partner call reports to its auction. */
export interface CallOwner {
  /** The request body with `tmax` set to the given value (the partner's real time). */
  body(tmaxMs: number): string;
  /** The BidRequest.id (answers with another id are errors). */
  readonly requestId: string;
  readonly clock: Clock;
}

/**
 * One partner call in one auction: the attempt function given to execute(), the
 * breaker verdict of its answer, and the bulkhead slot, held until every request of
 * the call has left the socket (late-answer grace included), so the cap counts real
 * connections.
 */
export class PartnerCall {
  private answerVerdict: BreakerOutcome | null = null;
  /** The latest attempt's request. */
  private current: PartnerRequest | null = null;
  private open = 0;
  private settled = false;
  private released = false;
  /** The tmax sent on the latest attempt. */
  tmaxMs = 0;
  attempts = 0;
  /** The adaptive limit's generation when the call took its slot. */
  private readonly generation: number;
  /**
   * What the adaptive limit learns from the call (its latest attempt): when it was sent,
   * when it ended, whether the partner signalled overload; null when it tells nothing
   * (no attempt ended, or the auction's own deadline cut it short).
   */
  private sampleStart = 0;
  private sampleEnd = -1;
  private sampleDropped = false;

  constructor(
    readonly partner: Partner,
    readonly owner: CallOwner,
  ) {
    this.generation = partner.limit?.generation ?? 0;
  }

  /**
   * The call's verdict for the guard's breaker (a hook of the guard, see BreakerVerdict):
   * its own verdict on an answer replaces the core's generic one (a malformed 200 or a 400
   * is a failure for an auction; see `classifyBidAnswer`). A cut whose request is still
   * open is decided at the end of its grace (see LATE_EXCUSE_MS); failures without an
   * answer and `ignored` pass through unchanged.
   */
  readonly breakerVerdict: BreakerVerdict = (_obs, outcome, later) => {
    const v = this.takeVerdict();
    if (v === null && outcome === 'failure' && this.current !== null && this.current.deferVerdict(later)) return 'later';
    return v !== null && outcome !== 'ignored' ? v : outcome;
  };

  /**
   * An attempt ended: with an answer (`status`), a wire error (`errorClass`), or the cut
   * at the end of its time. A throttling answer (the policy's throttle statuses, 429, or a
   * 503) or a refused connection is a
   * drop; a cut is a latency sample of the full `timeoutMs` when the attempt had it
   * (the partner did not answer in its time), and no sample when the auction's deadline
   * made it shorter (nothing is known of the partner then).
   */
  noteEnd(startedAt: number, now: number, status: number | null, errorClass: string | null, cutTimeMs: number | null): void {
    if (this.partner.limit === null) return;
    if (cutTimeMs !== null && cutTimeMs < this.partner.config.timeoutMs) {
      this.sampleEnd = -1;
      return;
    }
    this.sampleStart = startedAt;
    this.sampleEnd = now;
    this.sampleDropped = limitDropped(this.partner.policy.throttleStatuses, status, errorClass);
  }

  takeVerdict(): BreakerOutcome | null {
    const v = this.answerVerdict;
    this.answerVerdict = null;
    return v;
  }

  /** The attempt function (one network call). */
  readonly attempt = (ctx: AttemptContext): Promise<PartnerAnswer> => {
    this.answerVerdict = null;
    this.attempts++;
    const p = this.partner;
    // The partner's real time: what this attempt may take (min of its timeout and the time left).
    const tmax = Math.max(1, Math.floor(ctx.timeoutMs));
    this.tmaxMs = tmax;
    p.counters.lastTmaxMs = tmax;
    const body = this.owner.body(tmax);
    return new Promise<PartnerAnswer>((resolve, reject) => {
      const req = new PartnerRequest(this, resolve, reject, p.config.maxResponseBytes, p.config.lateGraceMs, this.owner.clock, ctx.timeoutMs);
      this.current = req;
      this.open++;
      try {
        p.dispatcher.dispatch({ origin: p.origin, path: p.path, method: 'POST', headers: p.headers as string[], body }, req);
      } catch (e) {
        req.fail(e);
      }
    });
  };

  setVerdict(v: BreakerOutcome): void {
    this.answerVerdict = v;
  }

  requestDone(): void {
    this.open--;
    this.maybeRelease();
  }

  /** execute() has ended. */
  settle(): void {
    this.settled = true;
    this.maybeRelease();
  }

  private maybeRelease(): void {
    if (this.settled && this.open === 0 && !this.released) {
      this.released = true;
      const limit = this.partner.limit;
      if (limit === null) this.partner.bulkhead.release();
      else
        limit.release(
          this.sampleEnd < 0 ? null : { startedAt: this.sampleStart, now: this.sampleEnd, generation: this.generation, dropped: this.sampleDropped },
        );
    }
  }
}

type Controller = Dispatcher.DispatchController;

/**
 * A partner's answer read at most this long after its cut is no failure of the partner
 * for its breaker (nor a success): it cannot be told apart from an answer that was on
 * time and read late because this process was busy (a timer fires late, and the socket
 * is read after the timers of that turn), which is what a fresh exchange under full
 * traffic does for its first second. Answers later than this, and none at all within
 * `lateGraceMs`, are failures; the breaker learns of a cut at the end of its grace. 5 ms
 * is the exchange's own bound on a late answer of its own.
 */
export const LATE_EXCUSE_MS = 5;

const CUT = Object.assign(new Error("relent: the partner's time is over"), { code: 'ERR_RELENT_PARTNER_CUT' });
const TOO_LARGE = Object.assign(new Error('relent: the answer is over the size limit'), { code: 'ERR_RELENT_TOO_LARGE' });

/**
 * One HTTP request to a partner (an undici dispatch handler). It settles its attempt
 * once: with an answer (at the end of a 200's body, at the head of any other status),
 * or with a WireError that says whether the request was sent. When the executor cuts
 * the attempt (the partner's time is over), the request stays open `lateGraceMs` longer,
 * only to count an answer that arrives late; it is then dropped.
 */
class PartnerRequest implements Dispatcher.DispatchHandler {
  private controller: Controller | null = null;
  private pendingAbort: Error | null = null;
  private started = false;
  private headed = false;
  private status = 0;
  private chunks: Buffer[] | null = null;
  private bytes = 0;
  private answered = false;
  private done = false;
  private cutAt = -1;
  /** The breaker's verdict on this cut request, waiting for the end of its grace (see LATE_EXCUSE_MS). */
  private deferred: ((outcome: BreakerOutcome, wallNow: number) => void) | null = null;
  /** Cancels the pending timer: the cut at first, then the end of the grace. */
  private cancelTimer: (() => void) | null = null;
  private readonly startedAt: number;

  constructor(
    private readonly call: PartnerCall,
    private readonly resolve: (a: PartnerAnswer) => void,
    private readonly reject: (e: unknown) => void,
    private readonly maxBytes: number,
    private readonly graceMs: number,
    private readonly clock: Clock,
    private readonly timeoutMs: number,
  ) {
    this.startedAt = clock.now();
    // The cut, due when the executor's own attempt timer is (same time, same clock): the
    // executor decides the attempt (a timeout); this request only learns that its time is
    // over. (A timer rather than ctx.signal: no AbortController per attempt; lazy timers
    // cost nothing when the answer comes first.)
    this.cancelTimer = clock.setTimer(this.onCut, timeoutMs, this.startedAt);
  }

  onRequestStart(controller: Controller): void {
    this.controller = controller;
    this.started = true;
    if (this.pendingAbort !== null) controller.abort(this.pendingAbort);
  }

  onResponseStart(controller: Controller, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    if (statusCode < 200) return; // 1xx
    this.controller = controller;
    this.headed = true;
    this.status = statusCode;
    if (this.cutAt >= 0) {
      // A late answer: counted, dropped (its body is drained within the grace, if it fits).
      const c = this.call.partner.counters;
      const now = this.clock.now();
      const late = now - this.cutAt;
      c.late++;
      if (late > c.lateMaxMs) c.lateMaxMs = late;
      this.settleBreaker(late <= LATE_EXCUSE_MS && (statusCode === 200 || statusCode === 204) ? 'ignored' : 'failure');
      return;
    }
    if (statusCode === 200) {
      const len = Number(headers['content-length']);
      if (Number.isFinite(len) && len > this.maxBytes) {
        this.answer(tooLargeAnswer(200, len, this.maxBytes));
        this.abort(TOO_LARGE);
        return;
      }
      this.chunks = [];
    } else if (statusCode !== 204) {
      // An error status is known at the head: the attempt ends now, the body is drained.
      this.answer(classifyBidAnswer(statusCode, null));
    }
  }

  onResponseData(_controller: Controller, chunk: Buffer): void {
    this.bytes += chunk.length;
    if (this.bytes > this.maxBytes) {
      if (this.cutAt < 0) this.answer(tooLargeAnswer(this.status, this.bytes, this.maxBytes));
      this.chunks = null;
      this.abort(TOO_LARGE);
      return;
    }
    if (this.chunks !== null) this.chunks.push(chunk);
  }

  onResponseEnd(): void {
    if (this.done) return;
    const chunks = this.chunks;
    this.chunks = null;
    this.finish();
    if (this.cutAt >= 0 || this.answered) return;
    if (this.status === 200) {
      const body = chunks === null || chunks.length === 0 ? null : chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      this.answer(classifyBidAnswer(200, body, this.call.owner.requestId));
    } else this.answer(classifyBidAnswer(this.status, null));
  }

  onResponseError(_controller: Controller, error: Error): void {
    if (this.done) return;
    this.finish();
    if (this.answered || this.cutAt >= 0) return;
    this.answered = true;
    const e = new WireError(error, classifyWireError(error, this.started ? 'after_request' : 'before_request'));
    this.call.noteEnd(this.startedAt, this.clock.now(), null, e.errorClass, null);
    this.reject(e);
  }

  /** dispatch() threw (e.g. the dispatcher is closed). */
  fail(error: unknown): void {
    if (this.done) return;
    this.finish();
    this.answered = true;
    const e = new WireError(error, classifyWireError(error, 'before_request'));
    this.call.noteEnd(this.startedAt, this.clock.now(), null, e.errorClass, null);
    this.reject(e);
  }

  /** The partner's time is over: wait out the grace (to count a late answer), then drop the request. */
  private readonly onCut = (): void => {
    this.cancelTimer = null;
    if (this.done) return;
    if (this.answered) {
      // Answered at the head (an error status) and still draining its body at the cut: drop it.
      this.abort(CUT);
      return;
    }
    this.cutAt = this.clock.now();
    this.call.noteEnd(this.startedAt, this.cutAt, null, null, this.timeoutMs);
    if (this.graceMs > 0) this.cancelTimer = this.clock.setTimer(() => this.abort(CUT), this.graceMs, this.cutAt);
    else this.abort(CUT);
  };

  private answer(a: PartnerAnswer): void {
    if (this.answered) return;
    this.answered = true;
    const c = this.call.partner.counters;
    const now = this.clock.now();
    c.latency.record(now - this.startedAt);
    this.call.noteEnd(this.startedAt, now, a.status, null, null);
    this.call.setVerdict(answerBreakerOutcome(a));
    this.resolve(a);
  }

  private abort(reason: Error): void {
    if (this.done) return;
    if (this.controller !== null) this.controller.abort(reason);
    else this.pendingAbort = reason;
  }

  /** Takes the breaker's verdict of this cut request, to give at the end of its grace; false when it has ended already. */
  deferVerdict(later: (outcome: BreakerOutcome, wallNow: number) => void): boolean {
    if (this.answered || this.done) return false;
    this.deferred = later;
    return true;
  }

  /** Breakers keep wall time (shared across processes through the fleet): the verdict is given at the wall clock of now. */
  private settleBreaker(outcome: BreakerOutcome): void {
    const later = this.deferred;
    if (later === null) return;
    this.deferred = null;
    later(outcome, this.clock.wallNow());
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    // No answer within the grace (or a wire error after the cut): the cut was the partner's.
    this.settleBreaker('failure');
    if (this.cancelTimer !== null) {
      this.cancelTimer();
      this.cancelTimer = null;
    }
    this.call.requestDone();
  }
}
