// What travels between a caller and a server beside the request itself: the time the
// caller still waits (its deadline), the attempt number, and the server's "don't retry".
// Parsing and formatting of those headers lives here, once, for the client (which sends
// them) and the server middleware (which reads them). Pure: no clock, no I/O; never
// throws on a header value.
//
// Wire forms:
// - relent: `x-relent-deadline-ms: <ms>` (the caller's remaining time when it sent the
//   attempt, integer ms) and `x-relent-attempt: <n>` (1-based).
// - gRPC (PROTOCOL-HTTP2.md, proposal A6): `grpc-timeout: <1–8 digits><H|M|S|m|u|n>`,
//   `grpc-previous-rpc-attempts: <n>` (absent on the first attempt, 1 on the second),
//   and the answer `grpc-retry-pushback-ms: <int32>` (negative or unparseable: don't
//   retry; non-negative: retry after that many ms).
// - Envoy: `x-envoy-expected-rq-timeout-ms: <ms>` and `x-envoy-attempt-count: <n>`.
// - relent's answer `x-relent-no-retry: <reason>`: any value means "don't retry"
//   (relent's servers send `overloaded`, `deadline` or `upstream`).

import { RelentError, describe } from './errors.js';
import { trimOws } from './http-date.js';

export const DEADLINE_HEADER = 'x-relent-deadline-ms';
export const ATTEMPT_HEADER = 'x-relent-attempt';
export const NO_RETRY_HEADER = 'x-relent-no-retry';
export const GRPC_TIMEOUT_HEADER = 'grpc-timeout';
export const GRPC_PREVIOUS_ATTEMPTS_HEADER = 'grpc-previous-rpc-attempts';
export const GRPC_PUSHBACK_HEADER = 'grpc-retry-pushback-ms';
export const ENVOY_TIMEOUT_HEADER = 'x-envoy-expected-rq-timeout-ms';
export const ENVOY_ATTEMPT_HEADER = 'x-envoy-attempt-count';

/** The longest deadline a header may carry: 2^31−1 ms (24.8 days, the longest timer). Longer is 'absurd'. */
export const MAX_DEADLINE_MS = 2 ** 31 - 1;
/** The highest attempt number a header may carry; higher is 'absurd'. */
export const MAX_ATTEMPT_NUMBER = 1_000_000;

/** Why a header value was not used. */
export type HeaderProblem = 'malformed' | 'negative' | 'fractional' | 'absurd' | 'zero';

export type HeaderParse =
  | { readonly present: false }
  | { readonly present: true; readonly valid: true; readonly value: number }
  | { readonly present: true; readonly valid: false; readonly problem: HeaderProblem };

const ABSENT: HeaderParse = Object.freeze({ present: false });
const bad = (problem: HeaderProblem): HeaderParse => ({ present: true, valid: false, problem });
const ok = (value: number): HeaderParse => ({ present: true, valid: true, value });

const DIGITS = /^[0-9]+$/;
const FRACTIONAL = /^(?:[0-9]+\.[0-9]*|\.[0-9]+)$/;
const NEGATIVE = /^-(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$/;
const GRPC_TIMEOUT = /^([0-9]{1,8})([HMSmun])$/;
const SIGNED = /^-?[0-9]+$/;

/** A header value as Node or a plain record holds it: a string, or an array for a repeated header. */
function text(value: unknown): string | null | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') return null; // an array (repeated header) or a non-string
  return trimOws(value);
}

/** `1*DIGIT` as a number no larger than `max`; judged by its significant digits, never through an overflowing Number. */
function digits(s: string, max: number): HeaderParse {
  let i = 0;
  while (i < s.length - 1 && s.charCodeAt(i) === 0x30) i++;
  if (s.length - i > 15) return bad('absurd');
  const n = Number(s.slice(i));
  return n > max ? bad('absurd') : ok(n);
}

/** What a non-digit value is: negative, fractional, or malformed. */
function notDigits(s: string): HeaderParse {
  if (NEGATIVE.test(s)) return bad('negative');
  if (FRACTIONAL.test(s)) return bad('fractional');
  return bad('malformed');
}

/**
 * A deadline in integer ms (`x-relent-deadline-ms`, `x-envoy-expected-rq-timeout-ms`):
 * `1*DIGIT` after trimming spaces and tabs, leading zeros allowed, at most
 * MAX_DEADLINE_MS. `0` is valid (the time is spent). `-5` is 'negative', `1.5`
 * 'fractional', `10^20` 'absurd', `abc`, `+5`, `5ms`, an empty or repeated header
 * 'malformed'.
 */
export function parseDeadlineMs(value: unknown): HeaderParse {
  const s = text(value);
  if (s === undefined) return ABSENT;
  if (s === null || s.length === 0) return bad('malformed');
  return DIGITS.test(s) ? digits(s, MAX_DEADLINE_MS) : notDigits(s);
}

const GRPC_UNIT_MS: Readonly<Record<string, number>> = Object.freeze({ H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 });

/**
 * gRPC's `grpc-timeout` in ms (fractional for `u` and `n`): 1–8 digits and one unit
 * letter. `0m` is valid (spent); more than 8 digits or an unknown unit (`5X`) is
 * 'malformed'; over MAX_DEADLINE_MS (e.g. `99999999H`) 'absurd'.
 */
export function parseGrpcTimeout(value: unknown): HeaderParse {
  const s = text(value);
  if (s === undefined) return ABSENT;
  if (s === null) return bad('malformed');
  const m = GRPC_TIMEOUT.exec(s);
  if (m === null) return s.startsWith('-') ? bad('negative') : bad('malformed');
  const ms = Number(m[1]) * GRPC_UNIT_MS[m[2]!]!;
  return ms > MAX_DEADLINE_MS ? bad('absurd') : ok(ms);
}

/** An attempt number (`x-relent-attempt`, `x-envoy-attempt-count`): 1 … MAX_ATTEMPT_NUMBER; `0` is 'zero'. */
export function parseAttempt(value: unknown): HeaderParse {
  const s = text(value);
  if (s === undefined) return ABSENT;
  if (s === null || s.length === 0) return bad('malformed');
  if (!DIGITS.test(s)) return notDigits(s);
  const r = digits(s, MAX_ATTEMPT_NUMBER);
  return r.present && r.valid && r.value === 0 ? bad('zero') : r;
}

/** gRPC's `grpc-previous-rpc-attempts` (0 … MAX−1) as the 1-based number of this attempt. */
export function parsePreviousAttempts(value: unknown): HeaderParse {
  const s = text(value);
  if (s === undefined) return ABSENT;
  if (s === null || s.length === 0) return bad('malformed');
  if (!DIGITS.test(s)) return notDigits(s);
  const r = digits(s, MAX_ATTEMPT_NUMBER - 1);
  return r.present && r.valid ? ok(r.value + 1) : r;
}

/**
 * gRPC's `grpc-retry-pushback-ms`, a signed 32-bit integer: null when absent; `noRetry`
 * when negative or unparseable (as gRPC A6 says); else the wait in ms.
 */
export function parsePushback(value: unknown): { readonly noRetry: true } | { readonly noRetry: false; readonly delayMs: number } | null {
  const s = text(value);
  if (s === undefined) return null;
  if (s === null || !SIGNED.test(s) || s.length > 12) return NO_RETRY;
  const n = Number(s);
  if (n < 0 || n > 2 ** 31 - 1) return NO_RETRY;
  return { noRetry: false, delayMs: n };
}
const NO_RETRY = Object.freeze({ noRetry: true as const });

/** `x-relent-deadline-ms`'s value: whole ms, rounded down (never promise more time than is left), at least 0. */
export function formatDeadlineMs(ms: number): string {
  if (!(ms > 0)) return '0';
  return String(Math.floor(Math.min(ms, MAX_DEADLINE_MS)));
}

/**
 * `grpc-timeout`'s value for `ms`: the finest unit whose value fits 8 digits (`m`, then
 * `S`, `M`, `H`; `u` under 1 ms), rounded down, at least 1 (gRPC wants a positive value).
 */
export function formatGrpcTimeout(ms: number): string {
  if (!(ms > 0)) return '1n';
  if (ms < 1) return `${Math.max(1, Math.floor(ms * 1000))}u`;
  const capped = Math.min(ms, MAX_DEADLINE_MS);
  for (const unit of ['m', 'S', 'M', 'H'] as const) {
    const v = Math.floor(capped / GRPC_UNIT_MS[unit]!);
    if (v <= 99_999_999) return `${Math.max(1, v)}${unit}`;
  }
  return '99999999H';
}

/** The headers a relent client sends on each attempt (`propagate` in createClient / relentInterceptor). */
export interface PropagationSpec {
  /** Carries the time the caller waits for this attempt (ms). null: not sent. Default `x-relent-deadline-ms`. */
  readonly deadlineHeader?: string | null;
  /** Carries the attempt number (1-based). null: not sent. Default `x-relent-attempt`. */
  readonly attemptHeader?: string | null;
  /** Also send gRPC's `grpc-timeout`. Default false. */
  readonly grpcTimeout?: boolean;
  /** Also send Envoy's `x-envoy-expected-rq-timeout-ms`. Default false. */
  readonly envoyTimeout?: boolean;
  /** Under a relent server, an operation gets at most what is left of the incoming request's deadline. Default true. */
  readonly inheritDeadline?: boolean;
}

export interface ResolvedPropagation {
  readonly deadlineHeader: string | null;
  readonly attemptHeader: string | null;
  readonly grpcTimeout: boolean;
  readonly envoyTimeout: boolean;
  readonly inheritDeadline: boolean;
  /** Lower-case names of every header relent sets (a caller's own values of these are replaced). */
  readonly names: readonly string[];
  /** Whether any header is sent at all. */
  readonly sends: boolean;
}

export const PROPAGATION_DEFAULTS = Object.freeze({
  deadlineHeader: DEADLINE_HEADER,
  attemptHeader: ATTEMPT_HEADER,
  grpcTimeout: false,
  envoyTimeout: false,
  inheritDeadline: true,
});

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** A header name option: a token (lower-cased), or null for "do not send / read". */
export function headerNameOption(value: unknown, field: string, fallback: string | null): string | null {
  if (value === undefined) return fallback;
  if (value === null) return null;
  if (typeof value !== 'string' || !TOKEN.test(value)) {
    throw new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be a header name or null, got ${describe(value)}`, { field });
  }
  return value.toLowerCase();
}

function bool(value: unknown, field: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be a boolean, got ${describe(value)}`, { field });
  return value;
}

/** Validates a client's `propagate` option (`false` sends nothing and inherits nothing). */
export function resolvePropagation(spec: PropagationSpec | false | null | undefined, field = 'propagate'): ResolvedPropagation {
  if (spec === false) return OFF;
  if (spec === undefined || spec === null) return DEFAULT;
  if (typeof spec !== 'object') throw new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be an object or false, got ${describe(spec)}`, { field });
  for (const k of Object.keys(spec)) {
    if (!(k in PROPAGATION_DEFAULTS))
      throw new RelentError('ERR_INVALID_INPUT', `Unknown option \`${field}.${k}\` (known: ${Object.keys(PROPAGATION_DEFAULTS).join(', ')})`, {
        field: `${field}.${k}`,
      });
  }
  return build(
    headerNameOption(spec.deadlineHeader, `${field}.deadlineHeader`, DEADLINE_HEADER),
    headerNameOption(spec.attemptHeader, `${field}.attemptHeader`, ATTEMPT_HEADER),
    bool(spec.grpcTimeout, `${field}.grpcTimeout`, false),
    bool(spec.envoyTimeout, `${field}.envoyTimeout`, false),
    bool(spec.inheritDeadline, `${field}.inheritDeadline`, true),
  );
}

function build(
  deadlineHeader: string | null,
  attemptHeader: string | null,
  grpcTimeout: boolean,
  envoyTimeout: boolean,
  inheritDeadline: boolean,
): ResolvedPropagation {
  const names: string[] = [];
  if (deadlineHeader !== null) names.push(deadlineHeader);
  if (attemptHeader !== null) names.push(attemptHeader);
  if (grpcTimeout) names.push(GRPC_TIMEOUT_HEADER);
  if (envoyTimeout) names.push(ENVOY_TIMEOUT_HEADER);
  return Object.freeze({ deadlineHeader, attemptHeader, grpcTimeout, envoyTimeout, inheritDeadline, names: Object.freeze(names), sends: names.length > 0 });
}

const OFF = build(null, null, false, false, false);
const DEFAULT = build(DEADLINE_HEADER, ATTEMPT_HEADER, false, false, true);

/**
 * The propagation headers of one attempt as name/value pairs appended to `out` (flat):
 * the attempt number and the time the caller waits for this attempt, `waitMs` (the
 * smaller of the attempt timeout and the operation's remaining time).
 */
export function appendPropagation(out: string[], p: ResolvedPropagation, attempt: number, waitMs: number): string[] {
  if (p.attemptHeader !== null) out.push(p.attemptHeader, String(attempt));
  if (p.deadlineHeader !== null) out.push(p.deadlineHeader, formatDeadlineMs(waitMs));
  if (p.grpcTimeout) out.push(GRPC_TIMEOUT_HEADER, formatGrpcTimeout(waitMs));
  if (p.envoyTimeout) out.push(ENVOY_TIMEOUT_HEADER, formatDeadlineMs(waitMs));
  return out;
}

/** Where an incoming deadline or attempt number came from. */
export interface IncomingHeaderSpec {
  /** relent's deadline header to read (null: not read). Default `x-relent-deadline-ms`. */
  readonly deadlineHeader: string | null;
  /** relent's attempt header to read (null: not read). Default `x-relent-attempt`. */
  readonly attemptHeader: string | null;
  /** Read `grpc-timeout` and `grpc-previous-rpc-attempts`. */
  readonly grpc: boolean;
  /** Read `x-envoy-expected-rq-timeout-ms` and `x-envoy-attempt-count`. */
  readonly envoy: boolean;
}

/** What a server learns from an incoming request's headers. */
export interface IncomingHints {
  /** The time the caller waits (ms; the smallest valid one when several forms are present), or null. */
  readonly deadlineMs: number | null;
  /** The header the deadline came from. */
  readonly deadlineSource: string | null;
  /** The attempt number (1-based), or null when no valid one was sent. */
  readonly attempt: number | null;
  /** Header values that were present but unusable (ignored), e.g. `{ header: 'grpc-timeout', problem: 'malformed' }`. */
  readonly problems: readonly { readonly header: string; readonly problem: HeaderProblem }[];
}

const NO_PROBLEMS: IncomingHints['problems'] = Object.freeze([]);

/**
 * Reads the deadline and the attempt number of an incoming request (headers with
 * lower-case names, as node:http gives them). An unusable value is ignored (the request
 * is served as if it had none) and reported in `problems`; nothing here throws.
 */
export function readIncomingHints(headers: Readonly<Record<string, unknown>>, spec: IncomingHeaderSpec): IncomingHints {
  let deadlineMs: number | null = null;
  let deadlineSource: string | null = null;
  let attempt: number | null = null;
  let problems: { header: string; problem: HeaderProblem }[] | null = null;
  const deadline = (name: string, r: HeaderParse): void => {
    if (!r.present) return;
    if (!r.valid) (problems ??= []).push({ header: name, problem: r.problem });
    else if (deadlineMs === null || r.value < deadlineMs) {
      deadlineMs = r.value;
      deadlineSource = name;
    }
  };
  const attemptOf = (name: string, r: HeaderParse): void => {
    if (!r.present) return;
    if (!r.valid) (problems ??= []).push({ header: name, problem: r.problem });
    else attempt ??= r.value;
  };
  if (spec.deadlineHeader !== null) deadline(spec.deadlineHeader, parseDeadlineMs(headers[spec.deadlineHeader]));
  if (spec.grpc) deadline(GRPC_TIMEOUT_HEADER, parseGrpcTimeout(headers[GRPC_TIMEOUT_HEADER]));
  if (spec.envoy) deadline(ENVOY_TIMEOUT_HEADER, parseDeadlineMs(headers[ENVOY_TIMEOUT_HEADER]));
  if (spec.attemptHeader !== null) attemptOf(spec.attemptHeader, parseAttempt(headers[spec.attemptHeader]));
  if (spec.envoy) attemptOf(ENVOY_ATTEMPT_HEADER, parseAttempt(headers[ENVOY_ATTEMPT_HEADER]));
  if (spec.grpc) attemptOf(GRPC_PREVIOUS_ATTEMPTS_HEADER, parsePreviousAttempts(headers[GRPC_PREVIOUS_ATTEMPTS_HEADER]));
  return { deadlineMs, deadlineSource, attempt, problems: problems ?? NO_PROBLEMS };
}

/**
 * Whether response headers (lower-case names) say "don't retry": relent's
 * `x-relent-no-retry` with any value, or a negative or unparseable
 * `grpc-retry-pushback-ms`.
 */
export function saysNoRetry(headers: Readonly<Record<string, string>> | undefined | null): boolean {
  if (!headers) return false;
  if (headers[NO_RETRY_HEADER] !== undefined) return true;
  const p = parsePushback(headers[GRPC_PUSHBACK_HEADER]);
  return p !== null && p.noRetry;
}
