import { errorClassOfCode } from '../core/error-codes.js';
import { pickHintHeaders } from '../core/hints.js';
import { ERROR_CLASSES } from '../core/policy.js';
import type { ErrorClass } from '../core/types.js';
import type { Classified } from './run.js';

/*
 * run()'s default classifiers: what a resolved value or a thrown error says about an
 * attempt when the caller gives no `classifyValue` / `classifyError` (or theirs returns
 * undefined). They read the shapes of the HTTP clients users already have, by duck
 * typing (nothing here imports them):
 *
 * | client | answer | failure |
 * | --- | --- | --- |
 * | fetch, ky (a Response) | `status`, `headers` (Headers) | `TypeError` with `cause.code`; ky 2 `NetworkError` (same cause); `TimeoutError` |
 * | undici.request | `statusCode`, `headers` (record) | `code` (`ECONNREFUSED`, `UND_ERR_*`) |
 * | node:http (IncomingMessage), got | `statusCode`, `headers` (record) | `code`; got's `HTTPError` (`response.statusCode`), `TimeoutError` (`event`) |
 * | axios | (only 2xx by default) | `response.status` and `response.headers` (AxiosHeaders); `code` (`ECONNREFUSED`; its own timeout `ECONNABORTED`/`ETIMEDOUT` without a `cause`) |
 * | ky | | `HTTPError` (`response`: a Response) |
 *
 * The fields read are the ones got 14–16, ky 1–2, axios 1.x and undici 7–8 share.
 */

/**
 * A value with an HTTP `status` (a fetch Response) is that status; one with a
 * `statusCode` (undici.request, node:http's IncomingMessage, got's Response) too;
 * anything else is 200. Hint headers (Retry-After, RateLimit…) are read from 400 up.
 */
export function classifyValueDefault(value: unknown): Classified {
  if (typeof value === 'object' && value !== null) {
    const status = (value as { status?: unknown }).status;
    if (typeof status === 'number' && Number.isInteger(status) && status >= 100 && status <= 999) {
      const h = (value as { headers?: unknown }).headers;
      if (status < 400 || !h) return { status };
      const headers = pickHintHeaders(h);
      return headers ? { status, headers } : { status };
    }
    // Out of line: the fetch Response above pays nothing for the other shapes.
    return classifyStatusCode(value);
  }
  return OK_200;
}

export const OK_200: Classified = Object.freeze({ status: 200 });

/** undici.request's ResponseData, node:http's IncomingMessage, got's Response: `statusCode` and a record of headers. */
function classifyStatusCode(value: object): Classified {
  const status = (value as { statusCode?: unknown }).statusCode;
  if (!isStatus(status)) return OK_200;
  // got answers with a Response that carries the request's options: a got set to retry says so.
  if (typeof (value as { retryCount?: unknown }).retryCount === 'number') noticeGotResponse(value);
  return withHeaders(status, (value as { headers?: unknown }).headers);
}

function isStatus(s: unknown): s is number {
  return typeof s === 'number' && Number.isInteger(s) && s >= 100 && s <= 999;
}

function withHeaders(status: number, h: unknown): Classified {
  if (status < 400 || typeof h !== 'object' || h === null) return status === 200 ? OK_200 : { status };
  const headers = pickHintHeaders(h);
  return headers ? { status, headers } : { status };
}

/**
 * relent's own errors carry their class. Then the clients' own timeouts (they name no
 * socket error: axios's `ECONNABORTED`/`ETIMEDOUT` without a cause, got's and ky's
 * `TimeoutError`, an `AbortSignal.timeout()`), then the error's `code` (through
 * `cause`: fetch wraps it), then an HTTP status the error carries (axios, got and ky
 * throw for 4xx/5xx: `response.status` or `response.statusCode`, 300 and up), else `error`.
 */
export function classifyErrorDefault(error: unknown): Classified {
  if (typeof error === 'object' && error !== null) {
    const own = (error as { errorClass?: unknown }).errorClass;
    if (typeof own === 'string' && own in ERROR_CLASSES) {
      const sent = (error as { sent?: unknown }).sent;
      return sent === 'not_sent' || sent === 'sent' || sent === 'unknown' ? { errorClass: own as ErrorClass, sent } : { errorClass: own as ErrorClass };
    }
    const timeout = clientTimeout(error);
    if (timeout !== null) {
      noticeClientRetries(error);
      return timeout;
    }
  }
  const cls = errorClassOfCode(error);
  if (cls !== null) {
    if (typeof error === 'object' && error !== null) noticeClientRetries(error);
    return { errorClass: cls };
  }
  if (typeof error === 'object' && error !== null) {
    noticeClientRetries(error);
    const res = (error as { response?: unknown }).response;
    if (typeof res === 'object' && res !== null) {
      const r = res as { status?: unknown; statusCode?: unknown; headers?: unknown };
      const status = isStatus(r.status) ? r.status : isStatus(r.statusCode) ? r.statusCode : null;
      // A 2xx on an error means the failure came after the answer (reading or parsing its body): not the answer's status.
      if (status !== null && status >= 300) return withHeaders(status, r.headers);
    }
  }
  return ERROR;
}

const ERROR: Classified = Object.freeze({ errorClass: 'error' });
const TIMEOUT: Classified = Object.freeze({ errorClass: 'timeout', sent: 'unknown' });
const CONNECT_TIMEOUT: Classified = Object.freeze({ errorClass: 'connect_timeout', sent: 'not_sent' });
const DNS_TIMEOUT: Classified = Object.freeze({ errorClass: 'dns', sent: 'not_sent' });

/** A client's own time limit (not a socket's): axios's timeout, got's and ky's TimeoutError, a DOMException from AbortSignal.timeout(). */
function clientTimeout(error: object): Classified | null {
  const e = error as { name?: unknown; code?: unknown; isAxiosError?: unknown; cause?: unknown; event?: unknown };
  if (e.isAxiosError === true) {
    // axios's own timer: ECONNABORTED (ETIMEDOUT with transitional.clarifyTimeoutError), made without a cause.
    // A socket's ECONNABORTED/ETIMEDOUT is wrapped with its cause and classed by its code.
    return (e.code === 'ECONNABORTED' || e.code === 'ETIMEDOUT') && e.cause === undefined ? TIMEOUT : null;
  }
  if (e.name !== 'TimeoutError') return null;
  // got names the phase that timed out: before the connection opened, nothing was sent.
  switch (e.event) {
    case 'lookup':
      return DNS_TIMEOUT;
    case 'connect':
    case 'secureConnect':
      return CONNECT_TIMEOUT;
    default:
      return TIMEOUT;
  }
}

/*
 * A client that retries inside relent's attempt (got and ky do by default) multiplies
 * relent's attempts (3 × 3 calls), spends the attempt's time on its own waits (a 503
 * or a refused connection then ends as a `timeout`) and hides from relent's budget
 * what the dependency was sent. relent says so once per client and process, with the
 * fix, when an answer or an error shows the client's options: got's Response and
 * errors carry them (`request.options`, `options`), ky's HTTPError too (`options`).
 * (ky's network errors and timeouts carry none; its first HTTPError tells.) The rule:
 * the options' `retry.limit` is above 0 and `retry.methods` holds the call's method.
 */
const warned = { got: false, ky: false };

/** For tests: warn again. */
export function resetClientRetryWarnings(): void {
  warned.got = false;
  warned.ky = false;
}

function noticeGotResponse(value: object): void {
  if (warned.got) return;
  const request = (value as { request?: unknown }).request;
  if (typeof request === 'object' && request !== null)
    noticeOptions((request as { options?: unknown }).options, (value as { retryCount?: unknown }).retryCount);
}

/** An error (or a value settled after its attempt ended) that may carry got's or ky's options. */
export function noticeClientRetries(error: unknown): void {
  if (warned.got && warned.ky) return;
  if (typeof error !== 'object' || error === null) return;
  const options = (error as { options?: unknown }).options;
  if (typeof options !== 'object' || options === null) {
    if (typeof (error as { retryCount?: unknown }).retryCount === 'number') noticeGotResponse(error);
    return;
  }
  const request = (error as { request?: unknown }).request;
  const count = typeof request === 'object' && request !== null ? (request as { retryCount?: unknown }).retryCount : undefined;
  noticeOptions(options, count);
}

function noticeOptions(options: unknown, retryCount: unknown): void {
  if (typeof options !== 'object' || options === null) return;
  const retry = (options as { retry?: unknown }).retry;
  if (typeof retry !== 'object' || retry === null) return;
  const r = retry as { limit?: unknown; methods?: unknown; errorCodes?: unknown; afterStatusCodes?: unknown };
  // got's retry options list error codes; ky's list the statuses whose Retry-After it waits for.
  const client = Array.isArray(r.errorCodes) ? 'got' : Array.isArray(r.afterStatusCodes) ? 'ky' : null;
  if (client === null || warned[client]) return;
  if (typeof r.limit !== 'number' || !(r.limit > 0)) return;
  const method = String((options as { method?: unknown }).method ?? 'GET').toUpperCase();
  if (Array.isArray(r.methods) && !r.methods.some((m) => String(m).toUpperCase() === method)) return;
  warned[client] = true;
  const did = typeof retryCount === 'number' && retryCount > 0 ? ` (it retried ${retryCount} time${retryCount === 1 ? '' : 's'} here)` : '';
  warn(
    `relent: ${client} retries ${method} up to ${r.limit} times inside each of relent's attempts${did}: the calls multiply, ` +
      `its waits spend the attempt's time (a 503 or a refused connection then ends as a timeout) and relent's budget does not see them. ` +
      `Pass \`retry: { limit: 0 }\` to ${client} and let relent retry.`,
    'RELENT_CLIENT_RETRIES',
  );
}

/** process.emitWarning where there is one (Node, Bun, Deno), else console.warn (browsers, workers). */
function warn(message: string, code: string): void {
  const p = (globalThis as { process?: { emitWarning?: (m: string, o: { code: string }) => void } }).process;
  if (typeof p?.emitWarning === 'function') p.emitWarning(message, { code });
  else console.warn(`${message} [${code}]`);
}

/**
 * The `headers` of any classifier's result as an observation reads them: a plain record
 * of lower-case names and string values is taken as it is; anything else (a Headers
 * object, AxiosHeaders, a Map, node:http's record with arrays or mixed-case names) is
 * read through pickHintHeaders, so that no shape loses its Retry-After.
 */
export function observedHeaders(h: unknown): Readonly<Record<string, string>> | undefined {
  if (typeof h !== 'object' || h === null) return undefined;
  if (typeof (h as { get?: unknown }).get !== 'function' && Object.getPrototypeOf(h) === Object.prototype) {
    let plain = true;
    for (const k in h) {
      if (typeof (h as Record<string, unknown>)[k] !== 'string' || k !== k.toLowerCase()) {
        plain = false;
        break;
      }
    }
    if (plain) return h as Readonly<Record<string, string>>;
  }
  return pickHintHeaders(h);
}
