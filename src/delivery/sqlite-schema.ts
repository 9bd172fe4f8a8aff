// The SQLite store's tables: their names, and the numbered migrations that make them
// (see migrations.ts for the scheme).
import type BetterSqlite3 from 'better-sqlite3';
import { fill, lastMigration, refuseOtherSchema, tableVersions, MIGRATION_KEY, SCHEMA_KEY, type Migration, type TableVersions } from './migrations.js';
import { SCHEMA_VERSION } from './store-common.js';

type Db = BetterSqlite3.Database;

/** The tables of one prefix (unquoted: the prefix is letters, digits and _). */
export interface SqliteTables {
  readonly items: string;
  readonly batches: string;
  readonly attempts: string;
  readonly meta: string;
  readonly dests: string;
  readonly rate: string;
  readonly counts: string;
}

export function sqliteTables(prefix: string): SqliteTables {
  return {
    items: `${prefix}items`,
    batches: `${prefix}batches`,
    attempts: `${prefix}attempts`,
    meta: `${prefix}meta`,
    dests: `${prefix}destinations`,
    rate: `${prefix}rate`,
    counts: `${prefix}counts`,
  };
}

/** Rebuilds the counters behind stats() from the tables (inside a write transaction). */
export const SQLITE_RECOUNT = `
  DELETE FROM {counts};
  INSERT INTO {counts} (destination, state, batches, items)
    SELECT destination, 'pending', 0, count(*) FROM {items} WHERE batch_id IS NULL GROUP BY destination
    UNION ALL SELECT destination, state, count(*), coalesce(sum(items), 0) FROM {batches} GROUP BY destination, state;`;

/** What a migration works with: SQL on the store's tables, and what it must look up first. */
export class SqliteMigrator {
  constructor(
    private readonly db: Db,
    private readonly t: SqliteTables,
  ) {}

  exec(sql: string): void {
    this.db.exec(fill(sql, { ...this.t }));
  }

  hasTable(table: keyof SqliteTables): boolean {
    return this.db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?`).get(this.t[table]) !== undefined;
  }

  /** Adds a column (then runs `then`) unless the table has it already. */
  addColumn(table: keyof SqliteTables, column: string, type: string, then = ''): void {
    const has = (this.db.pragma(`table_info(${this.t[table]})`) as { name: string }[]).some((c) => c.name === column);
    if (has) return;
    this.exec(`ALTER TABLE {${table}} ADD COLUMN ${column} ${type}; ${then}`);
  }
}

/**
 * The migrations, in order. Each makes its tables as they are now (so new tables are the
 * ones earlier relents made), and 1 to 5 may meet tables made before numbered migrations,
 * at any of the shapes earlier relents left: each also adds what such tables lack, and
 * changes nothing that is there.
 */
export const SQLITE_MIGRATIONS: readonly Migration<SqliteMigrator>[] = [
  {
    version: 1,
    name: 'items, batches and their attempts',
    up: (m) =>
      m.exec(`
      CREATE TABLE IF NOT EXISTS {meta} (k TEXT PRIMARY KEY, v TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS {items} (
        id INTEGER PRIMARY KEY,
        destination TEXT NOT NULL,
        key TEXT NOT NULL,
        payload TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        enqueued_at INTEGER NOT NULL,
        batch_id INTEGER,
        UNIQUE (destination, key)
      );
      CREATE INDEX IF NOT EXISTS {items}_pending ON {items} (destination, id) WHERE batch_id IS NULL;
      CREATE INDEX IF NOT EXISTS {items}_batch ON {items} (batch_id);
      CREATE TABLE IF NOT EXISTS {batches} (
        id INTEGER PRIMARY KEY,
        destination TEXT NOT NULL,
        key TEXT NOT NULL,
        state TEXT NOT NULL,
        items INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        not_before INTEGER NOT NULL,
        due_at INTEGER NOT NULL,
        lease_owner TEXT,
        lease_until INTEGER NOT NULL DEFAULT 0,
        lease_token INTEGER NOT NULL DEFAULT 0,
        claims INTEGER NOT NULL DEFAULT 0,
        round INTEGER NOT NULL DEFAULT 1,
        attempt INTEGER NOT NULL DEFAULT 0,
        op_started_at INTEGER,
        op_deadline_at INTEGER,
        prev_delay_ms INTEGER,
        op_throttled INTEGER NOT NULL DEFAULT 0,
        last_status INTEGER,
        last_error_class TEXT,
        last_decision TEXT,
        last_why TEXT,
        finished_at INTEGER,
        enqueued_at INTEGER
      );
      CREATE INDEX IF NOT EXISTS {batches}_due ON {batches} (destination, due_at, id) WHERE state = 'queued';
      CREATE INDEX IF NOT EXISTS {batches}_dropped ON {batches} (destination, id) WHERE state = 'dropped';
      CREATE TABLE IF NOT EXISTS {attempts} (
        batch_id INTEGER NOT NULL,
        round INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        at INTEGER NOT NULL,
        status INTEGER,
        error_class TEXT,
        elapsed_ms INTEGER NOT NULL,
        decision TEXT NOT NULL,
        why TEXT,
        delay_ms INTEGER,
        retry_after_ms INTEGER,
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
    up: (m) => {
      // The oldest item's enqueue time (the batch's creation time for batches made before it).
      m.addColumn('batches', 'enqueued_at', 'INTEGER', 'UPDATE {batches} SET enqueued_at = created_at;');
      // Live leases per destination (shared concurrency, stats), finished batches by age (retention);
      // the index on batches.key goes: no query used it, and every batch update paid for it.
      m.exec(`
        DROP INDEX IF EXISTS {batches}_key;
        CREATE TABLE IF NOT EXISTS {dests} (destination TEXT PRIMARY KEY, paused_at INTEGER);
        CREATE TABLE IF NOT EXISTS {rate} (id INTEGER PRIMARY KEY, destination TEXT NOT NULL, at INTEGER NOT NULL, n INTEGER NOT NULL, end_at INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS {batches}_leased ON {batches} (destination, lease_until) WHERE state = 'queued' AND lease_owner IS NOT NULL;
        CREATE INDEX IF NOT EXISTS {batches}_delivered_at ON {batches} (finished_at) WHERE state = 'delivered';
        CREATE INDEX IF NOT EXISTS {batches}_dropped_at ON {batches} (finished_at) WHERE state = 'dropped';`);
    },
  },
  {
    version: 4,
    name: 'a rate permit counts until its requests were answered (rate.end_at)',
    up: (m) => {
      m.addColumn('rate', 'end_at', 'INTEGER NOT NULL DEFAULT 0', 'DROP INDEX IF EXISTS {rate}_window; UPDATE {rate} SET end_at = at;');
      m.exec('CREATE INDEX IF NOT EXISTS {rate}_end ON {rate} (destination, end_at)');
    },
  },
  {
    version: 5,
    name: 'statistics from counters',
    up: (m) => {
      // The counters behind stats() (O(1) on any number of rows): made, and filled from the tables, once.
      if (!m.hasTable('counts')) {
        m.exec(`CREATE TABLE {counts} (destination TEXT NOT NULL, state TEXT NOT NULL, batches INTEGER NOT NULL DEFAULT 0, items INTEGER NOT NULL DEFAULT 0,
          PRIMARY KEY (destination, state))`);
        m.exec(SQLITE_RECOUNT);
      }
      m.exec("CREATE INDEX IF NOT EXISTS {batches}_oldest ON {batches} (destination, enqueued_at) WHERE state = 'queued'");
    },
  },
];

export const SQLITE_LAST_MIGRATION = lastMigration(SQLITE_MIGRATIONS);

function versions(db: Db, t: SqliteTables): TableVersions {
  if (db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?`).get(t.meta) === undefined) return tableVersions([]);
  return tableVersions(db.prepare(`SELECT k, v FROM ${t.meta} WHERE k IN (?, ?)`).all(SCHEMA_KEY, MIGRATION_KEY) as { k: string; v: string }[]);
}

/**
 * Brings the tables to the last migration. Read first, without a lock: tables that are up
 * to date take no write lock (a worker opening a file another process holds locked must not
 * wait on it). Otherwise one IMMEDIATE transaction (SQLite's write lock: one process at a
 * time) reads the versions again, runs the missing migrations and writes the version rows.
 */
export function migrateSqlite(db: Db, t: SqliteTables, description: string): void {
  const before = versions(db, t);
  refuseOtherSchema(description, before);
  if (before.migration >= SQLITE_LAST_MIGRATION) return;
  db.transaction(() => {
    const v = versions(db, t);
    refuseOtherSchema(description, v);
    if (v.migration >= SQLITE_LAST_MIGRATION) return;
    const m = new SqliteMigrator(db, t);
    for (const step of SQLITE_MIGRATIONS) if (step.version > v.migration) step.up(m);
    const set = db.prepare(`INSERT INTO ${t.meta} (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`);
    if (v.schema === null) set.run(SCHEMA_KEY, String(SCHEMA_VERSION));
    set.run(MIGRATION_KEY, String(SQLITE_LAST_MIGRATION));
  }).immediate();
}
