// Three relent-served hops on loopback (each a node:http server with relent/server and
// a relent client below it): the caller's deadline travels down as what is left of it,
// the bottom stops work when it passes, and under an overload at the bottom only one
// layer's worth of attempts reaches it when the servers say "don't retry".
import http from 'node:http';
import type net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createClient, type RelentClient } from '../../src/http/client.js';
import type { PolicySpec } from '../../src/core/policy.js';
import type { RelentEvent } from '../../src/run/run.js';
import { relentMiddleware, type ServedRequest, type ServerEvent, type ServerOptions } from '../../src/server/index.js';
import { sleep } from '../http/helpers.js';

type Req = http.IncomingMessage & { relent: ServedRequest };
type Handler = (req: Req, res: http.ServerResponse) => void | Promise<void>;

let closers: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of closers.reverse()) await c();
  closers = [];
});

interface Hop {
  readonly url: string;
  readonly events: ServerEvent[];
  readonly stats: ReturnType<ReturnType<typeof relentMiddleware>['stats']>;
  readonly clientEvents: RelentEvent[];
}

/** A node:http server behind relentMiddleware; `below` (if any) is called with a relent client and its answer passed on. */
async function hop(server: ServerOptions, below: string | null, policy: PolicySpec, opts: { budget?: boolean; handler?: Handler } = {}): Promise<Hop> {
  const events: ServerEvent[] = [];
  const clientEvents: RelentEvent[] = [];
  const guard = relentMiddleware({ ...server, onEvent: (e) => events.push(e) });
  let client: RelentClient | null = null;
  if (below !== null) {
    client = createClient({ policy, budget: opts.budget ?? true, onEvent: (e) => clientEvents.push(e) });
    closers.push(() => client!.close());
  }
  const handler: Handler =
    opts.handler ??
    (async (_req, res) => {
      try {
        const r = await client!.fetch(below!);
        res.statusCode = r.status;
        res.end(await r.text());
      } catch {
        res.statusCode = 504;
        res.end('gave up');
      }
    });
  const s = http.createServer((req, res) =>
    guard(req, res, (err) => {
      if (err) {
        res.statusCode = 500;
        res.end();
        return;
      }
      void handler(req as Req, res);
    }),
  );
  const sockets = new Set<net.Socket>();
  s.on('connection', (c) => {
    sockets.add(c);
    c.on('close', () => sockets.delete(c));
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  closers.push(
    () =>
      new Promise((r) => {
        for (const c of sockets) c.destroy();
        s.close(r);
      }),
  );
  return {
    url: `http://127.0.0.1:${(s.address() as net.AddressInfo).port}/`,
    events,
    get stats() {
      return guard.stats();
    },
    clientEvents,
  };
}

const requests = (h: Hop) => h.events.filter((e): e is Extract<ServerEvent, { type: 'server_request' }> => e.type === 'server_request');

describe('a chain of three relent-served hops, 300 ms deadline at the top', () => {
  it("each hop sees what is left of its caller's deadline; the bottom stops work when it passes", async () => {
    let steps = 0;
    let stoppedAt = -1;
    let started = -1;
    const c = await hop(
      {},
      null,
      {},
      {
        handler: async (req, res) => {
          started = performance.now();
          const { signal } = req.relent;
          while (!signal.aborted) {
            // work in 10 ms steps, checking the caller's deadline
            steps++;
            await sleep(10);
          }
          stoppedAt = performance.now();
          res.statusCode = 504;
          res.end();
        },
      },
    );
    // Each hop's own client would allow 10 s: only the inherited deadline can bound it.
    const policy: PolicySpec = { maxAttempts: 3, deadlineMs: 10_000 };
    const b = await hop({}, c.url, policy);
    const a = await hop({}, b.url, policy);
    const top = createClient({ policy: { maxAttempts: 3, deadlineMs: 300 } });
    closers.push(() => top.close());
    const t0 = performance.now();
    const e = await top.fetch(a.url).then(
      (r) => r.status,
      (x: { code: string }) => x.code,
    );
    const took = performance.now() - t0;
    expect(e).toBe('ERR_DEADLINE_EXCEEDED');
    expect(took).toBeLessThan(1500);

    const [ra, rb, rc] = [requests(a)[0]!, requests(b)[0]!, requests(c)[0]!];
    // The deadline each hop received, and the time each had left when its handler started.
    expect(ra.deadlineMs).toBeLessThanOrEqual(300);
    expect(ra.deadlineMs).toBeGreaterThan(250);
    expect(rb.deadlineMs).toBeLessThanOrEqual(ra.remainingMs!);
    expect(rc.deadlineMs).toBeLessThanOrEqual(rb.remainingMs!);
    expect(rc.deadlineMs).toBeGreaterThan(150); // what is left, not a fresh 10 s and not zero
    for (const r of [ra, rb, rc]) expect(r.deadlineSource).toBe('x-relent-deadline-ms');
    // The bottom's signal aborted at its deadline and the work stopped there: its caller
    // (hop B's client, whose attempt had the same deadline) hung up a transit time before
    // the bottom's own timer, so the bottom sees the deadline as that hang-up.
    for (let i = 0; i < 100 && stoppedAt < 0; i++) await sleep(5); // the bottom hears of it a moment after the top gives up
    const ends = c.events.filter((x) => x.type === 'server_deadline' || x.type === 'server_abandoned');
    expect(ends).toHaveLength(1);
    if (ends[0]!.type === 'server_abandoned') expect(ends[0]!.remainingMs!).toBeLessThan(25);
    else expect(ends[0]).toMatchObject({ where: 'handler' });
    const worked = stoppedAt - started;
    expect(worked).toBeGreaterThan(rc.deadlineMs! - 30);
    expect(worked).toBeLessThan(rc.deadlineMs! + 1000); // timers run late on a loaded machine; a fresh deadline would be 10 s
    const stepsThen = steps;
    await sleep(60);
    expect(steps).toBe(stepsThen);
    // One attempt per hop: no time was left for another.
    expect([a, b, c].map((h) => h.stats.admitted)).toEqual([1, 1, 1]);
  });
});

/**
 * Overload at the bottom: its one slot is held, no queue, so it sheds every call. Three
 * layers (the top caller, hop A, hop B), each with 3 attempts, call down through A and
 * B; returns attempts the bottom received per top-level call, and its attempt histogram.
 */
async function overload(
  variant: { marker: boolean; retryAfter: boolean; budget: boolean },
  actions: number,
): Promise<{ perAction: number; attempts: Record<string, number>; topAttempts: number }> {
  const release: (() => void)[] = [];
  const bottom = await hop(
    { maxConcurrent: 1, maxQueue: 0, noRetryMarker: variant.marker, retryAfterSec: variant.retryAfter ? 1 : null },
    null,
    {},
    {
      handler: async (_req, res) => {
        await new Promise<void>((r) => release.push(r));
        res.end('finally');
      },
    },
  );
  closers.push(async () => {
    for (const r of release) r();
  });
  const hold = new Promise((resolve) => http.get(bottom.url, { agent: false }, resolve).on('error', () => {}));
  while (bottom.stats.inFlight === 0) await sleep(2);
  const policy: PolicySpec = { maxAttempts: 3, deadlineMs: 2000, backoff: { kind: 'constant', delayMs: 1 } };
  const server: ServerOptions = { noRetryMarker: variant.marker };
  const b = await hop(server, bottom.url, policy, { budget: variant.budget });
  const a = await hop(server, b.url, policy, { budget: variant.budget });
  const topEvents: RelentEvent[] = [];
  const top = createClient({ policy, budget: variant.budget, onEvent: (e) => topEvents.push(e) });
  closers.push(() => top.close());
  for (let i = 0; i < actions; i++) {
    const r = await top.fetch(a.url);
    await r.arrayBuffer();
  }
  for (const r of release) r();
  await hold;
  const { attempts } = bottom.stats;
  const received = Object.values(attempts).reduce((x, y) => x + y, 0) - 1; // minus the call that holds the slot
  return { perAction: received / actions, attempts, topAttempts: topEvents.filter((e) => e.type === 'attempt').length / actions };
}

describe('an overload at the bottom of three layers that each make 3 attempts', () => {
  it('with "don\'t retry" the bottom gets at most 1.2x the calls (1 per top-level call); without it 27x', async () => {
    const withMarker = await overload({ marker: true, retryAfter: true, budget: true }, 20);
    const without = await overload({ marker: false, retryAfter: false, budget: false }, 10);
    const budgetsOnly = await overload({ marker: false, retryAfter: false, budget: true }, 20);
    console.log(
      `[chain] attempts at the bottom per top-level call: with "don't retry" ${withMarker.perAction.toFixed(2)}x ` +
        `(histogram ${JSON.stringify(withMarker.attempts)}); without it and without budgets ${without.perAction.toFixed(2)}x ` +
        `(histogram ${JSON.stringify(without.attempts)}); without it, with relent's default budgets ${budgetsOnly.perAction.toFixed(2)}x`,
    );
    expect(withMarker.perAction).toBeLessThanOrEqual(1.2);
    expect(withMarker.perAction).toBe(1);
    expect(withMarker.topAttempts).toBe(1);
    expect(withMarker.attempts).toMatchObject({ 1: 20, 2: 0, 3: 0 });
    expect(without.perAction).toBe(27);
    expect(without.attempts).toMatchObject({ 1: 10 * 9, 2: 10 * 9, 3: 10 * 9 });
    expect(budgetsOnly.perAction).toBeGreaterThan(withMarker.perAction);
  }, 60_000);
});
