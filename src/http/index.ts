// relent/http: the HTTP driver of the decision core. Every export is named here.

export { createClient, CLIENT_DEFAULTS } from './client.js';
export type { ClientOptions, RelentClient, RelentRequestInit, HeadersLike, RequestBody } from './client.js';
export { RelentFetchError } from './errors.js';
export { relentInterceptor, INTERCEPTOR_DEFAULTS } from './interceptor.js';
export type { InterceptorOptions, RelentDispatchOptions, RelentInterceptor } from './interceptor.js';
export type { ProtectionOptions, Dependencies, Dependency } from './operation.js';
export type { HttpDriverOptions, DependencyState } from './driver.js';
export type { Dispatch } from './intercepted.js';
export { PROPAGATION_DEFAULTS } from '../core/propagation.js';
export type { PropagationSpec } from '../core/propagation.js';
export { pickHintHeaders, SERVER_HINT_HEADERS } from '../core/hints.js';
export { errorClassOfCode, ERROR_CODE_CLASSES } from '../core/error-codes.js';
export { WIRE_ERROR_TABLE, classifyWireError, WireError } from '../core/wire.js';
export type { RequestPhase, WireClass } from '../core/wire.js';
export { originKey } from './endpoint.js';
export { normalizeEndpoint } from '../core/endpoint.js';
export { formatIdempotencyKey, newIdempotencyKey, IDEMPOTENCY_KEY_HEADER, AUTO_KEY_METHODS } from '../shared/idempotency.js';
export { DRAIN_LIMIT_BYTES } from './attempt.js';
