// Durable delivery when PostgreSQL is cut off: two workers deliver a steady load
// through relent/testing/proxy in front of PostgreSQL; the proxy blackholes it for 15 s
// (every connection stalls, new ones are never made: a partition; after the heal, bytes held
// go on at TCP's next retransmission), then heals. The lease (5 s) is shorter than the cut.
// Worker A is stopped 3 s after the heal, B delivers the rest. Printed per configuration:
//
//   first store_error after the cut (goal <= 5 s), first delivery after the heal (<= 2 s),
//   items lost, items sent under a second batch key, batches sent again by the worker that
//   sent them first (0) and by the other one (a lease another worker took: allowed), and
//   items left leased after stop() whose delivery the receiver had already seen (0).
//
// "defaults" (twice): the store's and worker's defaults (queryTimeoutMs 3000, statementTimeoutMs
// 2000, keepAliveMs 10000, storeTimeoutMs 5000). "no timeouts": the same with none of them, as
// the store was before it noticed the network (the worker's other fixes stay: its bookkeeping
// by claim, pings once a connect fails). "claimed again" counts batches leased more than once:
// the cut outlasted their lease.
//
// `npm run bench -- delivery-faults [--quick]` (quick: a 6 s cut, a 2 s lease). Imports ../dist:
// run `npm run build` first. Needs PostgreSQL at RELENT_BENCH_PG (default 127.0.0.1:5432/test);
// the shared server is never touched: the partition is the proxy's.
import { createServer } from 'node:http';
import { loadavg } from 'node:os';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { openPostgresStore, createWorker, createHttpTransport } from '../dist/delivery/index.js';
import { createFaultProxy } from '../dist/testing/proxy.js';

const PG_URL = process.env.RELENT_BENCH_PG ?? 'postgres://postgres@127.0.0.1:5432/test';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
const secs = (ms) => (ms === null ? 'none' : `${(ms / 1000).toFixed(2)} s`);

/** The receiver: what arrived, per item and per batch key, and which worker sent each request. */
async function receiver() {
  const byItem = new Map(); // item key -> Set of batch keys
  const byBatch = new Map(); // batch key -> { n, workers: Map(worker -> requests) }
  const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const b = JSON.parse(body);
      const worker = req.headers['x-bench-worker'] ?? '?';
      let rec = byBatch.get(b.key);
      if (!rec) byBatch.set(b.key, (rec = { n: 0, workers: new Map() }));
      rec.n++;
      rec.workers.set(worker, (rec.workers.get(worker) ?? 0) + 1);
      for (const it of b.items) {
        let s = byItem.get(it.key);
        if (!s) byItem.set(it.key, (s = new Set()));
        s.add(b.key);
      }
      setTimeout(() => res.end('ok'), 5 + Math.floor(Math.random() * 15));
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}/in`,
    byItem,
    byBatch,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(r);
      }),
  };
}

async function reachable() {
  const c = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: 2000 });
  try {
    await c.connect();
    await c.end();
    return true;
  } catch {
    return false;
  }
}

/** Items of batches still leased (after stop()) whose delivery the receiver saw, and the batches; `owner`: only its leases. */
async function leftLeased(direct, rx, owner) {
  const now = Date.now();
  let batches = 0;
  let delivered = 0;
  for (let after = 0; ;) {
    const page = await direct.list({ state: 'inflight', afterId: after, limit: 500 }, now);
    if (page.length === 0) break;
    after = page[page.length - 1].id;
    for (const b of page) {
      if (owner !== undefined && b.leaseOwner !== owner) continue;
      batches++;
      const d = await direct.get(b.id);
      if (rx.byBatch.has(d.key)) delivered += d.itemList.length;
    }
  }
  return { batches, delivered };
}

async function scenario({ name, quick, storeOptions, storeTimeoutMs }) {
  const cutMs = quick ? 6_000 : 15_000;
  const leaseMs = quick ? 2_000 : 5_000;
  const schema = `relent_bench_faults_${process.pid}_${Date.now().toString(36)}`;
  const rx = await receiver();
  const direct = await openPostgresStore({ connectionString: PG_URL, schema });
  const target = new URL(PG_URL);
  const proxy = await createFaultProxy({ target: `${target.hostname}:${target.port || 5432}`, seed: 1 });
  const events = [];
  const enqueued = new Set();
  const workers = [];
  const stores = [];
  const destinations = {
    sink: { url: rx.url, policy: 'adobe-best-effort', batch: { maxItems: 10, maxAgeMs: 100 }, concurrency: { initial: 8, adaptive: false } },
  };
  for (const id of ['A', 'B']) {
    const store = await openPostgresStore({ connectionString: proxy.via(PG_URL), schema, ...storeOptions });
    stores.push(store);
    const http = createHttpTransport();
    const transport = (req) => http({ ...req, headers: { ...req.headers, 'x-bench-worker': id } });
    const w = createWorker({
      store,
      destinations,
      leaseMs,
      workerId: id,
      transport,
      ...(storeTimeoutMs !== undefined ? { storeTimeoutMs } : {}),
      onEvent: (e) => {
        if (e.type !== 'attempt') events.push({ at: Date.now(), worker: id, ...e });
      },
    });
    workers.push({ id, w, http });
  }
  // The load: a backlog, then 200 items/s written straight to PostgreSQL (the producers are not cut off).
  let seq = 0;
  const produce = async (n) => {
    const items = Array.from({ length: n }, () => ({ destination: 'sink', key: `i${seq++}`, payload: '{"x":1}' }));
    await direct.enqueue(items, Date.now());
    for (const it of items) enqueued.add(it.key);
  };
  await produce(500);
  let producing = true;
  const producer = (async () => {
    while (producing) {
      await produce(10);
      await sleep(50);
    }
  })();
  for (const { w } of workers) w.start();
  await sleep(3_000);
  const cutAt = Date.now();
  proxy.set({ blackhole: true });
  await sleep(cutMs);
  const healAt = Date.now();
  proxy.set({ blackhole: false });
  await sleep(3_000);
  // A stops in the window after the heal; B carries on.
  const [a, b] = workers;
  const aStop = await a.w.stop();
  const aLeft = await leftLeased(direct, rx, 'A');
  await sleep(2_000);
  producing = false;
  await producer;
  const drainUntil = Date.now() + (quick ? 30_000 : 60_000);
  while (Date.now() < drainUntil && [...enqueued].some((k) => !rx.byItem.has(k))) await sleep(100);
  await b.w.stop();
  const bLeft = await leftLeased(direct, rx);
  const firstError = events.find((e) => e.type === 'store_error' && e.at >= cutAt);
  const firstAfterHeal = events.find((e) => e.type === 'delivered' && e.at >= healAt);
  let again = 0;
  let againOther = 0;
  for (const rec of rx.byBatch.values()) {
    if (rec.n <= 1) continue;
    if (rec.workers.size > 1) againOther++;
    else again++;
  }
  const lost = [...enqueued].filter((k) => !rx.byItem.has(k)).length;
  const pc = new pg.Client({ connectionString: PG_URL });
  await pc.connect();
  const reclaimed = Number((await pc.query(`SELECT count(*) AS n FROM "${schema}".relent_batches WHERE claims > 1`)).rows[0].n);
  await pc.end();
  const secondKey = [...rx.byItem.values()].filter((s) => s.size > 1).length;
  const errorsInCut = events.filter((e) => e.type === 'store_error' && e.at >= cutAt && e.at < healAt).length;
  const row = {
    name,
    firstError: firstError ? firstError.at - cutAt : null,
    firstDelivery: firstAfterHeal ? firstAfterHeal.at - healAt : null,
    errorsInCut,
    reclaimed,
    lost,
    secondKey,
    again,
    againOther,
    leftLeased: aLeft.delivered + bLeft.delivered,
    leftLeasedBatches: aLeft.batches + bLeft.batches,
    aStop,
    items: enqueued.size,
  };
  for (const s of stores) await s.close();
  for (const { http } of workers) await http.close();
  await proxy.close();
  await rx.close();
  await direct.close();
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await c.end();
  return row;
}

function table(head, rows) {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (r) => r.map((c, i) => (i === 0 ? String(c).padEnd(w[i]) : String(c).padStart(w[i]))).join('  ');
  console.log(line(head));
  console.log(w.map((x) => '-'.repeat(x)).join('  '));
  for (const r of rows) console.log(line(r));
}

export async function main({ quick = false } = {}) {
  console.log(`\nPostgreSQL partitioned under load (node ${process.version}); load average at the start: ${load()}`);
  if (!(await reachable())) {
    console.log(`PostgreSQL at ${PG_URL} does not answer: skipped`);
    return;
  }
  const configs = [
    { name: 'defaults', storeOptions: {} },
    ...(quick ? [] : [{ name: 'defaults (again)', storeOptions: {} }]),
    { name: 'no timeouts', storeOptions: { queryTimeoutMs: 0, statementTimeoutMs: 0, keepAliveMs: 0 }, storeTimeoutMs: 3_600_000 },
  ];
  const rows = [];
  for (const cfg of configs) {
    const t0 = Date.now();
    try {
      rows.push(await scenario({ ...cfg, quick }));
    } catch (e) {
      console.log(`${cfg.name}: did not finish: ${e instanceof Error ? e.message : String(e)}`);
    }
    console.log(`(${cfg.name}: ${((Date.now() - t0) / 1000).toFixed(0)} s)`);
  }
  console.log(
    `\n${quick ? 6 : 15} s partition (proxy blackhole), lease ${quick ? 2 : 5} s, 2 workers, 200 items/s + 500 queued, batches of 10; A stopped 3 s after the heal`,
  );
  table(
    [
      'configuration',
      'first store_error after cut (<= 5 s)',
      'store_errors in cut',
      'first delivery after heal (<= 2 s)',
      'items',
      'claimed again',
      'lost (0)',
      'under a 2nd key (0)',
      'sent again, same worker (0)',
      'sent again, lease taken by the other',
      'delivered items left leased after stop() (0)',
    ],
    rows.map((r) => [
      r.name,
      secs(r.firstError),
      r.errorsInCut,
      secs(r.firstDelivery),
      r.items,
      r.reclaimed,
      r.lost,
      r.secondKey,
      r.again,
      r.againOther,
      `${r.leftLeased} (${r.leftLeasedBatches} batches)`,
    ]),
  );
  console.log(`\nload average at the end: ${load()}`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main({ quick: process.argv.includes('--quick') });
}
