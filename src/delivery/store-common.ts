import type { DecisionWhy, Decision, ErrorClass } from '../core/types.js';
import { DeliveryError } from './errors.js';
import type { AttemptRecord, BatchState, BatchSummary, ClaimedBatch, DestinationStats, ListFilter, Outcome } from './types.js';

/** The version of the tables; a store refuses to work on tables of another version. */
export const SCHEMA_VERSION = 1;
export const LIST_DEFAULT_LIMIT = 100;
export const REQUEUE_DEFAULT_LIMIT = 1000;
/** Delivered batches deleted per purgeDelivered call. */
export const PURGE_DELIVERED_CHUNK = 10_000;
/** Finished batches a worker deletes per transaction: small, so a purge never holds locks for long. */
export const PURGE_CHUNK = 500;

/**
 * An outcome's columns in the order both stores' `complete` statements read them from the
 * JSON rows they are given (one row per outcome; PostgreSQL appends the attempt record).
 */
export function outcomeColumns(o: Outcome): unknown[] {
  return [
    o.id,
    o.token,
    o.state,
    o.notBefore,
    o.attempt,
    o.opStartedAt,
    o.opDeadlineAt,
    o.prevDelayMs,
    o.lastStatus,
    o.lastErrorClass,
    o.lastDecision,
    o.lastWhy,
    o.finishedAt,
    o.opThrottled,
  ];
}

/** A batches row as both stores read it (snake_case columns; numbers already numbers). */
export interface BatchRow {
  readonly id: number;
  readonly destination: string;
  readonly key: string;
  readonly state: BatchState;
  readonly items: number;
  readonly bytes: number;
  readonly created_at: number;
  readonly not_before: number;
  readonly due_at: number;
  readonly lease_owner: string | null;
  readonly lease_until: number;
  readonly lease_token: number;
  readonly claims: number;
  readonly round: number;
  readonly attempt: number;
  readonly op_started_at: number | null;
  readonly op_deadline_at: number | null;
  readonly prev_delay_ms: number | null;
  readonly op_throttled: number;
  readonly last_status: number | null;
  readonly last_error_class: string | null;
  readonly last_decision: string | null;
  readonly last_why: string | null;
  readonly finished_at: number | null;
}

export interface AttemptRow {
  readonly batch_id: number;
  readonly round: number;
  readonly attempt: number;
  readonly at: number;
  readonly status: number | null;
  readonly error_class: string | null;
  readonly elapsed_ms: number;
  readonly decision: string;
  readonly why: string | null;
  readonly delay_ms: number | null;
  readonly retry_after_ms: number | null;
  readonly worker: string | null;
}

const n = (v: unknown): number => Number(v);
const nn = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

export function rowToSummary(b: BatchRow): BatchSummary {
  return {
    id: n(b.id),
    destination: b.destination,
    key: b.key,
    state: b.state,
    items: n(b.items),
    bytes: n(b.bytes),
    createdAt: n(b.created_at),
    notBefore: n(b.not_before),
    round: n(b.round),
    attempt: n(b.attempt),
    claims: n(b.claims),
    leaseOwner: b.lease_owner,
    leaseUntil: n(b.lease_until),
    lastStatus: nn(b.last_status),
    lastErrorClass: b.last_error_class as ErrorClass | null,
    lastDecision: b.last_decision as Decision | null,
    lastWhy: b.last_why as DecisionWhy | null,
    finishedAt: nn(b.finished_at),
  };
}

/**
 * Claimed batches as the worker gets them: in due order (then id), each with its items
 * in insertion order. `items` are the claimed batches' item rows (any order of batches).
 */
export function toClaimed(rows: BatchRow[], items: readonly { batch_id: number; key: string; payload: string }[]): ClaimedBatch[] {
  const byBatch = new Map<number, { key: string; payload: string }[]>();
  for (const it of items) {
    let l = byBatch.get(it.batch_id);
    if (!l) byBatch.set(it.batch_id, (l = []));
    l.push({ key: it.key, payload: it.payload });
  }
  rows.sort((a, b) => a.due_at - b.due_at || a.id - b.id);
  return rows.map((b) => ({
    id: b.id,
    token: b.lease_token,
    destination: b.destination,
    key: b.key,
    round: b.round,
    attempt: b.attempt,
    opStartedAt: b.op_started_at,
    opDeadlineAt: b.op_deadline_at,
    prevDelayMs: b.prev_delay_ms,
    opThrottled: Number(b.op_throttled),
    createdAt: b.created_at,
    notBefore: b.not_before,
    bytes: b.bytes,
    items: byBatch.get(b.id) ?? [],
  }));
}

export function rowToAttempt(a: AttemptRow): AttemptRecord {
  return {
    round: n(a.round),
    attempt: n(a.attempt),
    at: n(a.at),
    status: nn(a.status),
    errorClass: a.error_class as ErrorClass | null,
    elapsedMs: n(a.elapsed_ms),
    decision: a.decision as Decision,
    why: a.why as DecisionWhy | null,
    delayMs: nn(a.delay_ms),
    retryAfterMs: nn(a.retry_after_ms),
    worker: a.worker,
  };
}

/** The SQL condition of a listed state (both stores use the same names for the same columns). */
export function listCondition(state: ListFilter['state'], now: string): string | null {
  switch (state) {
    case undefined:
      return null;
    case 'queued':
      return `state = 'queued'`;
    case 'ready':
      return `state = 'queued' AND lease_until <= ${now} AND not_before <= ${now}`;
    case 'inflight':
      return `state = 'queued' AND lease_until > ${now}`;
    case 'deferred':
      return `state = 'queued' AND lease_until <= ${now} AND not_before > ${now}`;
    case 'delivered':
      return `state = 'delivered'`;
    case 'dropped':
      return `state = 'dropped'`;
    default:
      throw new DeliveryError(
        'ERR_INVALID_CONFIG',
        `Expected \`state\` to be one of queued, ready, inflight, deferred, delivered, dropped, got ${JSON.stringify(state)}`,
        { field: 'state' },
      );
  }
}

type Num = number | string | null | undefined;

/**
 * stats() from its parts: per destination, totals from the counters (state pending:
 * items not yet batched; queued, delivered, dropped: batches and items), live leases,
 * deferred batches (due later, not leased) with the oldest waiting item, and the paused
 * ones. Ready = queued − in flight − deferred. Destinations with nothing at all (every
 * row purged) and not paused are left out.
 */
export function assembleStats(
  totals: readonly { destination: string; state: string; b: Num; i: Num }[],
  inflight: readonly { destination: string; b: Num; i: Num }[],
  deferred: readonly { destination: string; b: Num; i: Num; oldest_b?: Num; oldest_p?: Num }[],
  paused: readonly string[],
): DestinationStats[] {
  const num = (v: Num): number => (v === null || v === undefined ? 0 : Number(v));
  interface Acc {
    pending: number;
    qb: number;
    qi: number;
    fb: number;
    fi: number;
    db: number;
    di: number;
    vb: number;
    vi: number;
    xb: number;
    xi: number;
    oldest: number | null;
    paused: boolean;
  }
  const by = new Map<string, Acc>();
  const acc = (d: string): Acc => {
    let a = by.get(d);
    if (!a) by.set(d, (a = { pending: 0, qb: 0, qi: 0, fb: 0, fi: 0, db: 0, di: 0, vb: 0, vi: 0, xb: 0, xi: 0, oldest: null, paused: false }));
    return a;
  };
  for (const r of totals) {
    const a = acc(r.destination);
    if (r.state === 'pending') a.pending += num(r.i);
    else if (r.state === 'queued') {
      a.qb += num(r.b);
      a.qi += num(r.i);
    } else if (r.state === 'delivered') {
      a.vb += num(r.b);
      a.vi += num(r.i);
    } else if (r.state === 'dropped') {
      a.xb += num(r.b);
      a.xi += num(r.i);
    }
  }
  for (const r of inflight) {
    const a = acc(r.destination);
    a.fb = num(r.b);
    a.fi = num(r.i);
  }
  for (const r of deferred) {
    const a = acc(r.destination);
    a.db = num(r.b);
    a.di = num(r.i);
    for (const o of [r.oldest_b, r.oldest_p]) if (o !== null && o !== undefined) a.oldest = a.oldest === null ? Number(o) : Math.min(a.oldest, Number(o));
  }
  for (const d of paused) acc(d).paused = true;
  const out: DestinationStats[] = [];
  for (const [destination, a] of by) {
    if (!a.paused && a.pending + a.qb + a.vb + a.xb === 0) continue;
    out.push({
      destination,
      pendingItems: a.pending,
      readyBatches: Math.max(0, a.qb - a.fb - a.db),
      readyItems: Math.max(0, a.qi - a.fi - a.di),
      inflightBatches: a.fb,
      inflightItems: a.fi,
      deferredBatches: a.db,
      deferredItems: a.di,
      deliveredBatches: a.vb,
      deliveredItems: a.vi,
      droppedBatches: a.xb,
      droppedItems: a.xi,
      paused: a.paused,
      oldestEnqueuedAt: a.pending + a.qb > 0 ? a.oldest : null,
    });
  }
  return out.sort((x, y) => (x.destination < y.destination ? -1 : x.destination > y.destination ? 1 : 0));
}
