// Hedging, the adaptive concurrency limit and the rate limit through client.fetch and the
// undici interceptor, against real loopback servers (port 0): what the server receives,
// what it sees closed, and what reaches the caller.
import { afterEach, describe, expect, it } from 'vitest';
import http from 'node:http';
import { Agent, request } from 'undici';
import { createClient, type RelentClient } from '../../src/http/client.js';
import { relentInterceptor } from '../../src/http/interceptor.js';
import type { RelentEvent } from '../../src/run/run.js';
import type { LimitEvent } from '../../src/run/concurrency-limit.js';
import { RelentError } from '../../src/core/errors.js';

interface Dep {
  readonly url: string;
  /** Requests received (their bodies read), by arrival. */
  readonly received: { n: number; method: string; body: string; key: string | null }[];
  /** Requests whose connection closed before their answer was written. */
  readonly closedEarly: number[];
  readonly inFlight: () => number;
  readonly maxInFlight: () => number;
  close(): Promise<void>;
}

/** A server that answers request n after `delay(n)` ms with `status(n)` and body `body-n`. */
async function dep(
  delay: (n: number) => number,
  status: (n: number) => number = () => 200,
  headers: (n: number) => Record<string, string> = () => ({}),
): Promise<Dep> {
  const received: Dep['received'] = [];
  const closedEarly: number[] = [];
  let n = 0;
  let inFlight = 0;
  let max = 0;
  const server = http.createServer((req, res) => {
    const k = ++n;
    inFlight++;
    max = Math.max(max, inFlight);
    let body = '';
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => {
      received.push({ n: k, method: req.method ?? '', body, key: (req.headers['idempotency-key'] as string | undefined) ?? null });
      const t = setTimeout(() => {
        inFlight--;
        res.writeHead(status(k), { 'content-type': 'text/plain', ...headers(k) }).end(`body-${k}`);
      }, delay(k));
      res.on('close', () => {
        if (!res.writableFinished) {
          clearTimeout(t);
          inFlight--;
          closedEarly.push(k);
        }
      });
    });
  });
  server.keepAliveTimeout = 10_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/item`,
    received,
    closedEarly,
    inFlight: () => inFlight,
    maxInFlight: () => max,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const until = async (check: () => boolean, ms = 5000): Promise<void> => {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 5));
  }
};

const cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0)) await f();
});

function track<T extends Dep | RelentClient>(x: T): T {
  cleanup.push(() => x.close());
  return x;
}

describe('hedging (client.fetch and the interceptor, real server)', () => {
  const policy = { hedge: { delayMs: 50, maxExtraLoad: 1 }, budget: null };

  it("a slow first answer: the hedge wins, the server sees the loser's connection closed, its body never reaches the caller", async () => {
    const d = track(await dep((n) => (n === 1 ? 3000 : 5)));
    const events: RelentEvent[] = [];
    const c = track(createClient({ policy, onEvent: (e) => events.push(e) }));
    const t0 = performance.now();
    const res = await c.fetch(d.url);
    expect(await res.text()).toBe('body-2');
    expect(performance.now() - t0).toBeLessThan(2500);
    await until(() => d.closedEarly.includes(1));
    expect(d.received.map((r) => r.n)).toEqual([1, 2]);
    expect(
      events.map((e) => (e.type === 'attempt' ? `${e.attempt}:${e.decision}${e.hedge ? ':hedge' : ''}` : `result:${e.reason}:${e.hedges}:${e.hedgeWon}`)),
    ).toEqual(['2:return:hedge', '1:hedge_lost', 'result:return:1:true']);
  });

  it('a POST without an idempotency key is never hedged (one receipt per call), with a key it is', async () => {
    const d = track(await dep(() => 200));
    const c = track(createClient({ policy }));
    for (let i = 0; i < 3; i++) expect((await c.fetch(d.url, { method: 'POST', body: `p${i}` })).status).toBe(200);
    expect(d.received.map((r) => r.body)).toEqual(['p0', 'p1', 'p2']);
    const keyed = await c.fetch(d.url, { method: 'POST', body: 'k', idempotencyKey: 'key-1' });
    await keyed.arrayBuffer();
    await until(() => d.received.length === 5);
    expect(d.received.slice(3).map((r) => [r.body, r.key])).toEqual([
      ['k', '"key-1"'],
      ['k', '"key-1"'],
    ]);
  });

  it("through the interceptor: the hedge's answer is the one the wrapped handler gets; the loser is cut", async () => {
    const d = track(await dep((n) => (n === 1 ? 3000 : 5)));
    const agent = new Agent().compose(relentInterceptor({ policy }));
    cleanup.push(() => agent.close());
    const { statusCode, body } = await request(d.url, { dispatcher: agent });
    expect(statusCode).toBe(200);
    expect(await body.text()).toBe('body-2');
    await until(() => d.closedEarly.includes(1));
  });

  it('relent fetch-style policy JSON takes the hedge field; a bad one names it', () => {
    expect(() => createClient({ policy: { hedge: { delayMs: 'p100' } as never } })).toThrow(/`hedge.delayMs`/);
  });
});

describe('the adaptive concurrency limit (client.fetch, real server)', () => {
  it('keeps the calls in flight within the limit; a 503 halves it (an event says so); a full queue is refused with its own reason', async () => {
    let overloaded = false;
    const d = track(
      await dep(
        () => 30,
        () => (overloaded ? 503 : 200),
      ),
    );
    const limits: LimitEvent[] = [];
    const c = track(
      createClient({
        policy: { maxAttempts: 1 },
        concurrencyLimit: { kind: 'aimd', initial: 4, maxQueue: 100 },
        onLimitEvent: (e) => limits.push(e),
      }),
    );
    await Promise.all(Array.from({ length: 20 }, async () => (await c.fetch(d.url)).arrayBuffer()));
    // Within the limit, which grows by one after `limit` answers while it is used (each change an event).
    expect(d.maxInFlight()).toBeLessThanOrEqual(Math.max(4, ...limits.map((e) => e.limit)));
    expect(limits.every((e) => e.cause === 'increase' && e.inFlight <= e.limit)).toBe(true);
    overloaded = true;
    await Promise.all(Array.from({ length: 4 }, async () => (await c.fetch(d.url)).arrayBuffer()));
    const limit = c.concurrencyLimits.get(new URL(d.url).origin)!;
    const decrease = limits.find((e) => e.cause === 'decrease')!;
    expect(decrease.name).toBe(new URL(d.url).origin);
    expect(limit.limit).toBe(decrease.limit);
    expect(decrease.limit).toBeLessThan(Math.max(4, ...limits.filter((e) => e.cause === 'increase').map((e) => e.limit)));

    const tight = track(createClient({ policy: { maxAttempts: 1 }, concurrencyLimit: { kind: 'gradient', initial: 1, max: 1, maxQueue: 0 } }));
    overloaded = false;
    const events: RelentEvent[] = [];
    const results = await Promise.allSettled([tight.fetch(d.url), tight.fetch(d.url, { onEvent: (e) => events.push(e) })]);
    const refused = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect(refused.reason.code).toBe('ERR_CONCURRENCY_LIMITED');
    expect(refused.reason.reason).toBe('concurrency_limited');
    expect(String(refused.reason.message)).toMatch(
      /^concurrency_limited: the concurrency limit of http:\/\/127\.0\.0\.1:\d+ is reached \(1 of 1 calls in flight, 0 of 0 queued\)/,
    );
    expect(events).toMatchObject([{ type: 'result', reason: 'concurrency_limited', attempts: 0 }]);
    for (const r of results) if (r.status === 'fulfilled') await r.value.arrayBuffer();
  });

  it('names bad options and refuses a bulkhead with it', () => {
    expect(() => createClient({ concurrencyLimit: { kind: 'gradient', tolerance: 0 } })).toThrow(/`concurrencyLimit.tolerance`/);
    expect(() => createClient({ concurrencyLimit: { kind: 'aimd' }, bulkhead: { maxConcurrent: 2 } })).toThrow(/one of `bulkhead` and `concurrencyLimit`/);
  });
});

describe('the rate limit (client.fetch, real server)', () => {
  it('a 429 with Retry-After pauses the dependency: the next call is refused at once (it could not get a token in time), never sent', async () => {
    const d = track(
      await dep(
        () => 1,
        (n) => (n === 1 ? 429 : 200),
        (n): Record<string, string> => (n === 1 ? { 'retry-after': '30' } : {}),
      ),
    );
    const c = track(createClient({ policy: { maxAttempts: 1 }, rateLimit: { ratePerSecond: 100, maxWaitMs: 200 } }));
    expect((await c.fetch(d.url)).status).toBe(429);
    const err = await c.fetch(d.url).catch((e: unknown) => e);
    expect(RelentError.is(err) || (err as { code?: string }).code).toBeTruthy();
    expect((err as { code: string }).code).toBe('ERR_RATE_LIMITED');
    expect((err as { reason: string }).reason).toBe('rate_limited');
    expect(d.received).toHaveLength(1);
    const state = c.rateLimiters.get(new URL(d.url).origin)!.state(performance.now());
    expect(state.ratePerSecond).toBeLessThan(100);
    expect(state.pausedUntil).not.toBeNull();
  });

  it("a success's RateLimit field caps the calls to its quota until the window ends", async () => {
    // The server's quota: 2 calls a minute, counting down.
    const d = track(
      await dep(
        () => 1,
        () => 200,
        (n) => ({ ratelimit: `"default";r=${Math.max(0, 2 - n)};t=60` }),
      ),
    );
    const c = track(createClient({ rateLimit: { ratePerSecond: 1000, maxWaitMs: 100 } }));
    await (await c.fetch(d.url)).arrayBuffer();
    await (await c.fetch(d.url)).arrayBuffer();
    await expect(c.fetch(d.url)).rejects.toMatchObject({ code: 'ERR_RATE_LIMITED' });
    expect(d.received).toHaveLength(2);
  });

  it('names bad options', () => {
    expect(() => createClient({ rateLimit: { ratePerSecond: -1 } })).toThrow(/`rateLimit.ratePerSecond`/);
    expect(() => createClient({ rateLimit: { ratePerSecond: 5, burst: 0 } })).toThrow(/`rateLimit.burst`/);
  });
});
