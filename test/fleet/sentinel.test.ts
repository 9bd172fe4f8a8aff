// createRedisFleet({ sentinels, name }) on a master, a replica and a Sentinel of the test's own.
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { createRedisFleet, type FleetEvent } from '../../src/fleet/index.js';
import { ownRedisEnabled, ownSentinel, sleep, until } from './support.js';

const enabled = await ownRedisEnabled();
const RETRY = { throttled: false, timeout: false };

describe.skipIf(!enabled)('Sentinel (own master, replica and Sentinel)', () => {
  it('sentinels + name: joins the master the Sentinel names; after the master is killed, the promoted replica', async () => {
    const s = await ownSentinel();
    const events: FleetEvent[] = [];
    const sentinelFleet = createRedisFleet({
      sentinels: [`127.0.0.1:${s.sentinelPort}`],
      name: s.name,
      prefix: 'sen:',
      timeoutMs: 250,
      syncMs: 50,
      onEvent: (e) => events.push(e),
    });
    const direct = createRedisFleet({ url: s.master.url, prefix: 'sen:', timeoutMs: 250, syncMs: 50 });
    const viaClient = createRedisFleet({
      client: new Redis({ sentinels: [{ host: '127.0.0.1', port: s.sentinelPort }], name: s.name, lazyConnect: true }),
      prefix: 'sen:',
      syncMs: 50,
    });
    try {
      expect(await sentinelFleet.ready(15_000)).toBe(true);
      expect(await direct.ready(15_000)).toBe(true);
      expect(await viaClient.ready(15_000)).toBe(true);
      expect(sentinelFleet.stats().store).toBe(`sentinel master "${s.name}" via 127.0.0.1:${s.sentinelPort}`);
      // The same Redis: one budget between them.
      const spec = { kind: 'ratio' as const, minPerSecond: 0, maxTokens: 6 };
      const budgets = [sentinelFleet.budget('dep', spec), direct.budget('dep', spec), viaClient.budget('dep', spec)];
      let got = 0;
      // Until the bucket is spent (at most 10 s on a loaded machine), then 400 ms for any more.
      const spent = Date.now() + 10_000;
      while (got < 6 && Date.now() < spent) {
        for (const b of budgets) while (b.tryAcquire(RETRY, performance.now()) !== false) got++;
        await sleep(5);
      }
      const end = Date.now() + 400;
      while (Date.now() < end) {
        for (const b of budgets) while (b.tryAcquire(RETRY, performance.now()) !== false) got++;
        await sleep(5);
      }
      expect(got).toBeGreaterThanOrEqual(6);
      expect(got).toBeLessThanOrEqual(6 + 3);
      await direct.close();
      // The master dies; the Sentinel promotes the replica; the fleet follows it.
      const killedAt = Date.now();
      await s.master.stop();
      await until(() => sentinelFleet.mode === 'local', 15_000, 'the fallback');
      await until(() => sentinelFleet.mode === 'fleet', 30_000, 'the rejoin on the promoted replica');
      expect(await s.masterPort()).toBe(s.replica.port);
      process.stdout.write(`\n[fleet] Sentinel: master killed, the fleet joined the promoted replica ${Date.now() - killedAt} ms later\n`);
      expect(events.filter((e) => e.type === 'fleet_mode').map((e) => (e as { mode: string }).mode)).toEqual(['fleet', 'local', 'fleet']);
      const b = sentinelFleet.budget('after', spec);
      await until(() => sentinelFleet.stats().budgets.after?.pending === 0, 10_000, "the new budget's first visit");
      expect(b.tryAcquire(RETRY, performance.now())).toBe(1);
    } finally {
      await Promise.all([sentinelFleet.close(), direct.close(), viaClient.close()]);
      await s.stop();
    }
  }, 60_000);
});
