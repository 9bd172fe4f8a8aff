// The PostgreSQL store's tables: their names, the numbered migrations that make them (see
// migrations.ts for the scheme), and the counters every write keeps for stats().
import type * as Pg from 'pg';
import { DeliveryError } from './errors.js';
import { fill, lastMigration, refuseOtherSchema, tableVersions, MIGRATION_KEY, SCHEMA_KEY, type Migration, type TableVersions } from './migrations.js';
import type { PgSession } from './postgres-session.js';
import { SCHEMA_VERSION } from './store-common.js';

/** The tables of one schema and prefix, qualified and quoted. */
export interface PgTables {
  readonly items: string;
  readonly batches: string;
  readonly attempts: string;
  readonly meta: string;
  readonly dests: string;
  readonly rate: string;
  readonly counts: string;
}

/** The names a migration's SQL may say: the tables, and `{schema}` and `{prefix}` (identifiers the store validated). */
type Names = PgTables & { readonly schema: string; readonly prefix: string };

export function pgTables(schema: string, prefix: string): PgTables {
  const q = (name: string): string => `"${schema}"."${prefix}${name}"`;
  return { items: q('items'), batches: q('batches'), attempts: q('attempts'), meta: q('meta'), dests: q('destinations'), rate: q('rate'), counts: q('counts') };
}

/**
 * A data-modifying CTE body that adds deltas — rows (destination, state, batches, items)
 * of the query `from` — to the counters behind stats(): one row per destination, state
 * and shard `shard` (a parameter), taken in a fixed order so two writers cannot deadlock.
 */
export function counted(t: PgTables, from: string, shard: string): string {
  return `INSERT INTO ${t.counts} AS t (destination, state, shard, batches, items)
      SELECT destination, state, ${shard}::int, sum(batches), sum(items) FROM (${from}) AS d GROUP BY destination, state ORDER BY destination, state
      ON CONFLICT (destination, state, shard) DO UPDATE SET batches = t.batches + excluded.batches, items = t.items + excluded.items`;
}

/** Rebuilds the counters behind stats() from the tables. */
export const PG_RECOUNT = `
  DELETE FROM {counts};
  INSERT INTO {counts} (destination, state, shard, batches, items)
    SELECT destination, 'pending', 0, 0, count(*) FROM {items} WHERE batch_id IS NULL GROUP BY destination
    UNION ALL SELECT destination, state, 0, count(*), coalesce(sum(items), 0) FROM {batches} GROUP BY destination, state;`;

/** What a migration works with: SQL on the store's tables, in the upgrade's transaction. */
export class PgMigrator {
  constructor(
    private readonly c: Pg.PoolClient,
    readonly names: Names,
  ) {}

  async exec(sql: string, values: unknown[] = []): Promise<Pg.QueryResult> {
    return this.c.query(fill(sql, { ...this.names }), values);
  }

  async hasColumn(table: keyof PgTables, column: string): Promise<boolean> {
    const r = await this.c.query(`SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name = $3`, [
      this.names.schema,
      this.tableName(table),
      column,
    ]);
    return r.rows.length > 0;
  }

  /**
   * Adds a column (then runs `then`) unless the table has it already: looked up first, so
   * tables that have it take no lock (ALTER TABLE would take an exclusive one, and workers
   * of an older relent may be using them).
   */
  async addColumn(table: keyof PgTables, column: string, type: string, then = ''): Promise<void> {
    if (await this.hasColumn(table, column)) return;
    await this.exec(`ALTER TABLE {${table}} ADD COLUMN ${column} ${type}; ${then}`);
  }

  async hasTable(table: keyof PgTables): Promise<boolean> {
    return (await this.c.query(`SELECT to_regclass($1) AS t`, [this.names[table]])).rows[0].t !== null;
  }

  private tableName(table: keyof PgTables): string {
    return this.names[table].slice(this.names[table].indexOf('.') + 2, -1);
  }
}

/**
 * The migrations, in order. Each makes its tables as they are now (so new tables are the
 * ones earlier relents made), and 1 to 5 may meet tables made before numbered migrations,
 * at any of the shapes earlier relents left: each also adds what such tables lack, and
 * changes nothing that is there.
 */
export const PG_MIGRATIONS: readonly Migration<PgMigrator, Promise<unknown>>[] = [
  {
    version: 1,
    name: 'items, batches and their attempts',
    up: (m) =>
      m.exec(`
      CREATE TABLE IF NOT EXISTS {meta} (k TEXT PRIMARY KEY, v TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS {items} (
        id BIGSERIAL PRIMARY KEY,
        destination TEXT NOT NULL,
        key TEXT NOT NULL,
        payload TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        enqueued_at BIGINT NOT NULL,
        batch_id BIGINT,
        UNIQUE (destination, key)
      );
      CREATE INDEX IF NOT EXISTS "{prefix}items_pending" ON {items} (destination, id) WHERE batch_id IS NULL;
      CREATE INDEX IF NOT EXISTS "{prefix}items_batch" ON {items} (batch_id);
      CREATE TABLE IF NOT EXISTS {batches} (
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
      CREATE INDEX IF NOT EXISTS "{prefix}batches_due" ON {batches} (destination, due_at, id) WHERE state = 'queued';
      CREATE INDEX IF NOT EXISTS "{prefix}batches_dropped" ON {batches} (destination, id) WHERE state = 'dropped';
      CREATE TABLE IF NOT EXISTS {attempts} (
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
      );`),
  },
  {
    version: 2,
    name: "the operation's throttled attempts (batches.op_throttled)",
    // (in the tables of the first release)
    up: (m) => m.addColumn('batches', 'op_throttled', 'INTEGER NOT NULL DEFAULT 0'),
  },
  {
    version: 3,
    name: 'shared limits, pause and retention',
    up: async (m) => {
      // The oldest item's enqueue time (the batch's creation time for batches made before it).
      await m.addColumn('batches', 'enqueued_at', 'BIGINT', 'UPDATE {batches} SET enqueued_at = created_at WHERE enqueued_at IS NULL;');
      // Live leases per destination (shared concurrency, stats), finished batches by age (retention);
      // the index on batches.key goes: no query used it, and every batch update paid for it.
      await m.exec(`
        DROP INDEX IF EXISTS "{schema}"."{prefix}batches_key";
        CREATE TABLE IF NOT EXISTS {dests} (destination TEXT PRIMARY KEY, paused_at BIGINT);
        CREATE TABLE IF NOT EXISTS {rate} (id BIGSERIAL PRIMARY KEY, destination TEXT NOT NULL, at BIGINT NOT NULL, n INTEGER NOT NULL, end_at BIGINT NOT NULL);
        CREATE INDEX IF NOT EXISTS "{prefix}batches_leased" ON {batches} (destination, lease_until) WHERE state = 'queued' AND lease_owner IS NOT NULL;
        CREATE INDEX IF NOT EXISTS "{prefix}batches_delivered_at" ON {batches} (finished_at) WHERE state = 'delivered';
        CREATE INDEX IF NOT EXISTS "{prefix}batches_dropped_at" ON {batches} (finished_at) WHERE state = 'dropped';`);
    },
  },
  {
    version: 4,
    name: 'a rate permit counts until its requests were answered (rate.end_at)',
    up: async (m) => {
      await m.addColumn('rate', 'end_at', 'BIGINT NOT NULL DEFAULT 0', 'DROP INDEX IF EXISTS "{schema}"."{prefix}rate_window"; UPDATE {rate} SET end_at = at;');
      await m.exec('CREATE INDEX IF NOT EXISTS "{prefix}rate_end" ON {rate} (destination, end_at)');
    },
  },
  {
    version: 5,
    name: 'statistics from counters',
    up: async (m) => {
      // The counters behind stats() (O(1) on any number of rows): made, and filled from the tables, once.
      if (!(await m.hasTable('counts'))) {
        await m.exec(`CREATE TABLE {counts} (destination TEXT NOT NULL, state TEXT NOT NULL, shard INTEGER NOT NULL,
          batches BIGINT NOT NULL DEFAULT 0, items BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (destination, state, shard))`);
        await m.exec(PG_RECOUNT);
      }
      // The oldest waiting batch per destination, and the deferred ones (queued, no lease) counted index-only.
      await m.exec(`
        CREATE INDEX IF NOT EXISTS "{prefix}batches_oldest" ON {batches} (destination, enqueued_at) WHERE state = 'queued';
        CREATE INDEX IF NOT EXISTS "{prefix}batches_deferred" ON {batches} (destination, due_at) INCLUDE (items) WHERE state = 'queued' AND lease_owner IS NULL;`);
    },
  },
];

export const PG_LAST_MIGRATION = lastMigration(PG_MIGRATIONS);

async function versions(read: (text: string, values: unknown[]) => Promise<{ k: string; v: string }[] | null>, meta: string): Promise<TableVersions> {
  const rows = await read(`SELECT k, v FROM ${meta} WHERE k IN ($1, $2)`, [SCHEMA_KEY, MIGRATION_KEY]);
  return tableVersions(rows ?? []);
}

/**
 * Brings the tables to the last migration. Read first (one short statement): tables that are
 * up to date take no lock at all. Otherwise one transaction, under an advisory lock of the
 * schema and prefix (two processes starting together do not both upgrade), reads the
 * versions again, runs the missing migrations and writes the version rows. `mustExist`:
 * tables that are not there are not made (ERR_NO_QUEUE).
 */
export async function migratePostgres(s: PgSession, t: PgTables, schema: string, prefix: string, mustExist: boolean): Promise<void> {
  const [found] = await s.q<{ items: string | null; meta: string | null }>(
    'looking for the queue',
    'SELECT to_regclass($1)::text AS items, to_regclass($2)::text AS meta',
    [t.items, t.meta],
  );
  if (mustExist && (found?.items === null || found?.items === undefined)) {
    throw new DeliveryError(
      'ERR_NO_QUEUE',
      `${s.description}: no queue here (there is no table ${t.items}: nothing was enqueued with this schema and tablePrefix)`,
    );
  }
  const hasMeta = found?.meta !== null && found?.meta !== undefined;
  const before = hasMeta ? await versions((text, values) => s.q('creating the tables', text, values), t.meta) : tableVersions([]);
  refuseOtherSchema(s.description, before);
  if (before.migration >= PG_LAST_MIGRATION) return;
  await s.tx(
    'creating the tables',
    async (c) => {
      // One creator at a time: two workers starting together would race on the catalog.
      await c.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [`relent:${schema}.${prefix}`]);
      await c.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
      const metaNow = (await c.query(`SELECT to_regclass($1) AS t`, [t.meta])).rows[0].t !== null;
      const v = metaNow ? await versions(async (text, values) => (await c.query(text, values)).rows as { k: string; v: string }[], t.meta) : tableVersions([]);
      refuseOtherSchema(s.description, v);
      if (v.migration >= PG_LAST_MIGRATION) return;
      const m = new PgMigrator(c, { ...t, schema, prefix });
      for (const step of PG_MIGRATIONS) if (step.version > v.migration) await step.up(m);
      const set = `INSERT INTO ${t.meta} (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v`;
      if (v.schema === null) await c.query(set, [SCHEMA_KEY, String(SCHEMA_VERSION)]);
      await c.query(set, [MIGRATION_KEY, String(PG_LAST_MIGRATION)]);
    },
    true,
  );
}

/** What the store's operations work with: its connections, its tables, its notification channel, and the counters' next shard. */
export interface PgCx {
  readonly s: PgSession;
  readonly t: PgTables;
  /** The LISTEN/NOTIFY channel of these tables (an identifier derived from schema and prefix). */
  readonly channel: string;
  /** The claim statement (see claimStatement), made once per store. */
  readonly claimSql: string;
  /** The counters' row a write adds to next (one of 16 per destination and state). */
  shard(): number;
}
