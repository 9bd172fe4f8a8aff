// A partner's adaptive concurrency limit (`concurrencyLimit`) in place of the fixed cap:
// validated with errors that name the field, the same limit implementation as the HTTP
// client's, every change in the exchange's statistics and events, and a partner whose
// capacity drops gets its calls in flight cut to the new capacity (real loopback servers).
import http from 'node:http';
import type net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { LimitSpec } from '../../src/core/concurrency.js';
import { resolveExchangeConfig } from '../../src/rtb/config.js';
import type { PartnerLimitChange } from '../../src/rtb/exchange.js';
import { mergeExchangeStats } from '../../src/rtb/stats-merge.js';
import { createExchange, exchangeHistograms, processPart } from '../../src/rtb/exchange.js';
import { partnerTable } from '../../src/cli/exchange.js';
import {
  answer,
  bidAfter,
  bidBody,
  bidRequest,
  exchangeConfig,
  hang,
  partnerConfig,
  post,
  sleep,
  startExchange,
  startPartner,
  type PartnerReply,
  type TestExchange,
  type TestPartner,
} from './helpers.js';

const open: { close(): Promise<void> }[] = [];
const track = <T extends { close(): Promise<void> }>(x: T): T => {
  open.push(x);
  return x;
};
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

/** Waits until the exchange's own count says so (checked every few ms; not a timing assertion). */
async function until(what: () => boolean, ms = 5000): Promise<void> {
  const t0 = performance.now();
  while (!what()) {
    if (performance.now() - t0 > ms) throw new Error('until: not reached');
    await sleep(5);
  }
}

async function partner(reply: PartnerReply): Promise<TestPartner> {
  return track(await startPartner(reply));
}

function configError(partnerOver: Record<string, unknown>): string {
  try {
    resolveExchangeConfig({
      auctionTimeoutMs: 100,
      reserveMs: 10,
      partners: [{ name: 'a', url: 'http://127.0.0.1:1/bid', timeoutMs: 50, maxConcurrency: 40, ...partnerOver }],
    });
  } catch (e) {
    return `${(e as { field?: string }).field} | ${(e as Error).message}`;
  }
  return 'no error';
}

describe('partners[].concurrencyLimit: the configuration', () => {
  it('defaults max to maxConcurrency (the ceiling) and initial to max; none means the fixed cap', () => {
    const base = { auctionTimeoutMs: 100, reserveMs: 10 };
    const c = resolveExchangeConfig({
      ...base,
      partners: [
        { name: 'a', url: 'http://127.0.0.1:1/bid', timeoutMs: 50, maxConcurrency: 40, concurrencyLimit: { kind: 'gradient' } },
        { name: 'b', url: 'http://127.0.0.1:1/bid', timeoutMs: 50, maxConcurrency: 40, concurrencyLimit: { kind: 'aimd', min: 2, max: 20, slowMs: 30 } },
        { name: 'c', url: 'http://127.0.0.1:1/bid', timeoutMs: 50, maxConcurrency: 40 },
      ],
    });
    expect(c.partners[0]!.concurrencyLimit).toMatchObject({ kind: 'gradient', max: 40, initial: 40, min: 1, tolerance: 1.25 });
    expect(c.partners[1]!.concurrencyLimit).toMatchObject({ kind: 'aimd', max: 20, initial: 20, min: 2, slowMs: 30, decrease: 0.5 });
    expect(c.partners[2]!.concurrencyLimit).toBeNull();
  });

  it('rejects what is wrong, naming the field', () => {
    expect(configError({ concurrencyLimit: 'gradient' })).toBe(
      'partners[0].concurrencyLimit | Expected `partners[0].concurrencyLimit` to be an object, got "gradient"',
    );
    expect(configError({ concurrencyLimit: { kind: 'vegas' } })).toMatch(
      /^partners\[0\]\.concurrencyLimit\.kind \| Expected `partners\[0\]\.concurrencyLimit\.kind` to be "aimd" or "gradient", got "vegas"/,
    );
    expect(configError({ concurrencyLimit: { kind: 'gradient', max: 80 } })).toMatch(
      /^partners\[0\]\.concurrencyLimit\.max \| .*at most the partner's maxConcurrency \(40\), the ceiling, got 80/,
    );
    expect(configError({ concurrencyLimit: { kind: 'gradient', maxQueue: 10 } })).toMatch(
      /^partners\[0\]\.concurrencyLimit\.maxQueue \| .*never waits for a partner/,
    );
    expect(configError({ concurrencyLimit: { kind: 'gradient', tolerance: 0.5 } })).toMatch(/^partners\[0\]\.concurrencyLimit\.tolerance \| /);
    expect(configError({ concurrencyLimit: { kind: 'aimd', tolerance: 2 } })).toMatch(/^partners\[0\]\.concurrencyLimit\.tolerance \| .*absent/);
    expect(configError({ concurrencyLimit: { kind: 'aimd', min: 50 } })).toMatch(/^partners\[0\]\.concurrencyLimit\.min \| .*\[1, 40\]/);
    expect(configError({ concurrencyLimit: { kind: 'aimd', initial: 0 } })).toMatch(/^partners\[0\]\.concurrencyLimit\.initial \| /);
    expect(configError({ concurrencyLimit: { kind: 'aimd', decrease: 1 } })).toMatch(/^partners\[0\]\.concurrencyLimit\.decrease \| /);
    // An error of the configuration, not of a policy.
    try {
      resolveExchangeConfig({
        auctionTimeoutMs: 100,
        reserveMs: 10,
        partners: [{ name: 'a', url: 'http://127.0.0.1:1/bid', timeoutMs: 50, maxConcurrency: 4, concurrencyLimit: { kind: 'x' } }],
      });
    } catch (e) {
      expect((e as { code: string }).code).toBe('ERR_INVALID_INPUT');
    }
  });

  it('rejects an onLimitChange that is not a function, naming it', () => {
    expect(() => createExchange(exchangeConfig([partnerConfig('a', 'http://127.0.0.1:1/bid')]), { onLimitChange: 5 as never })).toThrow(/`onLimitChange`/);
  });
});

describe('partners[].concurrencyLimit: in the auctions', () => {
  it('a partner at its adaptive limit (below maxConcurrency) is skipped at once, counted as concurrency_limited', async () => {
    // The busy partner's 1,200 ms is far above what a loaded machine adds to the free one's 5 ms.
    const p = await partner(bidAfter(1_200, 1));
    const free = await partner(bidAfter(5, 2));
    const ex = track(
      await startExchange(
        exchangeConfig(
          [
            partnerConfig('busy', p.url, { maxConcurrency: 10, concurrencyLimit: { kind: 'aimd', initial: 1 }, timeoutMs: 1_500 }),
            partnerConfig('free', free.url),
          ],
          { auctionTimeoutMs: 1_600 },
        ),
      ),
    );
    const [a, b] = await Promise.all([
      post(ex.url, bidRequest({ tmax: 2_000 })),
      (async () => {
        await sleep(100);
        return post(ex.url, bidRequest({ tmax: 2_000 }));
      })(),
    ]);
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect(p.seen).toHaveLength(1);
    const second = ex.summaries.find((s) => s.skipped.concurrency_limited === 1)!;
    expect(second).toBeDefined();
    expect(second.skipped.at_capacity).toBeUndefined();
    expect(second.results[0]!.outcome).toBe('skipped_concurrency_limited');
    expect(second.usedMs).toBeLessThan(600); // did not wait for the busy partner's 1,200 ms
    await until(() => ex.exchange.stats().partners[0]!.inFlight === 0);
    const st = ex.exchange.stats().partners[0]!;
    expect(st.skipped).toMatchObject({ concurrency_limited: 1, at_capacity: 0 });
    // The one answer, with the limit in use, grew it by one (aimd).
    expect(st.concurrencyLimit).toMatchObject({ kind: 'aimd', limit: 2, lowest: 1, changes: { increase: 1, decrease: 0 } });
    expect(partnerTable(ex.exchange.stats())).toMatch(/busy .* 0\/0\/1\/0 +2 \(1\) aimd/);
  });

  it('a throttling answer halves the limit once: in the statistics and in an onLimitChange event naming the partner', async () => {
    let throttle = false;
    const p = await partner((_req, res, _n, s) => (throttle ? answer(res, 429) : answer(res, 200, bidBody(s, 1))));
    const changes: PartnerLimitChange[] = [];
    const ex = track(
      await startExchange(exchangeConfig([partnerConfig('dsp', p.url, { maxConcurrency: 16, concurrencyLimit: { kind: 'aimd' } })]), {
        onLimitChange: (c) => changes.push(c),
      }),
    );
    expect(ex.exchange.stats().partners[0]!.concurrencyLimit).toMatchObject({ limit: 16, lowest: 16, changes: { decrease: 0 } });
    expect((await post(ex.url, bidRequest())).status).toBe(200);
    throttle = true;
    expect((await post(ex.url, bidRequest())).status).toBe(204);
    await until(() => ex.exchange.stats().partners[0]!.inFlight === 0);
    expect(changes).toHaveLength(1);
    expect(changes[0]).toMatchObject({ type: 'limit', partner: 'dsp', name: 'dsp', limit: 8, cause: 'decrease', inFlight: 0 });
    expect(typeof changes[0]!.ts).toBe('number');
    const st = ex.exchange.stats().partners[0]!;
    expect(st.concurrencyLimit).toMatchObject({ kind: 'aimd', limit: 8, lowest: 8, changes: { decrease: 1, increase: 0 } });
    expect(st.errorKinds).toEqual({ 'status:429': 1 });
  });

  it("a partner that did not answer in its own time counts (aimd slowMs); one cut short by the auction's deadline tells nothing", async () => {
    const p = await partner(hang);
    const changes: PartnerLimitChange[] = [];
    const ex = track(
      await startExchange(
        exchangeConfig([partnerConfig('slow', p.url, { maxConcurrency: 8, timeoutMs: 60, concurrencyLimit: { kind: 'aimd', slowMs: 40 } })], {
          auctionTimeoutMs: 250,
        }),
        { onLimitChange: (c) => changes.push(c) },
      ),
    );
    // tmax 60 − reserve 20: the auction gives the partner about 40 ms, less than its 60 ms.
    const short = await post(ex.url, bidRequest({ tmax: 60 }));
    expect(short.status).toBe(204);
    await until(() => ex.exchange.stats().partners[0]!.inFlight === 0);
    expect(changes).toHaveLength(0);
    expect(ex.exchange.stats().partners[0]!.concurrencyLimit!.limit).toBe(8);
    // A whole timeoutMs without an answer: a sample of 60 ms, over slowMs.
    const full = await post(ex.url, bidRequest({ tmax: 300 }));
    expect(full.status).toBe(204);
    await until(() => ex.exchange.stats().partners[0]!.inFlight === 0);
    expect(changes.map((c) => [c.cause, c.limit])).toEqual([['decrease', 4]]);
  });

  it("the processes' parts of maxConcurrency add up to it: 5 over 2 processes is 3 + 2, not 3 + 3", async () => {
    expect([0, 1].map((i) => processPart(5, 2, i))).toEqual([3, 2]);
    expect([0, 1, 2].map((i) => processPart(40, 3, i))).toEqual([14, 13, 13]);
    expect([0, 1, 2].map((i) => processPart(2, 3, i))).toEqual([1, 1, 1]); // never 0: a process with no part could never call
    const p = await partner(hang);
    const cfg = exchangeConfig([partnerConfig('dsp', p.url, { maxConcurrency: 5, timeoutMs: 100 })], { warmup: false });
    const a = track(await startExchange(cfg, { processes: 2, processIndex: 0 }));
    const b = track(await startExchange(cfg, { processes: 2, processIndex: 1 }));
    const answers = [a, b].flatMap((x) => Array.from({ length: 4 }, () => post(x.url, bidRequest({ tmax: 300 }))));
    // Every auction is in: 5 calls reached the partner, 3 were skipped.
    await until(() => a.exchange.stats().partners[0]!.skipped.at_capacity + b.exchange.stats().partners[0]!.skipped.at_capacity === 3 && p.seen.length >= 5);
    expect(p.seen).toHaveLength(5);
    expect([a, b].map((x) => x.exchange.stats().partners[0]!.skipped.at_capacity)).toEqual([1, 2]);
    await Promise.all(answers);
    expect(() => createExchange(cfg, { processes: 2, processIndex: 2 })).toThrow(/processIndex.*\[0, 1\].*got 2/);
  });

  it('each of N processes takes ⌈x / N⌉ of the limit; the merged statistics add them up', async () => {
    const p = await partner(bidAfter(1, 1));
    const cfg = exchangeConfig([partnerConfig('dsp', p.url, { maxConcurrency: 40, concurrencyLimit: { kind: 'gradient', min: 4 } })]);
    const a = track(await startExchange(cfg, { processes: 3 }));
    const b = track(await startExchange(cfg, { processes: 3 }));
    const l = a.exchange.stats().partners[0]!.concurrencyLimit!;
    expect(l).toMatchObject({ kind: 'gradient', limit: 14, lowest: 14, baselineMs: null });
    const merged = mergeExchangeStats([a, b].map((x) => ({ stats: x.exchange.stats(), hist: exchangeHistograms(x.exchange) })));
    expect(merged.partners[0]!.concurrencyLimit).toMatchObject({ kind: 'gradient', limit: 28, changes: { gradient: 0 } });
    expect(merged.partners[0]!.skipped.concurrency_limited).toBe(0);
  });
});

/**
 * A partner with `workers` that each take `serviceMs` per request, in arrival order; a
 * request whose connection the exchange closed (cut at its timeout) is dropped from the
 * queue. It counts the requests it holds (queued or in work): the exchange's calls in flight.
 */
async function capacityPartner(
  serviceMs: number,
  workers: number,
): Promise<{ url: string; holding: () => number; setWorkers: (n: number) => void; close(): Promise<void> }> {
  let capacity = workers;
  let busy = 0;
  let holding = 0;
  const queue: { res: http.ServerResponse; body: Record<string, unknown> | null }[] = [];
  const serve = (): void => {
    while (busy < capacity && queue.length > 0) {
      const { res, body } = queue.shift()!;
      if (res.destroyed) continue;
      busy++;
      setTimeout(() => {
        busy--;
        if (!res.destroyed) answer(res, 200, bidBody({ at: 0, body, tmax: null, closedAt: null }, 1));
        serve();
      }, serviceMs);
    }
  };
  const sockets = new Set<net.Socket>();
  const server = http.createServer((req, res) => {
    holding++;
    res.on('close', () => holding--);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      queue.push({ res, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown> });
      serve();
    });
  });
  server.keepAliveTimeout = 10_000;
  server.on('connection', (s: net.Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/bid`,
    holding: () => holding,
    setWorkers: (n) => {
      capacity = n;
      serve();
    },
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

/**
 * `clients` sources each sending an auction, waiting for its answer, pausing `pauseMs`
 * (pacing, so that skipped auctions do not spin the machine), for `ms`; the partner's
 * requests held are sampled every 10 ms. Returns the samples [time, held].
 */
async function drive(ex: TestExchange, p: { holding: () => number }, clients: number, pauseMs: number, ms: number): Promise<[number, number][]> {
  const t0 = performance.now();
  const samples: [number, number][] = [];
  const sampler = setInterval(() => samples.push([performance.now() - t0, p.holding()]), 10);
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() - t0 < ms) {
        await post(ex.url, bidRequest({ tmax: 300 }));
        await sleep(pauseMs);
      }
    }),
  );
  clearInterval(sampler);
  return samples;
}

describe('a partner whose capacity drops 5x (real loopback servers)', () => {
  // 20 workers of 20 ms, then 4; 20 sources. Without a limit the exchange keeps about 20
  // calls at the partner (each cut at its 100 ms timeout); the gradient limit brings them
  // to the new capacity. (Bounds are loose for a loaded 2-core machine; the separation
  // between the two is the point: about 15 against at most 3x the new capacity.)
  const scenario = async (concurrencyLimit: LimitSpec | null) => {
    const p = track(await capacityPartner(20, 20));
    const changes: PartnerLimitChange[] = [];
    const ex = track(
      await startExchange(
        exchangeConfig([partnerConfig('dsp', p.url, { maxConcurrency: 20, timeoutMs: 100, ...(concurrencyLimit ? { concurrencyLimit } : {}) })], {
          auctionTimeoutMs: 200,
        }),
        { onLimitChange: (c) => changes.push(c) },
      ),
    );
    await drive(ex, p, 20, 25, 800);
    p.setWorkers(4);
    const samples = await drive(ex, p, 20, 25, 2500);
    // From 1.5 s after the drop to its end.
    const late = samples
      .filter(([t]) => t >= 1500)
      .map(([, n]) => n)
      .sort((a, b) => a - b);
    return { p50: late[Math.floor(late.length / 2)]!, p90: late[Math.floor(late.length * 0.9)]!, changes, stats: ex.exchange.stats().partners[0]! };
  };

  it('gradient: the calls in flight fall to the new capacity, the partner is skipped (concurrency_limited) instead of queued, every change is visible', async () => {
    const fixed = await scenario(null);
    const adaptive = await scenario({ kind: 'gradient', windowMs: 50, minWindowSamples: 5, probeIntervalMs: 0 });
    if (process.env.LIMIT_DEBUG)
      console.log(
        JSON.stringify({
          fixed: [fixed.p50, fixed.p90],
          adaptive: [adaptive.p50, adaptive.p90],
          lim: adaptive.stats.concurrencyLimit,
          skipped: adaptive.stats.skipped,
          changes: adaptive.changes.length,
        }),
      );
    // The fixed cap keeps the partner's queue full.
    expect(fixed.p50).toBeGreaterThanOrEqual(10);
    // The adaptive limit: the partner holds about its 4 workers' worth.
    expect(adaptive.p50).toBeLessThanOrEqual(8);
    expect(adaptive.p90).toBeLessThanOrEqual(12);
    expect(adaptive.p50).toBeLessThan(fixed.p50);
    const s = adaptive.stats;
    expect(s.skipped.concurrency_limited).toBeGreaterThan(0);
    expect(s.concurrencyLimit!.lowest).toBeLessThanOrEqual(8);
    expect(s.concurrencyLimit!.changes.gradient + s.concurrencyLimit!.changes.decrease).toBeGreaterThan(0);
    expect(adaptive.changes.length).toBeGreaterThan(0);
    expect(adaptive.changes.every((c) => c.partner === 'dsp' && c.limit >= 1 && c.limit <= 20)).toBe(true);
    expect(Math.min(...adaptive.changes.map((c) => c.limit))).toBe(s.concurrencyLimit!.lowest);
    // The fixed cap never skips for a limit.
    expect(fixed.stats.skipped.concurrency_limited).toBe(0);
    expect(fixed.stats.concurrencyLimit).toBeNull();
    expect(fixed.changes).toHaveLength(0);
  }, 30_000);
});
