import type { BreakerOutcome } from '../core/breaker.js';
import type { Bid, BidResponse } from './model.js';
import { isNbr } from './nbr.js';

/** The form a no-bid took (OpenRTB 2.6 §4, §4.2.1, and its implementation guide §7.1). */
export type NoBidForm =
  | 'http_204' // HTTP 204 No Content ("most economical")
  | 'empty_body' // HTTP 200 with an empty body ("an empty HTTP response constitutes a no-bid")
  | 'empty_object' // {}
  | 'no_seatbid' // an object without `seatbid` (and without nbr)
  | 'empty_seatbid' // `seatbid: []`, or seats whose `bid` arrays are all empty
  | 'nbr'; // a BidResponse with a no-bid reason

/** Why a partner's answer could not be used. */
export type AnswerError =
  | 'status' // any status other than 200 and 204
  | 'malformed' // a 200 whose body is not a BidResponse (not JSON, wrong types)
  | 'too_large' // the body is over the size limit: never parsed
  | 'id_mismatch'; // BidResponse.id is not the request's id: an answer to another auction

/** A bid as the auction sees it: the bid plus where it came from. */
export interface ReceivedBid {
  readonly bid: Bid;
  /** `seatbid.seat`, null when absent. */
  readonly seat: string | null;
  /** `seatbid.group` = 1: the seat wants all or none of its impressions. */
  readonly group: boolean;
}

/** A partner's answer, classified once (see `classifyBidAnswer`). */
export type PartnerAnswer =
  | {
      readonly kind: 'bid';
      readonly status: 200;
      readonly response: BidResponse;
      readonly bids: readonly ReceivedBid[];
      /** `BidResponse.cur`, default "USD". */
      readonly currency: string;
      readonly bytes: number;
    }
  | {
      readonly kind: 'no_bid';
      readonly status: 200 | 204;
      readonly form: NoBidForm;
      /** The reason, when the partner gave one (unknown values kept as they are). */
      readonly nbr: number | null;
      readonly bytes: number;
    }
  | {
      readonly kind: 'error';
      readonly status: number;
      readonly error: AnswerError;
      /** One line for logs (never the body). */
      readonly detail: string;
      readonly bytes: number;
    };

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function error(status: number, e: AnswerError, detail: string, bytes: number): PartnerAnswer {
  return { kind: 'error', status, error: e, detail, bytes };
}

function noBid(status: 200 | 204, form: NoBidForm, nbr: number | null, bytes: number): PartnerAnswer {
  return { kind: 'no_bid', status, form, nbr, bytes };
}

/** The answer for a body over the size limit (the transport stops reading it; it is never parsed). */
export function tooLargeAnswer(status: number, bytes: number, limit: number): PartnerAnswer {
  return error(status, 'too_large', `the body is over the limit of ${limit} bytes`, bytes);
}

function isBlank(body: string): boolean {
  for (let i = 0; i < body.length; i++) {
    const c = body.charCodeAt(i);
    if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) return false;
  }
  return true;
}

/**
 * THE classification of a partner's answer to a bid request, in one place:
 *
 * | answer                                                        | kind    | breaker |
 * |---------------------------------------------------------------|---------|---------|
 * | 204 (any body is ignored)                                     | no_bid  | success |
 * | 200, empty body (whitespace only)                             | no_bid  | success |
 * | 200, `{}`                                                     | no_bid  | success |
 * | 200, object without `seatbid` / `seatbid: []` / no bid in any seat | no_bid | success |
 * | 200, any of the above with an integer `nbr` (any value ≥ 0)   | no_bid  | success |
 * | 200 with at least one bid in `seatbid[].bid[]`                | bid     | success |
 * | any other status: 1xx–5xx but 200 and 204 (400 included)      | error   | failure |
 * | 200 that is not a BidResponse (not JSON, an array, `seatbid` not an array, a bid not an object, `nbr` not an integer, `cur`/`id` not strings) | error (malformed) | failure |
 * | 200 whose `id` is not the request's id                        | error (id_mismatch) | failure |
 * | a body over the size limit (transport, `tooLargeAnswer`)      | error (too_large) | failure |
 *
 * A malformed 200 is an error, not the no-bid that OpenRTB 2.6 §4 lets an exchange
 * "interpret" it as: the auction takes no bid from it either way, but counting it as an
 * error makes a partner that sends garbage visible in the metrics, and its breaker
 * counts it as a failure — a partner whose every answer is unusable costs the auction a
 * connection and a parse for nothing, exactly like one that answers 500. Likewise a 400
 * (the partner rejects our requests) is a breaker failure here, although the core's
 * generic `breakerOutcome` counts 4xx as "the dependency answered": for an auction a call
 * that can never yield a bid is a failed call (as Prebid Server counts timeouts and
 * non-200/204 statuses). Bids and no-bids are successes: the partner works.
 *
 * Individual bids are checked later, against the request (price, impression, floor,
 * currency): a response with only invalid bids is still a `bid` answer here.
 */
export function classifyBidAnswer(status: number, raw: Buffer | string | null, requestId?: string | null): PartnerAnswer {
  const bytes = raw === null ? 0 : typeof raw === 'string' ? Buffer.byteLength(raw) : raw.length;
  if (status === 204) return noBid(204, 'http_204', null, bytes);
  if (status !== 200) return error(status, 'status', `status ${status}`, bytes);
  const body = raw === null ? null : typeof raw === 'string' ? raw : raw.toString('utf8');
  if (body === null || isBlank(body)) return noBid(200, 'empty_body', null, bytes);
  let v: unknown;
  try {
    v = JSON.parse(body);
  } catch {
    return error(200, 'malformed', 'the body is not JSON', bytes);
  }
  if (!isObject(v)) return error(200, 'malformed', 'the body is not a JSON object', bytes);
  if (v.id !== undefined && typeof v.id !== 'string') return error(200, 'malformed', '`id` is not a string', bytes);
  if (typeof v.id === 'string' && requestId !== undefined && requestId !== null && v.id !== requestId) {
    return error(200, 'id_mismatch', "`id` is not the bid request's id", bytes);
  }
  let nbr: number | null = null;
  if (v.nbr !== undefined && v.nbr !== null) {
    if (!isNbr(v.nbr)) return error(200, 'malformed', '`nbr` is not an integer >= 0', bytes);
    nbr = v.nbr;
  }
  const cur = v.cur;
  if (cur !== undefined && (typeof cur !== 'string' || cur.length === 0)) return error(200, 'malformed', '`cur` is not a currency code', bytes);
  const seatbid = v.seatbid;
  if (seatbid === undefined || seatbid === null) {
    if (nbr !== null) return noBid(200, 'nbr', nbr, bytes);
    return noBid(200, Object.keys(v).length === 0 ? 'empty_object' : 'no_seatbid', null, bytes);
  }
  if (!Array.isArray(seatbid)) return error(200, 'malformed', '`seatbid` is not an array', bytes);
  const bids: ReceivedBid[] = [];
  for (let i = 0; i < seatbid.length; i++) {
    const sb: unknown = seatbid[i];
    if (!isObject(sb)) return error(200, 'malformed', `\`seatbid[${i}]\` is not an object`, bytes);
    const list = sb.bid;
    if (!Array.isArray(list)) return error(200, 'malformed', `\`seatbid[${i}].bid\` is not an array`, bytes);
    const seat = typeof sb.seat === 'string' && sb.seat.length > 0 ? sb.seat : null;
    const group = sb.group === 1;
    for (let j = 0; j < list.length; j++) {
      const b: unknown = list[j];
      if (!isObject(b)) return error(200, 'malformed', `\`seatbid[${i}].bid[${j}]\` is not an object`, bytes);
      bids.push({ bid: b as unknown as Bid, seat, group });
    }
  }
  if (bids.length === 0) return noBid(200, nbr !== null ? 'nbr' : 'empty_seatbid', nbr, bytes);
  return { kind: 'bid', status: 200, response: v as unknown as BidResponse, bids, currency: typeof cur === 'string' ? cur : 'USD', bytes };
}

/** What an answer tells the partner's circuit breaker (see the table above). */
export function answerBreakerOutcome(answer: PartnerAnswer): BreakerOutcome {
  return answer.kind === 'error' ? 'failure' : 'success';
}
