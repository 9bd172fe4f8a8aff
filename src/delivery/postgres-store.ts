import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import type * as Pg from 'pg';
import { systemClock } from '../shared/clock.js';
import { cutBatches, type PendingRow } from './batching.js';
import { DeliveryError } from './errors.js';
import {
  assembleStats, listCondition, rowToAttempt, rowToSummary, toClaimed, LIST_DEFAULT_LIMIT, PURGE_DELIVERED_CHUNK, REQUEUE_DEFAULT_LIMIT, SCHEMA_VERSION,
  type AttemptRow, type BatchRow,
} from './store-common.js';
import type {
  BatchDetail, BatchLimits, BatchSummary, ClaimedBatch, CompleteResult, DeliveryStore, DestinationStats, DropStat,
  EnqueueResult, FinishedState, FormAndClaimResult, FormResult, Lease, LimitedClaim, ListFilter, NewItem, Outcome, RequeueFilter, SharedLimits,
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
  /**
   * The longest this process waits for the answer to one statement (ms), the network
   * included: past it the connection is reset — what it had not delivered is dropped with
   * it — and the call fails with ERR_STORE_UNAVAILABLE. A connection that stops answering
   * (a partition, a server that froze) is noticed within this, instead of when TCP gives up
   * (minutes). 0: no limit. Default 3000. (Creating the tables and `recount()` are not limited.)
   */
  readonly queryTimeoutMs?: number;
  /**
   * PostgreSQL's `statement_timeout` for this store's sessions (ms): a statement that runs
   * longer (waiting for a lock, a slow plan) is cancelled and rolled back by the server,
   * before queryTimeoutMs gives up on the connection. Also bounds a transaction left open by
   * a client that went silent (`idle_in_transaction_session_timeout`, at twice
   * queryTimeoutMs), so a partitioned worker's row locks do not outlive it. 0: no limit.
   * Default 2000.
   */
  readonly statementTimeoutMs?: number;
  /**
   * TCP keepalive on every connection: the first probe after this many idle ms (the
   * system's interval and count follow). It ends connections a partition or a server
   * crash left half-open, which no query would otherwise notice while idle. 0: off.
   * Default 10000.
   */
  readonly keepAliveMs?: number;
  /**
   * Wait for outcomes to be flushed to PostgreSQL's disk before a write returns. Default
   * false: outcomes are written with `synchronous_commit = off` (on their own connection),
   * so a PostgreSQL crash can lose the outcomes of its last moments (at most about three
   * times `wal_writer_delay`, 600 ms by default); those batches keep their lease and are
   * delivered again, with the same key, when it expires. Enqueues, seals and claims always
   * wait for the flush.
   */
  readonly synchronousOutcomes?: boolean;
  /**
   * Open only a queue that is there: ERR_NO_QUEUE, and nothing created, when the schema
   * has no tables of this prefix (for inspecting a store). Default false: created.
   */
  readonly mustExist?: boolean;
}

export const POSTGRES_DEFAULTS = Object.freeze({
  schema: 'public', tablePrefix: 'relent_', poolSize: 4, connectTimeoutMs: 5_000, queryTimeoutMs: 3_000, statementTimeoutMs: 2_000, keepAliveMs: 10_000,
  synchronousOutcomes: false,
});

const CONNECT_CODES = new Set([
  'ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', '28P01', '28000', '3D000', '57P01', '57P02', '57P03',
  '08001', '08006', '08004',
]);

/** A statement that got no answer within queryTimeoutMs (its connection was reset). */
class QueryTimeout extends Error {
  readonly code = 'RELENT_QUERY_TIMEOUT';
  constructor(readonly ms: number) {
    super(`no answer within ${ms} ms`);
  }
}

/** Maps a pg error to a DeliveryError that says what happened. */
export function postgresError(e: unknown, where: string, what: string): DeliveryError {
  if (DeliveryError.is(e)) return e;
  const code = typeof (e as { code?: unknown })?.code === 'string' ? (e as { code: string }).code : '';
  const msg = e instanceof Error ? e.message : String(e);
  if (e instanceof QueryTimeout) {
    return new DeliveryError('ERR_STORE_UNAVAILABLE', `${where}: no answer from PostgreSQL within ${e.ms} ms (queryTimeoutMs), the connection was reset; ${what} may not have happened, nothing stored earlier is lost`, { cause: e });
  }
  if (code === '57014') {
    return new DeliveryError('ERR_STORE', `${where}: PostgreSQL cancelled a statement that ran past statement_timeout (statementTimeoutMs; ${msg}); ${what} was rolled back`, { cause: e });
  }
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

/** Resets a connection (an RST: what it had not delivered is dropped); pg then reports its end as an error, which is expected. */
function resetConnection(c: Pg.ClientBase): void {
  c.on('error', () => {});
  const stream = (c as unknown as { connection?: { stream?: Socket } }).connection?.stream;
  if (stream === undefined || stream.destroyed) return;
  if (typeof stream.resetAndDestroy === 'function' && !stream.connecting) stream.resetAndDestroy();
  else stream.destroy();
}

/**
 * An error the server returned for a statement (the session goes on: a constraint, a
 * deadlock, a cancelled statement), as opposed to a connection that failed, was reset or
 * was ended by the server (FATAL).
 */
function isStatementError(e: unknown): boolean {
  return !(e instanceof QueryTimeout) && (e as { severity?: unknown } | null)?.severity === 'ERROR';
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
  const ms = (field: 'connectTimeoutMs' | 'queryTimeoutMs' | 'statementTimeoutMs' | 'keepAliveMs'): number => {
    const v = options[field] ?? POSTGRES_DEFAULTS[field];
    if (!(Number.isInteger(v) && v >= 0 && v <= 2_147_483_647)) {
      throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`${field}\` to be an integer number of ms >= 0, got ${JSON.stringify(v)}`, { field });
    }
    return v;
  };
  const connectTimeoutMs = ms('connectTimeoutMs');
  const queryTimeoutMs = ms('queryTimeoutMs');
  const statementTimeoutMs = ms('statementTimeoutMs');
  const keepAliveMs = ms('keepAliveMs');
  // What every connection of the store is opened with: timeouts the server applies, and keepalive.
  const session = {
    connectionString,
    connectionTimeoutMillis: connectTimeoutMs,
    ...(keepAliveMs > 0 ? { keepAlive: true, keepAliveInitialDelayMillis: keepAliveMs } : {}),
    ...(statementTimeoutMs > 0 ? { statement_timeout: statementTimeoutMs } : {}),
    ...(queryTimeoutMs > 0 ? { idle_in_transaction_session_timeout: 2 * queryTimeoutMs } : {}),
  };
  // BIGINT (20) and NUMERIC (1700, what sum() of bigint gives) as numbers: all our values are < 2^53.
  const types = {
    getTypeParser: (oid: number, format?: string) => (oid === 20 || oid === 1700 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format as 'text')),
  };
  const pool = new pg.Pool({
    ...session,
    max: options.poolSize ?? POSTGRES_DEFAULTS.poolSize,
    types: types as unknown as Pg.CustomTypesConfig,
  });
  // An idle client that loses its connection must not crash the process; the next query reports it.
  pool.on('error', () => {});
  // Outcomes go through a connection of their own that does not wait for the disk (see synchronousOutcomes).
  let outcomePool: Pg.Pool | null = null;
  if (options.synchronousOutcomes !== undefined && typeof options.synchronousOutcomes !== 'boolean') {
    throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`synchronousOutcomes\` to be true or false, got ${JSON.stringify(options.synchronousOutcomes)}`, { field: 'synchronousOutcomes' });
  }
  if (!(options.synchronousOutcomes ?? POSTGRES_DEFAULTS.synchronousOutcomes)) {
    outcomePool = new pg.Pool({
      ...session,
      max: 1,
      types: types as unknown as Pg.CustomTypesConfig,
      options: '-c synchronous_commit=off',
    } as Pg.PoolConfig);
    outcomePool.on('error', () => {});
  }
  const listenClient = (connectMs = connectTimeoutMs): Pg.Client => new pg.Client({ ...session, connectionTimeoutMillis: connectMs });
  const store = new PostgresStore(pool, outcomePool ?? pool, where, schema, prefix, listenClient, queryTimeoutMs);
  try {
    await store.init(options.mustExist === true);
  } catch (e) {
    await pool.end().catch(() => {});
    await outcomePool?.end().catch(() => {});
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

/** A claimed batch row joined with one of its items (the claim reads both in one statement). */
type ClaimRow = BatchRow & { item_key: string; item_payload: string };

/** Splits claim rows (one per item) into batch rows and item rows for toClaimed(). */
function splitClaimRows(rows: readonly ClaimRow[]): { batches: BatchRow[]; items: { batch_id: number; key: string; payload: string }[] } {
  const batches: BatchRow[] = [];
  const items: { batch_id: number; key: string; payload: string }[] = [];
  let last = -1;
  for (const r of rows) {
    if (r.id !== last) {
      batches.push(r);
      last = r.id;
    }
    items.push({ batch_id: r.id, key: r.item_key, payload: r.item_payload });
  }
  return { batches, items };
}

class PostgresStore implements DeliveryStore {
  readonly kind = 'postgres' as const;
  private readonly t: { items: string; batches: string; attempts: string; meta: string; dests: string; rate: string; counts: string };
  /**
   * The counters' row a write adds to next (16 per destination and state: concurrent
   * writers rarely wait for each other). Each store starts at a random one, so the
   * workers of several processes do not walk the rows in step.
   */
  private shardSeq = Math.floor(Math.random() * 16);
  private closed = false;
  /** The LISTEN/NOTIFY channel of these tables (an identifier derived from schema and prefix). */
  private readonly channel: string;
  private readonly names = new Map<string, string>();
  private readonly listeners = new Set<(destination: string) => void>();
  private listener: Pg.Client | null = null;
  private listening: Promise<void> | null = null;
  private relisten: ReturnType<typeof setTimeout> | null = null;
  private readonly claimSql: string;

  /** Connections this store reset after a query timeout: given back to the pool as broken (closed, not reused). */
  private readonly broken = new WeakSet<Pg.ClientBase>();
  /** Every connection of the pools (close() resets those a partition keeps from ending). */
  private readonly clients = new Set<Pg.ClientBase>();

  constructor(
    private readonly pool: Pg.Pool, private readonly outcomePool: Pg.Pool, readonly description: string, private readonly schema: string, prefix: string,
    private readonly listenClient: (connectMs?: number) => Pg.Client, private readonly queryTimeoutMs: number,
  ) {
    for (const p of new Set([pool, outcomePool])) {
      p.on('connect', (c) => this.clients.add(c));
      p.on('remove', (c) => this.clients.delete(c));
    }
    const q = (name: string): string => `"${schema}"."${prefix}${name}"`;
    this.t = { items: q('items'), batches: q('batches'), attempts: q('attempts'), meta: q('meta'), dests: q('destinations'), rate: q('rate'), counts: q('counts') };
    this.channel = `relent_${createHash('sha256').update(`${schema}.${prefix}`).digest('hex').slice(0, 16)}`;
    // One statement claims and reads the items: due batches of a destination that is not paused, oldest due first.
    this.claimSql = `
      WITH c AS (
        SELECT id FROM ${this.t.batches}
        WHERE state = 'queued' AND destination = $1 AND due_at <= $2
          AND NOT EXISTS (SELECT 1 FROM ${this.t.dests} p WHERE p.destination = $1 AND p.paused_at IS NOT NULL)
        ORDER BY due_at, id LIMIT $3 FOR UPDATE SKIP LOCKED
      ), u AS (
        UPDATE ${this.t.batches} b SET lease_token = b.lease_token + 1, lease_owner = $4, lease_until = $5, due_at = $5, claims = b.claims + 1
        FROM c WHERE b.id = c.id
        RETURNING b.id, b.destination, b.key, b.lease_token, b.round, b.attempt, b.op_started_at, b.op_deadline_at, b.prev_delay_ms, b.op_throttled,
          b.created_at, b.not_before, b.bytes, b.due_at
      )
      SELECT u.*, i.key AS item_key, i.payload AS item_payload FROM u JOIN ${this.t.items} i ON i.batch_id = u.id ORDER BY u.id, i.id`;
  }

  /**
   * A data-modifying CTE body that adds deltas — rows (destination, state, batches, items)
   * of the query `from` — to the counters behind stats(): one row per destination, state
   * and shard `shard` (a parameter), taken in a fixed order so two writers cannot deadlock.
   */
  private counted(from: string, shard: string): string {
    return `INSERT INTO ${this.t.counts} AS t (destination, state, shard, batches, items)
      SELECT destination, state, ${shard}::int, sum(batches), sum(items) FROM (${from}) AS d GROUP BY destination, state ORDER BY destination, state
      ON CONFLICT (destination, state, shard) DO UPDATE SET batches = t.batches + excluded.batches, items = t.items + excluded.items`;
  }

  private shard(): number {
    this.shardSeq = (this.shardSeq + 1) & 15;
    return this.shardSeq;
  }

  /** A statement as a named (prepared) query: parsed and planned once per connection. */
  private named(text: string, values: unknown[]): Pg.QueryConfig {
    let name = this.names.get(text);
    if (name === undefined) {
      name = `relent_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
      this.names.set(text, name);
    }
    return { name, text, values };
  }

  /**
   * One statement on `c`, answered within `timeoutMs` (0: no limit) or the connection is
   * reset: an RST, so the bytes it had not delivered yet (this statement, in a partition)
   * are dropped rather than run by the server minutes later, and the server ends the
   * session (rolling back its transaction) when it hears of it. The statement then fails
   * with a QueryTimeout.
   */
  private async exec(c: Pg.ClientBase, query: Pg.QueryConfig | string, timeoutMs = this.queryTimeoutMs): Promise<Pg.QueryResult> {
    if (timeoutMs <= 0) return c.query(query);
    const pending = c.query(query);
    let cancel: () => void = () => {};
    const timeout = new Promise<never>((_resolve, reject) => {
      cancel = systemClock.setTimer(() => {
        this.broken.add(c);
        resetConnection(c);
        reject(new QueryTimeout(timeoutMs));
      }, timeoutMs);
    });
    try {
      return await Promise.race([pending, timeout]);
    } finally {
      cancel();
      pending.catch(() => {});
    }
  }

  private async run<R>(c: Pg.PoolClient, text: string, values: unknown[] = []): Promise<R[]> {
    return (await this.exec(c, this.named(text, values))).rows as R[];
  }

  /** Gives a client back to its pool; a connection that was reset or failed is closed, not reused. */
  private giveBack(c: Pg.PoolClient, failed: unknown = null): void {
    c.release(failed !== null && (this.broken.has(c) || !isStatementError(failed)) ? (failed instanceof Error ? failed : true) : undefined);
  }

  /**
   * Runs `fn` with a client inside a transaction; a deadlock is retried (twice) before it is
   * reported. `unbounded`: no statement timeout, on either side (creating tables, recount).
   */
  private async tx<T>(what: string, fn: (c: Pg.PoolClient) => Promise<T>, unbounded = false): Promise<T> {
    if (this.closed) throw new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`);
    for (let tries = 0; ; tries++) {
      let client: Pg.PoolClient;
      try {
        client = await this.pool.connect();
      } catch (e) {
        throw postgresError(e, this.description, what);
      }
      const limit = unbounded ? 0 : this.queryTimeoutMs;
      try {
        await this.exec(client, 'BEGIN', limit);
        if (unbounded) await this.exec(client, 'SET LOCAL statement_timeout = 0', limit);
        const out = await fn(client);
        await this.exec(client, 'COMMIT', limit);
        client.release();
        return out;
      } catch (e) {
        let failed: unknown = e;
        if (!this.broken.has(client) && isStatementError(e)) {
          // The connection is sound: roll back and reuse it (if the rollback fails, it is closed).
          await this.exec(client, 'ROLLBACK', limit).then(() => (failed = null), (r: unknown) => (failed = r));
        }
        this.giveBack(client, failed);
        const code = (e as { code?: string }).code ?? '';
        if (RETRYABLE_PG.has(code) && tries < 2) continue;
        throw postgresError(e, this.description, what);
      }
    }
  }

  private async q<R>(what: string, text: string, values: unknown[] = [], pool: Pg.Pool = this.pool): Promise<R[]> {
    if (this.closed) throw new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`);
    for (let tries = 0; ; tries++) {
      let client: Pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (e) {
        throw postgresError(e, this.description, what);
      }
      try {
        const rows = (await this.exec(client, this.named(text, values))).rows as R[];
        client.release();
        return rows;
      } catch (e) {
        this.giveBack(client, e);
        const code = (e as { code?: string }).code ?? '';
        if (RETRYABLE_PG.has(code) && tries < 2) continue;
        throw postgresError(e, this.description, what);
      }
    }
  }

  /**
   * Whether PostgreSQL answers now, over a new connection (none of the pool's, which may
   * be stalled): resolves when it does within `timeoutMs`, rejects otherwise. A worker
   * asks while the store fails, to start again as soon as it is back.
   */
  async ping(timeoutMs: number): Promise<void> {
    if (this.closed) throw new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`);
    const c = this.listenClient(timeoutMs);
    c.on('error', () => {});
    try {
      await c.connect();
      await this.exec(c, 'SELECT 1', timeoutMs);
    } catch (e) {
      throw postgresError(e, this.description, 'the check that PostgreSQL answers');
    } finally {
      await this.endClient(c);
    }
  }

  async init(mustExist = false): Promise<void> {
    const { items, batches, attempts, meta, dests, rate, counts } = this.t;
    if (mustExist) {
      const [row] = await this.q<{ t: string | null }>('looking for the queue', 'SELECT to_regclass($1)::text AS t', [items]);
      if (row?.t === null || row?.t === undefined) {
        throw new DeliveryError('ERR_NO_QUEUE', `${this.description}: no queue here (there is no table ${items}: nothing was enqueued with this schema and tablePrefix)`);
      }
    }
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
          finished_at BIGINT,
          enqueued_at BIGINT
        );
        CREATE INDEX IF NOT EXISTS ${idx(`${base}batches_due`)} ON ${batches} (destination, due_at, id) WHERE state = 'queued';
        CREATE INDEX IF NOT EXISTS ${idx(`${base}batches_dropped`)} ON ${batches} (destination, id) WHERE state = 'dropped';
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
        CREATE TABLE IF NOT EXISTS ${dests} (destination TEXT PRIMARY KEY, paused_at BIGINT);
        CREATE TABLE IF NOT EXISTS ${rate} (id BIGSERIAL PRIMARY KEY, destination TEXT NOT NULL, at BIGINT NOT NULL, n INTEGER NOT NULL, end_at BIGINT NOT NULL);
      `);
      const rateCols = (await c.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`, [this.schema, `${base}rate`])).rows as { column_name: string }[];
      if (!rateCols.some((r) => r.column_name === 'end_at')) {
        await c.query(`DROP INDEX IF EXISTS "${this.schema}".${idx(`${base}rate_window`)}`);
        await c.query(`ALTER TABLE ${rate} ADD COLUMN IF NOT EXISTS end_at BIGINT NOT NULL DEFAULT 0`);
        await c.query(`UPDATE ${rate} SET end_at = at`);
      }
      await c.query(`CREATE INDEX IF NOT EXISTS ${idx(`${base}rate_end`)} ON ${rate} (destination, end_at)`);
      // The counters behind stats() (O(1) on any number of rows): made, and filled from the tables, once.
      const hadCounts = (await c.query(`SELECT to_regclass($1) AS t`, [`"${this.schema}".${base}counts`])).rows[0].t !== null;
      if (!hadCounts) {
        await c.query(`CREATE TABLE ${counts} (destination TEXT NOT NULL, state TEXT NOT NULL, shard INTEGER NOT NULL,
          batches BIGINT NOT NULL DEFAULT 0, items BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (destination, state, shard))`);
        await c.query(this.recountSql());
      }
      // Columns added after the tables were first released: a database created by an earlier
      // relent gets them here. Looked up first, so the usual start takes no table lock.
      const cols = (await c.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2`,
        [this.schema, `${base}batches`])).rows as { column_name: string }[];
      if (!cols.some((r) => r.column_name === 'op_throttled')) {
        await c.query(`ALTER TABLE ${batches} ADD COLUMN IF NOT EXISTS op_throttled INTEGER NOT NULL DEFAULT 0`);
      }
      if (!cols.some((r) => r.column_name === 'enqueued_at')) {
        await c.query(`ALTER TABLE ${batches} ADD COLUMN IF NOT EXISTS enqueued_at BIGINT`);
        await c.query(`UPDATE ${batches} SET enqueued_at = created_at WHERE enqueued_at IS NULL`);
      }
      // An index no query used (every batch update paid for it); dropped where an earlier relent made it.
      const old = await c.query(`SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = $2`, [this.schema, `${base}batches_key`]);
      if (old.rows.length > 0) await c.query(`DROP INDEX IF EXISTS "${this.schema}".${idx(`${base}batches_key`)}`);
      // Indexes added later: live leases per destination (shared concurrency, stats) and finished
      // batches by age (retention). After the columns, for a database made before them.
      await c.query(`
        CREATE INDEX IF NOT EXISTS ${idx(`${base}batches_leased`)} ON ${batches} (destination, lease_until) WHERE state = 'queued' AND lease_owner IS NOT NULL;
        CREATE INDEX IF NOT EXISTS ${idx(`${base}batches_delivered_at`)} ON ${batches} (finished_at) WHERE state = 'delivered';
        CREATE INDEX IF NOT EXISTS ${idx(`${base}batches_dropped_at`)} ON ${batches} (finished_at) WHERE state = 'dropped';
        CREATE INDEX IF NOT EXISTS ${idx(`${base}batches_oldest`)} ON ${batches} (destination, enqueued_at) WHERE state = 'queued';
        CREATE INDEX IF NOT EXISTS ${idx(`${base}batches_deferred`)} ON ${batches} (destination, due_at) INCLUDE (items) WHERE state = 'queued' AND lease_owner IS NULL;
      `);
      const v = (await c.query(`SELECT v FROM ${meta} WHERE k = 'schema'`)).rows as { v: string }[];
      if (v.length === 0) await c.query(`INSERT INTO ${meta} (k, v) VALUES ('schema', $1)`, [String(SCHEMA_VERSION)]);
      else if (v[0]!.v !== String(SCHEMA_VERSION)) throw new DeliveryError('ERR_STORE', `${this.description}: schema version ${v[0]!.v}, this relent knows ${SCHEMA_VERSION}`);
    }, true);
  }

  async enqueue(list: readonly NewItem[], now: number): Promise<EnqueueResult[]> {
    if (list.length === 0) return [];
    return this.tx(`enqueueing ${list.length} item${list.length === 1 ? '' : 's'}`, async (c) => {
      const dests = list.map((i) => i.destination);
      const keys = list.map((i) => i.key);
      const inserted = await this.run<{ id: number; destination: string; key: string }>(c, `
        WITH ins AS (
          INSERT INTO ${this.t.items} (destination, key, payload, bytes, enqueued_at)
          SELECT d, k, p, octet_length(p), $4 FROM unnest($1::text[], $2::text[], $3::text[]) AS u(d, k, p)
          ON CONFLICT (destination, key) DO NOTHING RETURNING id, destination, key
        ), cnt AS (${this.counted(`SELECT destination, 'pending' AS state, 0::bigint AS batches, count(*) AS items FROM ins GROUP BY destination`, '$5')})
        SELECT id, destination, key FROM ins`,
      [dests, keys, list.map((i) => i.payload), now, this.shard()]);
      const fresh = new Map(inserted.map((r) => [`${r.destination}\0${r.key}`, r.id]));
      const missing = list.filter((i) => !fresh.has(`${i.destination}\0${i.key}`));
      const known = new Map<string, number>();
      if (missing.length > 0) {
        const rows = await this.run<{ id: number; destination: string; key: string }>(c,
          `SELECT i.id, i.destination, i.key FROM ${this.t.items} i JOIN unnest($1::text[], $2::text[]) AS u(d, k) ON i.destination = u.d AND i.key = u.k`,
          [missing.map((i) => i.destination), missing.map((i) => i.key)],
        );
        for (const r of rows) known.set(`${r.destination}\0${r.key}`, r.id);
      }
      // Workers of other processes wake up (delivered when the transaction commits).
      if (inserted.length > 0) await this.run(c, `SELECT pg_notify($1, d) FROM (SELECT DISTINCT unnest($2::text[]) AS d) x`, [this.channel, [...new Set(inserted.map((r) => r.destination))]]);
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
      const rows = await this.run<PendingRow>(c,
        `SELECT id, key, bytes, enqueued_at AS "enqueuedAt" FROM ${this.t.items}
         WHERE destination = $1 AND batch_id IS NULL ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`,
        [destination, limit],
      );
      if (rows.length === 0) return { formed: 0, nextAt: null };
      const { cuts, nextAt } = cutBatches(destination, rows, limits, now, maxBatches, rows.length < limit);
      if (cuts.length === 0) return { formed: 0, nextAt };
      const { itemIds, itemBatch } = itemsOfCuts(cuts);
      // The batches and their items' batch_id in one statement (ordinality ties them).
      await this.run(c, `
        WITH b AS (
          INSERT INTO ${this.t.batches} (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at)
          SELECT $1, k, 'queued', n, b, $5, $5, $5, e FROM unnest($2::text[], $3::int[], $4::bigint[], $6::bigint[]) WITH ORDINALITY AS u(k, n, b, e, o) ORDER BY o
          RETURNING id, key
        ), o AS (
          SELECT b.id, u.o FROM b JOIN unnest($2::text[]) WITH ORDINALITY AS u(k, o) ON u.k = b.key
        ), cnt AS (${this.counted(`SELECT $1::text AS destination, s AS state, nb AS batches, ni AS items
            FROM (VALUES ('pending', 0::bigint, -$9::bigint), ('queued', $10::bigint, $9::bigint)) AS v(s, nb, ni)`, '$11')})
        UPDATE ${this.t.items} i SET batch_id = o.id FROM unnest($7::bigint[], $8::int[]) AS m(i, o) JOIN o ON o.o = m.o WHERE i.id = m.i`,
      [destination, cuts.map((x) => x.key), cuts.map((x) => x.rows.length), cuts.map((x) => x.bytes), now, cuts.map((x) => x.rows[0]!.enqueuedAt), itemIds, itemBatch,
        itemIds.length, cuts.length, this.shard()]);
      return { formed: cuts.length, nextAt };
    });
  }

  async formAndClaim(destination: string, limits: BatchLimits, now: number, maxBatches: number, leaseMs: number, owner: string): Promise<FormAndClaimResult> {
    if (limits.maxItems === 1) return this.formAndClaimSingles(destination, now, maxBatches, leaseMs, owner);
    return this.tx('forming and claiming batches', async (c) => {
      const limit = Math.max(1, maxBatches * limits.maxItems);
      const rows = await this.run<PendingRow & { payload: string }>(c,
        `SELECT id, key, bytes, enqueued_at AS "enqueuedAt", payload FROM ${this.t.items}
         WHERE destination = $1 AND batch_id IS NULL
           AND NOT EXISTS (SELECT 1 FROM ${this.t.dests} p WHERE p.destination = $1 AND p.paused_at IS NOT NULL)
         ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`,
        [destination, limit],
      );
      if (rows.length === 0) return { claimed: [], nextAt: null };
      const { cuts, nextAt } = cutBatches(destination, rows, limits, now, maxBatches, rows.length < limit);
      if (cuts.length === 0) return { claimed: [], nextAt };
      const until = now + leaseMs;
      const { itemIds, itemBatch } = itemsOfCuts(cuts);
      // The batches, born leased to `owner` (token 1, as a first claim leaves it), and their items' batch_id.
      const made = await this.run<{ id: number; o: number }>(c, `
        WITH b AS (
          INSERT INTO ${this.t.batches} (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at, lease_owner, lease_until, lease_token, claims)
          SELECT $1, k, 'queued', n, b, $5, $5, $12, e, $13, $12, 1, 1 FROM unnest($2::text[], $3::int[], $4::bigint[], $6::bigint[]) WITH ORDINALITY AS u(k, n, b, e, o) ORDER BY o
          RETURNING id, key
        ), o AS (
          SELECT b.id, u.o FROM b JOIN unnest($2::text[]) WITH ORDINALITY AS u(k, o) ON u.k = b.key
        ), cnt AS (${this.counted(`SELECT $1::text AS destination, s AS state, nb AS batches, ni AS items
            FROM (VALUES ('pending', 0::bigint, -$9::bigint), ('queued', $10::bigint, $9::bigint)) AS v(s, nb, ni)`, '$11')}
        ), m AS (
          UPDATE ${this.t.items} i SET batch_id = o.id FROM unnest($7::bigint[], $8::int[]) AS m(i, o) JOIN o ON o.o = m.o WHERE i.id = m.i
        )
        SELECT id, o FROM o`,
      [destination, cuts.map((x) => x.key), cuts.map((x) => x.rows.length), cuts.map((x) => x.bytes), now, cuts.map((x) => x.rows[0]!.enqueuedAt), itemIds, itemBatch,
        itemIds.length, cuts.length, this.shard(), until, owner]);
      const idOf = new Map(made.map((r) => [Number(r.o), Number(r.id)]));
      const claimed: ClaimedBatch[] = cuts.map((cut, i) => ({
        id: idOf.get(i + 1)!, token: 1, destination, key: cut.key, round: 1, attempt: 0, opStartedAt: null, opDeadlineAt: null, prevDelayMs: null,
        opThrottled: 0, createdAt: now, notBefore: now, bytes: cut.bytes,
        items: cut.rows.map((r) => ({ key: r.key, payload: (r as PendingRow & { payload: string }).payload })),
      }));
      return { claimed, nextAt };
    });
  }

  /**
   * formAndClaim when every batch holds one item (maxItems 1: every pending item is a full
   * batch, whatever its size or age), in one statement: the batch key is computed by
   * PostgreSQL exactly as batchKey() does (SHA-256 of the length-prefixed destination
   * and item key, lengths in UTF-16 code units as JavaScript counts them).
   */
  private async formAndClaimSingles(destination: string, now: number, maxBatches: number, leaseMs: number, owner: string): Promise<FormAndClaimResult> {
    const limit = Math.max(1, maxBatches);
    // UTF-16 length of k: its characters, plus one for each outside the Basic Multilingual Plane.
    const len16 = `(CASE WHEN octet_length(p.key) = char_length(p.key) THEN char_length(p.key)
      ELSE char_length(p.key) + char_length(regexp_replace(p.key, E'[^\\\\U00010000-\\\\U0010FFFF]', '', 'g')) END)`;
    const rows = await this.q<{ id: number; key: string; item_key: string; payload: string; bytes: number }>('forming and claiming batches', `
      WITH p AS (
        SELECT id, key, bytes, enqueued_at, payload FROM ${this.t.items}
        WHERE destination = $1 AND batch_id IS NULL
          AND NOT EXISTS (SELECT 1 FROM ${this.t.dests} d WHERE d.destination = $1 AND d.paused_at IS NOT NULL)
        ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED
      ), k AS (
        SELECT p.id, p.key, p.bytes, p.enqueued_at, p.payload,
          'rb-' || left(encode(sha256(convert_to($3::text || E'\\n' || ${len16} || ':' || p.key, 'UTF8')), 'hex'), 40) AS bkey
        FROM p
      ), b AS (
        INSERT INTO ${this.t.batches} (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at, lease_owner, lease_until, lease_token, claims)
        SELECT $1, k.bkey, 'queued', 1, k.bytes, $4, $4, $5, k.enqueued_at, $6, $5, 1, 1 FROM k ORDER BY k.id
        RETURNING id, key
      ), x AS (
        SELECT b.id, b.key, k.id AS item_id, k.key AS item_key, k.payload, k.bytes FROM b JOIN k ON k.bkey = b.key
      ), m AS (
        UPDATE ${this.t.items} i SET batch_id = x.id FROM x WHERE i.id = x.item_id
      ), cnt AS (${this.counted(`SELECT $1::text AS destination, s AS state, nb AS batches, ni AS items
          FROM (SELECT count(*) AS n FROM x) AS c, LATERAL (VALUES ('pending', 0::bigint, -c.n), ('queued', c.n, c.n)) AS v(s, nb, ni)`, '$7')}
      )
      SELECT id, key, item_key, payload, bytes FROM x ORDER BY item_id`,
    [destination, limit, `${destination.length}:${destination}`, now, now + leaseMs, owner, this.shard()]);
    const claimed: ClaimedBatch[] = rows.map((r) => ({
      id: r.id, token: 1, destination, key: r.key, round: 1, attempt: 0, opStartedAt: null, opDeadlineAt: null, prevDelayMs: null,
      opThrottled: 0, createdAt: now, notBefore: now, bytes: r.bytes, items: [{ key: r.item_key, payload: r.payload }],
    }));
    return { claimed, nextAt: rows.length < limit ? null : now };
  }

  async claim(destination: string, limit: number, now: number, leaseMs: number, owner: string): Promise<ClaimedBatch[]> {
    const rows = await this.q<ClaimRow>('claiming batches', this.claimSql, [destination, now, limit, owner, now + leaseMs]);
    if (rows.length === 0) return [];
    const { batches, items } = splitClaimRows(rows);
    return toClaimed(batches, items);
  }

  async reclaim(destination: string, owner: string, known: readonly Lease[], now: number, leaseMs: number): Promise<ClaimedBatch[]> {
    const rows = await this.q<ClaimRow>('looking for leases of unknown claims', `
      WITH u AS (
        UPDATE ${this.t.batches} b SET lease_until = $3, due_at = $3
        WHERE b.state = 'queued' AND b.destination = $1 AND b.lease_owner = $2 AND b.lease_until > $4
          AND NOT EXISTS (SELECT 1 FROM unnest($5::bigint[], $6::bigint[]) AS k(id, token) WHERE k.id = b.id AND k.token = b.lease_token)
        RETURNING b.id, b.destination, b.key, b.lease_token, b.round, b.attempt, b.op_started_at, b.op_deadline_at, b.prev_delay_ms, b.op_throttled,
          b.created_at, b.not_before, b.bytes, b.due_at
      )
      SELECT u.*, i.key AS item_key, i.payload AS item_payload FROM u JOIN ${this.t.items} i ON i.batch_id = u.id ORDER BY u.id, i.id`,
    [destination, owner, now + leaseMs, now, known.map((l) => l.id), known.map((l) => l.token)]);
    if (rows.length === 0) return [];
    const { batches, items } = splitClaimRows(rows);
    return toClaimed(batches, items);
  }

  async claimLimited(destination: string, want: number, limits: SharedLimits, now: number, leaseMs: number, owner: string): Promise<LimitedClaim> {
    return this.tx('claiming batches', async (c) => {
      // Claims of this destination, from every worker, one at a time: the destination's row is the lock.
      const lock = `SELECT paused_at FROM ${this.t.dests} WHERE destination = $1 FOR UPDATE`;
      let row = await this.run<{ paused_at: number | null }>(c, lock, [destination]);
      if (row.length === 0) {
        await this.run(c, `INSERT INTO ${this.t.dests} (destination) VALUES ($1) ON CONFLICT DO NOTHING`, [destination]);
        row = await this.run(c, lock, [destination]);
      }
      if (row[0]?.paused_at !== null && row[0]?.paused_at !== undefined) return { claimed: [], retryAt: null, permit: null };
      // A new statement, so a new snapshot: it sees every claim committed before the lock was ours.
      const perMs = limits.rate?.perMs ?? 0;
      const [use] = await this.run<{ used: number; leased: number }>(c, `
        WITH gone AS (DELETE FROM ${this.t.rate} WHERE destination = $1 AND end_at <= $2::bigint - $3::bigint)
        SELECT (SELECT coalesce(sum(n), 0) FROM ${this.t.rate} WHERE destination = $1 AND end_at > $2::bigint - $3::bigint) AS used,
               (SELECT count(*) FROM ${this.t.batches} WHERE destination = $1 AND state = 'queued' AND lease_owner IS NOT NULL AND lease_until > $2) AS leased`,
      [destination, now, perMs]);
      let allowed = want;
      if (limits.concurrency !== null) allowed = Math.min(allowed, limits.concurrency - Number(use!.leased));
      const rate = limits.rate;
      const used = Number(use!.used);
      if (rate !== null) allowed = Math.min(allowed, rate.requests - used);
      const rows = allowed > 0 ? await this.run<ClaimRow>(c, this.claimSql, [destination, now, allowed, owner, now + leaseMs]) : [];
      const { batches, items } = splitClaimRows(rows);
      if (rate === null) return { claimed: toClaimed(batches, items), retryAt: null, permit: null };
      let retryAt: number | null = null;
      if (used + batches.length >= rate.requests) {
        // The window is full: one more fits when enough of its entries have aged out (this claim's own last).
        const [first] = await this.run<{ end_at: number }>(c, `
          SELECT end_at FROM (SELECT end_at, sum(n) OVER (ORDER BY end_at, id) AS cum FROM ${this.t.rate} WHERE destination = $1 AND end_at > $2::bigint - $3::bigint) x
          WHERE cum >= $4 ORDER BY end_at LIMIT 1`, [destination, now, perMs, used + batches.length - rate.requests + 1]);
        retryAt = first ? Number(first.end_at) + perMs : now + leaseMs + perMs;
      }
      let permit: number | null = null;
      if (batches.length > 0) {
        const [p] = await this.run<{ id: number }>(c, `INSERT INTO ${this.t.rate} (destination, at, n, end_at) VALUES ($1, $2, $3, $4) RETURNING id`,
          [destination, now, batches.length, now + leaseMs]);
        permit = p!.id;
      }
      return { claimed: toClaimed(batches, items), retryAt, permit };
    });
  }

  async endPermit(permit: number, at: number): Promise<void> {
    await this.q('ending a rate permit', `UPDATE ${this.t.rate} SET end_at = least(end_at, $2) WHERE id = $1`, [permit, at]);
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
    // One JSON parameter (one JSON.stringify here, parsed by PostgreSQL) instead of a text array per column.
    const rows = outcomes.map((x) => {
      const r = x.record;
      return [x.id, x.token, x.state, x.notBefore, x.attempt, x.opStartedAt, x.opDeadlineAt, x.prevDelayMs, x.lastStatus, x.lastErrorClass,
        x.lastDecision, x.lastWhy, x.finishedAt, x.opThrottled,
        r === null ? null : [r.attempt, r.at, r.status, r.errorClass, r.elapsedMs, r.decision, r.why, r.delayMs, r.retryAfterMs, r.worker]];
    });
    const applied = await this.q<{ id: number }>('recording outcomes', `
      WITH o AS (
        SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS state, (e->>3)::bigint AS not_before, (e->>4)::int AS attempt,
          (e->>5)::bigint AS op_started_at, (e->>6)::bigint AS op_deadline_at, (e->>7)::bigint AS prev_delay_ms, (e->>8)::int AS last_status,
          e->>9 AS last_error_class, e->>10 AS last_decision, e->>11 AS last_why, (e->>12)::bigint AS finished_at, (e->>13)::int AS op_throttled, e->14 AS r
        FROM jsonb_array_elements($1::jsonb) AS e
      ), u AS (
        UPDATE ${this.t.batches} b SET state = o.state, not_before = o.not_before, due_at = o.not_before, lease_owner = NULL, lease_until = 0,
          attempt = o.attempt, op_started_at = o.op_started_at, op_deadline_at = o.op_deadline_at, prev_delay_ms = o.prev_delay_ms, op_throttled = o.op_throttled,
          last_status = o.last_status, last_error_class = o.last_error_class, last_decision = o.last_decision, last_why = o.last_why,
          finished_at = o.finished_at
        FROM o WHERE b.id = o.id AND b.lease_token = o.token AND b.state = 'queued'
        RETURNING b.id, b.round, b.destination, b.state, b.items
      ), cnt AS (${this.counted(`SELECT destination, 'queued' AS state, -1::bigint AS batches, -items::bigint AS items FROM u WHERE state <> 'queued'
          UNION ALL SELECT destination, state, 1, items FROM u WHERE state <> 'queued'`, '$2')}
      ), a AS (
        INSERT INTO ${this.t.attempts} (batch_id, round, attempt, at, status, error_class, elapsed_ms, decision, why, delay_ms, retry_after_ms, worker)
        SELECT o.id, u.round, (o.r->>0)::int, (o.r->>1)::bigint, (o.r->>2)::int, o.r->>3, (o.r->>4)::bigint, o.r->>5, o.r->>6, (o.r->>7)::bigint,
          (o.r->>8)::bigint, o.r->>9
        FROM o JOIN u ON u.id = o.id WHERE jsonb_typeof(o.r) = 'array'
        ON CONFLICT DO NOTHING
      ), again AS (
        -- Written already by this very claim (a write whose answer a broken connection lost, made again): done, not lost.
        SELECT b.id FROM ${this.t.batches} b JOIN o ON b.id = o.id WHERE b.lease_token = o.token AND b.state <> 'queued' AND b.state = o.state
      )
      SELECT id FROM u UNION ALL SELECT id FROM again`, [JSON.stringify(rows), this.shard()], this.outcomePool);
    const ok = new Set(applied.map((x) => x.id));
    return { applied: outcomes.filter((x) => ok.has(x.id)).map((x) => x.id), lost: outcomes.filter((x) => !ok.has(x.id)).map((x) => x.id) };
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

  /**
   * Per destination: totals from the counters (pending items; queued, delivered and
   * dropped batches and items), the live leases from their index, the deferred batches
   * from their own index (due later, not leased: an index-only count of just those — a
   * leased batch is due when its lease ends, so one due later with no owner waits for
   * its not_before), the oldest
   * waiting item from two indexes, and the paused flag. Ready = queued − in flight −
   * deferred. No statement reads the whole queue.
   */
  async stats(now: number): Promise<DestinationStats[]> {
    const { items, batches, dests, counts } = this.t;
    const totals = await this.q<{ destination: string; state: string; b: number; i: number }>('reading statistics',
      `SELECT destination, state, sum(batches) AS b, sum(items) AS i FROM ${counts} GROUP BY destination, state`);
    const names = [...new Set(totals.map((r) => r.destination))];
    const inflight = await this.q<{ destination: string; b: number; i: number }>('reading statistics',
      `SELECT destination, count(*) AS b, coalesce(sum(items), 0) AS i FROM ${batches} WHERE state = 'queued' AND lease_owner IS NOT NULL AND lease_until > $1 GROUP BY destination`, [now]);
    const per = names.length === 0 ? [] : await this.q<{ destination: string; b: number; i: number; oldest_b: number | null; oldest_p: number | null }>('reading statistics', `
      SELECT d AS destination, x.b, x.i,
        (SELECT min(enqueued_at) FROM ${batches} o WHERE o.state = 'queued' AND o.destination = d) AS oldest_b,
        (SELECT enqueued_at FROM ${items} p WHERE p.destination = d AND p.batch_id IS NULL ORDER BY p.id LIMIT 1) AS oldest_p
      FROM unnest($2::text[]) AS d,
        LATERAL (SELECT count(*) AS b, coalesce(sum(items), 0) AS i FROM ${batches} WHERE state = 'queued' AND destination = d AND lease_owner IS NULL AND due_at > $1) AS x`, [now, names]);
    const paused = await this.q<{ destination: string }>('reading statistics', `SELECT destination FROM ${dests} WHERE paused_at IS NOT NULL`);
    return assembleStats(totals, inflight, per, paused.map((p) => p.destination));
  }

  /** Rebuilds the counters behind stats() from the tables (writers wait meanwhile). */
  async recount(): Promise<void> {
    await this.tx('counting the queue', async (c) => {
      await c.query(`LOCK TABLE ${this.t.items}, ${this.t.batches} IN SHARE MODE`);
      await c.query(this.recountSql());
    }, true);
  }

  private recountSql(): string {
    const { items, batches, counts } = this.t;
    return `DELETE FROM ${counts};
      INSERT INTO ${counts} (destination, state, shard, batches, items)
        SELECT destination, 'pending', 0, 0, count(*) FROM ${items} WHERE batch_id IS NULL GROUP BY destination
        UNION ALL SELECT destination, state, 0, count(*), coalesce(sum(items), 0) FROM ${batches} GROUP BY destination, state;`;
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
    values.push(this.shard());
    const rows = await this.q<{ id: number }>('requeueing batches', `
      WITH c AS (SELECT id FROM ${this.t.batches} WHERE ${where.join(' AND ')} ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED),
      r AS (
        UPDATE ${this.t.batches} b SET state = 'queued', round = b.round + 1, attempt = 0, op_started_at = NULL, op_deadline_at = NULL,
          prev_delay_ms = NULL, op_throttled = 0, not_before = $1, due_at = $1, lease_owner = NULL, lease_until = 0, lease_token = b.lease_token + 1, finished_at = NULL
        FROM c WHERE b.id = c.id RETURNING b.id, b.destination, b.items
      ), cnt AS (${this.counted(`SELECT destination, 'dropped' AS state, -1::bigint AS batches, -items::bigint AS items FROM r
          UNION ALL SELECT destination, 'queued', 1, items FROM r`, `$${values.length}`)})
      SELECT id, destination FROM r`, values);
    const touched = [...new Set(rows.map((r) => (r as { destination?: string }).destination).filter((d): d is string => d !== undefined))];
    if (touched.length > 0) await this.q('requeueing batches', `SELECT pg_notify($1, d) FROM unnest($2::text[]) AS d`, [this.channel, touched]).catch(() => {});
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
    return this.purge('delivered', before, PURGE_DELIVERED_CHUNK);
  }

  async purge(state: FinishedState, before: number, limit: number): Promise<number> {
    if (state !== 'delivered' && state !== 'dropped') throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`state\` to be delivered or dropped, got ${JSON.stringify(state)}`, { field: 'state' });
    return this.tx(`purging ${state} batches`, async (c) => {
      const ids = (await this.run<{ id: number }>(c,
        `SELECT id FROM ${this.t.batches} WHERE state = '${state}' AND finished_at < $1 ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED`, [before, limit])).map((r) => r.id);
      if (ids.length === 0) return 0;
      await this.run(c, `
        WITH i AS (DELETE FROM ${this.t.items} WHERE batch_id = ANY($1::bigint[])), a AS (DELETE FROM ${this.t.attempts} WHERE batch_id = ANY($1::bigint[])),
        b AS (DELETE FROM ${this.t.batches} WHERE id = ANY($1::bigint[]) RETURNING destination, state, items),
        cnt AS (${this.counted(`SELECT destination, state, -1::bigint AS batches, -items::bigint AS items FROM b`, '$2')})
        SELECT count(*) FROM b`, [ids, this.shard()]);
      return ids.length;
    });
  }

  async setPaused(destination: string, paused: boolean, now: number): Promise<boolean> {
    const rows = await this.q<{ changed: boolean }>(paused ? 'pausing a destination' : 'resuming a destination', paused
      ? `INSERT INTO ${this.t.dests} (destination, paused_at) VALUES ($1, $2)
         ON CONFLICT (destination) DO UPDATE SET paused_at = $2 WHERE ${this.t.dests}.paused_at IS NULL RETURNING true AS changed`
      : `WITH u AS (UPDATE ${this.t.dests} SET paused_at = NULL WHERE destination = $1 AND paused_at IS NOT NULL AND $2::bigint IS NOT NULL RETURNING destination)
         SELECT true AS changed, pg_notify($3, destination) FROM u`, paused ? [destination, now] : [destination, now, this.channel]);
    return rows.length > 0;
  }

  async subscribe(listener: (destination: string) => void): Promise<() => Promise<void>> {
    if (this.closed) throw new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`);
    this.listeners.add(listener);
    try {
      await this.listen();
    } catch (e) {
      this.listeners.delete(listener);
      throw postgresError(e, this.description, 'listening for new work');
    }
    return async () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) await this.unlisten();
    };
  }

  /** One connection per store LISTENs; when it breaks it is made again (a second later), and polling covers the gap. */
  private listen(): Promise<void> {
    this.listening ??= (async () => {
      const client = this.listenClient();
      client.on('error', () => {});
      client.on('notification', (m) => {
        if (m.channel !== this.channel || !m.payload) return;
        for (const l of this.listeners) l(m.payload);
      });
      client.on('end', () => {
        if (this.listener !== client) return;
        this.listener = null;
        this.listening = null;
        if (!this.closed && this.listeners.size > 0) {
          this.relisten = setTimeout(() => {
            this.relisten = null;
            if (!this.closed && this.listeners.size > 0) this.listen().catch(() => {});
          }, 1_000);
          this.relisten.unref?.();
        }
      });
      try {
        await client.connect();
        await this.exec(client, `LISTEN ${this.channel}`);
      } catch (e) {
        this.listening = null;
        await client.end().catch(() => {});
        throw e;
      }
      this.listener = client;
    })();
    return this.listening;
  }

  private async unlisten(): Promise<void> {
    if (this.relisten) clearTimeout(this.relisten);
    this.relisten = null;
    const pending = this.listening;
    this.listening = null;
    await pending?.catch(() => {});
    const client = this.listener;
    this.listener = null;
    if (client !== null) await this.endClient(client);
  }

  /** Ends a connection politely; one that does not answer within queryTimeoutMs (a partition holds its goodbye) is reset. */
  private async endClient(c: Pg.ClientBase): Promise<void> {
    let cancel: () => void = () => {};
    const late = new Promise<void>((resolve) => {
      cancel = systemClock.setTimer(() => {
        resetConnection(c);
        resolve();
      }, this.queryTimeoutMs > 0 ? this.queryTimeoutMs : 3_000);
    });
    try {
      await Promise.race([(c as Pg.Client).end().catch(() => {}), late]);
    } finally {
      cancel();
    }
  }

  /** Ends a pool; connections that do not say goodbye within queryTimeoutMs are reset. */
  private async endPool(pool: Pg.Pool): Promise<void> {
    let cancel: () => void = () => {};
    const ended = pool.end().catch(() => {});
    const late = new Promise<boolean>((resolve) => {
      cancel = systemClock.setTimer(() => resolve(true), this.queryTimeoutMs > 0 ? this.queryTimeoutMs : 3_000);
    });
    const timedOut = await Promise.race([ended.then(() => false), late]);
    cancel();
    if (!timedOut) return;
    for (const c of this.clients) resetConnection(c);
    await ended;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.listeners.clear();
    await this.unlisten();
    await this.endPool(this.pool);
    if (this.outcomePool !== this.pool) await this.endPool(this.outcomePool);
  }
}

/** The items of cut batches as two parallel arrays for one statement: each item's id and its batch's ordinal (1-based). */
function itemsOfCuts(cuts: readonly { readonly rows: readonly { readonly id: number }[] }[]): { itemIds: number[]; itemBatch: number[] } {
  const itemIds: number[] = [];
  const itemBatch: number[] = [];
  cuts.forEach((cut, i) => {
    for (const r of cut.rows) {
      itemIds.push(r.id);
      itemBatch.push(i + 1);
    }
  });
  return { itemIds, itemBatch };
}
