// The commands, as a user runs them (bin/relent in a child process, against dist/):
// enqueue, deliver, queue ls|show|requeue|drop-stats|stats, and what they say when the
// config is malformed, the database unreachable, the disk full or the file locked —
// always a clear line on stderr, a non-zero exit, and nothing already enqueued lost.
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { openSqliteStore } from '../../src/delivery/sqlite-store.js';
import { openStore } from '../../src/delivery/store.js';
import { DeliveryError } from '../../src/delivery/errors.js';
import { listen, waitFor } from '../delivery/support.js';

const BIN = fileURLToPath(new URL('../../bin/relent', import.meta.url));
const HAS_DIST = existsSync(fileURLToPath(new URL('../../dist/cli/deliver.js', import.meta.url)));
const dir = mkdtempSync(join(tmpdir(), 'relent-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Out {
  code: number | null;
  stdout: string;
  stderr: string;
}

function relent(args: string[], input?: string): Promise<Out> {
  if (!HAS_DIST) throw new Error('dist/ is missing: run `npm run build` first (CI builds before testing)');
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], { stdio: ['pipe', 'pipe', 'pipe'], cwd: dir });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input ?? '');
  });
}

let n = 0;
const file = (name: string, text: string): string => {
  const p = join(dir, `${n++}-${name}`);
  writeFileSync(p, text);
  return p;
};
const config = (dest: Record<string, unknown>, worker: Record<string, unknown> = {}): string =>
  file('config.json', JSON.stringify({ worker, destinations: { sink: dest } }));
const db = (): string => `sqlite:${join(dir, `${n++}.db`)}`;

async function pendingItems(store: string): Promise<number> {
  const s = await openStore(store);
  try {
    return (await s.stats(Date.now())).reduce(
      (a, x) => a + x.pendingItems + x.readyItems + x.deferredItems + x.inflightItems + x.deliveredItems + x.droppedItems,
      0,
    );
  } finally {
    await s.close();
  }
}

describe('relent enqueue / deliver / queue', () => {
  it('enqueues (dedupes by key), delivers until idle, and shows, counts and requeues what was dropped', async () => {
    let fail = true;
    const got: string[] = [];
    const server = await listen((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        got.push(body);
        const bad = fail && body.includes('"bad"');
        res.writeHead(bad ? 400 : 200).end();
      });
    });
    try {
      const store = db();
      const cfg = config({ url: `${server.url}/in`, policy: 'adobe-best-effort', batch: { maxItems: 2, maxAgeMs: 0 } });
      expect(await relent(['enqueue', 'sink', '--store', store, '--config', cfg, '--data', '{"n":1}', '--key', 'a'])).toMatchObject({
        code: 0,
        stdout: 'enqueued 1 item for sink\n',
      });
      expect((await relent(['enqueue', 'sink', '--store', store, '--data', '{"n":1}', '--key', 'a'])).stdout).toBe(
        'enqueued 0 items for sink (1 already queued)\n',
      );
      const lines = '{"key":"b","payload":{"n":2}}\n{"key":"c","payload":"bad"}\n';
      expect(await relent(['enqueue', 'sink', '--store', store, '--file', '-', '--json'], lines)).toMatchObject({
        code: 0,
        stdout: '{"destination":"sink","stored":2,"duplicates":0}\n',
      });
      const run = await relent(['deliver', '--store', store, '--config', cfg, '--exit-when-idle', '--progress']);
      expect(run.code).toBe(0);
      expect(run.stderr).toContain('\r\x1b[2Kqueued');
      expect(run.stderr).toMatch(/relent deliver: idle; released 0 claims — queued 0 · in flight 0 · delivered 2 · deferred 0 · dropped 1\n$/);
      const ls = await relent(['queue', 'ls', '--store', store]);
      expect(ls.stdout).toMatch(/^id\s+destination\s+state\s+items.*\n-+ {2}-+/);
      expect(ls.stdout).toMatch(/\n\s*1\s+sink\s+delivered\s+2\s+1\s+1\s+200\s+return/);
      expect(ls.stdout).toMatch(/\n\s*2\s+sink\s+dropped\s+1\s+1\s+1\s+400\s+not_retryable/);
      const stats = await relent(['queue', 'drop-stats', '--store', store, '--json']);
      expect(JSON.parse(stats.stdout)).toEqual({
        dropped: [{ destination: 'sink', reason: 'not_retryable', why: 'status_not_retryable', lastStatus: 400, lastErrorClass: null, batches: 1, items: 1 }],
      });
      const show = await relent(['queue', 'show', '2', '--store', store]);
      expect(show.stdout).toContain('batch 2 → sink: dropped (not_retryable: status_not_retryable)');
      expect(show.stdout).toMatch(/\n\s+1\s+1\s+\S+Z\s+400\s+\d+ms\s+not_retryable/);
      expect(show.stdout).toContain('  c  "bad"');
      fail = false;
      expect((await relent(['queue', 'requeue', '--store', store, '--reason', 'not_retryable'])).stdout).toBe('requeued 1 dropped batch\n');
      expect((await relent(['deliver', '--store', store, '--config', cfg, '--exit-when-idle'])).code).toBe(0);
      const shown = JSON.parse((await relent(['queue', 'show', '2', '--store', store, '--json'])).stdout) as {
        state: string;
        attempts: { round: number; status: number }[];
        itemList: { payload: unknown }[];
      };
      expect(shown.state).toBe('delivered');
      expect(shown.attempts.map((a) => [a.round, a.status])).toEqual([
        [1, 400],
        [2, 200],
      ]);
      expect(shown.itemList[0]!.payload).toBe('bad');
      expect((await relent(['queue', 'stats', '--store', store])).stdout).toMatch(/sink\s+0\s+0\s+0\s+0\s+3\s+0/);
    } finally {
      await server.close();
    }
  }, 30_000);

  it('queue pause DEST: a worker in another process delivers the other destination and nothing of DEST; resume: DEST goes out', async () => {
    const got: string[] = [];
    const server = await listen((req, res) => {
      got.push(req.url ?? '');
      req.resume();
      req.on('end', () => res.writeHead(200).end());
    });
    try {
      const store = db();
      const dest = { batch: { maxItems: 1, maxAgeMs: 0 } };
      const cfg = file('config.json', JSON.stringify({ destinations: { a: { url: `${server.url}/a`, ...dest }, b: { url: `${server.url}/b`, ...dest } } }));
      for (const d of ['a', 'b'])
        await relent(
          ['enqueue', d, '--store', store, '--file', '-'],
          Array.from({ length: 3 }, (_, i) => JSON.stringify({ key: `k${i}`, payload: i })).join('\n'),
        );
      expect(await relent(['queue', 'pause', 'a', '--store', store])).toMatchObject({
        code: 0,
        stdout: 'paused a: no worker claims its batches until `relent queue resume a`\n',
      });
      expect((await relent(['queue', 'pause', 'a', '--store', store])).stdout).toBe('a was paused already\n');
      expect((await relent(['queue', 'stats', '--store', store])).stdout).toMatch(/a \(paused\)\s+3\s+0\s+0\s+0\s+0\s+0\s+\d+s ago/);
      // --exit-when-idle does not wait for a paused destination's items
      expect((await relent(['deliver', '--store', store, '--config', cfg, '--exit-when-idle', '--poll', '50ms'])).code).toBe(0);
      expect(got.sort()).toEqual(['/b', '/b', '/b']);
      const stats = JSON.parse((await relent(['queue', 'stats', '--store', store, '--json'])).stdout) as {
        destinations: { destination: string; paused: boolean; deliveredItems: number }[];
      };
      expect(stats.destinations.map((d) => [d.destination, d.paused, d.deliveredItems])).toEqual([
        ['a', true, 0],
        ['b', false, 3],
      ]);
      expect(await relent(['queue', 'resume', 'a', '--store', store, '--json'])).toMatchObject({
        code: 0,
        stdout: '{"destination":"a","paused":false,"changed":true}\n',
      });
      expect((await relent(['deliver', '--store', store, '--config', cfg, '--exit-when-idle', '--poll', '50ms'])).code).toBe(0);
      expect(got.filter((u) => u === '/a')).toHaveLength(3);
      expect(await relent(['queue', 'pause', '--store', store])).toMatchObject({ code: 2, stderr: expect.stringContaining('expected one DEST') });
      expect(await relent(['queue', 'pause', 'bad name', '--store', store])).toMatchObject({ code: 2, stderr: expect.stringContaining('destination') });
    } finally {
      await server.close();
    }
  }, 30_000);

  it('SIGTERM stops gracefully: claims of requests still in flight are given back, exit 0', async () => {
    const server = await listen(() => {
      /* never answers */
    });
    try {
      const store = db();
      const cfg = config(
        { url: `${server.url}/in`, batch: { maxItems: 1, maxAgeMs: 0 }, concurrency: { initial: 4, adaptive: false } },
        { stopTimeoutMs: 200 },
      );
      await relent(
        ['enqueue', 'sink', '--store', store, '--file', '-'],
        Array.from({ length: 6 }, (_, i) => JSON.stringify({ key: `k${i}`, payload: i })).join('\n'),
      );
      const child = spawn(process.execPath, [BIN, 'deliver', '--store', store, '--config', cfg, '--no-progress'], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d) => (stderr += d));
      await waitFor(
        async () => {
          const s = await openStore(store);
          try {
            return (await s.stats(Date.now()))[0]?.inflightBatches === 4;
          } finally {
            await s.close();
          }
        },
        10_000,
        'four requests in flight',
      );
      const code = new Promise<number | null>((r) => child.on('close', r));
      child.kill('SIGTERM');
      expect(await code).toBe(0);
      expect(stderr).toMatch(/relent deliver: stopped by SIGTERM; released 4 claims/);
      const s = await openStore(store);
      const st = (await s.stats(Date.now()))[0]!;
      await s.close();
      expect([st.inflightBatches, st.readyBatches + st.pendingItems, st.deliveredBatches]).toEqual([0, 6, 0]);
    } finally {
      await server.close();
    }
  }, 30_000);
});

describe('optional dependencies', () => {
  it('importing relent/delivery loads neither better-sqlite3 nor pg; opening a store loads only its driver', () => {
    const script = `
      const { createRequire } = await import('node:module');
      const req = createRequire(import.meta.url);
      const loaded = (n) => Object.keys(req.cache).some((k) => k.includes('/node_modules/' + n + '/'));
      const d = await import(${JSON.stringify(fileURLToPath(new URL('../../dist/delivery/index.js', import.meta.url)))});
      const before = [loaded('better-sqlite3'), loaded('pg')];
      const s = await d.openStore('sqlite::memory:');
      await s.close();
      console.log(JSON.stringify({ before, after: [loaded('better-sqlite3'), loaded('pg')] }));`;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual({ before: [false, false], after: [true, false] });
  });
});

describe('malformed config: a clear error naming the field, exit 2, nothing enqueued lost', () => {
  const cases: [string, string, RegExp][] = [
    ['invalid JSON', '{"destinations": {', /invalid JSON at line 1, column \d+/],
    ['missing destinations', '{}', /Missing field `destinations`/],
    ['missing url', JSON.stringify({ destinations: { sink: { policy: 'adobe-best-effort' } } }), /`destinations\.sink\.url` to be an absolute http/],
    [
      'bad maxItems',
      JSON.stringify({ destinations: { sink: { url: 'http://x/', batch: { maxItems: 0 } } } }),
      /`destinations\.sink\.batch\.maxItems` to be an integer in \[1, 100000\], got 0/,
    ],
    ['unknown field', JSON.stringify({ destinations: { sink: { url: 'http://x/', retries: 3 } } }), /Unknown field `destinations\.sink\.retries`/],
    [
      'bad policy',
      JSON.stringify({ destinations: { sink: { url: 'http://x/', policy: { backoff: { kind: 'sometimes' } } } } }),
      /destinations\.sink\.policy: Expected `backoff\.kind` to be one of/,
    ],
    [
      'unknown preset',
      JSON.stringify({ destinations: { sink: { url: 'http://x/', policy: 'adobe-maybe' } } }),
      /destinations\.sink\.policy: Unknown preset "adobe-maybe"/,
    ],
    ['bad worker setting', JSON.stringify({ worker: { leaseMs: -1 }, destinations: { sink: { url: 'http://x/' } } }), /`worker\.leaseMs` to be an integer/],
  ];
  it.each(cases)('%s', async (_name, text, message) => {
    const store = db();
    await relent(['enqueue', 'sink', '--store', store, '--data', '1', '--key', 'kept']);
    const r = await relent(['deliver', '--store', store, '--config', file('bad.json', text)]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr.split('\n').filter(Boolean)).toHaveLength(1);
    expect(await pendingItems(store)).toBe(1);
  });
});

describe('store failures: a clear error, non-zero exit, nothing already enqueued lost', () => {
  it('an unreachable PostgreSQL: exit 1, says it cannot reach it (and where), quickly', async () => {
    const cfg = config({ url: 'http://127.0.0.1:9/' });
    const started = Date.now();
    const r = await relent(['deliver', '--store', 'postgres://postgres:secret@127.0.0.1:1/test', '--config', cfg]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^relent deliver: postgres:\/\/postgres@127\.0\.0\.1:1\/test \(schema public\): cannot reach PostgreSQL \(ECONNREFUSED/);
    expect(r.stderr).not.toContain('secret');
    expect(Date.now() - started).toBeLessThan(8_000);
    const e = await relent(['enqueue', 'sink', '--store', 'postgres://postgres@127.0.0.1:1/test', '--data', '1']);
    expect(e.code).toBe(1);
    expect(e.stderr).toContain('cannot reach PostgreSQL');
  }, 20_000);

  it('a SQLite file in a directory that does not exist: exit 1, cannot open', async () => {
    const r = await relent(['enqueue', 'sink', '--data', '1', '--store', `sqlite:${join(dir, 'no', 'such', 'dir', 'q.db')}`]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/cannot open the database \(Cannot open database because the directory does not exist\)/);
  });

  it('a locked SQLite file: enqueue fails after the busy timeout with a clear error; nothing stored earlier is lost', async () => {
    const path = join(dir, `${n++}-locked.db`);
    const store = `sqlite:${path}?busyTimeoutMs=200`;
    expect((await relent(['enqueue', 'sink', '--store', store, '--data', '1', '--key', 'before'])).code).toBe(0);
    const other = new Database(path);
    other.prepare('BEGIN IMMEDIATE').run(); // another process holds the write lock
    other.prepare(`INSERT INTO relent_meta (k, v) VALUES ('lock', 'held')`).run();
    try {
      const r = await relent(['enqueue', 'sink', '--store', store, '--data', '2', '--key', 'during']);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/the database file is locked by another process \(SQLITE_BUSY\).*nothing stored earlier is lost/);
    } finally {
      other.prepare('ROLLBACK').run();
      other.close();
    }
    expect((await relent(['enqueue', 'sink', '--store', store, '--data', '3', '--key', 'after'])).code).toBe(0);
    const s = await openSqliteStore({ file: path });
    const keys = (await s.stats(Date.now()))[0]!.pendingItems;
    await s.close();
    expect(keys).toBe(2);
  });

  it('a worker whose SQLite file is locked for a while reports it and carries on when the lock goes: everything delivered', async () => {
    const server = await listen((req, res) => req.resume().on('end', () => res.writeHead(200).end()));
    const path = join(dir, `${n++}-busy.db`);
    try {
      const store = `sqlite:${path}?busyTimeoutMs=100`;
      const cfg = config({ url: `${server.url}/in`, batch: { maxItems: 1, maxAgeMs: 0 } });
      await relent(
        ['enqueue', 'sink', '--store', store, '--file', '-'],
        Array.from({ length: 20 }, (_, i) => JSON.stringify({ key: `k${i}`, payload: i })).join('\n'),
      );
      const other = new Database(path);
      other.prepare('BEGIN IMMEDIATE').run();
      other.prepare(`INSERT INTO relent_meta (k, v) VALUES ('lock', 'held')`).run();
      const child = spawn(process.execPath, [BIN, 'deliver', '--store', store, '--config', cfg, '--exit-when-idle', '--no-progress'], {
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (d) => (stderr += d));
      const code = new Promise<number | null>((r) => child.on('close', r));
      await waitFor(() => stderr.includes('locked by another process'), 10_000, 'the worker to report the lock');
      other.prepare('ROLLBACK').run();
      other.close();
      const got = await code;
      expect(got, stderr).toBe(0);
      expect(stderr).toMatch(/idle; released 0 claims — queued 0 · in flight 0 · delivered 20 · deferred 0 · dropped 0/);
    } finally {
      await server.close();
    }
  }, 30_000);

  it('a database size cap (SQLITE_FULL through max_page_count): enqueue fails with a clear error, earlier items intact and deliverable', async () => {
    const path = join(dir, `${n++}-capped.db`);
    const capped = await openSqliteStore({ file: path, maxSizeBytes: 200 * 1024 });
    let stored = 0;
    let error: unknown = null;
    for (let i = 0; i < 100 && error === null; i++) {
      try {
        await capped.enqueue(
          Array.from({ length: 20 }, (_, j) => ({ destination: 'sink', key: `k${i}-${j}`, payload: JSON.stringify('x'.repeat(400)) })),
          Date.now(),
        );
        stored += 20;
      } catch (e) {
        error = e;
      }
    }
    expect(DeliveryError.is(error) && error.code).toBe('ERR_STORE_FULL');
    expect((error as Error).message).toMatch(
      /the disk or the database size limit is full \(SQLITE_FULL\); enqueueing 20 items was rolled back, nothing stored earlier is lost/,
    );
    expect(stored).toBeGreaterThan(0);
    expect((await capped.stats(Date.now()))[0]!.pendingItems).toBe(stored);
    await capped.close();
    // The CLI says the same, exit 1.
    const r = await relent(['enqueue', 'sink', '--store', `sqlite:${path}?maxSizeBytes=${200 * 1024}`, '--data', JSON.stringify('y'.repeat(100_000))]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('(SQLITE_FULL)');
    // Without the cap, every item stored before is still there, whole.
    const s = await openSqliteStore({ file: path });
    expect((await s.stats(Date.now()))[0]!.pendingItems).toBe(stored);
    await s.close();
  });

  it('a real full disk (a 512 KiB tmpfs): enqueue fails with ERR_STORE_FULL; what was stored before is intact', async (ctx) => {
    const tmpfs = join(dir, `${n++}-tmpfs`);
    mkdirSync(tmpfs);
    if (spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=512k', 'tmpfs', tmpfs]).status !== 0) {
      process.stderr.write(
        '\n[relent delivery tests] cannot mount a tmpfs here (not root?): skipping the real full-disk test; the size-cap test covers SQLITE_FULL\n',
      );
      ctx.skip();
      return;
    }
    const path = join(tmpfs, 'q.db');
    try {
      const s = await openSqliteStore({ file: path });
      let stored = 0;
      let error: unknown = null;
      for (let i = 0; i < 1000 && error === null; i++) {
        try {
          await s.enqueue(
            Array.from({ length: 50 }, (_, j) => ({ destination: 'sink', key: `k${i}-${j}`, payload: JSON.stringify('x'.repeat(500)) })),
            Date.now(),
          );
          stored += 50;
        } catch (e) {
          error = e;
        }
      }
      expect(DeliveryError.is(error) && error.code).toBe('ERR_STORE_FULL');
      const r = await relent(['enqueue', 'sink', '--store', `sqlite:${path}`, '--data', JSON.stringify('z'.repeat(50_000))]);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/full \(SQLITE_FULL\)/);
      expect((await s.stats(Date.now()))[0]!.pendingItems).toBe(stored);
      await s.close();
      const again = await openSqliteStore({ file: path });
      expect((await again.stats(Date.now()))[0]!.pendingItems).toBe(stored);
      await again.close();
    } finally {
      spawnSync('umount', [tmpfs]);
    }
  });
});
