// The bidder configuration (`relent bidder --config FILE`): its types, defaults and
// resolveBidderConfig(), the errors naming the field like the exchange's (config.ts).
import { bool, CURRENCY, httpUrl, int, invalidConfig, MAX_MS, NAME, num, obj, oneOf, onlyKeys, PATH, str } from './config-check.js';

/** How long the bidder takes to answer. */
export type LatencySpec =
  | { readonly kind: 'fixed'; readonly ms: number }
  | { readonly kind: 'uniform'; readonly minMs: number; readonly maxMs: number }
  /** Log-normal with this median and 99th percentile (a realistic long tail). */
  | { readonly kind: 'lognormal'; readonly medianMs: number; readonly p99Ms: number };

/** What the bidder bids (CPM). */
export type PriceSpec = { readonly kind: 'fixed'; readonly cpm: number } | { readonly kind: 'uniform'; readonly min: number; readonly max: number };

/** Shares of requests that fail on purpose (each in [0, 1], together at most 1). */
export interface FailureSpec {
  /** Answer 500 (after the latency). */
  readonly error500?: number;
  /** Destroy the connection without an answer (after the latency). */
  readonly reset?: number;
  /** Never answer (the connection stays open until the caller gives up). */
  readonly hang?: number;
  /** Answer 200 with a body that is not JSON. */
  readonly malformed?: number;
}

/** The bidder configuration (`relent bidder --config FILE`). */
export interface BidderConfig {
  readonly name?: string;
  readonly host?: string;
  readonly port?: number;
  /** The bid endpoint. Default `/openrtb2/bid`. */
  readonly path?: string;
  /** The base URL of the win and billing endpoints in `nurl`/`burl`. Default: the address it listens on. */
  readonly publicUrl?: string;
  /** `seatbid.seat`. Default: the name. */
  readonly seat?: string;
  /** Requests handled at once; over it the bidder sheds with 204 and no nbr. Default 100. */
  readonly maxConcurrency?: number;
  readonly maxRequestBytes?: number;
  readonly latency?: LatencySpec;
  readonly price?: PriceSpec;
  readonly currency?: string;
  /** Share of requests answered with a no-bid. Default 0. */
  readonly noBidRate?: number;
  /** Of those no-bids, the share answered 200 with `nbr` (the rest: 204). Default 0. */
  readonly nbrShare?: number;
  /** The nbr codes used (one drawn at random). Default [8] (Unmatched User). */
  readonly nbr?: number | readonly number[];
  readonly failures?: FailureSpec;
  /** Bid below an impression's floor anyway (to test an exchange). Default false: no-bid (204). */
  readonly bidBelowFloor?: boolean;
  /** Share of win/billing notices answered 500 without counting them (to test senders' retries). Default 0. */
  readonly noticeFailureRate?: number;
  /** Decline with 204 when the request's tmax is below this (ms). Default 0 (off). */
  readonly minTmaxMs?: number;
  /** Seed of the random draws (same seed, same sequence of behaviours). */
  readonly seed?: number | string;
  /** Notice dedupe memory: keys kept and how long (ms). */
  readonly noticeMaxKeys?: number;
  readonly noticeTtlMs?: number;
}

export interface ResolvedBidderConfig {
  readonly name: string;
  readonly host: string;
  readonly port: number;
  readonly path: string;
  readonly publicUrl: string | null;
  readonly seat: string;
  readonly maxConcurrency: number;
  readonly maxRequestBytes: number;
  readonly latency: LatencySpec;
  readonly price: PriceSpec;
  readonly currency: string;
  readonly noBidRate: number;
  readonly nbrShare: number;
  readonly nbr: readonly number[];
  readonly failures: Required<FailureSpec>;
  readonly bidBelowFloor: boolean;
  readonly noticeFailureRate: number;
  readonly minTmaxMs: number;
  readonly seed: number | string | null;
  readonly noticeMaxKeys: number;
  readonly noticeTtlMs: number;
}

export const BIDDER_DEFAULTS = Object.freeze({
  name: 'bidder',
  host: '127.0.0.1',
  port: 9100,
  path: '/openrtb2/bid',
  maxConcurrency: 100,
  maxRequestBytes: 256 * 1024,
  latency: Object.freeze({ kind: 'fixed', ms: 10 }) as LatencySpec,
  price: Object.freeze({ kind: 'fixed', cpm: 1 }) as PriceSpec,
  currency: 'USD',
  noBidRate: 0,
  nbrShare: 0,
  nbr: Object.freeze([8]) as readonly number[],
  bidBelowFloor: false,
  noticeFailureRate: 0,
  minTmaxMs: 0,
  noticeMaxKeys: 100_000,
  noticeTtlMs: 3_600_000,
});

const BIDDER_KEYS = [
  'name',
  'host',
  'port',
  'path',
  'publicUrl',
  'seat',
  'maxConcurrency',
  'maxRequestBytes',
  'latency',
  'price',
  'currency',
  'noBidRate',
  'nbrShare',
  'nbr',
  'failures',
  'bidBelowFloor',
  'noticeFailureRate',
  'minTmaxMs',
  'seed',
  'noticeMaxKeys',
  'noticeTtlMs',
];

function latencySpec(v: unknown, field: string): LatencySpec {
  const o = obj(v, field);
  const kind = oneOf(o.kind, `${field}.kind`, ['fixed', 'uniform', 'lognormal'] as const);
  if (kind === 'fixed') {
    onlyKeys(o, ['kind', 'ms'], field);
    return { kind, ms: num(o.ms, `${field}.ms`, 0, 600_000) };
  }
  if (kind === 'uniform') {
    onlyKeys(o, ['kind', 'minMs', 'maxMs'], field);
    const minMs = num(o.minMs, `${field}.minMs`, 0, 600_000);
    return { kind, minMs, maxMs: num(o.maxMs, `${field}.maxMs`, minMs, 600_000) };
  }
  onlyKeys(o, ['kind', 'medianMs', 'p99Ms'], field);
  const medianMs = num(o.medianMs, `${field}.medianMs`, 0.001, 600_000);
  return { kind, medianMs, p99Ms: num(o.p99Ms, `${field}.p99Ms`, medianMs, 600_000) };
}

function priceSpec(v: unknown, field: string): PriceSpec {
  const o = obj(v, field);
  const kind = oneOf(o.kind, `${field}.kind`, ['fixed', 'uniform'] as const);
  if (kind === 'fixed') {
    onlyKeys(o, ['kind', 'cpm'], field);
    return { kind, cpm: num(o.cpm, `${field}.cpm`, 0.000001, 1_000_000) };
  }
  onlyKeys(o, ['kind', 'min', 'max'], field);
  const min = num(o.min, `${field}.min`, 0.000001, 1_000_000);
  return { kind, min, max: num(o.max, `${field}.max`, min, 1_000_000) };
}

/** Validates a bidder configuration and fills every default; errors name the field. */
export function resolveBidderConfig(input: unknown): ResolvedBidderConfig {
  const o = obj(input ?? {}, '(config)');
  onlyKeys(o, BIDDER_KEYS, '');
  const d = BIDDER_DEFAULTS;
  const name = o.name === undefined ? d.name : str(o.name, 'name', NAME, 'a name of 1–64 letters, digits, ".", "_" or "-"');
  const f = o.failures === undefined ? {} : obj(o.failures, 'failures');
  onlyKeys(f, ['error500', 'reset', 'hang', 'malformed'], 'failures');
  const failures = {
    error500: f.error500 === undefined ? 0 : num(f.error500, 'failures.error500', 0, 1),
    reset: f.reset === undefined ? 0 : num(f.reset, 'failures.reset', 0, 1),
    hang: f.hang === undefined ? 0 : num(f.hang, 'failures.hang', 0, 1),
    malformed: f.malformed === undefined ? 0 : num(f.malformed, 'failures.malformed', 0, 1),
  };
  const sum = failures.error500 + failures.reset + failures.hang + failures.malformed;
  if (sum > 1 + 1e-9) throw invalidConfig('failures', 'shares that add up to at most 1', sum);
  let nbr: readonly number[] = d.nbr;
  if (o.nbr !== undefined) {
    const list = Array.isArray(o.nbr) ? o.nbr : [o.nbr];
    if (list.length === 0) throw invalidConfig('nbr', 'a no-bid reason code or a non-empty array of them', o.nbr);
    nbr = list.map((c: unknown, i: number) => int(c, Array.isArray(o.nbr) ? `nbr[${i}]` : 'nbr', 0, 2 ** 31 - 1));
  }
  let publicUrl: string | null = null;
  if (o.publicUrl !== undefined) publicUrl = httpUrl(o.publicUrl, 'publicUrl').href.replace(/\/$/, '');
  let seed: number | string | null = null;
  if (o.seed !== undefined) {
    if (typeof o.seed !== 'string' && (typeof o.seed !== 'number' || !Number.isFinite(o.seed))) throw invalidConfig('seed', 'a number or a string', o.seed);
    seed = o.seed;
  }
  return Object.freeze({
    name,
    host: o.host === undefined ? d.host : str(o.host, 'host'),
    port: o.port === undefined ? d.port : int(o.port, 'port', 0, 65_535),
    path: o.path === undefined ? d.path : str(o.path, 'path', PATH, 'a path starting with "/"'),
    publicUrl,
    seat: o.seat === undefined ? name : str(o.seat, 'seat'),
    maxConcurrency: o.maxConcurrency === undefined ? d.maxConcurrency : int(o.maxConcurrency, 'maxConcurrency', 1, 1_000_000),
    maxRequestBytes: o.maxRequestBytes === undefined ? d.maxRequestBytes : int(o.maxRequestBytes, 'maxRequestBytes', 64, 64 * 1024 * 1024),
    latency: o.latency === undefined ? d.latency : latencySpec(o.latency, 'latency'),
    price: o.price === undefined ? d.price : priceSpec(o.price, 'price'),
    currency: o.currency === undefined ? d.currency : str(o.currency, 'currency', CURRENCY, 'an ISO-4217 code like "USD"'),
    noBidRate: o.noBidRate === undefined ? d.noBidRate : num(o.noBidRate, 'noBidRate', 0, 1),
    nbrShare: o.nbrShare === undefined ? d.nbrShare : num(o.nbrShare, 'nbrShare', 0, 1),
    nbr: Object.freeze([...nbr]),
    failures: Object.freeze(failures),
    bidBelowFloor: o.bidBelowFloor === undefined ? d.bidBelowFloor : bool(o.bidBelowFloor, 'bidBelowFloor'),
    noticeFailureRate: o.noticeFailureRate === undefined ? d.noticeFailureRate : num(o.noticeFailureRate, 'noticeFailureRate', 0, 1),
    minTmaxMs: o.minTmaxMs === undefined ? d.minTmaxMs : int(o.minTmaxMs, 'minTmaxMs', 0, 60_000),
    seed,
    noticeMaxKeys: o.noticeMaxKeys === undefined ? d.noticeMaxKeys : int(o.noticeMaxKeys, 'noticeMaxKeys', 1, 100_000_000),
    noticeTtlMs: o.noticeTtlMs === undefined ? d.noticeTtlMs : int(o.noticeTtlMs, 'noticeTtlMs', 1, MAX_MS),
  });
}
