// `relent exchange`, `relent bidder` and `relent exchange-demo`, run in process through main().
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { exchangeDemoCommand } from '../../src/cli/exchange-demo.js';
import { main } from '../../src/cli/main.js';
import { bidAfter, bidRequest, post, sleep, startPartner } from '../rtb/helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'relent-rtb-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function io(): { io: { out: (t: string) => void; err: (t: string) => void }; out: () => string; err: () => string } {
  let out = '';
  let err = '';
  return {
    io: {
      out: (t) => {
        out += t;
      },
      err: (t) => {
        err += t;
      },
    },
    out: () => out,
    err: () => err,
  };
}

function file(name: string, content: unknown): string {
  const p = join(dir, name);
  writeFileSync(p, typeof content === 'string' ? content : JSON.stringify(content));
  return p;
}

async function until(f: () => boolean, ms = 5_000): Promise<void> {
  const end = performance.now() + ms;
  while (!f()) {
    if (performance.now() > end) throw new Error('timed out waiting');
    await sleep(10);
  }
}

describe('relent exchange', () => {
  it('rejects a bad configuration with exit 2 and names the field', async () => {
    const cases: [unknown, string][] = [
      [{ reserveMs: 10, partners: [] }, '`auctionTimeoutMs`'],
      [{ auctionTimeoutMs: 100, reserveMs: 10, partners: [{ name: 'a', url: 'ftp://x', timeoutMs: 50, maxConcurrency: 1 }] }, '`partners[0].url`'],
      [
        { auctionTimeoutMs: 100, reserveMs: 10, partners: [{ name: 'a', url: 'http://x/', timeoutMs: 50, maxConcurrency: 1, breaker: { openMs: -1 } }] },
        '`partners[0].breaker.openMs`',
      ],
      ['{"auctionTimeoutMs": 100,', 'invalid JSON at line 1'],
      [
        {
          auctionTimeoutMs: 100,
          reserveMs: 10,
          fleet: { url: 'redis://127.0.0.1:1', timeoutMs: -1 },
          partners: [{ name: 'a', url: 'http://x/', timeoutMs: 50, maxConcurrency: 1 }],
        },
        '`fleet.timeoutMs`',
      ],
      [
        { auctionTimeoutMs: 100, reserveMs: 10, readTimeoutMs: 'soon', partners: [{ name: 'a', url: 'http://x/', timeoutMs: 50, maxConcurrency: 1 }] },
        '`readTimeoutMs`',
      ],
    ];
    for (const [content, field] of cases) {
      const t = io();
      const code = await main(['exchange', '--config', file('bad.json', content), '--port', '0', '--workers', '1'], t.io);
      expect(code).toBe(2);
      expect(t.err()).toContain(field);
      expect(t.err().trim().split('\n')).toHaveLength(1);
    }
    const t = io();
    expect(await main(['exchange', '--config', join(dir, 'missing.json')], t.io)).toBe(2);
    expect(t.err()).toContain('no such file');
  });

  it('serves auctions and stops on SIGTERM after answering the auctions in flight', async () => {
    const p = await startPartner(bidAfter(120, 1.5));
    try {
      const config = file('ex.json', { auctionTimeoutMs: 250, reserveMs: 20, partners: [{ name: 'p', url: p.url, timeoutMs: 200, maxConcurrency: 10 }] });
      const t = io();
      const running = main(['exchange', '--config', config, '--port', '0', '--quiet', '--workers', '1'], t.io);
      await until(() => t.err().includes('ready on'));
      const url = /ready on (\S+)/.exec(t.err())![1]!;
      expect(
        t
          .err()
          .split('\n')
          .filter((l) => l.includes('ready on')),
      ).toHaveLength(1);
      expect(t.err()).toMatch(/connections p 10\/10; 48 dry-run auctions; notices: sqlite:.*ex\.notices\.db\)/);
      const inflight = [post(url, bidRequest()), post(url, bidRequest())];
      await until(() => p.seen.length === 2);
      process.emit('SIGTERM');
      const answers = await Promise.all(inflight);
      expect(answers.map((a) => a.status)).toEqual([200, 200]);
      expect(await running).toBe(0);
      expect(t.err()).toContain('SIGTERM: answering 2 auction(s) in flight');
      expect(t.out()).toContain('auctions 2');
      await expect(post(url, bidRequest())).rejects.toThrow();
    } finally {
      await p.close();
    }
  });
});

describe('relent bidder', () => {
  it('serves a bidder from a config file and stops on SIGINT', async () => {
    const config = file('b.json', { name: 'dsp', latency: { kind: 'fixed', ms: 1 }, price: { kind: 'fixed', cpm: 3 } });
    const t = io();
    const running = main(['bidder', '--config', config, '--port', '0', '--quiet'], t.io);
    await until(() => t.out().includes('listening on'));
    const url = /listening on (\S+)/.exec(t.out())![1]!;
    const a = await post(url, bidRequest());
    expect(a.status).toBe(200);
    expect((await post(url, { id: 'x' })).status).toBe(400);
    process.emit('SIGINT');
    expect(await running).toBe(0);
    expect(t.out()).toContain('requests 2 · bids 1');
  });

  it('names the field of a bad bidder config (exit 2)', async () => {
    const t = io();
    expect(await main(['bidder', '--config', file('bb.json', { noBidRate: 2 })], t.io)).toBe(2);
    expect(t.err()).toContain('`noBidRate`');
  });
});

describe('relent exchange-demo', () => {
  it('runs the bundled example, prints a line per second (not a TTY) and a summary, exits 0', async () => {
    const t = io();
    const code = await main(['exchange-demo', '--duration', '2500ms', '--rate', '60'], t.io);
    expect(code).toBe(0);
    const out = t.out();
    expect(out.match(/^t=\d+\.\ds auctions \d+ \d+\/s \| 200 /gm)!.length).toBeGreaterThanOrEqual(2);
    expect(out).toContain('relent exchange-demo —');
    for (const name of ['fast', 'slow', 'hangs', 'failing', 'nbr']) expect(out).toMatch(new RegExp(`^${name}\\s+\\d+`, 'm'));
    expect(out).toMatch(/answers more than 5 ms after the auction deadline: \d+/);
    expect(out).toMatch(/billing notices .*bidders counted \d+ unique/);
  }, 30_000);

  it('on a TTY it keeps one updating line', async () => {
    const t = io();
    expect(await exchangeDemoCommand(['--duration', '1200ms', '--rate', '40'], t.io, { isTTY: true })).toBe(0);
    const live = t.out().split('relent exchange-demo —')[0]!;
    expect(live.split('\r\u001b[2Kt=').length - 1).toBeGreaterThanOrEqual(3);
    expect(live.split('\n').filter((l) => l.includes('t=')).length).toBe(1); // every update rewrites the same line
  }, 30_000);
});
