// The acceptance list of issue 3 for client.fetch, against real node:http servers on
// 127.0.0.1 (port 0). Real time: assertions are on server-side counts and bounds.
import { describe, it, expect, afterEach } from 'vitest';
import http from 'node:http';
import { createClient, type RelentClient } from '../../src/http/client.js';
import { RelentFetchError } from '../../src/http/errors.js';
import { formatImfFixdate } from '../../src/core/http-date.js';
import { createSeededRandom } from '../../src/core/random.js';
import { createTestClock } from '../../src/testing/index.js';
import { closedPort, eventLog, startServer, until, type TestServer } from './helpers.js';

let servers: TestServer[] = [];
let clients: RelentClient[] = [];
afterEach(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
  clients = [];
});

async function server(...args: Parameters<typeof startServer>): Promise<TestServer> {
  const s = await startServer(...args);
  servers.push(s);
  return s;
}
function client(options: Parameters<typeof createClient>[0] = {}): RelentClient {
  const c = createClient({ random: createSeededRandom(7), ...options });
  clients.push(c);
  return c;
}
const fail = (p: Promise<unknown>): Promise<RelentFetchError> =>
  p.then(
    () => {
      throw new Error('expected a rejection');
    },
    (e: unknown) => {
      if (!(e instanceof RelentFetchError)) throw e;
      return e;
    },
  );

/** Listens on a given port later (a port where nothing listens at first). */
function listenLater(port: number, afterMs: number, handler: http.RequestListener): { seen: string[]; close: () => Promise<void> } {
  const seen: string[] = [];
  const s = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      seen.push(`${req.method} ${body}`);
      handler(req, res);
    });
  });
  const t = setTimeout(() => s.listen(port, '127.0.0.1'), afterMs);
  return {
    seen,
    close: () =>
      new Promise<void>((r) => {
        clearTimeout(t);
        s.closeAllConnections();
        s.close(() => r());
        if (!s.listening) r();
      }),
  };
}

describe('retries decided by the core', () => {
  it('GET 503, 503, 200 under a 400 ms deadline with 40 ms backoff → 3 requests, 200, one connection', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n < 3 ? 503 : 200, { 'content-type': 'text/plain' });
      res.end(n < 3 ? 'busy '.repeat(100) : 'ok');
    });
    const log = eventLog();
    const c = client({ policy: { maxAttempts: 3, deadlineMs: 400, backoff: { kind: 'constant', delayMs: 40 } }, onEvent: log.onEvent });
    const t0 = performance.now();
    const res = await c.fetch(`${s.origin}/items?token=abc`);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('ok');
    expect(performance.now() - t0).toBeLessThan(400);
    expect(s.count()).toBe(3);
    expect(s.connections()).toBe(1); // failed attempts' bodies were drained: the socket was reused
    const a = log.attempts();
    expect(a.map((e) => e.decision)).toEqual(['retry', 'retry', 'return']);
    expect(a.map((e) => e.attempt)).toEqual([1, 2, 3]);
    expect(new Set(a.map((e) => e.requestId)).size).toBe(3);
    expect(new Set(a.map((e) => e.operationId)).size).toBe(1);
    expect(a[0]!.remainingMs).toBeGreaterThan(395);
    expect(a[0]!.remainingMs).toBeLessThanOrEqual(400);
    expect(a[1]!.remainingMs).toBeLessThan(a[0]!.remainingMs - 40);
    expect(a.every((e) => e.endpoint === `${s.origin}/items`)).toBe(true);
    expect(log.result()).toMatchObject({ reason: 'return', status: 200, attempts: 3 });
    expect(res.url).toBe(`${s.origin}/items?token=abc`);
  });

  it('400 → no retry, the 400 is returned; 204 → success with a null body', async () => {
    const s = await server((q, res) => {
      res.writeHead(q.url === '/bad' ? 400 : 204);
      res.end(q.url === '/bad' ? 'nope' : undefined);
    });
    const log = eventLog();
    const c = client({ onEvent: log.onEvent });
    const bad = await c.fetch(`${s.origin}/bad`);
    expect(bad.status).toBe(400);
    expect(await bad.text()).toBe('nope');
    expect(log.result()).toMatchObject({ reason: 'not_retryable', attempts: 1 });
    const ok = await c.fetch(`${s.origin}/ok`);
    expect(ok.status).toBe(204);
    expect(ok.body).toBeNull();
    expect(s.count()).toBe(2);
  });

  it('when retries run out the caller gets the last real response (the 503), never a synthetic success', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(503, { 'x-attempt': String(n) });
      res.end(`busy ${n}`);
    });
    const c = client({ policy: { maxAttempts: 3, backoff: { kind: 'constant', delayMs: 5 } } });
    const res = await c.fetch(s.url);
    expect(res.status).toBe(503);
    expect(res.headers.get('x-attempt')).toBe('3');
    expect(await res.text()).toBe('busy 3');
    expect(s.count()).toBe(3);
  });
});

describe('bodies of failed attempts', () => {
  it('a failed body over 64 KiB is given up when the next attempt starts; the final response is whole', async () => {
    const big = 'x'.repeat(200 * 1024);
    const s = await server((_q, res, n) => {
      res.writeHead(503, { 'content-type': 'text/plain' });
      res.end(`${n}:${big}`);
    });
    const c = client({ policy: { maxAttempts: 2, backoff: { kind: 'constant', delayMs: 5 } } });
    const res = await c.fetch(s.url);
    expect(res.status).toBe(503);
    const text = await res.text();
    expect(text.length).toBe(big.length + 2);
    expect(text.startsWith('2:')).toBe(true);
    expect(s.count()).toBe(2);
  });

  it('small failed bodies are read at once, so one connection serves every attempt', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n < 4 ? 500 : 200);
      res.end(n < 4 ? 'e'.repeat(4000) : 'ok');
    });
    const c = client({ policy: { maxAttempts: 4, backoff: { kind: 'constant', delayMs: 5 } } });
    expect(await (await c.fetch(s.url)).text()).toBe('ok');
    expect(s.connections()).toBe(1);
  });

  it('a Request object as input: method, headers and body are taken from it (the body buffered, so replayable)', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n === 1 ? 503 : 200);
      res.end();
    });
    const c = client({ policy: { backoff: { kind: 'constant', delayMs: 5 } } });
    const req = new Request(`${s.origin}/r`, { method: 'POST', body: 'payload', headers: { 'x-a': '1', 'idempotency-key': '"rk"' } });
    expect((await c.fetch(req)).status).toBe(200);
    expect(s.seen.map((x) => [x.method, x.body, x.headers['x-a'], x.headers['idempotency-key']])).toEqual([
      ['POST', 'payload', '1', '"rk"'],
      ['POST', 'payload', '1', '"rk"'],
    ]);
  });
});

describe('server hints', () => {
  it('429 Retry-After: 1 → the second request arrives no earlier than 1 s after the first response', async () => {
    let firstResponseAt = 0;
    const s = await server((_q, res, n) => {
      if (n === 1) {
        res.writeHead(429, { 'retry-after': '1' });
        res.end(() => {
          firstResponseAt = performance.now();
        });
        firstResponseAt = performance.now();
      } else res.end('ok');
    });
    const log = eventLog();
    const c = client({ onEvent: log.onEvent });
    const res = await c.fetch(s.url);
    expect(res.status).toBe(200);
    expect(s.count()).toBe(2);
    const gap = s.seen[1]!.at - firstResponseAt;
    expect(gap).toBeGreaterThanOrEqual(1000);
    expect(gap).toBeLessThan(1000 + 100 + 400); // jitter ≤ 100 ms (clamp(10 %, 100 ms, …)), plus slack
    expect(log.attempts()[0]).toMatchObject({ retryAfterMs: 1000, retryAfterValid: true, decision: 'retry' });
  });

  it('Retry-After as an HTTP-date 2 s ahead, with a Date header an hour off the local clock → the wait is 2 s', async () => {
    let firstResponseAt = 0;
    const s = await server((_q, res, n) => {
      if (n === 1) {
        const serverNow = Math.floor((Date.now() + 3_600_000) / 1000) * 1000; // the server's clock is an hour ahead
        res.writeHead(503, { date: formatImfFixdate(serverNow), 'retry-after': formatImfFixdate(serverNow + 2000) });
        res.end();
        firstResponseAt = performance.now();
      } else res.end('ok');
    });
    const log = eventLog();
    const c = client({ onEvent: log.onEvent, policy: { deadlineMs: 5000 } });
    const res = await c.fetch(s.url);
    expect(res.status).toBe(200);
    const gap = s.seen[1]!.at - firstResponseAt;
    expect(gap).toBeGreaterThanOrEqual(2000); // not 0 s …
    expect(gap).toBeLessThan(2000 + 200 + 400); // … and not an hour (jitter ≤ 200 ms)
    expect(log.attempts()[0]).toMatchObject({ retryAfterMs: 2000, retryAfterValid: true });
  });

  it('Retry-After: 3600 under a 2 s deadline → one request and a prompt, clear error', async () => {
    const s = await server((_q, res) => {
      res.writeHead(429, { 'retry-after': '3600' });
      res.end('slow down');
    });
    const c = client({ policy: { deadlineMs: 2000 } });
    const t0 = performance.now();
    const e = await fail(c.fetch(s.url));
    expect(performance.now() - t0).toBeLessThan(300);
    expect(s.count()).toBe(1);
    expect(e.code).toBe('ERR_RETRY_AFTER_TOO_LONG');
    expect(e.reason).toBe('not_retryable');
    expect(e.message).toMatch(/asked to wait 3600000 ms, over the policy's cap of 60000 ms/);
    expect(e.response?.status).toBe(429);
    expect(await e.response!.text()).toBe('slow down');
  });

  it('a server wait under the cap but past the deadline → the same error, reason deadline_exceeded', async () => {
    const s = await server((_q, res) => {
      res.writeHead(503, { 'retry-after': '5' });
      res.end();
    });
    const c = client({ policy: { deadlineMs: 2000 } });
    const e = await fail(c.fetch(s.url));
    expect(e.code).toBe('ERR_RETRY_AFTER_TOO_LONG');
    expect(e.reason).toBe('deadline_exceeded');
    expect(s.count()).toBe(1);
  });

  it('Retry-After: -5 and `soon` → the own backoff, no crash', async () => {
    for (const bad of ['-5', 'soon']) {
      const s = await server((_q, res, n) => {
        if (n === 1) res.writeHead(503, { 'retry-after': bad });
        res.end(n === 1 ? '' : 'ok');
      });
      const log = eventLog();
      const c = client({ onEvent: log.onEvent, policy: { backoff: { kind: 'constant', delayMs: 30 } } });
      const res = await c.fetch(s.url);
      expect(res.status).toBe(200);
      expect(s.count()).toBe(2);
      expect(log.attempts()[0]).toMatchObject({ retryAfterValid: false, retryAfterMs: null, delayMs: 30, decision: 'retry' });
    }
  });

  it('RateLimit: "default";r=0;t=1 on a 429 → waits 1 s; retryAfterValid stays null (no Retry-After)', async () => {
    let firstResponseAt = 0;
    const s = await server((_q, res, n) => {
      if (n === 1) {
        res.writeHead(429, { ratelimit: '"default";r=0;t=1', 'ratelimit-policy': '"default";q=10;w=1' });
        res.end();
        firstResponseAt = performance.now();
      } else res.end('ok');
    });
    const log = eventLog();
    const c = client({ onEvent: log.onEvent });
    expect((await c.fetch(s.url)).status).toBe(200);
    expect(s.seen[1]!.at - firstResponseAt).toBeGreaterThanOrEqual(1000);
    expect(log.attempts()[0]).toMatchObject({ retryAfterMs: 1000, retryAfterValid: null });
  });

  it('503 without Retry-After, own backoff 2 s, deadline 500 ms → the caller is released at once with the 503, not after the backoff', async () => {
    const s = await server((_q, res) => {
      res.writeHead(503);
      res.end();
    });
    const log = eventLog();
    const clock = createTestClock();
    const c = client({ clock, onEvent: log.onEvent, policy: { deadlineMs: 500, backoff: { kind: 'constant', delayMs: 2000 } } });
    const t0 = clock.now();
    const res = await c.fetch(s.url); // the clock is never moved: no timer is waited for
    expect(clock.now() - t0).toBeLessThan(500);
    expect(clock.pending()).toBe(0); // nor left behind (the backoff was never armed)
    expect(res.status).toBe(503);
    expect(s.count()).toBe(1);
    expect(log.result()).toMatchObject({ reason: 'deadline_exceeded', attempts: 1 });
  });
});

describe("timeouts and the deadline (on the client's test clock)", () => {
  it('hanging server, attempt timeout 100 ms, deadline 350 ms → at most 3 requests, ends within ~350 ms', async () => {
    const s = await server(() => {
      /* hangs */
    });
    const log = eventLog();
    const clock = createTestClock();
    const c = client({ clock, onEvent: log.onEvent, policy: { maxAttempts: 10, backoff: { kind: 'constant', delayMs: 20 } } });
    const t0 = clock.now();
    let settled = false;
    const p = fail(c.fetch(s.url, { attemptTimeoutMs: 100, deadlineMs: 350 })).finally(() => {
      settled = true;
    });
    // Each attempt: its request reaches the server (a real socket event), then its timeout
    // passes on the clock, then the 20 ms backoff; until the deadline ends the operation.
    for (let attempt = 1; !settled; attempt++) {
      if (attempt > 10) throw new Error('the deadline did not end the operation');
      await until(`request ${attempt} at the server`, () => settled || s.count() >= attempt);
      if (settled) break;
      await clock.advanceAsync(Math.min(100, t0 + 350 - clock.now()));
      if (!settled) await clock.advanceAsync(20);
    }
    const e = await p;
    const took = clock.now() - t0;
    expect(took).toBeLessThan(600); // not 10 × (100 ms + 20 ms): the deadline ends it
    expect(took).toBeGreaterThanOrEqual(300);
    expect(s.count()).toBeLessThanOrEqual(3);
    expect(e.code).toBe('ERR_DEADLINE_EXCEEDED');
    expect(e.errorClass).toBe('timeout');
    expect(log.attempts().every((a) => a.errorClass === 'timeout')).toBe(true);
    expect(log.attempts().map((a) => a.elapsedMs)).toEqual([100, 100, 100]);
  });

  it('a per-call deadline longer than the policy one is honoured', async () => {
    let answer: (() => void) | null = null;
    const s = await server((_q, res) => {
      answer = () => res.end('slow ok');
    });
    const clock = createTestClock();
    const c = client({ clock, policy: { deadlineMs: 100 } });
    const p = c.fetch(s.url, { deadlineMs: 1000 });
    await until('the request at the server', () => answer !== null);
    await clock.advanceAsync(150); // past the policy's deadline, within the call's own
    answer!();
    const res = await p;
    expect(await res.text()).toBe('slow ok');
  });
});

describe('writes: idempotency and unknown outcomes', () => {
  it('POST without key whose response is delayed past the attempt timeout → exactly one POST, unknown-outcome error', async () => {
    let answer: (() => void) | null = null;
    const s = await server((_q, res) => {
      answer = () => res.end('done');
    });
    const log = eventLog();
    const clock = createTestClock();
    const c = client({ clock, onEvent: log.onEvent, policy: { maxAttempts: 5 } });
    const p = fail(c.fetch(`${s.origin}/payments`, { method: 'POST', body: 'pay 10', attemptTimeoutMs: 100 }));
    await until('the POST at the server', () => answer !== null);
    await clock.advanceAsync(100);
    const e = await p;
    expect(e.code).toBe('ERR_UNKNOWN_OUTCOME');
    expect(e.reason).toBe('check_state');
    expect(e.sent).toBe('unknown');
    await clock.advanceAsync(350);
    expect(clock.pending()).toBe(0); // the operation has ended: nothing is left to send another POST
    answer!(); // the late answer changes nothing
    expect(s.seen.filter((x) => x.method === 'POST')).toHaveLength(1);
    expect(log.attempts().map((a) => a.decision)).toEqual(['check_state']);
  });

  it('… or the state check’s answer when one is given', async () => {
    const s = await server((q, res) => {
      if (q.method === 'POST') setTimeout(() => res.end('done'), 300);
      else res.end('{"state":"applied"}');
    });
    const c = client({ policy: { maxAttempts: 5 } });
    const res = await c.fetch(`${s.origin}/payments`, {
      method: 'POST',
      body: 'pay 10',
      attemptTimeoutMs: 100,
      stateCheck: () => c.fetch(`${s.origin}/payments/op-1`),
    });
    expect(await res.json()).toEqual({ state: 'applied' });
    expect(s.seen.filter((x) => x.method === 'POST')).toHaveLength(1);
  });

  it('POST with a key after a 503 → retried with the same key and the same body', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n === 1 ? 503 : 201);
      res.end();
    });
    const c = client({ policy: { backoff: { kind: 'constant', delayMs: 10 } } });
    const body = new Uint8Array([1, 2, 3, 250, 0, 7]);
    const res = await c.fetch(`${s.origin}/payments`, { method: 'POST', body, idempotencyKey: 'k-123' });
    body.fill(9); // the caller reusing its buffer must not change what is resent
    expect(res.status).toBe(201);
    expect(s.count()).toBe(2);
    expect(s.seen.map((x) => x.headers['idempotency-key'])).toEqual(['"k-123"', '"k-123"']);
    expect(s.seen[0]!.body).toBe(s.seen[1]!.body);
    expect(Buffer.from(s.seen[1]!.body, 'latin1').length).toBeGreaterThan(0);
  });

  it('POST without key after a 503 → not retried (not idempotent), the 503 is returned', async () => {
    const s = await server((_q, res) => {
      res.writeHead(503);
      res.end();
    });
    const log = eventLog();
    const c = client({ onEvent: log.onEvent });
    const res = await c.fetch(`${s.origin}/payments`, { method: 'POST', body: '{}' });
    expect(res.status).toBe(503);
    expect(s.count()).toBe(1);
    expect(log.result()!.reason).toBe('not_retryable');
  });

  it('autoIdempotencyKey: a random key for POST, the same on every attempt', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n === 1 ? 503 : 200);
      res.end();
    });
    const c = client({ autoIdempotencyKey: true, policy: { backoff: { kind: 'constant', delayMs: 5 } } });
    await c.fetch(`${s.origin}/orders`, { method: 'POST', body: 'x' });
    const keys = s.seen.map((x) => x.headers['idempotency-key']);
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(/^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$/);
    expect(keys[1]).toBe(keys[0]);
    await c.fetch(`${s.origin}/orders`, { method: 'GET' });
    expect(s.seen[2]!.headers['idempotency-key']).toBeUndefined();
  });

  it('POST whose body the server read before resetting the connection → exactly one POST and an unknown-outcome error', async () => {
    const s = await server((req) => req.socket.resetAndDestroy());
    const c = client({ policy: { maxAttempts: 6 } });
    const e = await fail(c.fetch(`${s.origin}/payments`, { method: 'POST', body: 'pay 10' }));
    expect(e.code).toBe('ERR_UNKNOWN_OUTCOME');
    expect(e.errorClass).toBe('reset');
    expect(s.seen.map((x) => x.body)).toEqual(['pay 10']);
  });

  it('a stream body is sent once; a needed retry ends with ERR_BODY_NOT_REPLAYABLE', async () => {
    const s = await server((_q, res) => {
      res.writeHead(503);
      res.end('busy');
    });
    const c = client();
    const stream = new ReadableStream<Uint8Array>({
      start(ctl) {
        ctl.enqueue(new TextEncoder().encode('chunk'));
        ctl.close();
      },
    });
    const e = await fail(c.fetch(`${s.origin}/upload`, { method: 'PUT', body: stream, duplex: 'half' }));
    expect(e.code).toBe('ERR_BODY_NOT_REPLAYABLE');
    expect(e.response?.status).toBe(503);
    expect(s.seen.map((x) => x.body)).toEqual(['chunk']);
  });
});

describe('pre-send failures are retried for any method', () => {
  it('refused port → retried (GET)', async () => {
    const port = await closedPort();
    const later = listenLater(port, 30, (_q, res) => res.end('up'));
    try {
      const log = eventLog();
      const c = client({ onEvent: log.onEvent, policy: { maxAttempts: 4, backoff: { kind: 'constant', delayMs: 120 } } });
      const res = await c.fetch(`http://127.0.0.1:${port}/`);
      expect(await res.text()).toBe('up');
      expect(log.attempts()[0]).toMatchObject({ errorClass: 'connect_refused', decision: 'retry' });
    } finally {
      await later.close();
    }
  });

  it('POST to a port where nothing listens → retried: nothing was sent', async () => {
    const port = await closedPort();
    const later = listenLater(port, 30, (_q, res) => res.end('created'));
    try {
      const log = eventLog();
      const c = client({ onEvent: log.onEvent, policy: { maxAttempts: 4, backoff: { kind: 'constant', delayMs: 120 } } });
      const res = await c.fetch(`http://127.0.0.1:${port}/orders`, { method: 'POST', body: 'one order' });
      expect(await res.text()).toBe('created');
      expect(log.attempts()[0]).toMatchObject({ method: 'POST', errorClass: 'connect_refused', decision: 'retry' });
      expect(later.seen).toEqual(['POST one order']);
    } finally {
      await later.close();
    }
  });

  it('refused every time → ERR_MAX_ATTEMPTS naming the class, with undici’s error as cause', async () => {
    const port = await closedPort();
    const c = client({ policy: { maxAttempts: 3, backoff: { kind: 'constant', delayMs: 5 } } });
    const e = await fail(c.fetch(`http://127.0.0.1:${port}/x?token=hidden`));
    expect(e.code).toBe('ERR_MAX_ATTEMPTS');
    expect(e.attempts).toBe(3);
    expect(e.errorClass).toBe('connect_refused');
    expect(e.sent).toBe('not_sent');
    expect((e.cause as { code?: string }).code).toBe('ECONNREFUSED');
    expect(e.message).toMatch(/connect_refused \(ECONNREFUSED\), the request was not sent/);
    expect(e.message).not.toContain('hidden');
  });
});

describe('cancellation', () => {
  it('caller abort during the backoff wait → rejects at once, no further request', async () => {
    const s = await server((_q, res) => {
      res.writeHead(503);
      res.end();
    });
    const log = eventLog();
    const clock = createTestClock();
    const c = client({ clock, onEvent: log.onEvent, policy: { backoff: { kind: 'constant', delayMs: 2000 }, deadlineMs: 5000 } });
    const ac = new AbortController();
    const p = fail(c.fetch(s.url, { signal: ac.signal }));
    await until('the first attempt decided (the backoff wait begins)', () => log.attempts().length === 1);
    await clock.advanceAsync(100);
    expect(s.count()).toBe(1);
    const t0 = clock.now();
    ac.abort();
    const e = await p; // the clock is not moved: the 2 s backoff is not waited for
    expect(clock.now() - t0).toBeLessThan(100); // not the 2 s backoff
    expect(e.code).toBe('ERR_CANCELLED');
    expect(e.reason).toBe('cancelled');
    expect(clock.pending()).toBe(0); // the backoff's timer is gone: nothing will send another request
    await clock.advanceAsync(5_000);
    expect(s.count()).toBe(1);
  });

  it("the caller's signal also aborts the response body", async () => {
    const s = await server((_q, res) => {
      res.writeHead(200);
      res.write('first');
    });
    const c = client();
    const ac = new AbortController();
    const res = await c.fetch(s.url, { signal: ac.signal });
    const reader = res.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('first');
    ac.abort(new Error('enough'));
    await expect(reader.read()).rejects.toThrow();
  });
});

describe('events and protection per dependency', () => {
  it('endpoint: scheme, host, port and path only; routeTemplate replaces the path', async () => {
    const s = await server((_q, res) => res.end());
    const log = eventLog();
    const c = client({ onEvent: log.onEvent, routeTemplate: (u) => (u.pathname.startsWith('/users/') ? '/users/:id' : null) });
    await (await c.fetch(`${s.origin}/users/4711/?q=secret#frag`)).text();
    await (await c.fetch(`${s.origin}/other?x=1`, { routeTemplate: '/o/:x' })).text();
    await (await c.fetch(`${s.origin}/plain?x=1#f`)).text();
    expect(log.attempts().map((a) => a.endpoint)).toEqual([`${s.origin}/users/:id`, `${s.origin}/o/:x`, `${s.origin}/plain`]);
  });

  it('URLs with credentials, bad methods and bad headers are refused before any call, without echoing them', async () => {
    const c = client();
    const e1 = await c.fetch('http://user:hunter2@127.0.0.1:1/').then(
      () => new Error('expected a rejection'),
      (e: Error) => e,
    );
    expect(e1.message).not.toContain('hunter2');
    const e2 = await c.fetch('http://127.0.0.1:1/', { headers: { authorization: 'Bearer abc\r\nx: y' } }).then(
      () => new Error('expected a rejection'),
      (e: Error) => e,
    );
    expect((e2 as { code?: string }).code).toBe('ERR_INVALID_INPUT');
    expect(e2.message).not.toContain('Bearer');
    const e3 = await c.fetch('http://127.0.0.1:1/', { method: 'GET', body: 'x' }).then(
      () => new Error('expected a rejection'),
      (e: Error) => e,
    );
    expect((e3 as { code?: string }).code).toBe('ERR_INVALID_INPUT');
    const e4 = await c.fetch('not a url?token=zzz').then(
      () => new Error('expected a rejection'),
      (e: Error) => e,
    );
    expect(e4.message).not.toContain('zzz');
  });

  it('the retry budget is shared per origin: a dependency failing 100 % under load gets ≤ (1 + ratio) × first attempts + a small floor', async () => {
    const s = await server((_q, res) => {
      res.writeHead(503);
      res.end();
    });
    const log = eventLog();
    const ratio = 0.1;
    const c = client({
      onEvent: log.onEvent,
      policy: { maxAttempts: 5, deadlineMs: 2000, backoff: { kind: 'constant', delayMs: 1 }, budget: { kind: 'ratio', ratio, minPerSecond: 1, maxTokens: 10 } },
    });
    const t0 = performance.now();
    let operations = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (performance.now() - t0 < 700) {
          operations++;
          await (await c.fetch(s.url)).arrayBuffer();
        }
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    const first = log.attempts().filter((a) => a.attempt === 1).length;
    expect(first).toBe(operations);
    const floor = 10 + 1 * Math.ceil(seconds) + 1;
    expect(s.count()).toBeLessThanOrEqual((1 + ratio) * first + floor);
    expect(s.count()).toBeGreaterThan(first); // some retries did happen
    expect(log.events.some((e) => e.type === 'result' && e.reason === 'budget_exhausted')).toBe(true);
    expect(c.budgets.size).toBe(1);
  });

  it('circuit breaker per origin: opens after the volume, fails fast with no request, one trial, closes on success', async () => {
    let healthy = false;
    const s = await server((_q, res) => {
      res.writeHead(healthy ? 200 : 503);
      res.end();
    });
    const changes: string[] = [];
    const clock = createTestClock();
    const c = client({
      clock,
      policy: { maxAttempts: 1 },
      breaker: { failureRatio: 0.5, minimumThroughput: 4, windowMs: 10_000, openMs: 200 },
      onBreakerStateChange: (ch) => changes.push(`${ch.from}→${ch.to}`),
    });
    for (let i = 0; i < 4; i++) expect((await c.fetch(s.url)).status).toBe(503);
    expect(changes).toEqual(['closed→open']);
    const e = await fail(c.fetch(s.url));
    expect(e.code).toBe('ERR_CIRCUIT_OPEN');
    expect(s.count()).toBe(4);
    await clock.advanceAsync(199);
    expect((await fail(c.fetch(s.url))).code).toBe('ERR_CIRCUIT_OPEN'); // still open 1 ms before the cool-down ends
    expect(s.count()).toBe(4);
    await clock.advanceAsync(21);
    healthy = true;
    expect((await c.fetch(s.url)).status).toBe(200);
    expect(changes).toEqual(['closed→open', 'open→half_open', 'half_open→closed']);
    expect(s.count()).toBe(5);
    expect(c.breakerSnapshot()[s.origin]!.state).toBe('closed');
  });

  it('bulkhead per origin: concurrency never exceeds the cap (server-side), overflow is rejected', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    const s = await server((_q, res) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      setTimeout(() => {
        inFlight--;
        res.end('ok');
      }, 100);
    });
    const c = client({ bulkhead: { maxConcurrent: 2, maxQueue: 1 } });
    const results = await Promise.allSettled(Array.from({ length: 6 }, () => c.fetch(s.url).then((r) => r.text())));
    const ok = results.filter((r) => r.status === 'fulfilled').length;
    const full = results.filter((r) => r.status === 'rejected' && (r.reason as RelentFetchError).code === 'ERR_BULKHEAD_FULL').length;
    expect(ok).toBe(3);
    expect(full).toBe(3);
    expect(maxInFlight).toBeLessThanOrEqual(2);
  });
});
