import type { Dispatcher } from 'undici';
import { classifyWireError, WireError } from '../core/wire.js';

type Controller = Dispatcher.DispatchController;
type Headers = Record<string, string | string[] | undefined>;

/** Where the body of a committed response goes (a web stream, or an outer undici handler). */
export interface BodySink {
  data(chunk: Buffer): void;
  end(trailers: Headers): void;
  error(error: Error): void;
}

/** Told once how an attempt's head settled: the driver's own first attempt (see FirstAttempt in first-attempt.ts), without closures. */
export interface HeadListener {
  attemptAnswered(h: AttemptHandler): void;
  attemptFailed(error: unknown): void;
}

/** How much of a failed attempt's body is read (and kept) so that its socket can be reused. */
export const DRAIN_LIMIT_BYTES = 64 * 1024;

/**
 * One network call through an undici dispatcher, as a new-API dispatch handler.
 *
 * It settles once per attempt, at the response head (status and headers) or at the
 * failure, and records whether undici started writing the request (`onRequestStart`):
 * that is what makes a failure `not_sent` or `unknown` (see classify.ts). Body chunks
 * that arrive before the driver decides are queued; the driver then either commits to
 * the response (`attach` a sink: the body flows with backpressure) or drains it
 * (`drain`: the body is read into memory up to DRAIN_LIMIT_BYTES so the connection goes
 * back to the pool, and is still there if the executor ends up returning this response
 * after all).
 */
export class AttemptHandler implements Dispatcher.DispatchHandler, PromiseLike<AttemptHandler> {
  /** undici handed the request to a connected socket and began writing it. */
  started = false;
  /** The response head arrived. */
  headed = false;
  status = 0;
  statusText = '';
  headers: Headers = {};
  /** The request's redirect history (URLs), when a redirect interceptor follows them. */
  history: readonly URL[] | null = null;

  private controller: Controller | null = null;
  private abortReason: Error | null = null;
  private queue: Buffer[] | null = null;
  private queued = 0;
  private ended = false;
  private trailers: Headers = {};
  private failure: Error | null = null;
  private sink: BodySink | null = null;
  private discarded = false;
  /** The body was cut short (discarded while over the drain limit). */
  truncated = false;

  /** How the attempt settled at its head: 0 not yet, 1 answered, 2 failed (with `headError`). */
  private headState = 0;
  private headError: WireError | null = null;
  private onHead: ((h: AttemptHandler) => unknown) | null = null;
  private onHeadError: ((e: unknown) => unknown) | null = null;
  private listener: HeadListener | null = null;

  constructor(
    /** Statuses the driver cannot represent (e.g. outside 200–599 for a WHATWG Response) fail as `protocol`. */
    private readonly acceptStatus: ((status: number) => boolean) | null = null,
  ) {}

  /**
   * The attempt as the executor awaits it: settles at the response head or the failure.
   * One subscriber (the executor), told synchronously: no promise and no microtask
   * between the head and the decision.
   */
  then<A = AttemptHandler, B = never>(
    onHead?: ((h: AttemptHandler) => A | PromiseLike<A>) | null,
    onError?: ((e: unknown) => B | PromiseLike<B>) | null,
  ): PromiseLike<A | B> {
    this.onHead = onHead ?? null;
    this.onHeadError = onError ?? null;
    this.notify();
    return undefined as unknown as PromiseLike<A | B>;
  }

  /** As `then`, for a listener object (one subscriber, told synchronously). */
  listen(l: HeadListener): void {
    this.listener = l;
    this.notify();
  }

  private resolveHead(_h: AttemptHandler): void {
    if (this.headState !== 0) return;
    this.headState = 1;
    this.notify();
  }

  private rejectHead(e: WireError): void {
    if (this.headState !== 0) return;
    this.headState = 2;
    this.headError = e;
    this.notify();
  }

  /** Tells the subscriber, once, how the head settled. */
  private notify(): void {
    if (this.headState === 0) return;
    const l = this.listener;
    if (l !== null) {
      this.listener = null;
      if (this.headState === 1) l.attemptAnswered(this);
      else l.attemptFailed(this.headError);
      return;
    }
    const ok = this.onHead;
    const fail = this.onHeadError;
    this.onHead = null;
    this.onHeadError = null;
    if (this.headState === 1) {
      if (ok !== null) ok(this);
    } else if (fail !== null) fail(this.headError);
  }

  /** dispatch() threw: the attempt failed before it started. */
  failToStart(error: unknown): void {
    const e = error instanceof Error ? error : new Error(String(error));
    this.rejectHead(new WireError(e, classifyWireError(e, 'before_request')));
  }

  onRequestStart(controller: Controller, context: unknown): void {
    this.started = true;
    this.controller = controller;
    const history = (context as { history?: unknown } | null)?.history;
    if (Array.isArray(history)) this.history = history as URL[];
    if (this.abortReason !== null) controller.abort(this.abortReason);
  }

  onResponseStart(controller: Controller, statusCode: number, headers: Headers, statusMessage?: string): void {
    if (statusCode < 200) return; // 1xx informational
    this.controller = controller;
    if (this.acceptStatus !== null && !this.acceptStatus(statusCode)) {
      const error = Object.assign(new Error(`invalid HTTP status ${statusCode}`), { code: 'HPE_INVALID_STATUS' });
      controller.abort(error);
      return;
    }
    this.headed = true;
    this.status = statusCode;
    this.statusText = statusMessage ?? '';
    this.headers = headers;
    // No pause here: the driver commits or drains in the same macrotask (only microtasks
    // pass between the head and its decision), so at most the rest of the socket chunk
    // being parsed is queued. (A pause/resume cycle of undici's parser costs ~2 µs.)
    this.resolveHead(this);
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    if (this.sink !== null) {
      this.sink.data(chunk);
      return;
    }
    (this.queue ??= []).push(chunk);
    this.queued += chunk.length;
    // Not committed: keep memory bounded (attach resumes; a retry discards).
    if (this.queued >= DRAIN_LIMIT_BYTES) controller.pause();
  }

  onResponseEnd(_controller: Controller, trailers: Headers): void {
    if (this.discarded) return;
    this.ended = true;
    this.trailers = trailers;
    if (this.sink !== null) this.sink.end(trailers);
  }

  onResponseError(_controller: Controller, error: Error): void {
    if (!this.headed) {
      this.rejectHead(new WireError(error, classifyWireError(error, this.started ? 'after_request' : 'before_request')));
      return;
    }
    if (this.failure !== null || this.ended) return;
    this.failure = error;
    if (this.sink !== null) this.sink.error(error);
  }

  /** Cancels the call (timeout, caller abort, body cancelled). Before the request started it takes effect at start. */
  abort(reason: Error): void {
    if (this.controller !== null) this.controller.abort(reason);
    else this.abortReason ??= reason;
  }

  pause(): void {
    this.controller?.pause();
  }

  resume(): void {
    this.controller?.resume();
  }

  /** True once the body has fully arrived (or failed): the connection is free. */
  get settledBody(): boolean {
    return this.ended || this.failure !== null;
  }

  /**
   * Reads the rest of the body into memory, up to DRAIN_LIMIT_BYTES, so that the socket
   * is released before the next attempt (a body that is still arriving when the next
   * attempt starts is discarded then, see `discard`).
   */
  drain(): void {
    if (this.sink !== null || this.settledBody) return;
    if (this.queued < DRAIN_LIMIT_BYTES && this.controller?.paused) this.controller.resume();
  }

  /** Gives up a response nobody will read: an unfinished body drops its connection. */
  discard(): void {
    if (this.sink !== null || this.settledBody || this.discarded) return;
    this.discarded = true;
    this.truncated = true;
    this.queue = null;
    this.controller?.abort(new Error('relent: discarded the body of a failed attempt'));
  }

  /** Commits to this response: queued chunks first, then the rest with backpressure. */
  attach(sink: BodySink): void {
    this.sink = sink;
    const q = this.queue;
    this.queue = null;
    if (q !== null) for (const chunk of q) sink.data(chunk);
    if (this.truncated) {
      sink.error(Object.assign(new Error('relent: the body of this response was discarded while retrying (over 64 KiB)'), { code: 'ERR_BODY_DISCARDED' }));
      return;
    }
    if (this.ended) sink.end(this.trailers);
    else if (this.failure !== null) sink.error(this.failure);
    else if (this.controller?.paused) this.controller.resume();
  }
}
