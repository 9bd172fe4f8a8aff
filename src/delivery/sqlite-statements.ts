// The SQLite store's prepared statements, and what its operations work with.
import type BetterSqlite3 from 'better-sqlite3';
import type { SqliteTables } from './sqlite-schema.js';

type Db = BetterSqlite3.Database;
type Stmt = BetterSqlite3.Statement;

/** The statements every call uses, prepared once when the store opens (after the tables are made). */
export function prepareStatements(db: Db, t: SqliteTables): Statements {
  const { items, batches, attempts, dests, rate, counts } = t;
  const p = (sql: string): Stmt => db.prepare(sql);
  return {
    insertItem: p(
      `INSERT INTO ${items} (destination, key, payload, bytes, enqueued_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (destination, key) DO NOTHING RETURNING id`,
    ),
    findItem: p(`SELECT id FROM ${items} WHERE destination = ? AND key = ?`),
    anyDue: p(`SELECT 1 FROM ${batches} WHERE state = 'queued' AND destination = ? AND due_at <= ? LIMIT 1`),
    anyPending: p(`SELECT 1 FROM ${items} WHERE destination = ? AND batch_id IS NULL LIMIT 1`),
    pending: p(`SELECT id, key, bytes, enqueued_at AS enqueuedAt FROM ${items} WHERE destination = ? AND batch_id IS NULL ORDER BY id LIMIT ?`),
    insertBatch: p(
      `INSERT INTO ${batches} (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at) VALUES (?, ?, 'queued', ?, ?, ?, ?, ?, ?) RETURNING id`,
    ),
    pendingPayload: p(`SELECT id, key, bytes, enqueued_at AS enqueuedAt, payload FROM ${items} WHERE destination = ? AND batch_id IS NULL ORDER BY id LIMIT ?`),
    // A batch born leased: the row a first claim leaves (token 1, one claim).
    insertLeased:
      p(`INSERT INTO ${batches} (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at, lease_owner, lease_until, lease_token, claims)
        VALUES (?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, 1, 1) RETURNING id`),
    setBatch: p(`UPDATE ${items} SET batch_id = m.b FROM (SELECT value ->> 0 AS i, value ->> 1 AS b FROM json_each(?)) AS m
        WHERE ${items}.id = m.i AND +${items}.batch_id IS NULL`), // `+`: look rows up by id, never scan the index
    // One statement for the whole claim; the subquery picks the oldest due batches.
    lease: p(`UPDATE ${batches} SET lease_token = lease_token + 1, lease_owner = @owner, lease_until = @until, due_at = @until, claims = claims + 1
        WHERE id IN (SELECT id FROM ${batches} WHERE state = 'queued' AND destination = @d AND due_at <= @now
          AND NOT EXISTS (SELECT 1 FROM ${dests} WHERE destination = @d AND paused_at IS NOT NULL) ORDER BY due_at, id LIMIT @limit)
        RETURNING id, destination, key, lease_token, round, attempt, op_started_at, op_deadline_at, prev_delay_ms, op_throttled, created_at, not_before, bytes, due_at`),
    batchItems: p(`SELECT batch_id, key, payload FROM ${items} WHERE batch_id IN (SELECT value FROM json_each(?)) ORDER BY batch_id, id`),
    renew: p(`UPDATE ${batches} SET lease_until = ?, due_at = ? WHERE id = ? AND lease_token = ? AND state = 'queued'`),
    // Fenced: a row is written only while its lease token still matches. Outcomes come as one JSON array.
    complete: p(`UPDATE ${batches} SET state = o.state, not_before = o.nb, due_at = o.nb, lease_owner = NULL, lease_until = 0, attempt = o.att,
          op_started_at = o.os, op_deadline_at = o.od, prev_delay_ms = o.pd, op_throttled = o.ot, last_status = o.ls, last_error_class = o.le, last_decision = o.ld,
          last_why = o.lw, finished_at = o.fa
        FROM (SELECT value ->> 0 AS id, value ->> 1 AS token, value ->> 2 AS state, value ->> 3 AS nb, value ->> 4 AS att, value ->> 5 AS os,
                     value ->> 6 AS od, value ->> 7 AS pd, value ->> 8 AS ls, value ->> 9 AS le, value ->> 10 AS ld, value ->> 11 AS lw,
                     value ->> 12 AS fa, value ->> 13 AS ot FROM json_each(?)) AS o
        WHERE ${batches}.id = o.id AND ${batches}.lease_token = o.token AND +${batches}.state = 'queued'
        RETURNING ${batches}.id AS id, ${batches}.round AS round, ${batches}.destination AS destination, ${batches}.state AS state, ${batches}.items AS items`),
    insertAttempts: p(`INSERT INTO ${attempts} (batch_id, round, attempt, at, status, error_class, elapsed_ms, decision, why, delay_ms, retry_after_ms, worker)
        SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6, value ->> 7, value ->> 8, value ->> 9,
               value ->> 10, value ->> 11 FROM json_each(?) WHERE true
        ON CONFLICT DO NOTHING`),
    release: p(`UPDATE ${batches} SET lease_owner = NULL, lease_until = 0, due_at = not_before WHERE id = ? AND lease_token = ? AND state = 'queued'`),
    getBatch: p(`SELECT * FROM ${batches} WHERE id = ?`),
    getItems: p(`SELECT id, key, payload, enqueued_at AS enqueuedAt FROM ${items} WHERE batch_id = ? ORDER BY id`),
    getAttempts: p(`SELECT * FROM ${attempts} WHERE batch_id = ? ORDER BY round, attempt`),
    paused: p(`SELECT paused_at FROM ${dests} WHERE destination = ?`),
    rateUsed: p(`SELECT coalesce(sum(n), 0) AS used FROM ${rate} WHERE destination = ? AND end_at > ?`),
    rateLog: p(`SELECT end_at, n FROM ${rate} WHERE destination = ? AND end_at > ? ORDER BY end_at, id`),
    rateGone: p(`DELETE FROM ${rate} WHERE destination = ? AND end_at <= ?`),
    rateTake: p(`INSERT INTO ${rate} (destination, at, n, end_at) VALUES (?, ?, ?, ?) RETURNING id`),
    rateEnd: p(`UPDATE ${rate} SET end_at = min(end_at, ?) WHERE id = ?`),
    leased: p(`SELECT count(*) AS n FROM ${batches} WHERE destination = ? AND state = 'queued' AND lease_owner IS NOT NULL AND lease_until > ?`),
    count: p(`INSERT INTO ${counts} (destination, state, batches, items) VALUES (?, ?, ?, ?)
        ON CONFLICT (destination, state) DO UPDATE SET batches = batches + excluded.batches, items = items + excluded.items`),
    requeueOne: p(`UPDATE ${batches} SET state = 'queued', round = round + 1, attempt = 0, op_started_at = NULL, op_deadline_at = NULL,
        prev_delay_ms = NULL, op_throttled = 0, not_before = ?, due_at = ?, lease_owner = NULL, lease_until = 0, lease_token = lease_token + 1, finished_at = NULL
        WHERE id = ? AND state = 'dropped' RETURNING destination, items`),
  };
}

/** The statements, by name. */
export type Statements = Readonly<Record<StatementName, Stmt>>;

type StatementName =
  | 'insertItem'
  | 'findItem'
  | 'anyDue'
  | 'anyPending'
  | 'pending'
  | 'insertBatch'
  | 'pendingPayload'
  | 'insertLeased'
  | 'setBatch'
  | 'lease'
  | 'batchItems'
  | 'renew'
  | 'complete'
  | 'insertAttempts'
  | 'release'
  | 'getBatch'
  | 'getItems'
  | 'getAttempts'
  | 'paused'
  | 'rateUsed'
  | 'rateLog'
  | 'rateGone'
  | 'rateTake'
  | 'rateEnd'
  | 'leased'
  | 'count'
  | 'requeueOne';

/** What the store's operations work with: the database, its tables and its statements. */
export interface SqliteCx {
  readonly db: Db;
  readonly t: SqliteTables;
  readonly s: Statements;
}
