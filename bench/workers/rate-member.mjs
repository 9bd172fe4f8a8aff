// One process of bench/rate.mjs: a createClient({ rateLimit, fleet }) whose `workers`
// callers call the dependency as fast as the shared rate limit lets them, for durationMs
// after "go" on stdin. Settings: JSON in argv[2]. stdout: {"ready":…}, then a summary.
import { createInterface } from 'node:readline';
import { createClient } from '../../dist/http/index.js';
import { createRedisFleet } from '../../dist/fleet/index.js';

const cfg = JSON.parse(process.argv[2]);
const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const fleet = createRedisFleet({ url: cfg.redisUrl, prefix: cfg.prefix, timeoutMs: 1000 });
const client = createClient({ fleet, rateLimit: cfg.rateLimit, policy: { maxAttempts: 1 }, key: () => 'quota' });
const go = new Promise((resolve) => createInterface({ input: process.stdin }).on('line', (l) => l.trim() === 'go' && resolve()));
say({ ready: true, joined: await fleet.ready(20_000) });
await go;
const started = Date.now();
let calls = 0;
let refused = 0;
let trips0 = null;
let calls0 = 0;
const steadyAt = started + cfg.steadyAfterMs;
const worker = async () => {
  while (Date.now() - started < cfg.durationMs) {
    if (trips0 === null && Date.now() >= steadyAt) {
      trips0 = fleet.stats().roundTrips;
      calls0 = calls;
    }
    try {
      const r = await client.fetch(cfg.url);
      await r.arrayBuffer();
      calls++;
    } catch {
      refused++;
      await new Promise((r) => setTimeout(r, 20));
    }
  }
};
const dbg = process.env.RATE_DEBUG
  ? setInterval(() => process.stderr.write(`${process.pid} t=${Date.now() - started} calls=${calls} ${JSON.stringify(fleet.stats().rateLimits)}\n`), 250)
  : null;
await Promise.all(Array.from({ length: cfg.workers }, worker));
if (dbg) clearInterval(dbg);
const stats = fleet.stats();
say({ calls, refused, steadyCalls: calls - calls0, steadyTrips: stats.roundTrips - (trips0 ?? 0), fallbacks: stats.fallbacks });
await client.close();
await fleet.close();
process.exit(0);
