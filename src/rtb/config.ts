import { normalizeBreakerSpec, type BreakerSpec, type ResolvedBreakerSpec } from '../core/breaker.js';
import { normalizeBudget, type BudgetSpec, type ResolvedBudgetSpec } from '../core/budget.js';
import { normalizeLimitSpec, type LimitSpec, type ResolvedLimitSpec } from '../core/concurrency.js';
import { describe, RelentError } from '../core/errors.js';
import type { PolicySpec } from '../core/policy.js';
import { chaosSpecOf, normalizeChaos, type ChaosSpec } from '../core/chaos.js';
import { DeliveryError, resolveWorkerSettings } from '../delivery/index.js';

// Configuration files of `relent exchange` and `relent bidder`, validated in one place.
// Every error is a RelentError ERR_INVALID_INPUT whose message and `field` name the
// field: ``Expected `partners[1].timeoutMs` to be an integer in [1, 60000], got "80"``.

export function invalidConfig(field: string, expected: string, got: unknown): RelentError {
  return new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be ${expected}, got ${describe(got)}`, { field });
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function obj(v: unknown, field: string): Record<string, unknown> {
  if (!isObject(v)) throw invalidConfig(field, 'an object', v);
  return v;
}

function onlyKeys(o: Record<string, unknown>, keys: readonly string[], field: string): void {
  for (const k of Object.keys(o)) {
    if (!keys.includes(k)) {
      const f = field ? `${field}.${k}` : k;
      throw new RelentError('ERR_INVALID_INPUT', `Unknown field \`${f}\` (known: ${keys.join(', ')})`, { field: f });
    }
  }
}

function int(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw invalidConfig(field, `an integer in [${min}, ${max}]`, v);
  return v;
}

function num(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) throw invalidConfig(field, `a number in [${min}, ${max}]`, v);
  return v;
}

function bool(v: unknown, field: string): boolean {
  if (typeof v !== 'boolean') throw invalidConfig(field, 'true or false', v);
  return v;
}

function str(v: unknown, field: string, pattern?: RegExp, what = 'a non-empty string'): string {
  if (typeof v !== 'string' || v.length === 0 || (pattern !== undefined && !pattern.test(v))) throw invalidConfig(field, what, v);
  return v;
}

function oneOf<T extends string>(v: unknown, field: string, values: readonly T[]): T {
  if (typeof v !== 'string' || !values.includes(v as T)) throw invalidConfig(field, `one of ${values.map((x) => JSON.stringify(x)).join(', ')}`, v);
  return v as T;
}

function required(o: Record<string, unknown>, key: string, field: string): unknown {
  const v = o[key];
  if (v === undefined) throw new RelentError('ERR_INVALID_INPUT', `Missing \`${field}\` (required)`, { field });
  return v;
}

const MAX_MS = 2 ** 31 - 1;
const NAME = /^[A-Za-z0-9._-]{1,64}$/;
const PATH = /^\/[\x21-\x7e]*$/;
const CURRENCY = /^[A-Z]{3}$/;

function httpUrl(v: unknown, field: string): URL {
  if (typeof v !== 'string') throw invalidConfig(field, 'an http:// or https:// URL', v);
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    throw invalidConfig(field, 'an http:// or https:// URL', v);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw invalidConfig(field, 'an http:// or https:// URL', v);
  if (u.username !== '' || u.password !== '') {
    // The URL is not echoed: it holds credentials.
    throw new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be a URL without credentials (send them in \`headers\`)`, { field });
  }
  if (u.hash !== '') throw invalidConfig(field, 'a URL without a #fragment', v);
  return u;
}

// ─── exchange ───────────────────────────────────────────────────────────────

/** Breaker defaults of exchange partners (the core's, with a window and volume sized for auction traffic). */
export const PARTNER_BREAKER_DEFAULTS: ResolvedBreakerSpec = Object.freeze({
  failureRatio: 0.5,
  minimumThroughput: 20,
  windowMs: 10_000,
  buckets: 10,
  openMs: 5_000,
  halfOpenTrials: 1,
  successThreshold: 1,
});

/** One demand partner as written in the configuration. Only name, url, timeoutMs and maxConcurrency are required. */
export interface PartnerConfig {
  /** Letters, digits and `._-` (it appears in events and metrics). */
  readonly name: string;
  /** Where bid requests are POSTed (no credentials in it; use `headers`). */
  readonly url: string;
  /** The longest this partner may take; each call gets min(timeoutMs, time left in the auction). */
  readonly timeoutMs: number;
  /**
   * Calls in flight at most (the bulkhead, no queue: when full the partner is skipped,
   * `at_capacity`), and the Agent's connections. With `concurrencyLimit`, the ceiling of
   * the adaptive limit.
   */
  readonly maxConcurrency: number;
  /**
   * An adaptive concurrency limit in place of the fixed cap: `{ "kind": "gradient" }` or
   * `{ "kind": "aimd", "slowMs": … }` with the core's fields (initial, min, max, …; no
   * `maxQueue`: an auction never waits for a partner). The limit moves between `min` and
   * `max` (default and at most `maxConcurrency`) from what the partner's answers show;
   * it starts at `initial` (default `max`). A call over the limit is not made: the
   * partner is skipped for that auction (`concurrency_limited`). Like `maxConcurrency`,
   * the numbers are the whole exchange's: each of N processes takes ⌈x / N⌉. Default
   * none (the fixed cap).
   */
  readonly concurrencyLimit?: LimitSpec | null;
  /** Circuit breaker settings (see PARTNER_BREAKER_DEFAULTS), or false for none. */
  readonly breaker?: BreakerSpec | false;
  /** Skip the partner when less than this is left in the auction (ms). Default 10. */
  readonly minTimeMs?: number;
  /** Keep listening this long after a partner's cut to count (and drop) a late answer. Default 50. */
  readonly lateGraceMs?: number;
  /** Extra attempts after a failure before sending (refused, DNS, TLS, connect timeout, an immediate 503): 0–2, default 0. */
  readonly preSendRetries?: number;
  /** Largest answer read (bytes); larger → an error, never parsed. Default: the exchange's `maxResponseBytes`. */
  readonly maxResponseBytes?: number;
  /** Static request headers (e.g. an API key). Never logged. */
  readonly headers?: Readonly<Record<string, string>>;
  /** false → never called (counted as skipped). Default true. */
  readonly enabled?: boolean;
  /**
   * Connections opened to the partner before the exchange serves (TCP, and TLS for
   * https), handed to the keep-alive pool on first use. Default min(maxConcurrency, 32)
   * (per worker process: min(its share of maxConcurrency, 32)); 0: none.
   */
  readonly warmConnections?: number;
  /**
   * A retry budget for the pre-send retries (`preSendRetries`): `{ "kind": "ratio", … }`
   * (the core's budget kinds). Shared by the fleet when the exchange has one. Default none.
   */
  readonly retryBudget?: BudgetSpec | null;
  /** Chaos injection into this partner's calls (the policy field `chaos`, see docs/chaos.md). Default none. */
  readonly chaos?: ChaosSpec | null;
}

export interface NoticeConfig {
  /** Who calls `nurl`: the exchange, after answering (default), or the source (the URL stays in the bid). */
  readonly win?: 'exchange' | 'source';
  /**
   * When `burl` is called: `on-win` (the exchange fires it right after answering; default),
   * `on-event` (the exchange fires it when told the impression happened: POST /openrtb2/billing),
   * `source` (the substituted URL stays in the bid for the source to fire).
   */
  readonly billing?: 'on-win' | 'on-event' | 'source';
  /** Overrides of the `openrtb-billing-notice` preset (e.g. a shorter deadline). */
  readonly billingPolicy?: PolicySpec;
  /** Overrides of the `background-full-jitter` preset used for win notices. */
  readonly winPolicy?: PolicySpec;
  /** Notices in flight or waiting to retry, at most; more are dropped and counted. Default 10 000. */
  readonly maxPending?: number;
  /** `on-event`: how long a won impression waits for its billing event (ms). Default 1 h. */
  readonly eventTtlMs?: number;
  /** `on-event`: won impressions kept at most. Default 100 000. */
  readonly eventMaxKeys?: number;
  /**
   * Who calls `lurl` of a bid that lost: the exchange, after answering (default; only
   * bids that carry an `lurl`), or nobody (`off`; `lurl` is removed from winning bids
   * either way).
   */
  readonly loss?: 'exchange' | 'off';
  /** Overrides of the `background-full-jitter` preset used for loss notices. */
  readonly lossPolicy?: PolicySpec;
  /**
   * Where notices wait until delivered: `memory` (in process; lost when it stops), or a
   * delivery-queue store, `sqlite:FILE` or `postgres://…`, which keeps them across
   * restarts and crashes (`relent queue --store … ls` shows them). Default `memory` for
   * createExchange(); `relent exchange` defaults to a SQLite file next to its config.
   */
  readonly store?: string;
  /** The delivery worker of a durable store (relent/delivery's worker settings: leaseMs, pollMs, stopTimeoutMs…). */
  readonly worker?: Readonly<Record<string, number>>;
}

/** How an exchange gets ready before it serves (`listen()`). */
export interface WarmupConfig {
  /** Internal dry-run auctions (against a stand-in partner on loopback) that compile the hot path. Default 48. */
  readonly auctions?: number;
  /** The longest the warm-up (connections and dry runs) may take before the exchange serves anyway, ms. Default 3000. */
  readonly timeoutMs?: number;
}

/** The exchange configuration (`relent exchange --config FILE`). */
export interface ExchangeConfig {
  readonly host?: string;
  readonly port?: number;
  /** The auction endpoint. Default `/openrtb2/auction`. */
  readonly path?: string;
  /** The longest auction (fan-out) the exchange runs, ms. */
  readonly auctionTimeoutMs: number;
  /** Time kept back from the source's tmax for the exchange's own reply, ms. */
  readonly reserveMs: number;
  /** The tmax assumed when a request has none (never an unbounded auction). Default auctionTimeoutMs + reserveMs. */
  readonly defaultTmaxMs?: number;
  /** Largest request body (bytes); larger → 400 without reading it. Default 256 KiB. */
  readonly maxRequestBytes?: number;
  /** Largest partner answer (bytes). Default 256 KiB. */
  readonly maxResponseBytes?: number;
  /** Most impressions in one request. Default 100. */
  readonly maxImps?: number;
  /** The auction currency when a request has no `cur`. Default USD. */
  readonly currency?: string;
  /** Publisher ids (site/app/dooh `publisher.id`) answered 204 without an auction. */
  readonly disabledSources?: readonly string[];
  /**
   * A request whose head and body have not all arrived this long after its first byte is
   * answered 408 and its connection closed (a stalled client holds no connection past
   * its auction). Default: defaultTmaxMs.
   */
  readonly readTimeoutMs?: number;
  /** Largest request head (request line and headers), bytes; larger → 431 and the connection closed. Default 16 KiB. */
  readonly maxHeaderBytes?: number;
  /** Warm-up before serving: `false` to serve at once (tests). */
  readonly warmup?: WarmupConfig | false;
  /**
   * Shared state of the partners' breakers and retry budgets across processes and
   * machines: relent/fleet's `createRedisFleet()` options (`url`, `prefix`, …), read by
   * `relent exchange` (createExchange() takes a Fleet object in its options instead).
   */
  readonly fleet?: Readonly<Record<string, unknown>> | null;
  readonly notices?: NoticeConfig;
  readonly partners: readonly PartnerConfig[];
}

export interface ResolvedPartner {
  readonly name: string;
  readonly url: URL;
  readonly timeoutMs: number;
  readonly maxConcurrency: number;
  /** The adaptive limit (its numbers the whole exchange's), or null: the fixed cap. */
  readonly concurrencyLimit: ResolvedLimitSpec | null;
  readonly breaker: ResolvedBreakerSpec | null;
  readonly minTimeMs: number;
  readonly lateGraceMs: number;
  readonly preSendRetries: number;
  readonly maxResponseBytes: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly enabled: boolean;
  /** null: the default, min(the pool's size, 32). */
  readonly warmConnections: number | null;
  readonly retryBudget: ResolvedBudgetSpec | null;
  /** The partner's chaos (validated), or null. */
  readonly chaos: ChaosSpec | null;
}

export interface ResolvedNotices {
  readonly win: 'exchange' | 'source';
  readonly billing: 'on-win' | 'on-event' | 'source';
  readonly billingPolicy: PolicySpec | null;
  readonly winPolicy: PolicySpec | null;
  readonly maxPending: number;
  readonly eventTtlMs: number;
  readonly eventMaxKeys: number;
  readonly loss: 'exchange' | 'off';
  readonly lossPolicy: PolicySpec | null;
  /** `memory`, `sqlite:FILE` or a postgres URL. */
  readonly store: string;
  readonly worker: Readonly<Record<string, number>>;
}

export interface ResolvedExchangeConfig {
  readonly host: string;
  readonly port: number;
  readonly path: string;
  readonly auctionTimeoutMs: number;
  readonly reserveMs: number;
  readonly defaultTmaxMs: number;
  readonly maxRequestBytes: number;
  readonly maxResponseBytes: number;
  readonly maxImps: number;
  readonly currency: string;
  readonly disabledSources: readonly string[];
  readonly readTimeoutMs: number;
  readonly maxHeaderBytes: number;
  /** null: no warm-up. */
  readonly warmup: Readonly<Required<WarmupConfig>> | null;
  /** The `fleet` options as written (validated by relent/fleet where the fleet is made); null: none. */
  readonly fleet: Readonly<Record<string, unknown>> | null;
  readonly notices: ResolvedNotices;
  readonly partners: readonly ResolvedPartner[];
}

/** The exchange's optional settings, written once. */
export const EXCHANGE_DEFAULTS = Object.freeze({
  host: '127.0.0.1',
  port: 8080,
  path: '/openrtb2/auction',
  maxRequestBytes: 256 * 1024,
  maxResponseBytes: 256 * 1024,
  maxImps: 100,
  currency: 'USD',
  maxHeaderBytes: 16 * 1024,
  warmup: Object.freeze({ auctions: 48, timeoutMs: 3_000 }),
  notices: Object.freeze({
    win: 'exchange' as const, billing: 'on-win' as const, loss: 'exchange' as const, maxPending: 10_000, eventTtlMs: 3_600_000, eventMaxKeys: 100_000,
    store: 'memory',
  }),
  partner: Object.freeze({ minTimeMs: 10, lateGraceMs: 50, preSendRetries: 0, enabled: true, maxWarmConnections: 32 }),
});

const EXCHANGE_KEYS = [
  'host', 'port', 'path', 'auctionTimeoutMs', 'reserveMs', 'defaultTmaxMs', 'maxRequestBytes', 'maxResponseBytes', 'maxImps',
  'currency', 'disabledSources', 'readTimeoutMs', 'maxHeaderBytes', 'warmup', 'fleet', 'notices', 'partners',
];
const PARTNER_KEYS = [
  'name', 'url', 'timeoutMs', 'maxConcurrency', 'breaker', 'minTimeMs', 'lateGraceMs', 'preSendRetries', 'maxResponseBytes', 'headers', 'enabled',
  'warmConnections', 'retryBudget', 'concurrencyLimit', 'chaos',
];
const NOTICE_KEYS = ['win', 'billing', 'billingPolicy', 'winPolicy', 'maxPending', 'eventTtlMs', 'eventMaxKeys', 'loss', 'lossPolicy', 'store', 'worker'];
const WARMUP_KEYS = ['auctions', 'timeoutMs'];

function policyOverrides(v: unknown, field: string): PolicySpec | null {
  if (v === undefined || v === null) return null;
  const o = obj(v, field);
  if (o.preset !== undefined) throw invalidConfig(`${field}.preset`, 'absent (the preset is fixed; give only the fields to change)', o.preset);
  return o as PolicySpec;
}

function resolvePartner(v: unknown, i: number, d: { maxResponseBytes: number }): ResolvedPartner {
  const f = `partners[${i}]`;
  const o = obj(v, f);
  onlyKeys(o, PARTNER_KEYS, f);
  const name = str(required(o, 'name', `${f}.name`), `${f}.name`, NAME, 'a name of 1–64 letters, digits, ".", "_" or "-"');
  const url = httpUrl(required(o, 'url', `${f}.url`), `${f}.url`);
  const timeoutMs = int(required(o, 'timeoutMs', `${f}.timeoutMs`), `${f}.timeoutMs`, 1, 60_000);
  const maxConcurrency = int(required(o, 'maxConcurrency', `${f}.maxConcurrency`), `${f}.maxConcurrency`, 1, 100_000);
  let breaker: ResolvedBreakerSpec | null;
  if (o.breaker === false) breaker = null;
  else {
    const b = o.breaker === undefined ? {} : obj(o.breaker, `${f}.breaker`);
    try {
      breaker = normalizeBreakerSpec({ ...PARTNER_BREAKER_DEFAULTS, ...b } as BreakerSpec, `${f}.breaker`);
    } catch (e) {
      if (RelentError.is(e)) throw new RelentError('ERR_INVALID_INPUT', e.message, { field: e.field });
      throw e;
    }
  }
  const pd = EXCHANGE_DEFAULTS.partner;
  const headers: Record<string, string> = {};
  if (o.headers !== undefined) {
    const h = obj(o.headers, `${f}.headers`);
    for (const [k, hv] of Object.entries(h)) {
      if (!/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(k)) throw invalidConfig(`${f}.headers`, 'header names made of token characters', k);
      if (['host', 'content-length', 'content-type', 'connection', 'transfer-encoding'].includes(k.toLowerCase())) {
        throw invalidConfig(`${f}.headers.${k}`, 'absent (the exchange sets this header)', '(a value)');
      }
      if (typeof hv !== 'string' || /[\r\n\0]/.test(hv)) {
        throw new RelentError('ERR_INVALID_INPUT', `Expected \`${f}.headers.${k}\` to be a string without CR, LF or NUL (not shown)`, { field: `${f}.headers.${k}` });
      }
      headers[k.toLowerCase()] = hv;
    }
  }
  return Object.freeze({
    name,
    url,
    timeoutMs,
    maxConcurrency,
    concurrencyLimit: o.concurrencyLimit === undefined || o.concurrencyLimit === null ? null : limitSpec(o.concurrencyLimit, `${f}.concurrencyLimit`, maxConcurrency),
    breaker,
    minTimeMs: o.minTimeMs === undefined ? pd.minTimeMs : int(o.minTimeMs, `${f}.minTimeMs`, 0, 60_000),
    lateGraceMs: o.lateGraceMs === undefined ? pd.lateGraceMs : int(o.lateGraceMs, `${f}.lateGraceMs`, 0, 60_000),
    preSendRetries: o.preSendRetries === undefined ? pd.preSendRetries : int(o.preSendRetries, `${f}.preSendRetries`, 0, 2),
    maxResponseBytes: o.maxResponseBytes === undefined ? d.maxResponseBytes : int(o.maxResponseBytes, `${f}.maxResponseBytes`, 1, 64 * 1024 * 1024),
    headers: Object.freeze(headers),
    enabled: o.enabled === undefined ? pd.enabled : bool(o.enabled, `${f}.enabled`),
    warmConnections: o.warmConnections === undefined ? null : int(o.warmConnections, `${f}.warmConnections`, 0, maxConcurrency),
    retryBudget: o.retryBudget === undefined || o.retryBudget === null ? null : budgetSpec(o.retryBudget, `${f}.retryBudget`),
    chaos: chaosSpec(o.chaos, `${f}.chaos`),
  });
}

/** A partner's chaos, validated by the core's rule (errors name the config field). */
function chaosSpec(v: unknown, field: string): ChaosSpec | null {
  try {
    return chaosSpecOf(normalizeChaos(v, field));
  } catch (e) {
    if (RelentError.is(e)) throw new RelentError('ERR_INVALID_INPUT', e.message, { field: e.field });
    throw e;
  }
}

/**
 * A partner's adaptive limit: the core's spec, `max` defaulting to (and at most)
 * `maxConcurrency`, `initial` to `max`; no `maxQueue` (a partner over its limit is
 * skipped, never waited for).
 */
function limitSpec(v: unknown, field: string, maxConcurrency: number): ResolvedLimitSpec {
  const o = obj(v, field);
  if (o.maxQueue !== undefined) throw invalidConfig(`${field}.maxQueue`, 'absent (an auction never waits for a partner: over its limit the partner is skipped)', o.maxQueue);
  let spec: ResolvedLimitSpec;
  try {
    const max = o.max ?? maxConcurrency;
    spec = normalizeLimitSpec({ ...o, max, initial: o.initial ?? max }, field);
  } catch (e) {
    if (RelentError.is(e)) throw new RelentError('ERR_INVALID_INPUT', e.message, { field: e.field ?? field });
    throw e;
  }
  if (spec.max > maxConcurrency) throw invalidConfig(`${field}.max`, `at most the partner's maxConcurrency (${maxConcurrency}), the ceiling`, spec.max);
  return spec;
}

function budgetSpec(v: unknown, field: string): ResolvedBudgetSpec {
  try {
    return normalizeBudget(v, field);
  } catch (e) {
    if (RelentError.is(e)) throw new RelentError('ERR_INVALID_INPUT', e.message, { field: e.field ?? field });
    throw e;
  }
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
  if (!Array.isArray(disabledIn) || disabledIn.some((s) => typeof s !== 'string')) throw invalidConfig('disabledSources', 'an array of publisher ids', disabledIn);
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
    disabledSources: Object.freeze([...disabledIn as string[]]),
    readTimeoutMs: o.readTimeoutMs === undefined ? defaultTmaxMs : int(o.readTimeoutMs, 'readTimeoutMs', 1, 600_000),
    maxHeaderBytes: o.maxHeaderBytes === undefined ? d.maxHeaderBytes : int(o.maxHeaderBytes, 'maxHeaderBytes', 1024, 1024 * 1024),
    warmup: warmupConfig(o.warmup),
    fleet: fleetOptions(o.fleet),
    notices,
    partners: Object.freeze(partners),
  });
}

// ─── bidder ─────────────────────────────────────────────────────────────────

/** How long the bidder takes to answer. */
export type LatencySpec =
  | { readonly kind: 'fixed'; readonly ms: number }
  | { readonly kind: 'uniform'; readonly minMs: number; readonly maxMs: number }
  /** Log-normal with this median and 99th percentile (a realistic long tail). */
  | { readonly kind: 'lognormal'; readonly medianMs: number; readonly p99Ms: number };

/** What the bidder bids (CPM). */
export type PriceSpec =
  | { readonly kind: 'fixed'; readonly cpm: number }
  | { readonly kind: 'uniform'; readonly min: number; readonly max: number };

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
  'name', 'host', 'port', 'path', 'publicUrl', 'seat', 'maxConcurrency', 'maxRequestBytes', 'latency', 'price', 'currency', 'noBidRate',
  'nbrShare', 'nbr', 'failures', 'bidBelowFloor', 'noticeFailureRate', 'minTmaxMs', 'seed', 'noticeMaxKeys', 'noticeTtlMs',
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
