import { describe, RelentError } from '../core/errors.js';
import { type Policy, type PolicySpec } from '../core/policy.js';
import { resolvePropagation, type PropagationSpec, type ResolvedPropagation } from '../core/propagation.js';
import { resolvePolicyInput } from '../presets/index.js';
import { DeliveryError, invalidConfig } from './errors.js';
import type { BatchLimits } from './types.js';

/** How a batch becomes a request body. */
export type BodyFormat =
  /** `{"key":<batch key>,"items":[{"key":<item key>,"payload":<payload>},…]}` (default) */
  | 'envelope'
  /** `[<payload>,…]` */
  | 'array'
  /** one payload per line (application/x-ndjson) */
  | 'ndjson'
  /** the payload itself (batches of one item only) */
  | 'single';

export const BODY_FORMATS: readonly BodyFormat[] = Object.freeze(['envelope', 'array', 'ndjson', 'single']);

/**
 * Whose limit it is: `shared` (default) — every worker of the destination on the same
 * store together (kept in the store); `worker` — each worker process on its own.
 */
export type LimitScope = 'shared' | 'worker';

export const LIMIT_SCOPES: readonly LimitScope[] = Object.freeze(['shared', 'worker']);

export interface RateLimitOptions {
  /** At most this many requests in any window of `perMs` (a sliding window). */
  readonly requests: number;
  readonly perMs?: number;
  /** `shared` (default): across every worker on the store; `worker`: per worker process. */
  readonly scope?: LimitScope;
  /**
   * Shared limits only: how much longer than `perMs` the window the workers count is. The
   * window of a claim already starts when its last request was answered (so requests that
   * left or arrived late are covered); the margin covers clock differences between the
   * workers' machines. Default 0.
   */
  readonly marginMs?: number;
}

export interface ConcurrencyOptions {
  /** Requests in flight at the start. */
  readonly initial?: number;
  readonly min?: number;
  readonly max?: number;
  /** AIMD: halve (×decrease) on a throttling answer, +1 per `limit` successes. false: fixed at `initial`. */
  readonly adaptive?: boolean;
  readonly decrease?: number;
  /** Statuses that make the limit shrink. */
  readonly backoffOn?: readonly number[];
  /**
   * `worker` (default): each worker process keeps its own limit; `shared`: requests in
   * flight to the destination from every worker on the store together stay within the
   * (claiming worker's) limit.
   */
  readonly scope?: LimitScope;
}

/** One destination: where batches go and with which policy. Every field but `url` is optional. */
export interface DestinationOptions {
  readonly url: string;
  readonly method?: 'POST' | 'PUT' | 'PATCH';
  /** Extra request headers (e.g. authorization). Never logged. */
  readonly headers?: Readonly<Record<string, string>>;
  /** A preset name, a policy spec (may name a `preset` to start from) or a Policy. */
  readonly policy?: string | PolicySpec | Policy;
  readonly batch?: Partial<BatchLimits>;
  readonly format?: BodyFormat;
  /** Requests per window; null/absent: no limit. */
  readonly rateLimit?: RateLimitOptions | null;
  readonly concurrency?: ConcurrencyOptions;
  /**
   * A throttling answer with a valid Retry-After pauses the whole destination for that
   * long (at most this many ms); 0: never pause.
   */
  readonly maxPauseMs?: number;
  /**
   * Headers that tell the receiver about each attempt, as relent's HTTP client sends them:
   * `x-relent-attempt` (1-based, per round) and `x-relent-deadline-ms` (the attempt's
   * time), so a relent/server receiver sheds retries before first attempts and stops work
   * its sender no longer waits for. `false`: none. Default: those two headers.
   */
  readonly propagate?: PropagationSpec | false;
}

/** A destination with every default filled in and its policy compiled. */
export interface ResolvedDestination {
  readonly name: string;
  readonly url: URL;
  readonly method: 'POST' | 'PUT' | 'PATCH';
  readonly headers: Readonly<Record<string, string>>;
  readonly policy: Policy;
  readonly batch: BatchLimits;
  readonly format: BodyFormat;
  readonly rateLimit: Required<RateLimitOptions> | null;
  readonly concurrency: Required<ConcurrencyOptions>;
  readonly maxPauseMs: number;
  readonly propagate: ResolvedPropagation;
}

/** The defaults of a destination, written once (docs/delivery.md's table is tested against it). */
export const DESTINATION_DEFAULTS = Object.freeze({
  method: 'POST' as const,
  policy: 'adobe-best-effort',
  batch: Object.freeze({ maxItems: 100, maxBytes: 1_048_576, maxAgeMs: 1_000 }),
  format: 'envelope' as BodyFormat,
  rateLimit: null,
  rateLimitPerMs: 60_000,
  rateLimitScope: 'shared' as LimitScope,
  /** How much longer than perMs a shared rate window is (ms): an allowance for clock skew between machines. */
  rateLimitMarginMs: 0,
  concurrency: Object.freeze({
    initial: 8,
    min: 1,
    max: 64,
    adaptive: true,
    decrease: 0.5,
    backoffOn: Object.freeze([429, 503]) as readonly number[],
    scope: 'worker' as LimitScope,
  }),
  maxPauseMs: 60_000,
});

const DEST_KEYS = ['url', 'method', 'headers', 'policy', 'batch', 'format', 'rateLimit', 'concurrency', 'maxPauseMs', 'propagate'];

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function onlyKeys(obj: Record<string, unknown>, keys: readonly string[], field: string): void {
  for (const k of Object.keys(obj)) {
    if (keys.includes(k)) continue;
    const name = field ? `${field}.${k}` : k;
    throw new DeliveryError('ERR_INVALID_CONFIG', `Unknown field \`${name}\` (known: ${keys.join(', ')})`, { field: name });
  }
}

export function intIn(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw invalidConfig(field, `an integer in [${min}, ${max}]`, v);
  return v;
}

function numIn(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) throw invalidConfig(field, `a number in [${min}, ${max}]`, v);
  return v;
}

function scopeOf(v: unknown, field: string): LimitScope {
  if (!LIMIT_SCOPES.includes(v as LimitScope)) throw invalidConfig(field, '"shared" or "worker"', v);
  return v as LimitScope;
}

/** A destination name: letters, digits and `._:-`, 1–100 characters (it is stored and shown). */
export function checkDestinationName(name: unknown, field = 'destination'): string {
  if (typeof name !== 'string' || !/^[A-Za-z0-9._:-]{1,100}$/.test(name)) {
    throw invalidConfig(field, 'a name of 1-100 letters, digits, ".", "_", ":" or "-"', name);
  }
  return name;
}

/** Validates one destination and fills its defaults; errors name the field (`destinations.adobe.batch.maxItems`). */
export function resolveDestination(name: string, input: unknown, field = `destinations.${name}`): ResolvedDestination {
  checkDestinationName(name, field);
  if (!isObject(input)) throw invalidConfig(field, 'an object with at least `url`', input);
  onlyKeys(input, DEST_KEYS, field);
  const d = DESTINATION_DEFAULTS;

  // The URL is never echoed in an error: it may hold a token (query) or credentials.
  const badUrl = (): DeliveryError =>
    new DeliveryError(
      'ERR_INVALID_CONFIG',
      `Expected \`${field}.url\` to be an absolute http:// or https:// URL, got ${
        typeof input.url === 'string' ? 'another string (not shown: a URL may hold a secret)' : describe(input.url)
      }`,
      { field: `${field}.url` },
    );
  let url: URL;
  try {
    if (typeof input.url !== 'string') throw new Error('not a string');
    url = new URL(input.url);
  } catch {
    throw badUrl();
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw badUrl();
  // As the HTTP client: credentials in a URL end up in logs and proxies; they belong in a header.
  if (url.username !== '' || url.password !== '') {
    throw new DeliveryError(
      'ERR_INVALID_CONFIG',
      `Expected \`${field}.url\` to have no user name or password: a URL with credentials is refused (send them in \`${field}.headers\`, e.g. Authorization)`,
      { field: `${field}.url` },
    );
  }

  const method = input.method ?? d.method;
  if (method !== 'POST' && method !== 'PUT' && method !== 'PATCH') throw invalidConfig(`${field}.method`, '"POST", "PUT" or "PATCH"', method);

  const headersIn = input.headers ?? {};
  if (!isObject(headersIn)) throw invalidConfig(`${field}.headers`, 'an object of header names to strings', headersIn);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(headersIn)) {
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(k)) throw invalidConfig(`${field}.headers`, 'valid header names', k);
    if (typeof v !== 'string' || /[\r\n\0]/.test(v))
      throw invalidConfig(
        `${field}.headers.${k}`,
        'a string without line breaks',
        v === undefined ? v : typeof v === 'string' ? '(a string with a line break)' : v,
      );
    const lower = k.toLowerCase();
    if (lower === 'idempotency-key' || lower === 'content-length') throw invalidConfig(`${field}.headers.${k}`, 'absent (relent sets it)', '(set)');
    headers[lower] = v;
  }

  let policy: Policy;
  try {
    policy = resolvePolicyInput(input.policy ?? d.policy);
  } catch (e) {
    if (RelentError.is(e)) {
      throw new DeliveryError('ERR_INVALID_CONFIG', `${field}.policy: ${e.message}`, { field: `${field}.policy${e.field ? `.${e.field}` : ''}`, cause: e });
    }
    throw e;
  }

  const batchIn = input.batch ?? {};
  if (!isObject(batchIn)) throw invalidConfig(`${field}.batch`, 'an object with maxItems, maxBytes, maxAgeMs', batchIn);
  onlyKeys(batchIn, ['maxItems', 'maxBytes', 'maxAgeMs'], `${field}.batch`);
  const batch = Object.freeze({
    maxItems: intIn(batchIn.maxItems ?? d.batch.maxItems, `${field}.batch.maxItems`, 1, 100_000),
    maxBytes: intIn(batchIn.maxBytes ?? d.batch.maxBytes, `${field}.batch.maxBytes`, 1, 256 * 1024 * 1024),
    maxAgeMs: intIn(batchIn.maxAgeMs ?? d.batch.maxAgeMs, `${field}.batch.maxAgeMs`, 0, 2 ** 31 - 1),
  });

  const format = input.format ?? d.format;
  if (!BODY_FORMATS.includes(format as BodyFormat)) throw invalidConfig(`${field}.format`, `one of ${BODY_FORMATS.join(', ')}`, format);
  if (format === 'single' && batch.maxItems !== 1) throw invalidConfig(`${field}.batch.maxItems`, '1 with format "single"', batch.maxItems);

  let rateLimit: Required<RateLimitOptions> | null = null;
  if (input.rateLimit !== undefined && input.rateLimit !== null) {
    const rl = input.rateLimit;
    if (!isObject(rl)) throw invalidConfig(`${field}.rateLimit`, 'an object { requests, perMs } or null', rl);
    onlyKeys(rl, ['requests', 'perMs', 'scope', 'marginMs'], `${field}.rateLimit`);
    const perMs = intIn(rl.perMs ?? d.rateLimitPerMs, `${field}.rateLimit.perMs`, 1, 86_400_000);
    rateLimit = Object.freeze({
      requests: intIn(rl.requests, `${field}.rateLimit.requests`, 1, 10_000_000),
      perMs,
      scope: scopeOf(rl.scope ?? d.rateLimitScope, `${field}.rateLimit.scope`),
      marginMs: intIn(rl.marginMs ?? d.rateLimitMarginMs, `${field}.rateLimit.marginMs`, 0, 86_400_000),
    });
  }

  const cIn = input.concurrency ?? {};
  if (!isObject(cIn)) throw invalidConfig(`${field}.concurrency`, 'an object', cIn);
  onlyKeys(cIn, ['initial', 'min', 'max', 'adaptive', 'decrease', 'backoffOn', 'scope'], `${field}.concurrency`);
  const max = intIn(cIn.max ?? Math.max(d.concurrency.max, typeof cIn.initial === 'number' ? cIn.initial : 0), `${field}.concurrency.max`, 1, 100_000);
  const min = intIn(cIn.min ?? d.concurrency.min, `${field}.concurrency.min`, 1, max);
  const initial = intIn(cIn.initial ?? Math.min(Math.max(d.concurrency.initial, min), max), `${field}.concurrency.initial`, min, max);
  const adaptive = cIn.adaptive ?? d.concurrency.adaptive;
  if (typeof adaptive !== 'boolean') throw invalidConfig(`${field}.concurrency.adaptive`, 'a boolean', adaptive);
  const decrease = numIn(cIn.decrease ?? d.concurrency.decrease, `${field}.concurrency.decrease`, 0.05, 0.95);
  const backoffIn = cIn.backoffOn ?? d.concurrency.backoffOn;
  if (!Array.isArray(backoffIn)) throw invalidConfig(`${field}.concurrency.backoffOn`, 'an array of statuses', backoffIn);
  const backoffOn = Object.freeze(backoffIn.map((s: unknown, i: number) => intIn(s, `${field}.concurrency.backoffOn[${i}]`, 100, 999)));
  const concurrency = Object.freeze({
    initial,
    min,
    max,
    adaptive,
    decrease,
    backoffOn,
    scope: scopeOf(cIn.scope ?? d.concurrency.scope, `${field}.concurrency.scope`),
  });

  const maxPauseMs = intIn(input.maxPauseMs ?? d.maxPauseMs, `${field}.maxPauseMs`, 0, 2 ** 31 - 1);
  let propagate: ResolvedPropagation;
  try {
    propagate = resolvePropagation(input.propagate as PropagationSpec | false | undefined, `${field}.propagate`);
  } catch (e) {
    if (RelentError.is(e)) throw new DeliveryError('ERR_INVALID_CONFIG', e.message, { field: e.field ?? `${field}.propagate` });
    throw e;
  }

  return Object.freeze({
    name,
    url,
    method,
    headers: Object.freeze(headers),
    policy,
    batch,
    format: format as BodyFormat,
    rateLimit,
    concurrency,
    maxPauseMs,
    propagate,
  });
}

export function resolveDestinations(input: unknown, field = 'destinations'): Map<string, ResolvedDestination> {
  if (!isObject(input)) throw invalidConfig(field, 'an object of destination names to destinations', input);
  const out = new Map<string, ResolvedDestination>();
  for (const [name, value] of Object.entries(input)) out.set(name, resolveDestination(name, value, `${field}.${name}`));
  return out;
}

/** Worker settings as a config file writes them (all optional). */
export interface WorkerSettings {
  /** How long a claim lasts without renewal; a dead worker's batches come back after this. */
  readonly leaseMs?: number;
  /** How often the worker looks for new or due work when idle. */
  readonly pollMs?: number;
  /** Batches claimed per store round trip. */
  readonly claimChunk?: number;
  /** How long a graceful stop waits for requests in flight before giving their claims back. */
  readonly stopTimeoutMs?: number;
  /** Delivered batches (with their items and history) are deleted this long after delivery. */
  readonly retainDeliveredMs?: number;
  /** Dropped batches are deleted this long after they were dropped; null: kept until requeued. */
  readonly retainDroppedMs?: number | null;
  /**
   * A store call (a claim, an outcome write, a renewal) that has not answered after this
   * long is reported as a `store_error` (ERR_STORE_UNAVAILABLE), again every as long while
   * it waits; the worker keeps waiting for it. What tells of a store that stopped
   * answering without failing: a frozen SQLite store process, a disk that does not come
   * back from a write. (PostgreSQL's own queryTimeoutMs ends a silent connection first.)
   */
  readonly storeTimeoutMs?: number;
}

export const WORKER_DEFAULTS = Object.freeze({
  leaseMs: 15_000,
  pollMs: 500,
  claimChunk: 200,
  stopTimeoutMs: 10_000,
  retainDeliveredMs: 7 * 86_400_000,
  retainDroppedMs: (30 * 86_400_000) as number | null,
  storeTimeoutMs: 5_000,
});

/** The longest retention accepted (ten years). */
const MAX_RETAIN_MS = 10 * 365 * 86_400_000;

export function resolveWorkerSettings(input: unknown, field = 'worker'): Required<WorkerSettings> {
  const w = input ?? {};
  if (!isObject(w)) throw invalidConfig(field, 'an object', w);
  onlyKeys(w, Object.keys(WORKER_DEFAULTS), field);
  const d = WORKER_DEFAULTS;
  return Object.freeze({
    leaseMs: intIn(w.leaseMs ?? d.leaseMs, `${field}.leaseMs`, 100, 86_400_000),
    pollMs: intIn(w.pollMs ?? d.pollMs, `${field}.pollMs`, 1, 3_600_000),
    claimChunk: intIn(w.claimChunk ?? d.claimChunk, `${field}.claimChunk`, 1, 10_000),
    stopTimeoutMs: intIn(w.stopTimeoutMs ?? d.stopTimeoutMs, `${field}.stopTimeoutMs`, 0, 3_600_000),
    retainDeliveredMs: intIn(w.retainDeliveredMs ?? d.retainDeliveredMs, `${field}.retainDeliveredMs`, 0, MAX_RETAIN_MS),
    retainDroppedMs: w.retainDroppedMs === null ? null : intIn(w.retainDroppedMs ?? d.retainDroppedMs, `${field}.retainDroppedMs`, 0, MAX_RETAIN_MS),
    storeTimeoutMs: intIn(w.storeTimeoutMs ?? d.storeTimeoutMs, `${field}.storeTimeoutMs`, 100, 3_600_000),
  });
}

/** A whole configuration file: `{ "store"?, "worker"?, "destinations": {…} }`. */
export interface DeliveryConfig {
  readonly store: string | null;
  readonly worker: Required<WorkerSettings>;
  readonly destinations: ReadonlyMap<string, ResolvedDestination>;
}

export function parseDeliveryConfig(input: unknown, where = 'config'): DeliveryConfig {
  if (!isObject(input)) throw new DeliveryError('ERR_INVALID_CONFIG', `${where}: expected a JSON object with \`destinations\``, { field: '' });
  try {
    onlyKeys(input, ['store', 'worker', 'destinations'], '');
    const store = input.store ?? null;
    if (store !== null && typeof store !== 'string') throw invalidConfig('store', 'a store URL (sqlite:FILE or postgres://…)', store);
    if (input.destinations === undefined) throw new DeliveryError('ERR_INVALID_CONFIG', 'Missing field `destinations`', { field: 'destinations' });
    const destinations = resolveDestinations(input.destinations);
    if (destinations.size === 0) throw invalidConfig('destinations', 'an object with at least one destination', input.destinations);
    return { store, worker: resolveWorkerSettings(input.worker), destinations };
  } catch (e) {
    if (DeliveryError.is(e)) {
      throw new DeliveryError('ERR_INVALID_CONFIG', `${where}: ${e.message}`, { field: e.field ?? null, cause: e.cause });
    }
    throw e;
  }
}
