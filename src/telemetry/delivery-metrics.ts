// relent/otel: OpenTelemetry metrics of a delivery queue, through @opentelemetry/api only.
// The delivery driver does not know about telemetry: this reads what it exposes — the
// queue's stats() (depth, oldest item, paused) when the SDK collects, and the worker's
// events (deliveries, retries, deferrals, drops) through its onEvent hook. The shapes
// below are structural, so nothing here imports the delivery driver.
import { metrics, ValueType, type Attributes, type BatchObservableResult, type Counter, type MeterProvider } from '@opentelemetry/api';
import { OTEL_SCOPE } from './otel.js';

/** What the gauges read: the per-destination figures of relent/delivery's `queue.stats()`. */
export interface DeliveryStatsLike {
  readonly destination: string;
  readonly pendingItems: number;
  readonly readyItems: number;
  readonly inflightItems: number;
  readonly deferredItems: number;
  readonly paused?: boolean;
  readonly oldestEnqueuedAt?: number | null;
}

/** A delivery queue (relent/delivery's `openDeliveryQueue()`), or anything with its `stats()`. */
export interface DeliveryStatsSource {
  stats(): Promise<readonly DeliveryStatsLike[]>;
}

/** The delivery worker's events this reads (relent/delivery's `DeliveryEvent`; others are ignored). */
export interface DeliveryEventLike {
  readonly type: string;
  readonly destination?: string;
  readonly items?: number;
  readonly attempt?: number;
  readonly reason?: string;
}

export interface DeliveryMetricsOptions {
  /** Default: the global meter provider at creation time. */
  readonly meterProvider?: MeterProvider | null;
  /**
   * The gauges read `stats()` at most once per this many ms (collections in between get
   * the last figures): one query per collection of several readers, not one each. Default 5000.
   */
  readonly minIntervalMs?: number;
  /** Wall clock for the oldest item's age (default Date.now). */
  readonly now?: () => number;
}

export const DELIVERY_METRICS_DEFAULTS = Object.freeze({ minIntervalMs: 5_000 });

/** The metrics of a delivery queue (attributes: `relent.delivery.destination`, a configured name, never an id). */
export const DELIVERY_METRICS = Object.freeze({
  /** Gauge of items waiting, by destination and `relent.delivery.state`: pending (not batched yet), ready, in_flight, deferred. */
  items: 'relent.delivery.queue.items',
  /** Gauge of the age in seconds of the oldest item not yet delivered or dropped, by destination. */
  oldestAge: 'relent.delivery.queue.oldest_age',
  /** Gauge: 1 while a destination is paused (`relent queue pause`), else 0. */
  paused: 'relent.delivery.paused',
  /** Counter of batches by destination and `relent.delivery.outcome` (delivered, deferred, dropped; dropped with `relent.terminal_reason`). */
  batches: 'relent.delivery.batches',
  /** Counter of items by destination and `relent.delivery.outcome`. */
  items_done: 'relent.delivery.items',
  /** Counter of retries (attempts after a batch's first in its round), by destination. */
  retries: 'relent.delivery.retries',
} as const);

export interface DeliveryMetrics {
  /** Pass as the worker's `onEvent` (or call it from yours): counts deliveries, retries, deferrals and drops. */
  readonly onEvent: (event: DeliveryEventLike) => void;
  /** Stops the gauges reading the queue (the counters stay). */
  close(): void;
}

const STATES = [
  ['pending', 'pendingItems'],
  ['ready', 'readyItems'],
  ['in_flight', 'inflightItems'],
  ['deferred', 'deferredItems'],
] as const;

/**
 * OpenTelemetry metrics of a delivery queue: its depth per destination and state, the
 * age of its oldest waiting item and whether a destination is paused (gauges, read from
 * `source.stats()` when the SDK collects), and deliveries, retries, deferrals and drops
 * per destination (counters, from the worker's events).
 *
 * ```ts
 * const m = createDeliveryMetrics(queue);
 * const worker = queue.createWorker({ onEvent: m.onEvent });
 * ```
 */
export function createDeliveryMetrics(source: DeliveryStatsSource, options: DeliveryMetricsOptions = {}): DeliveryMetrics {
  const provider = options.meterProvider ?? metrics.getMeterProvider();
  const meter = provider.getMeter(OTEL_SCOPE);
  const minIntervalMs = options.minIntervalMs ?? DELIVERY_METRICS_DEFAULTS.minIntervalMs;
  const now = options.now ?? Date.now;
  const items = meter.createObservableGauge(DELIVERY_METRICS.items, {
    description: 'Delivery queue items waiting, by state',
    unit: '{item}',
    valueType: ValueType.INT,
  });
  const oldest = meter.createObservableGauge(DELIVERY_METRICS.oldestAge, {
    description: 'Age of the oldest item not yet delivered or dropped',
    unit: 's',
    valueType: ValueType.DOUBLE,
  });
  const paused = meter.createObservableGauge(DELIVERY_METRICS.paused, {
    description: '1 while the destination is paused',
    unit: '1',
    valueType: ValueType.INT,
  });
  const batches: Counter = meter.createCounter(DELIVERY_METRICS.batches, {
    description: 'Delivery batches by outcome',
    unit: '{batch}',
    valueType: ValueType.INT,
  });
  const done: Counter = meter.createCounter(DELIVERY_METRICS.items_done, {
    description: 'Delivery items by outcome',
    unit: '{item}',
    valueType: ValueType.INT,
  });
  const retries: Counter = meter.createCounter(DELIVERY_METRICS.retries, {
    description: 'Delivery attempts after the first of a batch',
    unit: '{attempt}',
    valueType: ValueType.INT,
  });

  let cached: readonly DeliveryStatsLike[] = [];
  let readAt = Number.NEGATIVE_INFINITY;
  let reading: Promise<readonly DeliveryStatsLike[]> | null = null;
  const read = (): Promise<readonly DeliveryStatsLike[]> => {
    if (now() - readAt < minIntervalMs) return Promise.resolve(cached);
    reading ??= source
      .stats()
      .then(
        (rows) => {
          cached = rows;
          readAt = now();
          return rows;
        },
        () => cached,
      )
      .finally(() => {
        reading = null;
      });
    return reading;
  };
  const callback = async (r: BatchObservableResult): Promise<void> => {
    const rows = await read();
    const t = now();
    for (const s of rows) {
      const d = { 'relent.delivery.destination': s.destination };
      for (const [state, field] of STATES) r.observe(items, Number(s[field]), { ...d, 'relent.delivery.state': state });
      if (s.oldestEnqueuedAt !== null && s.oldestEnqueuedAt !== undefined) r.observe(oldest, Math.max(0, t - s.oldestEnqueuedAt) / 1000, d);
      if (s.paused !== undefined) r.observe(paused, s.paused ? 1 : 0, d);
    }
  };
  meter.addBatchObservableCallback(callback, [items, oldest, paused]);

  const attrs = new Map<string, Attributes>();
  const attr = (destination: string, outcome: string | null, reason: string | null): Attributes => {
    const key = `${destination}\0${outcome}\0${reason}`;
    let a = attrs.get(key);
    if (a === undefined) {
      const o: Record<string, string> = { 'relent.delivery.destination': destination };
      if (outcome !== null) o['relent.delivery.outcome'] = outcome;
      if (reason !== null) o['relent.terminal_reason'] = reason;
      a = Object.freeze(o);
      if (attrs.size < 4096) attrs.set(key, a);
    }
    return a;
  };
  const onEvent = (e: DeliveryEventLike): void => {
    const dest = e.destination;
    if (typeof dest !== 'string') return;
    switch (e.type) {
      case 'attempt':
        if (typeof e.attempt === 'number' && e.attempt > 1) retries.add(1, attr(dest, null, null));
        return;
      case 'delivered':
      case 'deferred':
      case 'dropped': {
        const a = attr(dest, e.type, e.type === 'dropped' && typeof e.reason === 'string' ? e.reason : null);
        batches.add(1, a);
        if (typeof e.items === 'number') done.add(e.items, a);
        return;
      }
      default:
    }
  };
  return {
    onEvent,
    close: () => meter.removeBatchObservableCallback(callback, [items, oldest, paused]),
  };
}
