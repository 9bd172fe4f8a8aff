// relent/delivery/store: the store SPI — what a store of the delivery queue implements
// (DeliveryStore, and every type its methods take and return) and the error it throws, so a
// third-party store (another database) needs nothing else. Users of the queue import
// relent/delivery. Every export is named here (no `export *`).
//
// The contract: time is always passed in (never read by a store); every write about a
// claimed batch is fenced by its lease token; a store that cannot be reached fails with a
// DeliveryError of code ERR_STORE_UNAVAILABLE (the worker then pings it, if it can be
// pinged, and starts again when it answers). test/delivery/store-contract.test.ts is the
// suite both stores of relent pass; docs/delivery.md describes the tables they keep.

export type {
  DeliveryStore,
  BatchState,
  ListState,
  NewItem,
  EnqueueResult,
  BatchLimits,
  FormResult,
  FormAndClaimResult,
  ClaimThenFormResult,
  Lease,
  BatchItem,
  ClaimedBatch,
  AttemptRecord,
  Outcome,
  CompleteResult,
  BatchSummary,
  StoredItem,
  BatchDetail,
  ListFilter,
  RequeueFilter,
  DestinationStats,
  DropStat,
  SharedLimits,
  LimitedClaim,
  FinishedState,
} from './types.js';
export { DeliveryError } from './errors.js';
export type { DeliveryErrorCode } from './errors.js';
