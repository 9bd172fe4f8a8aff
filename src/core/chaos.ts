// Chaos injection (Polly v8's chaos strategies): a policy may fail, answer for, or delay
// a share of its attempts on purpose, so a team can see its retries, budgets, breakers
// and hedges at work in staging or on a game day. Pure: the operation draws from its
// own injected random (a seeded run repeats exactly); the driver carries out what was
// drawn (nothing is sent for a fault or an outcome; a latency delays the send).
import { RelentError, invalidPolicy } from './errors.js';
import { ERROR_CLASSES } from './error-codes.js';
import type { ErrorClass, Observation, Random } from './types.js';

/** What a policy's `chaos` field takes. Every strategy is optional; rates are in [0, 1]. */
export interface ChaosSpec {
  /** Default true: chaos is on when the field is present (RELENT_CHAOS=off turns every policy's chaos off). */
  readonly enabled?: boolean;
  /** The attempt fails with this error class; nothing is sent. */
  readonly fault?: { readonly rate: number; readonly errorClass: ErrorClass };
  /** The attempt answers this status (and headers, e.g. a Retry-After); nothing is sent. */
  readonly outcome?: { readonly rate: number; readonly status: number; readonly headers?: Readonly<Record<string, string>> };
  /** The attempt is delayed this long before it is sent; the delay counts against its timeout and the deadline. */
  readonly latency?: { readonly rate: number; readonly delayMs: number };
}

/** A validated chaos spec (null on a policy: no chaos). */
export interface ResolvedChaos {
  readonly fault: { readonly rate: number; readonly errorClass: ErrorClass } | null;
  readonly outcome: { readonly rate: number; readonly status: number; readonly headers: Readonly<Record<string, string>> | null } | null;
  readonly latency: { readonly rate: number; readonly delayMs: number } | null;
}

export const CHAOS_DEFAULTS = Object.freeze({ enabled: true });

/** What was injected into one attempt, as a call command carries it. */
export type ChaosInjection =
  | { readonly kind: 'fault'; readonly errorClass: ErrorClass }
  | { readonly kind: 'outcome'; readonly status: number; readonly headers: Readonly<Record<string, string>> | null }
  | { readonly kind: 'latency'; readonly delayMs: number };

/** The names an attempt event gives an injected attempt. */
export type InjectedKind = ChaosInjection['kind'];

const invalid = invalidPolicy;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function only(o: Record<string, unknown>, keys: readonly string[], field: string): void {
  for (const k of Object.keys(o)) if (!keys.includes(k)) throw invalid(`${field}.${k}`, `absent (${field} takes ${keys.join(', ')})`, o[k]);
}

function rateOf(o: Record<string, unknown>, field: string): number {
  const r = o.rate;
  if (typeof r !== 'number' || !Number.isFinite(r) || r < 0 || r > 1) throw invalid(`${field}.rate`, 'a number in [0, 1]', r);
  return r;
}

/** Validates a policy's `chaos` field; null when absent, disabled, or injecting nothing. Errors name the field. */
export function normalizeChaos(input: unknown, field = 'chaos'): ResolvedChaos | null {
  if (input === undefined || input === null) return null;
  if (!isRecord(input)) throw invalid(field, 'an object ({ fault?, outcome?, latency?, enabled? })', input);
  only(input, ['enabled', 'fault', 'outcome', 'latency'], field);
  const enabled = input.enabled ?? CHAOS_DEFAULTS.enabled;
  if (typeof enabled !== 'boolean') throw invalid(`${field}.enabled`, 'a boolean', enabled);
  let fault: ResolvedChaos['fault'] = null;
  if (input.fault !== undefined) {
    const f = input.fault;
    if (!isRecord(f)) throw invalid(`${field}.fault`, 'an object { rate, errorClass }', f);
    only(f, ['rate', 'errorClass'], `${field}.fault`);
    const rate = rateOf(f, `${field}.fault`);
    const errorClass = f.errorClass;
    if (typeof errorClass !== 'string' || !(errorClass in ERROR_CLASSES) || errorClass === 'aborted') {
      throw invalid(
        `${field}.fault.errorClass`,
        `one of ${Object.keys(ERROR_CLASSES)
          .filter((c) => c !== 'aborted')
          .join(', ')}`,
        errorClass,
      );
    }
    fault = Object.freeze({ rate, errorClass: errorClass as ErrorClass });
  }
  let outcome: ResolvedChaos['outcome'] = null;
  if (input.outcome !== undefined) {
    const o = input.outcome;
    if (!isRecord(o)) throw invalid(`${field}.outcome`, 'an object { rate, status, headers? }', o);
    only(o, ['rate', 'status', 'headers'], `${field}.outcome`);
    const rate = rateOf(o, `${field}.outcome`);
    const status = o.status;
    if (typeof status !== 'number' || !Number.isInteger(status) || status < 100 || status > 999)
      throw invalid(`${field}.outcome.status`, 'an HTTP status in [100, 999]', status);
    let headers: Record<string, string> | null = null;
    if (o.headers !== undefined) {
      if (!isRecord(o.headers)) throw invalid(`${field}.outcome.headers`, 'an object of header names and string values', o.headers);
      headers = {};
      for (const [k, v] of Object.entries(o.headers)) {
        if (typeof v !== 'string') throw invalid(`${field}.outcome.headers.${k}`, 'a string', v);
        headers[k.toLowerCase()] = v;
      }
      headers = Object.freeze(headers);
    }
    outcome = Object.freeze({ rate, status, headers });
  }
  let latency: ResolvedChaos['latency'] = null;
  if (input.latency !== undefined) {
    const l = input.latency;
    if (!isRecord(l)) throw invalid(`${field}.latency`, 'an object { rate, delayMs }', l);
    only(l, ['rate', 'delayMs'], `${field}.latency`);
    const rate = rateOf(l, `${field}.latency`);
    const delayMs = l.delayMs;
    if (typeof delayMs !== 'number' || !Number.isFinite(delayMs) || delayMs < 0 || delayMs > 2 ** 31 - 1)
      throw invalid(`${field}.latency.delayMs`, 'a number of ms in [0, 2147483647]', delayMs);
    latency = Object.freeze({ rate, delayMs });
  }
  if (!enabled || (fault === null && outcome === null && latency === null)) return null;
  return Object.freeze({ fault, outcome, latency });
}

/** The spec form of a resolved chaos (for a policy's `spec`). */
export function chaosSpecOf(c: ResolvedChaos | null): ChaosSpec | null {
  if (c === null) return null;
  const out: { fault?: ChaosSpec['fault']; outcome?: ChaosSpec['outcome']; latency?: ChaosSpec['latency'] } = {};
  if (c.fault !== null) out.fault = c.fault;
  if (c.outcome !== null) out.outcome = c.outcome.headers === null ? { rate: c.outcome.rate, status: c.outcome.status } : (c.outcome as ChaosSpec['outcome']);
  if (c.latency !== null) out.latency = c.latency;
  return Object.freeze(out);
}

/**
 * What to inject into the next attempt, drawn from the operation's random: a fault (its
 * rate), else an outcome (its rate), else a latency (its rate); null for a plain call.
 * One draw per configured strategy, in that order, so a seeded run repeats exactly.
 */
export function drawChaos(c: ResolvedChaos, random: Random): ChaosInjection | null {
  if (c.fault !== null && random() < c.fault.rate) return c.fault.rate > 0 ? { kind: 'fault', errorClass: c.fault.errorClass } : null;
  if (c.outcome !== null && random() < c.outcome.rate) return { kind: 'outcome', status: c.outcome.status, headers: c.outcome.headers };
  if (c.latency !== null && random() < c.latency.rate) return { kind: 'latency', delayMs: c.latency.delayMs };
  return null;
}

/**
 * The observation of an attempt whose fault or outcome was injected (nothing was sent,
 * so no time passed): a status with its headers, or an error class whose send state is
 * the class's own (an injected `timeout` is an unknown outcome, as a real one).
 */
export function injectedObservation(inj: Exclude<ChaosInjection, { kind: 'latency' }>): Observation {
  if (inj.kind === 'outcome') return { status: inj.status, errorClass: null, headers: inj.headers ?? undefined, elapsedMs: 0 };
  return { status: null, errorClass: inj.errorClass, sent: ERROR_CLASSES[inj.errorClass].sent, elapsedMs: 0 };
}

/**
 * What the caller gets when an injected attempt is the operation's last (a value is
 * never invented): an ERR_INJECTED error that says what was injected.
 */
export function injectedError(inj: Exclude<ChaosInjection, { kind: 'latency' }>): RelentError {
  const what = inj.kind === 'outcome' ? `status ${inj.status}` : `a ${inj.errorClass} failure`;
  const e = new RelentError('ERR_INJECTED', `chaos: ${what} was injected (policy.chaos.${inj.kind}); nothing was sent`, { field: `chaos.${inj.kind}` });
  return Object.assign(e, inj.kind === 'outcome' ? { injected: inj.kind, status: inj.status } : { injected: inj.kind, errorClass: inj.errorClass });
}
