// A partner's circuit breaker, counted from the partner's own request log. The exchange
// runs on a test clock: the cool-down and the partner's timeout pass when the test moves
// time, never on the wall clock (the sockets are real; only waiting for them is).
import type { ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import type { PartnerBreakerChange } from '../../src/rtb/exchange.js';
import { createTestClock } from '../../src/testing/index.js';
import {
  answer,
  bidBody,
  bidRequest,
  exchangeConfig,
  partnerConfig,
  post,
  startExchange,
  startPartner,
  untilSocket as until,
  type PartnerSeen,
} from './helpers.js';

/** No dry-run auctions before listening: on a clock that stands still, the stand-in's unanswered calls would never time out. */
const NO_WARMUP = { warmup: false } as const;

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
    const clock = createTestClock();
    const ex = await startExchange(
      exchangeConfig(
        [
          partnerConfig('failing', failing.url, { breaker: { minimumThroughput: 5, failureRatio: 0.5, windowMs: 10_000, openMs: 400 } }),
          partnerConfig('steady', steady.url, { breaker: { minimumThroughput: 5, openMs: 400 } }),
        ],
        NO_WARMUP,
      ),
      { onBreakerStateChange: (c) => changes.push(c), clock },
    );
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
    expect(s.usedMs).toBeLessThan(100); // skipped, not waited for (the clock stood still: no timer ended an auction)

    // Just before the end of the cool-down the circuit is still open.
    clock.advance(399);
    expect((await post(ex.url, bidRequest())).status).toBe(200);
    expect(failing.seen).toHaveLength(5);
    expect(changes).toHaveLength(1);

    // After the cool-down: exactly one trial (two auctions at once, one gets through); it fails → open again.
    clock.advance(51);
    await Promise.all([post(ex.url, bidRequest()), post(ex.url, bidRequest())]);
    expect(failing.seen).toHaveLength(6);
    await post(ex.url, bidRequest());
    expect(failing.seen).toHaveLength(6);
    expect(changes.slice(1).map((c) => `${c.from}→${c.to}:${c.reason}`)).toEqual(['open→half_open:open_elapsed', 'half_open→open:trial_failure']);

    // The partner recovers: the next trial succeeds and closes the circuit; every auction reaches it again.
    healthy = true;
    clock.advance(450);
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
    const clock = createTestClock();
    const ex = await startExchange(
      exchangeConfig([partnerConfig('p', p.url, { timeoutMs: 40, breaker: { minimumThroughput: 4, failureRatio: 0.75, openMs: 60_000 } })], NO_WARMUP),
      { clock },
    );
    open.push(ex);
    for (let i = 0; i < 6; i++) await post(ex.url, bidRequest());
    expect(ex.exchange.stats().partners[0]!.breaker).toBe('closed'); // six no-bids: all successes
    mode = '400';
    await post(ex.url, bidRequest());
    mode = 'garbage';
    await post(ex.url, bidRequest());
    mode = 'hang';
    expect(ex.exchange.stats().partners[0]!.breaker).toBe('closed'); // 2 failures of 8
    for (let i = 0; i < 16; i++) {
      // The partner holds the request: the auction ends when its timeout passes on the exchange's clock.
      const seen = p.seen.length;
      const auction = post(ex.url, bidRequest());
      await until('the partner has the request', () => p.seen.length > seen);
      clock.advance(40);
      expect((await auction).status).toBe(204);
    }
    // 6 successes; failures 2 + timeouts until failures/calls ≥ 0.75 → 18 failures, 24 calls.
    const st = ex.exchange.stats().partners[0]!;
    expect(st.breaker).toBe('open');
    expect(p.seen).toHaveLength(24);
    expect(st.errorKinds).toEqual({ 'status:400': 1, malformed: 1 });
    expect(st.timeouts).toBe(16);
  });

  it('an answer read within 5 ms of its cut (this process was busy) is no failure; one 10 ms late, or none, is', async () => {
    let held: { res: ServerResponse; s: PartnerSeen } | null = null;
    const p = await startPartner((_q, res, _n, s) => {
      held = { res, s };
    });
    open.push(p);
    const clock = createTestClock();
    const ex = await startExchange(
      exchangeConfig(
        [partnerConfig('p', p.url, { timeoutMs: 40, lateGraceMs: 50, breaker: { minimumThroughput: 4, failureRatio: 0.5, openMs: 60_000 } })],
        NO_WARMUP,
      ),
      { clock },
    );
    open.push(ex);
    const stats = () => ex.exchange.stats().partners[0]!;
    const one = async (lateByMs: number): Promise<void> => {
      held = null;
      const late = stats().late;
      const auction = post(ex.url, bidRequest());
      await until('the partner has the request', () => held !== null);
      const h = held!;
      if (lateByMs === 0) {
        // The answer is on its way when the cut fires: the exchange reads it only after its timers.
        answer(h.res, 200, bidBody(h.s, 1));
        clock.advance(40);
        expect((await auction).status).toBe(204);
      } else {
        clock.advance(40);
        expect((await auction).status).toBe(204);
        clock.advance(lateByMs);
        answer(h.res, 200, bidBody(h.s, 1));
      }
      await until('the late answer is read', () => stats().late === late + 1);
    };
    for (let i = 0; i < 6; i++) await one(0);
    expect(stats()).toMatchObject({ timeouts: 6, late: 6, breaker: 'closed' });
    // 10 ms after the cut: the partner's own lateness; four of them open the circuit.
    for (let i = 0; i < 3; i++) await one(10);
    expect(stats().breaker).toBe('closed');
    await one(10);
    expect(stats()).toMatchObject({ timeouts: 10, late: 10, breaker: 'open' });
  });
});
