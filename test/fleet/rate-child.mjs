// One process of the shared rate limit test (test/fleet/rate.test.ts): `workers` callers
// that each take a token of the fleet's rate limit (relent/fleet's rateLimit through the
// executor's rate limiter) and count it as a call, as fast as the limit lets them.
// Settings: JSON in argv[2]. stdout: {"ready":…} once joined, then a summary.
// stdin: "go" starts the callers; they stop after durationMs.
import { createInterface } from 'node:readline';
import { createRedisFleet } from '../../dist/fleet/index.js';
import { createRateLimiter } from '../../dist/index.js';

const cfg = JSON.parse(process.argv[2]);
const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const fleet = createRedisFleet({ url: cfg.redisUrl, prefix: cfg.prefix, timeoutMs: cfg.timeoutMs, syncMs: cfg.syncMs });
const limiter = createRateLimiter(fleet.rateLimit('quota', cfg.rateLimit));
const clock = { now: () => performance.now() };
const commands = createInterface({ input: process.stdin });
const go = new Promise((resolve) => commands.on('line', (l) => l.trim() === 'go' && resolve()));
const joined = await fleet.ready(20_000);
say({ ready: true, joined });
await go;
const started = Date.now();
const calls = []; // wall time of every call
const trips = []; // [wall time, round trips so far], every 250 ms
let refused = 0;
const sample = setInterval(() => trips.push([Date.now(), fleet.stats().roundTrips]), 250);
trips.push([started, fleet.stats().roundTrips]);
const worker = async () => {
  while (Date.now() - started < cfg.durationMs) {
    const now = clock.now();
    if (!limiter.tryAcquire(now)) {
      try {
        await limiter.acquire(now, cfg.durationMs);
      } catch {
        // Refused (no token within maxWaitMs): a caller that was turned away comes back later.
        refused++;
        await new Promise((r) => setTimeout(r, 20));
        continue;
      }
    }
    calls.push(Date.now());
    // A call's own time: the callers are not a busy loop.
    await new Promise((r) => setImmediate(r));
  }
};
await Promise.all(Array.from({ length: cfg.workers }, worker));
clearInterval(sample);
trips.push([Date.now(), fleet.stats().roundTrips]);
const stats = fleet.stats();
await fleet.close();
say({ calls, trips, refused, share: stats.rateLimits.quota?.share ?? null, members: stats.rateLimits.quota?.members ?? null, fallbacks: stats.fallbacks });
process.exit(0);
