// One demand partner of the exchange configuration, validated: its required fields,
// headers, breaker (PARTNER_BREAKER_DEFAULTS), adaptive concurrency limit, retry budget
// and chaos, each error naming the field (`partners[1].timeoutMs`).
import { normalizeBreakerSpec, type BreakerSpec, type ResolvedBreakerSpec } from '../core/breaker.js';
import { normalizeBudget, type ResolvedBudgetSpec } from '../core/budget.js';
import { normalizeLimitSpec, type ResolvedLimitSpec } from '../core/concurrency.js';
import { RelentError } from '../core/errors.js';
import { chaosSpecOf, normalizeChaos, type ChaosSpec } from '../core/chaos.js';
import { bool, httpUrl, int, invalidConfig, NAME, obj, onlyKeys, required, str } from './config-check.js';
import { EXCHANGE_DEFAULTS, PARTNER_BREAKER_DEFAULTS, type ResolvedPartner } from './config-schema.js';

const PARTNER_KEYS = [
  'name',
  'url',
  'timeoutMs',
  'maxConcurrency',
  'breaker',
  'minTimeMs',
  'lateGraceMs',
  'preSendRetries',
  'maxResponseBytes',
  'headers',
  'enabled',
  'warmConnections',
  'retryBudget',
  'concurrencyLimit',
  'chaos',
];

/** Validates `partners[i]` and fills its defaults (`d`: the exchange's, for what a partner inherits). */
export function resolvePartner(v: unknown, i: number, d: { maxResponseBytes: number }): ResolvedPartner {
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
        throw new RelentError('ERR_INVALID_INPUT', `Expected \`${f}.headers.${k}\` to be a string without CR, LF or NUL (not shown)`, {
          field: `${f}.headers.${k}`,
        });
      }
      headers[k.toLowerCase()] = hv;
    }
  }
  return Object.freeze({
    name,
    url,
    timeoutMs,
    maxConcurrency,
    concurrencyLimit:
      o.concurrencyLimit === undefined || o.concurrencyLimit === null ? null : limitSpec(o.concurrencyLimit, `${f}.concurrencyLimit`, maxConcurrency),
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
  if (o.maxQueue !== undefined)
    throw invalidConfig(`${field}.maxQueue`, 'absent (an auction never waits for a partner: over its limit the partner is skipped)', o.maxQueue);
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
