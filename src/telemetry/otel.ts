// relent/otel: OpenTelemetry spans and metrics through @opentelemetry/api only (an
// optional peer dependency: only this subpath imports it). Users bring the SDK.
import {
  context,
  metrics,
  trace,
  SpanKind,
  SpanStatusCode,
  ValueType,
  type Attributes,
  type Context,
  type Counter,
  type Histogram,
  type MeterProvider,
  type Span,
  type Tracer,
  type TracerProvider,
} from '@opentelemetry/api';
import type { BreakerStateChange } from '../core/breaker.js';
import type { AttemptEvent, ResultEvent } from '../core/types.js';
import type {
  AttemptContext,
  AttemptScope,
  DriverName,
  Instrumentation,
  InstrumentationAttributes,
  OperationInfo,
  OperationScope,
  WorkInfo,
  WorkScope,
} from '../run/run.js';
import { unbrace } from '../core/endpoint.js';
import { safeEndpoint } from './endpoint.js';

/**
 * Pass the result as `instrumentation` to run()/execute(), createClient(),
 * relentInterceptor(), createExchange() or a delivery worker:
 *
 * - a span per operation (`relent GET`, INTERNAL; `relent.driver` says which driver ran
 *   it: client.fetch, interceptor, exchange.partner, exchange.notice, delivery — a
 *   delivery batch's is named `relent delivery batch`) and, under it, a span per call
 *   (`GET`, or `GET /users/{id}` with a route template; CLIENT) that follows the HTTP
 *   client semantic conventions: `http.request.method`, `server.address`, `server.port`,
 *   `url.full` (normalised: no query, userinfo or fragment), `http.response.status_code`,
 *   `error.type`, and `http.request.resend_count` on resends; plus `relent.attempt`,
 *   `relent.request_id`, `relent.remaining_ms` (the operation's time left when the call
 *   started) and `relent.timeout_ms`. The call runs with its attempt span active, so
 *   instrumented clients and `propagation.inject` see it.
 * - a span per auction (`relent auction`) whose children are its partner calls.
 * - metrics (see OTEL_METRICS) whose attributes hold no ids (bounded cardinality): never operationId,
 *   requestId, batch or auction ids or url.full; only method, server address/port,
 *   status, error type, the driver and relent's closed vocabularies.
 *
 * Span times come from OpenTelemetry's own clock (the hooks are called when things
 * happen), not from the executor's clock.
 */
export interface OtelOptions {
  /** Default: the global tracer provider (`trace.getTracerProvider()`, resolved lazily). */
  readonly tracerProvider?: TracerProvider | null;
  /** Default: the global meter provider at creation time (register the SDK first). */
  readonly meterProvider?: MeterProvider | null;
  /** Spans on (default true). */
  readonly tracing?: boolean;
  /** Metrics on (default true). */
  readonly metrics?: boolean;
}

export const OTEL_DEFAULTS = Object.freeze({ tracing: true, metrics: true });

/** The instrumentation scope name of tracers and meters. */
export const OTEL_SCOPE = 'relent';

/** The metrics relent records. */
export const OTEL_METRICS = Object.freeze({
  /** Counter of calls, by method, server, status / error.type and `relent.decision` (load sent; share of timeouts). */
  attempts: 'relent.attempts',
  /** Histogram of one call's duration in seconds, by method, server, status / error.type. */
  attemptDuration: 'relent.attempt.duration',
  /** Counter of retries (calls after the first) by `relent.retry.outcome`: success | failure (do retries help?). */
  retries: 'relent.retries',
  /** Counter of operations by `relent.terminal_reason` and `relent.retried`. */
  operations: 'relent.operations',
  /** Histogram of calls per operation, by `relent.terminal_reason`. */
  operationAttempts: 'relent.operation.attempts',
  /** Counter of breaker state changes by `relent.breaker.name`, `.from`, `.to`, `.reason`. */
  breakerStateChanges: 'relent.breaker.state_changes',
} as const);

export interface OtelInstrumentation extends Instrumentation {
  /** Pass as (or combine into) a breaker's `onStateChange`: counts state changes. */
  readonly onBreakerStateChange: (change: BreakerStateChange) => void;
}

const KNOWN_METHODS = new Set(['CONNECT', 'DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT', 'TRACE', 'QUERY']);
// http.client.request.duration's advised boundaries (seconds).
const DURATION_BOUNDARIES = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];
const ATTEMPT_BOUNDARIES = [0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20];

interface Instruments {
  readonly attempts: Counter;
  readonly attemptDuration: Histogram;
  readonly retries: Counter;
  readonly operations: Counter;
  readonly operationAttempts: Histogram;
  readonly breakerStateChanges: Counter;
}

/** What an endpoint tells a span. */
interface Target {
  readonly urlFull: string | null;
  readonly address: string | null;
  readonly port: number | null;
  readonly template: string | null;
}

function parseTarget(endpoint: string | null): Target {
  if (endpoint === null) return { urlFull: null, address: null, port: null, template: null };
  const e = safeEndpoint(endpoint);
  let u: URL | null = null;
  try {
    u = new URL(e);
  } catch {
    u = null;
  }
  if (u === null || u.host === '') {
    return { urlFull: null, address: null, port: null, template: e.startsWith('/') && isTemplate(e) ? e : null };
  }
  const port = u.port !== '' ? Number(u.port) : u.protocol === 'https:' ? 443 : u.protocol === 'http:' ? 80 : null;
  const address = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
  const path = unbrace(u.pathname);
  return { urlFull: e, address, port, template: isTemplate(path) ? path : null };
}

/** A route template has `{name}` or `:name` segments (`/users/{id}`, `/users/:id`). */
function isTemplate(path: string): boolean {
  return path.includes('{') || path.includes('/:');
}

const freeze = <T extends object>(o: T): Readonly<T> => Object.freeze(o);

/**
 * Everything that depends only on (method, endpoint), computed once: span names and
 * start attributes, and the metric attribute sets, each a frozen object reused for
 * every record (they come from closed sets, so the caches stay small).
 */
class Profile {
  readonly method: string | null;
  readonly driver: DriverName | null;
  readonly opName: string;
  readonly attemptName: string;
  readonly attemptKind: SpanKind;
  readonly opStart: Attributes;
  private readonly attemptStarts: Attributes[] = [];
  private readonly metricBase: Attributes;
  private readonly cache = new Map<string, Attributes>();

  constructor(method: string | null, endpoint: string | null, driver: DriverName | null) {
    const t = parseTarget(endpoint);
    this.driver = driver;
    const upper = method === null ? null : method.toUpperCase();
    const known = upper !== null && KNOWN_METHODS.has(upper);
    this.method = upper;
    const tpl = t.template !== null ? ` ${t.template}` : '';
    this.opName = driver === 'delivery' ? 'relent delivery batch' : `relent ${upper ?? 'operation'}${tpl}`;
    this.attemptName = upper !== null ? `${upper}${tpl}` : 'relent attempt';
    this.attemptKind = upper !== null ? SpanKind.CLIENT : SpanKind.INTERNAL;
    const base: Attributes = {};
    if (upper !== null) base['http.request.method'] = known ? upper : '_OTHER';
    if (t.address !== null) base['server.address'] = t.address;
    if (t.port !== null) base['server.port'] = t.port;
    if (driver !== null) base['relent.driver'] = driver;
    this.metricBase = freeze(base);
    const start: Attributes = { ...base };
    if (upper !== null && !known) start['http.request.method_original'] = method!;
    if (t.urlFull !== null) start['url.full'] = t.urlFull;
    if (t.template !== null) start['url.template'] = t.template;
    this.opStart = freeze(start);
  }

  attemptStart(attempt: number): Attributes {
    let a = this.attemptStarts[attempt];
    if (a === undefined) {
      const o: Attributes = { ...this.opStart, 'relent.attempt': attempt };
      if (attempt > 1) o['http.request.resend_count'] = attempt - 1;
      a = freeze(o);
      if (attempt < 64) this.attemptStarts[attempt] = a;
    }
    return a;
  }

  /** Attributes of one call's metrics (with or without the decision). */
  attempt(status: number | null, err: string | null, decision: string | null): Attributes {
    const key = `a${status}|${err}|${decision}`;
    let a = this.cache.get(key);
    if (a === undefined) {
      const o: Attributes = { ...this.metricBase };
      if (status !== null) o['http.response.status_code'] = status;
      if (err !== null) o['error.type'] = err;
      if (decision !== null) o['relent.decision'] = decision;
      a = this.remember(key, o);
    }
    return a;
  }

  retry(success: boolean): Attributes {
    const key = success ? 'rs' : 'rf';
    return this.cache.get(key) ?? this.remember(key, { ...this.metricBase, 'relent.retry.outcome': success ? 'success' : 'failure' });
  }

  operation(reason: string, retried: boolean | null): Attributes {
    const key = `o${reason}|${retried}`;
    let a = this.cache.get(key);
    if (a === undefined) {
      const o: Attributes = { ...this.metricBase, 'relent.terminal_reason': reason };
      if (retried !== null) o['relent.retried'] = retried;
      a = this.remember(key, o);
    }
    return a;
  }

  private remember(key: string, o: Attributes): Attributes {
    const a = freeze(o);
    if (this.cache.size < 4096) this.cache.set(key, a);
    return a;
  }
}

const profiles = new Map<string, Profile>();

function profileOf(method: string | null, endpoint: string | null, driver: DriverName | null): Profile {
  const key = `${driver ?? ''} ${method ?? ''} ${endpoint ?? ''}`;
  let p = profiles.get(key);
  if (p === undefined) {
    p = new Profile(method, endpoint, driver);
    if (profiles.size >= 1024) profiles.clear();
    profiles.set(key, p);
  }
  return p;
}

function errorType(status: number | null, errorClass: string | null): string | null {
  if (errorClass !== null) return errorClass;
  return status !== null && status >= 400 ? String(status) : null;
}

export function createOtelInstrumentation(options: OtelOptions = {}): OtelInstrumentation {
  if (typeof options !== 'object' || options === null) throw new TypeError('createOtelInstrumentation: Expected `options` to be an object');
  const tracing = options.tracing ?? OTEL_DEFAULTS.tracing;
  const metricsOn = options.metrics ?? OTEL_DEFAULTS.metrics;
  if (typeof tracing !== 'boolean') throw new TypeError(`createOtelInstrumentation: Expected \`tracing\` to be a boolean, got ${String(tracing)}`);
  if (typeof metricsOn !== 'boolean') throw new TypeError(`createOtelInstrumentation: Expected \`metrics\` to be a boolean, got ${String(metricsOn)}`);

  const tracer: Tracer | null = tracing ? (options.tracerProvider ?? trace.getTracerProvider()).getTracer(OTEL_SCOPE) : null;
  let inst: Instruments | null = null;
  if (metricsOn) {
    const meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(OTEL_SCOPE);
    inst = {
      attempts: meter.createCounter(OTEL_METRICS.attempts, { unit: '{attempt}', description: 'Calls made to dependencies', valueType: ValueType.INT }),
      attemptDuration: meter.createHistogram(OTEL_METRICS.attemptDuration, {
        unit: 's',
        description: 'Duration of one call',
        advice: { explicitBucketBoundaries: DURATION_BOUNDARIES },
      }),
      retries: meter.createCounter(OTEL_METRICS.retries, {
        unit: '{retry}',
        description: 'Calls after the first, by whether the call got an answer that was returned',
        valueType: ValueType.INT,
      }),
      operations: meter.createCounter(OTEL_METRICS.operations, {
        unit: '{operation}',
        description: 'Operations ended, by terminal reason',
        valueType: ValueType.INT,
      }),
      operationAttempts: meter.createHistogram(OTEL_METRICS.operationAttempts, {
        unit: '{attempt}',
        description: 'Calls made per operation',
        valueType: ValueType.INT,
        advice: { explicitBucketBoundaries: ATTEMPT_BOUNDARIES },
      }),
      breakerStateChanges: meter.createCounter(OTEL_METRICS.breakerStateChanges, {
        unit: '{change}',
        description: 'Circuit breaker state changes',
        valueType: ValueType.INT,
      }),
    };
  }

  return {
    operation: (info) => new OtelOperation(info, tracer, inst),
    work: (info) => (tracer === null ? NO_WORK : new OtelWork(info, tracer)),
    onBreakerStateChange(change) {
      if (inst === null) return;
      const a: Attributes = { 'relent.breaker.from': change.from, 'relent.breaker.to': change.to, 'relent.breaker.reason': change.reason };
      if (change.name !== null) a['relent.breaker.name'] = safeEndpoint(change.name);
      inst.breakerStateChanges.add(1, a);
    },
  };
}

class OtelOperation implements OperationScope {
  readonly profile: Profile;
  readonly span: Span | null;
  readonly ctx: Context;
  readonly tracer: Tracer | null;
  readonly inst: Instruments | null;

  constructor(info: OperationInfo, tracer: Tracer | null, inst: Instruments | null) {
    this.tracer = tracer;
    this.inst = inst;
    const p = (this.profile = profileOf(info.method, info.endpoint, info.driver ?? null));
    const parent = context.active();
    if (tracer !== null) {
      const span = tracer.startSpan(p.opName, { kind: SpanKind.INTERNAL, attributes: p.opStart }, parent);
      span.setAttribute('relent.operation.id', info.operationId);
      if (info.attributes !== undefined) span.setAttributes(info.attributes);
      this.span = span;
      this.ctx = trace.setSpan(parent, span);
    } else {
      this.span = null;
      this.ctx = parent;
    }
  }

  attempt(attempt: number, ctx?: Pick<AttemptContext, 'requestId' | 'remainingMs' | 'timeoutMs'>): AttemptScope {
    return new OtelAttempt(this, attempt, ctx);
  }

  run<A, R>(fn: (arg: A) => R, arg: A): R {
    return this.span === null ? fn(arg) : context.with(this.ctx, fn, undefined, arg);
  }

  end(ev: ResultEvent): void {
    const reason = ev.reason;
    const check = (ev as { stateCheck?: { status?: number } }).stateCheck;
    const failed = reason !== 'return' && !(reason === 'check_state' && typeof check?.status === 'number' && check.status < 400);
    const span = this.span;
    if (span !== null) {
      if (span.isRecording()) {
        span.setAttribute('relent.terminal_reason', reason);
        span.setAttribute('relent.attempts', ev.attempts);
        if (ev.status !== null) span.setAttribute('http.response.status_code', ev.status);
        if (failed) {
          span.setAttribute('error.type', reason);
          span.setStatus({ code: SpanStatusCode.ERROR, message: reason });
        }
      }
      span.end();
    }
    const inst = this.inst;
    if (inst !== null) {
      inst.operationAttempts.record(ev.attempts, this.profile.operation(reason, null));
      inst.operations.add(1, this.profile.operation(reason, ev.attempts > 1));
    }
  }
}

class OtelAttempt implements AttemptScope {
  private readonly op: OtelOperation;
  private readonly span: Span | null;
  private readonly ctx: Context;

  constructor(op: OtelOperation, attempt: number, ctx: Pick<AttemptContext, 'requestId' | 'remainingMs' | 'timeoutMs'> | undefined) {
    this.op = op;
    if (op.tracer !== null) {
      const p = op.profile;
      this.span = op.tracer.startSpan(p.attemptName, { kind: p.attemptKind, attributes: p.attemptStart(attempt) }, op.ctx);
      if (ctx !== undefined && this.span.isRecording()) {
        this.span.setAttribute('relent.request_id', ctx.requestId);
        this.span.setAttribute('relent.remaining_ms', Math.round(ctx.remainingMs));
        this.span.setAttribute('relent.timeout_ms', Math.round(ctx.timeoutMs));
      }
      this.ctx = trace.setSpan(op.ctx, this.span);
    } else {
      this.span = null;
      this.ctx = op.ctx;
    }
  }

  run<A, R>(fn: (arg: A) => R, arg: A): R {
    return this.span === null ? fn(arg) : context.with(this.ctx, fn, undefined, arg);
  }

  end(ev: AttemptEvent): void {
    const err = errorType(ev.status, ev.errorClass);
    const span = this.span;
    if (span !== null) {
      if (span.isRecording()) {
        if (ev.status !== null) span.setAttribute('http.response.status_code', ev.status);
        if (err !== null) {
          span.setAttribute('error.type', err);
          span.setStatus({ code: SpanStatusCode.ERROR });
        }
        span.setAttribute('relent.decision', ev.decision);
        if (ev.delayMs !== null) span.setAttribute('relent.delay_ms', ev.delayMs);
        if (ev.retryAfterMs !== null) span.setAttribute('relent.retry_after_ms', ev.retryAfterMs);
      }
      span.end();
    }
    const inst = this.op.inst;
    if (inst !== null) {
      const p = this.op.profile;
      inst.attempts.add(1, p.attempt(ev.status, err, ev.decision));
      inst.attemptDuration.record(ev.elapsedMs / 1000, p.attempt(ev.status, err, null));
      if (ev.attempt > 1) inst.retries.add(1, p.retry(ev.decision === 'return'));
    }
  }
}

/** A unit of work (an auction): a span whose context its operations start in. */
class OtelWork implements WorkScope {
  private readonly span: Span;
  private readonly ctx: Context;

  constructor(info: WorkInfo, tracer: Tracer) {
    const parent = context.active();
    this.span = tracer.startSpan(`relent ${info.name}`, { kind: SpanKind.INTERNAL, attributes: info.attributes }, parent);
    this.ctx = trace.setSpan(parent, this.span);
  }

  run<A, R>(fn: (arg: A) => R, arg: A): R {
    return context.with(this.ctx, fn, undefined, arg);
  }

  end(outcome: { readonly error: string | null; readonly attributes?: InstrumentationAttributes }): void {
    const span = this.span;
    if (span.isRecording()) {
      if (outcome.attributes !== undefined) span.setAttributes(outcome.attributes);
      if (outcome.error !== null) {
        span.setAttribute('error.type', outcome.error);
        span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.error });
      }
    }
    span.end();
  }
}

/** Tracing off: work runs as is. */
const NO_WORK: WorkScope = Object.freeze({
  run: <A, R>(fn: (arg: A) => R, arg: A): R => fn(arg),
  end: () => {},
});

export { createDeliveryMetrics, DELIVERY_METRICS, DELIVERY_METRICS_DEFAULTS } from './delivery-metrics.js';
export type { DeliveryMetrics, DeliveryMetricsOptions, DeliveryStatsLike, DeliveryStatsSource, DeliveryEventLike } from './delivery-metrics.js';
export { createLimitMetrics, LIMIT_METRICS } from './limit-metrics.js';
export type { LimitMetrics, LimitMetricsOptions, LimitReading, LimitSource, LimitMapLike, ExchangeLimitsLike, LimitEventLike } from './limit-metrics.js';
