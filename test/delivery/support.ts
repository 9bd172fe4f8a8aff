// Shared helpers of the delivery tests: the two stores behind one factory, PostgreSQL
// availability (required in CI, skipped with a message elsewhere), loopback receivers.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { openSqliteStore } from '../../src/delivery/sqlite-store.js';
import type * as SqliteStoreModule from '../../src/delivery/sqlite-store.js';
import { openPostgresStore } from '../../src/delivery/postgres-store.js';
import type { DeliveryStore } from '../../src/delivery/types.js';

export const PG_URL = process.env.RELENT_TEST_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
export const IN_CI = process.env.CI === 'true';

let pgProbe: Promise<string | null> | null = null;

/** null when PostgreSQL answers; otherwise why not. */
export function pgUnavailable(): Promise<string | null> {
  pgProbe ??= (async () => {
    const c = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 2_000 });
    try {
      await c.connect();
      await c.query('SELECT 1');
      return null;
    } catch (e) {
      return `${(e as { code?: string }).code ?? ''} ${e instanceof Error ? e.message : String(e)}`.trim();
    } finally {
      await c.end().catch(() => {});
    }
  })();
  return pgProbe;
}

/**
 * Whether the PostgreSQL tests run: in CI they always do (and fail if the server is
 * missing); elsewhere they are skipped with a message when it does not answer.
 */
export async function pgEnabled(): Promise<boolean> {
  const why = await pgUnavailable();
  if (why === null) return true;
  if (IN_CI) return true; // let the tests fail loudly
  process.stderr.write(`\n[relent delivery tests] PostgreSQL at ${PG_URL} is unreachable (${why}): skipping the PostgreSQL tests (they run in CI)\n`);
  return false;
}

/** A fresh schema name for one run. */
export function uniqueSchema(tag: string): string {
  return `relent_t_${tag}_${process.pid}_${randomBytes(3).toString('hex')}`;
}

export async function dropSchema(schema: string): Promise<void> {
  const c = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 2_000 });
  await c.connect();
  try {
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await c.end();
  }
}

export interface StoreFactory {
  readonly name: 'sqlite' | 'sqlite-process' | 'postgres';
  /** A new, empty store. */
  open(): Promise<DeliveryStore>;
  /** Removes everything the factory created. */
  cleanup(): Promise<void>;
}

export function sqliteFactory(): StoreFactory {
  const dir = mkdtempSync(join(tmpdir(), 'relent-delivery-'));
  let n = 0;
  const opened: DeliveryStore[] = [];
  return {
    name: 'sqlite',
    async open() {
      const s = await openSqliteStore({ file: join(dir, `store-${n++}.db`) });
      opened.push(s);
      return s;
    },
    async cleanup() {
      for (const s of opened) await s.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The compiled store module: only compiled JavaScript can start the SQLite store's own process or thread. */
export const DIST_SQLITE = fileURLToPath(new URL('../../dist/delivery/sqlite-store.js', import.meta.url));

/** The compiled openSqliteStore (`npm run build` first; CI builds before testing). */
export async function distSqlite(): Promise<typeof SqliteStoreModule> {
  if (!existsSync(DIST_SQLITE)) throw new Error('dist/ is missing: run `npm run build` first (CI builds before testing)');
  return (await import(DIST_SQLITE)) as typeof SqliteStoreModule;
}

/** The SQLite store as the compiled package runs a file database: in a process of its own. */
export function sqliteThreadFactory(): StoreFactory {
  const dir = mkdtempSync(join(tmpdir(), 'relent-delivery-runner-'));
  let n = 0;
  const opened: DeliveryStore[] = [];
  return {
    name: 'sqlite-process',
    async open() {
      const s = await (await distSqlite()).openSqliteStore({ file: join(dir, `store-${n++}.db`) });
      opened.push(s);
      return s;
    },
    async cleanup() {
      for (const s of opened) await s.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export function postgresFactory(): StoreFactory {
  const schemas: string[] = [];
  const opened: DeliveryStore[] = [];
  return {
    name: 'postgres',
    async open() {
      const schema = uniqueSchema('c');
      schemas.push(schema);
      const s = await openPostgresStore({ connectionString: PG_URL, schema });
      opened.push(s);
      return s;
    },
    async cleanup() {
      for (const s of opened) await s.close();
      for (const schema of schemas) await dropSchema(schema);
    },
  };
}

export interface Receiver {
  readonly url: string;
  readonly server: Server;
  close(): Promise<void>;
}

export async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<Receiver> {
  const server = createServer({ keepAliveTimeout: 60_000 }, handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** Waits (polling on the real clock) until `cond` holds; fails after `ms`. */
export async function waitFor(cond: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
