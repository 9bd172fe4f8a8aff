// The field checks of the rtb configuration files (exchange and bidder). Every error is
// a RelentError ERR_INVALID_INPUT whose message and `field` name the field:
// ``Expected `partners[1].timeoutMs` to be an integer in [1, 60000], got "80"``.
import { describe, RelentError } from '../core/errors.js';

export function invalidConfig(field: string, expected: string, got: unknown): RelentError {
  return new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be ${expected}, got ${describe(got)}`, { field });
}

export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export function obj(v: unknown, field: string): Record<string, unknown> {
  if (!isObject(v)) throw invalidConfig(field, 'an object', v);
  return v;
}

export function onlyKeys(o: Record<string, unknown>, keys: readonly string[], field: string): void {
  for (const k of Object.keys(o)) {
    if (!keys.includes(k)) {
      const f = field ? `${field}.${k}` : k;
      throw new RelentError('ERR_INVALID_INPUT', `Unknown field \`${f}\` (known: ${keys.join(', ')})`, { field: f });
    }
  }
}

export function int(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw invalidConfig(field, `an integer in [${min}, ${max}]`, v);
  return v;
}

export function num(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) throw invalidConfig(field, `a number in [${min}, ${max}]`, v);
  return v;
}

export function bool(v: unknown, field: string): boolean {
  if (typeof v !== 'boolean') throw invalidConfig(field, 'true or false', v);
  return v;
}

export function str(v: unknown, field: string, pattern?: RegExp, what = 'a non-empty string'): string {
  if (typeof v !== 'string' || v.length === 0 || (pattern !== undefined && !pattern.test(v))) throw invalidConfig(field, what, v);
  return v;
}

export function oneOf<T extends string>(v: unknown, field: string, values: readonly T[]): T {
  if (typeof v !== 'string' || !values.includes(v as T)) throw invalidConfig(field, `one of ${values.map((x) => JSON.stringify(x)).join(', ')}`, v);
  return v as T;
}

export function required(o: Record<string, unknown>, key: string, field: string): unknown {
  const v = o[key];
  if (v === undefined) throw new RelentError('ERR_INVALID_INPUT', `Missing \`${field}\` (required)`, { field });
  return v;
}

export const MAX_MS = 2 ** 31 - 1;
export const NAME = /^[A-Za-z0-9._-]{1,64}$/;
export const PATH = /^\/[\x21-\x7e]*$/;
export const CURRENCY = /^[A-Z]{3}$/;

export function httpUrl(v: unknown, field: string): URL {
  if (typeof v !== 'string') throw invalidConfig(field, 'an http:// or https:// URL', v);
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw invalidConfig(field, 'an http:// or https:// URL', v);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw invalidConfig(field, 'an http:// or https:// URL', v);
  if (u.username !== '' || u.password !== '') {
    // The URL is not echoed: it holds credentials.
    throw new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be a URL without credentials (send them in \`headers\`)`, { field });
  }
  if (u.hash !== '') throw invalidConfig(field, 'a URL without a #fragment', v);
  return u;
}
