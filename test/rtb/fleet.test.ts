// The partners' breakers and retry budgets shared through the fleet (Redis): a breaker
// opened by one exchange process is open in the others, which then send the failing
// partner nothing. Real Redis (127.0.0.1:6379, a unique key prefix per run); skipped
// outside CI when it does not answer.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createRedisFleet, type RedisFleet } from '../../src/fleet/index.js';
import { REDIS_URL, dropPrefix, redisEnabled, uniquePrefix } from '../fleet/support.js';
import { answer, bidRequest, exchangeConfig, partnerConfig, post, sleep, startExchange, startPartner } from './helpers.js';

const enabled = await redisEnabled();
const prefixes: string[] = [];
afterAll(async () => {
  if (enabled) for (const p of prefixes) await dropPrefix(p);
});
const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

function fleet(prefix: string): RedisFleet {
  const f = createRedisFleet({ url: REDIS_URL, prefix, syncMs: 50, syncEvery: 1 });
  open.push(f);
  return f;
}

describe.runIf(enabled)('exchange partners shared through the fleet', () => {
  it.each([[true], [false]])(
    'a breaker opened by one process is open in another (shared: %s)',
    async (shared) => {
      const p = await startPartner((_req, res) => answer(res, 500));
      open.push(p);
      const prefix = uniquePrefix('rtb');
      prefixes.push(prefix);
      const cfg = exchangeConfig([partnerConfig('dsp', p.url, { breaker: { minimumThroughput: 10, failureRatio: 0.5, openMs: 10_000, windowMs: 10_000 } })], {
        warmup: false,
      });
      const fa = fleet(prefix);
      const fb = fleet(prefix);
      expect(await fa.ready()).toBe(true);
      expect(await fb.ready()).toBe(true);
      const a = await startExchange(cfg, shared ? { fleet: fa } : {});
      const b = await startExchange(cfg, shared ? { fleet: fb } : {});
      open.push(a, b);
      // Process A meets the failing partner until its breaker opens.
      for (let i = 0; i < 12; i++) await post(a.url, bidRequest());
      expect(a.exchange.stats().partners[0]!.breaker).toBe('open');
      const seen = p.seen.length;
      // Process B has not called the partner at all; the fleet tells it the breaker is open.
      for (let i = 0; i < 100 && shared && b.exchange.stats().partners[0]!.breaker !== 'open'; i++) await sleep(20);
      for (let i = 0; i < 5; i++) await post(b.url, bidRequest());
      const bp = b.exchange.stats().partners[0]!;
      if (shared) {
        expect(bp.breaker).toBe('open');
        expect(bp.skipped.circuit_open).toBe(5);
        expect(p.seen.length).toBe(seen);
      } else {
        // Without the fleet each process learns on its own: B sends its 5 calls.
        expect(bp.calls).toBe(5);
        expect(p.seen.length).toBe(seen + 5);
      }
    },
    30_000,
  );

  it("a partner's retry budget and breaker are the fleet's", async () => {
    const p = await startPartner((_req, res) => answer(res, 204));
    open.push(p);
    const prefix = uniquePrefix('rtbb');
    prefixes.push(prefix);
    const f = fleet(prefix);
    await f.ready();
    const ex = await startExchange(
      exchangeConfig([partnerConfig('dsp', p.url, { preSendRetries: 1, retryBudget: { kind: 'ratio', ratio: 0.1, maxTokens: 10 }, breaker: {} })], {
        warmup: false,
      }),
      { fleet: f },
    );
    open.push(ex);
    expect((await post(ex.url, bidRequest())).status).toBe(204);
    expect(Object.keys(f.stats().budgets)).toEqual(['rtb:dsp']);
    expect(Object.keys(f.stats().breakers)).toEqual(['rtb:dsp']);
  });
});

describe.runIf(enabled)('relent exchange --workers 2 with a fleet', () => {
  it("the two workers share each partner's breaker: it opens after the volume of one, not of two", { timeout: 60_000 }, async () => {
    const { spawn } = await import('node:child_process');
    const { mkdtempSync, rmSync, writeFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { fileURLToPath } = await import('node:url');
    const BIN = fileURLToPath(new URL('../../bin/relent', import.meta.url));
    const dir = mkdtempSync(join(tmpdir(), 'relent-rtb-fleet-'));
    const p = await startPartner((_req, res) => answer(res, 500));
    open.push(p);
    const prefix = uniquePrefix('rtbw');
    prefixes.push(prefix);
    const config = join(dir, 'exchange.json');
    writeFileSync(
      config,
      JSON.stringify({
        auctionTimeoutMs: 250,
        reserveMs: 20,
        warmup: { auctions: 4 },
        notices: { store: 'memory' },
        fleet: { url: REDIS_URL, prefix, syncMs: 50, syncEvery: 1 },
        partners: [
          {
            name: 'dsp',
            url: p.url,
            timeoutMs: 200,
            maxConcurrency: 10,
            breaker: { minimumThroughput: 10, failureRatio: 0.5, openMs: 30_000, windowMs: 30_000 },
          },
        ],
      }),
    );
    const child = spawn(process.execPath, [BIN, 'exchange', '--config', config, '--port', '0', '--workers', '2', '--quiet'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    child.stdout!.on('data', (d: Buffer) => {
      log += d.toString();
    });
    child.stderr!.on('data', (d: Buffer) => {
      log += d.toString();
    });
    try {
      for (let i = 0; i < 500 && !/ready on (\S+)/.test(log); i++) await sleep(20);
      const url = /ready on (\S+)/.exec(log)![1]!;
      expect(log).toMatch(/breakers and budgets shared through redis:\/\/127\.0\.0\.1:6379 \(shared\)/);
      // New connections each time: the primary hands them to both workers in turn.
      for (let i = 0; i < 40; i++) {
        const r = await fetch(url, {
          method: 'POST',
          headers: { connection: 'close', 'content-type': 'application/json' },
          body: JSON.stringify(bidRequest()),
        });
        await r.arrayBuffer();
        await sleep(15);
      }
      // Per-process breakers would each need 10 failures (20 calls at least); one shared breaker opens after about 10.
      expect(p.seen.length).toBeGreaterThanOrEqual(10);
      expect(p.seen.length).toBeLessThan(20);
      child.kill('SIGTERM');
      await new Promise<void>((resolve) => child.once('exit', () => resolve()));
      expect(log).toMatch(/^dsp\s+\d+.*\bopen$/m);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
