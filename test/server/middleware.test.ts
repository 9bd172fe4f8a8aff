// relent/server on real loopback servers: node:http, an Express-style `next` chain and a
// real Fastify instance; incoming deadlines, load shedding, "don't retry", and the
// request's context reaching relent's client below the handler.
import http from 'node:http';
import type net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import Fastify from 'fastify';
import { createClient, type RelentClient } from '../../src/http/client.js';
import {
  createServerGuard,
  incomingCall,
  relentFastify,
  relentMiddleware,
  type ServerEvent,
  type ServedRequest,
  type ServerOptions,
} from '../../src/server/index.js';
import { sleep, startServer, type TestServer } from '../http/helpers.js';

type Mw = (req: http.IncomingMessage, res: http.ServerResponse, next: (err?: unknown) => void) => void;
type Req = http.IncomingMessage & { relent: ServedRequest };

let closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of closers.reverse()) await c();
  closers = [];
});

/** An Express/Connect-style app: middlewares run in order, each calling next() (or next(err) → 500). */
async function app(...mws: Mw[]): Promise<{ url: string }> {
  const server = http.createServer((req, res) => {
    let i = 0;
    const next = (err?: unknown): void => {
      if (err !== undefined) {
        res.statusCode = 500;
        res.end(String(err));
        return;
      }
      const mw = mws[i++];
      if (mw) mw(req, res, next);
    };
    next();
  });
  const sockets = new Set<net.Socket>();
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(
    () =>
      new Promise((r) => {
        for (const s of sockets) s.destroy();
        server.close(r);
      }),
  );
  return { url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/` };
}

async function downstream(...args: Parameters<typeof startServer>): Promise<TestServer> {
  const s = await startServer(...args);
  closers.push(() => s.close());
  return s;
}

function client(o: Parameters<typeof createClient>[0] = {}): RelentClient {
  const c = createClient(o);
  closers.push(() => c.close());
  return c;
}

/** A raw GET with the given headers (no relent headers added), body read. */
async function get(url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
  });
}

function events(): {
  onEvent: (e: ServerEvent) => void;
  list: ServerEvent[];
  of: <T extends ServerEvent['type']>(t: T) => Extract<ServerEvent, { type: T }>[];
} {
  const list: ServerEvent[] = [];
  return { list, onEvent: (e) => list.push(e), of: (t) => list.filter((e) => e.type === t) as never };
}

const ok: Mw = (_req, res) => {
  res.end('ok');
};

describe('incoming deadlines (node:http)', () => {
  it("the handler gets the caller's remaining time, an AbortSignal, and the event says where the deadline came from", async () => {
    const ev = events();
    let seen: { remaining: number; deadline: number | null; attempt: number | null } | null = null;
    const a = await app(relentMiddleware({ onEvent: ev.onEvent }), (req, res) => {
      const r = (req as Req).relent;
      seen = { remaining: r.remainingMs(), deadline: r.deadlineMs, attempt: r.attempt };
      res.end('ok');
    });
    const res = await get(a.url + 'items/1?token=secret', { 'x-relent-deadline-ms': '300', 'x-relent-attempt': '2' });
    expect(res.status).toBe(200);
    expect(seen!.deadline).toBe(300);
    expect(seen!.attempt).toBe(2);
    expect(seen!.remaining).toBeGreaterThan(200);
    expect(seen!.remaining).toBeLessThanOrEqual(300);
    const [r] = ev.of('server_request');
    expect(r).toMatchObject({
      type: 'server_request',
      method: 'GET',
      path: '/items/1',
      attempt: 2,
      deadlineMs: 300,
      deadlineSource: 'x-relent-deadline-ms',
      queuedMs: 0,
    });
    expect(JSON.stringify(ev.list)).not.toContain('secret');
    expect(typeof r!.ts).toBe('number');
  });

  it("grpc-timeout and Envoy's header are read too; the smallest wins", async () => {
    const ev = events();
    const a = await app(relentMiddleware({ onEvent: ev.onEvent }), ok);
    await get(a.url, { 'grpc-timeout': '2S', 'x-envoy-expected-rq-timeout-ms': '900' });
    expect(ev.of('server_request')[0]).toMatchObject({ deadlineMs: 900, deadlineSource: 'x-envoy-expected-rq-timeout-ms' });
  });

  it('a spent deadline (0) is answered at once, 504 with "don\'t retry"; the handler never runs', async () => {
    const ev = events();
    let ran = 0;
    const a = await app(relentMiddleware({ onEvent: ev.onEvent }), (_q, res) => {
      ran++;
      res.end();
    });
    const res = await get(a.url, { 'x-relent-deadline-ms': '0' });
    expect(res.status).toBe(504);
    expect(res.headers['x-relent-no-retry']).toBe('deadline');
    expect(res.body).toMatch(/deadline spent/);
    expect(ran).toBe(0);
    expect(ev.of('server_deadline')).toMatchObject([{ where: 'arrival', deadlineMs: 0 }]);
  });

  it('the deadline passing while the handler runs aborts its signal (and says so in an event)', async () => {
    const ev = events();
    let abortedAfter = -1;
    const a = await app(relentMiddleware({ onEvent: ev.onEvent }), (req, res) => {
      const t0 = performance.now();
      (req as Req).relent.signal.addEventListener('abort', () => {
        abortedAfter = performance.now() - t0;
        res.statusCode = 503;
        res.end();
      });
    });
    const res = await get(a.url, { 'x-relent-deadline-ms': '60' });
    expect(res.status).toBe(503);
    expect(abortedAfter).toBeGreaterThan(40);
    expect(abortedAfter).toBeLessThan(400);
    expect(ev.of('server_deadline')).toMatchObject([{ where: 'handler', deadlineMs: 60 }]);
  }, 10_000);

  it.each([
    ['x-relent-deadline-ms', '-5', 'negative'],
    ['x-relent-deadline-ms', 'abc', 'malformed'],
    ['x-relent-deadline-ms', '100000000000000000000', 'absurd'],
    ['grpc-timeout', '5X', 'malformed'],
    ['x-relent-attempt', '0', 'zero'],
    ['x-envoy-expected-rq-timeout-ms', '1.5', 'fractional'],
  ])('bad input %s: %s is ignored (served as if absent) and reported as %s', async (header, value, problem) => {
    const ev = events();
    const mw = relentMiddleware({ onEvent: ev.onEvent });
    let remaining = 0;
    const a = await app(mw, (req, res) => {
      remaining = (req as Req).relent.remainingMs();
      res.end('ok');
    });
    const res = await get(a.url, { [header]: value });
    expect(res.status).toBe(200);
    expect(res.body).toBe('ok');
    expect(remaining).toBe(Infinity); // no usable deadline: no deadline at all
    expect(ev.of('server_invalid_header')).toMatchObject([{ header, problem }]);
    expect(mw.stats().invalidHeaders).toBe(1);
  });

  it('defaultDeadlineMs applies to a request without one; maxDeadlineMs caps what callers ask', async () => {
    const ev = events();
    const a = await app(relentMiddleware({ onEvent: ev.onEvent, defaultDeadlineMs: 1000, maxDeadlineMs: 5000 }), ok);
    await get(a.url);
    await get(a.url, { 'x-relent-deadline-ms': '9000000' });
    expect(ev.of('server_request').map((e) => [e.deadlineMs, e.deadlineSource])).toEqual([
      [1000, 'default'],
      [5000, 'max'],
    ]);
  });

  it('bad options are refused at construction, naming the option', () => {
    expect(() => createServerGuard({ maxConcurrent: 0 })).toThrow(/`maxConcurrent`/);
    expect(() => createServerGuard({ queueTimeoutMs: -1 })).toThrow(/`queueTimeoutMs`/);
    expect(() => createServerGuard({ deadlineStatus: 200 })).toThrow(/`deadlineStatus`/);
    expect(() => createServerGuard({ deadlineHeader: 'a b' })).toThrow(/`deadlineHeader`/);
    expect(() => createServerGuard({ maxConcurent: 3 } as ServerOptions)).toThrow(/Unknown option `maxConcurent`/);
  });
});

describe('load shedding (Express-style next)', () => {
  /** A handler that holds each request until released. */
  function holding(): { mw: Mw; release: () => void; started: () => number } {
    const waiting: (() => void)[] = [];
    let n = 0;
    return {
      mw: (_q, res) => {
        n++;
        waiting.push(() => res.end('done'));
      },
      release: () => waiting.shift()?.(),
      started: () => n,
    };
  }

  it('over maxConcurrent + maxQueue: 503, Retry-After, "don\'t retry"; the queued one is served when a slot frees', async () => {
    const ev = events();
    const h = holding();
    const guard = relentMiddleware({ maxConcurrent: 1, maxQueue: 1, onEvent: ev.onEvent });
    const a = await app(guard, h.mw);
    const first = get(a.url);
    await until(() => h.started() === 1);
    const second = get(a.url);
    await until(() => guard.stats().queued === 1);
    const third = await get(a.url);
    expect(third.status).toBe(503);
    expect(third.headers['retry-after']).toBe('1');
    expect(third.headers['x-relent-no-retry']).toBe('overloaded');
    h.release();
    await until(() => h.started() === 2);
    h.release();
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
    expect(ev.of('server_shed')).toMatchObject([{ reason: 'queue_full', inFlight: 1, queued: 1 }]);
    expect(ev.of('server_request')[1]!.queuedMs).toBeGreaterThan(0);
    expect(guard.stats()).toMatchObject({ admitted: 2, shed: { queue_full: 1, queue_timeout: 0, evicted: 0 }, inFlight: 0, queued: 0 });
  });

  it('retries are shed before first attempts: a first attempt evicts a queued retry', async () => {
    const ev = events();
    const h = holding();
    const guard = relentMiddleware({ maxConcurrent: 1, maxQueue: 1, onEvent: ev.onEvent });
    const a = await app(guard, h.mw);
    const busy = get(a.url);
    await until(() => h.started() === 1);
    const retry = get(a.url, { 'x-relent-attempt': '2' });
    await until(() => guard.stats().queued === 1);
    const first = get(a.url, { 'x-relent-attempt': '1' });
    expect((await retry).status).toBe(503);
    h.release();
    await until(() => h.started() === 2);
    h.release();
    expect((await first).status).toBe(200);
    await busy;
    expect(ev.of('server_shed')).toMatchObject([{ reason: 'evicted', attempt: 2 }]);
    expect(guard.stats().attempts).toMatchObject({ 1: 1, 2: 1, none: 1 });
    expect(guard.stats().retryShare).toBe(0.5);
  });

  it('a request that waits longer than queueTimeoutMs is shed; one whose deadline passes in the queue gets the deadline answer', async () => {
    const ev = events();
    const h = holding();
    const guard = relentMiddleware({ maxConcurrent: 1, maxQueue: 5, queueTimeoutMs: 60, onEvent: ev.onEvent });
    const a = await app(guard, h.mw);
    const busy = get(a.url);
    await until(() => h.started() === 1);
    const [timedOut, late] = await Promise.all([get(a.url), get(a.url, { 'x-relent-deadline-ms': '20' })]);
    expect(timedOut.status).toBe(503);
    expect(late.status).toBe(504);
    h.release();
    await busy;
    expect(ev.of('server_shed')).toMatchObject([{ reason: 'queue_timeout' }]);
    expect(ev.of('server_deadline')).toMatchObject([{ where: 'queue' }]);
    expect(guard.stats().inFlight).toBe(0);
  });

  it('a plain node:http handler that throws is not called twice (its error is its own)', async () => {
    let calls = 0;
    const guard = relentMiddleware();
    const server = http.createServer((req, res) => {
      try {
        guard(req, res, () => {
          calls++;
          throw new Error('handler bug');
        });
      } catch {
        res.statusCode = 500;
        res.end('caught outside');
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    closers.push(() => new Promise((r) => server.close(r)));
    const res = await get(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}/`, { 'x-relent-deadline-ms': '500' });
    expect(res.body).toBe('caught outside');
    expect(calls).toBe(1);
  });

  it("a handler's error goes to next(err); a listener that throws breaks nothing", async () => {
    const a = await app(
      relentMiddleware({
        onEvent: () => {
          throw new Error('listener');
        },
      }),
      (_q, _r, next) => next(new Error('boom')),
    );
    const res = await get(a.url, { 'x-relent-deadline-ms': '500' });
    expect(res.status).toBe(500);
    expect(res.body).toMatch(/boom/);
  });
});

describe("the request's context reaches relent's client below the handler", () => {
  it("downstream calls carry what is left of the caller's deadline, not a fresh one; incomingCall() finds the request", async () => {
    const down = await downstream((_q, res) => {
      res.end('ok');
    });
    const c = client({ policy: { deadlineMs: 10_000 } });
    let viaStore = false;
    const a = await app(relentMiddleware(), async (req, res) => {
      await sleep(30);
      viaStore = incomingCall() === (req as Req).relent;
      const r = await c.fetch(down.url);
      res.end(await r.text());
    });
    await get(a.url, { 'x-relent-deadline-ms': '400' });
    const passed = Number(down.seen[0]!.headers['x-relent-deadline-ms']);
    expect(passed).toBeLessThan(375);
    expect(passed).toBeGreaterThan(200);
    expect(viaStore).toBe(true);
  });

  it('a dependency\'s "don\'t retry" is passed up on an error answer (once, for the whole chain), not on a success', async () => {
    const down = await downstream((_q, res) => {
      res.writeHead(503, { 'x-relent-no-retry': 'overloaded' });
      res.end();
    });
    const c = client({ policy: { backoff: { kind: 'constant', delayMs: 1 } } });
    const a = await app(relentMiddleware(), async (req, res) => {
      const r = await c.fetch(down.url);
      await r.arrayBuffer();
      if (req.url === '/fallback') res.end('cached');
      else {
        res.statusCode = 502;
        res.end('dependency failed');
      }
    });
    const failed = await get(a.url);
    expect(failed.status).toBe(502);
    expect(failed.headers['x-relent-no-retry']).toBe('upstream');
    const fallback = await get(a.url + 'fallback');
    expect(fallback.status).toBe(200);
    expect(fallback.headers['x-relent-no-retry']).toBeUndefined();
    expect(down.count()).toBe(2);
  });

  it('noRetryMarker: false says nothing', async () => {
    const down = await downstream((_q, res) => {
      res.writeHead(503, { 'x-relent-no-retry': 'overloaded' });
      res.end();
    });
    const c = client();
    const a = await app(relentMiddleware({ noRetryMarker: false }), async (_q, res) => {
      await (await c.fetch(down.url)).arrayBuffer();
      res.statusCode = 502;
      res.end();
    });
    expect((await get(a.url)).headers['x-relent-no-retry']).toBeUndefined();
    expect((await get(a.url, { 'x-relent-deadline-ms': '0' })).headers['x-relent-no-retry']).toBeUndefined();
  });
});

describe('Fastify (a real instance, plugin registered with fastify.register)', () => {
  async function fastify(
    opts: ServerOptions,
    route: (req: { relent: ServedRequest; body: unknown }) => Promise<unknown>,
  ): Promise<{ url: string; stats: () => ReturnType<ReturnType<typeof createServerGuard>['stats']> }> {
    const f = Fastify();
    await f.register(relentFastify, opts);
    f.get('/', async (req) => route(req as never));
    f.post('/', async (req) => route(req as never));
    await f.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => f.close());
    const addr = f.server.address() as net.AddressInfo;
    return { url: `http://127.0.0.1:${addr.port}/`, stats: (f as unknown as { relentStats: () => never }).relentStats };
  }

  it("reads the deadline, hands it to the route and to relent's client below (also after a body is parsed)", async () => {
    const down = await downstream((_q, res) => {
      res.end('ok');
    });
    const c = client({ policy: { deadlineMs: 10_000 } });
    const ev = events();
    const f = await fastify({ onEvent: ev.onEvent }, async (req) => {
      const r = await c.fetch(down.url);
      return { remaining: req.relent.remainingMs(), body: req.body ?? null, down: await r.text() };
    });
    const got = await get(f.url, { 'x-relent-deadline-ms': '500' });
    expect(got.status).toBe(200);
    expect(JSON.parse(got.body).remaining).toBeLessThanOrEqual(500);
    expect(Number(down.seen[0]!.headers['x-relent-deadline-ms'])).toBeLessThanOrEqual(500);
    const posted = await fetch(f.url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-relent-deadline-ms': '450' }, body: '{"a":1}' });
    expect(await posted.json()).toMatchObject({ body: { a: 1 } });
    expect(Number(down.seen[1]!.headers['x-relent-deadline-ms'])).toBeLessThanOrEqual(450);
    expect(ev.of('server_request')).toHaveLength(2);
  });

  it('sheds from its onRequest hook (503 + Retry-After + "don\'t retry"), answers a spent deadline with 504, passes a dependency\'s "don\'t retry" up', async () => {
    let hold: (() => void) | null = null;
    const down = await downstream((_q, res) => {
      res.writeHead(503, { 'x-relent-no-retry': 'overloaded' });
      res.end();
    });
    const c = client();
    const f = await fastify({ maxConcurrent: 1, maxQueue: 0 }, async (req) => {
      if ((req as unknown as { url: string }).url === '/' && hold === null)
        await new Promise<void>((r) => {
          hold = r;
        });
      const r = await c.fetch(down.url);
      await r.arrayBuffer();
      throw Object.assign(new Error('dependency failed'), { statusCode: 502 });
    });
    const busy = get(f.url);
    await until(() => hold !== null);
    const shed = await get(f.url);
    expect(shed.status).toBe(503);
    expect(shed.headers['retry-after']).toBe('1');
    expect(shed.headers['x-relent-no-retry']).toBe('overloaded');
    hold!();
    const failed = await busy;
    expect(failed.status).toBe(502);
    expect(failed.headers['x-relent-no-retry']).toBe('upstream');
    const spent = await get(f.url, { 'x-relent-deadline-ms': '0' });
    expect(spent.status).toBe(504);
    expect(f.stats()).toMatchObject({ admitted: 1, shed: { queue_full: 1 }, deadlineSpent: { arrival: 1 } });
  });

  it('bad options fail the registration with a named error', async () => {
    const f = Fastify();
    await expect(f.register(relentFastify, { maxQueue: -1 } as ServerOptions).ready()).rejects.toThrow(/`maxQueue`/);
    await f.close();
  });
});

async function until(cond: () => boolean, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await sleep(2);
  }
}
