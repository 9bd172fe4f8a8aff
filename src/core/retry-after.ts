// Retry-After (RFC 9110 §10.2.3): `HTTP-date / delay-seconds`, turned into a delay in ms.
//
// Pure: the caller passes the wall clock (`ctx.wallNowMs`, epoch ms) and, when it has one,
// the response's own `Date` header so that an HTTP-date is measured against the server's
// clock rather than ours (skew correction).
//
// Decisions:
// - Surrounding OWS (SP / HTAB) is trimmed. Empty or OWS-only → invalid 'malformed'.
// - delay-seconds is exactly `1*DIGIT` (ASCII 0-9, leading zeros allowed). Everything else
//   that is not an HTTP-date is invalid: a leading `-` followed by a number → 'negative'
//   (also `-0`, `-1.5`); digits with one `.` (`1.5`, `2.0`, `.5`, `5.`) → 'fractional';
//   the rest (`+5`, `1e3`, `0x10`, `5s`, `soon`, `1 2`, non-ASCII digits) → 'malformed'.
// - Any well-formed value is valid, however far away: a server that asks for a year has
//   asked to wait a year. The policy's cap (`retryAfter.maxMs`) then stops the operation
//   (decide(): not_retryable, why retry_after_over_cap, the asked wait in the result); it
//   never falls back to a quick retry of its own. Long digit strings are judged by their
//   significant digits, never via a Number that could overflow to Infinity or round: more
//   than 12 significant digits (over 31,000 years) gives RETRY_AFTER_FOREVER_MS
//   (Number.MAX_SAFE_INTEGER), which also bounds an HTTP-date's delay.
// - HTTP-date: delayMs = date − Date header (skewCorrected) when `ctx.dateHeader` is a
//   valid HTTP-date, else date − wallNowMs. Dates in the past give 0. The result is
//   rounded up to a whole ms (only matters for a fractional wallNowMs). RFC 850 two-digit
//   years in either header are resolved against `ctx.wallNowMs`.
// - If the delay cannot be computed because `ctx.wallNowMs` is not finite (and there is no
//   valid Date header), the value is reported as invalid 'absurd' rather than guessed
//   (the only 'absurd' left).
// - Never throws, whatever the input (including non-string values from untyped callers,
//   which are 'malformed').

import { parseHttpDate, serverNow, trimOws } from './http-date.js';

export type RetryAfterForm = 'delay-seconds' | 'imf-fixdate' | 'rfc850' | 'asctime';

export type RetryAfterParse =
  | { readonly present: false }
  | {
      readonly present: true;
      readonly valid: false;
      readonly problem: 'malformed' | 'negative' | 'fractional' | 'absurd';
    }
  | {
      readonly present: true;
      readonly valid: true;
      readonly delayMs: number;
      readonly form: RetryAfterForm;
      readonly skewCorrected: boolean;
    };

/**
 * 366 days in ms: the longest wait a rate-limit field (`RateLimit`, `X-RateLimit-Reset`…)
 * may give before it is ignored as misread (see ratelimit.ts). Retry-After has no such
 * limit: any well-formed value is a real request to wait, and the policy's cap decides.
 */
export const MAX_SANE_RETRY_AFTER_MS: number = 366 * 24 * 60 * 60 * 1000;

/** The delay of a delay-seconds value too long to hold exactly (more than 12 significant digits). */
const RETRY_AFTER_FOREVER_MS = Number.MAX_SAFE_INTEGER;

const NOT_PRESENT: RetryAfterParse = Object.freeze({ present: false });

function invalid(problem: 'malformed' | 'negative' | 'fractional' | 'absurd'): RetryAfterParse {
  return { present: true, valid: false, problem };
}

function valid(delayMs: number, form: RetryAfterForm, skewCorrected: boolean): RetryAfterParse {
  return { present: true, valid: true, delayMs, form, skewCorrected };
}

// All linear: no nested or overlapping quantifiers.
const DIGITS = /^[0-9]+$/;
const FRACTIONAL = /^(?:[0-9]+\.[0-9]*|\.[0-9]+)$/;
const NEGATIVE = /^-(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$/;

function httpDateForm(s: string): RetryAfterForm {
  // Only called on strings parseHttpDate accepted; the separator after the day name tells the form.
  if (s.charAt(3) === ',') return 'imf-fixdate';
  if (s.charAt(3) === ' ') return 'asctime';
  return 'rfc850';
}

/**
 * Parses a Retry-After header value into a delay in milliseconds.
 * `ctx.wallNowMs` is the local wall clock (epoch ms); `ctx.dateHeader` the response's
 * `Date` header, if any. Never throws.
 */
export function parseRetryAfter(value: string | null | undefined, ctx: { wallNowMs: number; dateHeader?: string | null }): RetryAfterParse {
  if (value === undefined || value === null) return NOT_PRESENT;
  if (typeof value !== 'string') return invalid('malformed');
  const s = trimOws(value);
  if (s.length === 0) return invalid('malformed');

  if (DIGITS.test(s)) {
    let i = 0;
    while (i < s.length - 1 && s.charCodeAt(i) === 0x30) i++; // leading zeros
    const significant = s.length - i;
    // Up to 12 significant digits, seconds × 1000 is exact (< 2^53); longer is "forever" (no Infinity, no rounding).
    if (significant > 12) return valid(RETRY_AFTER_FOREVER_MS, 'delay-seconds', false);
    return valid(Number(s.slice(i)) * 1000, 'delay-seconds', false);
  }

  const wallNowMs = ctx !== null && typeof ctx === 'object' ? ctx.wallNowMs : Number.NaN;
  const dateMs = parseHttpDate(s, wallNowMs);
  if (dateMs !== undefined) {
    const { ms: baseMs, fromDate: skewCorrected } = serverNow(ctx);
    if (!Number.isFinite(baseMs)) return invalid('absurd');
    const delayMs = Math.max(0, Math.ceil(dateMs - baseMs));
    if (!Number.isFinite(delayMs)) return invalid('absurd');
    return valid(Math.min(delayMs, RETRY_AFTER_FOREVER_MS), httpDateForm(s), skewCorrected);
  }

  if (NEGATIVE.test(s)) return invalid('negative');
  if (FRACTIONAL.test(s)) return invalid('fractional');
  return invalid('malformed');
}
