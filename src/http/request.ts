// A client.fetch call's request, checked and encoded before any attempt: the URL (no
// credentials in it), the method, the headers (relent's own and undici's refused ones
// apart), the body, the idempotency key, the redirect mode and the signal.
import type { ResolvedPropagation } from '../core/propagation.js';
import { IDEMPOTENCY_KEY_HEADER, keyFromHeader, resolveIdempotencyKey } from '../shared/idempotency.js';
import { prepareBody, type PreparedBody } from './body.js';
import type { HeadersLike, RelentRequestInit } from './client.js';
import { invalid } from './operation.js';

/** Headers undici manages itself or refuses; setting them is a caller error. */
const REFUSED_HEADERS = new Set(['transfer-encoding', 'keep-alive', 'upgrade', 'expect', 'connection']);

/** What one call knows after preparing its request (nothing here is ever logged). */
export interface Prepared {
  readonly url: URL;
  readonly method: string;
  readonly headers: string[];
  readonly body: PreparedBody;
  readonly signal: AbortSignal | undefined;
  readonly redirect: 'follow' | 'manual' | 'error';
  readonly idempotencyKey: string | null;
}

function parseInput(input: string | URL | Request): { url: URL; request: Request | null } {
  let url: URL;
  let request: Request | null = null;
  if (typeof input === 'string') {
    try {
      url = new URL(input);
    } catch {
      // The input is not echoed: it may hold a token.
      throw invalid('input', 'Expected `input` to be an absolute http: or https: URL');
    }
  } else if (input instanceof URL) {
    url = input;
  } else if (typeof Request !== 'undefined' && input instanceof Request) {
    request = input;
    url = new URL(input.url);
  } else {
    throw invalid('input', 'Expected `input` to be a URL string, a URL or a Request');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid('input', 'Expected `input` to be an http: or https: URL');
  if (url.username !== '' || url.password !== '') throw invalid('input', 'A URL with credentials is refused (send them in an Authorization header)');
  return { url, request };
}

const METHOD = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const NORMALIZED = new Set(['DELETE', 'GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH']);

function normalizeMethod(m: unknown): string {
  if (typeof m !== 'string' || !METHOD.test(m)) throw invalid('method', 'Expected `method` to be an HTTP method token');
  const up = m.toUpperCase();
  if (up === 'CONNECT' || up === 'TRACK') throw invalid('method', `The method ${up} is not supported`);
  return NORMALIZED.has(up) ? up : m;
}

function toHeaders(h: HeadersLike): Headers {
  if (h instanceof Headers) return h;
  try {
    return new Headers(h as ConstructorParameters<typeof Headers>[0]);
  } catch {
    // The platform's message names the value, which may be a secret.
    throw invalid('headers', 'Invalid header name or value in `headers` (values are not shown)');
  }
}

/** The call's request, checked and encoded; a promise only when the body must be read first (a Request's, a Blob, FormData). */
export function prepareRequest(
  input: string | URL | Request,
  init: RelentRequestInit,
  autoKeyDefault: boolean,
  prop: ResolvedPropagation,
): Prepared | Promise<Prepared> {
  const { url, request } = parseInput(input);
  const method = normalizeMethod(init.method ?? request?.method ?? 'GET');
  const rawBody: unknown = init.body;
  if (rawBody === undefined && request !== null && request.body !== null) {
    return request.arrayBuffer().then((ab) => prepareWithBody(url, request, method, ab, init, autoKeyDefault, prop));
  }
  return prepareWithBody(url, request, method, rawBody, init, autoKeyDefault, prop);
}

function prepareWithBody(
  url: URL,
  request: Request | null,
  method: string,
  rawBody: unknown,
  init: RelentRequestInit,
  autoKeyDefault: boolean,
  prop: ResolvedPropagation,
): Prepared | Promise<Prepared> {
  if (rawBody !== undefined && rawBody !== null && (method === 'GET' || method === 'HEAD')) throw invalid('body', `A ${method} request cannot have a body`);
  const body = prepareBody(rawBody);
  if (body instanceof Promise) return body.then((b) => prepared(url, request, method, b, init, autoKeyDefault, prop));
  return prepared(url, request, method, body, init, autoKeyDefault, prop);
}

function prepared(
  url: URL,
  request: Request | null,
  method: string,
  body: PreparedBody,
  init: RelentRequestInit,
  autoKeyDefault: boolean,
  prop: ResolvedPropagation,
): Prepared {
  const headers: string[] = [];
  let headerKey: string | null = null;
  let hasContentType = false;
  const hIn = init.headers ?? request?.headers;
  if (hIn !== undefined && hIn !== null) {
    for (const [name, value] of toHeaders(hIn)) {
      if (REFUSED_HEADERS.has(name)) {
        if (name === 'connection' && /^\s*(close|keep-alive)\s*$/i.test(value)) {
          /* allowed by undici */
        } else throw invalid('headers', `The \`${name}\` header is managed by the HTTP client and cannot be set`);
      }
      if (name === 'content-length' && body.kind !== 'stream') continue; // we know the length
      if (name === 'content-type') hasContentType = true;
      if (name === IDEMPOTENCY_KEY_HEADER) headerKey = keyFromHeader(value);
      if (prop.sends && prop.names.includes(name)) continue; // relent sets these per attempt
      headers.push(name, value);
    }
  }
  if (body.kind === 'bytes' && body.contentType !== null && !hasContentType) headers.push('content-type', body.contentType);

  const { key, header } = resolveIdempotencyKey(init.idempotencyKey ?? null, headerKey, init.autoIdempotencyKey ?? autoKeyDefault, method, init.idempotent);
  if (header !== null) headers.push(IDEMPOTENCY_KEY_HEADER, header);

  const redirect = init.redirect ?? (request?.redirect as 'follow' | 'manual' | 'error' | undefined) ?? 'follow';
  if (redirect !== 'follow' && redirect !== 'manual' && redirect !== 'error')
    throw invalid('redirect', 'Expected `redirect` to be "follow", "manual" or "error"');
  const signal = init.signal ?? request?.signal ?? undefined;
  return new PreparedRequest(url, method, headers, body, signal, redirect, key);
}

class PreparedRequest implements Prepared {
  constructor(
    readonly url: URL,
    readonly method: string,
    readonly headers: string[],
    readonly body: PreparedBody,
    readonly signal: AbortSignal | undefined,
    readonly redirect: 'follow' | 'manual' | 'error',
    readonly idempotencyKey: string | null,
  ) {}
}
