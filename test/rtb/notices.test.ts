// Durable notices: win, billing and loss notices through relent/delivery's queue (SQLite,
// and PostgreSQL when it answers), retried by the queue's worker with the notice policies,
// delivered once per key at an idempotent receiver, shown by `relent queue`.
import http from 'node:http';
import type net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { openDeliveryQueue } from '../../src/delivery/queue.js';
import { PG_URL, dropSchema, pgEnabled, uniqueSchema } from '../delivery/support.js';
import { answer, bidRequest, exchangeConfig, partnerConfig, post, sleep, startExchange, startPartner, type PartnerSeen } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'relent-rtb-notices-'));
const schemas: string[] = [];
const pgOn = await pgEnabled();
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  for (const s of schemas) await dropSchema(s);
});

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

/**
 * A notice receiver that is idempotent as OpenRTB asks (the key: request id + impression
 * id): each key is counted once however often it arrives; while `failing`, it answers 500
 * and counts nothing.
 */
async function receiver(): Promise<{ base: string; failing: boolean; unique: Map<string, number>; requests: number; failed: number; close(): Promise<void> }> {
  const state = { failing: false, unique: new Map<string, number>(), requests: 0, failed: 0 };
  const server = http.createServer((req, res) => {
    state.requests++;
    if (state.failing) {
      state.failed++;
      res.writeHead(500).end();
      return;
    }
    const u = new URL(req.url!, 'http://x');
    const key = `${u.pathname}:${u.searchParams.get('id')}:${u.searchParams.get('imp')}`;
    state.unique.set(key, (state.unique.get(key) ?? 0) + 1);
    res.writeHead(204).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  return Object.assign(state, {
    base,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}

/** A partner that bids on every impression, with nurl and burl at `base`. */
function bidding(base: string) {
  return (_req: http.IncomingMessage, res: http.ServerResponse, _n: number, s: PartnerSeen): void => {
    const imps = (s.body?.imp as { id: string }[]) ?? [];
    answer(
      res,
      200,
      JSON.stringify({
        id: s.body?.id,
        seatbid: [
          {
            seat: 's',
            bid: imps.map((imp, i) => ({
              id: `b${i}`,
              impid: imp.id,
              price: 1.5,
              adm: '<ad/>',
              nurl: `${base}/win?id=\${AUCTION_ID}&imp=\${AUCTION_IMP_ID}`,
              burl: `${base}/bill?id=\${AUCTION_ID}&imp=\${AUCTION_IMP_ID}&price=\${AUCTION_PRICE}`,
            })),
          },
        ],
      }),
    );
  };
}

const fast = { backoff: { kind: 'constant' as const, delayMs: 100 }, deadlineMs: 30_000, maxAttempts: 100, attemptTimeoutMs: 1_000 };

describe.each([
  ['SQLite', () => `sqlite:${join(dir, `n-${Date.now()}-${Math.random().toString(36).slice(2)}.db`)}`, true],
  [
    'PostgreSQL',
    () => {
      const schema = uniqueSchema('rtbn');
      schemas.push(schema);
      return `${PG_URL}?schema=${schema}`;
    },
    pgOn,
  ],
] as const)('durable notices (%s)', (_name, storeUrl, enabled) => {
  it.runIf(enabled)(
    'stores every notice, retries a failing receiver with the notice policy, delivers each key once; the queue shows them',
    async () => {
      const r = await receiver();
      open.push(r);
      const p = await startPartner(bidding(r.base));
      open.push(p);
      const store = storeUrl();
      const ex = await startExchange(
        exchangeConfig([partnerConfig('dsp', p.url)], {
          notices: {
            win: 'exchange',
            billing: 'on-win',
            store,
            billingPolicy: fast,
            winPolicy: { backoff: { kind: 'constant', delayMs: 100 }, maxAttempts: 100, deadlineMs: 30_000 },
            worker: { pollMs: 50 },
          },
        }),
      );
      open.push(ex);
      expect((await ex.exchange.ready()).noticeStore).toBe(store);
      r.failing = true;
      const imps = [{ id: '1' }, { id: '2' }];
      // Auctions until 10 are won (on a loaded machine a partner may miss one: it bills nothing).
      const won: string[] = [];
      for (let k = 0; won.length < 10 && k < 100; k++) {
        const a = await post(ex.url, bidRequest({ id: `auction-${k}`, imp: imps }));
        if (a.status === 200) won.push(`auction-${k}`);
      }
      expect(won).toHaveLength(10);
      // 20 billing + 20 win notices written to the store, the first attempts failing: wait
      // until every billing notice has been tried (and failed) once — the failures counted
      // by the receiver may all be win notices on a loaded machine.
      for (let i = 0; i < 500 && (ex.exchange.stats().notices.billing.stored < 20 || ex.exchange.stats().notices.billing.attempts < 20 || r.failed < 20); i++) {
        await sleep(10);
      }
      const n = ex.exchange.stats().notices;
      expect(n.billing).toMatchObject({ sent: 20, stored: 20 });
      expect(n.win).toMatchObject({ sent: 20, stored: 20 });
      r.failing = false;
      for (let i = 0; i < 500 && (ex.exchange.stats().notices.billing.delivered < 20 || ex.exchange.stats().notices.win.delivered < 20); i++) await sleep(10);
      const after = ex.exchange.stats().notices;
      expect(after.billing.delivered).toBe(20);
      expect(after.win.delivered).toBe(20);
      expect(after.billing.attempts).toBeGreaterThan(20);
      const bills = [...r.unique.keys()].filter((k) => k.startsWith('/bill'));
      expect(bills.sort()).toEqual(won.flatMap((id) => [`/bill:${id}:1`, `/bill:${id}:2`]).sort());
      // `relent queue` reads the same store: one destination per partner and kind.
      await ex.close();
      const out: string[] = [];
      const code = await main(['queue', 'stats', '--store', store, '--json'], { out: (t) => out.push(t), err: (t) => out.push(t) });
      expect(code).toBe(0);
      const rows = (JSON.parse(out.join('')) as { destinations: { destination: string; deliveredItems: number }[] }).destinations;
      expect(rows.find((x) => x.destination === 'rtb:dsp:billing')?.deliveredItems).toBe(20);
      expect(rows.find((x) => x.destination === 'rtb:dsp:win')?.deliveredItems).toBe(20);
    },
    30_000,
  );
});

describe('durable notices: keys, events and shutdown', () => {
  it('a repeated request id is one billing notice per impression (the queue dedupes on request id + impression id)', async () => {
    const r = await receiver();
    open.push(r);
    const p = await startPartner(bidding(r.base));
    open.push(p);
    const store = `sqlite:${join(dir, 'dedupe.db')}`;
    const ex = await startExchange(
      exchangeConfig([partnerConfig('dsp', p.url)], { notices: { win: 'source', billing: 'on-win', store, worker: { pollMs: 50 } } }),
    );
    open.push(ex);
    for (let i = 0; i < 3; i++) expect((await post(ex.url, bidRequest({ id: 'same-id' }))).status).toBe(200);
    await ex.close();
    const q = await openDeliveryQueue({ store });
    try {
      const rows = await q.list({ destination: 'rtb:dsp:billing' });
      expect(rows).toHaveLength(1);
      expect((await q.show(rows[0]!.id))!.itemList.map((i) => i.key)).toEqual(['billing:same-id:1']);
    } finally {
      await q.close();
    }
  });

  it('on-event billing answers the event 204 only once its notice is stored', async () => {
    const r = await receiver();
    open.push(r);
    const p = await startPartner(bidding(r.base));
    open.push(p);
    const store = `sqlite:${join(dir, 'event.db')}`;
    const ex = await startExchange(
      exchangeConfig([partnerConfig('dsp', p.url)], { notices: { win: 'source', billing: 'on-event', store, worker: { pollMs: 50 } } }),
    );
    open.push(ex);
    expect((await post(ex.url, bidRequest({ id: 'ev-1' }))).status).toBe(200);
    const res = await fetch(`${ex.origin}/openrtb2/billing?id=ev-1&imp=1`, { method: 'POST' });
    expect(res.status).toBe(204);
    // Stored before the answer: visible in the store at once.
    expect(ex.exchange.stats().notices.billing.stored).toBe(1);
    expect((await fetch(`${ex.origin}/openrtb2/billing?id=ev-1&imp=1`)).status).toBe(204);
    expect((await fetch(`${ex.origin}/openrtb2/billing?id=ev-9&imp=1`)).status).toBe(404);
    expect(ex.exchange.stats().notices.events).toEqual({ received: 3, fired: 1, duplicate: 1, unknown: 1 });
    for (let i = 0; i < 200 && r.unique.size < 1; i++) await sleep(10);
    expect([...r.unique.keys()]).toEqual(['/bill:ev-1:1']);
  });

  it('a billing event whose notice cannot be stored (the disk is full) is answered 503, not 204', async () => {
    const r = await receiver();
    open.push(r);
    const p = await startPartner(bidding(r.base));
    open.push(p);
    // A store limited to 512 KiB, filled up to the limit: nothing more fits.
    const store = `sqlite:${join(dir, 'full.db')}?maxSizeBytes=${512 * 1024}`;
    const q = await openDeliveryQueue({ store });
    let full = false;
    for (const size of [1_000, 100, 1]) {
      full = false;
      for (let i = 0; i < 5_000 && !full; i++) {
        try {
          await q.enqueue('filler', { pad: 'x'.repeat(size) });
        } catch (e) {
          full = (e as { code?: string }).code === 'ERR_STORE_FULL';
        }
      }
    }
    // One failed insert leaves holes in other pages (a key lands in another index page, a
    // row in the table's last page): keep filling them with the smallest rows, past failures.
    for (let i = 0; i < 3_000; i++) await q.enqueue('filler', { pad: '' }).catch(() => {});
    await q.close();
    expect(full).toBe(true);
    const ex = await startExchange(exchangeConfig([partnerConfig('dsp', p.url)], { notices: { win: 'source', billing: 'on-event', store } }));
    open.push(ex);
    expect((await post(ex.url, bidRequest({ id: 'full-1' }))).status).toBe(200);
    const res = await fetch(`${ex.origin}/openrtb2/billing?id=full-1&imp=1`, { method: 'POST' });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    const n = ex.exchange.stats().notices;
    expect(n.storeErrors).toBeGreaterThan(0);
    expect(n.billing).toMatchObject({ sent: 1, stored: 0 });
  });

  it('on shutdown the notices are written, not abandoned; the next start delivers them', async () => {
    const r = await receiver();
    open.push(r);
    const p = await startPartner(bidding(r.base));
    open.push(p);
    const store = `sqlite:${join(dir, 'restart.db')}`;
    const cfg = exchangeConfig([partnerConfig('dsp', p.url)], {
      notices: { win: 'source', billing: 'on-win', store, billingPolicy: fast, worker: { pollMs: 50, stopTimeoutMs: 0 } },
    });
    r.failing = true;
    const ex = await startExchange(cfg);
    await Promise.all(Array.from({ length: 5 }, (_, i) => post(ex.url, bidRequest({ id: `rs-${i}` }))));
    await ex.exchange.close();
    const s = ex.exchange.stats().notices.billing;
    expect(s).toMatchObject({ sent: 5, stored: 5, abandoned: 0, delivered: 0 });
    r.failing = false;
    const again = await startExchange(cfg);
    open.push(again);
    for (let i = 0; i < 300 && r.unique.size < 5; i++) await sleep(10);
    expect([...r.unique.keys()].sort()).toEqual(Array.from({ length: 5 }, (_, i) => `/bill:rs-${i}:1`));
  });

  it('auctions run in process (auction(), no listen) open the store on their first notice', async () => {
    const r = await receiver();
    open.push(r);
    const p = await startPartner(bidding(r.base));
    open.push(p);
    const { createExchange } = await import('../../src/rtb/exchange.js');
    const ex = createExchange(
      exchangeConfig([partnerConfig('dsp', p.url)], {
        warmup: false,
        notices: { win: 'source', billing: 'on-win', store: `sqlite:${join(dir, 'inproc.db')}`, worker: { pollMs: 50 } },
      }),
    );
    open.push({ close: () => ex.close() });
    expect((await ex.auction(bidRequest({ id: 'inproc-1' }))).status).toBe(200);
    // The receiver counts a notice when it gets it; the exchange, once the answer is back: wait for both.
    for (let i = 0; i < 300 && (r.unique.size < 1 || ex.stats().notices.billing.delivered < 1); i++) await sleep(10);
    expect([...r.unique.keys()]).toEqual(['/bill:inproc-1:1']);
    expect(ex.stats().notices.billing).toMatchObject({ sent: 1, stored: 1, delivered: 1 });
  });

  it('notices of 10 ms are written together (one write, one look of the delivery worker); stored() writes at once', async () => {
    const { NoticeHub, NOTICE_GROUP_MS } = await import('../../src/rtb/notices.js');
    const { resolveExchangeConfig } = await import('../../src/rtb/config.js');
    const { createTestClock } = await import('../../src/testing/index.js');
    const clock = createTestClock();
    const cfg = resolveExchangeConfig(
      exchangeConfig([partnerConfig('dsp', 'http://127.0.0.1:9/bid')], { notices: { store: `sqlite:${join(dir, 'group.db')}`, worker: { pollMs: 60_000 } } }),
    );
    const hub = new NoticeHub(cfg.notices, { clock, random: () => 0.5, partners: [{ name: 'dsp', url: new URL('http://127.0.0.1:9/bid') }] });
    open.push({ close: () => hub.close({ drainMs: 0, force: true }) });
    await hub.open();
    const turns = async (): Promise<void> => {
      for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    };
    const notice = (i: number) => ({ kind: 'billing' as const, partner: 'dsp', key: `billing:g-${i}:1`, url: `http://127.0.0.1:9/bill?i=${i}` });
    for (let i = 0; i < 3; i++) hub.send(notice(i));
    await turns();
    clock.advance(NOTICE_GROUP_MS - 1);
    await turns();
    expect(hub.stats().billing).toMatchObject({ sent: 3, stored: 0 });
    clock.advance(1);
    await turns();
    expect(hub.stats().billing).toMatchObject({ sent: 3, stored: 3 });
    // Somebody waits for the write (a billing event's answer): it does not wait out the group.
    hub.send(notice(3));
    expect(await hub.stored()).toBe(true);
    expect(hub.stats().billing).toMatchObject({ sent: 4, stored: 4 });
  });

  it('a store that cannot be opened keeps the exchange from serving, with the reason', async () => {
    const ex = (await import('../../src/rtb/exchange.js')).createExchange(
      exchangeConfig([partnerConfig('dsp', 'http://127.0.0.1:9/bid')], {
        notices: { store: `sqlite:${join(dir, 'no-such-dir', 'x', 'n.db')}` },
      }),
    );
    await expect(ex.listen(0, '127.0.0.1')).rejects.toThrow(/no-such-dir|directory|cannot open|unable/i);
    await ex.close({ force: true });
  });
});
