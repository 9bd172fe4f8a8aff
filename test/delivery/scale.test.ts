// Scale-out: several real worker processes (bin/relent deliver) on one store share a
// destination's published limits through the store. A real node:http receiver measures
// what the destination sees: requests per sliding window, requests in flight at once.
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openDeliveryQueue } from '../../src/delivery/queue.js';
import { PG_URL, dropSchema, listen, pgEnabled, uniqueSchema } from './support.js';

const BIN = fileURLToPath(new URL('../../bin/relent', import.meta.url));
const DIST = fileURLToPath(new URL('../../dist/delivery/index.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'relent-scale-'));
const pgOn = await pgEnabled();
const schemas: string[] = [];

afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  for (const s of schemas) await dropSchema(s);
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((r) => child.once('exit', (code) => r(code)));
}

/** The most arrivals in any window [t, t + ms) (arrival times sorted). */
function busiestWindow(at: readonly number[], ms: number): number {
  let worst = 0;
  let j = 0;
  for (let i = 0; i < at.length; i++) {
    while (at[i]! - at[j]! >= ms) j++;
    worst = Math.max(worst, i - j + 1);
  }
  return worst;
}

interface Run {
  arrivals: number[];
  maxInFlight: number;
  keys: Map<string, number>;
  workers: Set<string>;
  seconds: number;
}

/**
 * Enqueues `items` items, runs `workers` processes of `relent deliver --exit-when-idle`
 * against a receiver that answers after `answerMs`, and records what the receiver saw.
 */
async function run(store: string, dest: Record<string, unknown>, items: number, workers: number, answerMs: number): Promise<Run> {
  if (!existsSync(DIST)) throw new Error('dist/ is missing: run `npm run build` first (CI builds before testing)');
  const arrivals: number[] = [];
  const keys = new Map<string, number>();
  const ids = new Set<string>();
  let inFlight = 0;
  let maxInFlight = 0;
  const receiver = await listen((req, res) => {
    arrivals.push(performance.now());
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    let body = '';
    req.on('data', (d: Buffer) => (body += d));
    req.on('end', () => {
      for (const it of (JSON.parse(body) as { items: { key: string }[] }).items) keys.set(it.key, (keys.get(it.key) ?? 0) + 1);
      const rid = String(req.headers['x-request-id'] ?? '');
      ids.add(rid);
      setTimeout(() => {
        inFlight--;
        res.writeHead(200).end('ok');
      }, answerMs);
    });
  });
  const config = join(dir, `config-${Date.now()}-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(
    config,
    JSON.stringify({ destinations: { sink: { url: `${receiver.url}/in`, policy: 'adobe-best-effort', batch: { maxItems: 1, maxAgeMs: 0 }, ...dest } } }),
  );
  const queue = await openDeliveryQueue({ store });
  await queue.enqueueMany(
    'sink',
    Array.from({ length: items }, (_, i) => ({ key: `item-${i}`, payload: { n: i } })),
  );
  const logs: string[] = [];
  const started = performance.now();
  try {
    const children = Array.from({ length: workers }, (_, i) => {
      const child = spawn(
        process.execPath,
        [BIN, 'deliver', '--store', store, '--config', config, '--poll', '50ms', '--no-progress', '--exit-when-idle', '--worker-id', `w${i}`],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      child.stderr!.on('data', (d: Buffer) => logs.push(`[w${i}] ${d.toString()}`));
      return child;
    });
    const codes = await Promise.race([
      Promise.all(children.map(exited)),
      sleep(60_000).then(() => {
        for (const c of children) c.kill('SIGKILL');
        throw new Error(`the workers did not finish:\n${logs.slice(-20).join('')}`);
      }),
    ]);
    expect(codes, logs.join('')).toEqual(children.map(() => 0));
    const seconds = (performance.now() - started) / 1000;
    const workerIds = new Set<string>();
    for (const b of await queue.list({ state: 'delivered', limit: items })) {
      for (const a of (await queue.show(b.id))!.attempts) if (a.worker) workerIds.add(a.worker);
    }
    return { arrivals: arrivals.sort((a, b) => a - b), maxInFlight, keys, workers: workerIds, seconds };
  } finally {
    await queue.close();
    await receiver.close();
  }
}

const stores: [string, () => string][] = [['SQLite', () => `sqlite:${join(dir, `scale-${Date.now()}-${Math.random().toString(36).slice(2)}.db`)}`]];
if (pgOn) {
  stores.push([
    'PostgreSQL',
    () => {
      const schema = uniqueSchema('scale');
      schemas.push(schema);
      return `${PG_URL}?schema=${schema}`;
    },
  ]);
}

describe.each(stores)('scale-out on %s: 4 worker processes share the destination', (_name, store) => {
  it('a rate limit of 10 requests per second: the receiver never sees more than 10 in any second, and all 50 items arrive once', async () => {
    // The window of each claim starts when its last request was answered, so however late a
    // request leaves (fresh processes opening connections on a machine shared with other work)
    // or is seen (this receiver's own event loop), the receiver cannot count more than the limit.
    const r = await run(store(), { rateLimit: { requests: 10, perMs: 1_000 }, concurrency: { initial: 8, adaptive: false } }, 50, 4, 5);
    expect(r.keys.size).toBe(50);
    expect([...r.keys.values()].every((n) => n === 1)).toBe(true);
    const worst = busiestWindow(r.arrivals, 1_000);
    if (worst > 10) console.log(`arrivals (ms): ${r.arrivals.map((a) => Math.round(a - r.arrivals[0]!)).join(' ')}`);
    expect(worst).toBeLessThanOrEqual(10);
    // The limit, not the workers, set the pace: 50 requests at 10 per second take at least 4 s.
    expect(r.arrivals.at(-1)! - r.arrivals[0]!).toBeGreaterThanOrEqual(4_000);
    expect(r.workers.size).toBeGreaterThan(1); // the work was shared
    // The same processes with a per-worker limit send more than 10 in a second: the share is what held them.
    const own = await run(store(), { rateLimit: { requests: 10, perMs: 1_000, scope: 'worker' }, concurrency: { initial: 8, adaptive: false } }, 50, 4, 5);
    expect(busiestWindow(own.arrivals, 1_000)).toBeGreaterThan(10);
  }, 90_000);

  it('a concurrency of 3 shared by the workers: never more than 3 requests in flight at the receiver (each worker alone would put 3 each)', async () => {
    const shared = await run(store(), { concurrency: { initial: 3, max: 3, adaptive: false, scope: 'shared' } }, 60, 4, 80);
    expect(shared.keys.size).toBe(60);
    expect(shared.maxInFlight).toBeLessThanOrEqual(3);
    expect(shared.maxInFlight).toBeGreaterThanOrEqual(2);
    // 60 answers of 80 ms, at most 3 at a time, take at least 1.6 s at the receiver.
    expect(shared.arrivals.at(-1)! - shared.arrivals[0]!).toBeGreaterThanOrEqual(1_500);
    // The same processes with a per-worker limit put more than 3 in flight: the share is what held them.
    const own = await run(store(), { concurrency: { initial: 3, max: 3, adaptive: false, scope: 'worker' } }, 60, 4, 80);
    expect(own.maxInFlight).toBeGreaterThan(3);
  }, 90_000);
});
