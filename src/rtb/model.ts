// OpenRTB 2.6 objects, as far as the exchange reads them (https://github.com/InteractiveAdvertisingBureau/openrtb2.x/blob/main/2.6.md). Every other
// field is carried through untouched: OpenRTB's principle is that implementers "must
// tolerate new fields or enumerated list values".

/** A JSON object with fields we do not read. */
export type Extra = { readonly [key: string]: unknown };

/** `BidRequest.imp[]` (2.6 §3.2.4): the fields the auction reads. */
export interface Imp extends Extra {
  /** Unique within the request (required). */
  readonly id: string;
  /** Minimum bid, CPM; default 0. */
  readonly bidfloor?: number;
  /** Currency of `bidfloor` (ISO-4217); default "USD". */
  readonly bidfloorcur?: string;
  readonly ext?: Extra;
}

/** `BidRequest` (2.6 §3.2.1). */
export interface BidRequest extends Extra {
  /** The auction's id (required); the same on every partner call and every retry. */
  readonly id: string;
  /** At least one impression (required). */
  readonly imp: readonly Imp[];
  /** Time the caller allows for bids, ms, network included. Absent → the exchange's default. */
  readonly tmax?: number;
  /** Currencies allowed for bids; the first is the auction's currency. */
  readonly cur?: readonly string[];
  /** At most one of site, app and dooh. */
  readonly site?: Extra;
  readonly app?: Extra;
  readonly dooh?: Extra;
  readonly source?: Extra;
  /** 1 = test mode (no billing). */
  readonly test?: number;
  readonly ext?: Extra;
}

/** `BidResponse.seatbid[].bid[]` (2.6 §4.2.3). */
export interface Bid extends Extra {
  /** Bidder-generated bid id (required). */
  readonly id: string;
  /** The `Imp.id` it bids on (required). */
  readonly impid: string;
  /** CPM, in the response's currency (required). */
  readonly price: number;
  /** Ad markup; supersedes the win notice's markup. */
  readonly adm?: string;
  /** Win notice URL (macros allowed). */
  readonly nurl?: string;
  /** Billing notice URL (macros allowed): called when the win becomes billable. */
  readonly burl?: string;
  /** Loss notice URL (macros allowed). */
  readonly lurl?: string;
  readonly adid?: string;
  readonly crid?: string;
  readonly ext?: Extra;
}

/** `BidResponse.seatbid[]` (2.6 §4.2.2). */
export interface SeatBid extends Extra {
  readonly bid: readonly Bid[];
  readonly seat?: string;
  /** 1 = the impressions must be won or lost as a group. */
  readonly group?: number;
  readonly ext?: Extra;
}

/** `BidResponse` (2.6 §4.2.1). */
export interface BidResponse extends Extra {
  readonly id: string;
  readonly seatbid?: readonly SeatBid[];
  /** Bidder-generated response id: the `${AUCTION_BID_ID}` macro. */
  readonly bidid?: string;
  /** Default "USD". */
  readonly cur?: string;
  /** No-bid reason (see nbr.ts). */
  readonly nbr?: number;
  readonly ext?: Extra;
}

/** How `checkBidRequest` ends. `field` is the path of the first wrong field (`imp[2].id`). */
export type RequestCheck = { readonly ok: true; readonly request: BidRequest } | { readonly ok: false; readonly field: string; readonly reason: string };

export interface RequestLimits {
  /** More impressions than this → refused. Default 100. */
  readonly maxImps?: number;
}

/** The defaults of request validation. */
export const REQUEST_LIMITS_DEFAULTS = Object.freeze({ maxImps: 100 });

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isId = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= 1024;

function bad(field: string, reason: string): RequestCheck {
  return { ok: false, field, reason };
}

/**
 * Validates a parsed bid request and names the first wrong field (`id`, `imp`,
 * `imp[1].id`, `imp[0].bidfloor`, `tmax` …). Required: `id` (a non-empty string) and
 * `imp` (1 to `maxImps` objects, each with a unique non-empty string `id`). Checked when
 * present: `bidfloor` (a finite number ≥ 0), `bidfloorcur` and `cur` (strings), `tmax`
 * (a finite number ≥ 0; 0 means "not given"), `site`/`app`/`dooh`/`source`/`ext`
 * (objects; at most one of site, app and dooh, as 2.6 requires). Everything else is
 * carried through unread.
 */
export function checkBidRequest(value: unknown, limits: RequestLimits = {}): RequestCheck {
  const maxImps = limits.maxImps ?? REQUEST_LIMITS_DEFAULTS.maxImps;
  if (!isObject(value)) return bad('(body)', 'a bid request is a JSON object');
  if (value.id === undefined) return bad('id', 'missing (required)');
  if (!isId(value.id)) return bad('id', 'must be a non-empty string of at most 1024 characters');
  const imp = value.imp;
  if (imp === undefined) return bad('imp', 'missing (required)');
  if (!Array.isArray(imp)) return bad('imp', 'must be an array of impressions');
  if (imp.length === 0) return bad('imp', 'must hold at least one impression');
  if (imp.length > maxImps) return bad('imp', `holds ${imp.length} impressions; at most ${maxImps} are accepted`);
  const ids = new Set<string>();
  for (let i = 0; i < imp.length; i++) {
    const it: unknown = imp[i];
    const f = `imp[${i}]`;
    if (!isObject(it)) return bad(f, 'must be an object');
    if (it.id === undefined) return bad(`${f}.id`, 'missing (required)');
    if (!isId(it.id)) return bad(`${f}.id`, 'must be a non-empty string of at most 1024 characters');
    if (ids.has(it.id)) return bad(`${f}.id`, `duplicates the id of an earlier impression (${JSON.stringify(it.id.slice(0, 40))})`);
    ids.add(it.id);
    const floor = it.bidfloor;
    if (floor !== undefined && (typeof floor !== 'number' || !Number.isFinite(floor) || floor < 0)) return bad(`${f}.bidfloor`, 'must be a finite number >= 0');
    if (it.bidfloorcur !== undefined && typeof it.bidfloorcur !== 'string') return bad(`${f}.bidfloorcur`, 'must be a currency code string');
    if (it.ext !== undefined && !isObject(it.ext)) return bad(`${f}.ext`, 'must be an object');
  }
  const tmax = value.tmax;
  if (tmax !== undefined && (typeof tmax !== 'number' || !Number.isFinite(tmax) || tmax < 0)) return bad('tmax', 'must be a number of ms >= 0');
  const cur = value.cur;
  if (cur !== undefined && (!Array.isArray(cur) || cur.some((c) => typeof c !== 'string' || c.length === 0)))
    return bad('cur', 'must be an array of currency codes');
  let places = 0;
  for (const k of ['site', 'app', 'dooh', 'source', 'ext'] as const) {
    const v = value[k];
    if (v === undefined) continue;
    if (!isObject(v)) return bad(k, 'must be an object');
    if (k === 'site' || k === 'app' || k === 'dooh') places++;
  }
  if (places > 1) return bad(value.site !== undefined ? 'site' : 'app', 'site, app and dooh are mutually exclusive');
  return { ok: true, request: value as unknown as BidRequest };
}

/** The publisher id of a request (site, app or dooh `publisher.id`), the exchange's "source". */
export function sourceIdOf(request: BidRequest): string | null {
  for (const place of [request.site, request.app, request.dooh]) {
    if (place === undefined) continue;
    const pub = place.publisher;
    if (isObject(pub) && typeof pub.id === 'string' && pub.id.length > 0) return pub.id;
  }
  return null;
}

/** The auction's currency: the first of `cur`, else the exchange's. */
export function auctionCurrency(request: BidRequest, fallback: string): string {
  const c = request.cur;
  return c !== undefined && c.length > 0 ? c[0]! : fallback;
}
