// The pure parts of relent/rtb: validation, nbr codes, answer classification, macros,
// winner selection and configuration errors. Plain function calls, no sockets.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { answerBreakerOutcome, classifyBidAnswer } from '../../src/rtb/answer.js';
import { resolveBidderConfig, resolveExchangeConfig } from '../../src/rtb/config.js';
import { formatDecimal, substituteMacros } from '../../src/rtb/macros.js';
import { checkBidRequest } from '../../src/rtb/model.js';
import { describeNoBidReason, NO_BID_REASONS } from '../../src/rtb/nbr.js';
import { selectWinners, type Candidate } from '../../src/rtb/select.js';

describe('checkBidRequest', () => {
  it('names the first missing or wrong field', () => {
    const field = (v: unknown): string | null => {
      const r = checkBidRequest(v);
      return r.ok ? null : r.field;
    };
    expect(field({ id: 'a', imp: [{ id: '1' }] })).toBeNull();
    expect(field(null)).toBe('(body)');
    expect(field({ imp: [{ id: '1' }] })).toBe('id');
    expect(field({ id: '', imp: [{ id: '1' }] })).toBe('id');
    expect(field({ id: 'a' })).toBe('imp');
    expect(field({ id: 'a', imp: {} })).toBe('imp');
    expect(field({ id: 'a', imp: [{ id: '1' }, 7] })).toBe('imp[1]');
    expect(field({ id: 'a', imp: [{ id: '1' }, { id: 2 }] })).toBe('imp[1].id');
    expect(field({ id: 'a', imp: [{ id: '1', bidfloor: 'x' }] })).toBe('imp[0].bidfloor');
    expect(field({ id: 'a', imp: [{ id: '1' }], tmax: -5 })).toBe('tmax');
    expect(field({ id: 'a', imp: [{ id: '1' }], site: {}, app: {} })).toBe('site');
    expect(field({ id: 'a', imp: Array.from({ length: 101 }, (_, i) => ({ id: String(i) })) })).toBe('imp');
  });

  it('never throws, whatever the input', () => {
    fc.assert(
      fc.property(fc.anything(), (v) => {
        const r = checkBidRequest(v);
        expect(typeof r.ok).toBe('boolean');
      }),
    );
  });
});

describe('no-bid reasons', () => {
  it('has the 2.5 and 3.0 names for 0–17, exchange-specific from 500, tolerates unknown values', () => {
    expect(NO_BID_REASONS).toHaveLength(18);
    expect(describeNoBidReason(3)).toEqual({ code: 3, kind: 'standard', name: 'Known Web Crawler', name25: 'Known Web Spider' });
    expect(describeNoBidReason(9).name25).toBe('Daily Reader Cap Met');
    expect(describeNoBidReason(15)).toMatchObject({ kind: 'standard', name: 'Insufficient Auction Time', name25: null });
    expect(describeNoBidReason(499)).toMatchObject({ kind: 'unknown' });
    expect(describeNoBidReason(612)).toMatchObject({ kind: 'exchange_specific', name: 'Exchange-specific (612)' });
  });
});

describe('classifyBidAnswer (the one classification)', () => {
  const cases: [number, string | null, string, string | null, 'success' | 'failure'][] = [
    [204, null, 'no_bid', 'http_204', 'success'],
    [204, '{"garbage', 'no_bid', 'http_204', 'success'],
    [200, '', 'no_bid', 'empty_body', 'success'],
    [200, ' \n', 'no_bid', 'empty_body', 'success'],
    [200, '{}', 'no_bid', 'empty_object', 'success'],
    [200, '{"id":"r"}', 'no_bid', 'no_seatbid', 'success'],
    [200, '{"id":"r","seatbid":[]}', 'no_bid', 'empty_seatbid', 'success'],
    [200, '{"id":"r","seatbid":[{"bid":[]}]}', 'no_bid', 'empty_seatbid', 'success'],
    [200, '{"id":"r","seatbid":[],"nbr":2}', 'no_bid', 'nbr', 'success'],
    [200, '{"nbr":555}', 'no_bid', 'nbr', 'success'],
    [200, '{"id":"r","seatbid":[{"bid":[{"id":"b","impid":"1","price":1}]}]}', 'bid', null, 'success'],
    [400, null, 'error', 'status', 'failure'],
    [500, '{}', 'error', 'status', 'failure'],
    [503, null, 'error', 'status', 'failure'],
    [201, '{}', 'error', 'status', 'failure'],
    [302, null, 'error', 'status', 'failure'],
    [200, '{"id": "r"', 'error', 'malformed', 'failure'],
    [200, '[]', 'error', 'malformed', 'failure'],
    [200, '{"seatbid":{}}', 'error', 'malformed', 'failure'],
    [200, '{"seatbid":[{"bid":[1]}]}', 'error', 'malformed', 'failure'],
    [200, '{"nbr":"2"}', 'error', 'malformed', 'failure'],
    [200, '{"nbr":-1}', 'error', 'malformed', 'failure'],
    [200, '{"id":"other","seatbid":[]}', 'error', 'id_mismatch', 'failure'],
  ];
  it.each(cases)('%i %s → %s (%s), breaker %s', (status, body, kind, detail, breaker) => {
    const a = classifyBidAnswer(status, body, 'r');
    expect(a.kind).toBe(kind);
    if (a.kind === 'no_bid') expect(a.form).toBe(detail);
    if (a.kind === 'error') expect(a.error).toBe(detail);
    expect(answerBreakerOutcome(a)).toBe(breaker);
  });

  it('keeps the nbr value, known or not', () => {
    const a = classifyBidAnswer(200, '{"id":"r","seatbid":[],"nbr":577}', 'r');
    expect(a.kind === 'no_bid' && a.nbr).toBe(577);
  });

  it('never throws on any body', () => {
    fc.assert(
      fc.property(fc.integer({ min: 100, max: 599 }), fc.oneof(fc.string(), fc.json(), fc.constant(null)), (s, b) => {
        expect(['bid', 'no_bid', 'error']).toContain(classifyBidAnswer(s, b, 'r').kind);
      }),
    );
  });
});

describe('macros', () => {
  it('substitutes the 2.6 macros, URL-safe, and leaves encoded and unknown ones', () => {
    const v = { auctionId: 'a 1', bidId: 'resp', impId: 'imp"1', seatId: 'seat', adId: null, price: 1.5, currency: 'USD', mbr: 1, loss: 0, minToWin: 0.75 };
    expect(
      substituteMacros(
        'https://x/win?a=${AUCTION_ID}&i=${AUCTION_IMP_ID}&p=${AUCTION_PRICE}&c=${AUCTION_CURRENCY}&b=${AUCTION_BID_ID}&ad=${AUCTION_AD_ID}&m=${AUCTION_MIN_TO_WIN}&l=${AUCTION_LOSS}',
        v,
      ),
    ).toBe('https://x/win?a=a%201&i=imp%221&p=1.5&c=USD&b=resp&ad=&m=0.75&l=0');
    expect(substituteMacros('<img src="x?p=${AUCTION_PRICE:B64}&q=${AUCTION_FOO}&s=${AUCTION_SEAT_ID}">', v)).toBe(
      '<img src="x?p=${AUCTION_PRICE:B64}&q=${AUCTION_FOO}&s=seat">',
    );
    expect(substituteMacros("'${AUCTION_ID}'", { auctionId: "x'><script>", impId: '1' })).toBe("'x%27%3E%3Cscript%3E'");
    expect(formatDecimal(1e-7)).toBe('0');
    expect(formatDecimal(2)).toBe('2');
    expect(formatDecimal(0.1 + 0.2)).toBe('0.3');
  });
});

describe('selectWinners', () => {
  const request = { id: 'r', imp: [{ id: '1', bidfloor: 1 }, { id: '2' }] };
  const cand = (partnerIndex: number, impid: string, price: number, id = `b${partnerIndex}${impid}`): Candidate => ({
    partnerIndex,
    partner: `p${partnerIndex}`,
    received: { bid: { id, impid, price }, seat: null, group: false },
    currency: 'USD',
    bidid: null,
  });
  it('first price per impression, floors respected, ties to the partner listed first whatever the arrival order', () => {
    const s = selectWinners(request, [cand(2, '1', 3), cand(1, '1', 3), cand(0, '1', 0.5), cand(0, '2', 0.2), cand(3, '2', 0.1)], 'USD');
    expect(s.winners.map((w) => [w.imp.id, w.candidate.partner, w.price, w.minToWin])).toEqual([
      ['1', 'p1', 3, 3],
      ['2', 'p0', 0.2, 0.1],
    ]);
    expect(s.rejected).toEqual({ below_floor: 1 });
  });
  it('the same bids in any order give the same winners', () => {
    const all = [cand(0, '1', 2), cand(1, '1', 2), cand(2, '1', 1.5), cand(1, '2', 1), cand(2, '2', 1)];
    fc.assert(
      fc.property(fc.shuffledSubarray(all, { minLength: all.length }), (shuffled) => {
        const s = selectWinners(request, shuffled, 'USD');
        expect(s.winners.map((w) => w.candidate.partner)).toEqual(['p0', 'p1']);
      }),
    );
  });
});

describe('configuration', () => {
  const partner = { name: 'a', url: 'http://127.0.0.1:1/bid', timeoutMs: 100, maxConcurrency: 10 };
  const err = (f: () => unknown): string => {
    try {
      f();
    } catch (e) {
      return (e as Error).message;
    }
    return 'no error';
  };
  it('names the field that is wrong', () => {
    expect(err(() => resolveExchangeConfig({ reserveMs: 10, partners: [] }))).toBe('Missing `auctionTimeoutMs` (required)');
    expect(err(() => resolveExchangeConfig({ auctionTimeoutMs: 100, reserveMs: 10, partners: [{ ...partner, timeoutMs: '80' }] }))).toBe(
      'Expected `partners[0].timeoutMs` to be an integer in [1, 60000], got "80"',
    );
    expect(err(() => resolveExchangeConfig({ auctionTimeoutMs: 100, reserveMs: 10, partners: [{ ...partner, maxConcurrency: undefined }] }))).toBe(
      'Missing `partners[0].maxConcurrency` (required)',
    );
    expect(err(() => resolveExchangeConfig({ auctionTimeoutMs: 100, reserveMs: 10, partners: [partner, partner] }))).toContain('partners[1].name');
    expect(err(() => resolveExchangeConfig({ auctionTimeoutMs: 100, reserveMs: 10, partners: [{ ...partner, breaker: { failureRatio: 2 } }] }))).toContain(
      'partners[0].breaker.failureRatio',
    );
    expect(err(() => resolveExchangeConfig({ auctionTimeoutMs: 100, reserveMs: 10, partners: [{ ...partner, url: 'http://user:secret@x/' }] }))).not.toContain(
      'secret',
    );
    expect(err(() => resolveExchangeConfig({ auctionTimeoutMs: 100, reserveMs: 10, partners: [], tmax: 1 }))).toContain('Unknown field `tmax`');
    expect(err(() => resolveBidderConfig({ failures: { error500: 0.6, hang: 0.6 } }))).toContain('`failures`');
    expect(err(() => resolveBidderConfig({ latency: { kind: 'lognormal', medianMs: 20, p99Ms: 10 } }))).toContain('latency.p99Ms');
  });
  it('fills the stated defaults', () => {
    const c = resolveExchangeConfig({ auctionTimeoutMs: 100, reserveMs: 10, partners: [partner] });
    expect(c.defaultTmaxMs).toBe(110);
    expect(c.partners[0]).toMatchObject({ minTimeMs: 10, lateGraceMs: 50, preSendRetries: 0, enabled: true });
    expect(c.partners[0]!.breaker).toMatchObject({ failureRatio: 0.5, minimumThroughput: 20, windowMs: 10_000, openMs: 5_000 });
  });
});
