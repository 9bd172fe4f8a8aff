// A burst of auctions that share one deadline, beside partners that never answer: every
// auction due is answered before any partner call due at the same moment is cut, so the
// last answer of the burst does not wait behind the cleanup of the ones before it.
import { afterEach, describe, expect, it } from 'vitest';
import { TimerLanes } from '../../src/rtb/timer-lanes.js';
import { createTestClock } from '../../src/testing/index.js';
import {
  answer,
  bidRequest,
  exchangeConfig,
  hang,
  partnerConfig,
  post,
  startExchange,
  startPartner,
  untilSocket as until,
  type PartnerReply,
} from './helpers.js';

/** Lets the queued macrotasks (setImmediate) run. */
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

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
    const ex = await startExchange(
      exchangeConfig([partnerConfig('a', a.url, { timeoutMs: 500 }), partnerConfig('b', b.url, { timeoutMs: 500 })], {
        warmup: false,
        auctionTimeoutMs: 80,
        reserveMs: 10,
      }),
      {
        clock,
        onAuction: (s) => order.push(`answer ${s.status}`),
        onEvent: (e) => {
          if (e.type === 'attempt') order.push(`cut ${e.errorClass}`);
        },
      },
    );
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

/** Bids at once on every impression, with a burl back to this partner (a GET, logged with a null body). */
const bidsWithBurl =
  (base: string): PartnerReply =>
  (req, res, _n, s) => {
    if (req.method !== 'POST') return answer(res, 200);
    const imps = (s.body?.imp as { id: string }[] | undefined) ?? [];
    answer(
      res,
      200,
      JSON.stringify({
        id: s.body?.id,
        seatbid: [{ seat: 's', bid: imps.map((imp, i) => ({ id: `b${i}`, impid: imp.id, price: 1.5, adm: '<ad/>', burl: `${base}/bill?id=\${AUCTION_ID}` })) }],
      }),
    );
  };

describe('the notices of a burst of auctions', () => {
  it('are handed over once the burst is answered, not between its answers', async () => {
    const bids = await startPartner(hang);
    bids.reply = bidsWithBurl(bids.url.replace('/bid', ''));
    const hangs = await startPartner(hang);
    open.push(bids, hangs);
    const clock = createTestClock();
    const ex = await startExchange(
      exchangeConfig([partnerConfig('bids', bids.url, { timeoutMs: 500 }), partnerConfig('hangs', hangs.url, { timeoutMs: 500 })], {
        warmup: false,
        auctionTimeoutMs: 80,
        reserveMs: 10,
        notices: { win: 'source', billing: 'on-win', store: 'memory' },
      }),
      { clock },
    );
    open.push(ex);
    const sent = (): number => ex.exchange.stats().notices.billing.sent;
    // Two groups of 8 auctions whose deadlines are 3 ms apart; the hanging partner keeps
    // each open until its deadline, the other partner's bid is in at once.
    const first = Array.from({ length: 8 }, () => post(ex.url, bidRequest({ tmax: 200 })));
    await until('the first group is out', () => hangs.seen.length === 8 && ex.exchange.stats().partners[0]!.bidAnswers === 8);
    clock.advance(3);
    const second = Array.from({ length: 8 }, () => post(ex.url, bidRequest({ tmax: 200 })));
    await until('the second group is out', () => hangs.seen.length === 16 && ex.exchange.stats().partners[0]!.bidAnswers === 16);
    clock.advance(77);
    for (const r of await Promise.all(first)) expect(r.status).toBe(200);
    // The first group is answered; the second is due in 3 ms: its notices wait.
    await turn();
    expect(sent()).toBe(0);
    expect(ex.exchange.stats().auctions.inFlight).toBe(8);
    clock.advance(3);
    for (const r of await Promise.all(second)) expect(r.status).toBe(200);
    await until('every billing notice is handed over', () => sent() === 16);
    await until('every billing notice arrives', () => bids.seen.length === 32);
  });
});

describe('TimerLanes', () => {
  it('runs work without a deadline once no answer is due within quietMs', async () => {
    const clock = createTestClock();
    const lanes = new TimerLanes(clock, { quietMs: 10, maxDeferMs: 50 });
    const log: string[] = [];
    // Nothing due: after the current turn, not inside it.
    lanes.whenQuiet(() => log.push('work 1'));
    expect(log).toEqual([]);
    await turn();
    expect(log).toEqual(['work 1']);
    // Due in 20 ms, beyond quietMs: at once too.
    lanes.answers.setTimer(() => log.push('answer@20'), 20);
    lanes.whenQuiet(() => log.push('work 2'));
    await turn();
    expect(log).toEqual(['work 1', 'work 2']);
    // Due within quietMs: after that answer.
    clock.advance(12);
    lanes.whenQuiet(() => log.push('work 3'));
    await turn();
    expect(log).toEqual(['work 1', 'work 2']);
    clock.advance(8);
    await turn();
    expect(log).toEqual(['work 1', 'work 2', 'answer@20', 'work 3']);
    // A call timer is not an answer: it does not hold work back.
    lanes.calls.setTimer(() => log.push('call@25'), 5);
    lanes.whenQuiet(() => log.push('work 4'));
    await turn();
    expect(log.at(-1)).toBe('work 4');
    // An answer cancelled (its auction ended early) holds nothing back.
    const cancel = lanes.answers.setTimer(() => log.push('cancelled'), 3);
    lanes.whenQuiet(() => log.push('work 5'));
    await turn();
    expect(log.at(-1)).toBe('work 4');
    cancel();
    lanes.whenQuiet(() => log.push('work 6'));
    await turn();
    expect(log.slice(-2)).toEqual(['work 5', 'work 6']);
    expect(lanes.nextAnswerAt()).toBe(Infinity);
  });

  it('runs it at the latest maxDeferMs after it was queued, when answers keep coming', async () => {
    const clock = createTestClock();
    const lanes = new TimerLanes(clock, { quietMs: 10, maxDeferMs: 50 });
    const log: string[] = [];
    for (let t = 2; t <= 200; t += 4) lanes.answers.setTimer(() => log.push(`answer@${clock.now()}`), t);
    lanes.whenQuiet(() => log.push(`work@${clock.now()}`));
    for (let t = 1; t <= 60; t++) {
      clock.advance(1);
      await turn();
    }
    expect(log.filter((l) => l.startsWith('work'))).toEqual(['work@50']);
    expect(log.indexOf('work@50')).toBe(log.indexOf('answer@50') + 1);
    expect(lanes.waiting).toBe(0);
  });

  it('keeps no answer keys past their time, when nobody asks for the next answer', () => {
    const clock = createTestClock();
    const lanes = new TimerLanes(clock);
    // Many auctions over time, half of them ended early (their deadline cancelled); no work waits.
    for (let t = 0; t < 5_000; t++) {
      const cancel = lanes.answers.setTimer(() => {}, 50);
      if (t % 2 === 0) cancel();
      clock.advance(1);
    }
    expect(lanes['answerKeys'].length).toBeLessThanOrEqual(51);
    expect(lanes.nextAnswerAt()).toBe(5_001); // the last one left alive, set at 4,951
  });

  it('runQuiet() runs everything waiting at once, in order, and an error does not stop the rest', async () => {
    const clock = createTestClock();
    const lanes = new TimerLanes(clock);
    const log: string[] = [];
    lanes.answers.setTimer(() => log.push('answer'), 1);
    lanes.whenQuiet(() => log.push('a'));
    lanes.whenQuiet(() => {
      throw new Error('boom');
    });
    lanes.whenQuiet(() => log.push('c'));
    const errors: unknown[] = [];
    const onError = (e: unknown): void => {
      errors.push(e);
    };
    process.prependListener('uncaughtException', onError);
    try {
      lanes.runQuiet();
      expect(log).toEqual(['a', 'c']);
      await Promise.resolve();
      await turn();
    } finally {
      process.off('uncaughtException', onError);
    }
    expect(errors.map((e) => (e as Error).message)).toEqual(['boom']);
    expect(lanes.waiting).toBe(0);
    // The cap's timer went with them: advancing past it runs nothing twice.
    clock.advance(60);
    expect(log).toEqual(['a', 'c', 'answer']);
  });

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
