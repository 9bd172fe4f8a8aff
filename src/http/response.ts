// How a client.fetch call ends for its caller: the committed attempt as a WHATWG
// Response (its body streamed under the deadline), or a RelentFetchError.
import type { Policy } from '../core/policy.js';
import type { Clock, TerminalReason } from '../core/types.js';
import type { RunResult } from '../run/run.js';
import { AttemptHandler, type BodySink } from './attempt.js';
import { bodyDeadlineError, failureError, notReplayableError, RelentFetchError, tooLongError, waitTooLong } from './errors.js';
import { asError, type Call } from './operation.js';
import type { Prepared } from './request.js';

const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);
export const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

export function settle(
  r: RunResult<AttemptHandler | Response>,
  call: Call,
  req: Prepared,
  policy: Policy,
  where: () => string,
  streamLimited: boolean,
  limit: BoundBodyLimit | null,
): Response {
  if (r.outcome.ok) {
    const v = r.outcome.value;
    if (!(v instanceof AttemptHandler)) {
      call.release();
      return v; // the state check's Response
    }
    call.current = v;
    // Hedging: the answer is this attempt's; the others' bodies never reach the caller.
    call.discardOthers(v);
    const tooLong = waitTooLong(r);
    if (tooLong !== null) throw tooLongError(r, tooLong, policy, where(), v.status, toResponse(v, req, call, limit, true));
    if (streamLimited && r.reason === 'max_attempts')
      throw notReplayableError(r, where(), { status: v.status, response: toResponse(v, req, call, limit, true) });
    if (req.redirect === 'error' && REDIRECT_STATUSES.has(v.status)) {
      v.discard();
      call.release();
      throw unexpectedRedirect(v.status, r.reason, r, where());
    }
    return toResponse(v, req, call, limit, false);
  }
  // Nothing of a response is handed over: let its connection go.
  call.current?.discard();
  call.discardOthers(null);
  call.release();
  throw failureError(r, r.outcome.error, where(), streamLimited);
}

/** A 3xx answer with `redirect: "error"`. */
export function unexpectedRedirect(
  status: number,
  reason: TerminalReason,
  r: { readonly operationId: string; readonly attempts: number },
  where: string,
): RelentFetchError {
  return new RelentFetchError('ERR_NOT_RETRYABLE', `return: unexpected redirect (${status}) with redirect: "error" (${where})`, {
    reason,
    attempts: r.attempts,
    operationId: r.operationId,
    status,
  });
}

/** The deadline over a response body: the operation's time left when it answered, and what its error names. */
export interface BoundBodyLimit {
  readonly clock: Clock;
  readonly remainingMs: number;
  /** The operation's deadline, for the error message. */
  readonly deadlineMs: number;
  where(): string;
  result(): { readonly operationId: string; readonly attempts: number };
}

/** The body limit of an operation the executor ran (not a literal: see RunResultRecord in run.ts). */
export class BoundLimit implements BoundBodyLimit {
  constructor(
    readonly clock: Clock,
    readonly remainingMs: number,
    readonly deadlineMs: number,
    private readonly whereFn: () => string,
    private readonly r: RunResult<unknown>,
  ) {}

  where(): string {
    return this.whereFn();
  }

  result(): RunResult<unknown> {
    return this.r;
  }
}

/** The promise of a call: its executor hands the functions to the call (no closure per call). */
/**
 * A committed attempt as a WHATWG Response whose body streams from the socket with
 * backpressure, under the body deadline when one is given. A Response handed over on
 * an error (`forError`) carries no secret: its `url` has no query or fragment, and the
 * server's Set-Cookie is dropped (an error may be logged whole).
 */
export function toResponse(h: AttemptHandler, req: Prepared, call: Call, limit: BoundBodyLimit | null, forError: boolean): Response {
  const nullBody = NULL_BODY_STATUSES.has(h.status) || req.method === 'HEAD';
  let body: ReadableStream<Uint8Array> | null = null;
  if (nullBody) {
    h.drain();
    call.release();
  } else {
    const source = new WebBody(h, call, limit);
    // Deno keeps a Response's stream, and the stream its source, under symbol keys that an
    // error logged whole would walk down to the handler (the request's URL and headers, the
    // server's Set-Cookie): a Response for an error reaches its source through closures only.
    body = new ReadableStream<Uint8Array>(forError ? sealed(source) : source, BODY_QUEUE);
  }
  let res: Response;
  try {
    res = new Response(body, { status: h.status, statusText: h.statusText });
  } catch {
    res = new Response(body, { status: h.status }); // a reason phrase a Response refuses
  }
  // Appended to the Response's own headers, with the checks a `headers` init gets (on
  // Node 20 converting an init's headers first costs ~2 µs more).
  const out = res.headers;
  const hs = h.headers;
  for (const name in hs) {
    const v = hs[name];
    if (v === undefined || (forError && (name === 'set-cookie' || name === 'set-cookie2'))) continue;
    if (typeof v === 'string') out.append(name, v);
    else for (const x of v) out.append(name, x);
  }
  const hist = h.history;
  const final = hist !== null && hist.length > 0 ? hist[hist.length - 1]! : req.url;
  let url: string;
  if (forError) url = final.origin + final.pathname;
  else {
    const href = final.href;
    const hash = href.indexOf('#');
    url = hash < 0 ? href : href.slice(0, hash);
  }
  Object.defineProperty(res, 'url', { value: url, enumerable: true });
  if (hist !== null && hist.length > 1) Object.defineProperty(res, 'redirected', { value: true, enumerable: true });
  return res;
}

/**
 * The body as a web stream's source: backpressure pauses the socket; the caller's
 * signal (via `call`) aborts it, and so does the deadline when `limit` is given. One
 * object (the stream calls its methods with it as `this`), not a closure per method.
 */
class WebBody implements BodySink {
  private c: ReadableStreamDefaultController<Uint8Array> | null = null;
  private done = false;
  private cancelTimer: (() => void) | null = null;

  constructor(
    private readonly h: AttemptHandler,
    private readonly call: Call,
    private readonly limit: BoundBodyLimit | null,
  ) {}

  start(c: ReadableStreamDefaultController<Uint8Array>): void {
    this.c = c;
    this.h.attach(this);
    const limit = this.limit;
    if (this.done || limit === null) return;
    if (limit.remainingMs <= 0) this.expire();
    else this.cancelTimer = limit.clock.setTimer(() => this.expire(), limit.remainingMs);
  }

  pull(): void {
    this.h.resume();
  }

  cancel(reason: unknown): void {
    this.finish();
    this.h.abort(asError(reason));
  }

  data(chunk: Buffer): void {
    if (this.done) return;
    const c = this.c!;
    c.enqueue(chunk);
    if ((c.desiredSize ?? 0) <= 0) this.h.pause();
  }

  end(): void {
    if (this.done) return;
    this.finish();
    this.c!.close();
  }

  error(e: Error): void {
    if (this.done) return;
    this.finish();
    this.c!.error(e);
  }

  private expire(): void {
    this.cancelTimer = null;
    if (this.done) return;
    const limit = this.limit!;
    const e = bodyDeadlineError(limit.result(), limit.deadlineMs, limit.where(), this.h.status);
    this.finish();
    this.c!.error(e);
    this.h.abort(e);
  }

  private finish(): void {
    this.done = true;
    if (this.cancelTimer !== null) {
      this.cancelTimer();
      this.cancelTimer = null;
    }
    this.call.release();
  }
}

/** A body source whose methods call `s`, with nothing of `s` reachable as a property. */
function sealed(s: WebBody): { start(c: ReadableStreamDefaultController<Uint8Array>): void; pull(): void; cancel(reason: unknown): void } {
  return { start: (c) => s.start(c), pull: () => s.pull(), cancel: (reason) => s.cancel(reason) };
}

/**
 * Up to 64 KiB of body are read ahead (as undici's own request() does), so a small
 * response completes and frees its connection even before the caller reads it.
 */
const BODY_QUEUE: QueuingStrategy<Uint8Array> = { highWaterMark: 64 * 1024, size: (chunk) => chunk.byteLength };
