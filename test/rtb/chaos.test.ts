// Chaos into an exchange partner's calls (the partner config's `chaos`, a policy field):
// the partner server sees nothing for injected outcomes; the auction goes on with the
// other partners; the attempt events say what was injected. The exchange has no chaos
// code of its own: its partner calls go through the executor.
import { afterEach, describe, expect, it } from 'vitest';
import { resolveExchangeConfig } from '../../src/rtb/config.js';
import { bidAfter, bidRequest, exchangeConfig, partnerConfig, post, startExchange, startPartner } from './helpers.js';

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

describe('exchange partners with chaos', () => {
  it("an injected 503 at rate 1: the partner is never called; the other partner's bid wins", async () => {
    const chaotic = await startPartner(bidAfter(5, 9));
    const steady = await startPartner(bidAfter(5, 1));
    open.push(chaotic, steady);
    const ex = await startExchange(
      exchangeConfig([partnerConfig('chaotic', chaotic.url, { chaos: { outcome: { rate: 1, status: 503 } } }), partnerConfig('steady', steady.url)]),
    );
    open.push(ex);
    const a = await post(ex.url, bidRequest());
    expect(a.status).toBe(200);
    const seat = (a.json!.seatbid as { bid: { price: number }[] }[])[0]!;
    expect(seat.bid[0]!.price).toBe(1);
    expect(chaotic.seen).toHaveLength(0);
    expect(steady.seen).toHaveLength(1);
    const ev = ex.events.filter((e) => e.type === 'attempt' && e.operationId.endsWith('/chaotic'));
    expect(ev.map((e) => e.type === 'attempt' && [e.status, e.injected])).toEqual([[503, 'outcome']]);
  });

  it('a bad chaos config names the field', () => {
    expect(() =>
      resolveExchangeConfig(exchangeConfig([partnerConfig('p', 'http://127.0.0.1:1/', { chaos: { fault: { rate: 3, errorClass: 'reset' } } })])),
    ).toThrow(/partners\[0\]\.chaos\.fault\.rate/);
  });
});
