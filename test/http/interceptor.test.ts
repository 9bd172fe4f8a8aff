// relentInterceptor with undici's own request()/fetch() over real loopback servers, and
// the compose order with undici's redirect and retry interceptors.
import { describe, it, expect, afterEach } from 'vitest';
import { Agent, fetch as undiciFetch, interceptors, request, type Dispatcher } from 'undici';
import { relentInterceptor, type RelentDispatchOptions } from '../../src/http/interceptor.js';
import type { RelentFetchError } from '../../src/http/errors.js';
import { createTestClock } from '../../src/testing/index.js';
import { eventLog, startServer, until, type TestServer } from './helpers.js';

let servers: TestServer[] = [];
let agents: Agent[] = [];
afterEach(async () => {
  await Promise.all(agents.map((a) => a.close()));
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
  agents = [];
});
async function server(...args: Parameters<typeof startServer>): Promise<TestServer> {
  const s = await startServer(...args);
  servers.push(s);
  return s;
}
function agent(): Agent {
  const a = new Agent();
  agents.push(a);
  return a;
}
const rejection = (p: Promise<unknown>): Promise<RelentFetchError> =>
  p.then(
    () => {
      throw new Error('expected a rejection');
    },
    (e: unknown) => e as RelentFetchError,
  );
type WithRelent = Parameters<typeof request>[1] & { relent?: RelentDispatchOptions };

describe('relentInterceptor with undici.request', () => {
  it('GET 503, 503, 200 → 3 requests, one answer, events from the core', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n < 3 ? 503 : 200);
      res.end(n < 3 ? 'busy' : 'ok');
    });
    const log = eventLog();
    const d = agent().compose(
      relentInterceptor({ onEvent: log.onEvent, policy: { maxAttempts: 3, deadlineMs: 400, backoff: { kind: 'constant', delayMs: 40 } } }),
    );
    const r = await request(`${s.origin}/items?token=t`, { dispatcher: d });
    expect(r.statusCode).toBe(200);
    expect(await r.body.text()).toBe('ok');
    expect(s.count()).toBe(3);
    expect(s.connections()).toBe(1);
    expect(log.attempts().map((a) => a.decision)).toEqual(['retry', 'retry', 'return']);
    expect(log.attempts()[0]!.endpoint).toBe(`${s.origin}/items`);
  });

  it('works with undici.fetch over the composed dispatcher', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n === 1 ? 503 : 200);
      res.end(n === 1 ? '' : 'fetched');
    });
    const d = agent().compose(relentInterceptor({ policy: { backoff: { kind: 'constant', delayMs: 5 } } }));
    const res = await undiciFetch(s.url, { dispatcher: d });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('fetched');
    expect(s.count()).toBe(2);
  });

  it('when retries run out, the last 503 is handed on', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(503);
      res.end(`busy ${n}`);
    });
    const d = agent().compose(relentInterceptor({ policy: { maxAttempts: 3, backoff: { kind: 'constant', delayMs: 2 } } }));
    const r = await request(s.url, { dispatcher: d });
    expect(r.statusCode).toBe(503);
    expect(await r.body.text()).toBe('busy 3');
  });

  it('POST without key, response delayed past the attempt timeout → one POST, ERR_UNKNOWN_OUTCOME', async () => {
    let answer: (() => void) | null = null;
    const s = await server((_q, res) => {
      answer = () => res.end('late');
    });
    const clock = createTestClock();
    const d = agent().compose(relentInterceptor({ clock, policy: { maxAttempts: 4, attemptTimeoutMs: 80 } }));
    const p = rejection(request(`${s.origin}/pay`, { method: 'POST', body: 'pay', dispatcher: d }));
    await until('the POST at the server', () => answer !== null);
    await clock.advanceAsync(80);
    const e = await p;
    expect(e.code).toBe('ERR_UNKNOWN_OUTCOME');
    await clock.advanceAsync(300);
    expect(clock.pending()).toBe(0); // the operation has ended: nothing is left to send another POST
    answer!();
    expect(s.count()).toBe(1);
  });

  it('POST with an idempotency key (per-request `relent` options or the header) → retried with the same key and body', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n % 2 === 1 ? 503 : 201);
      res.end();
    });
    const d = agent().compose(relentInterceptor({ policy: { backoff: { kind: 'constant', delayMs: 5 } } }));
    const opts: WithRelent = { method: 'POST', body: 'order', dispatcher: d, relent: { idempotencyKey: 'abc' } };
    const r1 = await request(`${s.origin}/orders`, opts);
    expect(r1.statusCode).toBe(201);
    await r1.body.dump();
    const r2 = await request(`${s.origin}/orders`, { method: 'POST', body: 'order', dispatcher: d, headers: { 'Idempotency-Key': '"xyz"' } });
    expect(r2.statusCode).toBe(201);
    await r2.body.dump();
    expect(s.seen.map((x) => x.headers['idempotency-key'])).toEqual(['"abc"', '"abc"', '"xyz"', '"xyz"']);
    expect(s.seen.every((x) => x.body === 'order')).toBe(true);
  });

  it("an abort during the backoff wait (request's signal) rejects at once; no further request", async () => {
    const s = await server((_q, res) => {
      res.writeHead(503);
      res.end();
    });
    const log = eventLog();
    const clock = createTestClock();
    const d = agent().compose(relentInterceptor({ clock, onEvent: log.onEvent, policy: { deadlineMs: 5000, backoff: { kind: 'constant', delayMs: 2000 } } }));
    const ac = new AbortController();
    const p = rejection(request(s.url, { dispatcher: d, signal: ac.signal }));
    await until('the first attempt decided (the backoff wait begins)', () => log.attempts().length === 1);
    await clock.advanceAsync(80);
    const t0 = clock.now();
    ac.abort();
    await p; // the clock is not moved: the 2 s backoff is not waited for
    expect(clock.now() - t0).toBeLessThan(100); // not the 2 s backoff
    expect(clock.pending()).toBe(0); // the backoff's timer is gone: nothing will send another request
    await clock.advanceAsync(5_000);
    expect(s.count()).toBe(1);
  });

  it('Retry-After: 3600 → one request, ERR_RETRY_AFTER_TOO_LONG at once', async () => {
    const s = await server((_q, res) => {
      res.writeHead(429, { 'retry-after': '3600' });
      res.end();
    });
    const d = agent().compose(relentInterceptor({ policy: { deadlineMs: 2000 } }));
    const e = await rejection(request(s.url, { dispatcher: d }));
    expect(e.code).toBe('ERR_RETRY_AFTER_TOO_LONG');
    expect(e.status).toBe(429);
    expect(s.count()).toBe(1);
  });

  it('a stream body that would need a retry → ERR_BODY_NOT_REPLAYABLE after one request', async () => {
    const s = await server((_q, res) => {
      res.writeHead(503);
      res.end();
    });
    const d = agent().compose(relentInterceptor());
    async function* body() {
      yield Buffer.from('part');
    }
    const e = await rejection(request(`${s.origin}/up`, { method: 'PUT', body: body() as unknown as NodeJS.ReadableStream as never, dispatcher: d }));
    expect(e.code).toBe('ERR_BODY_NOT_REPLAYABLE');
    expect(s.seen.map((x) => x.body)).toEqual(['part']);
  });
});

describe('compose order', () => {
  it("undici's compose(a, b) runs b first: the last interceptor listed is the outermost", async () => {
    const s = await server((_q, res) => res.end());
    const order: string[] = [];
    const tag =
      (name: string): Dispatcher.DispatcherComposeInterceptor =>
      (dispatch) =>
      (opts, handler) => {
        order.push(name);
        return dispatch(opts, handler);
      };
    const d = agent().compose(tag('listed first'), tag('listed last'));
    await (await request(s.url, { dispatcher: d })).body.dump();
    expect(order).toEqual(['listed last', 'listed first']);
  });

  it('compose(redirect, relent): relent outermost, one operation whose attempts follow the redirects', async () => {
    let bHits = 0;
    const s = await server((q, res) => {
      if (q.url === '/a') {
        res.writeHead(302, { location: '/b' });
        res.end();
      } else {
        bHits++;
        res.writeHead(bHits === 1 ? 503 : 200);
        res.end(bHits === 1 ? '' : 'b');
      }
    });
    const log = eventLog();
    const d = agent().compose(
      interceptors.redirect({ maxRedirections: 3 }),
      relentInterceptor({ onEvent: log.onEvent, policy: { backoff: { kind: 'constant', delayMs: 5 } } }),
    );
    const r = await request(`${s.origin}/a`, { dispatcher: d });
    expect(r.statusCode).toBe(200);
    expect(await r.body.text()).toBe('b');
    expect(s.seen.map((x) => x.url)).toEqual(['/a', '/b', '/a', '/b']);
    expect(new Set(log.attempts().map((a) => a.operationId)).size).toBe(1);
    expect(log.attempts().map((a) => `${a.endpoint?.replace(s.origin, '')} ${a.status} ${a.decision}`)).toEqual(['/a 503 retry', '/a 200 return']);
  });

  it('compose(relent, redirect): redirect outermost, every hop is its own relent operation', async () => {
    let bHits = 0;
    const s = await server((q, res) => {
      if (q.url === '/a') {
        res.writeHead(302, { location: '/b' });
        res.end();
      } else {
        bHits++;
        res.writeHead(bHits === 1 ? 503 : 200);
        res.end(bHits === 1 ? '' : 'b');
      }
    });
    const log = eventLog();
    const d = agent().compose(
      relentInterceptor({ onEvent: log.onEvent, policy: { backoff: { kind: 'constant', delayMs: 5 } } }),
      interceptors.redirect({ maxRedirections: 3 }),
    );
    const r = await request(`${s.origin}/a`, { dispatcher: d });
    expect(r.statusCode).toBe(200);
    await r.body.dump();
    expect(s.seen.map((x) => x.url)).toEqual(['/a', '/b', '/b']);
    expect(new Set(log.attempts().map((a) => a.operationId)).size).toBe(2);
    expect(log.attempts().map((a) => `${a.endpoint?.replace(s.origin, '')} ${a.status} ${a.decision}`)).toEqual([
      '/a 302 return',
      '/b 503 retry',
      '/b 200 return',
    ]);
  });

  it("combined with undici's retry interceptor, either order multiplies the calls (3 × 3 = 9): do not combine", async () => {
    const s = await server((_q, res) => {
      res.writeHead(503);
      res.end();
    });
    const undiciRetry = () => interceptors.retry({ maxRetries: 2, minTimeout: 1, maxTimeout: 1, timeoutFactor: 1, statusCodes: [503], retryAfter: false });
    const relent = () => relentInterceptor({ policy: { maxAttempts: 3, backoff: { kind: 'constant', delayMs: 1 } } });

    const relentOuter = agent().compose(undiciRetry(), relent());
    await request(s.url, { dispatcher: relentOuter }).then(
      (r) => r.body.dump(),
      () => undefined,
    );
    expect(s.count()).toBe(9);

    const undiciOuter = agent().compose(relent(), undiciRetry());
    await request(s.url, { dispatcher: undiciOuter }).then(
      (r) => r.body.dump(),
      () => undefined,
    );
    expect(s.count()).toBe(18);
  });
});
