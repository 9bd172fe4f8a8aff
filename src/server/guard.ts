// relent/server: the server side of deadlines, attempt numbers and "don't retry". One
// guard per server: it reads each request's deadline and attempt number, answers at
// once when the caller's time is already spent, sheds load (concurrency limit, bounded
// queue, queue timeout, retries before first attempts), gives the handler an AbortSignal
// and remainingMs(), and carries the request (AsyncLocalStorage) to relent's clients
// below, which inherit its deadline and report a dependency's "don't retry".
import type { IncomingMessage, ServerResponse } from 'node:http';
import { beforeQuery } from '../core/endpoint.js';
import { RelentError, describe } from '../core/errors.js';
import {
  ATTEMPT_HEADER,
  DEADLINE_HEADER,
  headerNameOption,
  MAX_DEADLINE_MS,
  NO_RETRY_HEADER,
  readIncomingHints,
  type HeaderProblem,
  type IncomingHeaderSpec,
} from '../core/propagation.js';
import type { Clock } from '../core/types.js';
import { clockOption, systemClock } from '../shared/clock.js';
import { runIncoming, type IncomingCall } from '../run/incoming.js';
import { Admission, type ShedReason, type Ticket } from './admission.js';

/** `createServerGuard(options)`: every field optional (SERVER_DEFAULTS). */
export interface ServerOptions {
  /** Requests served at once; null (default): no limit, nothing is queued or shed. */
  readonly maxConcurrent?: number | null;
  /** Requests that may wait for a slot; default null: as many as `maxConcurrent`. */
  readonly maxQueue?: number | null;
  /** The longest a request waits for a slot before it is shed. Default 500 ms. */
  readonly queueTimeoutMs?: number;
  /** `Retry-After` (seconds) on a shed answer, for clients that do retry; null: none. Default 1. */
  readonly retryAfterSec?: number | null;
  /**
   * Say "don't retry" (`x-relent-no-retry`): on shed and spent-deadline answers, and on
   * error answers of a handler whose own dependency said so. Default true.
   */
  readonly noRetryMarker?: boolean;
  /** The status of the answer to a request whose deadline is spent. Default 504. */
  readonly deadlineStatus?: number;
  /** relent's deadline header to read; null: not read. Default `x-relent-deadline-ms`. */
  readonly deadlineHeader?: string | null;
  /** relent's attempt header to read; null: not read. Default `x-relent-attempt`. */
  readonly attemptHeader?: string | null;
  /** Read `grpc-timeout` and `grpc-previous-rpc-attempts`. Default true. */
  readonly readGrpc?: boolean;
  /** Read `x-envoy-expected-rq-timeout-ms` and `x-envoy-attempt-count`. Default true. */
  readonly readEnvoy?: boolean;
  /** The deadline (ms) of a request that brings none (or an unusable one); null (default): none. */
  readonly defaultDeadlineMs?: number | null;
  /** The longest deadline granted, whatever the caller says; null (default): no cap. */
  readonly maxDeadlineMs?: number | null;
  /** Every shed, every spent deadline, every admitted request and every unusable header. Nothing is built without it. */
  readonly onEvent?: ((event: ServerEvent) => void) | null;
  /** Injected time (tests). Default: the system clock. */
  readonly clock?: Clock | null;
}

export const SERVER_DEFAULTS = Object.freeze({
  maxConcurrent: null,
  maxQueue: null,
  queueTimeoutMs: 500,
  retryAfterSec: 1,
  noRetryMarker: true,
  deadlineStatus: 504,
  deadlineHeader: DEADLINE_HEADER,
  attemptHeader: ATTEMPT_HEADER,
  readGrpc: true,
  readEnvoy: true,
  defaultDeadlineMs: null,
  maxDeadlineMs: null,
  onEvent: null,
  clock: null,
});

/** What every server event carries. */
export interface ServerEventBase {
  /** Wall-clock epoch ms (from the injected clock). */
  readonly ts: number;
  readonly method: string;
  /** The request path, without its query. */
  readonly path: string;
  /** The caller's attempt number, null when it sent none. */
  readonly attempt: number | null;
  /** The caller's deadline as received (ms), after `defaultDeadlineMs`/`maxDeadlineMs`; null: none. */
  readonly deadlineMs: number | null;
}

/** A request got a slot and goes to the handler. */
export interface ServerRequestEvent extends ServerEventBase {
  readonly type: 'server_request';
  /** The header the deadline came from (`x-relent-deadline-ms`, `grpc-timeout`, …), null when none. */
  readonly deadlineSource: string | null;
  /** Time spent in the queue (ms). */
  readonly queuedMs: number;
  /** The caller's remaining time when the handler starts (ms); null without a deadline. */
  readonly remainingMs: number | null;
  readonly inFlight: number;
}

/** A request answered 503 without being served. */
export interface ServerShedEvent extends ServerEventBase {
  readonly type: 'server_shed';
  /** queue_full: no slot and no room to wait; evicted: a queued retry made room for a first attempt; queue_timeout: waited too long. */
  readonly reason: ShedReason;
  readonly inFlight: number;
  readonly queued: number;
}

/** A request whose caller's deadline is spent. */
export interface ServerDeadlineEvent extends ServerEventBase {
  readonly type: 'server_deadline';
  /** arrival: spent before it arrived (answered at once); queue: passed while it waited (answered then); handler: passed while the handler ran (its signal aborted). */
  readonly where: 'arrival' | 'queue' | 'handler';
}

/**
 * The caller hung up while the handler ran (the handler's signal aborts). A caller that
 * gives up at its own deadline hangs up a moment before this server's deadline timer
 * would fire (the network transit): `remainingMs` near 0 is that case.
 */
export interface ServerAbandonedEvent extends ServerEventBase {
  readonly type: 'server_abandoned';
  /** The caller's remaining time by this server's reckoning; null without a deadline. */
  readonly remainingMs: number | null;
}

/** A deadline or attempt header that could not be used (it is ignored). */
export interface ServerInvalidHeaderEvent extends ServerEventBase {
  readonly type: 'server_invalid_header';
  readonly header: string;
  readonly problem: HeaderProblem;
}

export type ServerEvent = ServerRequestEvent | ServerShedEvent | ServerDeadlineEvent | ServerAbandonedEvent | ServerInvalidHeaderEvent;

/** The incoming request as its handler sees it (`req.relent`, `request.relent`, or `incomingCall()`). */
export interface ServedRequest extends IncomingCall {
  /** The caller's deadline as received (ms), null when it sent none. */
  readonly deadlineMs: number | null;
  /** Time the request waited for a slot (ms). */
  readonly queuedMs: number;
  /** A dependency said "don't retry" while this request was served. */
  readonly dependencyNoRetry: boolean;
}

/** A request (node:http, Express, Connect) as the handler sees it after the middleware: `req.relent`. */
export type WithRelent<R extends IncomingMessage = IncomingMessage> = R & { relent: ServedRequest };

/** Counts since the guard was made, and its current load. */
export interface ServerStats {
  readonly inFlight: number;
  readonly queued: number;
  /** Requests by incoming attempt number: `"1"` … `"9"`, `"10+"`, and `"none"` (no usable attempt header). */
  readonly attempts: Readonly<Record<string, number>>;
  /** Share of requests that said they were retries (attempt > 1), of those that said a number. */
  readonly retryShare: number;
  readonly admitted: number;
  readonly shed: Readonly<Record<ShedReason, number>>;
  readonly deadlineSpent: Readonly<Record<ServerDeadlineEvent['where'], number>>;
  /** Callers that hung up while their request was being served. */
  readonly abandoned: number;
  readonly invalidHeaders: number;
}

/** How a framework lets the guard answer or go on. */
interface Adapter {
  respond(status: number, headers: Record<string, string>, body: string): void;
  proceed(served: Served): void;
}

export interface ServerGuard {
  /** `(req, res, next)` for node:http, Express and Connect. */
  readonly middleware: (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
  /** A Fastify plugin (`fastify.register(guard.fastify)`); applies to the whole instance. */
  readonly fastify: FastifyPlugin;
  stats(): ServerStats;
}

/** The parts of Fastify the plugin uses (no runtime dependency on fastify). */
export interface FastifyLike {
  decorateRequest(name: string, value: unknown): unknown;
  addHook(name: 'onRequest' | 'preHandler', hook: (request: FastifyRequestLike, reply: FastifyReplyLike, done: (err?: Error) => void) => void): unknown;
}
export interface FastifyRequestLike {
  readonly raw: IncomingMessage;
  relent?: ServedRequest | null;
}
export interface FastifyReplyLike {
  readonly raw: ServerResponse;
  code(status: number): FastifyReplyLike;
  header(name: string, value: string): FastifyReplyLike;
  send(body?: unknown): FastifyReplyLike;
}
export type FastifyPlugin = (instance: FastifyLike, opts: unknown, done: (err?: Error) => void) => void;

const ATTEMPT_BUCKETS = 10;

function invalid(field: string, expected: string, got: unknown): RelentError {
  return new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be ${expected}, got ${describe(got)}`, { field });
}

function msOption(v: unknown, field: string, fallback: number | null, nullable: boolean, min = 0): number | null {
  if (v === undefined) return fallback;
  if (v === null && nullable) return null;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > MAX_DEADLINE_MS) {
    throw invalid(field, `a number in [${min}, ${MAX_DEADLINE_MS}]${nullable ? ' or null' : ''}`, v);
  }
  return v;
}

function boolOption(v: unknown, field: string, fallback: boolean): boolean {
  if (v === undefined) return fallback;
  if (typeof v !== 'boolean') throw invalid(field, 'a boolean', v);
  return v;
}

/** One request through the guard. */
class Served implements ServedRequest, Ticket {
  readonly retry: boolean;
  queuedMs = 0;
  dependencyNoRetry = false;
  private controller: AbortController | null = null;
  private abortReason: Error | null = null;
  private cancelTimer: (() => void) | null = null;
  /** 0 arrived, 1 served by the handler, 2 answered by the guard, 3 done. */
  private phase = 0;
  private withdraw: (() => void) | null = null;

  constructor(
    private readonly g: Guard,
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    private readonly adapter: Adapter,
    readonly attempt: number | null,
    readonly deadlineMs: number | null,
    readonly deadlineSource: string | null,
    readonly arrivedAt: number,
  ) {
    this.retry = attempt !== null && attempt > 1;
    this.deadlineAt = deadlineMs === null ? Infinity : arrivedAt + deadlineMs;
  }

  readonly deadlineAt: number;

  get signal(): AbortSignal {
    if (this.controller === null) {
      this.controller = new AbortController();
      if (this.abortReason !== null) this.controller.abort(this.abortReason);
    }
    return this.controller.signal;
  }

  remainingMs(): number {
    return this.deadlineAt === Infinity ? Infinity : this.deadlineAt - this.g.clock.now();
  }

  dependencySaidNoRetry(): void {
    if (this.dependencyNoRetry) return;
    this.dependencyNoRetry = true;
    if (!this.g.marker || this.res.headersSent) return;
    // Said on an error answer only: wrap this response's writeHead (every write path goes through it).
    const res = this.res;
    const writeHead = res.writeHead;
    res.writeHead = function (this: ServerResponse, status: number, ...rest: unknown[]) {
      if (status >= 400 && !this.hasHeader(NO_RETRY_HEADER)) this.setHeader(NO_RETRY_HEADER, 'upstream');
      return (writeHead as (...a: unknown[]) => ServerResponse).call(this, status, ...rest);
    } as typeof res.writeHead;
  }

  start(withdraw: () => void): void {
    if (this.phase === 0) this.withdraw = withdraw;
  }

  // Ticket
  admit(queuedMs: number): void {
    this.queuedMs = queuedMs;
    this.phase = 1;
    this.withdraw = null;
    const g = this.g;
    g.admitted++;
    if (this.deadlineAt !== Infinity) {
      const now = g.clock.now();
      this.cancelTimer = g.clock.setTimer(() => this.onDeadline(), this.deadlineAt - now, now);
    }
    if (g.onEvent !== null) {
      g.emit(this, {
        type: 'server_request',
        deadlineSource: this.deadlineSource,
        queuedMs: round(queuedMs),
        remainingMs: this.deadlineAt === Infinity ? null : round(this.remainingMs()),
        inFlight: g.admission.inFlight,
      });
    }
    this.adapter.proceed(this);
  }

  shed(reason: ShedReason): void {
    const g = this.g;
    g.shedCounts[reason]++;
    if (g.onEvent !== null) g.emit(this, { type: 'server_shed', reason, inFlight: g.admission.inFlight, queued: g.admission.queued });
    this.answer(503, g.shedHeaders, `overloaded: request shed (${reason}); do not retry\n`);
  }

  expire(): void {
    this.g.spent('queue', this);
    this.answer(this.g.deadlineStatus, this.g.deadlineHeaders, 'deadline spent: the caller no longer waits\n');
  }

  answer(status: number, headers: Record<string, string>, body: string): void {
    this.phase = 2;
    this.withdraw = null;
    if (this.res.headersSent || this.res.destroyed) return;
    this.adapter.respond(status, headers, body);
  }

  private onDeadline(): void {
    this.cancelTimer = null;
    if (this.phase !== 1 || this.res.writableFinished) return;
    this.g.spent('handler', this);
    this.abort(new RelentError('ERR_DEADLINE_EXCEEDED', "relent: the caller's deadline passed"));
  }

  private abort(reason: Error): void {
    if (this.abortReason !== null) return;
    this.abortReason = reason;
    this.controller?.abort(reason);
  }

  /** The response is done (finished, or the connection closed). */
  readonly onClose = (): void => {
    const phase = this.phase;
    this.phase = 3;
    if (this.cancelTimer !== null) {
      this.cancelTimer();
      this.cancelTimer = null;
    }
    if (phase === 0) {
      // Still queued and the caller went away.
      this.withdraw?.();
      this.withdraw = null;
      return;
    }
    if (phase === 1) {
      if (!this.res.writableFinished && this.abortReason === null) {
        const g = this.g;
        g.abandoned++;
        if (g.onEvent !== null) g.emit(this, { type: 'server_abandoned', remainingMs: this.deadlineAt === Infinity ? null : round(this.remainingMs()) });
        this.abort(new RelentError('ERR_CANCELLED', 'relent: the caller went away'));
      }
      this.g.admission.release();
    }
  };
}

const round = (ms: number): number => Math.round(ms * 1000) / 1000;

class Guard {
  readonly clock: Clock;
  readonly onEvent: ((event: ServerEvent) => void) | null;
  readonly admission: Admission;
  readonly marker: boolean;
  readonly deadlineStatus: number;
  readonly shedHeaders: Record<string, string>;
  readonly deadlineHeaders: Record<string, string>;
  private readonly spec: IncomingHeaderSpec;
  private readonly defaultDeadlineMs: number | null;
  private readonly maxDeadlineMs: number | null;
  admitted = 0;
  abandoned = 0;
  invalidHeaders = 0;
  readonly shedCounts: Record<ShedReason, number> = { queue_full: 0, queue_timeout: 0, evicted: 0 };
  readonly spentCounts: Record<ServerDeadlineEvent['where'], number> = { arrival: 0, queue: 0, handler: 0 };
  readonly attempts = new Float64Array(ATTEMPT_BUCKETS + 1);

  constructor(o: ServerOptions) {
    if (typeof o !== 'object' || o === null) throw invalid('options', 'an object', o);
    const known = Object.keys(SERVER_DEFAULTS);
    for (const k of Object.keys(o))
      if (!known.includes(k)) throw new RelentError('ERR_INVALID_INPUT', `Unknown option \`${k}\` (known: ${known.join(', ')})`, { field: k });
    const maxConcurrent = o.maxConcurrent ?? null;
    if (maxConcurrent !== null && (!Number.isInteger(maxConcurrent) || maxConcurrent < 1 || maxConcurrent > 1_000_000))
      throw invalid('maxConcurrent', 'an integer in [1, 1000000] or null', maxConcurrent);
    const maxQueue = o.maxQueue ?? maxConcurrent ?? 0;
    if (!Number.isInteger(maxQueue) || maxQueue < 0 || maxQueue > 1_000_000) throw invalid('maxQueue', 'an integer in [0, 1000000] or null', maxQueue);
    const queueTimeoutMs = msOption(o.queueTimeoutMs, 'queueTimeoutMs', SERVER_DEFAULTS.queueTimeoutMs, false)!;
    const retryAfterSec = o.retryAfterSec === undefined ? SERVER_DEFAULTS.retryAfterSec : o.retryAfterSec;
    if (retryAfterSec !== null && (!Number.isInteger(retryAfterSec) || retryAfterSec < 0 || retryAfterSec > 86_400))
      throw invalid('retryAfterSec', 'an integer number of seconds in [0, 86400] or null', retryAfterSec);
    this.marker = boolOption(o.noRetryMarker, 'noRetryMarker', SERVER_DEFAULTS.noRetryMarker);
    const status = o.deadlineStatus ?? SERVER_DEFAULTS.deadlineStatus;
    if (!Number.isInteger(status) || status < 400 || status > 599) throw invalid('deadlineStatus', 'an error status (400–599)', status);
    this.deadlineStatus = status;
    this.spec = {
      deadlineHeader: headerNameOption(o.deadlineHeader, 'deadlineHeader', DEADLINE_HEADER),
      attemptHeader: headerNameOption(o.attemptHeader, 'attemptHeader', ATTEMPT_HEADER),
      grpc: boolOption(o.readGrpc, 'readGrpc', true),
      envoy: boolOption(o.readEnvoy, 'readEnvoy', true),
    };
    this.defaultDeadlineMs = msOption(o.defaultDeadlineMs, 'defaultDeadlineMs', null, true);
    this.maxDeadlineMs = msOption(o.maxDeadlineMs, 'maxDeadlineMs', null, true);
    const onEvent = o.onEvent ?? null;
    if (onEvent !== null && typeof onEvent !== 'function') throw invalid('onEvent', 'a function or null', onEvent);
    this.onEvent = onEvent;
    this.clock = clockOption(o.clock) ?? systemClock;
    this.admission = new Admission({ maxConcurrent, maxQueue, queueTimeoutMs }, this.clock);
    const text = { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' };
    this.shedHeaders = {
      ...text,
      ...(retryAfterSec !== null ? { 'retry-after': String(retryAfterSec) } : {}),
      ...(this.marker ? { [NO_RETRY_HEADER]: 'overloaded' } : {}),
    };
    this.deadlineHeaders = { ...text, ...(this.marker ? { [NO_RETRY_HEADER]: 'deadline' } : {}) };
  }

  emit(s: Served, fields: Record<string, unknown>): void {
    const base = { ts: Math.round(this.clock.wallNow()), method: s.req.method ?? '', path: pathOf(s.req.url), attempt: s.attempt, deadlineMs: s.deadlineMs };
    try {
      this.onEvent!({ ...fields, ...base } as unknown as ServerEvent);
    } catch {
      // A listener's error never breaks a request.
    }
  }

  spent(where: ServerDeadlineEvent['where'], s: Served): void {
    this.spentCounts[where]++;
    if (this.onEvent !== null) this.emit(s, { type: 'server_deadline', where });
  }

  handle(req: IncomingMessage, res: ServerResponse, adapter: Adapter): void {
    const now = this.clock.now();
    const hints = readIncomingHints(req.headers, this.spec);
    const a = hints.attempt;
    this.attempts[a === null ? 0 : Math.min(a, ATTEMPT_BUCKETS)]!++;
    let deadlineMs = hints.deadlineMs ?? this.defaultDeadlineMs;
    let source = hints.deadlineMs !== null ? hints.deadlineSource : deadlineMs !== null ? 'default' : null;
    if (deadlineMs !== null && this.maxDeadlineMs !== null && deadlineMs > this.maxDeadlineMs) {
      deadlineMs = this.maxDeadlineMs;
      source = 'max';
    }
    const s = new Served(this, req, res, adapter, a, deadlineMs, source, now);
    if (hints.problems.length > 0) {
      this.invalidHeaders += hints.problems.length;
      if (this.onEvent !== null) for (const p of hints.problems) this.emit(s, { type: 'server_invalid_header', header: p.header, problem: p.problem });
    }
    if (deadlineMs !== null && deadlineMs <= 0) {
      this.spent('arrival', s);
      s.answer(this.deadlineStatus, this.deadlineHeaders, 'deadline spent: the caller no longer waits\n');
      return;
    }
    res.once('close', s.onClose);
    s.start(this.admission.arrive(s, now));
  }

  stats(): ServerStats {
    const attempts: Record<string, number> = {};
    let said = 0;
    let retries = 0;
    for (let i = 1; i <= ATTEMPT_BUCKETS; i++) {
      const n = this.attempts[i]!;
      attempts[i === ATTEMPT_BUCKETS ? `${ATTEMPT_BUCKETS}+` : String(i)] = n;
      said += n;
      if (i > 1) retries += n;
    }
    attempts.none = this.attempts[0]!;
    return {
      inFlight: this.admission.inFlight,
      queued: this.admission.queued,
      attempts,
      retryShare: said === 0 ? 0 : retries / said,
      admitted: this.admitted,
      shed: { ...this.shedCounts },
      deadlineSpent: { ...this.spentCounts },
      abandoned: this.abandoned,
      invalidHeaders: this.invalidHeaders,
    };
  }
}

function pathOf(url: string | undefined): string {
  const p = beforeQuery(url ?? '');
  return p.length > 200 ? p.slice(0, 200) : p;
}

function nodeAdapter(req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): Adapter & { proceeded: boolean } {
  return {
    proceeded: false,
    respond(status, headers, body) {
      res.statusCode = status;
      for (const k in headers) res.setHeader(k, headers[k]!);
      res.end(body);
    },
    proceed(served) {
      this.proceeded = true;
      (req as IncomingMessage & { relent?: ServedRequest }).relent = served;
      runIncoming(served, next);
    },
  };
}

const SKIP_OVERRIDE = Symbol.for('skip-override');
const DISPLAY_NAME = Symbol.for('fastify.display-name');

/**
 * A guard for one server: `guard.middleware` for node:http, Express and Connect,
 * `guard.fastify` for Fastify, `guard.stats()` for its counts and attempt histogram.
 * Options are validated here, with messages that name the option.
 */
export function createServerGuard(options: ServerOptions = {}): ServerGuard {
  const g = new Guard(options);
  const middleware = (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void => {
    const adapter = nodeAdapter(req, res, next);
    try {
      g.handle(req, res, adapter);
    } catch (e) {
      // An error of the handler itself (next) is not the guard's to report: never call it twice.
      if (adapter.proceeded) throw e;
      next(e);
    }
  };
  const fastify: FastifyPlugin = (instance, _opts, done) => {
    instance.decorateRequest('relent', null);
    instance.addHook('onRequest', (request, reply, hookDone) => {
      let proceeded = false;
      try {
        g.handle(request.raw, reply.raw, {
          respond(status, headers, body) {
            reply.code(status);
            for (const k in headers) reply.header(k, headers[k]!);
            reply.send(body);
          },
          proceed(served) {
            proceeded = true;
            request.relent = served;
            runIncoming(served, () => hookDone());
          },
        });
      } catch (e) {
        if (proceeded) throw e;
        hookDone(e instanceof Error ? e : new Error(String(e)));
      }
    });
    // Body parsing runs outside the request's async context: enter it again for the handler.
    instance.addHook('preHandler', (request, _reply, hookDone) => {
      const served = request.relent;
      if (served) runIncoming(served, () => hookDone());
      else hookDone();
    });
    done();
  };
  Object.defineProperty(fastify, SKIP_OVERRIDE, { value: true });
  Object.defineProperty(fastify, DISPLAY_NAME, { value: 'relent' });
  return { middleware, fastify, stats: () => g.stats() };
}

/** `relentMiddleware(options)`: the `(req, res, next)` middleware of a new guard, with its `stats()`. */
export function relentMiddleware(options: ServerOptions = {}): ServerGuard['middleware'] & { stats(): ServerStats } {
  const g = createServerGuard(options);
  return Object.assign(g.middleware, { stats: g.stats });
}

/**
 * The Fastify plugin: `fastify.register(relentFastify, options)` (ServerOptions); the
 * guard's stats are at `fastify.relentStats()`.
 */
export const relentFastify: FastifyPlugin = (instance, opts, done) => {
  let g: ServerGuard;
  try {
    // Fastify's own register options (prefix, logLevel, …) are not the guard's.
    const { prefix: _p, logLevel: _l, logSerializers: _s, ...own } = (opts ?? {}) as Record<string, unknown>;
    g = createServerGuard(own as ServerOptions);
  } catch (e) {
    done(e as Error);
    return;
  }
  (instance as FastifyLike & { decorate?: (name: string, value: unknown) => unknown }).decorate?.('relentStats', g.stats);
  g.fastify(instance, opts, done);
};
Object.defineProperty(relentFastify, SKIP_OVERRIDE, { value: true });
Object.defineProperty(relentFastify, DISPLAY_NAME, { value: 'relent' });
