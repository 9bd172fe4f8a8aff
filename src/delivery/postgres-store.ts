import type * as Pg from 'pg';
import { cutBatches, type PendingRow } from './batching.js';
import { DeliveryError } from './errors.js';
import {
  listCondition, mergeStats, rowToAttempt, rowToSummary, toClaimed, LIST_DEFAULT_LIMIT, PURGE_CHUNK, REQUEUE_DEFAULT_LIMIT, SCHEMA_VERSION, type AttemptRow, type BatchRow,
} from './store-common.js';
import type {
  BatchDetail, BatchLimits, BatchSummary, ClaimedBatch, CompleteResult, DeliveryStore, DestinationStats, DropStat,
  EnqueueResult, FormResult, Lease, ListFilter, NewItem, Outcome, RequeueFilter,
} from './types.js';

export interface PostgresStoreOptions {
  /** postgres://user@host:port/db (a `schema` query parameter is read and removed). */
  readonly connectionString: string;
  /** The schema that holds the tables (created if missing). Default `public`. */
  readonly schema?: string;
  /** Prefix of the table names (default `relent_`). */
  readonly tablePrefix?: string;
  /** Connections in this process's pool. Default 4. */
  readonly poolSize?: number;
  /** How long to wait for a connection before ERR_STORE_UNAVAILABLE (ms). Default 5000. */
  readonly connectTimeoutMs?: number;
}

export const POSTGRES_DEFAULTS = Object.freeze({ schema: 'public', tablePrefix: 'relent_', poolSize: 4, connectTimeoutMs: 5_000 });

const CONNECT_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', '28P01', '28000', '3D000', '57P03', '08001', '08006', '08004']);

/** Maps a pg error to a DeliveryError that says what happened. */
export function postgresError(e: unknown, where: string, what: string): DeliveryError {
  if (DeliveryError.is(e)) return e;
  const code = typeof (e as { code?: unknown })?.code === 'string' ? (e as { code: string }).code : '';
  const msg = e instanceof Error ? e.message : String(e);
  if (CONNECT_CODES.has(code) || /timeout exceeded when trying to connect|Connection terminated|connect ECONNREFUSED/i.test(msg)) {
    return new DeliveryError('ERR_STORE_UNAVAILABLE', `${where}: cannot reach PostgreSQL (${code || msg}${code && msg ? `: ${msg}` : ''}); ${what} did not happen, nothing stored earlier is lost`, { cause: e });
  }
  if (code === '53100' || code === '53200' || code === '53400') {
    return new DeliveryError('ERR_STORE_FULL', `${where}: PostgreSQL is out of disk or memory (${code}: ${msg}); ${what} was rolled back, nothing stored earlier is lost`, { cause: e });
  }
  if (code === '55P03') {
    return new DeliveryError('ERR_STORE_LOCKED', `${where}: a lock could not be taken (${code}: ${msg}); ${what} did not happen`, { cause: e });
  }
  return new DeliveryError('ERR_STORE', `${where}: ${what} failed (${code || 'error'}: ${msg})`, { cause: e });
}

const IDENT = /^[a-z_][a-z0-9_]{0,40}$/;

/** Where a connection string points, without its password. */
export function describePostgres(connectionString: string, schema: string): string {
  try {
    const u = new URL(connectionString);
    return `postgres://${u.username ? `${decodeURIComponent(u.username)}@` : ''}${u.host}${u.pathname} (schema ${schema})`;
  } catch {
    return `postgres (schema ${schema})`;
  }
}

/**
 * Opens the PostgreSQL store, for several workers on several machines: claims use
 * `FOR UPDATE SKIP LOCKED`, leases expire, and every write is fenced by the lease
 * token. `pg` is loaded here, on first use.
 */
export async function openPostgresStore(options: PostgresStoreOptions): Promise<DeliveryStore> {
  let pg: typeof Pg;
  try {
    const mod = (await import('pg')) as unknown as { default?: typeof Pg } & typeof Pg;
    pg = mod.default ?? mod;
  } catch (e) {
    throw new DeliveryError('ERR_STORE_DRIVER_MISSING', 'The PostgreSQL store needs the optional package pg@8 (npm install pg)', { cause: e });
  }
  let connectionString = options.connectionString;
  let schema = options.schema;
  try {
    const u = new URL(connectionString);
    const s = u.searchParams.get('schema');
    if (s !== null) {
      schema ??= s;
      u.searchParams.delete('schema');
      connectionString = u.toString();
    }
  } catch {
    throw new DeliveryError('ERR_INVALID_CONFIG', 'Expected `store` to be a URL like postgres://user@host:5432/db', { field: 'store' });
  }
  schema ??= POSTGRES_DEFAULTS.schema;
  const prefix = options.tablePrefix ?? POSTGRES_DEFAULTS.tablePrefix;
  if (!IDENT.test(schema)) throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`schema\` to be lower-case letters, digits and _, got ${JSON.stringify(schema)}`, { field: 'schema' });
  if (!IDENT.test(prefix)) throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`tablePrefix\` to be lower-case letters, digits and _, got ${JSON.stringify(prefix)}`, { field: 'tablePrefix' });
  const where = describePostgres(connectionString, schema);
  // BIGINT (20) and NUMERIC (1700, what sum() of bigint gives) as numbers: all our values are < 2^53.
  const types = {
    getTypeParser: (oid: number, format?: string) => (oid === 20 || oid === 1700 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format as 'text')),
  };
  const pool = new pg.Pool({
    connectionString,
    max: options.poolSize ?? POSTGRES_DEFAULTS.poolSize,
    connectionTimeoutMillis: options.connectTimeoutMs ?? POSTGRES_DEFAULTS.connectTimeoutMs,
    types: types as unknown as Pg.CustomTypesConfig,
  });
  // An idle client that loses its connection must not crash the process; the next query reports it.
  pool.on('error', () => {});
  const store = new PostgresStore(pool, where, schema, prefix);
  try {
    await store.init();
  } catch (e) {
    await pool.end().catch(() => {});
    throw e;
  }
  return store;
}

const RETRYABLE_PG = new Set(['40P01', '40001']); // deadlock detected, serialization failure

/** Adds the destination and last-decision conditions shared by list() and requeue(). */
function whereDestinationAndReason(filter: { readonly destination?: string; readonly reason?: string }, values: unknown[], where: string[]): void {
  if (filter.destination !== undefined) {
    values.push(filter.destination);
    where.push(`destination = $${values.length}`);
  }
  if (filter.reason !== undefined) {
    values.push(filter.reason);
    where.push(`last_decision = $${values.length}`);
  }
}

class PostgresStore implements DeliveryStore {
  readonly kind = 'postgres' as const;
  private readonly t: { items: string; batches: string; attempts: string; meta: string };
  private closed = false;

  constructor(private readonly pool: Pg.Pool, readonly description: string, private readonly schema: string, prefix: string) {
    const q = (name: string): string => `"${schema}"."${prefix}${name}"`;
    this.t = { items: q('items'), batches: q('batches'), attempts: q('attempts'), meta: q('meta') };
  }

  /** Runs `fn` with a client inside a transaction; a deadlock is retried (twice) before it is reported. */
  private async tx<T>(what: string, fn: (c: Pg.PoolClient) => Promise<T>): Promise<T> {
    if (this.closed) throw new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`);
    for (let tries = 0; ; tries++) {
      let client: Pg.PoolClient;
      try {
        client = await this.pool.connect();
      } catch (e) {
        throw postgresError(e, this.description, what);
      }
      try {
        await client.query('BEGIN');
        const out = await fn(client);
        await client.query('COMMIT');
        client.release();
        return out;
      } catch (e) {
        await client.query('ROLLBACK').catch(() => {});
        client.release();
        const code = (e as { code?: string }).code ?? '';
        if (RETRYABLE_PG.has(code) && tries < 2) continue;
        throw postgresError(e, this.description, what);
      }
    }
  }

  private async q<R>(what: string, text: string, values: unknown[] = []): Promise<R[]> {
    if (this.closed) throw new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`);
    for (let tries = 0; ; tries++) {
      try {
        return (await this.pool.query(text, values)).rows as R[];
      } catch (e) {
        const code = (e as { code?: string }).code ?? '';
        if (RETRYABLE_PG.has(code) && tries < 2) continue;
        throw postgresError(e, this.description, what);
      }
    }
  }

  async init(): Promise<void> {
    const { items, batches, attempts, meta } = this.t;
    const idx = (name: string): string => `"${name}"`;
    const base = this.t.items.split('.')[1]!.replace(/"/g, '').replace(/items$/, '');
    await this.tx('creating the tables', async (c) => {
      // One creator at a time: two workers starting together would race on the catalog.
      await c.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [`relent:${this.schema}.${base}`]);
      await c.query(`CREATE SCHEMA IF NOT EXISTS "${this.schema}"`);
      await c.query(`
        CREATE TABLE IF NOT EXISTS ${meta} (k TEXT PRIMARY KEY, v TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS ${items} (
          id BIGSERIAL PRIMARY KEY,
          destination TEXT NOT NULL,
          key TEXT NOT NULL,
          payload TEXT NOT NULL,
          bytes INTEGER NOT NULL,
          enqueued_at BIGINT NOT NULL,
          batch_id BIGINT,
          UNIQUE (destination, key)
        );
        CREATE INDEX IF NOT EXISTS ${idx(`${base}items_pending`)} ON ${items} (destination, id) WHERE batch_id IS NULL;
        CREATE INDEX IF NOT EXISTS ${idx(`${base}items_batch`)} ON ${items} (batch_id);
        CREATE TABLE IF NOT EXISTS ${batches} (
          id BIGSERIAL PRIMARY KEY,
          destination TEXT NOT NULL,
          key TEXT NOT NULL,
          state TEXT NOT NULL,
          items INTEGER NOT NULL,
          bytes BIGINT NOT NULL,
          created_at BIGINT NOT NULL,
          not_before BIGINT NOT NULL,
          due_at BIGINT NOT NULL,
          lease_owner TEXT,
          lease_until BIGINT NOT NULL DEFAULT 0,
          lease_token BIGINT NOT NULL DEFAULT 0,
          claims INTEGER NOT NULL DEFAULT 0,
          round INTEGER NOT NULL DEFAULT 1,
          attempt INTEGER NOT NULL DEFAULT 0,
          op_started_at BIGINT,
          op_deadline_at BIGINT,
          prev_delay_ms BIGINT,
          op_throttled INTEGER NOT NULL DEFAULT 0,
          last_status INTEGER,
          last_error_class TEXT,
          last_decision TEXT,
          last_why TEXT,
          finished_at BIGINT
        );
        CREATE INDEX IF NOT EXISTS ${idx(`${base}batches_due`)} ON ${batches} (destination, due_at, id) WHERE state = 'queued';
        CREATE INDEX IF NOT EXISTS ${idx(`${base}batches_dropped`)} ON ${batches} (destination, id) WHERE state = 'dropped';
        CREATE INDEX IF NOT EXISTS ${idx(`${base}batches_key`)} ON ${batches} (key);
        CREATE TABLE IF NOT EXISTS ${attempts} (
          batch_id BIGINT NOT NULL,
          round INTEGER NOT NULL,
          attempt INTEGER NOT NULL,
          at BIGINT NOT NULL,
          status INTEGER,
          error_class TEXT,
          elapsed_ms BIGINT NOT NULL,
          decision TEXT NOT NULL,
          why TEXT,
          delay_ms BIGINT,
          retry_after_ms BIGINT,
          worker TEXT,
          PRIMARY KEY (batch_id, round, attempt)
        );
      `);
      // Columns added after the tables were first released: a database created by an earlier
      // relent gets them here. Looked up first, so the usual start takes no table lock.
      const cols = (await c.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`,
        [this.schema, `${base}batches`])).rows as { column_name: string }[];
      if (!cols.some((r) => r.column_name === 'op_throttled')) {
        await c.query(`ALTER TABLE ${batches} ADD COLUMN IF NOT EXISTS op_throttled INTEGER NOT NULL DEFAULT 0`);
      }
      const v = (await c.query(`SELECT v FROM ${meta} WHERE k = 'schema'`)).rows as { v: string }[];
      if (v.length === 0) await c.query(`INSERT INTO ${meta} (k, v) VALUES ('schema', $1)`, [String(SCHEMA_VERSION)]);
      else if (v[0]!.v !== String(SCHEMA_VERSION)) throw new DeliveryError('ERR_STORE', `${this.description}: schema version ${v[0]!.v}, this relent knows ${SCHEMA_VERSION}`);
    });
  }

  async enqueue(list: readonly NewItem[], now: number): Promise<EnqueueResult[]> {
    if (list.length === 0) return [];
    return this.tx(`enqueueing ${list.length} item${list.length === 1 ? '' : 's'}`, async (c) => {
      const dests = list.map((i) => i.destination);
      const keys = list.map((i) => i.key);
      const inserted = (await c.query(
        `INSERT INTO ${this.t.items} (destination, key, payload, bytes, enqueued_at)
         SELECT d, k, p, octet_length(p), $4 FROM unnest($1::text[], $2::text[], $3::text[]) AS u(d, k, p)
         ON CONFLICT (destination, key) DO NOTHING RETURNING id, destination, key`,
        [dests, keys, list.map((i) => i.payload), now],
      )).rows as { id: number; destination: string; key: string }[];
      const fresh = new Map(inserted.map((r) => [`${r.destination}\0${r.key}`, r.id]));
      const missing = list.filter((i) => !fresh.has(`${i.destination}\0${i.key}`));
      const known = new Map<string, number>();
      if (missing.length > 0) {
        const rows = (await c.query(
          `SELECT i.id, i.destination, i.key FROM ${this.t.items} i JOIN unnest($1::text[], $2::text[]) AS u(d, k) ON i.destination = u.d AND i.key = u.k`,
          [missing.map((i) => i.destination), missing.map((i) => i.key)],
        )).rows as { id: number; destination: string; key: string }[];
        for (const r of rows) known.set(`${r.destination}\0${r.key}`, r.id);
      }
      const seen = new Set<string>();
      return list.map((i) => {
        const k = `${i.destination}\0${i.key}`;
        const id = fresh.get(k);
        // The same key twice in one call: the first is stored, the second is a duplicate.
        if (id !== undefined && !seen.has(k)) {
          seen.add(k);
          return { id, key: i.key, duplicate: false };
        }
        return { id: id ?? known.get(k) ?? 0, key: i.key, duplicate: true };
      });
    });
  }

  async formBatches(destination: string, limits: BatchLimits, now: number, maxBatches: number): Promise<FormResult> {
    return this.tx('forming batches', async (c) => {
      const limit = Math.max(1, maxBatches * limits.maxItems);
      const rows = (await c.query(
        `SELECT id, key, bytes, enqueued_at AS "enqueuedAt" FROM ${this.t.items}
         WHERE destination = $1 AND batch_id IS NULL ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`,
        [destination, limit],
      )).rows as PendingRow[];
      if (rows.length === 0) return { formed: 0, nextAt: null };
      const { cuts, nextAt } = cutBatches(destination, rows, limits, now, maxBatches, rows.length < limit);
      if (cuts.length === 0) return { formed: 0, nextAt };
      const made = (await c.query(
        `INSERT INTO ${this.t.batches} (destination, key, state, items, bytes, created_at, not_before, due_at)
         SELECT $1, k, 'queued', n, b, $5, $5, $5 FROM unnest($2::text[], $3::int[], $4::bigint[]) WITH ORDINALITY AS u(k, n, b, o) ORDER BY o
         RETURNING id, key`,
        [destination, cuts.map((x) => x.key), cuts.map((x) => x.rows.length), cuts.map((x) => x.bytes), now],
      )).rows as { id: number; key: string }[];
      const idOf = new Map(made.map((r) => [r.key, r.id]));
      const itemIds: number[] = [];
      const batchIds: number[] = [];
      for (const cut of cuts) {
        const bid = idOf.get(cut.key)!;
        for (const r of cut.rows) {
          itemIds.push(r.id);
          batchIds.push(bid);
        }
      }
      await c.query(
        `UPDATE ${this.t.items} i SET batch_id = m.b FROM unnest($1::bigint[], $2::bigint[]) AS m(i, b) WHERE i.id = m.i`,
        [itemIds, batchIds],
      );
      return { formed: cuts.length, nextAt };
    });
  }

  async claim(destination: string, limit: number, now: number, leaseMs: number, owner: string): Promise<ClaimedBatch[]> {
    const until = now + leaseMs;
    const rows = await this.q<BatchRow>('claiming batches', `
      WITH c AS (
        SELECT id FROM ${this.t.batches}
        WHERE state = 'queued' AND destination = $1 AND due_at <= $2
        ORDER BY due_at, id LIMIT $3 FOR UPDATE SKIP LOCKED
      )
      UPDATE ${this.t.batches} b SET lease_token = b.lease_token + 1, lease_owner = $4, lease_until = $5, due_at = $5, claims = b.claims + 1
      FROM c WHERE b.id = c.id
      RETURNING b.*`, [destination, now, limit, owner, until]);
    if (rows.length === 0) return [];
    const items = await this.q<{ batch_id: number; key: string; payload: string }>('reading claimed items',
      `SELECT batch_id, key, payload FROM ${this.t.items} WHERE batch_id = ANY($1::bigint[]) ORDER BY batch_id, id`, [rows.map((r) => r.id)]);
    return toClaimed(rows, items);
  }

  async renew(leases: readonly Lease[], now: number, leaseMs: number): Promise<number[]> {
    if (leases.length === 0) return [];
    const until = now + leaseMs;
    const kept = await this.q<{ id: number }>('renewing leases', `
      UPDATE ${this.t.batches} b SET lease_until = $3, due_at = $3
      FROM unnest($1::bigint[], $2::bigint[]) AS l(id, token)
      WHERE b.id = l.id AND b.lease_token = l.token AND b.state = 'queued'
      RETURNING b.id`, [leases.map((l) => l.id), leases.map((l) => l.token), until]);
    const ok = new Set(kept.map((r) => r.id));
    return leases.filter((l) => !ok.has(l.id)).map((l) => l.id);
  }

  async complete(outcomes: readonly Outcome[]): Promise<CompleteResult> {
    if (outcomes.length === 0) return { applied: [], lost: [] };
    const o = outcomes;
    const withRecord = o.filter((x) => x.record !== null);
    const r = withRecord.map((x) => x.record!);
    const applied = await this.q<{ id: number }>('recording outcomes', `
      WITH o AS (
        SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::int[], $6::bigint[], $7::bigint[], $8::bigint[],
                             $9::int[], $10::text[], $11::text[], $12::text[], $13::bigint[], $25::int[])
          AS o(id, token, state, not_before, attempt, op_started_at, op_deadline_at, prev_delay_ms, last_status, last_error_class, last_decision, last_why, finished_at,
               op_throttled)
      ), u AS (
        UPDATE ${this.t.batches} b SET state = o.state, not_before = o.not_before, due_at = o.not_before, lease_owner = NULL, lease_until = 0,
          attempt = o.attempt, op_started_at = o.op_started_at, op_deadline_at = o.op_deadline_at, prev_delay_ms = o.prev_delay_ms, op_throttled = o.op_throttled,
          last_status = o.last_status, last_error_class = o.last_error_class, last_decision = o.last_decision, last_why = o.last_why,
          finished_at = o.finished_at
        FROM o WHERE b.id = o.id AND b.lease_token = o.token AND b.state = 'queued'
        RETURNING b.id, b.round
      ), a AS (
        INSERT INTO ${this.t.attempts} (batch_id, round, attempt, at, status, error_class, elapsed_ms, decision, why, delay_ms, retry_after_ms, worker)
        SELECT r.id, u.round, r.attempt, r.at, r.status, r.error_class, r.elapsed_ms, r.decision, r.why, r.delay_ms, r.retry_after_ms, r.worker
        FROM unnest($14::bigint[], $15::int[], $16::bigint[], $17::int[], $18::text[], $19::bigint[], $20::text[], $21::text[], $22::bigint[], $23::bigint[], $24::text[])
          AS r(id, attempt, at, status, error_class, elapsed_ms, decision, why, delay_ms, retry_after_ms, worker)
        JOIN u ON u.id = r.id
        ON CONFLICT DO NOTHING
      )
      SELECT id FROM u`, [
      o.map((x) => x.id), o.map((x) => x.token), o.map((x) => x.state), o.map((x) => x.notBefore), o.map((x) => x.attempt),
      o.map((x) => x.opStartedAt), o.map((x) => x.opDeadlineAt), o.map((x) => x.prevDelayMs), o.map((x) => x.lastStatus),
      o.map((x) => x.lastErrorClass), o.map((x) => x.lastDecision), o.map((x) => x.lastWhy), o.map((x) => x.finishedAt),
      withRecord.map((x) => x.id), r.map((x) => x.attempt), r.map((x) => x.at), r.map((x) => x.status), r.map((x) => x.errorClass),
      r.map((x) => x.elapsedMs), r.map((x) => x.decision), r.map((x) => x.why), r.map((x) => x.delayMs), r.map((x) => x.retryAfterMs),
      r.map((x) => x.worker), o.map((x) => x.opThrottled),
    ]);
    const ok = new Set(applied.map((x) => x.id));
    return { applied: o.filter((x) => ok.has(x.id)).map((x) => x.id), lost: o.filter((x) => !ok.has(x.id)).map((x) => x.id) };
  }

  async release(leases: readonly Lease[], _now: number): Promise<number> {
    if (leases.length === 0) return 0;
    const rows = await this.q<{ id: number }>('releasing claims', `
      UPDATE ${this.t.batches} b SET lease_owner = NULL, lease_until = 0, due_at = b.not_before
      FROM unnest($1::bigint[], $2::bigint[]) AS l(id, token)
      WHERE b.id = l.id AND b.lease_token = l.token AND b.state = 'queued'
      RETURNING b.id`, [leases.map((l) => l.id), leases.map((l) => l.token)]);
    return rows.length;
  }

  async stats(now: number): Promise<DestinationStats[]> {
    const pending = await this.q<{ destination: string; n: number }>('reading statistics',
      `SELECT destination, count(*) AS n FROM ${this.t.items} WHERE batch_id IS NULL GROUP BY destination`);
    const f = (cond: string): string => `count(*) FILTER (WHERE ${cond}), coalesce(sum(items) FILTER (WHERE ${cond}), 0)`;
    const rows = await this.q<Record<string, number | string>>('reading statistics', `
      SELECT destination, rb, ri, fb, fi, db, di, vb, vi, xb, xi FROM (
        SELECT destination,
          ${f(`state = 'queued' AND lease_until <= $1 AND not_before <= $1`)},
          ${f(`state = 'queued' AND lease_until > $1`)},
          ${f(`state = 'queued' AND lease_until <= $1 AND not_before > $1`)},
          ${f(`state = 'delivered'`)},
          ${f(`state = 'dropped'`)}
        FROM ${this.t.batches} GROUP BY destination
      ) AS s(destination, rb, ri, fb, fi, db, di, vb, vi, xb, xi)`, [now]);
    return mergeStats(pending, rows);
  }

  async list(filter: ListFilter, now: number): Promise<BatchSummary[]> {
    const values: unknown[] = [now, filter.afterId ?? 0, filter.limit ?? LIST_DEFAULT_LIMIT];
    const where: string[] = ['id > $2'];
    const cond = listCondition(filter.state, '$1');
    if (cond) where.push(cond);
    whereDestinationAndReason(filter, values, where);
    const rows = await this.q<BatchRow>('listing batches',
      `SELECT * FROM ${this.t.batches} WHERE $1::bigint IS NOT NULL AND ${where.join(' AND ')} ORDER BY id LIMIT $3`, values);
    return rows.map(rowToSummary);
  }

  async get(id: number): Promise<BatchDetail | null> {
    const b = await this.q<BatchRow>('reading a batch', `SELECT * FROM ${this.t.batches} WHERE id = $1`, [id]);
    if (b.length === 0) return null;
    const items = await this.q<{ id: number; key: string; payload: string; enqueuedAt: number }>('reading a batch',
      `SELECT id, key, payload, enqueued_at AS "enqueuedAt" FROM ${this.t.items} WHERE batch_id = $1 ORDER BY id`, [id]);
    const attempts = await this.q<AttemptRow>('reading a batch', `SELECT * FROM ${this.t.attempts} WHERE batch_id = $1 ORDER BY round, attempt`, [id]);
    return { ...rowToSummary(b[0]!), itemList: items, attempts: attempts.map(rowToAttempt) };
  }

  async requeue(filter: RequeueFilter, now: number): Promise<number> {
    if (filter.ids !== undefined && filter.ids.length === 0) return 0;
    const values: unknown[] = [now, filter.limit ?? REQUEUE_DEFAULT_LIMIT];
    const where = [`state = 'dropped'`];
    if (filter.ids !== undefined) {
      values.push([...filter.ids]);
      where.push(`id = ANY($${values.length}::bigint[])`);
    }
    whereDestinationAndReason(filter, values, where);
    const rows = await this.q<{ id: number }>('requeueing batches', `
      WITH c AS (SELECT id FROM ${this.t.batches} WHERE ${where.join(' AND ')} ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
      UPDATE ${this.t.batches} b SET state = 'queued', round = b.round + 1, attempt = 0, op_started_at = NULL, op_deadline_at = NULL,
        prev_delay_ms = NULL, op_throttled = 0, not_before = $1, due_at = $1, lease_owner = NULL, lease_until = 0, lease_token = b.lease_token + 1, finished_at = NULL
      FROM c WHERE b.id = c.id RETURNING b.id`, values);
    return rows.length;
  }

  async dropStats(): Promise<DropStat[]> {
    const rows = await this.q<DropStat>('reading drop statistics', `
      SELECT destination, coalesce(last_decision, 'unknown') AS reason, last_why AS why, last_status AS "lastStatus",
        last_error_class AS "lastErrorClass", count(*) AS batches, sum(items) AS items
      FROM ${this.t.batches} WHERE state = 'dropped'
      GROUP BY destination, last_decision, last_why, last_status, last_error_class
      ORDER BY batches DESC, destination`);
    return rows;
  }

  async purgeDelivered(before: number): Promise<number> {
    return this.tx('purging delivered batches', async (c) => {
      const ids = (await c.query(`SELECT id FROM ${this.t.batches} WHERE state = 'delivered' AND finished_at < $1 LIMIT ${PURGE_CHUNK} FOR UPDATE SKIP LOCKED`, [before])).rows.map((r: { id: number }) => r.id);
      if (ids.length === 0) return 0;
      await c.query(`DELETE FROM ${this.t.items} WHERE batch_id = ANY($1::bigint[])`, [ids]);
      await c.query(`DELETE FROM ${this.t.attempts} WHERE batch_id = ANY($1::bigint[])`, [ids]);
      await c.query(`DELETE FROM ${this.t.batches} WHERE id = ANY($1::bigint[])`, [ids]);
      return ids.length;
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.end().catch(() => {});
  }
}
