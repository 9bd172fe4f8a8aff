// The PostgreSQL store's reads for operators (stats, list, one batch, drops) and pause.
import type { PgCx } from './postgres-schema.js';
import { assembleStats, listCondition, rowToAttempt, rowToSummary, LIST_DEFAULT_LIMIT, type AttemptRow, type BatchRow } from './store-common.js';
import type { BatchDetail, BatchSummary, DestinationStats, DropStat, ListFilter } from './types.js';

/** Adds the destination and last-decision conditions shared by list() and requeue(). */
export function whereDestinationAndReason(filter: { readonly destination?: string; readonly reason?: string }, values: unknown[], where: string[]): void {
  if (filter.destination !== undefined) {
    values.push(filter.destination);
    where.push(`destination = $${values.length}`);
  }
  if (filter.reason !== undefined) {
    values.push(filter.reason);
    where.push(`last_decision = $${values.length}`);
  }
}

/**
 * Per destination: totals from the counters (pending items; queued, delivered and
 * dropped batches and items), the live leases from their index, the deferred batches
 * from their own index (due later, not leased: an index-only count of just those — a
 * leased batch is due when its lease ends, so one due later with no owner waits for
 * its not_before), the oldest
 * waiting item from two indexes, and the paused flag. Ready = queued − in flight −
 * deferred. No statement reads the whole queue.
 */
export async function stats(x: PgCx, now: number): Promise<DestinationStats[]> {
  const { items, batches, dests, counts } = x.t;
  const totals = await x.s.q<{ destination: string; state: string; b: number; i: number }>(
    'reading statistics',
    `SELECT destination, state, sum(batches) AS b, sum(items) AS i FROM ${counts} GROUP BY destination, state`,
  );
  const names = [...new Set(totals.map((r) => r.destination))];
  const inflight = await x.s.q<{ destination: string; b: number; i: number }>(
    'reading statistics',
    `SELECT destination, count(*) AS b, coalesce(sum(items), 0) AS i FROM ${batches} WHERE state = 'queued' AND lease_owner IS NOT NULL AND lease_until > $1 GROUP BY destination`,
    [now],
  );
  const per =
    names.length === 0
      ? []
      : await x.s.q<{ destination: string; b: number; i: number; oldest_b: number | null; oldest_p: number | null }>(
          'reading statistics',
          `
    SELECT d AS destination, x.b, x.i,
      (SELECT min(enqueued_at) FROM ${batches} o WHERE o.state = 'queued' AND o.destination = d) AS oldest_b,
      (SELECT enqueued_at FROM ${items} p WHERE p.destination = d AND p.batch_id IS NULL ORDER BY p.id LIMIT 1) AS oldest_p
    FROM unnest($2::text[]) AS d,
      LATERAL (SELECT count(*) AS b, coalesce(sum(items), 0) AS i FROM ${batches} WHERE state = 'queued' AND destination = d AND lease_owner IS NULL AND due_at > $1) AS x`,
          [now, names],
        );
  const paused = await x.s.q<{ destination: string }>('reading statistics', `SELECT destination FROM ${dests} WHERE paused_at IS NOT NULL`);
  return assembleStats(
    totals,
    inflight,
    per,
    paused.map((p) => p.destination),
  );
}

export async function list(x: PgCx, filter: ListFilter, now: number): Promise<BatchSummary[]> {
  const values: unknown[] = [now, filter.afterId ?? 0, filter.limit ?? LIST_DEFAULT_LIMIT];
  const where: string[] = ['id > $2'];
  const cond = listCondition(filter.state, '$1');
  if (cond) where.push(cond);
  whereDestinationAndReason(filter, values, where);
  const rows = await x.s.q<BatchRow>(
    'listing batches',
    `SELECT * FROM ${x.t.batches} WHERE $1::bigint IS NOT NULL AND ${where.join(' AND ')} ORDER BY id LIMIT $3`,
    values,
  );
  return rows.map(rowToSummary);
}

export async function get(x: PgCx, id: number): Promise<BatchDetail | null> {
  const b = await x.s.q<BatchRow>('reading a batch', `SELECT * FROM ${x.t.batches} WHERE id = $1`, [id]);
  if (b.length === 0) return null;
  const items = await x.s.q<{ id: number; key: string; payload: string; enqueuedAt: number }>(
    'reading a batch',
    `SELECT id, key, payload, enqueued_at AS "enqueuedAt" FROM ${x.t.items} WHERE batch_id = $1 ORDER BY id`,
    [id],
  );
  const attempts = await x.s.q<AttemptRow>('reading a batch', `SELECT * FROM ${x.t.attempts} WHERE batch_id = $1 ORDER BY round, attempt`, [id]);
  return { ...rowToSummary(b[0]!), itemList: items, attempts: attempts.map(rowToAttempt) };
}

export async function dropStats(x: PgCx): Promise<DropStat[]> {
  const rows = await x.s.q<DropStat>(
    'reading drop statistics',
    `
    SELECT destination, coalesce(last_decision, 'unknown') AS reason, last_why AS why, last_status AS "lastStatus",
      last_error_class AS "lastErrorClass", count(*) AS batches, sum(items) AS items
    FROM ${x.t.batches} WHERE state = 'dropped'
    GROUP BY destination, last_decision, last_why, last_status, last_error_class
    ORDER BY batches DESC, destination`,
  );
  return rows;
}

export async function setPaused(x: PgCx, destination: string, paused: boolean, now: number): Promise<boolean> {
  const rows = await x.s.q<{ changed: boolean }>(
    paused ? 'pausing a destination' : 'resuming a destination',
    paused
      ? `INSERT INTO ${x.t.dests} (destination, paused_at) VALUES ($1, $2)
       ON CONFLICT (destination) DO UPDATE SET paused_at = $2 WHERE ${x.t.dests}.paused_at IS NULL RETURNING true AS changed`
      : `WITH u AS (UPDATE ${x.t.dests} SET paused_at = NULL WHERE destination = $1 AND paused_at IS NOT NULL AND $2::bigint IS NOT NULL RETURNING destination)
       SELECT true AS changed, pg_notify($3, destination) FROM u`,
    paused ? [destination, now] : [destination, now, x.channel],
  );
  return rows.length > 0;
}
