// Rate-limit header fields as a wait hint: the IETF `RateLimit` field
// (draft-ietf-httpapi-ratelimit-headers-11, https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/) and the common
// non-standard `*-Reset` fields, as a fallback to Retry-After.
//
// Pure: the caller passes the wall clock (`wallNowMs`, epoch ms) and the response's own
// `Date` header, so epoch-second resets are measured against the server's clock (the same
// skew correction as Retry-After). Never throws, whatever the input.
//
// Decisions:
// - `RateLimit` is a Structured Field List (RFC 9651). Each item names a policy and
//   carries `r` (available quota, REQUIRED, non-negative Integer) and `t` (effective
//   window in seconds, OPTIONAL, non-negative Integer). A field that does not parse, or
//   one item without a valid `r` or with an invalid `t`, makes the whole field malformed:
//   "Malformed RateLimit header fields MUST be ignored" (§7).
// - Only `r=0` implies a wait: the client "SHOULD NOT exceed the available quota within
//   the time expressed in" `t`, so with no quota left it waits `t` seconds. With several
//   exhausted policies the longest `t` wins. Every item with `r>0` → quota is available:
//   no wait (the caller uses its own backoff). `r=0` without `t` → exhausted but no
//   window given: no usable wait.
// - Legacy shapes are accepted as a fallback (not draft text): the dictionary form of
//   drafts -07/-08 (`limit=10, remaining=0, reset=5`) and the separate fields of the
//   individual drafts (`RateLimit-Remaining` + `RateLimit-Reset`, delta seconds).
// - The non-standard `X-RateLimit-Reset`, `X-Rate-Limit-Reset` and
//   `X-RateLimit-Retry-After` (GitHub, Twitter, Symfony, Discord) are read with ky's
//   heuristic: a number at or above 10^9 is an epoch time (seconds; at or above 10^12,
//   milliseconds), a smaller one is delta seconds. Decimals are accepted (Discord). An
//   epoch in the past means no wait (0). A matching `*-Remaining` header with a positive
//   value means quota is available: no wait.
// - A wait longer than MAX_SANE_RETRY_AFTER_MS (366 days) is ignored as absurd.
// - Responses served from a cache (`Age` > 0) carry stale quota: the RateLimit fields
//   SHOULD be ignored (§7), and so are the legacy ones.

import { serverNow } from './http-date.js';
import { MAX_SANE_RETRY_AFTER_MS } from './retry-after.js';

// ---------------------------------------------------------------------------------------
// RFC 9651 Structured Field Values: just enough to parse Lists and Dictionaries strictly.

/** A bare item: Integer and Decimal as numbers (`integer` tells which), the rest as text. */
export type SfBareItem =
  | { readonly type: 'integer' | 'decimal'; readonly value: number }
  | { readonly type: 'string' | 'token' | 'bytes' | 'display'; readonly value: string }
  | { readonly type: 'boolean'; readonly value: boolean }
  | { readonly type: 'date'; readonly value: number };

export interface SfItem {
  /** An Item's bare value, or the members of an Inner List. */
  readonly value: SfBareItem | readonly SfItem[];
  readonly params: ReadonlyMap<string, SfBareItem>;
}

class Cursor {
  i = 0;
  constructor(readonly s: string) {}
  peek(): string {
    return this.s.charAt(this.i);
  }
  get done(): boolean {
    return this.i >= this.s.length;
  }
  skipSp(): void {
    while (this.s.charCodeAt(this.i) === 0x20) this.i++;
  }
  skipOws(): void {
    let c = this.s.charCodeAt(this.i);
    while (c === 0x20 || c === 0x09) c = this.s.charCodeAt(++this.i);
  }
}

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
const isLcAlpha = (c: number): boolean => c >= 0x61 && c <= 0x7a;
const isAlpha = (c: number): boolean => isLcAlpha(c) || (c >= 0x41 && c <= 0x5a);
const TCHAR = "!#$%&'*+-.^_`|~";
const isTchar = (c: number): boolean => isAlpha(c) || isDigit(c) || (c < 0x80 && TCHAR.includes(String.fromCharCode(c)));
const isBase64 = (c: number): boolean => isAlpha(c) || isDigit(c) || c === 0x2b || c === 0x2f || c === 0x3d;

function parseNumber(p: Cursor): SfBareItem | null {
  const start = p.i;
  let sign = 1;
  if (p.peek() === '-') {
    sign = -1;
    p.i++;
  }
  if (!isDigit(p.s.charCodeAt(p.i))) return null;
  let intDigits = 0;
  while (isDigit(p.s.charCodeAt(p.i))) {
    p.i++;
    if (++intDigits > 15) return null;
  }
  if (p.peek() !== '.') return { type: 'integer', value: sign * Number(p.s.slice(start + (sign < 0 ? 1 : 0), p.i)) };
  if (intDigits > 12) return null;
  p.i++;
  let frac = 0;
  while (isDigit(p.s.charCodeAt(p.i))) {
    p.i++;
    if (++frac > 3) return null;
  }
  if (frac === 0) return null;
  return { type: 'decimal', value: sign * Number(p.s.slice(start + (sign < 0 ? 1 : 0), p.i)) };
}

function parseString(p: Cursor): SfBareItem | null {
  p.i++; // opening DQUOTE
  let out = '';
  for (;;) {
    if (p.done) return null;
    const c = p.s.charCodeAt(p.i++);
    if (c === 0x5c) {
      const n = p.s.charAt(p.i++);
      if (n !== '"' && n !== '\\') return null;
      out += n;
    } else if (c === 0x22) {
      return { type: 'string', value: out };
    } else if (c < 0x20 || c > 0x7e) {
      return null;
    } else {
      out += String.fromCharCode(c);
    }
  }
}

function parseDisplayString(p: Cursor): SfBareItem | null {
  p.i++; // %
  if (p.peek() !== '"') return null;
  p.i++;
  const bytes: number[] = [];
  for (;;) {
    if (p.done) return null;
    const c = p.s.charCodeAt(p.i++);
    if (c === 0x22) break;
    if (c < 0x20 || c > 0x7e) return null;
    if (c === 0x25) {
      const hex = p.s.slice(p.i, p.i + 2);
      if (!/^[0-9a-f]{2}$/.test(hex)) return null;
      bytes.push(parseInt(hex, 16));
      p.i += 2;
    } else bytes.push(c);
  }
  try {
    return { type: 'display', value: new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array(bytes)) };
  } catch {
    return null;
  }
}

function parseBareItem(p: Cursor): SfBareItem | null {
  const c = p.s.charCodeAt(p.i);
  if (c === 0x2d || isDigit(c)) return parseNumber(p);
  if (c === 0x22) return parseString(p);
  if (c === 0x2a || isAlpha(c)) {
    const start = p.i++;
    for (let d = p.s.charCodeAt(p.i); isTchar(d) || d === 0x3a || d === 0x2f; d = p.s.charCodeAt(++p.i));
    return { type: 'token', value: p.s.slice(start, p.i) };
  }
  if (c === 0x3a) {
    const start = ++p.i;
    while (isBase64(p.s.charCodeAt(p.i))) p.i++;
    if (p.peek() !== ':') return null;
    return { type: 'bytes', value: p.s.slice(start, p.i++) };
  }
  if (c === 0x3f) {
    const v = p.s.charAt(p.i + 1);
    if (v !== '0' && v !== '1') return null;
    p.i += 2;
    return { type: 'boolean', value: v === '1' };
  }
  if (c === 0x40) {
    p.i++;
    const n = parseNumber(p);
    return n && n.type === 'integer' ? { type: 'date', value: n.value } : null;
  }
  if (c === 0x25) return parseDisplayString(p);
  return null;
}

function parseKey(p: Cursor): string | null {
  const c = p.s.charCodeAt(p.i);
  if (!isLcAlpha(c) && c !== 0x2a) return null;
  const start = p.i++;
  for (let d = p.s.charCodeAt(p.i); isLcAlpha(d) || isDigit(d) || d === 0x5f || d === 0x2d || d === 0x2e || d === 0x2a; d = p.s.charCodeAt(++p.i));
  return p.s.slice(start, p.i);
}

function parseParams(p: Cursor): Map<string, SfBareItem> | null {
  const params = new Map<string, SfBareItem>();
  while (p.peek() === ';') {
    p.i++;
    p.skipSp();
    const key = parseKey(p);
    if (key === null) return null;
    let value: SfBareItem | null = { type: 'boolean', value: true };
    if (p.peek() === '=') {
      p.i++;
      value = parseBareItem(p);
      if (value === null) return null;
    }
    params.set(key, value);
  }
  return params;
}

function parseItemOrInnerList(p: Cursor): SfItem | null {
  if (p.peek() === '(') {
    p.i++;
    const members: SfItem[] = [];
    for (;;) {
      p.skipSp();
      if (p.peek() === ')') {
        p.i++;
        break;
      }
      const v = parseBareItem(p);
      if (v === null) return null;
      const params = parseParams(p);
      if (params === null) return null;
      members.push({ value: v, params });
      const c = p.peek();
      if (c !== ' ' && c !== ')') return null;
    }
    const params = parseParams(p);
    return params === null ? null : { value: members, params };
  }
  const v = parseBareItem(p);
  if (v === null) return null;
  const params = parseParams(p);
  return params === null ? null : { value: v, params };
}

/** Parses a Structured Field List (RFC 9651 §4.2.1); null when it does not parse. */
export function parseSfList(input: string): SfItem[] | null {
  if (typeof input !== 'string') return null;
  const p = new Cursor(input);
  p.skipSp();
  const items: SfItem[] = [];
  while (!p.done) {
    const item = parseItemOrInnerList(p);
    if (item === null) return null;
    items.push(item);
    p.skipOws();
    if (p.done) break;
    if (p.peek() !== ',') return null;
    p.i++;
    p.skipOws();
    if (p.done) return null; // trailing comma
  }
  return items;
}

/** Parses a Structured Field Dictionary (RFC 9651 §4.2.2); null when it does not parse. */
export function parseSfDictionary(input: string): Map<string, SfItem> | null {
  if (typeof input !== 'string') return null;
  const p = new Cursor(input);
  p.skipSp();
  const out = new Map<string, SfItem>();
  while (!p.done) {
    const key = parseKey(p);
    if (key === null) return null;
    let member: SfItem | null;
    if (p.peek() === '=') {
      p.i++;
      member = parseItemOrInnerList(p);
    } else {
      const params = parseParams(p);
      member = params === null ? null : { value: { type: 'boolean', value: true }, params };
    }
    if (member === null) return null;
    out.set(key, member);
    p.skipOws();
    if (p.done) break;
    if (p.peek() !== ',') return null;
    p.i++;
    p.skipOws();
    if (p.done) return null;
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// RateLimit (draft -11)

/** One service limit of a `RateLimit` field. */
export interface RateLimitItem {
  /** The policy name (a String in the draft; a Token is tolerated). */
  readonly policy: string;
  /** Available quota units. */
  readonly remaining: number;
  /** Effective window, seconds; null when absent. */
  readonly windowSeconds: number | null;
}

export type RateLimitParse =
  | { readonly present: false }
  | { readonly present: true; readonly valid: false }
  | { readonly present: true; readonly valid: true; readonly items: readonly RateLimitItem[] };

const ABSENT: RateLimitParse = Object.freeze({ present: false });
const MALFORMED: RateLimitParse = Object.freeze({ present: true, valid: false });

function nonNegInt(v: SfBareItem | undefined): number | null | undefined {
  if (v === undefined) return undefined;
  return v.type === 'integer' && v.value >= 0 ? v.value : null;
}

/**
 * Parses a `RateLimit` field value (draft -11 List form; also the -07/-08 dictionary
 * form `limit=…, remaining=…, reset=…`). Malformed → `{ present: true, valid: false }`.
 */
export function parseRateLimit(value: string | null | undefined): RateLimitParse {
  if (value === undefined || value === null) return ABSENT;
  if (typeof value !== 'string') return MALFORMED;
  const list = parseSfList(value);
  if (list !== null && list.length > 0) {
    const items: RateLimitItem[] = [];
    for (const it of list) {
      if (Array.isArray(it.value)) return MALFORMED;
      const v = it.value as SfBareItem;
      if (v.type !== 'string' && v.type !== 'token') return MALFORMED;
      const r = nonNegInt(it.params.get('r'));
      const t = nonNegInt(it.params.get('t'));
      if (r === undefined || r === null || t === null) return MALFORMED;
      items.push({ policy: v.value, remaining: r, windowSeconds: t ?? null });
    }
    return { present: true, valid: true, items };
  }
  // Drafts -07/-08: `RateLimit: limit=100, remaining=0, reset=30`.
  const dict = parseSfDictionary(value);
  if (dict !== null && dict.has('remaining')) {
    const bare = (k: string): SfBareItem | undefined => {
      const m = dict.get(k);
      return m && !Array.isArray(m.value) ? (m.value as SfBareItem) : undefined;
    };
    const r = nonNegInt(bare('remaining'));
    const t = nonNegInt(bare('reset'));
    if (r === undefined || r === null || t === null) return MALFORMED;
    return { present: true, valid: true, items: [{ policy: 'default', remaining: r, windowSeconds: t ?? null }] };
  }
  return MALFORMED;
}

/** What the rate-limit fields say about waiting. */
export type RateLimitWait =
  /** Quota is exhausted and the fields say for how long: wait `delayMs`. */
  | { readonly kind: 'wait'; readonly delayMs: number; readonly source: RateLimitSource }
  /** Quota is available: nothing to wait for (the caller's own backoff applies). */
  | { readonly kind: 'available'; readonly source: RateLimitSource }
  /** No usable field (absent, malformed, cached, or exhausted without a time). */
  | { readonly kind: 'none' };

export type RateLimitSource = 'ratelimit' | 'ratelimit-reset' | 'x-ratelimit-reset';

/** The response header names (lower case) this module reads, besides `date`. */
export const RATE_LIMIT_HEADERS: readonly string[] = Object.freeze([
  'ratelimit',
  'ratelimit-remaining',
  'ratelimit-reset',
  'x-ratelimit-reset',
  'x-ratelimit-remaining',
  'x-rate-limit-reset',
  'x-rate-limit-remaining',
  'x-ratelimit-retry-after',
  'age',
]);

const NONE: RateLimitWait = Object.freeze({ kind: 'none' });

/** The wait a `RateLimit` value implies (draft -11 §7). */
export function rateLimitWait(parsed: RateLimitParse): RateLimitWait {
  if (!parsed.present || !parsed.valid) return NONE;
  let wait = -1;
  let exhaustedWithoutWindow = false;
  for (const it of parsed.items) {
    if (it.remaining !== 0) continue;
    if (it.windowSeconds === null) exhaustedWithoutWindow = true;
    else if (it.windowSeconds > wait) wait = it.windowSeconds;
  }
  if (wait >= 0) {
    const ms = wait * 1000;
    return ms > MAX_SANE_RETRY_AFTER_MS ? NONE : { kind: 'wait', delayMs: ms, source: 'ratelimit' };
  }
  return exhaustedWithoutWindow ? NONE : { kind: 'available', source: 'ratelimit' };
}

const DECIMAL = /^[0-9]{1,16}(?:\.[0-9]{1,9})?$/;

/** Epoch seconds from here on (2001-09-09); smaller values are delta seconds. */
export const EPOCH_SECONDS_THRESHOLD = 1e9;
/** Epoch milliseconds from here on. */
export const EPOCH_MS_THRESHOLD = 1e12;

/**
 * A `*-Reset` value as a wait in ms: delta seconds, epoch seconds or epoch ms (see the
 * heuristic above), measured against the `Date` header when it is valid. null when the
 * value is not a non-negative decimal number or the wait is absurd.
 */
export function parseResetValue(value: string | null | undefined, ctx: { wallNowMs: number; dateHeader?: string | null }): number | null {
  if (typeof value !== 'string') return null;
  const s = value.trim();
  if (!DECIMAL.test(s)) return null;
  const n = Number(s);
  if (!Number.isFinite(n)) return null;
  let ms: number;
  if (n >= EPOCH_SECONDS_THRESHOLD) {
    const base = serverNow(ctx).ms;
    if (!Number.isFinite(base)) return null;
    const at = n >= EPOCH_MS_THRESHOLD ? n : n * 1000;
    ms = Math.max(0, at - base);
  } else {
    ms = n * 1000;
  }
  ms = Math.ceil(ms);
  return ms > MAX_SANE_RETRY_AFTER_MS ? null : ms;
}

function positive(value: string | undefined): boolean {
  if (value === undefined) return false;
  const s = value.trim();
  return /^[0-9]{1,16}$/.test(s) && Number(s) > 0;
}

/**
 * What a response's rate-limit fields say about waiting, in precedence order: `RateLimit`
 * (draft -11, or the -07/-08 dictionary form), then `RateLimit-Reset` (individual
 * drafts), then `X-RateLimit-Reset` / `X-Rate-Limit-Reset` / `X-RateLimit-Retry-After`.
 * `headers` has lower-case names. Retry-After is not read here: it takes precedence
 * over all of these and is the caller's to check first (hints.ts).
 */
export function readRateLimitWait(headers: Readonly<Record<string, string>>, ctx: { wallNowMs: number; dateHeader?: string | null }): RateLimitWait {
  if (typeof headers !== 'object' || headers === null) return NONE;
  const age = headers['age'];
  if (age !== undefined && positive(age)) return NONE;

  const standard = rateLimitWait(parseRateLimit(headers['ratelimit']));
  if (standard.kind !== 'none') return standard;

  const legacyReset = headers['ratelimit-reset'];
  if (legacyReset !== undefined) {
    if (positive(headers['ratelimit-remaining'])) return { kind: 'available', source: 'ratelimit-reset' };
    const ms = parseResetValue(legacyReset, ctx);
    if (ms !== null) return { kind: 'wait', delayMs: ms, source: 'ratelimit-reset' };
  }

  const xReset = headers['x-ratelimit-reset'] ?? headers['x-rate-limit-reset'] ?? headers['x-ratelimit-retry-after'];
  if (xReset !== undefined) {
    if (positive(headers['x-ratelimit-remaining'] ?? headers['x-rate-limit-remaining'])) return { kind: 'available', source: 'x-ratelimit-reset' };
    const ms = parseResetValue(xReset, ctx);
    if (ms !== null) return { kind: 'wait', delayMs: ms, source: 'x-ratelimit-reset' };
  }
  return NONE;
}
