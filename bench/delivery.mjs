// Durable delivery throughput: items/s enqueued and delivered through relent's queue
// (SQLite and PostgreSQL stores) and, side by side in the same run, BullMQ (Redis) and
// pg-boss (PostgreSQL) doing the same work with their own retry options. Every
// candidate POSTs each item to the same loopback receiver (node:http) with 16 requests
// in flight; "delivered" ends when the receiver has seen every item once.
// BullMQ 6 and pg-boss 10 are the newest majors that run on Node 20 (pg-boss 11+ needs 22).
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request, Agent } from 'undici';
import pg from 'pg';
import { openDeliveryQueue } from '../dist/delivery/index.js';

const PG_URL = process.env.RELENT_BENCH_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS = { host: '127.0.0.1', port: 6379 };
const CONCURRENCY = 16;
const version = (n) => JSON.parse(readFileSync(new URL(`../node_modules/${n}/package.json`, import.meta.url), 'utf8')).version;

async function receiver() {
  const seen = new Set();
  let waiters = [];
  const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      // relent sends an envelope per batch; the others send one item per request.
      const key = req.headers['x-item-key'];
      if (key) seen.add(key);
      else for (const it of JSON.parse(body).items) seen.add(it.key);
      res.writeHead(200).end('ok');
      if (waiters.length) {
        const still = [];
        for (const w of waiters) {
          if (seen.size >= w.n) w.resolve();
          else still.push(w);
        }
        waiters = still;
      }
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}/in`,
    reset: () => seen.clear(),
    until: (n) => (seen.size >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve }))),
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }),
  };
}

async function reachable(kind) {
  try {
    if (kind === 'pg') {
      const c = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 2000 });
      await c.connect();
      await c.end();
    } else {
      const { default: Redis } = await import('ioredis');
      const r = new Redis({ ...REDIS, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      await r.connect();
      await r.quit();
    }
    return true;
  } catch {
    return false;
  }
}

const chunks = (n, size, f) => {
  const out = [];
  for (let i = 0; i < n; i += size) out.push(Array.from({ length: Math.min(size, n - i) }, (_, j) => f(i + j)));
  return out;
};

async function relentCase(name, store, rx, n, maxItems) {
  const queue = await openDeliveryQueue({
    store,
    destinations: { sink: { url: rx.url, policy: 'adobe-best-effort', batch: { maxItems, maxAgeMs: 0 }, concurrency: { initial: CONCURRENCY, adaptive: false } } },
  });
  const t0 = performance.now();
  for (const c of chunks(n, 500, (i) => ({ key: `${name}-${i}`, payload: { n: i } }))) await queue.enqueueMany('sink', c);
  const t1 = performance.now();
  const worker = queue.createWorker({ pollMs: 20, claimChunk: 200 });
  worker.start();
  await rx.until(n);
  const t2 = performance.now();
  await worker.stop();
  await queue.close();
  return { name, enqueue: n / ((t1 - t0) / 1000), deliver: n / ((t2 - t1) / 1000) };
}

async function bullmqCase(rx, n) {
  const { Queue, Worker } = await import('bullmq');
  const name = `relent-bench-${process.pid}`;
  const agent = new Agent({ keepAliveTimeout: 30_000 });
  const queue = new Queue(name, { connection: REDIS });
  await queue.obliterate({ force: true }).catch(() => {});
  const opts = { attempts: 3, backoff: { type: 'fixed', delay: 15_000 }, removeOnComplete: true };
  const t0 = performance.now();
  for (const c of chunks(n, 500, (i) => ({ name: 'item', data: { key: `bull-${i}`, n: i }, opts }))) await queue.addBulk(c);
  const t1 = performance.now();
  const worker = new Worker(name, async (job) => {
    const r = await request(rx.url, { method: 'POST', dispatcher: agent, body: JSON.stringify(job.data), headers: { 'content-type': 'application/json', 'idempotency-key': job.id, 'x-item-key': job.data.key } });
    await r.body.dump();
    if (r.statusCode >= 300) throw new Error(`status ${r.statusCode}`);
  }, { connection: REDIS, concurrency: CONCURRENCY });
  await rx.until(n);
  const t2 = performance.now();
  await worker.close();
  await queue.obliterate({ force: true }).catch(() => {});
  await queue.close();
  await agent.close();
  return { name: `BullMQ ${version('bullmq')} (Redis)`, enqueue: n / ((t1 - t0) / 1000), deliver: n / ((t2 - t1) / 1000) };
}

async function pgBossCase(rx, n, batchSize) {
  const { default: PgBoss } = await import('pg-boss');
  const schema = `relent_bench_pgboss_${process.pid}_${batchSize}`;
  const agent = new Agent({ keepAliveTimeout: 30_000 });
  const boss = new PgBoss({ connectionString: PG_URL, schema });
  boss.on('error', () => {});
  await boss.start();
  const name = 'items';
  await boss.createQueue(name, { retryLimit: 2, retryDelay: 15 });
  const t0 = performance.now();
  for (const c of chunks(n, 500, (i) => ({ name, data: { key: `boss-${i}`, n: i }, retryLimit: 2, retryDelay: 15 }))) await boss.insert(c);
  const t1 = performance.now();
  await boss.work(name, { batchSize, pollingIntervalSeconds: 0.5 }, async (jobs) => {
    await Promise.all(jobs.map(async (job) => {
      const r = await request(rx.url, { method: 'POST', dispatcher: agent, body: JSON.stringify(job.data), headers: { 'content-type': 'application/json', 'idempotency-key': job.id, 'x-item-key': job.data.key } });
      await r.body.dump();
      if (r.statusCode >= 300) throw new Error(`status ${r.statusCode}`);
    }));
  });
  await rx.until(n);
  const t2 = performance.now();
  await boss.stop({ graceful: true, wait: true, timeout: 5_000 }).catch(() => {});
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await c.end();
  await agent.close();
  return { name: `pg-boss ${version('pg-boss')} (PostgreSQL, batchSize ${batchSize})`, enqueue: n / ((t1 - t0) / 1000), deliver: n / ((t2 - t1) / 1000) };
}

export async function main({ quick = false } = {}) {
  const n = quick ? 2_000 : 20_000;
  const rx = await receiver();
  const dir = mkdtempSync(join(tmpdir(), 'relent-bench-'));
  const pgOk = await reachable('pg');
  const redisOk = await reachable('redis');
  const schema = `relent_bench_${process.pid}`;
  const rows = [];
  const notes = [];
  const run = async (f) => {
    rx.reset();
    rows.push(await f());
  };
  try {
    await run(() => relentCase('relent SQLite (1 item/request)', `sqlite:${join(dir, 'q.db')}`, rx, n, 1));
    if (pgOk) await run(() => relentCase('relent PostgreSQL (1 item/request)', `${PG_URL}?schema=${schema}`, rx, n, 1));
    else notes.push(`PostgreSQL at ${PG_URL} unreachable: relent PostgreSQL and pg-boss skipped`);
    if (redisOk) await run(() => bullmqCase(rx, n));
    else notes.push('Redis at 127.0.0.1:6379 unreachable: BullMQ skipped');
    if (pgOk) {
      // pg-boss 10 waits pollingIntervalSeconds (at least 0.5 s) after every fetch, so 16 jobs in
      // flight cap it near 32/s: measured on fewer items, and again with 200 in flight.
      const few = Math.min(n, 1_000);
      await run(() => pgBossCase(rx, few, CONCURRENCY));
      notes.push(`pg-boss with batchSize ${CONCURRENCY} was measured on ${few.toLocaleString('en-US')} items (it polls every 0.5 s at best)`);
      await run(() => pgBossCase(rx, n, 200));
      notes.push('pg-boss with batchSize 200 has 200 requests in flight, not 16');
    }
    await run(() => relentCase('relent SQLite (100 items/request)', `sqlite:${join(dir, 'q100.db')}`, rx, n, 100));
  } finally {
    await rx.close();
    rmSync(dir, { recursive: true, force: true });
    if (pgOk) {
      const c = new pg.Client({ connectionString: PG_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await c.end();
    }
  }
  const base = rows[0];
  const w = Math.max(...rows.map((r) => r.name.length));
  const fmt = (x) => Math.round(x).toLocaleString('en-US').padStart(10);
  console.log(`\nDurable delivery: ${n.toLocaleString('en-US')} items, ${CONCURRENCY} requests in flight, loopback receiver (node ${process.version})`);
  console.log('Retry options: relent adobe-best-effort (15 s, 30 s); BullMQ attempts 3, fixed 15 s; pg-boss retryLimit 2, retryDelay 15 s. Higher is better.');
  console.log(`${'candidate'.padEnd(w)}  ${'enqueue/s'.padStart(10)}  ${'deliver/s'.padStart(10)}  ${'enqueue vs'.padStart(10)}  ${'deliver vs'.padStart(10)}`);
  console.log(`${'-'.repeat(w)}  ${'-'.repeat(10)}  ${'-'.repeat(10)}  ${'-'.repeat(10)}  ${'-'.repeat(10)}`);
  for (const r of rows) {
    console.log(`${r.name.padEnd(w)}  ${fmt(r.enqueue)}  ${fmt(r.deliver)}  ${`${(r.enqueue / base.enqueue).toFixed(2)}x`.padStart(10)}  ${`${(r.deliver / base.deliver).toFixed(2)}x`.padStart(10)}`);
  }
  console.log(`(ratios against ${base.name})`);
  for (const note of notes) console.log(`note: ${note}`);
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) await main({ quick: process.argv.includes('--quick') });
