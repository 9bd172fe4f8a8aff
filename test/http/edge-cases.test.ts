// Edge cases found by outside tests (got's and ky's retry suites ported to client.fetch,
// a fault probe), each against real loopback servers: a Retry-After however far away
// over the cap stops; QUERY is idempotent; 413 with Retry-After is retried; no secret in
// any property of any error; the deadline covers the body.
import { randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { Agent, request } from 'undici';
import { createClient, type ClientOptions, type RelentRequestInit } from '../../src/http/client.js';
import { relentInterceptor, type InterceptorOptions } from '../../src/http/interceptor.js';
import { RelentFetchError } from '../../src/http/errors.js';
import type { ServerResponse } from 'node:http';
import { createTestClock } from '../../src/testing/index.js';
import { closedPort, eventLog, startRawServer, startServer, until, type Handler, type TestServer } from './helpers.js';

let servers: { close(): Promise<void> }[] = [];
const clients: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all([...servers, ...clients].map((s) => s.close()));
  servers = [];
  clients.length = 0;
});
async function server(handler: Handler, opts?: Parameters<typeof startServer>[1]): Promise<TestServer> {
  const s = await startServer(handler, opts);
  servers.push(s);
  return s;
}
function client(o: ClientOptions = {}) {
  const c = createClient(o);
  clients.push(c);
  return c;
}
function intercepted(o: InterceptorOptions = {}) {
  const a = new Agent().compose(relentInterceptor(o));
  clients.push(a);
  return a;
}
async function fail(p: Promise<unknown>): Promise<RelentFetchError> {
  try {
    const r = await p;
    throw new Error(`expected a rejection, got ${String(r)}`);
  } catch (e) {
    return e as RelentFetchError;
  }
}

describe('a Retry-After over the cap stops, however far away', () => {
  it.each([
    ['a year in seconds', '31536000', 31_536_000_000],
    ['over 366 days', '31622401', 31_622_401_000],
    ['an HTTP-date in 9999', 'Fri, 31 Dec 9999 23:59:59 GMT', null],
  ])('client.fetch, %s: one request, ERR_RETRY_AFTER_TOO_LONG at once with the asked wait', async (_name, value, asked) => {
    const s = await server((_q, res) => {
      res.writeHead(429, { 'retry-after': value });
      res.end('come back later');
    });
    const log = eventLog();
    const c = client({ onEvent: log.onEvent, policy: { backoff: { kind: 'constant', delayMs: 1 } } });
    const t0 = performance.now();
    const e = await fail(c.fetch(`${s.url}?token=secret`));
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(s.count()).toBe(1); // not retried in milliseconds with the own backoff
    expect(e).toBeInstanceOf(RelentFetchError);
    expect(e.code).toBe('ERR_RETRY_AFTER_TOO_LONG');
    expect(e.reason).toBe('not_retryable');
    expect(e.message).toMatch(/over the policy's cap of 60000 ms/);
    const a = log.attempts()[0]!;
    expect(a).toMatchObject({ decision: 'not_retryable', retryAfterValid: true });
    if (asked !== null) {
      expect(a.retryAfterMs).toBe(asked);
      expect(e.message).toContain(`asked to wait ${asked} ms`);
    } else expect(a.retryAfterMs!).toBeGreaterThan(200 * 365 * 86_400_000);
    expect(log.result()).toMatchObject({ reason: 'not_retryable', attempts: 1 });
    // The response is handed over with the error, without the query string.
    expect(e.response!.status).toBe(429);
    expect(e.response!.url).toBe(s.url);
    expect(await e.response!.text()).toBe('come back later');
  });

  it('the interceptor: the same', async () => {
    const s = await server((_q, res) => {
      res.writeHead(503, { 'retry-after': '31536000' });
      res.end();
    });
    const agent = intercepted({ policy: { backoff: { kind: 'constant', delayMs: 1 } } });
    const e = await fail(request(s.url, { dispatcher: agent }));
    expect(e.code).toBe('ERR_RETRY_AFTER_TOO_LONG');
    expect(e.message).toContain('asked to wait 31536000000 ms');
    expect(s.count()).toBe(1);
  });
});

describe('QUERY is idempotent', () => {
  it('client.fetch retries a QUERY after a 503, with the same body; a POST is not retried', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n === 1 ? 503 : 200);
      res.end(n === 1 ? 'busy' : 'result');
    });
    const c = client({ policy: { backoff: { kind: 'constant', delayMs: 1 } } });
    const res = await c.fetch(s.url, { method: 'QUERY', body: '{"q":"select"}', headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('result');
    expect(s.seen.map((x) => [x.method, x.body])).toEqual([
      ['QUERY', '{"q":"select"}'],
      ['QUERY', '{"q":"select"}'],
    ]);

    const p = await server((_q, res) => {
      res.writeHead(503);
      res.end();
    });
    expect((await c.fetch(p.url, { method: 'POST', body: 'x' })).status).toBe(503);
    expect(p.count()).toBe(1);
  });

  it('the interceptor retries a QUERY too (lower case as sent)', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n === 1 ? 503 : 200);
      res.end();
    });
    const agent = intercepted({ policy: { backoff: { kind: 'constant', delayMs: 1 } } });
    const r = await request(s.url, { dispatcher: agent, method: 'QUERY' as 'GET', body: 'q' });
    await r.body.dump();
    expect(r.statusCode).toBe(200);
    expect(s.count()).toBe(2);
  });
});

describe('413 with Retry-After is retried like 429/503', () => {
  it('413 + Retry-After: 1 → retried after the asked second; 413 alone is final', async () => {
    const s = await server((_q, res, n) => {
      if (n === 1) res.writeHead(413, { 'retry-after': '1' });
      res.end(n === 1 ? 'too large for now' : 'ok');
    });
    const log = eventLog();
    const c = client({ onEvent: log.onEvent });
    const res = await c.fetch(s.url, { method: 'PUT', body: 'payload' });
    expect(res.status).toBe(200);
    expect(s.count()).toBe(2);
    expect(s.seen[1]!.at - s.seen[0]!.at).toBeGreaterThanOrEqual(1000);
    expect(log.attempts()[0]).toMatchObject({ status: 413, decision: 'retry', retryAfterMs: 1000, retryAfterValid: true });

    const plain = await server((_q, res) => {
      res.writeHead(413);
      res.end('too large');
    });
    const r2 = await c.fetch(plain.url, { method: 'PUT', body: 'payload' });
    expect(r2.status).toBe(413);
    expect(plain.count()).toBe(1);
  });
});

/**
 * Every string an error holds, however deep: own properties (enumerable or not, symbol
 * keys too), getters of built-in prototypes (Response.url, headers), Headers entries,
 * byte arrays as text, along causes and responses. Functions (closures) are not walked.
 */
function everyString(root: unknown): string[] {
  const out: string[] = [];
  const seen = new Set<object>();
  let budget = 200_000;
  const visit = (v: unknown, depth: number): void => {
    if (--budget < 0) return;
    if (typeof v === 'string') return void out.push(v);
    if (typeof v === 'number' || typeof v === 'bigint' || typeof v === 'boolean') return void out.push(String(v));
    if (typeof v === 'symbol') return void out.push(v.toString());
    if (v === null || typeof v !== 'object' || seen.has(v) || depth > 14) return;
    seen.add(v);
    if (ArrayBuffer.isView(v)) return void out.push(Buffer.from(v.buffer, v.byteOffset, Math.min(v.byteLength, 1 << 20)).toString('latin1'));
    if (v instanceof ArrayBuffer) return void out.push(Buffer.from(v.slice(0, 1 << 20)).toString('latin1'));
    if (v instanceof URL) out.push(v.href);
    if (v instanceof Headers) for (const [k, x] of v) out.push(`${k}: ${x}`);
    if (v instanceof Map)
      for (const [k, x] of v) {
        visit(k, depth + 1);
        visit(x, depth + 1);
      }
    if (v instanceof Set) for (const x of v) visit(x, depth + 1);
    for (const key of Reflect.ownKeys(v)) {
      if (typeof key === 'string') out.push(key);
      let x: unknown;
      try {
        x = Reflect.get(v, key);
      } catch {
        continue;
      }
      visit(x, depth + 1);
    }
    for (let proto = Object.getPrototypeOf(v); proto !== null && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
      for (const key of Reflect.ownKeys(proto)) {
        const d = Object.getOwnPropertyDescriptor(proto, key);
        if (d?.get === undefined) continue;
        try {
          visit(d.get.call(v), depth + 1);
        } catch {
          // a getter that does not apply to this object
        }
      }
    }
  };
  visit(root, 0);
  out.push(inspect(root, { showHidden: true, depth: 10, getters: true }));
  return out;
}

const newSecret = (): string => `S3cr3t${randomBytes(9).toString('hex')}`;

describe('no query string or credential in any property of any error the client raises', () => {
  it('walks every property of every error (ERR_RETRY_AFTER_TOO_LONG with its response, timeouts, resets, redirects, breaker, bulkhead, budget, defer, input, the body deadline)', async () => {
    // The secret goes in the query, the fragment, Authorization, Cookie, an API key header
    // and the body; the servers set a cookie and redirect with it in the Location.
    const secret = newSecret();
    const q = `?token=${secret}&x=1#${secret}`;
    const init: RelentRequestInit = { headers: { authorization: `Bearer ${secret}`, cookie: `sid=${secret}`, 'x-api-key': secret } };
    const withBody = (method: string): RelentRequestInit => ({ ...init, method, body: `{"password":"${secret}"}` });
    const tooLong = await server((_q, res) => {
      res.writeHead(429, { 'retry-after': '31536000', 'set-cookie': `session=${secret}; HttpOnly` });
      res.end('slow down');
    });
    const pastDeadline = await server((_q, res) => {
      res.writeHead(503, { 'retry-after': '5', 'set-cookie': `session=${secret}` });
      res.end();
    });
    const busy = await server((_q, res) => {
      res.writeHead(503, { 'set-cookie': `session=${secret}` });
      res.end();
    });
    const hang = await server(() => {
      /* never answers */
    });
    const reset = await server((req) => req.socket.resetAndDestroy());
    const redirect = await server((_q, res) => {
      res.writeHead(302, { location: `/next?token=${secret}` });
      res.end();
    });
    const drip = await server((_q, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('first ');
      const t = setInterval(() => res.write('.'), 20);
      res.on('close', () => clearInterval(t));
    });
    const garbage = await startRawServer((socket) => socket.end('NOT HTTP AT ALL\r\n\r\n'));
    servers.push(garbage);
    const refused = `http://127.0.0.1:${await closedPort()}`;
    const fast = { backoff: { kind: 'constant' as const, delayMs: 1 } };

    const errors: { name: string; error: unknown }[] = [];
    const expectError = async (name: string, p: Promise<unknown>): Promise<void> => {
      const e = await fail(p);
      expect(e, name).toBeInstanceOf(Error);
      errors.push({ name, error: e });
    };
    const c = client({ policy: { ...fast, deadlineMs: 2000, attemptTimeoutMs: 300 } });
    await expectError('over the cap', c.fetch(tooLong.url + q, init));
    await expectError('past the deadline', c.fetch(pastDeadline.url + q, init));
    await expectError('max attempts (refused)', c.fetch(refused + '/p' + q, init));
    await expectError('deadline (hang)', c.fetch(hang.url + q, { ...init, deadlineMs: 200 }));
    await expectError('unknown outcome (POST reset)', c.fetch(reset.url + q, withBody('POST')));
    await expectError('protocol', c.fetch(garbage.origin + '/' + q, init));
    await expectError('redirect: error', c.fetch(redirect.url + q, { ...init, redirect: 'error' }));
    await expectError('too many redirects', createClient({ maxRedirections: 1, policy: { maxAttempts: 1 } }).fetch(redirect.url + q, init));
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 50);
    await expectError('cancelled', c.fetch(hang.url + q, { ...init, signal: ac.signal }));
    await expectError('stream body not replayable (response)', c.fetch(busy.url + q, { ...withBody('PUT'), body: Readable.from([secret]), duplex: 'half' }));
    await expectError(
      'stream body not replayable (no response)',
      c.fetch(refused + '/' + q, { ...withBody('PUT'), body: Readable.from([secret]), duplex: 'half' }),
    );
    await expectError('deferred', c.fetch(pastDeadline.url + q, { ...init, policy: { deferOverMs: 10 } }));
    const budgeted = client({
      policy: { ...fast, maxAttempts: 10, budget: { kind: 'ratio', ratio: 0, minPerSecond: 0, maxTokens: 1 }, budgetExhausted: 'stop' },
    });
    await expectError('budget', budgeted.fetch(refused + '/' + q, init));
    const broken = client({ breaker: { minimumThroughput: 1 }, policy: { maxAttempts: 1 } });
    await fail(broken.fetch(refused + '/' + q, init));
    await expectError('circuit open', broken.fetch(refused + '/' + q, init));
    const bulk = client({ bulkhead: { maxConcurrent: 1, maxQueue: 0 }, policy: { maxAttempts: 1, deadlineMs: 300 } });
    const held = bulk.fetch(hang.url + q, init).catch(() => null);
    await new Promise((r) => setTimeout(r, 30));
    await expectError('bulkhead full', bulk.fetch(hang.url + q, init));
    await held;
    await expectError('invalid: credentials in the URL', c.fetch(`http://user:${secret}@127.0.0.1:1/`));
    await expectError('invalid: bad URL', c.fetch(`::bad::${q}`));
    await expectError('invalid: bad header value', c.fetch('http://127.0.0.1:1/', { headers: { authorization: `${secret}\n` } }));
    await expectError('invalid: GET with a body', c.fetch(`http://127.0.0.1:1/${q}`, { ...init, body: secret }));
    // The body deadline: the error comes from reading the body.
    const res = await c.fetch(drip.url + q, { ...init, deadlineMs: 300 });
    await expectError('body deadline', res.text());
    // The interceptor's errors too.
    const agent = intercepted({ policy: { ...fast, deadlineMs: 2000, attemptTimeoutMs: 300 } });
    const ireq = (url: string, o: Record<string, unknown> = {}) =>
      request(url, { dispatcher: agent, headers: { authorization: `Bearer ${secret}`, cookie: `c=${secret}` }, ...o }).then(async (r) => {
        await r.body.text();
        return r;
      });
    await expectError('interceptor: over the cap', ireq(tooLong.url + q));
    await expectError('interceptor: refused', ireq(refused + '/' + q));
    await expectError('interceptor: POST reset', ireq(reset.url + q, { method: 'POST', body: secret }));
    await expectError('interceptor: body deadline', ireq(drip.url + q, { relent: { deadlineMs: 300 } }));

    expect(errors.length).toBeGreaterThanOrEqual(24);
    const codes = new Set(errors.map((x) => (x.error as { code?: string }).code));
    for (const code of [
      'ERR_RETRY_AFTER_TOO_LONG',
      'ERR_MAX_ATTEMPTS',
      'ERR_DEADLINE_EXCEEDED',
      'ERR_UNKNOWN_OUTCOME',
      'ERR_NOT_RETRYABLE',
      'ERR_CANCELLED',
      'ERR_BODY_NOT_REPLAYABLE',
      'ERR_DEFERRED',
      'ERR_RETRY_BUDGET_EXHAUSTED',
      'ERR_CIRCUIT_OPEN',
      'ERR_BULKHEAD_FULL',
      'ERR_INVALID_INPUT',
    ]) {
      expect(codes.has(code), code).toBe(true);
    }
    for (const { name, error } of errors) {
      const strings = everyString(error);
      const leak = strings.find((x) => x.includes(secret));
      expect(leak === undefined ? null : `${name}: ${leak.slice(Math.max(0, leak.indexOf(secret) - 80), leak.indexOf(secret) + 40)}`).toBeNull();
    }
    // The walk does reach the response: its URL is there, without the query.
    const withResponse = errors.find((x) => x.name === 'over the cap')!.error as RelentFetchError;
    expect(everyString(withResponse)).toContain(tooLong.url);
  }, 30_000);
});

describe('the deadline covers reading the body (on an injected test clock)', () => {
  /** A server that sends the head and 'a' at once, and the rest ('.' × 39, 'z') when the test calls finish(). */
  const dripping = async () => {
    const held: ServerResponse[] = [];
    const s = await server((_q, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('a');
      held.push(res);
    });
    return {
      url: s.url,
      finish: () => {
        for (const res of held.splice(0)) res.end('.'.repeat(39) + 'z');
      },
    };
  };

  it('client.fetch: a body still arriving at the deadline is aborted with an error naming the deadline', async () => {
    const s = await dripping();
    const clock = createTestClock();
    const c = client({ clock });
    const t0 = clock.now();
    const res = await c.fetch(`${s.url}?k=v`, { deadlineMs: 300 });
    expect(res.status).toBe(200);
    const text = fail(res.text());
    await clock.advanceAsync(300);
    const e = await text;
    const took = clock.now() - t0;
    expect(e).toBeInstanceOf(RelentFetchError);
    expect(e.code).toBe('ERR_DEADLINE_EXCEEDED');
    expect(e.reason).toBe('deadline_exceeded');
    expect(e.message).toMatch(/body was still arriving when the deadline of 300 ms passed/);
    expect(e.message).toContain('bodyDeadline: false');
    expect(e.message).not.toContain('k=v');
    expect(took).toBeGreaterThanOrEqual(250);
    expect(took).toBeLessThan(800); // not the second the body takes
  });

  it('bodyDeadline: false (per call or per client) lets a long download finish', async () => {
    const s = await dripping();
    const clock = createTestClock();
    const c = client({ clock });
    const res = await c.fetch(s.url, { deadlineMs: 300, bodyDeadline: false });
    const text = res.text();
    await clock.advanceAsync(1_000); // the body is still arriving a second in, far past the deadline
    s.finish();
    expect(await text).toBe('a' + '.'.repeat(39) + 'z');
    const lenient = client({ clock, bodyDeadline: false, policy: { deadlineMs: 300 } });
    const text2 = (await lenient.fetch(s.url)).text();
    await clock.advanceAsync(1_000);
    s.finish();
    expect((await text2).length).toBe(41);
    expect(() => createClient({ bodyDeadline: 'yes' as never })).toThrow(/`bodyDeadline`/);
  });

  it('a body that arrives within the deadline is untouched, and a finished body arms no late error', async () => {
    const s = await server((_q, res) => res.end('quick'));
    const clock = createTestClock();
    const c = client({ clock, policy: { deadlineMs: 200 } });
    const res = await c.fetch(s.url);
    // The body's end reaches the client (a socket event): its deadline timer is gone at once.
    await until('the body has arrived', () => clock.pending() === 0);
    await clock.advanceAsync(300); // read after the deadline: the body had already arrived
    expect(await res.text()).toBe('quick');
  });

  it('the interceptor: the handler gets ERR_DEADLINE_EXCEEDED; bodyDeadline: false opts out', async () => {
    const s = await dripping();
    const clock = createTestClock();
    const agent = intercepted({ clock, policy: { deadlineMs: 300 } });
    const r = await request(s.url, { dispatcher: agent });
    const text = fail(r.body.text());
    await clock.advanceAsync(300);
    const e = await text;
    expect((e as RelentFetchError).code).toBe('ERR_DEADLINE_EXCEEDED');
    expect(e.message).toMatch(/deadline of 300 ms/);
    const r2 = await request(s.url, { dispatcher: agent, relent: { bodyDeadline: false } } as Parameters<typeof request>[1]);
    const text2 = r2.body.text();
    await clock.advanceAsync(1_000);
    s.finish();
    expect((await text2).length).toBe(41);
  });
});

describe('an injected clock missing a method', () => {
  // Before, a clock without wallNow() was taken, and the first answer after it threw
  // inside undici's handler: the call never settled (the error was lost in the driver).
  it('is refused when the client or the interceptor is made, naming the method', () => {
    const { wallNow: _w, ...noWall } = createTestClock();
    expect(() => createClient({ clock: noWall as never })).toThrow(/`clock` to have a wallNow\(\) function/);
    expect(() => relentInterceptor({ clock: noWall as never })).toThrow(/`clock` to have a wallNow\(\) function/);
  });
});
