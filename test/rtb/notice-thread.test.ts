// The notice hub in a worker thread (the compiled build, as `relent exchange` runs it): a
// thread that dies is replaced, the notices handed over meanwhile wait and are delivered,
// and the counters of both threads add up.
import http from 'node:http';
import type net from 'node:net';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveExchangeConfig } from '../../src/rtb/config.js';
import type { NoticeThread as NoticeThreadType } from '../../src/rtb/notice-thread.js';
import { exchangeConfig, partnerConfig, sleep } from './helpers.js';

const DIST = fileURLToPath(new URL('../../dist/rtb/notice-thread.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'relent-notice-thread-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function until(ok: () => boolean, ms = 5_000): Promise<void> {
  for (let i = 0; i < ms / 10 && !ok(); i++) await sleep(10);
}

describe('the notice thread', () => {
  it('a thread that dies is replaced: notices handed over meanwhile wait and are delivered; counters add up', async () => {
    if (!existsSync(DIST)) throw new Error('dist/ is missing: run `npm run build` first (CI builds before testing)');
    const { NoticeThread } = (await import(DIST)) as { NoticeThread: typeof NoticeThreadType };
    const seen: string[] = [];
    const server = http.createServer((req, res) => {
      seen.push(req.url!);
      res.writeHead(204).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
    const cfg = resolveExchangeConfig(
      exchangeConfig([partnerConfig('dsp', `${base}/bid`)], {
        notices: { store: `sqlite:${join(dir, 'n.db')}`, worker: { pollMs: 50 } },
      }),
    );
    const logs: string[] = [];
    const t = new NoticeThread(cfg.notices, { partners: [{ name: 'dsp', url: new URL(`${base}/bid`) }], log: (l) => logs.push(l) });
    try {
      await t.open();
      const notice = (id: string) => ({ kind: 'billing' as const, partner: 'dsp', key: `billing:${id}:1`, url: `${base}/bill?id=${id}` });
      t.send(notice('a'));
      await until(() => seen.includes('/bill?id=a'));
      expect(seen).toEqual(['/bill?id=a']);
      // Its counters reach this side every 200 ms (those of a thread's last 200 ms die with it).
      await until(() => t.stats().billing.delivered === 1, 2_000);
      // The thread dies (as an uncaught error in it would end it).
      await (t as unknown as { worker: { terminate(): Promise<number> } }).worker.terminate();
      await until(() => t.restarts === 1);
      expect(logs.join('\n')).toMatch(/the notice thread stopped \(.*\); another starts in 500 ms/);
      // No thread runs: a billing event's notice cannot be confirmed stored (answered 503: send it again) …
      expect(await t.stored()).toBe(false);
      // … and a notice waits here until the next thread has opened the store.
      t.send(notice('b'));
      await until(() => seen.includes('/bill?id=b'));
      expect(seen).toEqual(['/bill?id=a', '/bill?id=b']);
      await until(() => t.stats().billing.delivered === 2, 2_000);
      expect(t.stats().billing).toMatchObject({ sent: 2, stored: 2, delivered: 2, dropped: 0, abandoned: 0 });
    } finally {
      await t.close({ drainMs: 0, force: true });
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    expect(t.stats().billing).toMatchObject({ sent: 2, delivered: 2 });
  }, 20_000);
});
