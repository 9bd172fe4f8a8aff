// Numbered schema migrations: tables made by earlier relents — restated below as the SQL
// those relents ran (from this repository's history: the first release, 7006cd0; shared
// limits, d571db7; and main before numbered migrations, 6947b5e) — open with this one,
// are upgraded to the tables a new store makes, keep their rows, and work. Tables at the
// last migration take no lock when opened; other compatibility versions are refused; a
// migration that fails changes nothing.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Sqlite from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { openPostgresStore } from '../../src/delivery/postgres-store.js';
import { openSqliteStore } from '../../src/delivery/sqlite-store.js';
import type { DeliveryStore } from '../../src/delivery/types.js';
import { dropSchema, pgEnabled, PG_URL, uniqueSchema } from './support.js';

const withPg = await pgEnabled();

/**
 * The tables of one earlier relent, per dialect. `{t}` is where the tables live (SQLite:
 * nothing; PostgreSQL: the schema, quoted, and a dot); index names are unqualified.
 */
interface OldShape {
  readonly name: string;
  readonly sqlite: string;
  readonly postgres: string;
  /** What its batches say as the oldest enqueue time after the upgrade. */
  readonly oldest: number;
  /** Its rate table's end_at after the upgrade (null: it had no rate table). */
  readonly rateEnd: number | null;
  readonly has: { readonly enqueuedAt: boolean; readonly rate: 'none' | 'at' | 'end_at'; readonly counts: boolean };
}

const ITEMS = (int: string, serial: string): string => `CREATE TABLE {t}relent_items (
  id ${serial} PRIMARY KEY, destination TEXT NOT NULL, key TEXT NOT NULL, payload TEXT NOT NULL, bytes INTEGER NOT NULL,
  enqueued_at ${int} NOT NULL, batch_id ${int}, UNIQUE (destination, key));
CREATE INDEX relent_items_pending ON {t}relent_items (destination, id) WHERE batch_id IS NULL;
CREATE INDEX relent_items_batch ON {t}relent_items (batch_id);`;

const BATCHES = (int: string, serial: string, extra: string): string => `CREATE TABLE {t}relent_batches (
  id ${serial} PRIMARY KEY, destination TEXT NOT NULL, key TEXT NOT NULL, state TEXT NOT NULL, items INTEGER NOT NULL, bytes ${int} NOT NULL,
  created_at ${int} NOT NULL, not_before ${int} NOT NULL, due_at ${int} NOT NULL, lease_owner TEXT, lease_until ${int} NOT NULL DEFAULT 0,
  lease_token ${int} NOT NULL DEFAULT 0, claims INTEGER NOT NULL DEFAULT 0, round INTEGER NOT NULL DEFAULT 1, attempt INTEGER NOT NULL DEFAULT 0,
  op_started_at ${int}, op_deadline_at ${int}, prev_delay_ms ${int},${extra.includes('op_throttled') ? ' op_throttled INTEGER NOT NULL DEFAULT 0,' : ''}
  last_status INTEGER, last_error_class TEXT, last_decision TEXT, last_why TEXT, finished_at ${int}${extra.includes('enqueued_at') ? `, enqueued_at ${int}` : ''});
CREATE INDEX relent_batches_due ON {t}relent_batches (destination, due_at, id) WHERE state = 'queued';
CREATE INDEX relent_batches_dropped ON {t}relent_batches (destination, id) WHERE state = 'dropped';`;

const ATTEMPTS = (int: string): string => `CREATE TABLE {t}relent_attempts (
  batch_id ${int} NOT NULL, round INTEGER NOT NULL, attempt INTEGER NOT NULL, at ${int} NOT NULL, status INTEGER, error_class TEXT,
  elapsed_ms ${int} NOT NULL, decision TEXT NOT NULL, why TEXT, delay_ms ${int}, retry_after_ms ${int}, worker TEXT, PRIMARY KEY (batch_id, round, attempt));`;

const META = `CREATE TABLE {t}relent_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL); INSERT INTO {t}relent_meta (k, v) VALUES ('schema', '1');`;

const LATER_INDEXES = `
CREATE INDEX relent_batches_leased ON {t}relent_batches (destination, lease_until) WHERE state = 'queued' AND lease_owner IS NOT NULL;
CREATE INDEX relent_batches_delivered_at ON {t}relent_batches (finished_at) WHERE state = 'delivered';
CREATE INDEX relent_batches_dropped_at ON {t}relent_batches (finished_at) WHERE state = 'dropped';`;

function shape(name: string, int: string, serial: string, rest: 'first' | 'shared' | 'main'): string {
  const parts = [META, ITEMS(int, serial), BATCHES(int, serial, rest === 'first' ? '' : 'op_throttled enqueued_at'), ATTEMPTS(int)];
  if (rest === 'first') parts.push('CREATE INDEX relent_batches_key ON {t}relent_batches (key);');
  else {
    parts.push(`CREATE TABLE {t}relent_destinations (destination TEXT PRIMARY KEY, paused_at ${int});`, LATER_INDEXES);
    if (rest === 'shared') {
      parts.push(`CREATE TABLE {t}relent_rate (id ${serial} PRIMARY KEY, destination TEXT NOT NULL, at ${int} NOT NULL, n INTEGER NOT NULL);
        CREATE INDEX relent_rate_window ON {t}relent_rate (destination, at);`);
    } else {
      parts.push(`CREATE TABLE {t}relent_rate (id ${serial} PRIMARY KEY, destination TEXT NOT NULL, at ${int} NOT NULL, n INTEGER NOT NULL, end_at ${int} NOT NULL);
        CREATE INDEX relent_rate_end ON {t}relent_rate (destination, end_at);
        CREATE INDEX relent_batches_oldest ON {t}relent_batches (destination, enqueued_at) WHERE state = 'queued';`);
      parts.push(
        name === 'postgres'
          ? `CREATE TABLE {t}relent_counts (destination TEXT NOT NULL, state TEXT NOT NULL, shard INTEGER NOT NULL,
            batches BIGINT NOT NULL DEFAULT 0, items BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (destination, state, shard));
          CREATE INDEX relent_batches_deferred ON {t}relent_batches (destination, due_at) INCLUDE (items) WHERE state = 'queued' AND lease_owner IS NULL;`
          : `CREATE TABLE {t}relent_counts (destination TEXT NOT NULL, state TEXT NOT NULL, batches INTEGER NOT NULL DEFAULT 0, items INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (destination, state));`,
      );
    }
  }
  return parts.join('\n');
}

const SHAPES: OldShape[] = [
  {
    name: 'the first release (7006cd0)',
    sqlite: shape('sqlite', 'INTEGER', 'INTEGER', 'first'),
    postgres: shape('postgres', 'BIGINT', 'BIGSERIAL', 'first'),
    oldest: 1_050,
    rateEnd: null,
    has: { enqueuedAt: false, rate: 'none', counts: false },
  },
  {
    name: 'shared limits, pause and retention (d571db7)',
    sqlite: shape('sqlite', 'INTEGER', 'INTEGER', 'shared'),
    postgres: shape('postgres', 'BIGINT', 'BIGSERIAL', 'shared'),
    oldest: 1_000,
    rateEnd: 1_300,
    has: { enqueuedAt: true, rate: 'at', counts: false },
  },
  {
    name: 'main before numbered migrations (6947b5e)',
    sqlite: shape('sqlite', 'INTEGER', 'INTEGER', 'main'),
    postgres: shape('postgres', 'BIGINT', 'BIGSERIAL', 'main'),
    oldest: 1_000,
    rateEnd: 1_400,
    has: { enqueuedAt: true, rate: 'end_at', counts: true },
  },
];

/** Rows every shape can hold: a pending item, a queued batch, a dropped batch with its attempt (and a rate permit, counters where there are). */
function rows(s: OldShape, counts: string): string {
  const out = [
    // (ids from the tables' own sequences: items 1, 2, 3; batches 1, 2)
    `INSERT INTO {t}relent_items (destination, key, payload, bytes, enqueued_at, batch_id) VALUES
      ('d', 'a', '{"n":1}', 7, 1000, 1), ('d', 'b', '{"n":2}', 7, 1100, 2), ('d', 'c', '{"n":3}', 7, 1200, NULL)`,
    `INSERT INTO {t}relent_batches (destination, key, state, items, bytes, created_at, not_before, due_at, lease_token, claims, attempt,
        last_status, last_decision, last_why, finished_at) VALUES
      ('d', 'rb-1', 'queued', 1, 7, 1050, 1050, 1050, 0, 0, 0, NULL, NULL, NULL, NULL),
      ('d', 'rb-2', 'dropped', 1, 7, 1150, 1150, 1150, 1, 1, 1, 503, 'max_attempts', 'attempts_exhausted', 1500)`,
    `INSERT INTO {t}relent_attempts (batch_id, round, attempt, at, status, error_class, elapsed_ms, decision, why, delay_ms, retry_after_ms, worker)
      VALUES (2, 1, 1, 1500, 503, NULL, 12, 'max_attempts', 'attempts_exhausted', NULL, NULL, 'w-old')`,
  ];
  if (s.has.enqueuedAt) out.push(`UPDATE {t}relent_batches SET enqueued_at = CASE id WHEN 1 THEN 1000 ELSE 1100 END`);
  if (s.has.rate === 'at') out.push(`INSERT INTO {t}relent_rate (destination, at, n) VALUES ('d', 1300, 1)`);
  if (s.has.rate === 'end_at') out.push(`INSERT INTO {t}relent_rate (destination, at, n, end_at) VALUES ('d', 1300, 1, 1400)`);
  if (s.has.counts)
    out.push(`INSERT INTO {t}relent_counts (destination, state, ${counts}batches, items) VALUES
    ('d', 'pending', ${counts ? '0, ' : ''}0, 1), ('d', 'queued', ${counts ? '0, ' : ''}1, 1), ('d', 'dropped', ${counts ? '0, ' : ''}1, 1)`);
  return out.join(';\n');
}

/** One database of a dialect, reached behind the store's back. */
interface Target {
  open(options?: { busyTimeoutMs?: number }): Promise<DeliveryStore>;
  /** Runs SQL (`{t}`: where the tables are); returns the rows of the last statement. */
  sql(text: string): Promise<Record<string, unknown>[]>;
  /** Tables, columns and indexes, in an order that does not depend on how they were made. */
  shape(): Promise<unknown>;
  /** Holds a lock writers need (SQLite: the write lock; PostgreSQL: an exclusive lock on the batches table) until the function returned is called. */
  lock(): Promise<() => Promise<void>>;
  cleanup(): Promise<void>;
}

interface Dialect {
  readonly name: 'sqlite' | 'postgres';
  target(): Target;
  /** The SQL of a shape in this dialect. */
  old(s: OldShape): string;
  countsShard: string;
}

function sqliteDialect(): Dialect {
  const dir = mkdtempSync(join(tmpdir(), 'relent-migrations-'));
  let n = 0;
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  return {
    // (in WAL mode, as the store leaves a file: changing the journal mode would need a lock of its own)
    name: 'sqlite',
    countsShard: '',
    old: (s) => `PRAGMA journal_mode = WAL;\n${s.sqlite}`,
    target() {
      const file = join(dir, `db-${n++}.db`);
      const sql = (text: string): Record<string, unknown>[] => {
        const db = new Sqlite(file);
        try {
          const t = text.replaceAll('{t}', '').trim();
          if (/^SELECT\b/i.test(t)) return db.prepare(t).all() as Record<string, unknown>[];
          db.exec(t);
          return [];
        } finally {
          db.close();
        }
      };
      return {
        open: (o = {}) => openSqliteStore({ file, runIn: 'caller', ...o }),
        sql: (text) => Promise.resolve(sql(text)),
        shape: () => Promise.resolve(sqliteShape(file)),
        async lock() {
          const db = new Sqlite(file);
          db.exec('BEGIN IMMEDIATE');
          return () => {
            db.exec('ROLLBACK');
            db.close();
            return Promise.resolve();
          };
        },
        cleanup: () => Promise.resolve(),
      };
    },
  };
}

function sqliteShape(file: string): unknown {
  const db = new Sqlite(file, { readonly: true });
  try {
    const tables = (db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'relent_%' ORDER BY name`).all() as { name: string }[]).map(
      (r) => r.name,
    );
    const columns = Object.fromEntries(
      tables.map((t) => [
        t,
        (db.pragma(`table_info(${t})`) as { name: string; type: string; notnull: number; dflt_value: string | null; pk: number }[])
          .map(
            (c) =>
              `${c.name} ${c.type}${c.notnull ? ' NOT NULL' : ''}${c.dflt_value !== null && !(t === 'relent_rate' && c.name === 'end_at') ? ` DEFAULT ${c.dflt_value}` : ''}${c.pk ? ' PK' : ''}`,
          )
          .sort(),
      ]),
    );
    const indexes = (
      db.prepare(`SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name`).all() as {
        name: string;
        tbl_name: string;
        sql: string;
      }[]
    ).map((i) => {
      const cols = (db.pragma(`index_info(${i.name})`) as { name: string }[]).map((c) => c.name).join(', ');
      const where = /\bWHERE\b(.*)$/is.exec(i.sql)?.[1]?.replace(/\s+/g, ' ').trim() ?? '';
      return `${i.name} ON ${i.tbl_name} (${cols})${where ? ` WHERE ${where}` : ''}`;
    });
    return { tables, columns, indexes };
  } finally {
    db.close();
  }
}

function postgresDialect(): Dialect {
  const schemas: string[] = [];
  afterAll(async () => {
    for (const s of schemas) await dropSchema(s);
  });
  return {
    name: 'postgres',
    countsShard: 'shard, ',
    old: (s) => s.postgres,
    target() {
      const schema = uniqueSchema('mig');
      schemas.push(schema);
      const sql = async (text: string): Promise<Record<string, unknown>[]> => {
        const c = new pg.Client({ connectionString: PG_URL });
        await c.connect();
        try {
          await c.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
          const r = await c.query(text.replaceAll('{t}', `"${schema}".`));
          const last = Array.isArray(r) ? (r[r.length - 1] as pg.QueryResult) : r;
          return last.rows as Record<string, unknown>[];
        } finally {
          await c.end();
        }
      };
      return {
        open: () => openPostgresStore({ connectionString: PG_URL, schema }),
        sql,
        async shape() {
          const cols = await sql(`SELECT table_name AS t, column_name AS c, data_type AS d, is_nullable AS n, column_default AS f
            FROM information_schema.columns WHERE table_schema = '${schema}' ORDER BY table_name, column_name`);
          const idx = await sql(`SELECT indexname AS i, indexdef AS d FROM pg_indexes WHERE schemaname = '${schema}' ORDER BY indexname`);
          const columns: Record<string, string[]> = {};
          for (const r of cols) {
            const dflt = r.f === null || (r.t === 'relent_rate' && r.c === 'end_at') ? '' : ` DEFAULT ${String(r.f).replaceAll(schema, 'S')}`;
            (columns[r.t as string] ??= []).push(`${r.c} ${r.d}${r.n === 'NO' ? ' NOT NULL' : ''}${dflt}`);
          }
          return { tables: Object.keys(columns).sort(), columns, indexes: idx.map((r) => String(r.d).replaceAll(schema, 'S')) };
        },
        async lock() {
          const c = new pg.Client({ connectionString: PG_URL });
          await c.connect();
          await c.query('BEGIN');
          await c.query(`LOCK TABLE "${schema}".relent_batches IN ACCESS EXCLUSIVE MODE`);
          return async () => {
            await c.query('ROLLBACK');
            await c.end();
          };
        },
        cleanup: () => Promise.resolve(),
      };
    },
  };
}

const NOW = 2_000;

for (const dialect of [sqliteDialect(), ...(withPg ? [postgresDialect()] : [])]) {
  describe(`numbered migrations: ${dialect.name}`, () => {
    /** The shape a new store makes. */
    let freshShape: unknown;
    const meta = async (t: Target): Promise<Record<string, string>> =>
      Object.fromEntries((await t.sql('SELECT k, v FROM {t}relent_meta ORDER BY k')).map((r) => [r.k, r.v]));

    it('a new store makes its tables through every migration and says so in the version rows', async () => {
      const t = dialect.target();
      const s = await t.open();
      await s.close();
      expect(await meta(t)).toEqual({ migration: '5', schema: '1' });
      freshShape = await t.shape();
      expect((freshShape as { tables: string[] }).tables).toEqual([
        'relent_attempts',
        'relent_batches',
        'relent_counts',
        'relent_destinations',
        'relent_items',
        'relent_meta',
        'relent_rate',
      ]);
    });

    for (const old of SHAPES) {
      it(`tables of ${old.name} are upgraded to a new store's, keep their rows, and work`, async () => {
        const t = dialect.target();
        await t.sql(dialect.old(old));
        await t.sql(rows(old, dialect.countsShard));
        expect(await meta(t)).toEqual({ schema: '1' });
        const s = await t.open();
        try {
          expect(await meta(t)).toEqual({ migration: '5', schema: '1' });
          expect(await t.shape()).toEqual(freshShape);
          // The counters were counted from the tables (or kept), the oldest enqueue time filled in.
          expect((await s.stats(NOW)).find((x) => x.destination === 'd')).toMatchObject({
            pendingItems: 1,
            readyBatches: 1,
            readyItems: 1,
            inflightBatches: 0,
            deferredBatches: 0,
            deliveredBatches: 0,
            droppedBatches: 1,
            droppedItems: 1,
            paused: false,
            oldestEnqueuedAt: old.oldest,
          });
          expect((await s.get(2))!.attempts).toMatchObject([{ round: 1, attempt: 1, status: 503, decision: 'max_attempts', worker: 'w-old' }]);
          if (old.rateEnd !== null)
            expect((await t.sql('SELECT at, end_at FROM {t}relent_rate')).map((r) => [Number(r.at), Number(r.end_at)])).toEqual([[1_300, old.rateEnd]]);
          // The old batch is claimed and delivered like a new one.
          const [b] = await s.claim('d', 10, NOW, 30_000, 'w-new');
          expect(b).toMatchObject({ id: 1, token: 1, key: 'rb-1', attempt: 0, opThrottled: 0, items: [{ key: 'a', payload: '{"n":1}' }] });
          const done = await s.complete([
            {
              id: 1,
              token: 1,
              state: 'delivered',
              notBefore: 1_050,
              attempt: 1,
              opStartedAt: NOW,
              opDeadlineAt: NOW + 60_000,
              prevDelayMs: null,
              opThrottled: 0,
              lastStatus: 200,
              lastErrorClass: null,
              lastDecision: 'return',
              lastWhy: 'success',
              finishedAt: NOW,
              record: null,
            },
          ]);
          expect(done).toEqual({ applied: [1], lost: [] });
          await s.enqueue([{ destination: 'd', key: 'e', payload: '{}' }], NOW);
          expect((await s.stats(NOW)).find((x) => x.destination === 'd')).toMatchObject({
            pendingItems: 2,
            readyBatches: 0,
            deliveredBatches: 1,
            droppedBatches: 1,
          });
        } finally {
          await s.close();
        }
      });
    }

    it('tables at the last migration open with no lock (a writer holding one does not stop them); older ones wait for it', async () => {
      const upToDate = dialect.target();
      await (await upToDate.open()).close();
      let release = await upToDate.lock();
      try {
        // (bounded, so a store that waits for the lock fails here instead of holding the test's lock forever)
        let timer: ReturnType<typeof setTimeout> | undefined;
        const waited = new Promise<never>((_r, reject) => {
          timer = setTimeout(() => reject(new Error('the store waited for the lock')), 10_000);
        });
        const s = await Promise.race([upToDate.open({ busyTimeoutMs: 0 }), waited]).finally(() => clearTimeout(timer));
        await s.close();
      } finally {
        await release();
      }
      if (dialect.name !== 'sqlite') return;
      // (SQLite: tables that need a migration take the write lock, so the held one refuses them at once.)
      const old = dialect.target();
      await old.sql(dialect.old(SHAPES[2]!));
      release = await old.lock();
      try {
        await expect(old.open({ busyTimeoutMs: 0 })).rejects.toMatchObject({ code: 'ERR_STORE_LOCKED' });
      } finally {
        await release();
      }
      await (await old.open()).close();
      expect(await meta(old)).toEqual({ migration: '5', schema: '1' });
    });

    it('two stores opening old tables together upgrade them once', async () => {
      const t = dialect.target();
      await t.sql(dialect.old(SHAPES[0]!));
      await t.sql(rows(SHAPES[0]!, dialect.countsShard));
      const [a, b] = await Promise.all([t.open(), t.open()]);
      await a.close();
      await b.close();
      expect(await meta(t)).toEqual({ migration: '5', schema: '1' });
      expect(await t.shape()).toEqual(freshShape);
      expect((await t.sql(`SELECT count(*) AS n FROM {t}relent_counts WHERE destination = 'd' AND state = 'pending'`))[0]!.n).toBe(
        dialect.name === 'sqlite' ? 1 : '1',
      );
    });

    it('tables of another compatibility version are refused and left as they are; a newer migration row is opened as it is', async () => {
      const other = dialect.target();
      await other.sql(dialect.old(SHAPES[0]!));
      await other.sql(`UPDATE {t}relent_meta SET v = '2' WHERE k = 'schema'`);
      await expect(other.open()).rejects.toMatchObject({ code: 'ERR_STORE', message: expect.stringMatching(/schema version 2, this relent knows 1$/) });
      expect(await meta(other)).toEqual({ schema: '2' });
      const newer = dialect.target();
      await (await newer.open()).close();
      await newer.sql(`UPDATE {t}relent_meta SET v = '99' WHERE k = 'migration'`);
      const s = await newer.open();
      await s.enqueue([{ destination: 'd', key: 'a', payload: '{}' }], NOW);
      await s.close();
      expect(await meta(newer)).toEqual({ migration: '99', schema: '1' });
    });

    it('a migration that fails changes nothing: the upgrade is one transaction', async () => {
      const t = dialect.target();
      await t.sql(dialect.old(SHAPES[0]!));
      // Something in the way of migration 4 (after 2 and 3 changed the tables): a view where the rate table goes.
      await t.sql('CREATE VIEW {t}relent_rate AS SELECT 1 AS x');
      await expect(t.open()).rejects.toMatchObject({ code: 'ERR_STORE' });
      expect(await meta(t)).toEqual({ schema: '1' });
      const after = (await t.shape()) as { tables: string[]; columns: Record<string, string[]> };
      expect(after.tables).not.toContain('relent_destinations');
      expect(after.columns.relent_batches!.filter((c) => /^(op_throttled|enqueued_at) /.test(c))).toEqual([]);
    });
  });
}
