// A burst of auctions that share one deadline, beside partners that never answer: every
// auction due is answered before any partner call due at the same moment is cut, so the
// last answer of the burst does not wait behind the cleanup of the ones before it.
import { afterEach, describe, expect, it } from 'vitest';
import { TimerLanes } from '../../src/rtb/timer-lanes.js';
import { createTestClock } from '../../src/testing/index.js';
import { bidRequest, exchangeConfig, hang, partnerConfig, post, startExchange, startPartner, untilSocket as until } from './helpers.js';

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

describe('auctions that share a deadline', () => {
  it('are all answered before the partner calls due at the same moment are cut', async () => {
    const a = await startPartner(hang);
    const b = await startPartner(hang);
    open.push(a, b);
    const clock = createTestClock();
    const order: string[] = [];
    const ex = await startExchange(exchangeConfig([
      partnerConfig('a', a.url, { timeoutMs: 500 }),
      partnerConfig('b', b.url, { timeoutMs: 500 }),
    ], { warmup: false, auctionTimeoutMs: 80, reserveMs: 10 }), {
      clock,
      onAuction: (s) => order.push(`answer ${s.status}`),
      onEvent: (e) => {
        if (e.type === 'attempt') order.push(`cut ${e.errorClass}`);
      },
    });
    open.push(ex);
    const answers = Array.from({ length: 16 }, () => post(ex.url, bidRequest({ tmax: 200 })));
    await until('every partner call is out', () => a.seen.length === 16 && b.seen.length === 16);
    expect(order).toEqual([]);
    clock.advance(80);
    for (const r of await Promise.all(answers)) expect(r.status).toBe(204);
    await until('every cut is counted', () => order.length === 48);
    expect(order.slice(0, 16)).toEqual(Array(16).fill('answer 204'));
    expect(order.slice(16)).toEqual(Array(32).fill('cut timeout'));
    expect(ex.exchange.stats().partners.map((p) => p.timeouts)).toEqual([16, 16]);
  });
});

describe('TimerLanes', () => {
  it('fires what is due by due time, the first lane before the second at the same time, never early, and not once cancelled', async () => {
    const clock = createTestClock();
    const lanes = new TimerLanes(clock);
    const log: string[] = [];
    lanes.calls.setTimer(() => log.push('call@10'), 10);
    lanes.answers.setTimer(() => log.push('answer@10'), 10);
    lanes.calls.setTimer(() => log.push('call@5'), 5);
    const cancel = lanes.answers.setTimer(() => log.push('cancelled@7'), 7);
    lanes.answers.setTimer(() => log.push('answer@20'), 20);
    cancel();
    clock.advance(4);
    await Promise.resolve();
    expect(log).toEqual([]);
    clock.advance(1);
    await Promise.resolve();
    expect(log).toEqual(['call@5']);
    clock.advance(5);
    await Promise.resolve();
    expect(log).toEqual(['call@5', 'answer@10', 'call@10']);
    // A timer set from inside a callback, earlier than the one armed, is armed for its own time.
    lanes.calls.setTimer(() => log.push('call@13'), 3);
    clock.advance(3);
    await Promise.resolve();
    expect(log.slice(3)).toEqual(['call@13']);
    expect(lanes.size).toBe(1);
    clock.advance(7);
    await Promise.resolve();
    expect(log.slice(4)).toEqual(['answer@20']);
    expect(lanes.size).toBe(0);
  });
});
