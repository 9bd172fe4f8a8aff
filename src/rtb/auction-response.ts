// What an auction answers once it has its winners: the BidResponse (the winning bids with
// their macros substituted, grouped by seat) and the notices to fire after the answer is
// written — win (nurl), billing (burl) and loss (lurl) — or the won impressions kept for
// a billing event. The auction itself (fan-out, collection, the tmax cut) is auction.ts.
import type { ExchangeCore } from './exchange-core.js';
import { substituteMacros, type MacroValues } from './macros.js';
import type { Bid, BidRequest } from './model.js';
import { noticeQueueKey, type Billable, type Notice, type NoticeOutlet } from './notice-model.js';
import type { BidFate, Candidate, Selection } from './select.js';

/** Loss reason codes (OpenRTB 2.6 §5.25) of the losing bids whose lurl the exchange calls. */
export const LOSS_REASONS = Object.freeze({ invalidBidResponse: 3, belowAuctionFloor: 100, lostToHigherBid: 102 });

function lossCode(fate: BidFate): number {
  if (fate === 'lost') return LOSS_REASONS.lostToHigherBid;
  if (fate === 'below_floor') return LOSS_REASONS.belowAuctionFloor;
  return LOSS_REASONS.invalidBidResponse;
}

/** What the response builder needs of an auction. */
export interface AuctionFacts {
  /** The exchange's id of the auction (the response's `bidid`). */
  readonly id: string;
  readonly request: BidRequest;
  readonly currency: string;
}

/** Builds the response of an auction that has its winners, and the firing of its notices. */
export function buildResponse(
  core: ExchangeCore,
  a: AuctionFacts,
  sel: Selection,
  candidates: readonly Candidate[],
): { body: string | null; fire: (() => void) | null } {
  const winners = sel.winners;
  const cfg = core.config.notices;
  const request = a.request;
  const notices: Notice[] = [];
  const billable = request.test !== 1;
  if (billable && cfg.loss === 'exchange') lossNotices(a, sel, candidates, notices);
  if (winners.length === 0) return { body: null, fire: notices.length === 0 ? null : firing(core.notices, notices) };
  const seats = new Map<string, { seat: string; bid: Bid[] }>();
  for (const w of winners) {
    const c = w.candidate;
    const seat = c.received.seat ?? c.partner;
    const values: MacroValues = {
      auctionId: request.id,
      bidId: c.bidid,
      impId: w.imp.id,
      seatId: seat,
      adId: typeof w.bid.adid === 'string' ? w.bid.adid : null,
      price: w.price,
      currency: a.currency,
      mbr: 1,
      loss: 0,
      minToWin: w.minToWin,
      multiplier: multiplierOf(w.imp),
    };
    const { lurl: _lurl, nurl, burl, adm, ...rest } = w.bid;
    const out: Record<string, unknown> = { ...rest, price: w.price };
    const hasAdm = typeof adm === 'string';
    if (hasAdm) out.adm = substituteMacros(adm, values);
    if (typeof nurl === 'string') {
      // The exchange fires the win notice itself, unless it is the markup's source (no adm).
      if (cfg.win === 'exchange' && hasAdm) {
        if (billable) notices.push({ kind: 'win', partner: c.partner, key: noticeQueueKey('win', request.id, w.imp.id), url: substituteMacros(nurl, values) });
      } else out.nurl = substituteMacros(nurl, values);
    }
    if (typeof burl === 'string') {
      if (cfg.billing === 'source') out.burl = substituteMacros(burl, values);
      else if (billable && cfg.billing === 'on-win') {
        notices.push({
          kind: 'billing',
          partner: c.partner,
          key: noticeQueueKey('billing', request.id, w.imp.id),
          url: substituteMacros(burl, { ...values, impTs: Date.now() }),
        });
      } else if (billable) {
        const b: Billable = { partner: c.partner, requestId: request.id, impId: w.imp.id, burl, values };
        core.notices.keepBillable(b);
      }
    }
    const key = `${c.partnerIndex}\u0000${seat}`;
    let sb = seats.get(key);
    if (sb === undefined) {
      sb = { seat, bid: [] };
      seats.set(key, sb);
    }
    sb.bid.push(out as unknown as Bid);
    core.partners[c.partnerIndex]!.counters.bidsWon++;
  }
  const body = JSON.stringify({ id: request.id, bidid: a.id, cur: a.currency, seatbid: [...seats.values()] });
  return { body, fire: notices.length === 0 ? null : firing(core.notices, notices) };
}

/** Loss notices of the bids that carry an `lurl` and did not win (OpenRTB 2.6 §5.25 codes: 102, 100, 3). */
function lossNotices(a: AuctionFacts, sel: Selection, candidates: readonly Candidate[], out: Notice[]): void {
  const request = a.request;
  for (let i = 0; i < candidates.length; i++) {
    const fate = sel.fates[i]!;
    const c = candidates[i]!;
    const bid = c.received.bid;
    if (fate === 'won' || typeof bid.lurl !== 'string') continue;
    const impId = typeof bid.impid === 'string' ? bid.impid : '';
    const winner = sel.winners.find((w) => w.imp.id === impId);
    const floor = request.imp.find((imp) => imp.id === impId)?.bidfloor ?? null;
    const values: MacroValues = {
      auctionId: request.id,
      bidId: c.bidid,
      impId,
      seatId: c.received.seat ?? c.partner,
      adId: typeof bid.adid === 'string' ? bid.adid : null,
      // The clearing price is the winner's (empty when nothing won the impression).
      price: winner?.price ?? null,
      currency: a.currency,
      loss: lossCode(fate),
      minToWin: winner?.price ?? floor,
    };
    const bidId = typeof bid.id === 'string' ? bid.id : String(i);
    out.push({ kind: 'loss', partner: c.partner, key: noticeQueueKey('loss', request.id, impId, bidId), url: substituteMacros(bid.lurl, values) });
  }
}

function firing(outlet: NoticeOutlet, notices: readonly Notice[]): () => void {
  return () => {
    for (const n of notices) outlet.send(n);
  };
}

function multiplierOf(imp: { readonly [k: string]: unknown }): number | null {
  const qty = imp.qty;
  if (typeof qty === 'object' && qty !== null) {
    const m = (qty as { multiplier?: unknown }).multiplier;
    if (typeof m === 'number' && Number.isFinite(m)) return m;
  }
  return null;
}
