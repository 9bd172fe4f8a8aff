import { invalidPolicy } from './errors.js';
import type { Random } from './types.js';

/**
 * Backoff strategies, as JSON-able specs. `n` is the retry index: 0 for the wait
 * before the first retry. Every strategy returns a whole number of ms in
 * [0, backoffCeiling(spec)], finite for any n (tested up to n = 10^4 and beyond).
 */
export type BackoffSpec =
  /** The same wait every time. */
  | { readonly kind: 'constant'; readonly delayMs: number }
  /** min(cap, base·m^n), no jitter: only for comparisons (never a default). */
  | { readonly kind: 'exponential'; readonly baseMs: number; readonly capMs: number; readonly multiplier?: number }
  /** U[0, min(cap, base·m^n)) (Brooker's "full jitter"; AWS). */
  | { readonly kind: 'full-jitter'; readonly baseMs: number; readonly capMs: number; readonly multiplier?: number }
  /** v/2 + U[0, v/2) with v = min(cap, base·m^n) (Brooker's "equal jitter"). */
  | { readonly kind: 'equal-jitter'; readonly baseMs: number; readonly capMs: number; readonly multiplier?: number }
  /** min(cap, U[base, prev·3)), prev starting at base (Brooker's "decorrelated jitter"). */
  | { readonly kind: 'decorrelated-jitter'; readonly baseMs: number; readonly capMs: number }
  /** min(base·2^n + U[0, fraction), cap) (Google's truncated exponential backoff, Model Armor). */
  | { readonly kind: 'truncated-exponential'; readonly baseMs: number; readonly capMs: number; readonly fractionMs?: number }
  /** delays[min(n, len-1)] (Adobe: 15 s then 30 s). */
  | { readonly kind: 'schedule'; readonly delaysMs: readonly number[] }
  /** min(base·m^n, cap)·U[1-j, 1+j) (gRPC A6 since 2024: j = 0.2). */
  | { readonly kind: 'proportional-jitter'; readonly baseMs: number; readonly capMs: number; readonly multiplier?: number; readonly jitter?: number }
  /** U[0, min(cap, (2^(n+1) − 1)·base)) (Envoy's default retry back-off). */
  | { readonly kind: 'envoy'; readonly baseMs: number; readonly capMs: number };

export type BackoffKind = BackoffSpec['kind'];

export const BACKOFF_KINDS: readonly BackoffKind[] = Object.freeze([
  'constant',
  'exponential',
  'full-jitter',
  'equal-jitter',
  'decorrelated-jitter',
  'truncated-exponential',
  'schedule',
  'proportional-jitter',
  'envoy',
]);

/** Short names accepted on input (the Brooker experiment's names among them). */
const ALIASES: Readonly<Record<string, BackoffKind>> = {
  fixed: 'constant',
  full: 'full-jitter',
  equal: 'equal-jitter',
  decorrelated: 'decorrelated-jitter',
  truncated: 'truncated-exponential',
  grpc: 'proportional-jitter',
};

const MAX_DELAY_MS = 2 ** 31 - 1;

/** Checks a backoff spec and fills its defaults; errors name the field (e.g. `backoff.capMs`). */
export function normalizeBackoff(input: unknown, field = 'backoff'): BackoffSpec {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw invalidPolicy(field, `an object with a \`kind\` (${BACKOFF_KINDS.join(', ')})`, input);
  }
  const raw = input as Record<string, unknown>;
  const kindIn = raw.kind;
  const kind = (typeof kindIn === 'string' ? (ALIASES[kindIn] ?? kindIn) : kindIn) as BackoffKind;
  if (!BACKOFF_KINDS.includes(kind)) throw invalidPolicy(`${field}.kind`, `one of ${BACKOFF_KINDS.join(', ')}`, kindIn);
  const allowed: Record<BackoffKind, readonly string[]> = {
    constant: ['delayMs'],
    exponential: ['baseMs', 'capMs', 'multiplier'],
    'full-jitter': ['baseMs', 'capMs', 'multiplier'],
    'equal-jitter': ['baseMs', 'capMs', 'multiplier'],
    'decorrelated-jitter': ['baseMs', 'capMs'],
    'truncated-exponential': ['baseMs', 'capMs', 'fractionMs'],
    schedule: ['delaysMs'],
    'proportional-jitter': ['baseMs', 'capMs', 'multiplier', 'jitter'],
    envoy: ['baseMs', 'capMs'],
  };
  for (const key of Object.keys(raw)) {
    if (key !== 'kind' && !allowed[kind].includes(key)) {
      throw invalidPolicy(`${field}.${key}`, `absent (a \`${kind}\` backoff takes ${allowed[kind].join(', ')})`, raw[key]);
    }
  }
  const ms = (key: string, fallback?: number): number => {
    const v = raw[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v > MAX_DELAY_MS) {
      throw invalidPolicy(`${field}.${key}`, `a finite number of ms in [0, ${MAX_DELAY_MS}]`, v);
    }
    return v;
  };
  const multiplier = (fallback: number): number => {
    const v = raw.multiplier ?? fallback;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 1 || v > 100) {
      throw invalidPolicy(`${field}.multiplier`, 'a finite number in [1, 100]', v);
    }
    return v;
  };
  const capAtLeastBase = (baseMs: number, capMs: number): void => {
    if (capMs < baseMs) throw invalidPolicy(`${field}.capMs`, `>= baseMs (${baseMs})`, capMs);
  };
  switch (kind) {
    case 'constant':
      return Object.freeze({ kind, delayMs: ms('delayMs') });
    case 'exponential':
    case 'full-jitter':
    case 'equal-jitter': {
      const baseMs = ms('baseMs');
      const capMs = ms('capMs');
      capAtLeastBase(baseMs, capMs);
      return Object.freeze({ kind, baseMs, capMs, multiplier: multiplier(2) });
    }
    case 'decorrelated-jitter':
    case 'envoy': {
      const baseMs = ms('baseMs');
      const capMs = ms('capMs');
      capAtLeastBase(baseMs, capMs);
      return Object.freeze({ kind, baseMs, capMs });
    }
    case 'truncated-exponential': {
      const baseMs = ms('baseMs');
      const capMs = ms('capMs');
      capAtLeastBase(baseMs, capMs);
      return Object.freeze({ kind, baseMs, capMs, fractionMs: ms('fractionMs', 1000) });
    }
    case 'proportional-jitter': {
      const baseMs = ms('baseMs');
      const capMs = ms('capMs');
      capAtLeastBase(baseMs, capMs);
      const jitter = raw.jitter ?? 0.2;
      if (typeof jitter !== 'number' || !Number.isFinite(jitter) || jitter < 0 || jitter >= 1) {
        throw invalidPolicy(`${field}.jitter`, 'a number in [0, 1)', jitter);
      }
      if (capMs * (1 + jitter) > MAX_DELAY_MS) throw invalidPolicy(`${field}.capMs`, `small enough that capMs·(1+jitter) <= ${MAX_DELAY_MS}`, capMs);
      return Object.freeze({ kind, baseMs, capMs, multiplier: multiplier(2), jitter });
    }
    case 'schedule': {
      const list = raw.delaysMs;
      if (!Array.isArray(list) || list.length === 0 || list.length > 10_000) {
        throw invalidPolicy(`${field}.delaysMs`, 'a non-empty array of ms', list);
      }
      const delaysMs = list.map((v: unknown, i: number) => {
        if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v > MAX_DELAY_MS) {
          throw invalidPolicy(`${field}.delaysMs[${i}]`, `a finite number of ms in [0, ${MAX_DELAY_MS}]`, v);
        }
        return v;
      });
      return Object.freeze({ kind, delaysMs: Object.freeze(delaysMs) });
    }
  }
}

/** The largest delay a strategy can produce. */
export function backoffCeiling(spec: BackoffSpec): number {
  switch (spec.kind) {
    case 'constant':
      return Math.floor(spec.delayMs);
    case 'schedule':
      return Math.floor(Math.max(...spec.delaysMs));
    case 'proportional-jitter':
      return Math.floor(spec.capMs * (1 + (spec.jitter ?? 0.2)));
    default:
      return Math.floor(spec.capMs);
  }
}

/** base·m^n without overflow: once past the cap, further growth is irrelevant. */
function grow(baseMs: number, multiplier: number, n: number, capMs: number): number {
  if (baseMs <= 0) return 0;
  if (!(n > 0)) return Math.min(baseMs, capMs);
  // m^n overflows to Infinity for large n; min() keeps the cap, and base > 0 avoids 0·Infinity.
  const v = baseMs * Math.pow(multiplier, Math.min(n, 2048));
  return v < capMs ? v : capMs;
}

/**
 * The wait before retry number n+1 (n = 0 for the first retry). `prevDelayMs` is the
 * previous wait (decorrelated jitter only). Pure: randomness comes from `random`.
 */
export function computeBackoff(spec: BackoffSpec, n: number, prevDelayMs: number | null, random: Random): number {
  let v: number;
  switch (spec.kind) {
    case 'constant':
      v = spec.delayMs;
      break;
    case 'exponential':
      v = grow(spec.baseMs, spec.multiplier ?? 2, n, spec.capMs);
      break;
    case 'full-jitter':
      v = random() * grow(spec.baseMs, spec.multiplier ?? 2, n, spec.capMs);
      break;
    case 'equal-jitter': {
      const t = grow(spec.baseMs, spec.multiplier ?? 2, n, spec.capMs);
      v = t / 2 + random() * (t / 2);
      break;
    }
    case 'decorrelated-jitter': {
      const prev = prevDelayMs !== null && prevDelayMs >= spec.baseMs ? prevDelayMs : spec.baseMs;
      const hi = Math.min(prev * 3, spec.capMs * 3);
      v = Math.min(spec.capMs, spec.baseMs + random() * (hi - spec.baseMs));
      break;
    }
    case 'truncated-exponential': {
      const exp = grow(spec.baseMs, 2, n, spec.capMs);
      v = Math.min(exp + random() * (spec.fractionMs ?? 1000), spec.capMs);
      break;
    }
    case 'schedule': {
      const list = spec.delaysMs;
      const i = n < 0 ? 0 : n >= list.length ? list.length - 1 : Math.floor(n);
      v = list[i] ?? 0;
      break;
    }
    case 'proportional-jitter': {
      const j = spec.jitter ?? 0.2;
      v = grow(spec.baseMs, spec.multiplier ?? 2, n, spec.capMs) * (1 - j + 2 * j * random());
      break;
    }
    case 'envoy': {
      // (2^(n+1) − 1)·base, capped: retries 1, 2, 3 → [0, B), [0, 3B), [0, 7B)
      const interval = spec.baseMs <= 0 ? 0 : n >= 1024 ? spec.capMs : Math.min(spec.capMs, (Math.pow(2, n + 1) - 1) * spec.baseMs);
      v = random() * interval;
      break;
    }
  }
  if (!(v >= 0)) return 0; // NaN-proof
  const ms = Math.floor(v);
  // A schedule's delay is one of its entries, never above their maximum: no ceiling to
  // compute (a spread over up to 10 000 entries per retry).
  if (spec.kind === 'schedule') return ms;
  const ceiling = backoffCeiling(spec);
  return ms > ceiling ? ceiling : ms;
}
