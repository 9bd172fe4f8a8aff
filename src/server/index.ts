// relent/server: incoming deadlines, load shedding and "don't retry" for node:http,
// Express, Connect and Fastify. Every export is named here.

export { createServerGuard, relentMiddleware, relentFastify, SERVER_DEFAULTS } from './guard.js';
export type {
  ServerOptions,
  ServerGuard,
  WithRelent,
  ServerStats,
  ServedRequest,
  ServerEvent,
  ServerEventBase,
  ServerRequestEvent,
  ServerShedEvent,
  ServerDeadlineEvent,
  ServerAbandonedEvent,
  ServerInvalidHeaderEvent,
  FastifyPlugin,
  FastifyLike,
  FastifyRequestLike,
  FastifyReplyLike,
} from './guard.js';
export type { ShedReason } from './admission.js';
export { incomingCall } from '../run/incoming.js';
export type { IncomingCall } from '../run/incoming.js';
export {
  DEADLINE_HEADER,
  ATTEMPT_HEADER,
  NO_RETRY_HEADER,
  GRPC_TIMEOUT_HEADER,
  GRPC_PUSHBACK_HEADER,
  ENVOY_TIMEOUT_HEADER,
  readIncomingHints,
  MAX_DEADLINE_MS,
} from '../core/propagation.js';
export {
  parseDeadlineMs,
  parseGrpcTimeout,
  parseAttempt,
  parsePreviousAttempts,
  parsePushback,
  saysNoRetry,
  formatDeadlineMs,
  formatGrpcTimeout,
} from '../core/propagation.js';
export type { IncomingHints, IncomingHeaderSpec, HeaderProblem, HeaderParse } from '../core/propagation.js';
