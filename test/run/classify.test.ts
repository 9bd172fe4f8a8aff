// run()'s default classifiers as plain calls, on the shapes the clients give (as read in
// got 14-15, ky 1-2 and axios 1.x sources): the edges the loopback tests of
// clients.test.ts cannot reach (a connect-phase timeout, an error after a 2xx answer).
import { describe, expect, it } from 'vitest';
import { classifyErrorDefault, classifyValueDefault, observedHeaders, OK_200 } from '../../src/run/classify.js';

describe('classifyValueDefault', () => {
  it('a fetch Response: its status; hint headers only from 400 up', () => {
    expect(classifyValueDefault(new Response('x', { status: 202, headers: { 'retry-after': '3' } }))).toEqual({ status: 202 });
    expect(classifyValueDefault(new Response('x', { status: 503, headers: { 'Retry-After': '3', 'set-cookie': 'a=b' } }))).toEqual({
      status: 503,
      headers: { 'retry-after': '3' },
    });
  });

  it('statusCode (undici.request, IncomingMessage, got): a record with mixed case and arrays', () => {
    expect(classifyValueDefault({ statusCode: 429, headers: { 'Retry-After': ['2'], date: 'Thu, 01 Jan 2026 00:00:00 GMT' } })).toEqual({
      status: 429,
      headers: { 'retry-after': '2', date: 'Thu, 01 Jan 2026 00:00:00 GMT' },
    });
    expect(classifyValueDefault({ statusCode: 200, headers: {} })).toBe(OK_200);
  });

  it('anything else is 200: a number, a JSON body with a status word, an opaque status 0', () => {
    for (const v of [42, null, 'ok', { status: 'ok' }, { status: 0 }, { statusCode: '503' }]) expect(classifyValueDefault(v)).toBe(OK_200);
  });
});

describe('classifyErrorDefault', () => {
  it("axios's own timeout (made without a cause) is a timeout; a socket's ETIMEDOUT it wraps keeps its class", () => {
    expect(classifyErrorDefault({ isAxiosError: true, code: 'ECONNABORTED', message: 'timeout of 50ms exceeded' })).toEqual({
      errorClass: 'timeout',
      sent: 'unknown',
    });
    expect(classifyErrorDefault({ isAxiosError: true, code: 'ETIMEDOUT', message: 'timeout of 50ms exceeded' })).toEqual({
      errorClass: 'timeout',
      sent: 'unknown',
    });
    const socket = Object.assign(new Error('connect ETIMEDOUT 10.0.0.1:80'), { code: 'ETIMEDOUT' });
    expect(classifyErrorDefault(Object.assign(new Error(socket.message, { cause: socket }), { isAxiosError: true, code: 'ETIMEDOUT' }))).toEqual({
      errorClass: 'connect_timeout',
    });
  });

  it("got's TimeoutError by phase: before the connection opened nothing was sent", () => {
    const got = (event: string) => Object.assign(new Error(`Timeout awaiting '${event}'`), { name: 'TimeoutError', code: 'ETIMEDOUT', event });
    expect(classifyErrorDefault(got('lookup'))).toEqual({ errorClass: 'dns', sent: 'not_sent' });
    expect(classifyErrorDefault(got('connect'))).toEqual({ errorClass: 'connect_timeout', sent: 'not_sent' });
    expect(classifyErrorDefault(got('secureConnect'))).toEqual({ errorClass: 'connect_timeout', sent: 'not_sent' });
    for (const e of ['socket', 'send', 'response', 'read', 'request']) expect(classifyErrorDefault(got(e))).toEqual({ errorClass: 'timeout', sent: 'unknown' });
  });

  it('a status on the error (axios, got, ky): 300 and up is that status with its hint headers', () => {
    expect(
      classifyErrorDefault({ isAxiosError: true, code: 'ERR_BAD_RESPONSE', response: { status: 503, headers: new Headers({ 'retry-after': '1' }) } }),
    ).toEqual({ status: 503, headers: { 'retry-after': '1' } });
    expect(classifyErrorDefault({ name: 'HTTPError', code: 'ERR_NON_2XX_3XX_RESPONSE', response: { statusCode: 404, headers: {} } })).toEqual({ status: 404 });
  });

  it("a failure after a 2xx answer (got's ReadError on a 200) is no answer: its code, else `error`", () => {
    expect(classifyErrorDefault({ name: 'ReadError', code: 'ERR_READING_RESPONSE_STREAM', response: { statusCode: 200, headers: {} } })).toEqual({
      errorClass: 'error',
    });
    expect(classifyErrorDefault({ name: 'ReadError', code: 'ECONNRESET', response: { statusCode: 200, headers: {} } })).toEqual({ errorClass: 'reset' });
  });

  it("fetch's TypeError with the socket's code in its cause; ky 2's NetworkError one level further", () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    const fetchError = new TypeError('fetch failed', { cause: refused });
    expect(classifyErrorDefault(fetchError)).toEqual({ errorClass: 'connect_refused' });
    expect(classifyErrorDefault(Object.assign(new Error('Request failed due to a network error', { cause: fetchError }), { name: 'NetworkError' }))).toEqual({
      errorClass: 'connect_refused',
    });
  });
});

describe('observedHeaders', () => {
  it('takes a plain lower-case record as it is, reads every other shape', () => {
    const plain = { 'retry-after': '1' };
    expect(observedHeaders(plain)).toBe(plain);
    expect(observedHeaders(new Headers({ 'Retry-After': '1' }))).toEqual({ 'retry-after': '1' });
    expect(observedHeaders(new Map([['retry-after', '4']]))).toEqual({ 'retry-after': '4' });
    expect(observedHeaders({ RateLimit: 'r=0;t=5', 'X-Other': 'y' })).toEqual({ ratelimit: 'r=0;t=5' });
    expect(observedHeaders(undefined)).toBeUndefined();
  });
});
