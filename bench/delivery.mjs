// Durable delivery at scale. Every table reports ratios measured in the same run (the
// machine may be shared: absolute figures are noisy; the load average is printed).
//
// 1. throughput — items/s enqueued and delivered, one item per request, 16 in flight, to
//    one loopback node:http receiver: relent on SQLite and on PostgreSQL against BullMQ
//    (Redis) in three interleaved repetitions (ratios per repetition, then the median),
//    then pg-boss (PostgreSQL) and relent with 100 items per request once.
// 2. scale — relent worker processes (1, 2, 4) on one PostgreSQL queue: items/s, CPU per
//    1000 items (workers, PostgreSQL, receiver) and store calls per 1000 items; and 4
//    processes against a destination limited to R requests/s: the most requests the
//    receiver saw in any 1 s window.
// 3. fairness — ten destinations, one of them slow (2 s answers) or failing (503): the
//    healthy nine's items/s with the bad one, as a share of their items/s alone, in
//    interleaved rounds (the median share); both stores.
// 4. large — PostgreSQL with 10^4 and 10^6 batches queued (bulk-loaded with SQL): enqueue,
//    seal-and-lease and claim latency (p50/p99, samples taken in turn from both queues) and
//    `queue stats` time, and the 10^6/10^4 ratios.
//
// `node bench/delivery.mjs [--quick] [throughput] [scale] [fairness] [large]` (all by
// default), or `npm run bench -- delivery [section...]`; each case gives up after
// CASE_TIMEOUT_MS and says so. Imports ../dist: run `npm run build` first.
// BullMQ 6 and pg-boss 10 are the newest majors that run on Node 20 (pg-boss 11+ needs 22).
import { createServer } from 'node:http';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { request, Agent } from 'undici';
import pg from 'pg';
import { openDeliveryQueue, openPostgresStore } from '../dist/delivery/index.js';

const PG_URL = process.env.RELENT_BENCH_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS = { host: '127.0.0.1', port: 6379 };
const CONCURRENCY = 16;
/** The longest one case may take before the bench gives up on it (and says so). */
const CASE_TIMEOUT_MS = 120_000;
const WORKER = fileURLToPath(new URL('./workers/delivery-worker.mjs', import.meta.url));
const version = (n) => JSON.parse(readFileSync(new URL(`../node_modules/${n}/package.json`, import.meta.url), 'utf8')).version;
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
const int = (x) => Math.round(x).toLocaleString('en-US');
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * One loopback receiver for every case. relent sends an envelope per batch; the others one
 * item per request (its JSON has the key; x-item-key says which kind of body it is). A path /slow/… answers after 2 s, /fail/…
 * answers 503; the first path segment names the destination (counted per destination).
 */
async function receiver() {
  const seen = new Set();
  const perDest = new Map();
  let arrivals = [];
  let waiters = [];
  const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    arrivals.push(performance.now());
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const dest = req.url.split('/')[1] ?? '';
      if (dest.startsWith('slow')) {
        setTimeout(() => res.writeHead(200).end('ok'), 2_000);
        return;
      }
      if (dest.startsWith('fail')) {
        res.writeHead(503).end('busy');
        return;
      }
      // Counted by destination and key (two destinations may use the same item keys); every
      // body is parsed, whoever sent it, so each candidate's requests cost the receiver alike.
      const parsed = JSON.parse(body);
      let n = 0;
      if (req.headers['x-item-key']) {
        seen.add(`${dest}\0${parsed.key}`);
        n = 1;
      } else {
        for (const it of parsed.items) {
          seen.add(`${dest}\0${it.key}`);
          n++;
        }
      }
      perDest.set(dest, (perDest.get(dest) ?? 0) + n);
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
  const base = `http://127.0.0.1:${server.address().port}`;
  return {
    base,
    url: `${base}/in`,
    reset: () => {
      seen.clear();
      perDest.clear();
      arrivals = [];
    },
    arrivals: () => arrivals,
    seen: () => seen.size,
    /** Resolves when n distinct items arrived; rejects after `ms` (a case never hangs the bench). */
    until: (n, ms = CASE_TIMEOUT_MS) => {
      if (seen.size >= n) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters = waiters.filter((w) => w.resolve !== done);
          reject(new Error(`only ${seen.size} of ${n} items arrived in ${ms / 1000} s`));
        }, ms);
        const done = () => {
          clearTimeout(timer);
          resolve();
        };
        waiters.push({ n, resolve: done });
      });
    },
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(r);
      }),
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

async function dropSchemas(schemas) {
  if (schemas.length === 0) return;
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  for (const s of schemas) await c.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
  await c.end();
}

const chunks = (n, size, f) => {
  const out = [];
  for (let i = 0; i < n; i += size) out.push(Array.from({ length: Math.min(size, n - i) }, (_, j) => f(i + j)));
  return out;
};

const sink = (url, maxItems, extra = {}) => ({
  url,
  policy: 'adobe-best-effort',
  batch: { maxItems, maxAgeMs: 0 },
  concurrency: { initial: CONCURRENCY, adaptive: false },
  ...extra,
});

// ---------------------------------------------------------------- 1. throughput

async function relentCase(store, rx, n, maxItems, tag) {
  rx.reset();
  const queue = await openDeliveryQueue({ store, destinations: { sink: sink(rx.url, maxItems) } });
  const t0 = performance.now();
  for (const c of chunks(n, 500, (i) => ({ key: `${tag}-${i}`, payload: { n: i } }))) await queue.enqueueMany('sink', c);
  const t1 = performance.now();
  const worker = queue.createWorker({ pollMs: 20 });
  worker.start();
  let t2;
  try {
    await rx.until(n);
    t2 = performance.now();
  } finally {
    await worker.stop();
    await queue.close();
  }
  return { enqueue: n / ((t1 - t0) / 1000), deliver: n / ((t2 - t1) / 1000) };
}

async function bullmqCase(rx, n) {
  rx.reset();
  const { Queue, Worker } = await import('bullmq');
  const name = `relent-bench-${process.pid}`;
  const agent = new Agent({ keepAliveTimeout: 30_000 });
  const queue = new Queue(name, { connection: REDIS });
  await queue.obliterate({ force: true }).catch(() => {});
  const opts = { attempts: 3, backoff: { type: 'fixed', delay: 15_000 }, removeOnComplete: true };
  const t0 = performance.now();
  for (const c of chunks(n, 500, (i) => ({ name: 'item', data: { key: `bull-${i}`, n: i }, opts }))) await queue.addBulk(c);
  const t1 = performance.now();
  const worker = new Worker(
    name,
    async (job) => {
      const r = await request(rx.url, {
        method: 'POST',
        dispatcher: agent,
        body: JSON.stringify(job.data),
        headers: { 'content-type': 'application/json', 'idempotency-key': job.id, 'x-item-key': job.data.key },
      });
      await r.body.dump();
      if (r.statusCode >= 300) throw new Error(`status ${r.statusCode}`);
    },
    { connection: REDIS, concurrency: CONCURRENCY },
  );
  let t2;
  try {
    await rx.until(n);
    t2 = performance.now();
  } finally {
    await worker.close();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
    await agent.close();
  }
  return { enqueue: n / ((t1 - t0) / 1000), deliver: n / ((t2 - t1) / 1000) };
}

async function pgBossCase(rx, n, batchSize) {
  rx.reset();
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
    await Promise.all(
      jobs.map(async (job) => {
        const r = await request(rx.url, {
          method: 'POST',
          dispatcher: agent,
          body: JSON.stringify(job.data),
          headers: { 'content-type': 'application/json', 'idempotency-key': job.id, 'x-item-key': job.data.key },
        });
        await r.body.dump();
        if (r.statusCode >= 300) throw new Error(`status ${r.statusCode}`);
      }),
    );
  });
  let t2;
  try {
    await rx.until(n);
    t2 = performance.now();
  } finally {
    await boss.stop({ graceful: true, wait: true, timeout: 5_000 }).catch(() => {});
    await dropSchemas([schema]);
    await agent.close();
  }
  return { enqueue: n / ((t1 - t0) / 1000), deliver: n / ((t2 - t1) / 1000) };
}

function table(head, rows) {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (r) => r.map((c, i) => (i === 0 ? String(c).padEnd(w[i]) : String(c).padStart(w[i]))).join('  ');
  console.log(line(head));
  console.log(w.map((x) => '-'.repeat(x)).join('  '));
  for (const r of rows) console.log(line(r));
}

async function throughput({ quick, rx, dir, pgOk, redisOk, schemas }) {
  const n = quick ? 2_000 : 12_000;
  const reps = quick ? 3 : 5;
  console.log(
    `\n--- throughput: ${int(n)} items, one item per request, ${CONCURRENCY} in flight, ${reps} repetitions, each starting with the next candidate (load average ${load()})`,
  );
  console.log('Retry options: relent adobe-best-effort (15 s, 30 s); BullMQ attempts 3, fixed 15 s; pg-boss retryLimit 2, retryDelay 15 s. Higher is better.');
  if (!redisOk) console.log('note: Redis at 127.0.0.1:6379 unreachable: BullMQ skipped, no ratios');
  if (!pgOk) console.log(`note: PostgreSQL at ${PG_URL} unreachable: relent PostgreSQL and pg-boss skipped`);
  // Warm-up (not measured): every candidate once on a few items, so no repetition pays for JIT and connections.
  if (redisOk) await bullmqCase(rx, 1_000);
  await relentCase(`sqlite:${join(dir, 'warm.db')}`, rx, 1_000, 1, 'w');
  if (pgOk) {
    schemas.push(`relent_bench_${process.pid}_warm`);
    await relentCase(`${PG_URL}?schema=relent_bench_${process.pid}_warm`, rx, 1_000, 1, 'w');
  }
  const runs = [];
  for (let rep = 1; rep <= reps; rep++) {
    const r = { rep, load: loadavg()[0] };
    const cases = [];
    if (redisOk) cases.push(async () => (r.bull = await bullmqCase(rx, n)));
    cases.push(async () => (r.sqlite = await relentCase(`sqlite:${join(dir, `t${rep}.db`)}`, rx, n, 1, `s${rep}`)));
    if (pgOk) {
      const schema = `relent_bench_${process.pid}_t${rep}`;
      schemas.push(schema);
      cases.push(async () => (r.pg = await relentCase(`${PG_URL}?schema=${schema}`, rx, n, 1, `p${rep}`)));
    }
    // Each repetition starts with the next candidate, so none always runs first or last.
    for (let i = 0; i < cases.length; i++) await cases[(i + rep - 1) % cases.length]();
    runs.push(r);
  }
  const ratio = (a, b) => (a && b ? `${(a / b).toFixed(2)}x` : '-');
  table(
    ['repetition', 'load', 'BullMQ/s', 'SQLite/s', 'PostgreSQL/s', 'SQLite vs BullMQ', 'PostgreSQL vs BullMQ'],
    runs.map((r) => [
      String(r.rep),
      r.load.toFixed(1),
      r.bull ? int(r.bull.deliver) : '-',
      int(r.sqlite.deliver),
      r.pg ? int(r.pg.deliver) : '-',
      ratio(r.sqlite.deliver, r.bull?.deliver),
      ratio(r.pg?.deliver, r.bull?.deliver),
    ]),
  );
  if (redisOk) {
    const sq = median(runs.map((r) => r.sqlite.deliver / r.bull.deliver));
    const pq = pgOk ? median(runs.map((r) => r.pg.deliver / r.bull.deliver)) : null;
    console.log(
      `median ratio of delivered items/s to BullMQ's in the same repetition: SQLite ${sq.toFixed(2)}x${pq !== null ? `, PostgreSQL ${pq.toFixed(2)}x` : ''}`,
    );
  }
  const once = [];
  once.push(['relent SQLite (1 item/request)', median(runs.map((r) => r.sqlite.enqueue)), median(runs.map((r) => r.sqlite.deliver))]);
  if (pgOk) once.push(['relent PostgreSQL (1 item/request)', median(runs.map((r) => r.pg.enqueue)), median(runs.map((r) => r.pg.deliver))]);
  if (redisOk) once.push([`BullMQ ${version('bullmq')} (Redis)`, median(runs.map((r) => r.bull.enqueue)), median(runs.map((r) => r.bull.deliver))]);
  if (pgOk) {
    const few = Math.min(n, 1_000);
    const b16 = await pgBossCase(rx, few, CONCURRENCY);
    once.push([`pg-boss ${version('pg-boss')} (PostgreSQL, batchSize ${CONCURRENCY}, ${int(few)} items)`, b16.enqueue, b16.deliver]);
    const b200 = await pgBossCase(rx, n, 200);
    once.push([`pg-boss ${version('pg-boss')} (PostgreSQL, batchSize 200: 200 in flight)`, b200.enqueue, b200.deliver]);
  }
  const hundred = await relentCase(`sqlite:${join(dir, 'h.db')}`, rx, n, 100, 'h');
  once.push(['relent SQLite (100 items/request)', hundred.enqueue, hundred.deliver]);
  const base = once.find((r) => r[0].startsWith('BullMQ')) ?? once[0];
  console.log(`\nmedians of the repetitions, and single runs (ratios against ${base[0]}):`);
  table(
    ['candidate', 'enqueue/s', 'deliver/s', 'enqueue vs', 'deliver vs'],
    once.map((r) => [r[0], int(r[1]), int(r[2]), ratio(r[1], base[1]), ratio(r[2], base[2])]),
  );
  console.log('note: pg-boss 10 waits pollingIntervalSeconds (at least 0.5 s) after every fetch: batchSize 16 is near 32 items/s');
}

// ---------------------------------------------------------------- 2. scale-out

/** Starts k worker processes (bench/workers/delivery-worker.mjs), waits until each is ready. */
const liveChildren = new Set();

/** CPU time (ms) of the processes `pids`, or of every process named `name`, from /proc (Linux; null elsewhere). */
function cpuMs({ pids = null, name = null }) {
  if (!existsSync('/proc/self/stat')) return null;
  let ticks = 0;
  for (const p of pids ?? readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      const st = readFileSync(`/proc/${p}/stat`, 'utf8');
      if (name !== null && !st.includes(`(${name})`)) continue;
      const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
      ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // gone meanwhile
    }
  }
  return ticks * 10; // USER_HZ is 100 on Linux
}

async function startWorkers(k, spec) {
  const children = [];
  for (let i = 0; i < k; i++) {
    const child = spawn(process.execPath, [WORKER, JSON.stringify(spec)], { stdio: ['pipe', 'pipe', 'inherit'] });
    await new Promise((resolve, reject) => {
      child.stdout.once('data', resolve);
      child.once('exit', (code) => reject(new Error(`a bench worker exited (${code}) before it was ready`)));
    });
    child.removeAllListeners('exit');
    child.out = '';
    child.stdout.on('data', (d) => (child.out += d));
    children.push(child);
    liveChildren.add(child);
    child.once('exit', () => liveChildren.delete(child));
  }
  return {
    pids: children.map((c) => c.pid),
    go: () => {
      for (const c of children) c.stdin.write('go\n');
    },
    stop: () =>
      Promise.all(
        children.map((c) =>
          c.exitCode !== null || c.signalCode !== null
            ? null
            : new Promise((r) => {
                c.once('exit', r);
                c.kill('SIGTERM');
              }),
        ),
      ),
    /** After stop(): each worker's store calls by method and batches claimed (what it printed on its way out). */
    reports: () =>
      children.map((c) => {
        try {
          return JSON.parse(c.out.trim().split('\n').pop());
        } catch {
          return null;
        }
      }),
  };
}

async function scale({ quick, rx, pgOk, schemas }) {
  if (!pgOk) {
    console.log('\n--- scale: skipped (PostgreSQL unreachable)');
    return;
  }
  const n = quick ? 3_000 : 20_000;
  console.log(
    `\n--- scale-out: worker processes on one PostgreSQL queue, ${int(n)} items, one per request, ${CONCURRENCY} in flight per process (load average ${load()})`,
  );
  const rows = [];
  for (const k of [1, 2, 4]) {
    rx.reset();
    const schema = `relent_bench_${process.pid}_s${k}`;
    schemas.push(schema);
    const store = `${PG_URL}?schema=${schema}`;
    const destinations = { sink: sink(rx.url, 1) };
    const queue = await openDeliveryQueue({ store, destinations });
    for (const c of chunks(n, 1_000, (i) => ({ key: `k${i}`, payload: { n: i } }))) await queue.enqueueMany('sink', c);
    const w = await startWorkers(k, { store, destinations, worker: { pollMs: 20 } });
    const cpu0 = { workers: cpuMs({ pids: w.pids }), pg: cpuMs({ name: 'postgres' }), rx: process.cpuUsage() };
    const t0 = performance.now();
    w.go();
    let rate;
    let cpu;
    try {
      await rx.until(n);
      const ms = performance.now() - t0;
      rate = n / (ms / 1000);
      const per = (a, b) => (a === null || b === null ? '-' : ((a - b) / (n / 1000)).toFixed(0));
      const rxMs = process.cpuUsage(cpu0.rx);
      const workers = cpuMs({ pids: w.pids });
      const pgMs = cpuMs({ name: 'postgres' });
      const total = workers === null ? null : workers - cpu0.workers + (pgMs - cpu0.pg) + (rxMs.user + rxMs.system) / 1000;
      cpu = [
        per(workers, cpu0.workers),
        per(pgMs, cpu0.pg),
        ((rxMs.user + rxMs.system) / 1000 / (n / 1000)).toFixed(0),
        total === null ? '-' : `${((total / ms) * 100).toFixed(0)} %`,
      ];
    } finally {
      await w.stop();
      await queue.close();
    }
    // Store calls per 1000 items, all workers together: claims (due batches; sealed and leased), outcome writes, and the rest.
    const reps = w.reports().filter(Boolean);
    const sum = (m) => reps.reduce((a, r) => a + (r.calls[m] ?? 0), 0);
    const all = reps.reduce((a, r) => a + Object.values(r.calls).reduce((x, y) => x + y, 0), 0);
    const per1000 = (x) => (reps.length === k ? (x / (n / 1000)).toFixed(0) : '-');
    const calls = [per1000(sum('claim')), per1000(sum('formAndClaim')), per1000(sum('complete')), per1000(all)];
    rows.push([`${k} process${k > 1 ? 'es' : ''}`, int(rate), `${(rate / (rows.length ? Number(rows[0].at(-1)) : rate)).toFixed(2)}x`, ...cpu, ...calls, rate]);
  }
  table(
    [
      'workers',
      'items/s',
      'vs 1 process',
      'worker CPU ms/1000',
      'PostgreSQL CPU ms/1000',
      'receiver CPU ms/1000',
      'CPU used (of 200 %)',
      'claims/1000',
      'seal+lease/1000',
      'outcome writes/1000',
      'store calls/1000',
    ],
    rows.map((r) => r.slice(0, 11)),
  );
  console.log("CPU: the workers' processes, every postgres process on the machine (other users included), and this process (the receiver), from /proc.");
  console.log(
    "Store calls: every worker's, per 1000 items delivered (claims of due batches; new batches sealed and leased; group-committed outcome writes; all).",
  );

  // 4 processes, one destination limited to R requests per second (shared through the store).
  const R = quick ? 50 : 200;
  const m = R * (quick ? 4 : 8);
  rx.reset();
  const schema = `relent_bench_${process.pid}_rl`;
  schemas.push(schema);
  const store = `${PG_URL}?schema=${schema}`;
  const destinations = { sink: sink(rx.url, 1, { rateLimit: { requests: R, perMs: 1_000 } }) };
  const queue = await openDeliveryQueue({ store, destinations });
  for (const c of chunks(m, 1_000, (i) => ({ key: `r${i}`, payload: { n: i } }))) await queue.enqueueMany('sink', c);
  const w = await startWorkers(4, { store, destinations, worker: { pollMs: 20 } });
  const t0 = performance.now();
  w.go();
  let seconds;
  try {
    await rx.until(m);
    seconds = (performance.now() - t0) / 1000;
  } finally {
    await w.stop();
    await queue.close();
  }
  const at = rx.arrivals().sort((a, b) => a - b);
  let worst = 0;
  for (let i = 0, j = 0; i < at.length; i++) {
    while (at[i] - at[j] >= 1_000) j++;
    worst = Math.max(worst, i - j + 1);
  }
  console.log(
    `4 processes, limit ${R} requests/s (rateLimit shared): ${int(m)} items in ${seconds.toFixed(1)} s = ${int(m / seconds)}/s; the most in any 1 s window at the receiver: ${worst} (limit ${R})`,
  );
}

// ---------------------------------------------------------------- 3. fairness

async function fairness({ quick, rx, dir, pgOk, schemas }) {
  const per = quick ? 300 : 800;
  const rounds = quick ? 1 : 5;
  console.log(
    `\n--- fairness: ten destinations (4 in flight each), ${int(per)} items each for the healthy nine; the tenth slow (2 s answers) or failing (503), with adaptive concurrency (the default); ${rounds} interleaved rounds, shares per round against the same round's nine alone (load average ${load()})`,
  );
  const stores = [['SQLite', (t) => `sqlite:${join(dir, `f-${t}.db`)}`]];
  if (pgOk) {
    stores.push([
      'PostgreSQL',
      (t) => {
        const schema = `relent_bench_${process.pid}_f_${t}`;
        schemas.push(schema);
        return `${PG_URL}?schema=${schema}`;
      },
    ]);
  }
  // The nine at a fixed 4 in flight (a steady baseline); the bad one as configured by default
  // (adaptive: 503s halve its concurrency), starting at 4.
  const dest = (path, adaptive = false) => ({
    url: `${rx.base}/${path}`,
    policy: 'adobe-best-effort',
    batch: { maxItems: 1, maxAgeMs: 0 },
    concurrency: { initial: 4, adaptive },
  });
  /** The nine healthy destinations' items/s, with `bad` (null, 'slow' or 'fail') beside them. */
  const run = async (storeUrl, bad, count) => {
    rx.reset();
    const destinations = {};
    for (let i = 0; i < 9; i++) destinations[`ok${i}`] = dest(`ok${i}`);
    if (bad) destinations[bad] = dest(`${bad}0`, true);
    const queue = await openDeliveryQueue({ store: storeUrl, destinations });
    for (let i = 0; i < 9; i++)
      await queue.enqueueMany(
        `ok${i}`,
        Array.from({ length: count }, (_, j) => ({ key: `k${j}`, payload: { j } })),
      );
    if (bad)
      await queue.enqueueMany(
        bad,
        Array.from({ length: count }, (_, j) => ({ key: `k${j}`, payload: { j } })),
      );
    const worker = queue.createWorker({ pollMs: 20 });
    const t0 = performance.now();
    worker.start();
    try {
      await rx.until(9 * count);
      return (9 * count) / ((performance.now() - t0) / 1000);
    } finally {
      await worker.stop();
      await queue.close();
    }
  };
  const rows = [];
  for (const [name, storeOf] of stores) {
    await run(storeOf('warm'), null, Math.ceil(per / 4)); // warm-up (JIT, connections): not counted
    const r = { alone: [], slow: [], fail: [] };
    for (let round = 1; round <= rounds; round++) {
      for (const bad of [null, 'slow', 'fail']) r[bad ?? 'alone'].push(await run(storeOf(`${bad ?? 'alone'}${round}`), bad, per));
    }
    const share = (k) => r[k].map((x, i) => x / r.alone[i]);
    const pctOf = (xs) => xs.map((x) => `${(100 * x).toFixed(0)}`).join(' / ');
    rows.push([
      name,
      int(median(r.alone)),
      int(median(r.slow)),
      `${(100 * median(share('slow'))).toFixed(0)} %`,
      pctOf(share('slow')),
      int(median(r.fail)),
      `${(100 * median(share('fail'))).toFixed(0)} %`,
      pctOf(share('fail')),
    ]);
  }
  table(['store', 'nine alone/s', 'with a slow one/s', 'share', 'per round', 'with a failing one/s', 'share', 'per round'], rows);
  console.log("items/s: medians of the rounds; share: the median of the rounds' shares (goal: at least 90 %).");
}

// ---------------------------------------------------------------- 4. large queues

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

async function large({ quick, pgOk, schemas }) {
  if (!pgOk) {
    console.log('\n--- large: skipped (PostgreSQL unreachable)');
    return;
  }
  const sizes = quick ? [10_000, 100_000] : [10_000, 1_000_000];
  const samples = quick ? 200 : 1_000;
  console.log(
    `\n--- large queues (PostgreSQL): ${sizes.map(int).join(' and ')} batches queued (half ready, half deferred), ${int(samples)} samples each, taken in turn from both queues (load average ${load()})`,
  );
  const out = [];
  const now = Date.now();
  try {
    for (const size of sizes) {
      const schema = `relent_bench_${process.pid}_l${size}`;
      schemas.push(schema);
      const store = await openPostgresStore({ connectionString: PG_URL, schema });
      const c = new pg.Client({ connectionString: PG_URL });
      await c.connect();
      out.push({ size, store, c, enq: [], seal: [], claim: [], stats: [] });
      const t0 = performance.now();
      // Bulk load with SQL: the batches and their items (one item each) of ten destinations.
      await c.query(`SET search_path = "${schema}"`);
      await c.query(`SET synchronous_commit = off`);
      await c.query(
        `INSERT INTO relent_batches (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at)
        SELECT 'bulk' || (g % 10), 'rb-bulk-' || g, 'queued', 1, 7, $1::bigint, $1::bigint + (g % 2) * 3600000, $1::bigint + (g % 2) * 3600000, $1::bigint - g
        FROM generate_series(1, $2::int) g`,
        [now, size],
      );
      await c.query(`INSERT INTO relent_items (destination, key, payload, bytes, enqueued_at, batch_id)
        SELECT b.destination, 'k' || b.id, '{"n":1}', 7, b.enqueued_at, b.id FROM relent_batches b`);
      await c.query('VACUUM ANALYZE relent_batches');
      await c.query('VACUUM ANALYZE relent_items');
      await store.recount(); // rows loaded behind the store's back: its stats counters count them now
      out.at(-1).loadS = (performance.now() - t0) / 1000;
    }
    // Samples in turn from each queue, so a burst of load from elsewhere hits both alike.
    const time = async (list, f) => {
      const t = performance.now();
      const r = await f();
      list.push(performance.now() - t);
      return r;
    };
    // Enqueue: one item per call, as a producer does.
    for (let i = 0; i < samples; i++) {
      for (const o of out) await time(o.enq, () => o.store.enqueue([{ destination: 'probe', key: `e${i}`, payload: '{"n":1}' }], now));
    }
    // Seal and lease: one of the enqueued items into a batch, leased (what a worker does with new items).
    for (let i = 0; i < samples; i++) {
      for (const o of out) await time(o.seal, () => o.store.formAndClaim('probe', { maxItems: 1, maxBytes: 1_000_000, maxAgeMs: 0 }, now, 1, 15_000, 'bench'));
    }
    // Claim: 16 due batches of a big destination, their outcomes written (so the next claim finds the next ones).
    for (let i = 0; i < samples; i++) {
      for (const o of out) {
        const got = await time(o.claim, () => o.store.claim(`bulk${i % 10}`, 16, now + i, 15_000, 'bench'));
        await o.store.complete(
          got.map((b) => ({
            id: b.id,
            token: b.token,
            state: 'delivered',
            notBefore: b.notBefore,
            attempt: 1,
            opStartedAt: now,
            opDeadlineAt: now + 60_000,
            prevDelayMs: null,
            opThrottled: 0,
            lastStatus: 200,
            lastErrorClass: null,
            lastDecision: 'return',
            lastWhy: 'success',
            finishedAt: now,
            record: null,
          })),
        );
      }
    }
    for (let i = 0; i < 5; i++) {
      for (const o of out) await time(o.stats, () => o.store.stats(now));
    }
  } finally {
    for (const o of out) {
      await o.store.close();
      await o.c.end();
    }
  }
  const [a, b] = out;
  const f = (x) => `${x.toFixed(2)} ms`;
  table(
    ['queued', 'load (s)', 'enqueue p50', 'enqueue p99', 'seal+lease p50', 'seal+lease p99', 'claim p50', 'claim p99', 'stats (median of 5)'],
    out.map((o) => [
      int(o.size),
      o.loadS.toFixed(1),
      f(pct(o.enq, 50)),
      f(pct(o.enq, 99)),
      f(pct(o.seal, 50)),
      f(pct(o.seal, 99)),
      f(pct(o.claim, 50)),
      f(pct(o.claim, 99)),
      f(median(o.stats)),
    ]),
  );
  const x = (k, p) => (pct(b[k], p) / pct(a[k], p)).toFixed(2);
  console.log(
    `${int(b.size)} vs ${int(a.size)}: enqueue p99 ${x('enq', 99)}x, seal+lease p99 ${x('seal', 99)}x, claim p99 ${x('claim', 99)}x, stats ${(median(b.stats) / median(a.stats)).toFixed(2)}x (goal for enqueue and claim: at most 2x)`,
  );
}

export async function main({ quick = false, only = [] } = {}) {
  const sections = { throughput, scale, fairness, large };
  const unknown = only.filter((s) => !(s in sections));
  if (unknown.length > 0) throw new Error(`delivery bench: no section ${unknown.join(', ')} (sections: ${Object.keys(sections).join(', ')})`);
  const chosen = only.length > 0 ? only : Object.keys(sections);
  const rx = await receiver();
  const dir = mkdtempSync(join(tmpdir(), 'relent-bench-'));
  const pgOk = await reachable('pg');
  const redisOk = await reachable('redis');
  const schemas = [];
  console.log(`\nDurable delivery (node ${process.version}); load average at the start: ${load()}`);
  const started = performance.now();
  try {
    for (const s of chosen) {
      const t0 = performance.now();
      try {
        await sections[s]({ quick, rx, dir, pgOk, redisOk, schemas });
      } catch (e) {
        console.log(`\n${s}: did not finish: ${e instanceof Error ? e.message : String(e)}`);
      }
      console.log(`(${s}: ${((performance.now() - t0) / 1000).toFixed(0)} s)`);
    }
  } finally {
    for (const c of liveChildren) c.kill('SIGKILL');
    await rx.close();
    rmSync(dir, { recursive: true, force: true });
    if (pgOk) await dropSchemas(schemas);
  }
  console.log(`\nload average at the end: ${load()}; ${((performance.now() - started) / 1000).toFixed(0)} s in all`);
  await sleep(0);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main({ quick: process.argv.includes('--quick'), only: process.argv.slice(2).filter((a) => !a.startsWith('--')) });
}
