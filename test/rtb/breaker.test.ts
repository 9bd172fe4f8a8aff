// A partner's circuit breaker, counted from the partner's own request log.
import { afterEach, describe, expect, it } from 'vitest';
import type { PartnerBreakerChange } from '../../src/rtb/exchange.js';
import { answer, bidBody, bidRequest, exchangeConfig, partnerConfig, post, sleep, startExchange, startPartner } from './helpers.js';

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

describe('per-partner circuit breaker', () => {
  it('opens after the configured volume of 500s, sends nothing while open, one trial after the cool-down, closes when the partner recovers', async () => {
    let healthy = false;
    const failing = await startPartner((_q, res, _n, s) => (healthy ? answer(res, 200, bidBody(s, 2)) : answer(res, 500)));
    const steady = await startPartner((_q, res, _n, s) => answer(res, 200, bidBody(s, 1)));
    open.push(failing, steady);
    const changes: PartnerBreakerChange[] = [];
    const ex = await startExchange(exchangeConfig([
      partnerConfig('failing', failing.url, { breaker: { minimumThroughput: 5, failureRatio: 0.5, windowMs: 10_000, openMs: 400 } }),
      partnerConfig('steady', steady.url, { breaker: { minimumThroughput: 5, openMs: 400 } }),
    ]), { onBreakerStateChange: (c) => changes.push(c) });
    open.push(ex);

    // 5 failures: the configured volume; the 5th opens the circuit.
    for (let i = 0; i < 5; i++) expect((await post(ex.url, bidRequest())).status).toBe(200);
    expect(failing.seen).toHaveLength(5);
    expect(changes.map((c) => `${c.partner}:${c.from}→${c.to}`)).toEqual(['failing:closed→open']);

    // While open: auctions go on with the other partner; the failing one receives nothing.
    for (let i = 0; i < 10; i++) expect((await post(ex.url, bidRequest())).status).toBe(200);
    expect(failing.seen).toHaveLength(5);
    const st = ex.exchange.stats().partners[0]!;
    expect(st.breaker).toBe('open');
    expect(st.skipped.circuit_open).toBe(10);
    const s = ex.summaries[ex.summaries.length - 1]!;
    expect(s.skipped).toEqual({ circuit_open: 1 });
    expect(s.usedMs).toBeLessThan(100); // skipped, not waited for

    // After the cool-down: exactly one trial (two auctions at once, one gets through); it fails → open again.
    await sleep(450);
    await Promise.all([post(ex.url, bidRequest()), post(ex.url, bidRequest())]);
    expect(failing.seen).toHaveLength(6);
    await post(ex.url, bidRequest());
    expect(failing.seen).toHaveLength(6);
    expect(changes.slice(1).map((c) => `${c.from}→${c.to}:${c.reason}`)).toEqual(['open→half_open:open_elapsed', 'half_open→open:trial_failure']);

    // The partner recovers: the next trial succeeds and closes the circuit; every auction reaches it again.
    healthy = true;
    await sleep(450);
    const trial = await post(ex.url, bidRequest());
    expect(trial.status).toBe(200);
    expect(failing.seen).toHaveLength(7);
    expect(changes[changes.length - 1]).toMatchObject({ partner: 'failing', from: 'half_open', to: 'closed', reason: 'trial_success' });
    for (let i = 0; i < 5; i++) await post(ex.url, bidRequest());
    expect(failing.seen).toHaveLength(12);
    expect(ex.exchange.stats().partners[0]!.breaker).toBe('closed');
    // Its 2.0 bids now win over steady's 1.0.
    const last = await post(ex.url, bidRequest());
    expect((last.json!.seatbid as { bid: { price: number }[] }[])[0]!.bid[0]!.price).toBe(2);
  });

  it('counts a 400, a malformed 200 and timeouts as failures, no-bids as successes', async () => {
    let mode: 'nobid' | '400' | 'garbage' | 'hang' = 'nobid';
    const p = await startPartner((_q, res) => {
      if (mode === 'nobid') answer(res, 204);
      else if (mode === '400') answer(res, 400);
      else if (mode === 'garbage') answer(res, 200, '<html>');
    });
    open.push(p);
    const ex = await startExchange(exchangeConfig([
      partnerConfig('p', p.url, { timeoutMs: 40, breaker: { minimumThroughput: 4, failureRatio: 0.75, openMs: 60_000 } }),
    ]));
    open.push(ex);
    for (let i = 0; i < 6; i++) await post(ex.url, bidRequest());
    expect(ex.exchange.stats().partners[0]!.breaker).toBe('closed'); // six no-bids: all successes
    mode = '400';
    await post(ex.url, bidRequest());
    mode = 'garbage';
    await post(ex.url, bidRequest());
    mode = 'hang';
    expect(ex.exchange.stats().partners[0]!.breaker).toBe('closed'); // 2 failures of 8
    for (let i = 0; i < 16; i++) await post(ex.url, bidRequest());
    // 6 successes; failures 2 + timeouts until failures/calls ≥ 0.75 → 18 failures, 24 calls.
    const st = ex.exchange.stats().partners[0]!;
    expect(st.breaker).toBe('open');
    expect(p.seen).toHaveLength(24);
    expect(st.errorKinds).toEqual({ 'status:400': 1, malformed: 1 });
    expect(st.timeouts).toBe(16);
  });
});
