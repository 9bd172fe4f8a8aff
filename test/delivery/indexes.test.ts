// Large queues: the statements a worker runs all the time are served by indexes that fit
// them, so their cost does not grow with the number of rows. The statements are the
// stores' own (captured as the store sends them), explained on a queue of 60,000 batches
// — PostgreSQL with its custom and its generic (prepared) plan, SQLite with EXPLAIN QUERY PLAN.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { openPostgresStore } from '../../src/delivery/postgres-store.js';
import { openSqliteStore } from '../../src/delivery/sqlite-store.js';
import type { DeliveryStore } from '../../src/delivery/types.js';
import { PG_URL, dropSchema, pgEnabled, uniqueSchema } from './support.js';

const withPg = await pgEnabled();
const ROWS = 60_000;
const LIMITS = { maxItems: 1, maxBytes: 1_000_000, maxAgeMs: 0 };
const dir = mkdtempSync(join(tmpdir(), 'relent-indexes-'));
const schemas: string[] = [];
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  for (const s of schemas) await dropSchema(s);
});

/** What a worker does all the time, against the store: seal, claim (alone and under shared limits), purge. */
async function workload(s: DeliveryStore, now: number): Promise<void> {
  await s.formBatches('d1', LIMITS, now, 16);
  await s.claim('d1', 16, now, 15_000, 'w');
  // PostgreSQL: seal and lease in one write (one statement for batches of one item, a transaction otherwise).
  await s.formAndClaim?.('d3', LIMITS, now, 16, 15_000, 'w');
  await s.formAndClaim?.('d4', { ...LIMITS, maxItems: 3 }, now, 4, 15_000, 'w');
  await s.claimLimited('d2', 4, { rate: { requests: 100, perMs: 1_000 }, concurrency: 8 }, now, 15_000, 'w');
  await s.stats(now);
  await s.purge('delivered', now - 86_400_000, 500);
  await s.purge('dropped', now - 86_400_000, 500);
}

/** Every node of a PostgreSQL JSON plan. */
function nodes(plan: Record<string, unknown>): Record<string, unknown>[] {
  const kids = (plan.Plans as Record<string, unknown>[] | undefined) ?? [];
  return [plan, ...kids.flatMap(nodes)];
}

describe.skipIf(!withPg)('PostgreSQL: the hot statements use their indexes on a large queue', () => {
  it('claim, seal, seal and lease, shared-limit claim, purge and the stats of deferred batches: index scans of relent_batches_due, _items_pending, _batches_leased, _delivered_at, _dropped_at, _deferred; no sequential scan of a queue table', async () => {
    const schema = uniqueSchema('idx');
    schemas.push(schema);
    const s = await openPostgresStore({ connectionString: PG_URL, schema });
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    const now = Date.now();
    try {
      await c.query(`SET search_path = "${schema}"`);
      // Ten destinations; a third each ready, deferred, finished (delivered or dropped).
      await c.query(
        `INSERT INTO relent_batches (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at, finished_at)
        SELECT 'd' || (g % 10), 'rb-' || g, CASE g % 3 WHEN 2 THEN (CASE WHEN g % 2 = 0 THEN 'delivered' ELSE 'dropped' END) ELSE 'queued' END,
          1, 7, $1::bigint, $1::bigint + (g % 3) * 600000, $1::bigint + (g % 3) * 600000, $1::bigint - g, CASE WHEN g % 3 = 2 THEN $1::bigint - g ELSE NULL END
        FROM generate_series(1, $2::int) g`,
        [now, ROWS],
      );
      await c.query(
        `INSERT INTO relent_items (destination, key, payload, bytes, enqueued_at, batch_id) SELECT destination, 'k' || id, '{}', 2, enqueued_at, id FROM relent_batches`,
      );
      await c.query(
        `INSERT INTO relent_items (destination, key, payload, bytes, enqueued_at) SELECT 'd' || (g % 10), 'p' || g, '{}', 2, $1::bigint FROM generate_series(1, $2::int) g`,
        [now, ROWS / 2],
      );
      await c.query('ANALYZE');
      // The statements as the store sends them.
      const seen: { text: string; values: unknown[] }[] = [];
      const query = pg.Client.prototype.query;
      pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
        const q = args[0] as string | { text: string; values?: unknown[] };
        if (typeof q === 'object' && q !== null && typeof q.text === 'string') seen.push({ text: q.text, values: q.values ?? [] });
        return (query as (...a: unknown[]) => unknown).apply(this, args);
      } as typeof query;
      try {
        await workload(s, now);
      } finally {
        pg.Client.prototype.query = query;
      }
      const find = (re: RegExp) => {
        const q = seen.find((x) => re.test(x.text));
        if (!q) throw new Error(`no statement matching ${re}`);
        return q;
      };
      const explain = async (q: { text: string; values: unknown[] }, generic: boolean): Promise<Record<string, unknown>[]> => {
        await c.query('BEGIN');
        try {
          await c.query(`SET LOCAL plan_cache_mode = ${generic ? 'force_generic_plan' : 'force_custom_plan'}`);
          await c.query(`PREPARE relent_explained AS ${q.text}`);
          const args = q.values.map((_, i) => `$${i + 1}`);
          const r = await c.query(
            `EXPLAIN (FORMAT JSON) EXECUTE relent_explained${args.length ? `(${q.values.map((v) => (v === null ? 'NULL' : pg.Client.prototype.escapeLiteral.call(c, Array.isArray(v) ? `{${v.join(',')}}` : String(v)))).join(', ')})` : ''}`,
          );
          return nodes((r.rows[0]['QUERY PLAN'] as { Plan: Record<string, unknown> }[])[0]!.Plan);
        } finally {
          await c.query('ROLLBACK');
          await c.query('DEALLOCATE ALL'); // a prepared statement outlives its transaction
        }
      };
      const cases: [string, RegExp, string][] = [
        ['claim', /WITH c AS \(\s*SELECT id FROM .*relent_batches/s, 'relent_batches_due'],
        ['seal (pending items)', /FROM \S*relent_items"?\s+WHERE destination = \$1 AND batch_id IS NULL ORDER BY id/, 'relent_items_pending'],
        ['seal and lease, one item per batch', /WITH p AS \(\s*SELECT id, key, bytes, enqueued_at, payload FROM \S*relent_items/, 'relent_items_pending'],
        ['seal and lease (pending items)', /SELECT id, key, bytes, enqueued_at AS "enqueuedAt", payload FROM \S*relent_items/, 'relent_items_pending'],
        [
          'live leases (shared concurrency)',
          /count\(\*\) FROM \S*relent_batches"? WHERE destination = \$1 AND state = 'queued' AND lease_owner IS NOT NULL/,
          'relent_batches_leased',
        ],
        ['purge delivered', /WHERE state = 'delivered' AND finished_at < \$1/, 'relent_batches_delivered_at'],
        ['purge dropped', /WHERE state = 'dropped' AND finished_at < \$1/, 'relent_batches_dropped_at'],
        ['stats: deferred batches', /destination = d AND lease_owner IS NULL AND due_at > \$1/, 'relent_batches_deferred'],
      ];
      for (const [what, re, index] of cases) {
        for (const generic of [false, true]) {
          const plan = await explain(find(re), generic);
          const indexes = plan.map((n) => n['Index Name']).filter(Boolean);
          const seq = plan.filter((n) => n['Node Type'] === 'Seq Scan' && /^relent_(batches|items)$/.test(String(n['Relation Name'])));
          expect({ what, generic, uses: indexes.includes(index), seq: seq.length }).toEqual({ what, generic, uses: true, seq: 0 });
        }
      }
    } finally {
      await c.end();
      await s.close();
    }
  }, 120_000);
});

describe('SQLite: the hot statements use their indexes', () => {
  it('claim, seal, seal and lease, live leases and purge search their indexes; none scans a queue table', async () => {
    const file = join(dir, 'idx.db');
    const s = await openSqliteStore({ file });
    const now = Date.now();
    const db = new Database(file);
    db.prepare(
      `WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?)
      INSERT INTO relent_batches (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at, finished_at)
      SELECT 'd' || (x % 10), 'rb-' || x, CASE x % 3 WHEN 2 THEN 'delivered' ELSE 'queued' END, 1, 7, ?, ? + (x % 3) * 600000, ? + (x % 3) * 600000, ? - x,
        CASE WHEN x % 3 = 2 THEN ? - x END FROM g`,
    ).run(ROWS, now, now, now, now, now);
    db.prepare(
      `INSERT INTO relent_items (destination, key, payload, bytes, enqueued_at, batch_id) SELECT destination, 'k' || id, '{}', 2, enqueued_at, id FROM relent_batches`,
    ).run();
    db.exec('ANALYZE');
    // The statements as the store prepares them (at open, and for purge when it runs).
    const seen: string[] = [];
    const prepare = Database.prototype.prepare;
    Database.prototype.prepare = function (this: Database.Database, sql: string) {
      seen.push(sql);
      return prepare.call(this, sql);
    } as typeof prepare;
    try {
      const s2 = await openSqliteStore({ file });
      await workload(s2, now);
      await s2.close();
    } finally {
      Database.prototype.prepare = prepare;
    }
    const plan = (re: RegExp, params: Record<string, unknown> | unknown[]): string => {
      const sql = seen.find((x) => re.test(x));
      if (!sql) throw new Error(`no statement matching ${re}`);
      const st = db.prepare(`EXPLAIN QUERY PLAN ${sql}`);
      return (Array.isArray(params) ? st.all(...params) : st.all(params)).map((r) => (r as { detail: string }).detail).join(' | ');
    };
    const cases: [string, string, string][] = [
      ['claim', plan(/^UPDATE relent_batches SET lease_token/, { owner: 'w', until: now, d: 'd1', now, limit: 16 }), 'relent_batches_due'],
      ['seal (pending items)', plan(/^SELECT id, key, bytes, enqueued_at AS enqueuedAt FROM relent_items/, ['d1', 16]), 'relent_items_pending'],
      [
        'seal and lease (pending items)',
        plan(/^SELECT id, key, bytes, enqueued_at AS enqueuedAt, payload FROM relent_items/, ['d1', 16]),
        'relent_items_pending',
      ],
      [
        'live leases (shared concurrency)',
        plan(/^SELECT count\(\*\) AS n FROM relent_batches WHERE destination = \? AND state = 'queued' AND lease_owner/, ['d1', now]),
        'relent_batches_leased',
      ],
      ['purge delivered', plan(/^SELECT id, destination, items FROM relent_batches WHERE state = 'delivered'/, [now, 500]), 'relent_batches_delivered_at'],
      ['purge dropped', plan(/^SELECT id, destination, items FROM relent_batches WHERE state = 'dropped'/, [now, 500]), 'relent_batches_dropped_at'],
    ];
    for (const [what, detail, index] of cases) {
      expect({ what, uses: detail.includes(`INDEX ${index}`), scans: /SCAN relent_(batches|items)\b/.test(detail) }, detail).toEqual({
        what,
        uses: true,
        scans: false,
      });
    }
    db.close();
    await s.close();
  }, 120_000);
});
