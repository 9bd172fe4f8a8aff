// The auction fan-out against real partners on loopback. The machine is small and
// shared: bounds are generous but each one still separates right from wrong (e.g. a
// parallel fan-out of 20/40/60 ms partners must stay well under their 120 ms sum).
import { afterEach, describe, expect, it } from 'vitest';
import {
  answer,
  bidAfter,
  bidBody,
  bidRequest,
  exchangeConfig,
  hang,
  partnerConfig,
  post,
  sleep,
  startExchange,
  startPartner,
  type PartnerReply,
  type TestExchange,
  type TestPartner,
} from './helpers.js';

const open: { close(): Promise<void> }[] = [];
const track = <T extends { close(): Promise<void> }>(x: T): T => {
  open.push(x);
  return x;
};
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

async function partners(...replies: PartnerReply[]): Promise<TestPartner[]> {
  return Promise.all(replies.map(async (r) => track(await startPartner(r))));
}

describe('fan-out', () => {
  it('asks every partner in parallel: 20/40/60 ms partners answer in about 60 ms, not 120', async () => {
    const ps = await partners(bidAfter(20, 1), bidAfter(40, 2), bidAfter(60, 3));
    const ex: TestExchange = track(await startExchange(exchangeConfig(ps.map((p, i) => partnerConfig(`p${i}`, p.url)))));
    await post(ex.url, bidRequest()); // warm the connections
    const times: number[] = [];
    for (let i = 0; i < 5; i++) {
      const a = await post(ex.url, bidRequest());
      expect(a.status).toBe(200);
      times.push(a.ms);
    }
    times.sort((a, b) => a - b);
    const median = times[2]!;
    expect(median).toBeGreaterThanOrEqual(58);
    expect(median).toBeLessThan(110); // sequential calls would take 120 ms or more
    // All three were asked at (nearly) the same moment.
    const last = ps.map((p) => p.seen[p.seen.length - 1]!.at);
    expect(Math.max(...last) - Math.min(...last)).toBeLessThan(15);
    const s = ex.summaries[ex.summaries.length - 1]!;
    expect(s.partners).toMatchObject({ asked: 3, bid: 3, noBid: 0, error: 0, timeout: 0, skipped: 0 });
  });

  it('picks the highest price per impression and substitutes the macros', async () => {
    const ps = await partners(bidAfter(5, 1.25), bidAfter(5, 2.5), bidAfter(5, 2.5));
    const ex = track(await startExchange(exchangeConfig(ps.map((p, i) => partnerConfig(`p${i}`, p.url)))));
    const a = await post(ex.url, bidRequest({ id: 'auction-7' }));
    expect(a.status).toBe(200);
    const sb = a.json!.seatbid as { seat: string; bid: { price: number; adm: string }[] }[];
    expect(sb).toHaveLength(1);
    // A tie between p1 and p2 goes to the partner listed first (p1), deterministically.
    expect(a.json!.cur).toBe('USD');
    expect(sb[0]!.bid[0]!.price).toBe(2.5);
    expect(sb[0]!.bid[0]!.adm).toBe('<ad price="2.5"/>');
    const s = ex.summaries[ex.summaries.length - 1]!;
    const winner = s.results.find((r) => r.outcome === 'bid' && r.partner === 'p1');
    expect(winner).toBeDefined();
    expect(ex.exchange.stats().partners.map((p) => p.bidsWon)).toEqual([0, 1, 0]);
  });

  it("a hanging partner never delays the answer past the deadline; its late answer is dropped; the others' bids are used", async () => {
    const ps = await partners(
      bidAfter(10, 1),
      bidAfter(20, 2),
      (_req, res, _n, s) => {
        setTimeout(() => answer(res, 200, bidBody(s, 9)), 170); // late: after the 100 ms auction
      },
      hang,
    );
    const ex = track(
      await startExchange(
        exchangeConfig(
          [
            partnerConfig('fast', ps[0]!.url),
            partnerConfig('medium', ps[1]!.url),
            partnerConfig('late', ps[2]!.url, { lateGraceMs: 150 }),
            partnerConfig('hangs', ps[3]!.url, { lateGraceMs: 0 }),
          ],
          { auctionTimeoutMs: 100 },
        ),
      ),
    );
    const times: number[] = [];
    for (let i = 0; i < 4; i++) {
      const a = await post(ex.url, bidRequest({ tmax: 500 }));
      expect(a.status).toBe(200);
      // The late partner's 9.0 never wins: its answer came after the deadline.
      expect((a.json!.seatbid as { bid: { price: number }[] }[])[0]!.bid[0]!.price).toBe(2);
      times.push(a.ms);
    }
    for (const s of ex.summaries) {
      expect(s.windowMs).toBe(100);
      // The answer is written within a few ms of the deadline (measured inside the exchange).
      expect(s.usedMs).toBeLessThan(s.deadlineMs! + 25);
      expect(s.usedMs).toBeGreaterThanOrEqual(99);
      expect(s.partners).toMatchObject({ bid: 2, timeout: 2 });
    }
    // Measured at the source: the deadline (100 ms) plus the machine's noise, never the 170 ms partner.
    expect(Math.max(...times)).toBeLessThan(160);
    await sleep(150);
    const late = ex.exchange.stats().partners.find((p) => p.name === 'late')!;
    expect(late.timeouts).toBe(4);
    expect(late.late).toBeGreaterThanOrEqual(3); // its answers arrived ~70 ms after the cut and were dropped
    expect(late.bidsWon).toBe(0);
    const hangs = ex.exchange.stats().partners.find((p) => p.name === 'hangs')!;
    expect(hangs.timeouts).toBe(4);
    expect(hangs.late).toBe(0);
    // The exchange hung up on the hanging partner at its cut.
    for (const s of ps[3]!.seen) expect(s.closedAt).not.toBeNull();
  });

  it("tells each partner the time it really has: tmax = min(partner timeout, time left), below the source's", async () => {
    const ps = await partners(hang, hang);
    const ex = track(
      await startExchange(
        exchangeConfig([partnerConfig('short', ps[0]!.url, { timeoutMs: 60 }), partnerConfig('long', ps[1]!.url, { timeoutMs: 500 })], {
          auctionTimeoutMs: 400,
          reserveMs: 30,
        }),
      ),
    );
    const a = await post(ex.url, bidRequest({ tmax: 200 }));
    expect(a.status).toBe(204);
    // The partners see the hang-up a moment later (longer on a loaded machine): wait for it.
    for (let i = 0; i < 100 && !(ps[0]!.seen[0]?.closedAt && ps[1]!.seen[0]?.closedAt); i++) await sleep(10);
    const [short, long] = [ps[0]!.seen[0]!, ps[1]!.seen[0]!];
    const s = ex.summaries[0]!;
    // long: min(500, 200 − spent − 30) ≈ 170 minus the time spent reading the request.
    expect(short.tmax).toBe(60);
    expect(long.tmax).toBeGreaterThan(150);
    expect(long.tmax).toBeLessThanOrEqual(170);
    // The attempt starts a moment after the window is set (longer on a loaded machine): tmax is what is left then.
    expect(long.tmax).toBeLessThanOrEqual(Math.floor(s.windowMs!));
    expect(long.tmax).toBeGreaterThanOrEqual(Math.floor(s.windowMs!) - 5);
    for (const p of [short, long]) {
      expect(p.tmax!).toBeLessThan(200);
      // The exchange hangs up when the partner's time is over: tmax after the request arrived (± a few ms).
      const had = p.closedAt! - p.at;
      expect(Math.abs(had - p.tmax!)).toBeLessThan(12);
    }
  });

  it('a request without tmax gets the configured default, never an unbounded auction', async () => {
    const ps = await partners(hang);
    const ex = track(
      await startExchange(
        exchangeConfig([partnerConfig('p', ps[0]!.url, { timeoutMs: 5_000 })], { auctionTimeoutMs: 5_000, defaultTmaxMs: 120, reserveMs: 20 }),
      ),
    );
    const a = await post(ex.url, bidRequest({ tmax: undefined }));
    expect(a.status).toBe(204);
    expect(a.ms).toBeLessThan(200);
    const s = ex.summaries[0]!;
    expect(s.tmaxGiven).toBe(false);
    expect(s.tmaxMs).toBe(120);
    expect(ps[0]!.seen[0]!.tmax).toBeLessThanOrEqual(100);
  });
});

describe('no-bids, errors and retries', () => {
  it('204, an empty body, {}, an empty seatbid and nbr are no-bids, never retried', async () => {
    const bodies: (string | null)[] = [null, '', '{}', '{"id":"X","seatbid":[]}', '{"id":"X","seatbid":[],"nbr":2}', '{"nbr":5}', '{"nbr":577}'];
    const ps = await partners(
      ...bodies.map((b): PartnerReply => (_req, res, _n, s) => {
        if (b === null) return answer(res, 204);
        answer(res, 200, b.replace('"X"', JSON.stringify(s.body?.id)));
      }),
    );
    const ex = track(await startExchange(exchangeConfig(ps.map((p, i) => partnerConfig(`p${i}`, p.url, { preSendRetries: 2 })))));
    const a = await post(ex.url, bidRequest());
    expect(a.status).toBe(204);
    expect(a.body).toBe('');
    const s = ex.summaries[0]!;
    expect(s.partners).toMatchObject({ asked: 7, noBid: 7, error: 0 });
    expect(s.noBidReasons).toEqual({ http_204: 1, empty_body: 1, empty_object: 1, empty_seatbid: 1, 'nbr:2': 1, 'nbr:5': 1, 'nbr:577': 1 });
    for (const p of ps) expect(p.seen).toHaveLength(1); // never retried
    // The core saw each as an answer: one attempt, decision return.
    const attempts = ex.events.filter((e) => e.type === 'attempt');
    expect(attempts).toHaveLength(7);
    for (const e of attempts) expect(e.type === 'attempt' && e.decision).toBe('return');
  });

  it('a 400 and a 500 from a partner are errors, not retried; a malformed 200 is an error', async () => {
    const ps = await partners(
      (_q, res) => answer(res, 400),
      (_q, res) => answer(res, 500, '{"error":"boom"}'),
      (_q, res) => answer(res, 200, '{"id": "nope'),
      bidAfter(5, 1),
    );
    const ex = track(await startExchange(exchangeConfig(ps.map((p, i) => partnerConfig(`p${i}`, p.url, { preSendRetries: 2 })))));
    const a = await post(ex.url, bidRequest());
    expect(a.status).toBe(200);
    const s = ex.summaries[0]!;
    expect(s.errors).toEqual({ 'status:400': 1, 'status:500': 1, malformed: 1 });
    for (const p of ps) expect(p.seen).toHaveLength(1);
  });

  it('an answer over the size limit is an error and is not parsed', async () => {
    const huge = JSON.stringify({ id: 'x', seatbid: [{ bid: [{ id: 'b', impid: '1', price: 9, adm: 'x'.repeat(100_000) }] }] });
    const ps = await partners(
      (_q, res) => answer(res, 200, huge),
      (_q, res) => {
        res.writeHead(200, { 'content-type': 'application/json' }); // chunked: no length to check first
        res.write('{"id":"x","seatbid":[{"bid":[{"id":"b","impid":"1","price":9,"adm":"');
        res.write('y'.repeat(100_000));
        res.end('"}]}]}');
      },
      bidAfter(5, 1),
    );
    const ex = track(await startExchange(exchangeConfig(ps.map((p, i) => partnerConfig(`p${i}`, p.url, { maxResponseBytes: 10_000 })))));
    const a = await post(ex.url, bidRequest());
    expect(a.status).toBe(200);
    expect((a.json!.seatbid as { bid: { price: number }[] }[])[0]!.bid[0]!.price).toBe(1);
    expect(ex.summaries[0]!.errors).toEqual({ too_large: 2 });
  });

  it('floors are respected; bids for unknown impressions or in another currency are dropped', async () => {
    const ps = await partners(
      (_q, res, _n, s) => answer(res, 200, bidBody(s, 0.4)), // under the 0.5 floor
      (_q, res, _n, s) => answer(res, 200, JSON.stringify({ id: s.body?.id, cur: 'EUR', seatbid: [{ bid: [{ id: 'e', impid: '1', price: 5 }] }] })),
      (_q, res, _n, s) => answer(res, 200, JSON.stringify({ id: s.body?.id, seatbid: [{ bid: [{ id: 'u', impid: 'nope', price: 5 }] }] })),
    );
    const ex = track(await startExchange(exchangeConfig(ps.map((p, i) => partnerConfig(`p${i}`, p.url)))));
    const a = await post(ex.url, bidRequest());
    expect(a.status).toBe(204);
    expect(ex.summaries[0]!.bids).toMatchObject({ received: 3, valid: 0, won: 0, rejected: { below_floor: 1, currency: 1, unknown_imp: 1 } });
  });

  it('R20 worked example (tmax 300, partner timeout 120, deadline 260): refused after 15 ms → one retry, the auction ends by ~135 ms', async () => {
    const { Agent, buildConnector } = await import('undici');
    const ps = await partners(hang, bidAfter(5, 1));
    const connect = buildConnector({});
    let connects = 0;
    // The partner's first connection is refused after 15 ms; later ones reach it (and it hangs).
    const refusingOnce = new Agent({
      connect: (opts, cb) => {
        if (++connects === 1) {
          setTimeout(() => cb(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), null), 15);
          return;
        }
        connect(opts, cb);
      },
    });
    open.push({ close: () => refusingOnce.close() });
    const ex = track(
      await startExchange(
        exchangeConfig([partnerConfig('flaky', ps[0]!.url, { timeoutMs: 120, preSendRetries: 1 }), partnerConfig('steady', ps[1]!.url, { timeoutMs: 120 })], {
          auctionTimeoutMs: 260,
          reserveMs: 40,
        }),
        { dispatcherFor: (p) => (p.name === 'flaky' ? refusingOnce : null) },
      ),
    );
    const req = bidRequest({ tmax: 300 });
    const a = await post(ex.url, req);
    expect(a.status).toBe(200);
    const s = ex.summaries[0]!;
    expect(s.windowMs).toBeGreaterThan(250); // 300 − 40 − (time to read the request)
    const flaky = s.results.find((r) => r.partner === 'flaky')!;
    expect(flaky.attempts).toBe(2);
    expect(flaky.outcome).toBe('timeout'); // the retry hung: cut at 15 + 120
    expect(flaky.ms!).toBeGreaterThan(130);
    expect(flaky.ms!).toBeLessThan(160);
    expect(s.usedMs).toBeLessThan(175); // ≈135 ms, well before the 260 ms deadline
    // The retry carried the same BidRequest.id and the time the retry really had.
    expect(ps[0]!.seen).toHaveLength(1);
    expect(ps[0]!.seen[0]!.body?.id).toBe(req.id);
    expect(ps[0]!.seen[0]!.tmax).toBe(120);
    const ev = ex.events.filter((e) => e.type === 'attempt' && e.operationId.endsWith('/flaky'));
    expect(ev.map((e) => (e.type === 'attempt' ? [e.errorClass, e.decision] : null))).toEqual([
      ['connect_refused', 'retry'],
      ['timeout', 'not_retryable'],
    ]);
  });

  it('R20 (B) and (C): no retry after a timeout, none after nbr 5', async () => {
    const ps = await partners(hang, (_q, res, _n, s) => setTimeout(() => answer(res, 200, JSON.stringify({ id: s.body?.id, nbr: 5 })), 30));
    const ex = track(
      await startExchange(
        exchangeConfig(
          [partnerConfig('slow', ps[0]!.url, { timeoutMs: 120, preSendRetries: 2 }), partnerConfig('dc', ps[1]!.url, { timeoutMs: 120, preSendRetries: 2 })],
          { auctionTimeoutMs: 260, reserveMs: 40 },
        ),
      ),
    );
    const a = await post(ex.url, bidRequest({ tmax: 300 }));
    expect(a.status).toBe(204);
    expect(ps[0]!.seen).toHaveLength(1);
    expect(ps[1]!.seen).toHaveLength(1);
    const s = ex.summaries[0]!;
    expect(s.results.map((r) => [r.partner, r.outcome, r.attempts, r.nbr])).toEqual([
      ['slow', 'timeout', 1, null],
      ['dc', 'no_bid', 1, 5],
    ]);
    expect(s.usedMs).toBeLessThan(175); // ends at the slow partner's 120 ms cut
  });
});

describe('what the source gets', () => {
  it('204 when nobody bids, 204 for a disabled source (no partner asked)', async () => {
    const ps = await partners((_q, res) => answer(res, 204));
    const ex = track(await startExchange(exchangeConfig([partnerConfig('p', ps[0]!.url)], { disabledSources: ['pub-off'] })));
    expect((await post(ex.url, bidRequest())).status).toBe(204);
    expect(ps[0]!.seen).toHaveLength(1);
    const off = await post(ex.url, bidRequest({ site: { publisher: { id: 'pub-off' } } }));
    expect(off.status).toBe(204);
    expect(off.headers['x-relent-reason']).toBe('source_disabled');
    expect(ps[0]!.seen).toHaveLength(1);
    ex.exchange.setSourceEnabled('pub-1', false);
    expect((await post(ex.url, bidRequest({ app: { publisher: { id: 'pub-1' } }, site: undefined }))).status).toBe(204);
    expect(ps[0]!.seen).toHaveLength(1);
  });

  it('400 for malformed JSON, a missing id or imp, naming the field', async () => {
    const ps = await partners(bidAfter(1, 1));
    const ex = track(await startExchange(exchangeConfig([partnerConfig('p', ps[0]!.url)])));
    const cases: [unknown, string][] = [
      ['{"id": "x", "imp": [', '(body): not valid JSON'],
      ['', '(body): empty'],
      [{ imp: [{ id: '1' }] }, 'id: missing'],
      [{ id: 'x' }, 'imp: missing'],
      [{ id: 'x', imp: [] }, 'imp: must hold at least one'],
      [{ id: 'x', imp: [{ bidfloor: 1 }] }, 'imp[0].id: missing'],
      [{ id: 'x', imp: [{ id: '1' }, { id: '1' }] }, 'imp[1].id: duplicates'],
      [{ id: 'x', imp: [{ id: '1', bidfloor: -1 }] }, 'imp[0].bidfloor'],
      [{ id: 'x', imp: [{ id: '1' }], tmax: 'soon' }, 'tmax'],
      [[1, 2], '(body): a bid request is a JSON object'],
    ];
    for (const [body, why] of cases) {
      const a = await post(ex.url, body);
      expect(a.status, JSON.stringify(body)).toBe(400);
      expect(a.body).toBe('');
      expect(String(a.headers['x-relent-reason'])).toContain(why);
    }
    expect(ps[0]!.seen).toHaveLength(0);
  });

  it('skips a partner at its connection cap instead of waiting for it', async () => {
    const ps = await partners(bidAfter(80, 1), bidAfter(5, 2));
    const ex = track(await startExchange(exchangeConfig([partnerConfig('busy', ps[0]!.url, { maxConcurrency: 1 }), partnerConfig('free', ps[1]!.url)])));
    const [a, b] = await Promise.all([
      post(ex.url, bidRequest()),
      (async () => {
        await sleep(20);
        return post(ex.url, bidRequest());
      })(),
    ]);
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect(ps[0]!.seen).toHaveLength(1);
    const second = ex.summaries.find((s) => s.skipped.at_capacity === 1)!;
    expect(second).toBeDefined();
    expect(second.usedMs).toBeLessThan(60); // did not wait for the busy partner's 80 ms
    expect(ex.exchange.stats().partners[0]!.skipped.at_capacity).toBe(1);
  });
});
