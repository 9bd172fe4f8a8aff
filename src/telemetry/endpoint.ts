// The endpoint normaliser lives in the core (src/core/endpoint.ts), so the executor can
// scrub endpoints before any event is built; telemetry re-exports it.
export { normalizeEndpoint, safeEndpoint } from '../core/endpoint.js';
