// The PostgreSQL store's writes of what became of batches: outcomes (fenced), requeues,
// purges, and the counters behind stats() that follow every move between states.
import { DeliveryError } from './errors.js';
import { fill } from './migrations.js';
import { counted, PG_RECOUNT, type PgCx } from './postgres-schema.js';
import { whereDestinationAndReason } from './postgres-queries.js';
import { outcomeColumns, REQUEUE_DEFAULT_LIMIT } from './store-common.js';
import type { CompleteResult, FinishedState, Outcome, RequeueFilter } from './types.js';

export async function complete(x: PgCx, outcomes: readonly Outcome[]): Promise<CompleteResult> {
  if (outcomes.length === 0) return { applied: [], lost: [] };
  // One JSON parameter (one JSON.stringify here, parsed by PostgreSQL) instead of a text array per column.
  const rows = outcomes.map((o) => {
    const r = o.record;
    const row = outcomeColumns(o);
    row.push(r === null ? null : [r.attempt, r.at, r.status, r.errorClass, r.elapsedMs, r.decision, r.why, r.delayMs, r.retryAfterMs, r.worker]);
    return row;
  });
  const applied = await x.s.q<{ id: number }>(
    'recording outcomes',
    `
    WITH o AS (
      SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS state, (e->>3)::bigint AS not_before, (e->>4)::int AS attempt,
        (e->>5)::bigint AS op_started_at, (e->>6)::bigint AS op_deadline_at, (e->>7)::bigint AS prev_delay_ms, (e->>8)::int AS last_status,
        e->>9 AS last_error_class, e->>10 AS last_decision, e->>11 AS last_why, (e->>12)::bigint AS finished_at, (e->>13)::int AS op_throttled, e->14 AS r
      FROM jsonb_array_elements($1::jsonb) AS e
    ), u AS (
      UPDATE ${x.t.batches} b SET state = o.state, not_before = o.not_before, due_at = o.not_before, lease_owner = NULL, lease_until = 0,
        attempt = o.attempt, op_started_at = o.op_started_at, op_deadline_at = o.op_deadline_at, prev_delay_ms = o.prev_delay_ms, op_throttled = o.op_throttled,
        last_status = o.last_status, last_error_class = o.last_error_class, last_decision = o.last_decision, last_why = o.last_why,
        finished_at = o.finished_at
      FROM o WHERE b.id = o.id AND b.lease_token = o.token AND b.state = 'queued'
      RETURNING b.id, b.round, b.destination, b.state, b.items
    ), cnt AS (${counted(
      x.t,
      `SELECT destination, 'queued' AS state, -1::bigint AS batches, -items::bigint AS items FROM u WHERE state <> 'queued'
        UNION ALL SELECT destination, state, 1, items FROM u WHERE state <> 'queued'`,
      '$2',
    )}
    ), a AS (
      INSERT INTO ${x.t.attempts} (batch_id, round, attempt, at, status, error_class, elapsed_ms, decision, why, delay_ms, retry_after_ms, worker)
      SELECT o.id, u.round, (o.r->>0)::int, (o.r->>1)::bigint, (o.r->>2)::int, o.r->>3, (o.r->>4)::bigint, o.r->>5, o.r->>6, (o.r->>7)::bigint,
        (o.r->>8)::bigint, o.r->>9
      FROM o JOIN u ON u.id = o.id WHERE jsonb_typeof(o.r) = 'array'
      ON CONFLICT DO NOTHING
    ), again AS (
      -- Written already by this very claim (a write whose answer a broken connection lost, made again): done, not lost.
      SELECT b.id FROM ${x.t.batches} b JOIN o ON b.id = o.id WHERE b.lease_token = o.token AND b.state <> 'queued' AND b.state = o.state
    )
    SELECT id FROM u UNION ALL SELECT id FROM again`,
    [JSON.stringify(rows), x.shard()],
    x.s.outcomePool,
  );
  const ok = new Set(applied.map((r) => r.id));
  return { applied: outcomes.filter((o) => ok.has(o.id)).map((o) => o.id), lost: outcomes.filter((o) => !ok.has(o.id)).map((o) => o.id) };
}

/** Rebuilds the counters behind stats() from the tables (writers wait meanwhile). */
export async function recount(x: PgCx): Promise<void> {
  await x.s.tx(
    'counting the queue',
    async (c) => {
      await c.query(`LOCK TABLE ${x.t.items}, ${x.t.batches} IN SHARE MODE`);
      await c.query(fill(PG_RECOUNT, { ...x.t }));
    },
    true,
  );
}

export async function requeue(x: PgCx, filter: RequeueFilter, now: number): Promise<number> {
  if (filter.ids !== undefined && filter.ids.length === 0) return 0;
  const values: unknown[] = [now, filter.limit ?? REQUEUE_DEFAULT_LIMIT];
  const where = [`state = 'dropped'`];
  if (filter.ids !== undefined) {
    values.push([...filter.ids]);
    where.push(`id = ANY($${values.length}::bigint[])`);
  }
  whereDestinationAndReason(filter, values, where);
  values.push(x.shard());
  const rows = await x.s.q<{ id: number }>(
    'requeueing batches',
    `
    WITH c AS (SELECT id FROM ${x.t.batches} WHERE ${where.join(' AND ')} ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED),
    r AS (
      UPDATE ${x.t.batches} b SET state = 'queued', round = b.round + 1, attempt = 0, op_started_at = NULL, op_deadline_at = NULL,
        prev_delay_ms = NULL, op_throttled = 0, not_before = $1, due_at = $1, lease_owner = NULL, lease_until = 0, lease_token = b.lease_token + 1, finished_at = NULL
      FROM c WHERE b.id = c.id RETURNING b.id, b.destination, b.items
    ), cnt AS (${counted(
      x.t,
      `SELECT destination, 'dropped' AS state, -1::bigint AS batches, -items::bigint AS items FROM r
        UNION ALL SELECT destination, 'queued', 1, items FROM r`,
      `$${values.length}`,
    )})
    SELECT id, destination FROM r`,
    values,
  );
  const touched = [...new Set(rows.map((r) => (r as { destination?: string }).destination).filter((d): d is string => d !== undefined))];
  if (touched.length > 0) await x.s.q('requeueing batches', `SELECT pg_notify($1, d) FROM unnest($2::text[]) AS d`, [x.channel, touched]).catch(() => {});
  return rows.length;
}

export async function purge(x: PgCx, state: FinishedState, before: number, limit: number): Promise<number> {
  if (state !== 'delivered' && state !== 'dropped')
    throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`state\` to be delivered or dropped, got ${JSON.stringify(state)}`, { field: 'state' });
  return x.s.tx(`purging ${state} batches`, async (c) => {
    const ids = (
      await x.s.run<{ id: number }>(
        c,
        `SELECT id FROM ${x.t.batches} WHERE state = '${state}' AND finished_at < $1 ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
        [before, limit],
      )
    ).map((r) => r.id);
    if (ids.length === 0) return 0;
    await x.s.run(
      c,
      `
      WITH i AS (DELETE FROM ${x.t.items} WHERE batch_id = ANY($1::bigint[])), a AS (DELETE FROM ${x.t.attempts} WHERE batch_id = ANY($1::bigint[])),
      b AS (DELETE FROM ${x.t.batches} WHERE id = ANY($1::bigint[]) RETURNING destination, state, items),
      cnt AS (${counted(x.t, `SELECT destination, state, -1::bigint AS batches, -items::bigint AS items FROM b`, '$2')})
      SELECT count(*) FROM b`,
      [ids, x.shard()],
    );
    return ids.length;
  });
}
