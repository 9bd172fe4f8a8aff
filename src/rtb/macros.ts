// OpenRTB 2.6 §4.4 substitution macros, replaced by the exchange in `nurl`, `burl`,
// `lurl` and `adm` ("OpenRTB compliance exchanges must support all macros for which data
// is available and support substitution in both markup and URLs for win and billing
// notification").

/** The values of one winning (or losing) bid. Absent values become the empty string. */
export interface MacroValues {
  /** `${AUCTION_ID}`: BidRequest.id. */
  readonly auctionId: string;
  /** `${AUCTION_BID_ID}`: BidResponse.bidid (the bidder's response id, not Bid.id). */
  readonly bidId?: string | null;
  /** `${AUCTION_IMP_ID}`: Imp.id. */
  readonly impId: string;
  /** `${AUCTION_SEAT_ID}`: the bidder seat the bid was made for. */
  readonly seatId?: string | null;
  /** `${AUCTION_AD_ID}`: Bid.adid. */
  readonly adId?: string | null;
  /** `${AUCTION_PRICE}`: the clearing price, same currency and units as the bid (first price: the bid). */
  readonly price?: number | null;
  /** `${AUCTION_CURRENCY}`. */
  readonly currency?: string | null;
  /** `${AUCTION_MBR}`: clearing price / bid price. */
  readonly mbr?: number | null;
  /** `${AUCTION_LOSS}`: loss reason code (0 = bid won). */
  readonly loss?: number | null;
  /** `${AUCTION_MIN_TO_WIN}`: the minimum bid that would have won. */
  readonly minToWin?: number | null;
  /** `${AUCTION_MULTIPLIER}`: impressions won (DOOH); absent → empty. */
  readonly multiplier?: number | null;
  /** `${AUCTION_IMP_TS}`: when the impression happened, Unix ms. */
  readonly impTs?: number | null;
}

/** The macro names relent substitutes (2.6 §4.4). */
export const AUCTION_MACROS: readonly string[] = Object.freeze([
  'AUCTION_ID',
  'AUCTION_BID_ID',
  'AUCTION_IMP_ID',
  'AUCTION_SEAT_ID',
  'AUCTION_AD_ID',
  'AUCTION_PRICE',
  'AUCTION_CURRENCY',
  'AUCTION_MBR',
  'AUCTION_LOSS',
  'AUCTION_MIN_TO_WIN',
  'AUCTION_MULTIPLIER',
  'AUCTION_IMP_TS',
]);

/** A price or ratio without exponent notation: up to 6 decimals, trailing zeros dropped. */
export function formatDecimal(n: number): string {
  if (!Number.isFinite(n)) return '';
  const s = n.toFixed(6);
  return s.includes('.') ? s.replace(/\.?0+$/, '') : s;
}

/**
 * Percent-encodes a value for URLs and markup alike: encodeURIComponent plus `!'()*`, so
 * a substituted value can end neither a URL component nor an HTML/XML attribute (an id
 * from the source cannot inject markup into `adm`).
 */
function encode(v: string): string {
  return encodeURIComponent(v).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

function valueOf(name: string, v: MacroValues): string | undefined {
  switch (name) {
    case 'AUCTION_ID':
      return v.auctionId;
    case 'AUCTION_BID_ID':
      return v.bidId ?? '';
    case 'AUCTION_IMP_ID':
      return v.impId;
    case 'AUCTION_SEAT_ID':
      return v.seatId ?? '';
    case 'AUCTION_AD_ID':
      return v.adId ?? '';
    case 'AUCTION_PRICE':
      return v.price === undefined || v.price === null ? '' : formatDecimal(v.price);
    case 'AUCTION_CURRENCY':
      return v.currency ?? '';
    case 'AUCTION_MBR':
      return v.mbr === undefined || v.mbr === null ? '' : formatDecimal(v.mbr);
    case 'AUCTION_LOSS':
      return v.loss === undefined || v.loss === null ? '' : String(v.loss);
    case 'AUCTION_MIN_TO_WIN':
      return v.minToWin === undefined || v.minToWin === null ? '' : formatDecimal(v.minToWin);
    case 'AUCTION_MULTIPLIER':
      return v.multiplier === undefined || v.multiplier === null ? '' : formatDecimal(v.multiplier);
    case 'AUCTION_IMP_TS':
      return v.impTs === undefined || v.impTs === null ? '' : String(Math.round(v.impTs));
    default:
      return undefined;
  }
}

const MACRO = /\$\{(AUCTION_[A-Z_]+)(:[A-Za-z0-9_]+)?\}/g;

/**
 * Replaces `${AUCTION_…}` macros. Known macros without data become the empty string (as
 * 2.6 does for a withheld `${AUCTION_PRICE}` in loss notices). A macro with an
 * encoding suffix (`${AUCTION_PRICE:B64}`) is left as it is: the algorithm must be agreed
 * with the partner and relent knows none. Unknown `${AUCTION_…}` names are left as well.
 */
export function substituteMacros(text: string, values: MacroValues): string {
  if (!text.includes('${AUCTION_')) return text;
  return text.replace(MACRO, (whole: string, name: string, suffix: string | undefined) => {
    if (suffix !== undefined) return whole;
    const v = valueOf(name, values);
    return v === undefined ? whole : encode(v);
  });
}
