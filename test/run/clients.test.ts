// run() with no classifier option, around the HTTP clients users already have: fetch,
// undici.request, axios, got, ky and node:http, each against a real node:http server on
// loopback, in the seven scenarios of issue 23. The executor runs on a test clock: its
// waits and attempt timeouts pass when the test advances the clock (on each retry event,
// by the wait it announced; when a hanging request reaches the server, by the attempt
// timeout), so no scenario sleeps on the wall clock, and the Retry-After wait is seen as
// the clock's pending timer before it is let pass. got and ky run with their own retries
// off, as docs/clients.md tells (their defaults are tested at the end: relent says so).
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import axios from 'axios';
import got from 'got';
import ky from 'ky';
import { request as undiciRequest } from 'undici';
import { execute, run, type AttemptContext, type RelentEvent, type RunResult } from '../../src/run/run.js';
import { resetClientRetryWarnings } from '../../src/run/classify.js';
import type { AttemptEvent } from '../../src/core/types.js';
import { createSeededRandom, createTestClock, type TestClock } from '../../src/testing/index.js';

type Step = number | { status: number; headers?: Record<string, string> } | 'hang';

/** One server for the file: `/p/<id>` answers the plan's steps in turn (the last repeats). */
const plans = new Map<string, { steps: Step[]; hits: number; methods: string[]; onHang?: () => void }>();
let server: Server;
let base = '';
let planSeq = 0;

function handle(req: IncomingMessage, res: ServerResponse): void {
  const id = /^\/p\/([\w-]+)/.exec(req.url ?? '')?.[1];
  const plan = id === undefined ? undefined : plans.get(id);
  if (plan === undefined) {
    res.statusCode = 500;
    res.end('no plan');
    return;
  }
  plan.methods.push(req.method ?? '');
  const step = plan.steps[Math.min(plan.hits, plan.steps.length - 1)]!;
  plan.hits++;
  req.resume();
  if (step === 'hang') {
    plan.onHang?.();
    return;
  }
  const s = typeof step === 'number' ? { status: step } : step;
  res.writeHead(s.status, { 'content-type': 'text/plain', ...s.headers });
  res.end(s.status < 400 ? 'ok' : 'no');
}

function plan(steps: Step[]): { url: string; hits: () => number; methods: string[]; onHang: (f: () => void) => void } {
  const id = `s${++planSeq}`;
  const p: { steps: Step[]; hits: number; methods: string[]; onHang?: () => void } = { steps, hits: 0, methods: [] };
  plans.set(id, p);
  return { url: `${base}/p/${id}`, hits: () => p.hits, methods: p.methods, onHang: (f) => (p.onHang = f) };
}

function listen(s: Server, port = 0): Promise<number> {
  return new Promise((resolve, reject) => {
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => resolve((s.address() as AddressInfo).port));
  });
}

/** A loopback port nothing listens on (bound, then closed). */
async function freePort(): Promise<number> {
  const s = createServer();
  const port = await listen(s);
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

const extra: Server[] = [];

beforeAll(async () => {
  server = createServer(handle);
  base = `http://127.0.0.1:${await listen(server)}`;
});

afterEach(() => {
  for (const s of extra.splice(0)) {
    s.closeAllConnections();
    s.close();
  }
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

/** How each client is called from an attempt: the attempt's signal, nothing else relent-specific. */
interface Client {
  readonly name: string;
  readonly call: (url: string, method: string) => (ctx: AttemptContext) => Promise<unknown>;
  /** The status of what the operation resolved with. */
  readonly statusOf: (value: unknown) => number;
  /** The status an error of the client carries (axios, got and ky throw for 4xx/5xx). */
  readonly errorStatus?: (error: unknown) => number | undefined;
}

const CLIENTS: Client[] = [
  {
    name: 'fetch',
    call:
      (url, method) =>
      ({ signal }) =>
        fetch(url, { method, signal }),
    statusOf: (v) => (v as Response).status,
  },
  {
    name: 'undici.request',
    // The body is read inside the attempt: a retried answer then holds no connection.
    call:
      (url, method) =>
      async ({ signal }) => {
        const { statusCode, headers, body } = await undiciRequest(url, { method, signal });
        return { statusCode, headers, text: await body.text() };
      },
    statusOf: (v) => (v as { statusCode: number }).statusCode,
  },
  {
    name: 'axios',
    call:
      (url, method) =>
      ({ signal }) =>
        axios.request({ url, method, signal }),
    statusOf: (v) => (v as { status: number }).status,
    errorStatus: (e) => (e as { response?: { status: number } }).response?.status,
  },
  {
    name: 'got',
    call:
      (url, method) =>
      ({ signal }) =>
        got(url, { method: method as 'GET', signal, retry: { limit: 0 } }),
    statusOf: (v) => (v as { statusCode: number }).statusCode,
    errorStatus: (e) => (e as { response?: { statusCode: number } }).response?.statusCode,
  },
  {
    name: 'ky',
    call:
      (url, method) =>
      ({ signal }) =>
        ky(url, { method, signal, retry: 0 }),
    statusOf: (v) => (v as Response).status,
    errorStatus: (e) => (e as { response?: Response }).response?.status,
  },
  {
    name: 'node:http',
    call:
      (url, method) =>
      ({ signal }) =>
        new Promise((resolve, reject) => {
          const req = httpRequest(url, { method, signal }, (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (d: string) => (text += d));
            res.on('end', () => resolve({ statusCode: res.statusCode, headers: res.headers as IncomingHttpHeaders, text }));
            res.on('error', reject);
          });
          req.on('error', reject);
          req.end();
        }),
    statusOf: (v) => (v as { statusCode: number }).statusCode,
  },
];

const ATTEMPT_TIMEOUT_MS = 500;

interface Run {
  readonly result: RunResult<unknown>;
  readonly attempts: AttemptEvent[];
  readonly clock: TestClock;
}

/**
 * Runs one operation on a test clock with relent's default policy (plus an attempt
 * timeout) and no classifier: each retry's wait passes when its event is seen (after
 * `beforeRetry`), a hanging request's attempt timeout when the request reaches the server.
 */
async function scenario(
  client: Client,
  url: string,
  method: string,
  hooks: { onHang?: (f: () => void) => void; beforeRetry?: (ev: AttemptEvent, clock: TestClock) => Promise<'advanced' | void> } = {},
): Promise<Run> {
  const clock = createTestClock();
  const attempts: AttemptEvent[] = [];
  hooks.onHang?.(() => setImmediate(() => clock.advance(ATTEMPT_TIMEOUT_MS)));
  const result = await execute(client.call(url, method), {
    clock,
    random: createSeededRandom(23),
    method,
    policy: { attemptTimeoutMs: ATTEMPT_TIMEOUT_MS },
    onEvent: (ev: RelentEvent) => {
      if (ev.type !== 'attempt') return;
      attempts.push(ev);
      if (ev.decision === 'retry') {
        setImmediate(
          () =>
            void (async () => {
              if ((await hooks.beforeRetry?.(ev, clock)) !== 'advanced') clock.advance(ev.delayMs!);
            })(),
        );
      }
    },
  });
  return { result, attempts, clock };
}

const seen = (r: Run): string[] => r.attempts.map((e) => `${e.status ?? e.errorClass}:${e.decision}`);

describe.each(CLIENTS)('run() around $name, no classifier option', (client) => {
  const statusOfOutcome = (r: RunResult<unknown>): number | undefined =>
    r.outcome.ok ? client.statusOf(r.outcome.value) : client.errorStatus?.(r.outcome.error);

  it('503 twice, then 200: the 200 after 3 calls', async () => {
    const p = plan([503, 503, 200]);
    const r = await scenario(client, p.url, 'GET');
    expect(seen(r)).toEqual(['503:retry', '503:retry', '200:return']);
    expect(r.result.reason).toBe('return');
    expect(r.result.outcome.ok).toBe(true);
    expect(statusOfOutcome(r.result)).toBe(200);
    expect(p.hits()).toBe(3);
  });

  it("429 with Retry-After: 1: waits the second it was asked (the clock's pending wait), then 200", async () => {
    const p = plan([{ status: 429, headers: { 'retry-after': '1' } }, 200]);
    let hitsDuringWait = -1;
    const r = await scenario(client, p.url, 'GET', {
      beforeRetry: async (ev, clock) => {
        // The wait is a timer on relent's clock, at least the asked second away: 1 ms short of it, nothing is sent.
        expect(clock.nextAt()).toBe(clock.now() + ev.delayMs!);
        clock.advance(ev.delayMs! - 1);
        await new Promise((res) => setImmediate(res));
        hitsDuringWait = p.hits();
        clock.advance(1);
        return 'advanced';
      },
    });
    expect(seen(r)).toEqual(['429:retry', '200:return']);
    expect(r.attempts[0]!.retryAfterMs).toBe(1000);
    expect(r.attempts[0]!.retryAfterValid).toBe(true);
    // Never earlier than asked, plus the policy's small positive jitter (at most 10 %, at least 100 ms).
    expect(r.attempts[0]!.delayMs).toBeGreaterThanOrEqual(1000);
    expect(r.attempts[0]!.delayMs).toBeLessThanOrEqual(1100);
    expect(hitsDuringWait).toBe(1);
    expect(p.hits()).toBe(2);
    expect(statusOfOutcome(r.result)).toBe(200);
  });

  it("connection refused: connect_refused, retried to the last attempt, the client's own error at the end", async () => {
    const port = await freePort();
    const r = await scenario(client, `http://127.0.0.1:${port}/p/none`, 'GET');
    expect(seen(r)).toEqual(['connect_refused:retry', 'connect_refused:retry', 'connect_refused:max_attempts']);
    expect(r.result.outcome.ok).toBe(false);
    const error = (r.result.outcome as { error: unknown }).error;
    expect((error as { name?: string }).name).not.toBe('RelentError');
  });

  it('a GET that hangs past the attempt timeout: timeout, retried; the request was aborted each time', async () => {
    const p = plan(['hang']);
    const r = await scenario(client, p.url, 'GET', { onHang: p.onHang });
    expect(seen(r)).toEqual(['timeout:retry', 'timeout:retry', 'timeout:max_attempts']);
    expect(r.attempts.map((e) => e.elapsedMs)).toEqual([ATTEMPT_TIMEOUT_MS, ATTEMPT_TIMEOUT_MS, ATTEMPT_TIMEOUT_MS]);
    expect(p.hits()).toBe(3);
    expect((r.result.outcome as { error: { code?: string } }).error.code).toBe('ERR_MAX_ATTEMPTS');
  });

  it('404 is not retried: one call, not_retryable, the 404 itself at the end', async () => {
    const p = plan([404]);
    const r = await scenario(client, p.url, 'GET');
    expect(seen(r)).toEqual(['404:not_retryable']);
    expect(p.hits()).toBe(1);
    expect(statusOfOutcome(r.result)).toBe(404);
  });

  it('a POST refused is retried (nothing was sent): refused, then the server is up, 200', async () => {
    const port = await freePort();
    const late = createServer(handle);
    extra.push(late);
    const p = plan([200]);
    const path = new URL(p.url).pathname;
    const r = await scenario(client, `http://127.0.0.1:${port}${path}`, 'POST', {
      beforeRetry: async () => {
        await listen(late, port);
      },
    });
    expect(seen(r)).toEqual(['connect_refused:retry', '200:return']);
    expect(p.methods).toEqual(['POST']);
    expect(statusOfOutcome(r.result)).toBe(200);
  });

  it('a POST that hangs: check_state after one call (it may have been applied), never sent twice', async () => {
    const p = plan(['hang']);
    const r = await scenario(client, p.url, 'POST', { onHang: p.onHang });
    expect(seen(r)).toEqual(['timeout:check_state']);
    expect(r.result.reason).toBe('check_state');
    expect((r.result.outcome as { error: { code?: string } }).error.code).toBe('ERR_UNKNOWN_OUTCOME');
    expect(p.methods).toEqual(['POST']);
  });

  it("on the system clock (run()'s success path): 503, then 200 after 2 calls", async () => {
    const p = plan([503, 200]);
    const value = await run(client.call(p.url, 'GET'), { method: 'GET', policy: { backoff: { kind: 'constant', delayMs: 0 } } });
    expect(client.statusOf(value)).toBe(200);
    expect(p.hits()).toBe(2);
  });
});

describe("headers in any classifier's result", () => {
  it('a custom classifier that returns a fetch Headers keeps its Retry-After', async () => {
    const p = plan([{ status: 503, headers: { 'retry-after': '2' } }, 200]);
    const clock = createTestClock();
    const events: AttemptEvent[] = [];
    const res = await new Promise<Response>((resolve, reject) => {
      run(({ signal }) => fetch(p.url, { signal }), {
        clock,
        random: createSeededRandom(1),
        method: 'GET',
        classifyValue: (r) => ({ status: r.status, headers: r.headers }),
        onEvent: (ev) => {
          if (ev.type !== 'attempt') return;
          events.push(ev);
          if (ev.decision === 'retry') setImmediate(() => clock.advance(ev.delayMs!));
        },
      }).then(resolve, reject);
    });
    expect(res.status).toBe(200);
    expect(events[0]!.retryAfterMs).toBe(2000);
    expect(events[0]!.delayMs).toBeGreaterThanOrEqual(2000);
  });

  it("node:http's record with a mixed-case name and an array value is read too", async () => {
    const clock = createTestClock();
    const events: AttemptEvent[] = [];
    let n = 0;
    const value = await new Promise<number>((resolve, reject) => {
      run(async () => ++n, {
        clock,
        random: createSeededRandom(1),
        classifyValue: (v) => (v === 1 ? { status: 429, headers: { 'Retry-After': ['3'], 'X-Other': undefined } } : { status: 200 }),
        onEvent: (ev) => {
          if (ev.type !== 'attempt') return;
          events.push(ev);
          if (ev.decision === 'retry') setImmediate(() => clock.advance(ev.delayMs!));
        },
      }).then(resolve, reject);
    });
    expect(value).toBe(2);
    expect(events[0]!.retryAfterMs).toBe(3000);
  });
});

describe("the clients' own timeouts are timeouts (the request may have been applied)", () => {
  // The clients' own timers are real: a 50 ms wait is unavoidable here (nothing is asserted on time).
  const own: { name: string; call: (url: string) => (ctx: AttemptContext) => Promise<unknown> }[] = [
    {
      name: 'axios (timeout: ECONNABORTED without a cause)',
      call:
        (url) =>
        ({ signal }) =>
          axios.post(url, 'x', { signal, timeout: 50 }),
    },
    {
      name: 'axios (clarifyTimeoutError: ETIMEDOUT without a cause)',
      call:
        (url) =>
        ({ signal }) =>
          axios.post(url, 'x', { signal, timeout: 50, transitional: { clarifyTimeoutError: true } }),
    },
    {
      name: 'got (TimeoutError, event "request")',
      call:
        (url) =>
        ({ signal }) =>
          got.post(url, { body: 'x', signal, retry: { limit: 0 }, timeout: { request: 50 } }),
    },
    {
      name: 'ky (TimeoutError)',
      call:
        (url) =>
        ({ signal }) =>
          ky.post(url, { body: 'x', signal, retry: 0, timeout: 50 }),
    },
    {
      name: 'fetch (AbortSignal.timeout: a DOMException TimeoutError)',
      call: (url) => () => fetch(url, { method: 'POST', body: 'x', signal: AbortSignal.timeout(50) }),
    },
  ];
  it.each(own)('$name: a POST ends in check_state after one call', async ({ call }) => {
    const p = plan(['hang']);
    const events: AttemptEvent[] = [];
    const r = await execute(call(p.url), { method: 'POST', onEvent: (ev) => ev.type === 'attempt' && events.push(ev) });
    expect(events.map((e) => `${e.errorClass}:${e.decision}`)).toEqual(['timeout:check_state']);
    expect(r.reason).toBe('check_state');
    expect(p.hits()).toBe(1);
  });
});

describe("a client that retries inside relent's attempt: relent says so once, with the fix", () => {
  const warnings: string[] = [];
  const onWarning = (w: Error & { code?: string }): void => {
    if (w.code === 'RELENT_CLIENT_RETRIES') warnings.push(w.message);
  };
  beforeAll(() => {
    process.on('warning', onWarning);
  });
  afterAll(() => {
    process.off('warning', onWarning);
  });
  afterEach(() => {
    warnings.length = 0;
    resetClientRetryWarnings();
  });
  const settle = () => new Promise((r) => setImmediate(r));

  it('got with its defaults: its first answer tells (retry.limit 2 for GET), once per process', async () => {
    const p = plan([200]);
    await run(({ signal }) => got(p.url, { signal }), { method: 'GET' });
    await run(({ signal }) => got(p.url, { signal }), { method: 'GET' });
    await settle();
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('got retries GET up to 2 times');
    expect(warnings[0]).toContain('`retry: { limit: 0 }`');
  });

  it('got with retry: { limit: 0 }, or a POST got does not retry: nothing said', async () => {
    const p = plan([200]);
    await run(({ signal }) => got(p.url, { signal, retry: { limit: 0 } }), { method: 'GET' });
    await run(({ signal }) => got.post(p.url, { signal, body: 'x' }), { method: 'POST' });
    await settle();
    expect(warnings).toEqual([]);
  });

  it('got retrying a 503 inside the attempt: the count it retried is named', async () => {
    // got waits for the Retry-After it is given: 0.001 s per retry (got's own timer).
    const p = plan([{ status: 503, headers: { 'retry-after': '0.001' } }, 200]);
    const value = await run(({ signal }) => got(p.url, { signal }), { method: 'GET' });
    await settle();
    expect(value.statusCode).toBe(200);
    expect(p.hits()).toBe(2); // one relent attempt, two calls
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('it retried 1 time here');
  });

  it('got whose own retries outlast the attempt (a refused port): its late error still tells', async () => {
    const port = await freePort();
    const clock = createTestClock();
    const r = execute(({ signal }) => got(`http://127.0.0.1:${port}/`, { signal }), {
      clock,
      method: 'GET',
      policy: { maxAttempts: 1, attemptTimeoutMs: 100 },
    });
    // got refuses, then waits ~1 s (its own timer) before trying again: relent's attempt ends first.
    await settle();
    clock.advance(100);
    expect((await r).last?.errorClass).toBe('timeout');
    for (let i = 0; i < 20 && warnings.length === 0; i++) await settle();
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('got retries GET');
  });

  it('ky with its defaults: its first HTTPError tells (retry.limit 2)', async () => {
    const p = plan([404]);
    await execute(({ signal }) => ky(p.url, { signal }), { method: 'GET' });
    await settle();
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('ky retries GET up to 2 times');
    expect(warnings[0]).toContain('`retry: { limit: 0 }`');
  });

  it('ky with retry: 0: nothing said', async () => {
    const p = plan([404]);
    await execute(({ signal }) => ky(p.url, { signal, retry: 0 }), { method: 'GET' });
    await settle();
    expect(warnings).toEqual([]);
  });
});
