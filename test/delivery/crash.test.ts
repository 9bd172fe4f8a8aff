// Crash test: `kill -9` real worker processes (bin/relent deliver) again and again while
// they deliver 10,000 items to a real idempotent receiver on loopback. After restarts,
// every item has arrived and was counted exactly once, every batch is delivered, and
// nothing is left claimed. SQLite with one worker; PostgreSQL with two at once (batches of
// ten, and batches of one item).
import { afterAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openDeliveryQueue } from '../../src/delivery/queue.js';
import { createIdempotentHandler } from '../../src/delivery/receiver.js';
import { createSeededRandom } from '../../src/testing/index.js';
import { PG_URL, dropSchema, listen, pgEnabled, uniqueSchema } from './support.js';

const BIN = fileURLToPath(new URL('../../bin/relent', import.meta.url));
const DIST = fileURLToPath(new URL('../../dist/delivery/index.js', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'relent-crash-'));
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

interface Figures {
  kills: number;
  incarnations: number;
  replays: number;
  requests: number;
  claimedTwice: number;
  seconds: number;
}

async function crashRun(store: string, workers: number, killsPerWorker: number, { maxItems = 10, items: ITEMS = 10_000 } = {}): Promise<Figures> {
  if (!existsSync(DIST)) throw new Error('dist/ is missing: run `npm run build` first (CI builds before testing)');
  const counts = new Map<string, number>();
  let requests = 0;
  let replays = 0;
  const random = createSeededRandom(workers * 1000 + killsPerWorker);
  const receiver = await listen(
    createIdempotentHandler(
      async (_req, body) => {
        const batch = JSON.parse(body.toString('utf8')) as { items: { key: string }[] };
        for (const it of batch.items) counts.set(it.key, (counts.get(it.key) ?? 0) + 1);
        await sleep(10 + Math.floor(random() * 30)); // a receiver that takes its time: kills land mid-request
        return { status: 200, body: 'ok' };
      },
      {
        onRequest: ({ duplicate }) => {
          requests++;
          if (duplicate) replays++;
        },
      },
    ),
  );
  const config = join(dir, `config-${workers}-${Date.now()}.json`);
  writeFileSync(
    config,
    JSON.stringify({
      destinations: {
        sink: {
          url: `${receiver.url}/ingest`,
          policy: 'adobe-best-effort',
          batch: { maxItems, maxAgeMs: 0 },
          concurrency: { initial: 8, adaptive: false },
        },
      },
    }),
  );
  const queue = await openDeliveryQueue({ store });
  for (let i = 0; i < ITEMS; i += 2_000) {
    await queue.enqueueMany(
      'sink',
      Array.from({ length: Math.min(2_000, ITEMS - i) }, (_, j) => ({ key: `item-${i + j}`, payload: { n: i + j } })),
    );
  }
  const logs: string[] = [];
  const spawnWorker = (id: string, extra: string[] = []): ChildProcess => {
    const child = spawn(
      process.execPath,
      [BIN, 'deliver', '--store', store, '--config', config, '--lease', '1s', '--poll', '50ms', '--no-progress', '--worker-id', id, ...extra],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    child.stderr!.on('data', (d: Buffer) => logs.push(`[${id}] ${d.toString()}`));
    return child;
  };
  const started = Date.now();
  let kills = 0;
  let incarnations = 0;
  try {
    // Each worker slot: start, let it work for a while, kill -9, start again.
    await Promise.all(
      Array.from({ length: workers }, async (_, slot) => {
        for (let k = 0; k < killsPerWorker && counts.size < ITEMS; k++) {
          const child = spawnWorker(`w${slot}-${k}`);
          incarnations++;
          await sleep(350 + Math.floor(random() * 600));
          if (child.exitCode === null) {
            child.kill('SIGKILL');
            kills++;
          }
          await exited(child);
        }
      }),
    );
    // Then run to completion: each worker exits by itself once nothing is queued or in flight.
    const finals = Array.from({ length: workers }, (_, slot) => spawnWorker(`final-${slot}`, ['--exit-when-idle']));
    incarnations += workers;
    const codes = await Promise.race([
      Promise.all(finals.map(exited)),
      sleep(45_000).then(() => {
        for (const f of finals) f.kill('SIGKILL');
        throw new Error(`the final workers did not finish:\n${logs.slice(-20).join('')}`);
      }),
    ]);
    expect(codes, logs.join('')).toEqual(finals.map(() => 0));
    // Every item arrived and was counted exactly once (the receiver dedupes by batch key).
    expect(counts.size).toBe(ITEMS);
    expect([...counts.values()].every((c) => c === 1)).toBe(true);
    // Every batch is delivered and nothing is left claimed.
    const st = (await queue.stats()).find((s) => s.destination === 'sink')!;
    expect(st).toMatchObject({ pendingItems: 0, readyBatches: 0, inflightBatches: 0, deferredBatches: 0, droppedBatches: 0, deliveredItems: ITEMS });
    const all = await queue.list({ limit: 100_000 });
    expect(all).toHaveLength(ITEMS / maxItems);
    expect(all.filter((b) => b.state !== 'delivered' || b.leaseOwner !== null || b.leaseUntil !== 0)).toEqual([]);
    expect(kills).toBeGreaterThanOrEqual(3);
    return { kills, incarnations, replays, requests, claimedTwice: all.filter((b) => b.claims > 1).length, seconds: (Date.now() - started) / 1000 };
  } finally {
    await queue.close();
    await receiver.close();
  }
}

describe('crash test: kill -9 during delivery of 10,000 items', () => {
  it('SQLite, one worker killed again and again', async () => {
    const f = await crashRun(`sqlite:${join(dir, 'crash.db')}`, 1, 8);
    console.log(`crash test sqlite: ${JSON.stringify(f)}`);
  }, 90_000);

  it.skipIf(!pgOn)(
    'PostgreSQL, two workers at once, both killed again and again',
    async () => {
      const schema = uniqueSchema('crash');
      schemas.push(schema);
      const f = await crashRun(`${PG_URL}?schema=${schema}`, 2, 6);
      console.log(`crash test postgres (2 workers): ${JSON.stringify(f)}`);
    },
    90_000,
  );

  // One item per batch: PostgreSQL seals and leases each batch in one statement.
  it.skipIf(!pgOn)(
    'PostgreSQL, one item per request (batches sealed and leased in one statement), two workers killed again and again',
    async () => {
      const schema = uniqueSchema('crash1');
      schemas.push(schema);
      const f = await crashRun(`${PG_URL}?schema=${schema}`, 2, 4, { maxItems: 1, items: 3_000 });
      console.log(`crash test postgres, one item per request (2 workers): ${JSON.stringify(f)}`);
    },
    90_000,
  );
});
