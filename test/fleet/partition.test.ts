// A faithful partition: a redis-server in a network namespace of the test's own, cut off
// with iptables DROP both ways (inside that namespace only), so that the fleet's TCP
// connections stall as they do in production (no RST, TCP's own retransmission backoff).
// Needs root, `ip` and `iptables`; skipped with a message otherwise (the figures are in
// `npm run bench -- fleet-faults`).
import { describe, expect, it } from 'vitest';
import { createRedisFleet, type FleetEvent } from '../../src/fleet/index.js';
import { namespacedRedis, namespacesUnavailable, ownRedisEnabled, sleep, until } from './support.js';

const why = await namespacesUnavailable();
const enabled = why === null && (await ownRedisEnabled());
if (why !== null) process.stderr.write(`\n[relent fleet tests] no network namespaces (${why}): skipping the partition test\n`);
const RETRY = { throttled: false, timeout: false };

describe.skipIf(!enabled)('a partition from Redis (network namespace + iptables DROP)', () => {
  it('falls back while cut off (calls never wait), and after the heal joins again on a new connection, not the stalled one', async () => {
    const redis = await namespacedRedis();
    const events: FleetEvent[] = [];
    const f = createRedisFleet({ url: redis.url, prefix: 'part:', syncMs: 200, onEvent: (e) => events.push(e) });
    try {
      expect(await f.ready(5000)).toBe(true);
      const budget = f.budget('dep', { kind: 'ratio', minPerSecond: 0, maxTokens: 10 });
      const breaker = f.breaker('dep', { minimumThroughput: 1000 });
      await sleep(300);
      const before = await redis.connectionsReceived();
      await redis.partition();
      let slowest = 0;
      let calls = 0;
      const callFor = async (ms: number): Promise<void> => {
        const end = Date.now() + ms;
        while (Date.now() < end) {
          const t0 = performance.now();
          budget.tryAcquire(RETRY, t0);
          breaker.tryPass(Date.now());
          breaker.record('success', Date.now());
          slowest = Math.max(slowest, performance.now() - t0);
          calls++;
          await sleep(5);
        }
      };
      await callFor(500);
      await until(() => f.mode === 'local', 5000, 'the fallback');
      expect(f.stats().budgets.dep).toMatchObject({ mode: 'local', processes: 1 });
      await callFor(2500);
      await redis.heal();
      await until(() => f.mode === 'fleet' && f.stats().subscribed, 10_000, 'the rejoin after the heal');
      // The stalled connections were replaced: Redis saw new ones (the command and the pub/sub connection).
      expect(await redis.connectionsReceived()).toBeGreaterThanOrEqual(before + 2);
      expect(slowest).toBeLessThan(50);
      expect(calls).toBeGreaterThan(100);
      const modes = events.filter((e) => e.type === 'fleet_mode').map((e) => (e as { mode: string }).mode);
      expect(modes).toEqual(['fleet', 'local', 'fleet']);
    } finally {
      await f.close();
      await redis.stop();
    }
  }, 60_000);
});
