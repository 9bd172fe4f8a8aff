// The shared store: PostgreSQL, for several workers on several machines. This module opens
// it and answers the store contract; the work is in postgres-session.ts (connections,
// timeouts, errors), postgres-schema.ts (tables, migrations), postgres-claims.ts (enqueue,
// seal, lease), postgres-outcomes.ts (outcomes, requeue, purge), postgres-queries.ts
// (reads) and postgres-notify.ts (LISTEN/NOTIFY wake-ups).
import { createHash } from 'node:crypto';
import type * as Pg from 'pg';
import { DeliveryError } from './errors.js';
import * as claims from './postgres-claims.js';
import { PgListener } from './postgres-notify.js';
import * as outcomes from './postgres-outcomes.js';
import * as queries from './postgres-queries.js';
import { migratePostgres, pgTables, type PgCx, type PgTables } from './postgres-schema.js';
import { PgSession } from './postgres-session.js';
import { PURGE_DELIVERED_CHUNK } from './store-common.js';
import type {
  BatchDetail,
  BatchLimits,
  BatchSummary,
  ClaimedBatch,
  CompleteResult,
  DeliveryStore,
  DestinationStats,
  DropStat,
  EnqueueResult,
  FinishedState,
  FormAndClaimResult,
  FormResult,
  Lease,
  LimitedClaim,
  ListFilter,
  NewItem,
  Outcome,
  RequeueFilter,
  SharedLimits,
} from './types.js';

export { postgresError } from './postgres-session.js';

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
  schema: 'public',
  tablePrefix: 'relent_',
  poolSize: 4,
  connectTimeoutMs: 5_000,
  queryTimeoutMs: 3_000,
  statementTimeoutMs: 2_000,
  keepAliveMs: 10_000,
  synchronousOutcomes: false,
});

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
  if (!IDENT.test(schema))
    throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`schema\` to be lower-case letters, digits and _, got ${JSON.stringify(schema)}`, {
      field: 'schema',
    });
  if (!IDENT.test(prefix))
    throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`tablePrefix\` to be lower-case letters, digits and _, got ${JSON.stringify(prefix)}`, {
      field: 'tablePrefix',
    });
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
    throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`synchronousOutcomes\` to be true or false, got ${JSON.stringify(options.synchronousOutcomes)}`, {
      field: 'synchronousOutcomes',
    });
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
  const store = new PostgresStore(new PgSession(pool, outcomePool ?? pool, where, listenClient, queryTimeoutMs), schema, prefix);
  try {
    await store.init(options.mustExist === true);
  } catch (e) {
    await pool.end().catch(() => {});
    await outcomePool?.end().catch(() => {});
    throw e;
  }
  return store;
}

class PostgresStore implements DeliveryStore, PgCx {
  readonly kind = 'postgres' as const;
  readonly description: string;
  readonly t: PgTables;
  readonly channel: string;
  readonly claimSql: string;
  /**
   * The counters' row a write adds to next (16 per destination and state: concurrent
   * writers rarely wait for each other). Each store starts at a random one, so the
   * workers of several processes do not walk the rows in step.
   */
  private shardSeq = Math.floor(Math.random() * 16);
  private readonly notify: PgListener;

  constructor(
    readonly s: PgSession,
    private readonly schema: string,
    private readonly prefix: string,
  ) {
    this.description = s.description;
    this.t = pgTables(schema, prefix);
    this.channel = `relent_${createHash('sha256').update(`${schema}.${prefix}`).digest('hex').slice(0, 16)}`;
    this.claimSql = claims.claimStatement(this.t);
    this.notify = new PgListener(s, this.channel);
  }

  shard(): number {
    this.shardSeq = (this.shardSeq + 1) & 15;
    return this.shardSeq;
  }

  /**
   * Whether PostgreSQL answers now, over a new connection (none of the pool's, which may
   * be stalled): resolves when it does within `timeoutMs`, rejects otherwise. A worker
   * asks while the store fails, to start again as soon as it is back.
   */
  ping(timeoutMs: number): Promise<void> {
    return this.s.ping(timeoutMs);
  }

  /** Makes or upgrades the tables (numbered migrations); `mustExist`: only open a queue that is there. */
  init(mustExist = false): Promise<void> {
    return migratePostgres(this.s, this.t, this.schema, this.prefix, mustExist);
  }

  enqueue(list: readonly NewItem[], now: number): Promise<EnqueueResult[]> {
    return claims.enqueue(this, list, now);
  }

  formBatches(destination: string, limits: BatchLimits, now: number, maxBatches: number): Promise<FormResult> {
    return claims.formBatches(this, destination, limits, now, maxBatches);
  }

  formAndClaim(destination: string, limits: BatchLimits, now: number, maxBatches: number, leaseMs: number, owner: string): Promise<FormAndClaimResult> {
    return claims.formAndClaim(this, destination, limits, now, maxBatches, leaseMs, owner);
  }

  claim(destination: string, limit: number, now: number, leaseMs: number, owner: string): Promise<ClaimedBatch[]> {
    return claims.claim(this, destination, limit, now, leaseMs, owner);
  }

  reclaim(destination: string, owner: string, known: readonly Lease[], now: number, leaseMs: number): Promise<ClaimedBatch[]> {
    return claims.reclaim(this, destination, owner, known, now, leaseMs);
  }

  claimLimited(destination: string, want: number, limits: SharedLimits, now: number, leaseMs: number, owner: string): Promise<LimitedClaim> {
    return claims.claimLimited(this, destination, want, limits, now, leaseMs, owner);
  }

  endPermit(permit: number, at: number): Promise<void> {
    return claims.endPermit(this, permit, at);
  }

  renew(leases: readonly Lease[], now: number, leaseMs: number): Promise<number[]> {
    return claims.renew(this, leases, now, leaseMs);
  }

  complete(list: readonly Outcome[]): Promise<CompleteResult> {
    return outcomes.complete(this, list);
  }

  release(leases: readonly Lease[], now: number): Promise<number> {
    return claims.release(this, leases, now);
  }

  stats(now: number): Promise<DestinationStats[]> {
    return queries.stats(this, now);
  }

  recount(): Promise<void> {
    return outcomes.recount(this);
  }

  list(filter: ListFilter, now: number): Promise<BatchSummary[]> {
    return queries.list(this, filter, now);
  }

  get(id: number): Promise<BatchDetail | null> {
    return queries.get(this, id);
  }

  requeue(filter: RequeueFilter, now: number): Promise<number> {
    return outcomes.requeue(this, filter, now);
  }

  dropStats(): Promise<DropStat[]> {
    return queries.dropStats(this);
  }

  purgeDelivered(before: number): Promise<number> {
    return this.purge('delivered', before, PURGE_DELIVERED_CHUNK);
  }

  purge(state: FinishedState, before: number, limit: number): Promise<number> {
    return outcomes.purge(this, state, before, limit);
  }

  setPaused(destination: string, paused: boolean, now: number): Promise<boolean> {
    return queries.setPaused(this, destination, paused, now);
  }

  subscribe(listener: (destination: string) => void): Promise<() => Promise<void>> {
    return this.notify.subscribe(listener);
  }

  async close(): Promise<void> {
    if (this.s.closed) return;
    this.s.closed = true;
    await this.notify.close();
    await this.s.end();
  }
}
