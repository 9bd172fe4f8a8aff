// A rate limit shared by ten processes through Redis (relent/fleet): each a
// createClient({ rateLimit, fleet }) calling one loopback node:http dependency as fast as
// the limit lets it, for 30 s (--quick: 8 s). The dependency counts what it receives:
// the total rate against the limit, and Redis round trips per 100 calls at steady state.
// (No Node peer shares a limit without a Redis round trip per call: Bottleneck's
// clustering makes one per job, by design; it is not installed here.)
// Needs Redis at RELENT_BENCH_REDIS (default redis://127.0.0.1:6379); skipped without it.
import { spawn } from 'node:child_process';
import http from 'node:http';
import { loadavg } from 'node:os';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { connectRedis } from './harness.mjs';

const REDIS_URL = process.env.RELENT_BENCH_REDIS ?? 'redis://127.0.0.1:6379';
const MEMBER = fileURLToPath(new URL('./workers/rate-member.mjs', import.meta.url));

export async function main({ quick = false } = {}) {
  const redis = await connectRedis(REDIS_URL);
  if (redis === null) {
    console.log(`rate: Redis at ${REDIS_URL} is unreachable: skipped`);
    return;
  }
  const P = 10;
  const R = Number(process.env.RATE_R ?? 2000);
  const durationMs = quick ? 8000 : 30_000;
  const prefix = `relent-bench:rate:${randomBytes(4).toString('hex')}:`;
  const arrivals = [];
  const server = http.createServer((req, res) => {
    arrivals.push(performance.now());
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 }).end('ok');
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${server.address().port}/quota`;
  const cfg = { redisUrl: REDIS_URL, prefix, url, workers: 16, durationMs, steadyAfterMs: 2000, rateLimit: { ratePerSecond: R, burst: R / 10 } };
  const children = Array.from({ length: P }, () => spawn(process.execPath, [MEMBER, JSON.stringify(cfg)], { stdio: ['pipe', 'pipe', 'inherit'] }));
  const lines = children.map((c) => {
    let buf = '';
    const msgs = [];
    const waiters = [];
    c.stdout.on('data', (d) => {
      buf += d;
      const ls = buf.split('\n');
      buf = ls.pop();
      for (const l of ls) {
        msgs.push(JSON.parse(l));
        waiters.splice(0).forEach((w) => w());
      }
    });
    return async (n) => {
      while (msgs.length < n) await new Promise((r) => waiters.push(r));
      return msgs[n - 1];
    };
  });
  const ready = await Promise.all(lines.map((l) => l(1)));
  const t0 = performance.now();
  for (const c of children) c.stdin.write('go\n');
  const outs = await Promise.all(lines.map((l) => l(2)));
  server.closeAllConnections();
  server.close();
  const inWindow = arrivals.filter((t) => t >= t0 && t < t0 + durationMs).length;
  if (process.env.RATE_DEBUG)
    console.log(Array.from({ length: durationMs / 1000 }, (_, s) => arrivals.filter((t) => t >= t0 + s * 1000 && t < t0 + (s + 1) * 1000).length).join(' '));
  const rate = inWindow / (durationMs / 1000);
  const steadyCalls = outs.reduce((a, o) => a + o.steadyCalls, 0);
  const steadyTrips = outs.reduce((a, o) => a + o.steadyTrips, 0);
  console.log(
    `rate: ${P} processes sharing ${R}/s (burst ${R / 10}) through Redis for ${durationMs / 1000} s, loopback node:http; joined ${ready.filter((r) => r.joined).length}/${P}; load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}`,
  );
  console.log(`  received by the dependency: ${inWindow} = ${rate.toFixed(0)}/s (${((rate / R - 1) * 100).toFixed(1)} % of the limit)`);
  console.log(`  per process: ${outs.map((o) => o.calls).join(', ')} (refused callers came back after 20 ms: ${outs.reduce((a, o) => a + o.refused, 0)})`);
  console.log(
    `  Redis round trips at steady state (from 2 s): ${steadyTrips} for ${steadyCalls} calls = ${((steadyTrips / Math.max(1, steadyCalls)) * 100).toFixed(2)} per 100 calls; fallbacks ${outs.reduce((a, o) => a + o.fallbacks, 0)}`,
  );
  const keys = await redis.keys(`${prefix}*`);
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main({ quick: process.argv.includes('--quick') });
