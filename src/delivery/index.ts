// relent/delivery: a persistent queue for retries that wait seconds to hours, driven by
// the same decision core as run(). Every export is named here (no `export *`).

export { openDeliveryQueue, MAX_ITEM_BYTES } from './queue.js';
export type { DeliveryQueue, QueueOptions, EnqueueOptions } from './queue.js';
export { createWorker } from './worker.js';
export type { DeliveryWorker, WorkerOptions, WorkerCounters, DeliveryEvent, DeliveryAttemptEvent } from './worker.js';
export type { BatchRef } from './events.js';
export { resolveDestinations, resolveWorkerSettings, parseDeliveryConfig, DESTINATION_DEFAULTS, WORKER_DEFAULTS, BODY_FORMATS } from './config.js';
export type {
  DestinationOptions,
  ResolvedDestination,
  RateLimitOptions,
  ConcurrencyOptions,
  BodyFormat,
  WorkerSettings,
  DeliveryConfig,
  LimitScope,
} from './config.js';
export { openStore } from './store.js';
export { openSqliteStore, SQLITE_DEFAULTS } from './sqlite-store.js';
export type { SqliteStoreOptions } from './sqlite-store.js';
export { openPostgresStore, POSTGRES_DEFAULTS } from './postgres-store.js';
export type { PostgresStoreOptions } from './postgres-store.js';
export { SCHEMA_VERSION } from './store-common.js';
export type {
  DeliveryStore,
  BatchState,
  ListState,
  NewItem,
  EnqueueResult,
  BatchLimits,
  Lease,
  BatchItem,
  ClaimedBatch,
  AttemptRecord,
  Outcome,
  CompleteResult,
  FormResult,
  FormAndClaimResult,
  BatchSummary,
  StoredItem,
  BatchDetail,
  ListFilter,
  RequeueFilter,
  DestinationStats,
  DropStat,
} from './types.js';
export { createHttpTransport } from './transport.js';
export type { Transport, HttpTransport, HttpTransportOptions, DeliveryRequest, TransportResult } from './transport.js';
export { createIdempotencyCache, createIdempotentHandler, noticeKey, IDEMPOTENCY_CACHE_DEFAULTS } from './receiver.js';
export type {
  IdempotencyCache,
  IdempotencyCacheOptions,
  IdempotentHandler,
  IdempotentHandlerOptions,
  ReceiptStore,
  StoredResponse,
  BeginResult,
} from './receiver.js';
export { DeliveryError } from './errors.js';
export type { DeliveryErrorCode } from './errors.js';
