import type { ReceivedBid } from './answer.js';
import type { Bid, BidRequest, Imp } from './model.js';

/** One bid offered to the auction, with where it came from. */
export interface Candidate {
  /** The partner's position in the exchange's configuration (the tie-break). */
  readonly partnerIndex: number;
  readonly partner: string;
  readonly received: ReceivedBid;
  /** The response's currency (`cur`, default USD). */
  readonly currency: string;
  /** BidResponse.bidid (the `${AUCTION_BID_ID}` macro), null when absent. */
  readonly bidid: string | null;
}

/** Why a bid took no part in the auction. */
export type BidRejection =
  | 'missing_id' // Bid.id absent or not a string
  | 'unknown_imp' // Bid.impid names no impression of the request
  | 'bad_price' // price not a finite number > 0
  | 'below_floor' // price under Imp.bidfloor
  | 'currency' // the response's currency is not the auction's
  | 'group'; // seatbid.group = 1 (all-or-none) over several impressions: not supported, refused

export interface Winner {
  readonly imp: Imp;
  readonly candidate: Candidate;
  readonly bid: Bid;
  /** First price: the bid's own price. */
  readonly price: number;
  /** The highest other valid bid on the impression, or the floor, whichever is higher. */
  readonly minToWin: number;
  /** Valid bids the impression received (the winner included). */
  readonly competing: number;
}

/** What became of one candidate: it won, it was valid and lost to a higher (or equal, earlier) bid, or why it was refused. */
export type BidFate = 'won' | 'lost' | BidRejection;

export interface Selection {
  /** In the request's impression order; impressions without a valid bid have none. */
  readonly winners: readonly Winner[];
  readonly validBids: number;
  readonly rejected: Readonly<Partial<Record<BidRejection, number>>>;
  /** The fate of each candidate, in the order the candidates were given. */
  readonly fates: readonly BidFate[];
}

/**
 * First-price auction per impression. A bid takes part when it has a string `id`, names
 * an impression of the request, has a finite price > 0, at or above the impression's
 * floor, in the auction's currency (no conversion: a floor in another currency is
 * refused when the request arrives). The highest price wins; a tie goes to the partner
 * listed first in the configuration, then to the earlier bid in its response — never to
 * arrival order, so the same answers always give the same winners.
 */
export function selectWinners(request: BidRequest, candidates: readonly Candidate[], currency: string): Selection {
  const imps = new Map<string, Imp>();
  for (const imp of request.imp) imps.set(imp.id, imp);
  const best = new Map<string, { c: Candidate; i: number; price: number; order: number; second: number; count: number }>();
  const rejected: Partial<Record<BidRejection, number>> = {};
  const fates = new Array<BidFate>(candidates.length).fill('lost');
  let i = -1;
  const reject = (r: BidRejection): void => {
    rejected[r] = (rejected[r] ?? 0) + 1;
    fates[i] = r;
  };
  const multi = request.imp.length > 1;
  let valid = 0;
  let order = 0;
  // Candidates in partner order, then response order (a stable sort): a strict `>` keeps the first of equals.
  const sorted = candidates.map((_, k) => k).sort((a, b) => candidates[a]!.partnerIndex - candidates[b]!.partnerIndex);
  for (const k of sorted) {
    const c = candidates[k]!;
    i = k;
    order++;
    const bid = c.received.bid;
    if (typeof bid.id !== 'string' || bid.id.length === 0) {
      reject('missing_id');
      continue;
    }
    const imp = typeof bid.impid === 'string' ? imps.get(bid.impid) : undefined;
    if (imp === undefined) {
      reject('unknown_imp');
      continue;
    }
    const price = bid.price;
    if (typeof price !== 'number' || !Number.isFinite(price) || price <= 0) {
      reject('bad_price');
      continue;
    }
    if (c.currency !== currency) {
      reject('currency');
      continue;
    }
    if (c.received.group && multi) {
      reject('group');
      continue;
    }
    const floor = imp.bidfloor ?? 0;
    if (price < floor) {
      reject('below_floor');
      continue;
    }
    valid++;
    const cur = best.get(imp.id);
    if (cur === undefined) best.set(imp.id, { c, i: k, price, order, second: floor, count: 1 });
    else {
      cur.count++;
      if (price > cur.price) {
        cur.second = Math.max(cur.second, cur.price);
        cur.c = c;
        cur.i = k;
        cur.price = price;
        cur.order = order;
      } else cur.second = Math.max(cur.second, price);
    }
  }
  const winners: Winner[] = [];
  for (const imp of request.imp) {
    const b = best.get(imp.id);
    if (b === undefined) continue;
    winners.push({ imp, candidate: b.c, bid: b.c.received.bid, price: b.price, minToWin: b.second, competing: b.count });
    fates[b.i] = 'won';
  }
  return { winners, validBids: valid, rejected, fates };
}
