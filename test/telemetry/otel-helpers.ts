import { AsyncLocalStorage } from 'node:async_hooks';
import { ROOT_CONTEXT, context, type Context, type ContextManager } from '@opentelemetry/api';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
  type DataPoint,
  type MetricData,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';

/** A minimal AsyncLocalStorage context manager (what @opentelemetry/context-async-hooks provides). */
export class AlsContextManager implements ContextManager {
  private readonly als = new AsyncLocalStorage<Context>();
  active(): Context {
    return this.als.getStore() ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(ctx: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    return this.als.run(ctx, () => fn.apply(thisArg, args));
  }
  bind<T>(_ctx: Context, target: T): T {
    return target;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    this.als.disable();
    return this;
  }
}

export function setupOtel() {
  context.setGlobalContextManager(new AlsContextManager());
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  return {
    spans,
    tracerProvider,
    meterProvider,
    /** Collects now and returns the metrics of the latest export. */
    async metrics(): Promise<MetricData[]> {
      await reader.forceFlush();
      const all = metricExporter.getMetrics();
      return all.at(-1)?.scopeMetrics.flatMap((s) => s.metrics) ?? [];
    },
    async shutdown(): Promise<void> {
      await meterProvider.shutdown();
      await tracerProvider.shutdown();
      context.disable();
    },
  };
}

export function points(ms: MetricData[], name: string): DataPoint<unknown>[] {
  return (ms.find((m) => m.descriptor.name === name)?.dataPoints ?? []) as DataPoint<unknown>[];
}
