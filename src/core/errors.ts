import type { TerminalReason } from './types.js';

/** Stable error codes. The CLI maps them to exit statuses; callers switch on them. */
export type RelentErrorCode =
  | 'ERR_INVALID_POLICY'
  | 'ERR_INVALID_INPUT'
  | 'ERR_DEADLINE_EXCEEDED'
  | 'ERR_MAX_ATTEMPTS'
  | 'ERR_NOT_RETRYABLE'
  | 'ERR_RETRY_AFTER_TOO_LONG'
  | 'ERR_RETRY_BUDGET_EXHAUSTED'
  | 'ERR_CIRCUIT_OPEN'
  | 'ERR_BULKHEAD_FULL'
  | 'ERR_CONCURRENCY_LIMITED'
  | 'ERR_RATE_LIMITED'
  | 'ERR_CANCELLED'
  | 'ERR_UNKNOWN_OUTCOME'
  | 'ERR_DEFERRED'
  | 'ERR_BODY_NOT_REPLAYABLE'
  /** The operation's last attempt was a fault or an outcome injected by the policy's `chaos`. */
  | 'ERR_INJECTED';

const BRAND = Symbol.for('relent.error');

/** The one base error of relent: a stable `code`, the underlying error in `cause`. */
export class RelentError extends Error {
  readonly code: RelentErrorCode;
  /** The terminal reason of the operation, when the error ends one. */
  readonly reason: TerminalReason | null;
  /** Attempts made (network calls), when the error ends an operation. */
  readonly attempts: number | null;
  readonly operationId: string | null;
  /** For ERR_INVALID_POLICY / ERR_INVALID_INPUT: the field or location that was wrong. */
  readonly field: string | null;

  constructor(
    code: RelentErrorCode,
    message: string,
    options: {
      cause?: unknown;
      reason?: TerminalReason | null;
      attempts?: number | null;
      operationId?: string | null;
      field?: string | null;
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'RelentError';
    this.code = code;
    this.reason = options.reason ?? null;
    this.attempts = options.attempts ?? null;
    this.operationId = options.operationId ?? null;
    this.field = options.field ?? null;
    Object.defineProperty(this, BRAND, { value: true });
  }

  /** Works across duplicate copies of the package (brand check, not instanceof). */
  static is(value: unknown): value is RelentError {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
  }
}

/** The error code that ends an operation with each terminal reason (return has none). */
export const REASON_CODES: Readonly<Record<Exclude<TerminalReason, 'return'>, RelentErrorCode>> = Object.freeze({
  check_state: 'ERR_UNKNOWN_OUTCOME',
  deadline_exceeded: 'ERR_DEADLINE_EXCEEDED',
  max_attempts: 'ERR_MAX_ATTEMPTS',
  not_retryable: 'ERR_NOT_RETRYABLE',
  budget_exhausted: 'ERR_RETRY_BUDGET_EXHAUSTED',
  circuit_open: 'ERR_CIRCUIT_OPEN',
  bulkhead_full: 'ERR_BULKHEAD_FULL',
  concurrency_limited: 'ERR_CONCURRENCY_LIMITED',
  rate_limited: 'ERR_RATE_LIMITED',
  cancelled: 'ERR_CANCELLED',
  defer: 'ERR_DEFERRED',
});

export function invalidPolicy(field: string, expected: string, got: unknown): RelentError {
  return new RelentError('ERR_INVALID_POLICY', `Expected \`${field}\` to be ${expected}, got ${describe(got)}`, { field });
}

export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 60 ? value.slice(0, 57) + '...' : value);
  if (typeof value === 'number' || typeof value === 'boolean' || value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return 'an array';
  return 'an object';
}
