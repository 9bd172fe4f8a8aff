// A rate limit shared by the fleet (relent/fleet rateLimit), on the shared Redis with a
// unique prefix: in one process (two fleets, as two members) and across ten processes
// (rate-child.mjs on dist/), scaled down from 30 s to a few seconds; `npm run bench -- rate`
// has the full-size figure with real HTTP calls.
import { afterAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createRedisFleet, type RedisFleet } from '../../src/fleet/index.js';
import { createRateLimiter } from '../../src/run/rate-limiter.js';
import { dropPrefix, REDIS_URL, redisEnabled, uniquePrefix } from './support.js';

const enabled = await redisEnabled();
const CHILD = fileURLToPath(new URL('./rate-child.mjs', import.meta.url));
const DIST = fileURLToPath(new URL('../../dist/fleet/rate.js', import.meta.url));
const prefixes: string[] = [];
afterAll(async () => {
  for (const p of prefixes) await dropPrefix(p);
});

const realClock = {
  now: () => performance.now(),
  wallNow: () => Date.now(),
  setTimer: (fn: () => void, ms: number) => {
    const t = setTimeout(fn, Math.max(0, Math.min(ms, 2 ** 31 - 1)));
    return () => clearTimeout(t);
  },
};

/** Callers that take tokens as fast as the limit lets them, for `ms`; returns the wall times of their calls. */
async function saturate(fleet: RedisFleet, name: string, spec: { ratePerSecond: number; burst?: number }, ms: number, workers = 8): Promise<number[]> {
  const limiter = createRateLimiter(fleet.rateLimit(name, spec), realClock);
  const calls: number[] = [];
  const start = Date.now();
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (Date.now() - start < ms) {
        const now = realClock.now();
        if (!limiter.tryAcquire(now)) {
          try {
            await limiter.acquire(now, ms);
          } catch {
            // Refused (no token within maxWaitMs): a caller that was turned away comes back later.
            await new Promise((r) => setTimeout(r, 20));
            continue;
          }
        }
        calls.push(Date.now());
        await new Promise((r) => setImmediate(r));
      }
    }),
  );
  return calls;
}

describe.skipIf(!enabled)('a rate limit shared through Redis', () => {
  it('two members share the rate: together they stay at it, each gets about half, a throttling answer seen by one pauses both', async () => {
    const prefix = uniquePrefix('rate2');
    prefixes.push(prefix);
    const a = createRedisFleet({ url: REDIS_URL, prefix, syncMs: 200, timeoutMs: 1000 });
    const b = createRedisFleet({ url: REDIS_URL, prefix, syncMs: 200, timeoutMs: 1000 });
    try {
      expect(await a.ready(10_000)).toBe(true);
      expect(await b.ready(10_000)).toBe(true);
      const spec = { ratePerSecond: 400, burst: 20 };
      const ms = 3000;
      const [ca, cb] = await Promise.all([saturate(a, 'dep', spec, ms), saturate(b, 'dep', spec, ms)]);
      const total = ca.length + cb.length;
      process.stdout.write(
        `\n[rate] 2 members, 400/s for ${ms / 1000} s: ${ca.length} + ${cb.length} = ${total} calls (${(total / (ms / 1000)).toFixed(0)}/s); shares ${a.stats().rateLimits.dep?.share?.toFixed(1)} / ${b.stats().rateLimits.dep?.share?.toFixed(1)}\n`,
      );
      // One second's worth of slack: the first sync, the members' bursts, and the scheduler of a busy machine.
      expect(total).toBeLessThanOrEqual(spec.ratePerSecond * (ms / 1000) + spec.ratePerSecond * 0.3);
      expect(total).toBeGreaterThanOrEqual(spec.ratePerSecond * (ms / 1000) * 0.8);
      expect(Math.min(ca.length, cb.length) / Math.max(ca.length, cb.length)).toBeGreaterThan(0.6);
      expect(a.stats().rateLimits.dep?.members).toBe(2);

      // A 429 with Retry-After: 1 s seen by a: b stops too, within a sync.
      const ra = a.rateLimit('dep', spec);
      const rb = b.rateLimit('dep', spec);
      const t0 = realClock.now();
      ra.throttled(t0, 1000);
      await new Promise((r) => setTimeout(r, 500));
      const now = realClock.now();
      expect(rb.readyAt(now)).toBeGreaterThan(now + 200);
      expect(rb.tryTake(now)).toBe(false);
      expect(a.stats().rateLimits.dep?.factor).toBeLessThan(1);
    } finally {
      await a.close();
      await b.close();
    }
  }, 60_000);

  it('ten processes: R/s ± 5 % in total, at most one Redis round trip per 100 calls at steady state', async () => {
    if (!existsSync(DIST)) throw new Error('dist/ is missing: run `npm run build` first (CI builds before testing)');
    const P = 10;
    const R = 2000;
    const durationMs = 8000;
    const prefix = uniquePrefix('rate10');
    prefixes.push(prefix);
    const cfg = { redisUrl: REDIS_URL, prefix, timeoutMs: 1000, syncMs: 1000, workers: 16, durationMs, rateLimit: { ratePerSecond: R, burst: R / 10 } };
    const children = Array.from({ length: P }, () => spawn(process.execPath, [CHILD, JSON.stringify(cfg)], { stdio: ['pipe', 'pipe', 'pipe'] }));
    type Out = {
      ready?: boolean;
      joined?: boolean;
      calls: number[];
      trips: [number, number][];
      refused: number;
      share: number | null;
      members: number | null;
      fallbacks: number;
    };
    const ready: Promise<Out>[] = [];
    const done: Promise<Out>[] = [];
    for (const c of children) {
      let buf = '';
      let err = '';
      let onReady!: (o: Out) => void;
      ready.push(new Promise((r) => (onReady = r)));
      done.push(
        new Promise((resolve, reject) => {
          c.stdout!.on('data', (d) => {
            buf += d;
            const lines = buf.split('\n');
            buf = lines.pop()!;
            for (const l of lines) {
              const m = JSON.parse(l) as Out;
              if (m.ready) onReady(m);
              else resolve(m);
            }
          });
          c.stderr!.on('data', (d) => (err += d));
          c.on('exit', (code) => {
            if (code !== 0) reject(new Error(`child exited with ${code}: ${err.slice(0, 2000)}`));
          });
        }),
      );
    }
    const joined = await Promise.all(ready);
    expect(joined.every((j) => j.joined)).toBe(true);
    const start = Date.now();
    for (const c of children) c.stdin!.write('go\n');
    const outs = await Promise.all(done);
    const calls = outs.flatMap((o) => o.calls);
    const inWindow = calls.filter((t) => t >= start && t < start + durationMs).length;
    const rate = inWindow / (durationMs / 1000);
    // Steady state: from 2 s on (a member holds its grant until its next sync, so the first
    // second after the start is the fairness transient), round trips against calls, per process.
    const steady = outs.map((o) => {
      const from = start + 2000;
      const to = Math.min(start + durationMs, o.trips.at(-1)![0]);
      const at = (t: number): number => o.trips.filter(([w]) => w <= t).at(-1)?.[1] ?? 0;
      const n = o.calls.filter((t) => t >= from && t < to).length;
      return { calls: n, trips: at(to) - at(from) };
    });
    const perTrip = steady.map((s) => s.calls / Math.max(1, s.trips));
    process.stdout.write(
      `\n[rate] ${P} processes sharing ${R}/s for ${durationMs / 1000} s: ${inWindow} calls = ${rate.toFixed(0)}/s (${((rate / R - 1) * 100).toFixed(1)} %); ` +
        `per process ${outs.map((o) => o.calls.length).join(', ')}; calls per round trip at steady state ${perTrip.map((x) => x.toFixed(0)).join(', ')}; fallbacks ${outs.map((o) => o.fallbacks).join(', ')}\n`,
    );
    expect(rate).toBeGreaterThanOrEqual(R * 0.95);
    expect(rate).toBeLessThanOrEqual(R * 1.05);
    for (const x of perTrip) expect(x).toBeGreaterThanOrEqual(100);
  }, 120_000);
});
