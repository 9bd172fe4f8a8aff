// The SQLite store on a thread of its own (the compiled package, as `relent deliver` and the
// store URL open a file database): its work does not hold up the caller's event loop, its
// errors keep their codes, and it keeps a process alive only while a call waits.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/delivery/store.js';
import type * as StoreModule from '../../src/delivery/store.js';
import type { DeliveryStore } from '../../src/delivery/types.js';
import { DIST_SQLITE, distSqlite } from './support.js';

const dir = mkdtempSync(join(tmpdir(), 'relent-sqlite-thread-'));
let n = 0;
const file = (): string => join(dir, `t-${n++}.db`);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function many(count: number, tag: string) {
  return Array.from({ length: count }, (_, i) => ({ destination: 'd', key: `${tag}-${i}`, payload: JSON.stringify({ i, pad: 'x'.repeat(200) }) }));
}

/** Timer turns of the caller's event loop while `work` runs. */
async function turnsDuring(work: () => Promise<unknown>): Promise<number> {
  let turns = 0;
  const timer = setInterval(() => turns++, 1);
  try {
    await work();
  } finally {
    clearInterval(timer);
  }
  return turns;
}

describe('SQLite store on its own thread', () => {
  it("does a store call's work off the caller's thread: the caller's event loop turns while 20,000 items are written (none turns with thread: false)", async () => {
    const { openSqliteStore } = await distSqlite();
    const threaded = await openSqliteStore({ file: file() });
    const inline = await openSqliteStore({ file: file(), thread: false });
    try {
      const items = many(20_000, 'k');
      expect(await turnsDuring(() => inline.enqueue(items, 1_000))).toBe(0);
      expect(await turnsDuring(() => threaded.enqueue(items, 1_000))).toBeGreaterThan(0);
      // Both stored the same.
      const [a, b] = [await inline.stats(2_000), await threaded.stats(2_000)];
      expect(a[0]!.pendingItems).toBe(20_000);
      expect(b).toEqual(a);
    } finally {
      await threaded.close();
      await inline.close();
    }
  });

  it('errors come back with their codes and fields; a closed store refuses calls', async () => {
    const { openSqliteStore } = await distSqlite();
    await expect(openSqliteStore({ file: join(dir, 'missing-dir', 'x.db') })).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
    await expect(openSqliteStore({ file: file(), tablePrefix: 'bad-prefix' })).rejects.toMatchObject({ code: 'ERR_INVALID_CONFIG', field: 'tablePrefix' });
    const s: DeliveryStore = await openSqliteStore({ file: file() });
    await expect(s.purge('queued' as 'delivered', 0, 10)).rejects.toMatchObject({ code: 'ERR_INVALID_CONFIG', field: 'state' });
    expect((await s.enqueue(many(2, 'a'), 1)).map((r) => r.duplicate)).toEqual([false, false]);
    await s.close();
    await expect(s.stats(2)).rejects.toMatchObject({ code: 'ERR_STORE_CLOSED' });
    await s.close(); // twice: nothing left to release
  });

  it('calls run in the order they are made, each committed before it resolves', async () => {
    const { openSqliteStore } = await distSqlite();
    const f = file();
    const s = await openSqliteStore({ file: f });
    try {
      // Posted without waiting: the second enqueue sees the first's key as a duplicate.
      const [first, second] = await Promise.all([s.enqueue(many(1, 'same'), 1), s.enqueue(many(1, 'same'), 1)]);
      expect([first[0]!.duplicate, second[0]!.duplicate]).toEqual([false, true]);
      // Committed: another connection (on this thread) sees it once the call resolved.
      const other = await openSqliteStore({ file: f, thread: false });
      expect((await other.stats(2))[0]!.pendingItems).toBe(1);
      await other.close();
    } finally {
      await s.close();
    }
  });

  it('keeps the process alive while a call waits for its answer, and not once the store is idle (never closed)', () => {
    const f = file();
    const script = `
      const { openSqliteStore } = await import(${JSON.stringify(DIST_SQLITE)});
      const s = await openSqliteStore({ file: ${JSON.stringify(f)} });
      s.enqueue([{ destination: 'd', key: 'k', payload: '1' }], 1).then((r) => console.log('stored', r.length));
    `;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 15_000 });
    expect(r.error).toBeUndefined();
    expect(r.stdout.trim()).toBe('stored 1');
    expect(r.status).toBe(0);
  });

  it('the store URL: thread=false keeps the store on the caller\'s thread; anything but true or false is refused', async () => {
    await expect(openStore(`sqlite:${file()}?thread=maybe`)).rejects.toMatchObject({ code: 'ERR_INVALID_CONFIG', field: 'store.thread' });
    const { openStore: openCompiled } = await import(DIST_SQLITE.replace(/sqlite-store\.js$/, 'store.js')) as typeof StoreModule;
    const inline = await openCompiled(`sqlite:${file()}?thread=false`);
    const threaded = await openCompiled(`sqlite:${file()}`);
    try {
      expect(await turnsDuring(() => inline.enqueue(many(20_000, 'u'), 1))).toBe(0);
      expect(await turnsDuring(() => threaded.enqueue(many(20_000, 'u'), 1))).toBeGreaterThan(0);
    } finally {
      await inline.close();
      await threaded.close();
    }
  });
});
