// relent/otel: OpenTelemetry metrics of adaptive concurrency limits, through
// @opentelemetry/api only. The drivers do not know about telemetry: this reads what they
// expose — the limits of a client or interceptor (`concurrencyLimits`), or an exchange's
// partners (`stats().partners[].concurrencyLimit`) — when the SDK collects, and counts
// every change from the limit events they emit. The shapes are structural: nothing here
// imports a driver.
import { metrics, ValueType, type Attributes, type BatchObservableResult, type Counter, type MeterProvider } from '@opentelemetry/api';
import { OTEL_SCOPE } from './otel.js';

/** One limit as the gauges read it. */
export interface LimitReading {
  /** The dependency: the client's key (the origin by default), or the exchange's partner name. */
  readonly name: string;
  readonly limit: number;
  readonly inFlight: number;
  /** Calls waiting for a slot (0 where nothing waits, as for exchange partners). */
  readonly queued?: number;
}

/** relent's createConcurrencyLimit() limits by key: `client.concurrencyLimits`, `interceptor.concurrencyLimits`. */
export interface LimitMapLike {
  entries(): Iterable<[string, { readonly limit: number; readonly active: number; readonly queued: number }]>;
}

/** relent/rtb's exchange: its partners with an adaptive limit (`partners[].concurrencyLimit`). */
export interface ExchangeLimitsLike {
  stats(): { readonly partners: readonly { readonly name: string; readonly inFlight: number; readonly concurrencyLimit: { readonly limit: number } | null }[] };
}

/** What the gauges read: a map of limits, an exchange, or a function returning readings. */
export type LimitSource = LimitMapLike | ExchangeLimitsLike | (() => Iterable<LimitReading>);

/** The limit events this counts (relent's `LimitEvent`, the exchange's `PartnerLimitChange`). */
export interface LimitEventLike {
  readonly type: string;
  readonly name?: string | null;
  readonly partner?: string;
  readonly cause?: string;
}

export interface LimitMetricsOptions {
  /** Default: the global meter provider at creation time. */
  readonly meterProvider?: MeterProvider | null;
}

/** The metrics of adaptive concurrency limits (attribute `relent.dependency`: a configured key or partner name, never an id). */
export const LIMIT_METRICS = Object.freeze({
  /** Gauge of the calls a limit allows in flight now. */
  limit: 'relent.concurrency_limit.limit',
  /** Gauge of the calls in flight. */
  inFlight: 'relent.concurrency_limit.in_flight',
  /** Gauge of the calls waiting for a slot. */
  queued: 'relent.concurrency_limit.queued',
  /** Counter of the limit's changes by `relent.concurrency_limit.cause` (decrease, increase, gradient, probe, probe_end). */
  changes: 'relent.concurrency_limit.changes',
} as const);

export interface LimitMetrics {
  /** Pass as `onLimitEvent` (client, interceptor) or `onLimitChange` (exchange), or call it from yours: counts changes. */
  readonly onEvent: (event: LimitEventLike) => void;
  /** Stops the gauges reading the source (the counter stays). */
  close(): void;
}

function readingsOf(source: LimitMapLike | ExchangeLimitsLike): Iterable<LimitReading> {
  if ('stats' in source && typeof source.stats === 'function') {
    const out: LimitReading[] = [];
    for (const p of source.stats().partners)
      if (p.concurrencyLimit !== null) out.push({ name: p.name, limit: p.concurrencyLimit.limit, inFlight: p.inFlight, queued: 0 });
    return out;
  }
  const out: LimitReading[] = [];
  for (const [name, l] of (source as LimitMapLike).entries()) out.push({ name, limit: l.limit, inFlight: l.active, queued: l.queued });
  return out;
}

/**
 * OpenTelemetry metrics of adaptive concurrency limits: each dependency's limit, calls in
 * flight and calls queued (gauges, read from the source when the SDK collects) and the
 * limit's changes by cause (a counter, from the limit events).
 *
 * ```ts
 * const m = createLimitMetrics(() => client.concurrencyLimits);   // or: createLimitMetrics(exchange)
 * const client = createClient({ concurrencyLimit: { kind: 'gradient' }, onLimitEvent: m.onEvent });
 * ```
 * (A function is read at each collection: it may return the map itself.)
 */
export function createLimitMetrics(source: LimitSource | (() => LimitMapLike), options: LimitMetricsOptions = {}): LimitMetrics {
  if (source === null || (typeof source !== 'object' && typeof source !== 'function')) {
    throw new TypeError(
      'createLimitMetrics: Expected `source` to be a map of limits (client.concurrencyLimits), an exchange, or a function returning either or readings',
    );
  }
  const provider = options.meterProvider ?? metrics.getMeterProvider();
  const meter = provider.getMeter(OTEL_SCOPE);
  const limit = meter.createObservableGauge(LIMIT_METRICS.limit, {
    description: 'Calls an adaptive concurrency limit allows in flight',
    unit: '{call}',
    valueType: ValueType.INT,
  });
  const inFlight = meter.createObservableGauge(LIMIT_METRICS.inFlight, {
    description: 'Calls in flight under an adaptive concurrency limit',
    unit: '{call}',
    valueType: ValueType.INT,
  });
  const queued = meter.createObservableGauge(LIMIT_METRICS.queued, {
    description: 'Calls waiting for a slot of an adaptive concurrency limit',
    unit: '{call}',
    valueType: ValueType.INT,
  });
  const changes: Counter = meter.createCounter(LIMIT_METRICS.changes, {
    description: 'Changes of an adaptive concurrency limit, by cause',
    unit: '{change}',
    valueType: ValueType.INT,
  });

  const attrs = new Map<string, Attributes>();
  const attr = (name: string, cause: string | null): Attributes => {
    const key = `${name}\0${cause}`;
    let a = attrs.get(key);
    if (a === undefined) {
      const o: Record<string, string> = { 'relent.dependency': name };
      if (cause !== null) o['relent.concurrency_limit.cause'] = cause;
      a = Object.freeze(o);
      if (attrs.size < 4096) attrs.set(key, a);
    }
    return a;
  };
  const callback = (r: BatchObservableResult): void => {
    let rows: Iterable<LimitReading>;
    try {
      const s = typeof source === 'function' ? (source as () => unknown)() : source;
      // A function may return the map or the exchange itself, or readings.
      rows =
        s !== null && typeof s === 'object' && ('entries' in s || 'stats' in s) && !Array.isArray(s)
          ? readingsOf(s as LimitMapLike | ExchangeLimitsLike)
          : (s as Iterable<LimitReading>);
      for (const l of rows) {
        const a = attr(l.name, null);
        r.observe(limit, l.limit, a);
        r.observe(inFlight, l.inFlight, a);
        r.observe(queued, l.queued ?? 0, a);
      }
    } catch {
      // A source that cannot be read this time is skipped (the next collection tries again).
    }
  };
  meter.addBatchObservableCallback(callback, [limit, inFlight, queued]);
  const onEvent = (e: LimitEventLike): void => {
    if (e.type !== 'limit') return;
    const name = e.partner ?? e.name;
    if (typeof name !== 'string' || typeof e.cause !== 'string') return;
    changes.add(1, attr(name, e.cause));
  };
  return {
    onEvent,
    close: () => meter.removeBatchObservableCallback(callback, [limit, inFlight, queued]),
  };
}
