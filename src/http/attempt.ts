import type { Dispatcher } from 'undici';
import { classifyWireError, WireError } from './classify.js';

type Controller = Dispatcher.DispatchController;
type Headers = Record<string, string | string[] | undefined>;

/** Where the body of a committed response goes (a web stream, or an outer undici handler). */
export interface BodySink {
  data(chunk: Buffer): void;
  end(trailers: Headers): void;
  error(error: Error): void;
}

/** How much of a failed attempt's body is read (and kept) so that its socket can be reused. */
export const DRAIN_LIMIT_BYTES = 64 * 1024;

/**
 * One network call through an undici dispatcher, as a new-API dispatch handler.
 *
 * It settles once per attempt, at the response head (status and headers) or at the
 * failure, and records whether undici started writing the request (`onRequestStart`):
 * that is what makes a failure `not_sent` or `unknown` (see classify.ts). At the head
 * it pauses the response; the driver then either commits to it (`attach` a sink: the
 * body flows with backpressure) or drains it (`drain`: the body is read into memory up
 * to DRAIN_LIMIT_BYTES so the connection goes back to the pool, and is still there if
 * the executor ends up returning this response after all).
 */
export class AttemptHandler implements Dispatcher.DispatchHandler {
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
  private draining = false;
  /** The body was cut short while draining (over the limit). */
  truncated = false;

  constructor(
    private readonly resolveHead: (h: AttemptHandler) => void,
    private readonly rejectHead: (e: WireError) => void,
    /** Statuses the driver cannot represent (e.g. outside 200–599 for a WHATWG Response) fail as `protocol`. */
    private readonly acceptStatus: ((status: number) => boolean) | null = null,
  ) {}

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
    controller.pause();
    this.resolveHead(this);
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    if (this.sink !== null) {
      this.sink.data(chunk);
      return;
    }
    this.queued += chunk.length;
    if (this.draining && this.queued > DRAIN_LIMIT_BYTES) {
      // Too much to keep for a response that is probably thrown away: drop the connection.
      this.truncated = true;
      this.queue = null;
      controller.abort(new Error('relent: discarded the body of a failed attempt'));
      return;
    }
    (this.queue ??= []).push(chunk);
  }

  onResponseEnd(_controller: Controller, trailers: Headers): void {
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
   * Reads the rest of the body into memory (up to DRAIN_LIMIT_BYTES, more drops the
   * connection) so the socket is released for the next attempt.
   */
  drain(): void {
    if (this.sink !== null || this.draining || this.settledBody) return;
    this.draining = true;
    const len = Number(this.headers['content-length']);
    if (Number.isFinite(len) && len > DRAIN_LIMIT_BYTES) {
      this.truncated = true;
      this.queue = null;
      this.controller?.abort(new Error('relent: discarded the body of a failed attempt'));
      return;
    }
    if (this.queued > DRAIN_LIMIT_BYTES) {
      this.truncated = true;
      this.queue = null;
      this.controller?.abort(new Error('relent: discarded the body of a failed attempt'));
      return;
    }
    this.controller?.resume();
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
    else this.controller?.resume();
  }
}

/** Parsed undici headers → header pairs for a WHATWG Headers/Response (multi-values kept apart). */
export function headerPairs(headers: Headers): [string, string][] {
  const out: [string, string][] = [];
  for (const name in headers) {
    const v = headers[name];
    if (v === undefined) continue;
    if (typeof v === 'string') out.push([name, v]);
    else for (const x of v) out.push([name, x]);
  }
  return out;
}

/** The lower-cased hint headers of a response, as a plain record (multi-values joined). */
export function pickHeaders(headers: Headers, names: readonly string[]): Record<string, string> | undefined {
  let out: Record<string, string> | undefined;
  for (const n of names) {
    const v = headers[n];
    if (v === undefined) continue;
    (out ??= {})[n] = typeof v === 'string' ? v : v.join(', ');
  }
  return out;
}
