// The SQLite store in a process (or worker thread) of its own — the compiled package, as
// `relent deliver` and the store URL open a file database: its work does not hold up the
// caller's event loop, its errors keep their codes, it keeps the caller alive only while a
// call waits, and its process ends with its caller, however the caller ends.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/delivery/store.js';
import type * as StoreModule from '../../src/delivery/store.js';
import type { DeliveryStore } from '../../src/delivery/types.js';
import { DIST_SQLITE, distSqlite } from './support.js';

const dir = mkdtempSync(join(tmpdir(), 'relent-sqlite-runner-'));
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

/** Whether a process other than this one names `file` in its arguments (the store's runner does). */
function runnerAlive(file: string): boolean {
  const r = spawnSync('pgrep', ['-f', file], { encoding: 'utf8' });
  return r.stdout.split('\n').some((pid) => pid.trim() !== '' && Number(pid) !== process.pid);
}

/** `inline` does its work on the caller's thread (no timer turns while it writes 20,000 items), `remote` off it; both are closed. */
async function onCallerAndOff(inline: DeliveryStore, remote: DeliveryStore, tag: string): Promise<void> {
  try {
    expect(await turnsDuring(() => inline.enqueue(many(20_000, tag), 1))).toBe(0);
    expect(await turnsDuring(() => remote.enqueue(many(20_000, tag), 1))).toBeGreaterThan(0);
  } finally {
    await inline.close();
    await remote.close();
  }
}

async function gone(file: string, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (!runnerAlive(file)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return !runnerAlive(file);
}

describe('SQLite store in a process or thread of its own', () => {
  it("does a store call's work off the caller's thread: the caller's event loop turns while 20,000 items are written (in a process, the default, and in a thread; never with runIn: caller)", async () => {
    const { openSqliteStore } = await distSqlite();
    const stores = {
      process: await openSqliteStore({ file: file() }),
      thread: await openSqliteStore({ file: file(), runIn: 'thread' }),
      caller: await openSqliteStore({ file: file(), runIn: 'caller' }),
    };
    try {
      const items = many(20_000, 'k');
      expect(await turnsDuring(() => stores.caller.enqueue(items, 1_000))).toBe(0);
      expect(await turnsDuring(() => stores.process.enqueue(items, 1_000))).toBeGreaterThan(0);
      expect(await turnsDuring(() => stores.thread.enqueue(items, 1_000))).toBeGreaterThan(0);
      // All three stored the same.
      const [a, b, c] = [await stores.caller.stats(2_000), await stores.process.stats(2_000), await stores.thread.stats(2_000)];
      expect(a[0]!.pendingItems).toBe(20_000);
      expect(b).toEqual(a);
      expect(c).toEqual(a);
    } finally {
      for (const s of Object.values(stores)) await s.close();
    }
  });

  it('errors come back with their codes and fields; a closed store refuses calls', async () => {
    const { openSqliteStore } = await distSqlite();
    await expect(openSqliteStore({ file: join(dir, 'missing-dir', 'x.db') })).rejects.toMatchObject({ code: 'ERR_STORE_UNAVAILABLE' });
    await expect(openSqliteStore({ file: file(), tablePrefix: 'bad-prefix' })).rejects.toMatchObject({ code: 'ERR_INVALID_CONFIG', field: 'tablePrefix' });
    await expect(openSqliteStore({ file: file(), runIn: 'elsewhere' as 'process' })).rejects.toMatchObject({ code: 'ERR_INVALID_CONFIG', field: 'runIn' });
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
      const other = await openSqliteStore({ file: f, runIn: 'caller' });
      expect((await other.stats(2))[0]!.pendingItems).toBe(1);
      await other.close();
    } finally {
      await s.close();
    }
  });

  it('keeps the caller alive while a call waits for its answer, and not once the store is idle (never closed); the runner ends with its caller', async () => {
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
    expect(await gone(f, 10_000)).toBe(true);
  });

  it('the runner process ends when its caller is killed (kill -9), and what was committed is there', async () => {
    const f = file();
    const script = `
      const { openSqliteStore } = await import(${JSON.stringify(DIST_SQLITE)});
      const s = await openSqliteStore({ file: ${JSON.stringify(f)} });
      await s.enqueue([{ destination: 'd', key: 'k', payload: '1' }], 1);
      console.log('stored');
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d: Buffer) => {
        if (d.toString().includes('stored')) resolve();
      });
      child.on('exit', (code) => reject(new Error(`exited early (${code})`)));
    });
    expect(runnerAlive(f)).toBe(true);
    child.kill('SIGKILL');
    expect(await gone(f, 10_000)).toBe(true);
    const { openSqliteStore } = await distSqlite();
    const s = await openSqliteStore({ file: f, runIn: 'caller' });
    expect((await s.stats(2))[0]!.pendingItems).toBe(1);
    await s.close();
  });

  it("the store URL: runIn=caller keeps the store on the caller's thread; anything but process, thread or caller is refused", async () => {
    await expect(openStore(`sqlite:${file()}?runIn=maybe`)).rejects.toMatchObject({ code: 'ERR_INVALID_CONFIG', field: 'store.runIn' });
    const { openStore: openCompiled } = (await import(DIST_SQLITE.replace(/sqlite-store\.js$/, 'store.js'))) as typeof StoreModule;
    await onCallerAndOff(await openCompiled(`sqlite:${file()}?runIn=caller`), await openCompiled(`sqlite:${file()}?runIn=thread`), 'u');
  });

  it("sqliteRunIn: where the store runs when its URL does not say (relent queue and the exchange's notices: caller); the URL wins", async () => {
    const { openStore: openCompiled } = (await import(DIST_SQLITE.replace(/sqlite-store\.js$/, 'store.js'))) as typeof StoreModule;
    await onCallerAndOff(
      await openCompiled(`sqlite:${file()}`, { sqliteRunIn: 'caller' }),
      await openCompiled(`sqlite:${file()}?runIn=thread`, { sqliteRunIn: 'caller' }),
      'v',
    );
  });
});
