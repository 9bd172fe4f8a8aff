// No-bid reason codes (`BidResponse.nbr`), https://github.com/InteractiveAdvertisingBureau/openrtb. OpenRTB 2.6 has no
// list of its own and points to the OpenRTB 3.0 list; 2.5's list (§5.24) has the same
// values 0–10 with slightly different names. Values ≥ 500 are exchange-specific; values
// in 18–499 are unknown today but tolerated ("must tolerate new … enumerated list values").

export interface NoBidReasonEntry {
  readonly code: number;
  /** OpenRTB 2.5 §5.24 name; null for codes added after 2.5 (11–17). */
  readonly name25: string | null;
  /** OpenRTB 3.0 "List: No-Bid Reason Codes" name (the list 2.6 refers to). */
  readonly name30: string;
}

/** The standard codes 0–17, by value. */
export const NO_BID_REASONS: readonly NoBidReasonEntry[] = Object.freeze(
  [
    { code: 0, name25: 'Unknown Error', name30: 'Unknown Error' },
    { code: 1, name25: 'Technical Error', name30: 'Technical Error' },
    { code: 2, name25: 'Invalid Request', name30: 'Invalid Request' },
    { code: 3, name25: 'Known Web Spider', name30: 'Known Web Crawler' },
    { code: 4, name25: 'Suspected Non-Human Traffic', name30: 'Suspected Non-Human Traffic' },
    { code: 5, name25: 'Cloud, Data center, or Proxy IP', name30: 'Cloud, Data Center, or Proxy IP' },
    { code: 6, name25: 'Unsupported Device', name30: 'Unsupported Device' },
    { code: 7, name25: 'Blocked Publisher or Site', name30: 'Blocked Publisher or Site' },
    { code: 8, name25: 'Unmatched User', name30: 'Unmatched User' },
    { code: 9, name25: 'Daily Reader Cap Met', name30: 'Daily User Cap Met' },
    { code: 10, name25: 'Daily Domain Cap Met', name30: 'Daily Domain Cap Met' },
    { code: 11, name25: null, name30: 'Ads.txt Authorization Unavailable' },
    { code: 12, name25: null, name30: 'Ads.txt Authorization Violation' },
    { code: 13, name25: null, name30: 'Ads.cert Authentication Unavailable' },
    { code: 14, name25: null, name30: 'Ads.cert Authentication Violation' },
    { code: 15, name25: null, name30: 'Insufficient Auction Time' },
    { code: 16, name25: null, name30: 'Incomplete SupplyChain' },
    { code: 17, name25: null, name30: 'Blocked SupplyChain Node' },
  ].map((e) => Object.freeze(e)),
);

/** The first exchange-specific value (3.0: "500+ Exchange specific values"). */
export const EXCHANGE_SPECIFIC_NBR_MIN = 500;

export type NoBidReasonKind = 'standard' | 'exchange_specific' | 'unknown';

export interface NoBidReason {
  readonly code: number;
  readonly kind: NoBidReasonKind;
  /** The 3.0 name, "Exchange-specific (N)" or "Unknown (N)". */
  readonly name: string;
  /** The 2.5 name when the code is in 2.5's list. */
  readonly name25: string | null;
}

/** Describes any integer code; never throws (unknown values are tolerated). */
export function describeNoBidReason(code: number): NoBidReason {
  const e = Number.isInteger(code) && code >= 0 && code < NO_BID_REASONS.length ? NO_BID_REASONS[code]! : null;
  if (e) return { code, kind: 'standard', name: e.name30, name25: e.name25 };
  if (Number.isInteger(code) && code >= EXCHANGE_SPECIFIC_NBR_MIN)
    return { code, kind: 'exchange_specific', name: `Exchange-specific (${code})`, name25: null };
  return { code, kind: 'unknown', name: `Unknown (${code})`, name25: null };
}

/** A valid nbr: an integer ≥ 0 (unknown values are kept, not rejected). */
export function isNbr(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 2 ** 31 - 1;
}
