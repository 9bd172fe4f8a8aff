import { randomUUID } from 'node:crypto';
import { RelentError } from '../core/errors.js';
import { parseSfList } from '../core/ratelimit.js';

/** The header of the IETF draft "The Idempotency-Key HTTP Header Field" (https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/). */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';

/** Methods for which `autoIdempotencyKey` creates a key (the ones not idempotent by RFC 9110). */
export const AUTO_KEY_METHODS: ReadonlySet<string> = new Set(['POST', 'PATCH']);

/**
 * The header value for a key: a Structured Field String (the draft: "Its value MUST be
 * a String"), i.e. quoted, with `\` and `"` escaped. Keys are printable ASCII
 * (0x20–0x7E), 1–255 characters; anything else is rejected (ERR_INVALID_INPUT).
 */
export function formatIdempotencyKey(key: string): string {
  if (typeof key !== 'string' || key.length === 0 || key.length > 255 || !/^[\x20-\x7e]+$/.test(key)) {
    throw new RelentError('ERR_INVALID_INPUT', 'Expected `idempotencyKey` to be 1-255 printable ASCII characters', { field: 'idempotencyKey' });
  }
  return `"${key.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

/**
 * The key in an `Idempotency-Key` header the caller set themselves: the String's
 * content when it is a Structured Field String, otherwise the trimmed value as is.
 */
export function keyFromHeader(value: string): string {
  const list = parseSfList(value);
  const first = list !== null && list.length === 1 ? list[0]!.value : null;
  if (first !== null && !Array.isArray(first) && (first as { type: string }).type === 'string') return (first as { value: string }).value;
  return value.trim();
}

/** A new random key (RFC 4122 v4 UUID, as the draft recommends). */
export function newIdempotencyKey(): string {
  return randomUUID();
}

/**
 * The operation's idempotency key, the same for the client and the interceptor: the
 * caller's `idempotencyKey` (validated) and a key in their own Idempotency-Key header
 * must agree and the header's wins; a given key without a header gets one; with
 * `auto`, a POST or PATCH not declared non-idempotent gets a new key. `header` is the
 * value to add to the request, or null when nothing is to be added.
 */
export function resolveIdempotencyKey(
  given: string | null,
  inHeader: string | null,
  auto: boolean,
  method: string,
  idempotent: boolean | null | undefined,
): { readonly key: string | null; readonly header: string | null } {
  if (given !== null) formatIdempotencyKey(given); // validates
  if (inHeader !== null) {
    if (given !== null && given !== inHeader) {
      throw new RelentError('ERR_INVALID_INPUT', '`idempotencyKey` and the Idempotency-Key header disagree', { field: 'idempotencyKey' });
    }
    return { key: inHeader, header: null };
  }
  if (given !== null) return { key: given, header: formatIdempotencyKey(given) };
  if (auto && AUTO_KEY_METHODS.has(method) && idempotent !== false) {
    const key = newIdempotencyKey();
    return { key, header: formatIdempotencyKey(key) };
  }
  return NO_KEY;
}

const NO_KEY = Object.freeze({ key: null, header: null });
