// The exchange configuration (`relent exchange --config FILE`), validated in one place:
// resolveExchangeConfig() checks the exchange's own settings, its notices, warm-up and
// fleet here, each partner in config-partner.ts, and fills the defaults of
// config-schema.ts. The bidder's configuration is config-bidder.ts; the field checks
// both use, config-check.ts. Every error is a RelentError ERR_INVALID_INPUT whose
// message and `field` name the field:
// ``Expected `partners[1].timeoutMs` to be an integer in [1, 60000], got "80"``.
import { RelentError } from '../core/errors.js';
import type { PolicySpec } from '../core/policy.js';
import { DeliveryError, resolveWorkerSettings } from '../delivery/index.js';
import { CURRENCY, int, invalidConfig, MAX_MS, obj, oneOf, onlyKeys, PATH, required, str } from './config-check.js';
import { resolvePartner } from './config-partner.js';
import { EXCHANGE_DEFAULTS, type ResolvedExchangeConfig, type ResolvedNotices, type WarmupConfig } from './config-schema.js';

export { invalidConfig } from './config-check.js';
export { PARTNER_BREAKER_DEFAULTS, EXCHANGE_DEFAULTS } from './config-schema.js';
export type { PartnerConfig, NoticeConfig, WarmupConfig, ExchangeConfig, ResolvedPartner, ResolvedNotices, ResolvedExchangeConfig } from './config-schema.js';
export { BIDDER_DEFAULTS, resolveBidderConfig } from './config-bidder.js';
export type { LatencySpec, PriceSpec, FailureSpec, BidderConfig, ResolvedBidderConfig } from './config-bidder.js';

const EXCHANGE_KEYS = [
  'host',
  'port',
  'path',
  'auctionTimeoutMs',
  'reserveMs',
  'defaultTmaxMs',
  'maxRequestBytes',
  'maxResponseBytes',
  'maxImps',
  'currency',
  'disabledSources',
  'readTimeoutMs',
  'maxHeaderBytes',
  'warmup',
  'fleet',
  'notices',
  'partners',
];
const NOTICE_KEYS = ['win', 'billing', 'billingPolicy', 'winPolicy', 'maxPending', 'eventTtlMs', 'eventMaxKeys', 'loss', 'lossPolicy', 'store', 'worker'];
const WARMUP_KEYS = ['auctions', 'timeoutMs'];

function policyOverrides(v: unknown, field: string): PolicySpec | null {
  if (v === undefined || v === null) return null;
  const o = obj(v, field);
  if (o.preset !== undefined) throw invalidConfig(`${field}.preset`, 'absent (the preset is fixed; give only the fields to change)', o.preset);
  return o as PolicySpec;
}

function fleetOptions(v: unknown): Readonly<Record<string, unknown>> | null {
  if (v === undefined || v === null) return null;
  const o = obj(v, 'fleet');
  if (o.client !== undefined) throw invalidConfig('fleet.client', 'absent (a config file names the Redis `url`)', '(set)');
  if (typeof o.url !== 'string') {
    // The URL may hold a password: it is not echoed.
    throw new RelentError('ERR_INVALID_INPUT', 'Expected `fleet.url` to be a redis:// or rediss:// URL', { field: 'fleet.url' });
  }
  return Object.freeze({ ...o });
}

function noticeStore(v: unknown): string {
  const what = '"memory", "sqlite:FILE" or a "postgres://…" URL';
  if (typeof v !== 'string') throw invalidConfig('notices.store', what, v);
  if (v === 'memory') return v;
  if (v.startsWith('sqlite:') && v.length > 'sqlite:'.length) return v;
  if (v.startsWith('postgres://') || v.startsWith('postgresql://')) return v;
  // A URL may hold a password: it is not echoed.
  throw new RelentError('ERR_INVALID_INPUT', `Expected \`notices.store\` to be ${what}`, { field: 'notices.store' });
}

function noticeWorker(v: unknown): Readonly<Record<string, number>> {
  if (v === undefined) return Object.freeze({});
  const o = obj(v, 'notices.worker');
  try {
    // relent/delivery's own validation (its ranges and names), then only the fields given are kept.
    const all = resolveWorkerSettings(o, 'notices.worker') as unknown as Record<string, number>;
    const out: Record<string, number> = {};
    for (const k of Object.keys(o)) out[k] = all[k]!;
    return Object.freeze(out);
  } catch (e) {
    if (DeliveryError.is(e)) throw new RelentError('ERR_INVALID_INPUT', e.message, { field: e.field ?? 'notices.worker' });
    throw e;
  }
}

function warmupConfig(v: unknown): Readonly<Required<WarmupConfig>> | null {
  const d = EXCHANGE_DEFAULTS.warmup;
  if (v === undefined) return d;
  if (v === false) return null;
  const o = obj(v, 'warmup');
  onlyKeys(o, WARMUP_KEYS, 'warmup');
  return Object.freeze({
    auctions: o.auctions === undefined ? d.auctions : int(o.auctions, 'warmup.auctions', 0, 10_000),
    timeoutMs: o.timeoutMs === undefined ? d.timeoutMs : int(o.timeoutMs, 'warmup.timeoutMs', 1, 600_000),
  });
}

/** Validates an exchange configuration and fills every default; errors name the field. */
export function resolveExchangeConfig(input: unknown): ResolvedExchangeConfig {
  const o = obj(input, '(config)');
  onlyKeys(o, EXCHANGE_KEYS, '');
  const d = EXCHANGE_DEFAULTS;
  const auctionTimeoutMs = int(required(o, 'auctionTimeoutMs', 'auctionTimeoutMs'), 'auctionTimeoutMs', 1, 60_000);
  const reserveMs = int(required(o, 'reserveMs', 'reserveMs'), 'reserveMs', 0, 60_000);
  const maxResponseBytes = o.maxResponseBytes === undefined ? d.maxResponseBytes : int(o.maxResponseBytes, 'maxResponseBytes', 1, 64 * 1024 * 1024);
  const partnersIn = required(o, 'partners', 'partners');
  if (!Array.isArray(partnersIn)) throw invalidConfig('partners', 'an array of partners', partnersIn);
  const partners = partnersIn.map((p: unknown, i: number) => resolvePartner(p, i, { maxResponseBytes }));
  const names = new Set<string>();
  partners.forEach((p, i) => {
    if (names.has(p.name)) throw invalidConfig(`partners[${i}].name`, 'a name no other partner has', p.name);
    names.add(p.name);
  });
  const disabledIn = o.disabledSources ?? [];
  if (!Array.isArray(disabledIn) || disabledIn.some((s) => typeof s !== 'string'))
    throw invalidConfig('disabledSources', 'an array of publisher ids', disabledIn);
  const n = o.notices === undefined ? {} : obj(o.notices, 'notices');
  onlyKeys(n, NOTICE_KEYS, 'notices');
  const nd = d.notices;
  const notices: ResolvedNotices = Object.freeze({
    win: n.win === undefined ? nd.win : oneOf(n.win, 'notices.win', ['exchange', 'source'] as const),
    billing: n.billing === undefined ? nd.billing : oneOf(n.billing, 'notices.billing', ['on-win', 'on-event', 'source'] as const),
    billingPolicy: policyOverrides(n.billingPolicy, 'notices.billingPolicy'),
    winPolicy: policyOverrides(n.winPolicy, 'notices.winPolicy'),
    maxPending: n.maxPending === undefined ? nd.maxPending : int(n.maxPending, 'notices.maxPending', 0, 10_000_000),
    eventTtlMs: n.eventTtlMs === undefined ? nd.eventTtlMs : int(n.eventTtlMs, 'notices.eventTtlMs', 1, MAX_MS),
    eventMaxKeys: n.eventMaxKeys === undefined ? nd.eventMaxKeys : int(n.eventMaxKeys, 'notices.eventMaxKeys', 1, 100_000_000),
    loss: n.loss === undefined ? nd.loss : oneOf(n.loss, 'notices.loss', ['exchange', 'off'] as const),
    lossPolicy: policyOverrides(n.lossPolicy, 'notices.lossPolicy'),
    store: n.store === undefined ? nd.store : noticeStore(n.store),
    worker: noticeWorker(n.worker),
  });
  const defaultTmaxMs = o.defaultTmaxMs === undefined ? auctionTimeoutMs + reserveMs : int(o.defaultTmaxMs, 'defaultTmaxMs', 1, 60_000);
  return Object.freeze({
    host: o.host === undefined ? d.host : str(o.host, 'host'),
    port: o.port === undefined ? d.port : int(o.port, 'port', 0, 65_535),
    path: o.path === undefined ? d.path : str(o.path, 'path', PATH, 'a path starting with "/"'),
    auctionTimeoutMs,
    reserveMs,
    defaultTmaxMs,
    maxRequestBytes: o.maxRequestBytes === undefined ? d.maxRequestBytes : int(o.maxRequestBytes, 'maxRequestBytes', 64, 64 * 1024 * 1024),
    maxResponseBytes,
    maxImps: o.maxImps === undefined ? d.maxImps : int(o.maxImps, 'maxImps', 1, 10_000),
    currency: o.currency === undefined ? d.currency : str(o.currency, 'currency', CURRENCY, 'an ISO-4217 code like "USD"'),
    disabledSources: Object.freeze([...(disabledIn as string[])]),
    readTimeoutMs: o.readTimeoutMs === undefined ? defaultTmaxMs : int(o.readTimeoutMs, 'readTimeoutMs', 1, 600_000),
    maxHeaderBytes: o.maxHeaderBytes === undefined ? d.maxHeaderBytes : int(o.maxHeaderBytes, 'maxHeaderBytes', 1024, 1024 * 1024),
    warmup: warmupConfig(o.warmup),
    fleet: fleetOptions(o.fleet),
    notices,
    partners: Object.freeze(partners),
  });
}
