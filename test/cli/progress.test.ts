// Progress of long work: a bar on a terminal, a line every few seconds in a log, nothing
// with --quiet or for work that ends at once (on a test clock); the npm scripts' long
// steps say what they do while they do it; `relent deliver` says when the next deferred
// batch is due.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { createProgress } from '../../src/cli/progress.js';
// @ts-expect-error: a plain .mjs script without declarations
import { runWithProgress } from '../../scripts/run-with-progress.mjs';

const BIN = fileURLToPath(new URL('../../bin/relent', import.meta.url));

function fakeIo(): { io: { out: (t: string) => void; err: (t: string) => void }; err: () => string } {
  let err = '';
  return { io: { out: () => undefined, err: (t) => (err += t) }, err: () => err };
}

describe('createProgress', () => {
  it('in a log (no terminal): nothing for short work, then one line every 5 s with share, counts and time left', () => {
    let t = 0;
    const f = fakeIo();
    const p = createProgress({ name: 'relent simulate', io: f.io, tty: false, now: () => t });
    for (let i = 1; i <= 40; i++) {
      t += 250; // 10 s in all, an update every 250 ms
      p.update(i, 40, `(${i} of 40) cell ${i}`);
    }
    p.clear();
    const lines = f.err().split('\n').filter(Boolean);
    expect(lines).toEqual(['relent simulate: 50% (20 of 40) cell 20; 5 s so far, about 5 s left', 'relent simulate: 100% (40 of 40) cell 40; 10 s so far']);
    expect(f.err()).not.toContain('\r');
  });

  it('work that ends before the first line prints nothing', () => {
    let t = 0;
    const f = fakeIo();
    const p = createProgress({ name: 'relent simulate', io: f.io, tty: false, now: () => t });
    for (let i = 1; i <= 10; i++) {
      t += 100;
      p.update(i, 10, 'x');
    }
    expect(f.err()).toBe('');
  });

  it('on a terminal: nothing for 300 ms, then a bar redrawn in place at most 10 times a second, and cleared', () => {
    let t = 0;
    const f = fakeIo();
    const p = createProgress({ name: 'relent report', io: f.io, tty: true, columns: 60, now: () => t });
    p.update(1, 100, 'early');
    expect(f.err()).toBe('');
    for (let i = 1; i <= 100; i++) {
      t += 10; // 1 s in all: at most ~7 draws after the first 300 ms
      p.update(i, 100, 'reading');
    }
    const draws = f.err().split('\r\x1b[2K').filter(Boolean);
    expect(draws.length).toBeGreaterThanOrEqual(6);
    expect(draws.length).toBeLessThanOrEqual(8);
    expect(draws[0]).toMatch(/^\[#{7}\.{17}\] {2}30% reading, about 1 s left$/);
    for (const d of draws) expect(d.length).toBeLessThanOrEqual(59);
    p.clear();
    expect(f.err().endsWith('\r\x1b[2K')).toBe(true);
  });

  it('--quiet: nothing at all', () => {
    let t = 0;
    const f = fakeIo();
    const p = createProgress({ name: 'relent deliver', io: f.io, quiet: true, tty: true, now: () => t });
    for (let i = 0; i < 100; i++) {
      t += 1000;
      p.update(i, 100, 'x');
      p.status('queued 3');
    }
    p.clear();
    expect(f.err()).toBe('');
  });
});

describe('runWithProgress (the npm scripts: npm ci, the build)', () => {
  const slow = [process.execPath, ['-e', 'setTimeout(() => {}, 450)']] as const;

  it('without a terminal: what it does, a line while it runs, and how long it took', async () => {
    let text = '';
    const code = await runWithProgress(slow[0], [...slow[1]], { what: 'installing dependencies', everyMs: 100, tty: false, write: (t: string) => (text += t) });
    expect(code).toBe(0);
    const lines = text.trim().split('\n');
    expect(lines[0]).toBe('relent: installing dependencies…');
    expect(lines.filter((l) => /^relent: still installing dependencies \(\d+ s so far\)…$/.test(l)).length).toBeGreaterThanOrEqual(2);
    expect(lines.at(-1)).toMatch(/^relent: installing dependencies: done in \d+ s$/);
  });

  it('on a terminal (npm shows its own progress): no repeated lines; a failure says so and passes its status on', async () => {
    let text = '';
    const code = await runWithProgress(process.execPath, ['-e', 'setTimeout(() => process.exit(3), 300)'], {
      what: 'compiling',
      everyMs: 50,
      tty: true,
      write: (t: string) => (text += t),
    });
    expect(code).toBe(3);
    expect(text).toBe('relent: compiling…\nrelent: compiling failed (exit status 3)\n');
  });
});

describe('relent deliver says when the next deferred batch is due', () => {
  const dir = mkdtempSync(join(tmpdir(), 'relent-progress-'));
  let server: Server | null = null;
  afterAll(() => {
    server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a rate-limited batch under adobe-configurable: "deferred 1 (next retry in 29m 5xs)"; --quiet: no progress line', async () => {
    server = createServer((_req, res) => {
      res.statusCode = 429;
      res.end();
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/in`;
    const config = join(dir, 'c.json');
    writeFileSync(config, JSON.stringify({ destinations: { sink: { url, policy: 'adobe-configurable', batch: { maxItems: 1 } } } }));
    const store = `sqlite:${join(dir, 'q.db')}`;
    const run = (args: string[], until: RegExp | null): Promise<{ code: number | null; err: string }> =>
      new Promise((resolve) => {
        const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
        let err = '';
        let sent = false; // one SIGTERM: a second one means "stop now" to relent deliver
        child.stderr.on('data', (d) => {
          err += d;
          if (until && !sent && until.test(err)) {
            sent = true;
            child.kill('SIGTERM');
          }
        });
        if (!until) setTimeout(() => child.kill('SIGTERM'), 2500);
        child.on('close', (code) => resolve({ code, err }));
      });
    expect((await run(['enqueue', 'sink', '--data', '1', '--config', config, '--store', store], null)).code).toBe(0);
    const shown = await run(['deliver', '--config', config, '--store', store, '--progress'], /next retry in/);
    expect(shown.err).toContain('\r\x1b[2Kqueued 0 · in flight 0 · delivered 0 · deferred 1 (next retry in ');
    expect(shown.err).toMatch(/deferred 1 \(next retry in (29m 5\d|30m 0)s\)/);
    expect(shown.code).toBe(0);
    // A second worker learns the due time from the store, and --quiet shows no progress line.
    const quiet = await run(['deliver', '--config', config, '--store', store, '--quiet'], null);
    expect(quiet.err).toMatch(/^relent deliver: stopped by SIGTERM; released 0 claims — queued 0 · in flight 0 · delivered 0 · deferred 1 · dropped 0\n$/);
    const again = await run(['deliver', '--config', config, '--store', store, '--progress'], /next retry in/);
    expect(again.err).toMatch(/deferred 1 \(next retry in (29m \d\d|30m 0)s\)/);
  }, 30_000);
});
