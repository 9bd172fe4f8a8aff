import type { Policy } from './policy.js';
import { GRPC_PUSHBACK_HEADER, NO_RETRY_HEADER, parsePushback } from './propagation.js';
import { RATE_LIMIT_HEADERS, readRateLimitWait } from './ratelimit.js';
import { parseRetryAfter } from './retry-after.js';
import type { Observation } from './types.js';

/** A server's request to wait, read from the response headers. */
export interface ServerHint {
  /**
   * Where the hint came from: the Retry-After header, the draft `RateLimit` field, the
   * individual drafts' `RateLimit-Reset`, or the non-standard `X-RateLimit-Reset` family.
   */
  readonly source: 'retry-after' | 'ratelimit' | 'ratelimit-reset' | 'x-ratelimit-reset' | 'x-relent-no-retry' | 'grpc-retry-pushback-ms' | 'x-amz-retry-after';
  /** Always true for the rate-limit sources: an unusable rate-limit field is no hint at all. */
  readonly valid: boolean;
  /** The wait the server asked for (valid hints only; 0 otherwise). */
  readonly delayMs: number;
  /** The server said not to retry at all (`x-relent-no-retry`, or a negative or unparseable `grpc-retry-pushback-ms`). */
  readonly noRetry: boolean;
}

/**
 * The response headers (lower case) that `readServerHint` reads. Drivers that copy
 * headers into an observation need only these (and copying no others keeps cookies and
 * other secrets out of observations).
 */
export const SERVER_HINT_HEADERS: readonly string[] = Object.freeze([
  'retry-after',
  'date',
  ...RATE_LIMIT_HEADERS,
  NO_RETRY_HEADER,
  GRPC_PUSHBACK_HEADER,
  'x-amz-retry-after',
]);

/**
 * The AWS SDKs' server hint (2026 standard mode): milliseconds, which lengthen the
 * SDK's own backoff t_i by at most 5 s: max(t_i, min(asked, t_i + 5 s)).
 */
export const AMZ_RETRY_AFTER_HEADER = 'x-amz-retry-after';
export const AMZ_RETRY_AFTER_SLACK_MS = 5000;

/** x-amz-retry-after: a non-negative integer of ms (at most 2^31 − 1); anything else is no hint. */
function parseAmzRetryAfter(v: string | undefined): number | null {
  if (v === undefined) return null;
  const t = v.trim();
  if (!/^[0-9]{1,10}$/.test(t)) return null;
  const ms = Number(t);
  return ms <= 0x7fffffff ? ms : null;
}

/**
 * The hint headers of a response as an observation's `headers`: only SERVER_HINT_HEADERS,
 * names lower-cased, a repeated header's values joined with ", "; undefined when there
 * are none. Takes the shapes drivers hold: a Headers object (fetch), or a plain record
 * (undici and node:http give lower-case keys; other keys are matched case-insensitively).
 */
export function pickHintHeaders(headers: unknown): Record<string, string> | undefined {
  if (typeof headers !== 'object' || headers === null) return undefined;
  let out: Record<string, string> | undefined;
  if (typeof (headers as { get?: unknown }).get === 'function') {
    const h = headers as { get(name: string): string | null | undefined };
    for (const n of SERVER_HINT_HEADERS) {
      const v = h.get(n);
      if (typeof v === 'string') (out ??= {})[n] = v;
    }
    return out;
  }
  const rec = headers as Readonly<Record<string, unknown>>;
  for (const k in rec) {
    const lk = k.toLowerCase();
    if (!SERVER_HINT_HEADERS.includes(lk)) continue;
    const v = joined(rec[k]);
    if (v !== undefined) (out ??= {})[lk] = v;
  }
  return out;
}

function joined(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (Array.isArray(v) && v.every((x) => typeof x === 'string')) return v.join(', ');
  return undefined;
}

/**
 * The server's wait hint for a failed attempt, or null when there is none to read
 * Only statuses the policy lists (429 and 503 by default) are read, and only
 * when the policy honours hints.
 *
 * Precedence: a Retry-After header decides whenever it is present — a valid one gives
 * the wait, an invalid one (negative, malformed, absurd) gives an invalid hint, so the
 * policy's own backoff is used and the event says `retryAfterValid: false`. Only when
 * there is no Retry-After are the rate-limit fields read (draft -11 §7: "the Retry-After
 * field MUST take precedence"): `RateLimit` with `r=0` and a `t`, then `RateLimit-Reset`,
 * then `X-RateLimit-Reset` and its variants (see ratelimit.ts). Those give a valid hint
 * or none; `retryAfterValid` stays about the Retry-After header (null without one).
 *
 * "Don't retry" comes first, on any status (not only `retryAfter.statuses`) as long as
 * the policy honours hints: relent's `x-relent-no-retry` (any value), or gRPC's
 * `grpc-retry-pushback-ms` when negative or unparseable (gRPC A6). A non-negative
 * pushback is a wait, read after Retry-After and before the rate-limit fields, on any
 * status the policy retries (grpc-java honours it on every retryable code), not only
 * `retryAfter.statuses`; so is the AWS SDKs' `x-amz-retry-after` (after the pushback).
 */
export function readServerHint(policy: Policy, obs: Observation, wallNow: number | undefined): ServerHint | null {
  const headers = obs.headers;
  const status = obs.status;
  if (!headers || status === undefined || status === null) return null;
  if (!policy.retryAfter.honor) return null;
  if (headers[NO_RETRY_HEADER] !== undefined) return NO_RETRY_MARKER;
  const pushback = parsePushback(headers[GRPC_PUSHBACK_HEADER]);
  if (pushback !== null && pushback.noRetry) return NO_RETRY_PUSHBACK;
  if (!policy.retryAfter.statuses.has(status)) {
    // Outside the statuses whose Retry-After is read: the waits of gRPC and AWS, on a status the policy retries.
    if (!policy.retryOnStatus.has(status)) return null;
    if (pushback !== null) return { source: GRPC_PUSHBACK_HEADER, valid: true, delayMs: pushback.delayMs, noRetry: false };
    const amz = parseAmzRetryAfter(headers[AMZ_RETRY_AFTER_HEADER]);
    return amz === null ? null : { source: AMZ_RETRY_AFTER_HEADER, valid: true, delayMs: amz, noRetry: false };
  }
  const ctx = { wallNowMs: wallNow ?? Number.NaN, dateHeader: headers['date'] ?? null };
  const value = headers['retry-after'];
  if (value !== undefined) {
    const parsed = parseRetryAfter(value, ctx);
    if (parsed.present) {
      if (!parsed.valid) return { source: 'retry-after', valid: false, delayMs: 0, noRetry: false };
      return { source: 'retry-after', valid: true, delayMs: parsed.delayMs, noRetry: false };
    }
  }
  if (pushback !== null && !pushback.noRetry) return { source: GRPC_PUSHBACK_HEADER, valid: true, delayMs: pushback.delayMs, noRetry: false };
  const amz = parseAmzRetryAfter(headers[AMZ_RETRY_AFTER_HEADER]);
  if (amz !== null) return { source: AMZ_RETRY_AFTER_HEADER, valid: true, delayMs: amz, noRetry: false };
  const rl = readRateLimitWait(headers, ctx);
  if (rl.kind !== 'wait') return null;
  return { source: rl.source, valid: true, delayMs: rl.delayMs, noRetry: false };
}

const NO_RETRY_MARKER: ServerHint = Object.freeze({ source: NO_RETRY_HEADER, valid: true, delayMs: 0, noRetry: true });
const NO_RETRY_PUSHBACK: ServerHint = Object.freeze({ source: GRPC_PUSHBACK_HEADER, valid: true, delayMs: 0, noRetry: true });
