// relent/telemetry: event sinks without dependencies. OpenTelemetry lives in
// relent/otel (src/telemetry/otel.ts) so that only its users load @opentelemetry/api.
export { combineSinks, createConsoleSink, scrubEvent } from './sinks.js';
export type { Sink, ConsoleSinkOptions } from './sinks.js';
export { DIAGNOSTICS_CHANNELS, publishEvent, publishBreakerChange } from './diagnostics.js';
export { normalizeEndpoint, safeEndpoint } from './endpoint.js';
export { createJsonlSink } from '../run/sinks.js';
export type { JsonlSink } from '../run/sinks.js';
// The hooks a tracer implements (relent/otel is one).
export type { Instrumentation, OperationInfo, OperationScope, AttemptScope, WorkInfo, WorkScope, DriverName, InstrumentationAttributes } from '../run/run.js';
