// The simulated DSP (R25) and the win/billing notices (R22, R26).
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { createBidder, type Bidder, type BidderRequestInfo } from '../../src/rtb/bidder.js';
import { bidRequest, exchangeConfig, partnerConfig, post, sleep, startExchange } from './helpers.js';

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

async function bidder(config: Parameters<typeof createBidder>[0], seen?: BidderRequestInfo[]): Promise<{ b: Bidder; url: string; base: string }> {
  const b = createBidder(config, { onRequest: seen ? (i) => seen.push(i) : null });
  const info = await b.listen(0, '127.0.0.1');
  open.push(b);
  return { b, url: info.url, base: info.publicUrl };
}

describe('bidder', () => {
  it('bids with its price, and answers a request missing required fields with 400 naming the field', async () => {
    const { url, b } = await bidder({ name: 'dsp', price: { kind: 'fixed', cpm: 2.25 }, latency: { kind: 'fixed', ms: 0 } });
    const ok = await post(url, bidRequest({ id: 'r1', imp: [{ id: 'a' }, { id: 'b', bidfloor: 3 }] }));
    expect(ok.status).toBe(200);
    const sb = ok.json!.seatbid as { seat: string; bid: { impid: string; price: number; nurl: string; burl: string }[] }[];
    expect(sb[0]!.seat).toBe('dsp');
    expect(sb[0]!.bid.map((x) => [x.impid, x.price])).toEqual([['a', 2.25]]); // b's floor (3) is above its price
    expect(sb[0]!.bid[0]!.burl).toContain('${AUCTION_PRICE}');
    for (const [body, field] of [
      [{ imp: [{ id: '1' }] }, 'id'],
      [{ id: 'x' }, 'imp'],
      [{ id: 'x', imp: [{}] }, 'imp[0].id'],
      ['{oops', '(body)'],
    ] as const) {
      const a = await post(url, body);
      expect(a.status).toBe(400);
      expect(String(a.headers['x-relent-reason'])).toContain(field);
    }
    expect(b.stats().byBehaviour.bad_request).toBe(4);
  });

  it('over its concurrency limit it sheds load with 204 and no nbr', async () => {
    // A latency far above what a loaded machine adds, so "at once" cannot be mistaken for "after it".
    const { url, b } = await bidder({ maxConcurrency: 2, latency: { kind: 'fixed', ms: 1_500 }, noBidRate: 0 });
    const answers = await Promise.all(Array.from({ length: 6 }, () => post(url, bidRequest())));
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses).toEqual([200, 200, 204, 204, 204, 204]);
    for (const a of answers.filter((x) => x.status === 204)) {
      expect(a.body).toBe(''); // no BidResponse, so no nbr
      expect(a.ms).toBeLessThan(750); // at once, not after the 1,500 ms latency
    }
    expect(b.stats()).toMatchObject({ maxInFlight: 2, inFlight: 0 });
    expect(b.stats().byBehaviour.shed).toBe(4);
  });

  it('no-bids with and without nbr in the configured shares; injected failures', async () => {
    const seen: BidderRequestInfo[] = [];
    const { url } = await bidder(
      { seed: 7, latency: { kind: 'fixed', ms: 0 }, noBidRate: 0.5, nbrShare: 0.5, nbr: [2, 8], failures: { error500: 0.1, malformed: 0.1 } },
      seen,
    );
    const counts: Record<string, number> = {};
    for (let i = 0; i < 200; i++) {
      const a = await post(url, bidRequest());
      const k =
        a.status === 200 && a.json === null ? '200-malformed' : a.status === 200 && a.json!.nbr !== undefined ? `nbr:${String(a.json!.nbr)}` : String(a.status);
      counts[k] = (counts[k] ?? 0) + 1;
    }
    expect(counts['500']! / 200).toBeGreaterThan(0.04);
    expect(counts['200-malformed']! / 200).toBeGreaterThan(0.04);
    expect((counts['nbr:2'] ?? 0) + (counts['nbr:8'] ?? 0)).toBeGreaterThan(20);
    expect(counts['204']!).toBeGreaterThan(20);
    expect(counts['200']!).toBeGreaterThan(40);
    expect(seen.every((s) => s.tmax === 300)).toBe(true);
  });

  it('counts each billable event once: a billing notice delivered twice is counted once', async () => {
    const { b, base } = await bidder({});
    const url = `${base}/notice/billing?id=req-9&imp=1&price=1.5`;
    const first = await request(url);
    const again = await request(url);
    const other = await request(`${base}/notice/billing?id=req-9&imp=2&price=2`);
    expect([first.statusCode, again.statusCode, other.statusCode]).toEqual([204, 204, 204]);
    await Promise.all([first.body.dump(), again.body.dump(), other.body.dump()]);
    expect(b.stats()).toMatchObject({ billed: 2, billingDuplicates: 1, billedCpm: 3.5 });
    const win = await request(`${base}/notice/win?id=req-9&imp=1`);
    await win.body.dump();
    expect(b.stats()).toMatchObject({ wins: 1, winDuplicates: 0 });
  });
});

describe('notices fired by the exchange', () => {
  it('substitutes the macros, fires win and billing notices, retries a failed billing notice, and the bidder counts it once', async () => {
    // The bidder answers every other notice with 500: the exchange's billing retries (every 50 ms here) get through.
    const { b, url } = await bidder({ name: 'dsp', seed: 3, noticeFailureRate: 0.5, price: { kind: 'fixed', cpm: 1.75 }, latency: { kind: 'fixed', ms: 0 } });
    const ex = await startExchange(
      exchangeConfig([partnerConfig('dsp', url)], {
        notices: { win: 'exchange', billing: 'on-win', billingPolicy: { backoff: { kind: 'constant', delayMs: 50 }, deadlineMs: 5_000 } },
      }),
    );
    open.push(ex);
    const answers = [];
    for (let i = 0; i < 10; i++) answers.push(await post(ex.url, bidRequest({ id: `auction-${i}` })));
    for (const a of answers) {
      expect(a.status).toBe(200);
      const bid = (a.json!.seatbid as { bid: Record<string, unknown>[] }[])[0]!.bid[0]!;
      expect(bid.nurl).toBeUndefined(); // fired by the exchange
      expect(bid.burl).toBeUndefined();
      expect(bid.adm).toBe('<div class="relent-ad" data-seat="dsp">dsp: 1.75 USD</div>');
    }
    // The bidder counts a notice when it gets it; the exchange, when the answer is back: wait for both.
    for (let i = 0; i < 250 && (b.stats().billed < 10 || ex.exchange.stats().notices.billing.delivered < 10); i++) await sleep(20);
    const s = b.stats();
    expect(s.billed).toBe(10);
    expect(s.billedCpm).toBeCloseTo(17.5);
    expect(s.noticeFailures).toBeGreaterThan(0);
    const n = ex.exchange.stats().notices;
    expect(n.billing).toMatchObject({ sent: 10, delivered: 10, failed: 0 });
    expect(n.billing.attempts).toBeGreaterThan(10); // some were retried
  });

  it('on-event billing: the billing event fires the notice once; a repeated event is a duplicate', async () => {
    const { b, url } = await bidder({ name: 'dsp', latency: { kind: 'fixed', ms: 0 } });
    const ex = await startExchange(exchangeConfig([partnerConfig('dsp', url)], { notices: { win: 'source', billing: 'on-event' } }));
    open.push(ex);
    const a = await post(ex.url, bidRequest({ id: 'ev-1', imp: [{ id: 'x' }] }));
    expect(a.status).toBe(200);
    const fire = async (q: string): Promise<number> => {
      const r = await request(`${ex.origin}/openrtb2/billing?${q}`, { method: 'POST' });
      await r.body.dump();
      return r.statusCode;
    };
    expect(await fire('id=ev-1&imp=x')).toBe(204);
    expect(await fire('id=ev-1&imp=x')).toBe(204);
    expect(await fire('id=ev-1&imp=nope')).toBe(404);
    expect(await fire('id=ev-1')).toBe(400);
    for (let i = 0; i < 50 && b.stats().billed < 1; i++) await sleep(20);
    await sleep(50);
    expect(b.stats()).toMatchObject({ billed: 1, billingDuplicates: 0 });
    expect(ex.exchange.stats().notices.events).toEqual({ received: 3, fired: 1, duplicate: 1, unknown: 1 });
  });
});
