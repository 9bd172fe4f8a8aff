import type { Policy } from './policy.js';
import { parseRetryAfter } from './retry-after.js';
import type { Observation } from './types.js';

/** A server's request to wait, read from the response headers. */
export interface ServerHint {
  /** Where the hint came from. */
  readonly source: 'retry-after';
  readonly valid: boolean;
  /** The wait the server asked for (valid hints only; 0 otherwise). */
  readonly delayMs: number;
  /** The server said not to retry at all. */
  readonly noRetry: boolean;
}

/**
 * The server's wait hint for a failed attempt, or null when there is none to read
 * (R8). Only statuses the policy lists (429 and 503 by default) are read, and only
 * when the policy honours hints.
 */
export function readServerHint(policy: Policy, obs: Observation, wallNow: number | undefined): ServerHint | null {
  const headers = obs.headers;
  const status = obs.status;
  if (!headers || status === undefined || status === null) return null;
  if (!policy.retryAfter.honor || !policy.retryAfter.statuses.has(status)) return null;
  const value = headers['retry-after'];
  if (value === undefined) return null;
  const parsed = parseRetryAfter(value, { wallNowMs: wallNow ?? Number.NaN, dateHeader: headers['date'] ?? null });
  if (!parsed.present) return null;
  if (!parsed.valid) return { source: 'retry-after', valid: false, delayMs: 0, noRetry: false };
  return { source: 'retry-after', valid: true, delayMs: parsed.delayMs, noRetry: false };
}
