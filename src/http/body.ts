import { RelentError } from '../core/errors.js';

/**
 * A request body as the client sends it.
 * - `bytes`: buffered once, resent byte-identical on every attempt (string, ArrayBuffer,
 *   typed arrays and DataView, URLSearchParams, Blob, FormData — FormData is encoded once
 *   as multipart, so every attempt sends the same boundary and bytes).
 * - `stream`: a ReadableStream, a Node Readable or an (async) iterable: sent once and
 *   never resent; if a retry would be needed the call ends with ERR_BODY_NOT_REPLAYABLE.
 */
export type PreparedBody =
  | { readonly kind: 'none' }
  | { readonly kind: 'bytes'; readonly bytes: Buffer; readonly contentType: string | null }
  | { readonly kind: 'stream'; readonly stream: unknown };

const NONE: PreparedBody = Object.freeze({ kind: 'none' });

function isStreamLike(body: unknown): boolean {
  if (typeof body !== 'object' || body === null) return false;
  const b = body as Record<string | symbol, unknown>;
  return (
    typeof b.getReader === 'function' ||
    typeof b.pipe === 'function' ||
    typeof b[Symbol.asyncIterator] === 'function' ||
    typeof b[Symbol.iterator] === 'function'
  );
}

/** Turns a fetch body into what the client sends; async only for Blob and FormData. */
export function prepareBody(body: unknown): PreparedBody | Promise<PreparedBody> {
  if (body === undefined || body === null) return NONE;
  if (typeof body === 'string') return { kind: 'bytes', bytes: Buffer.from(body, 'utf8'), contentType: 'text/plain;charset=UTF-8' };
  if (body instanceof ArrayBuffer) return { kind: 'bytes', bytes: Buffer.from(new Uint8Array(body.slice(0))), contentType: null };
  if (ArrayBuffer.isView(body)) {
    // A copy: the caller may reuse its buffer while we retry.
    return { kind: 'bytes', bytes: Buffer.from(new Uint8Array(body.buffer, body.byteOffset, body.byteLength)), contentType: null };
  }
  if (body instanceof URLSearchParams) {
    return { kind: 'bytes', bytes: Buffer.from(body.toString(), 'utf8'), contentType: 'application/x-www-form-urlencoded;charset=UTF-8' };
  }
  if (typeof Blob !== 'undefined' && body instanceof Blob) {
    return body.arrayBuffer().then((ab) => ({ kind: 'bytes' as const, bytes: Buffer.from(ab), contentType: body.type || null }));
  }
  if (typeof FormData !== 'undefined' && body instanceof FormData) {
    // The Fetch standard's own encoder (boundary and all), run once.
    const encoded = new Response(body);
    const contentType = encoded.headers.get('content-type');
    return encoded.arrayBuffer().then((ab) => ({ kind: 'bytes' as const, bytes: Buffer.from(ab), contentType }));
  }
  if (isStreamLike(body)) return { kind: 'stream', stream: body };
  throw new RelentError(
    'ERR_INVALID_INPUT',
    'Expected `body` to be a string, ArrayBuffer, typed array, URLSearchParams, Blob, FormData, ReadableStream or (async) iterable',
    { field: 'body' },
  );
}
