// The SQLite store's reads for operators (stats, list, one batch, drops) and pause.
import type { SqliteCx } from './sqlite-statements.js';
import { assembleStats, listCondition, rowToAttempt, rowToSummary, LIST_DEFAULT_LIMIT, type AttemptRow, type BatchRow } from './store-common.js';
import type { BatchDetail, BatchSummary, DestinationStats, DropStat, ListFilter } from './types.js';

/** As the PostgreSQL store: counters for the totals, indexes for the rest; no statement reads the whole queue. */
export function stats(x: SqliteCx, now: number): DestinationStats[] {
  const { items, batches, dests, counts } = x.t;
  const totals = x.db.prepare(`SELECT destination, state, batches AS b, items AS i FROM ${counts}`).all() as {
    destination: string;
    state: string;
    b: number;
    i: number;
  }[];
  const inflight = x.db
    .prepare(
      `SELECT destination, count(*) AS b, coalesce(sum(items), 0) AS i FROM ${batches}
    WHERE state = 'queued' AND lease_owner IS NOT NULL AND lease_until > ? GROUP BY destination`,
    )
    .all(now) as { destination: string; b: number; i: number }[];
  const deferred = x.db.prepare(`SELECT count(*) AS b, coalesce(sum(items), 0) AS i,
      (SELECT min(enqueued_at) FROM ${batches} WHERE state = 'queued' AND destination = @d) AS oldest_b,
      (SELECT enqueued_at FROM ${items} WHERE destination = @d AND batch_id IS NULL ORDER BY id LIMIT 1) AS oldest_p
    FROM ${batches} WHERE state = 'queued' AND destination = @d AND due_at > @now AND lease_until <= @now`);
  const per = [...new Set(totals.map((r) => r.destination))].map((d) => ({
    destination: d,
    ...(deferred.get({ d, now }) as { b: number; i: number; oldest_b: number | null; oldest_p: number | null }),
  }));
  const paused = (x.db.prepare(`SELECT destination FROM ${dests} WHERE paused_at IS NOT NULL`).all() as { destination: string }[]).map((r) => r.destination);
  return assembleStats(totals, inflight, per, paused);
}

export function list(x: SqliteCx, filter: ListFilter, now: number): BatchSummary[] {
  const where: string[] = [];
  const params: Record<string, unknown> = { now, after: filter.afterId ?? 0, limit: filter.limit ?? LIST_DEFAULT_LIMIT };
  const cond = listCondition(filter.state, '@now');
  if (cond) where.push(cond);
  if (filter.destination !== undefined) {
    where.push('destination = @destination');
    params.destination = filter.destination;
  }
  if (filter.reason !== undefined) {
    where.push('last_decision = @reason');
    params.reason = filter.reason;
  }
  where.push('id > @after');
  const rows = x.db.prepare(`SELECT * FROM ${x.t.batches} WHERE ${where.join(' AND ')} ORDER BY id LIMIT @limit`).all(params) as BatchRow[];
  return rows.map(rowToSummary);
}

export function get(x: SqliteCx, id: number): BatchDetail | null {
  const b = x.s.getBatch.get(id) as BatchRow | undefined;
  if (!b) return null;
  return {
    ...rowToSummary(b),
    itemList: x.s.getItems.all(id) as BatchDetail['itemList'],
    attempts: (x.s.getAttempts.all(id) as AttemptRow[]).map(rowToAttempt),
  };
}

export function dropStats(x: SqliteCx): DropStat[] {
  return (
    x.db
      .prepare(
        `SELECT destination, last_decision AS reason, last_why AS why, last_status AS lastStatus,
      last_error_class AS lastErrorClass, count(*) AS batches, sum(items) AS items
    FROM ${x.t.batches} WHERE state = 'dropped'
    GROUP BY destination, last_decision, last_why, last_status, last_error_class
    ORDER BY batches DESC, destination`,
      )
      .all() as DropStat[]
  ).map((r) => ({ ...r, reason: r.reason ?? 'unknown' }));
}

export function setPaused(x: SqliteCx, destination: string, paused: boolean, now: number): boolean {
  const { dests } = x.t;
  const r = paused
    ? x.db
        .prepare(
          `INSERT INTO ${dests} (destination, paused_at) VALUES (?, ?) ON CONFLICT (destination) DO UPDATE SET paused_at = excluded.paused_at WHERE paused_at IS NULL`,
        )
        .run(destination, now)
    : x.db.prepare(`UPDATE ${dests} SET paused_at = NULL WHERE destination = ? AND paused_at IS NOT NULL`).run(destination);
  return r.changes > 0;
}
