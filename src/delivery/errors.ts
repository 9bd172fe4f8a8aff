/**
 * Errors of the delivery queue. Each has a stable `code` (the CLI prints the message
 * and exits non-zero), the underlying error in `cause`, and a brand that works across
 * duplicate copies of the package.
 *
 * The codes are the queue's own, not the decision core's: a store that cannot be
 * reached or is full is not a retry decision. (RelentError's closed set of codes lives
 * in src/core; these could join it later.)
 */
import { describe } from '../core/errors.js';

export type DeliveryErrorCode =
  /** A configuration file or an option is malformed; `field` names what is wrong. */
  | 'ERR_INVALID_CONFIG'
  /** The database cannot be reached or opened (refused, bad credentials, missing directory). */
  | 'ERR_STORE_UNAVAILABLE'
  /** The disk (or the database's size limit) is full: the write was rolled back. */
  | 'ERR_STORE_FULL'
  /** Another process holds the SQLite file's write lock longer than the busy timeout. */
  | 'ERR_STORE_LOCKED'
  /** The store's optional driver package (better-sqlite3, pg) is not installed. */
  | 'ERR_STORE_DRIVER_MISSING'
  /** Any other store failure (the driver's message is kept). */
  | 'ERR_STORE'
  /** The store was closed. */
  | 'ERR_STORE_CLOSED'
  /** `mustExist`: there is no queue at that store (no SQLite file, or no tables in that PostgreSQL schema). */
  | 'ERR_NO_QUEUE'
  /** An item names a destination that this queue has no configuration for. */
  | 'ERR_UNKNOWN_DESTINATION'
  /** An item is not acceptable (payload not JSON, key too long, too large). */
  | 'ERR_INVALID_ITEM';

const BRAND = Symbol.for('relent.deliveryError');

export class DeliveryError extends Error {
  readonly code: DeliveryErrorCode;
  /** For ERR_INVALID_CONFIG / ERR_INVALID_ITEM: the field that is wrong (`destinations.adobe.url`). */
  readonly field: string | null;

  constructor(code: DeliveryErrorCode, message: string, options: { cause?: unknown; field?: string | null } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'DeliveryError';
    this.code = code;
    this.field = options.field ?? null;
    Object.defineProperty(this, BRAND, { value: true });
  }

  static is(value: unknown): value is DeliveryError {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
  }
}

export function invalidConfig(field: string, expected: string, got: unknown): DeliveryError {
  return new DeliveryError('ERR_INVALID_CONFIG', `Expected \`${field}\` to be ${expected}, got ${describe(got)}`, { field });
}
