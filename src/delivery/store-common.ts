import type { DecisionWhy, Decision, ErrorClass } from '../core/types.js';
import { DeliveryError } from './errors.js';
import type { AttemptRecord, BatchState, BatchSummary, ClaimedBatch, DestinationStats, ListFilter } from './types.js';

/** The version of the tables; a store refuses to work on tables of another version. */
export const SCHEMA_VERSION = 1;
export const LIST_DEFAULT_LIMIT = 100;
export const REQUEUE_DEFAULT_LIMIT = 1000;
/** Delivered batches deleted per purgeDelivered call. */
export const PURGE_DELIVERED_CHUNK = 10_000;
/** Finished batches a worker deletes per transaction: small, so a purge never holds locks for long. */
export const PURGE_CHUNK = 500;

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
    id: n(b.id), destination: b.destination, key: b.key, state: b.state, items: n(b.items), bytes: n(b.bytes),
    createdAt: n(b.created_at), notBefore: n(b.not_before), round: n(b.round), attempt: n(b.attempt), claims: n(b.claims),
    leaseOwner: b.lease_owner, leaseUntil: n(b.lease_until), lastStatus: nn(b.last_status),
    lastErrorClass: b.last_error_class as ErrorClass | null, lastDecision: b.last_decision as Decision | null,
    lastWhy: b.last_why as DecisionWhy | null, finishedAt: nn(b.finished_at),
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
    id: b.id, token: b.lease_token, destination: b.destination, key: b.key, round: b.round, attempt: b.attempt,
    opStartedAt: b.op_started_at, opDeadlineAt: b.op_deadline_at, prevDelayMs: b.prev_delay_ms, opThrottled: Number(b.op_throttled),
    createdAt: b.created_at, notBefore: b.not_before, bytes: b.bytes, items: byBatch.get(b.id) ?? [],
  }));
}

export function rowToAttempt(a: AttemptRow): AttemptRecord {
  return {
    round: n(a.round), attempt: n(a.attempt), at: n(a.at), status: nn(a.status), errorClass: a.error_class as ErrorClass | null,
    elapsedMs: n(a.elapsed_ms), decision: a.decision as Decision, why: a.why as DecisionWhy | null, delayMs: nn(a.delay_ms),
    retryAfterMs: nn(a.retry_after_ms), worker: a.worker,
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
      throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`state\` to be one of queued, ready, inflight, deferred, delivered, dropped, got ${JSON.stringify(state)}`, { field: 'state' });
  }
}

export function mergeStats(
  pending: readonly { destination: string; n: number | string; oldest?: number | string | null }[],
  rows: readonly Record<string, number | string | null>[],
  paused: readonly string[] = [],
): DestinationStats[] {
  const by = new Map<string, DestinationStats>();
  const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v));
  const blank = (destination: string): DestinationStats => ({
    destination, pendingItems: 0, readyBatches: 0, readyItems: 0, inflightBatches: 0, inflightItems: 0, deferredBatches: 0, deferredItems: 0,
    deliveredBatches: 0, deliveredItems: 0, droppedBatches: 0, droppedItems: 0, paused: false, oldestEnqueuedAt: null,
  });
  const older = (a: number | null, b: unknown): number | null => (b === null || b === undefined ? a : a === null ? Number(b) : Math.min(a, Number(b)));
  for (const r of rows) {
    const d = String(r.destination);
    by.set(d, {
      ...blank(d),
      readyBatches: num(r.rb), readyItems: num(r.ri), inflightBatches: num(r.fb), inflightItems: num(r.fi),
      deferredBatches: num(r.db), deferredItems: num(r.di), deliveredBatches: num(r.vb), deliveredItems: num(r.vi),
      droppedBatches: num(r.xb), droppedItems: num(r.xi), oldestEnqueuedAt: older(null, r.oldest),
    });
  }
  for (const p of pending) {
    const had = by.get(p.destination) ?? blank(p.destination);
    by.set(p.destination, { ...had, pendingItems: num(p.n), oldestEnqueuedAt: older(had.oldestEnqueuedAt, p.oldest) });
  }
  for (const d of paused) by.set(d, { ...(by.get(d) ?? blank(d)), paused: true });
  return [...by.values()].sort((a, b) => (a.destination < b.destination ? -1 : a.destination > b.destination ? 1 : 0));
}
