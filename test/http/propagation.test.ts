// Deadline and attempt headers on every attempt, deadline inheritance under a relent
// server, and the "don't retry" marker, for client.fetch and relentInterceptor, against
// real loopback servers.
import { afterEach, describe, expect, it } from 'vitest';
import { Agent, request } from 'undici';
import { createClient, type RelentClient } from '../../src/http/client.js';
import { relentInterceptor } from '../../src/http/interceptor.js';
import { runIncoming, type IncomingCall } from '../../src/run/incoming.js';
import { eventLog, startServer, type TestServer } from './helpers.js';

let servers: TestServer[] = [];
let closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.map((c) => c()));
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
  closers = [];
});
async function server(...args: Parameters<typeof startServer>): Promise<TestServer> {
  const s = await startServer(...args);
  servers.push(s);
  return s;
}
function client(o: Parameters<typeof createClient>[0]): RelentClient {
  const c = createClient(o);
  closers.push(() => c.close());
  return c;
}
const FAST = { maxAttempts: 3, deadlineMs: 2000, backoff: { kind: 'constant' as const, delayMs: 5 } };

/** An incoming call as relent/server makes one, with a deadline `ms` from now. */
function incoming(ms: number): IncomingCall & { noRetry: number } {
  const at = performance.now() + ms;
  const c = new AbortController();
  return {
    signal: c.signal,
    attempt: 1,
    noRetry: 0,
    remainingMs: () => at - performance.now(),
    dependencySaidNoRetry() {
      this.noRetry++;
    },
  };
}

describe('client.fetch: x-relent-attempt and x-relent-deadline-ms on every attempt', () => {
  it('1-based attempt numbers; the time the caller waits for each attempt, shrinking', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n < 3 ? 503 : 200);
      res.end();
    });
    const res = await client({ policy: FAST }).fetch(s.url, { deadlineMs: 1000 });
    expect(res.status).toBe(200);
    expect(s.seen.map((x) => x.headers['x-relent-attempt'])).toEqual(['1', '2', '3']);
    const d = s.seen.map((x) => Number(x.headers['x-relent-deadline-ms']));
    expect(d[0]).toBeLessThanOrEqual(1000);
    expect(d[0]).toBeGreaterThan(900);
    expect(d[1]).toBeLessThan(d[0]!);
    expect(d[2]).toBeLessThan(d[1]!);
  });
  it('the attempt timeout, when shorter than the time left, is what is sent', async () => {
    const s = await server((_q, res) => {
      res.writeHead(200);
      res.end();
    });
    await client({ policy: FAST }).fetch(s.url, { deadlineMs: 1000, attemptTimeoutMs: 120 });
    expect(s.seen[0]!.headers['x-relent-deadline-ms']).toBe('120');
  });
  it("names are configurable, forms optional, and the caller's own copies are replaced", async () => {
    const s = await server((_q, res) => {
      res.writeHead(200);
      res.end();
    });
    const c = client({ policy: FAST, propagate: { deadlineHeader: 'X-Budget-Ms', attemptHeader: 'x-try', grpcTimeout: true, envoyTimeout: true } });
    await c.fetch(s.url, { deadlineMs: 500, headers: { 'x-try': '99', 'grpc-timeout': '1H' } });
    const h = s.seen[0]!.headers;
    expect(h['x-try']).toBe('1');
    expect(Number(h['x-budget-ms'])).toBeLessThanOrEqual(500);
    expect(h['grpc-timeout']).toMatch(/^\d+m$/);
    expect(Number(h['x-envoy-expected-rq-timeout-ms'])).toBeLessThanOrEqual(500);
    expect(h['x-relent-deadline-ms']).toBeUndefined();
  });
  it("propagate: false sends none of them (and leaves the caller's own headers alone)", async () => {
    const s = await server((_q, res) => {
      res.writeHead(200);
      res.end();
    });
    await client({ policy: FAST, propagate: false }).fetch(s.url, { headers: { 'x-relent-attempt': '7' } });
    expect(s.seen[0]!.headers['x-relent-deadline-ms']).toBeUndefined();
    expect(s.seen[0]!.headers['x-relent-attempt']).toBe('7');
  });
  it('a bad propagate option is refused at construction, naming it', () => {
    expect(() => createClient({ propagate: { attemptHeader: 'a b' } })).toThrow(/propagate\.attemptHeader/);
  });
});

describe("client.fetch under a relent server: what is left of the caller's deadline, never a fresh one", () => {
  it('the operation and its header get at most the incoming remaining time', async () => {
    const s = await server((_q, res) => {
      res.writeHead(200);
      res.end();
    });
    const c = client({ policy: { ...FAST, deadlineMs: 10_000 } });
    await runIncoming(incoming(250), () => c.fetch(s.url));
    const sent = Number(s.seen[0]!.headers['x-relent-deadline-ms']);
    expect(sent).toBeLessThanOrEqual(250);
    expect(sent).toBeGreaterThan(150);
  });
  it("a call's own shorter deadline still wins", async () => {
    const s = await server((_q, res) => {
      res.writeHead(200);
      res.end();
    });
    await runIncoming(incoming(5000), () => client({ policy: FAST }).fetch(s.url, { deadlineMs: 100 }));
    expect(Number(s.seen[0]!.headers['x-relent-deadline-ms'])).toBeLessThanOrEqual(100);
  });
  it('a spent incoming deadline: no call at all, ERR_DEADLINE_EXCEEDED', async () => {
    const s = await server((_q, res) => {
      res.writeHead(200);
      res.end();
    });
    const e = await runIncoming(incoming(-1), () => client({ policy: FAST }).fetch(s.url)).catch((x: unknown) => x);
    expect(e).toMatchObject({ code: 'ERR_DEADLINE_EXCEEDED', attempts: 0 });
    expect(s.count()).toBe(0);
  });
  it('retries stop at the inherited deadline', async () => {
    const s = await server((_q, res) => {
      res.writeHead(503);
      res.end();
    });
    const log = eventLog();
    const c = client({ policy: { maxAttempts: 50, deadlineMs: 10_000, backoff: { kind: 'constant', delayMs: 40 } }, onEvent: log.onEvent, budget: false });
    const t0 = performance.now();
    // Ends on the last 503, or (on a loaded machine) on an attempt cut at the deadline: either way at the inherited deadline.
    await runIncoming(incoming(200), () => c.fetch(s.url)).catch((e: unknown) => e);
    expect(performance.now() - t0).toBeLessThan(2000); // not the client's own 10 s
    expect(log.result()!.reason).toBe('deadline_exceeded');
    expect(s.count()).toBeLessThanOrEqual(6);
  });
  it("inheritDeadline: false keeps the client's own deadline", async () => {
    const s = await server((_q, res) => {
      res.writeHead(200);
      res.end();
    });
    await runIncoming(incoming(100), () => client({ policy: FAST, propagate: { inheritDeadline: false } }).fetch(s.url, { deadlineMs: 1500 }));
    expect(Number(s.seen[0]!.headers['x-relent-deadline-ms'])).toBeGreaterThan(1000);
  });
});

describe('"don\'t retry" from the server', () => {
  it('x-relent-no-retry on a 503: one attempt, not_retryable, the result event says why; the incoming call is told', async () => {
    const s = await server((_q, res) => {
      res.writeHead(503, { 'retry-after': '1', 'x-relent-no-retry': 'overloaded' });
      res.end();
    });
    const log = eventLog();
    const inc = incoming(5000);
    const res = await runIncoming(inc, () => client({ policy: FAST, onEvent: log.onEvent }).fetch(s.url));
    expect(res.status).toBe(503);
    expect(s.count()).toBe(1);
    expect(log.result()).toMatchObject({ reason: 'not_retryable', why: 'retry_after_no_retry', attempts: 1 });
    expect(inc.noRetry).toBe(1);
  });
  it('grpc-retry-pushback-ms: -1 stops; 30 is a wait', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n === 1 ? 503 : 200, { 'grpc-retry-pushback-ms': '30' });
      res.end();
    });
    await client({ policy: FAST }).fetch(s.url);
    expect(s.count()).toBe(2);
    expect(s.seen[1]!.at - s.seen[0]!.at).toBeGreaterThanOrEqual(29);
    const t = await server((_q, res) => {
      res.writeHead(503, { 'grpc-retry-pushback-ms': '-1' });
      res.end();
    });
    await client({ policy: FAST }).fetch(t.url);
    expect(t.count()).toBe(1);
  });
  it('without the marker the incoming call is not told', async () => {
    const s = await server((_q, res) => {
      res.writeHead(503);
      res.end();
    });
    const inc = incoming(5000);
    await runIncoming(inc, () => client({ policy: FAST, budget: false }).fetch(s.url));
    expect(s.count()).toBe(3);
    expect(inc.noRetry).toBe(0);
  });
});

describe('relentInterceptor: the same headers, inheritance and marker', () => {
  it("attempt and deadline headers per attempt; the caller's copies replaced; inherits; honours the marker", async () => {
    const s = await server((_q, res, n) => {
      if (n === 1) res.writeHead(503);
      else if (n === 2) res.writeHead(200);
      else res.writeHead(503, { 'x-relent-no-retry': 'overloaded' });
      res.end();
    });
    const agent = new Agent();
    closers.push(() => agent.close());
    const d = agent.compose(relentInterceptor({ policy: FAST }));
    const inc = incoming(300);
    const r1 = await runIncoming(inc, () => request(s.url, { dispatcher: d, headers: { 'X-Relent-Attempt': '9', other: 'kept' } }));
    await r1.body.dump();
    expect(s.seen.map((x) => x.headers['x-relent-attempt'])).toEqual(['1', '2']);
    expect(s.seen[0]!.headers.other).toBe('kept');
    expect(Number(s.seen[0]!.headers['x-relent-deadline-ms'])).toBeLessThanOrEqual(300);
    const r2 = await runIncoming(inc, () => request(s.url, { dispatcher: d }));
    await r2.body.dump();
    expect(r2.statusCode).toBe(503);
    expect(s.count()).toBe(3);
    expect(inc.noRetry).toBe(1);
  });
  it('propagate: false sends nothing', async () => {
    const s = await server((_q, res) => {
      res.writeHead(200);
      res.end();
    });
    const agent = new Agent();
    closers.push(() => agent.close());
    const r = await request(s.url, { dispatcher: agent.compose(relentInterceptor({ propagate: false })) });
    await r.body.dump();
    expect(s.seen[0]!.headers['x-relent-attempt']).toBeUndefined();
  });
});
