// The exchange under load: auctions per second and answer time against the deadline,
// with 8 partners on loopback (5 answering in 5–80 ms, one declining with nbr, one that
// hangs, one that fails), driven by a separate load-generating process. Counts answers
// written more than 5 ms after their auction's deadline (goal: zero) and the exchange
// process's memory at the start and the end of the run (full run 60 s, --quick 5 s).
//
// Three processes, so that no side shares an event loop with another: this one runs the
// exchange (what is measured); a child runs the 8 bidders; a child generates the load
// (a closed loop of requests in flight, tmax 150 ms): 8 in flight for the measured run,
// then 32 for a short overload run. Run after
// `npm run build` (imports ../dist): `node bench/rtb.mjs [--quick]`, or through
// `npm run bench` (bench/run.mjs calls main()).
import { fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import v8 from 'node:v8';
import vm from 'node:vm';
import { fileURLToPath, pathToFileURL } from 'node:url';

const CONCURRENCY = Number(process.env.RTB_BENCH_CONCURRENCY ?? 8);
const TMAX = 150;

/** The 8 simulated partners: bidder config + the exchange's partner settings. */
const PARTNERS = [
  { bidder: { name: 'fast-a', latency: { kind: 'lognormal', medianMs: 5, p99Ms: 15 }, price: { kind: 'uniform', min: 0.5, max: 1.5 }, noBidRate: 0.2 }, timeoutMs: 60 },
  { bidder: { name: 'fast-b', latency: { kind: 'lognormal', medianMs: 10, p99Ms: 25 }, price: { kind: 'uniform', min: 0.5, max: 1.8 }, noBidRate: 0.3 }, timeoutMs: 60 },
  { bidder: { name: 'medium', latency: { kind: 'lognormal', medianMs: 20, p99Ms: 50 }, price: { kind: 'uniform', min: 0.8, max: 2.0 }, noBidRate: 0.2 }, timeoutMs: 80 },
  { bidder: { name: 'nbr', latency: { kind: 'uniform', minMs: 2, maxMs: 20 }, noBidRate: 0.8, nbrShare: 1, nbr: [2, 5, 8] }, timeoutMs: 60 },
  { bidder: { name: 'slow-a', latency: { kind: 'lognormal', medianMs: 45, p99Ms: 110 }, price: { kind: 'uniform', min: 1, max: 3 } }, timeoutMs: 90 },
  { bidder: { name: 'slow-b', latency: { kind: 'uniform', minMs: 30, maxMs: 80 }, price: { kind: 'uniform', min: 1, max: 2.5 } }, timeoutMs: 90 },
  { bidder: { name: 'hangs', failures: { hang: 1 }, maxConcurrency: 100_000 }, timeoutMs: 80 },
  { bidder: { name: 'failing', latency: { kind: 'fixed', ms: 3 }, failures: { error500: 0.8, reset: 0.1 } }, timeoutMs: 80 },
];

async function runBidders() {
  const { createBidder } = await import('../dist/rtb/index.js');
  const bidders = PARTNERS.map((p, i) => createBidder({ ...p.bidder, seed: i + 1, maxConcurrency: p.bidder.maxConcurrency ?? 10_000 }));
  const urls = [];
  for (const b of bidders) urls.push((await b.listen(0, '127.0.0.1')).url);
  process.send({ type: 'ready', urls });
  process.on('message', async (m) => {
    if (m.type !== 'stop') return;
    const stats = bidders.map((b) => ({ name: b.config.name, ...b.stats() }));
    await Promise.all(bidders.map((b) => b.close()));
    process.send({ type: 'stats', stats }, () => process.exit(0));
  });
  process.on('disconnect', () => process.exit(0));
}

async function runLoadgen() {
  const { Agent } = await import('undici');
  process.on('disconnect', () => process.exit(0));
  const m = await new Promise((resolve) => process.once('message', resolve));
  const agent = new Agent({ connections: m.concurrency, keepAliveTimeout: 30_000 });
  const u = new URL(m.url);
  const lat = [];
  const statuses = {};
  let errors = 0;
  let overTmax = 0;
  let n = 0;
  let counting = false;
  const end = performance.now() + m.warmupMs + m.durationMs;
  setTimeout(() => {
    counting = true;
    process.send({ type: 'measuring' });
  }, m.warmupMs);
  const worker = async (w) => {
    // Ramp up over the first half of the warm-up: connections and JIT warm before the full load.
    await new Promise((r) => setTimeout(r, (w * m.warmupMs) / 2 / m.concurrency));
    while (performance.now() < end) {
      const id = `bench-${w}-${++n}`;
      const imps = n % 4 === 0 ? [{ id: '1', bidfloor: 0.5 }, { id: '2', bidfloor: 0.2 }] : [{ id: '1', bidfloor: 0.5 }];
      const body = JSON.stringify({ id, imp: imps, tmax: m.tmax, site: { domain: 'bench.example', publisher: { id: `pub-${n % 7}` } }, device: { ua: 'bench', ip: '10.0.0.1' } });
      const t0 = performance.now();
      const was = counting;
      try {
        const res = await agent.request({ origin: u.origin, path: u.pathname, method: 'POST', headers: { 'content-type': 'application/json' }, body });
        await res.body.dump();
        const ms = performance.now() - t0;
        if (was && counting) {
          lat.push(ms);
          statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
          if (ms > m.tmax) overTmax++;
        }
      } catch {
        if (was) errors++;
      }
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: m.concurrency }, (_, w) => worker(w)));
  const seconds = (performance.now() - t0 - m.warmupMs) / 1000;
  lat.sort((a, b) => a - b);
  const q = (p) => (lat.length === 0 ? 0 : lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]);
  process.send({ type: 'result', count: lat.length, seconds, statuses, errors, overTmax, p50: q(0.5), p90: q(0.9), p99: q(0.99), max: lat[lat.length - 1] ?? 0 }, () => process.exit(0));
  await agent.close();
}

const mb = (b) => `${(b / 1024 / 1024).toFixed(1)} MB`;

/** A full GC, so that heap figures compare live objects, not how much garbage waits (benchmark only). */
let gcFn = null;
function fullGc() {
  if (gcFn === null) {
    v8.setFlagsFromString('--expose-gc');
    gcFn = vm.runInNewContext('gc');
  }
  gcFn();
}
function memAfterGc() {
  fullGc();
  return process.memoryUsage();
}

/** One measured run: a fresh bidders process, a fresh exchange, a load generator with `concurrency` requests in flight. */
async function phase({ concurrency, durationMs, warmupMs }) {
  const { createExchange, Histogram } = await import('../dist/rtb/index.js');
  const self = fileURLToPath(import.meta.url);
  const bidders = fork(self, ['--rtb-bidders'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const ready = await new Promise((resolve) => bidders.once('message', resolve));
  // The exchange's own view of the measured window: arrival → answer written, against each auction's deadline.
  const measured = { on: false, answer: new Histogram(), after: 0, worst: 0, count: 0 };
  const onAuction = (a) => {
    if (!measured.on || a.deadlineMs === null) return;
    measured.count++;
    measured.answer.record(a.usedMs);
    const over = a.usedMs - a.deadlineMs;
    if (over > 5) measured.after++;
    if (over > measured.worst) measured.worst = over;
  };
  const exchange = createExchange({
    auctionTimeoutMs: 100,
    reserveMs: 15,
    notices: { win: 'source', billing: 'source' },
    // A breaker sized for the traffic: ≥ 200 calls in 5 s before the failure share counts.
    partners: PARTNERS.map((p, i) => ({
      name: p.bidder.name, url: ready.urls[i], timeoutMs: p.timeoutMs, maxConcurrency: 256,
      breaker: { minimumThroughput: 200, windowMs: 5_000, openMs: 2_000 },
    })),
  }, { onAuction });
  const info = await exchange.listen(0, '127.0.0.1');
  const loadgen = fork(self, ['--rtb-loadgen'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const mem = { start: null, end: null, peakRss: 0 };
  const sampler = setInterval(() => {
    const m = process.memoryUsage();
    if (m.rss > mem.peakRss) mem.peakRss = m.rss;
  }, 500);
  // The live heap every 10 s of the measured run (after a full GC): flat means no leak.
  const heapTrail = [];
  let trail = null;
  let base = null;
  let cpu0 = null;
  const loop = monitorEventLoopDelay({ resolution: 5 });
  const load = loadavg()[0];
  const resultP = new Promise((resolve) => loadgen.on('message', (m) => {
    if (m.type === 'measuring') {
      mem.start = memAfterGc();
      heapTrail.push(mem.start.heapUsed);
      trail = setInterval(() => heapTrail.push(memAfterGc().heapUsed), 10_000);
      base = exchange.stats();
      cpu0 = process.cpuUsage();
      measured.on = true;
      loop.enable();
    } else if (m.type === 'result') resolve(m);
  }));
  loadgen.send({ url: info.url, concurrency, durationMs, warmupMs, tmax: TMAX });
  const r = await resultP;
  measured.on = false;
  loop.disable();
  const cpu = process.cpuUsage(cpu0 ?? undefined);
  if (trail) clearInterval(trail);
  mem.end = memAfterGc();
  heapTrail.push(mem.end.heapUsed);
  clearInterval(sampler);
  const s = exchange.stats();
  await exchange.close({ force: true, noticeDrainMs: 0 });
  bidders.send({ type: 'stop' });
  await new Promise((resolve) => bidders.once('message', resolve));
  const count = s.auctions.total - (base?.auctions.total ?? 0);
  return {
    concurrency, durationMs, r, s, mem, load, count, measured, heapTrail,
    cpuMsPerAuction: count === 0 ? 0 : (cpu.user + cpu.system) / 1000 / count,
    loopP99: loop.percentile(99) / 1e6,
    loopMax: loop.max / 1e6,
  };
}

export async function main({ quick = false } = {}) {
  const { cpus } = await import('node:os');
  // The run: moderate load for the full duration (memory must stay flat); then a short
  // overload run (32 in flight) to show what the breakers and the deadline do when the
  // machine cannot keep up.
  const runs = [
    await phase({ concurrency: CONCURRENCY, durationMs: quick ? 5_000 : 60_000, warmupMs: quick ? 1_000 : 3_000 }),
    await phase({ concurrency: 32, durationMs: quick ? 3_000 : 15_000, warmupMs: 1_000 }),
  ];
  const rows = [
    ['load generator: requests in flight', (x) => `${x.concurrency}`],
    ['measured for', (x) => `${(x.r.seconds).toFixed(1)} s`],
    ['auctions / s (at the source)', (x) => `${Math.round(x.r.count / x.r.seconds)}`],
    ['answer at the source p50 / p99 / max (ms)', (x) => `${x.r.p50.toFixed(1)} / ${x.r.p99.toFixed(1)} / ${x.r.max.toFixed(1)}`],
    ['answer in the exchange p50 / p99 / max (ms)', (x) => `${x.measured.answer.quantile(0.5)} / ${x.measured.answer.quantile(0.99)} / ${x.measured.answer.max.toFixed(1)}`],
    ['auction deadline (ms)', () => '100'],
    ['answers > deadline + 5 ms', (x) => `${x.measured.after} of ${x.measured.count}${x.measured.after ? ` (worst +${x.measured.worst.toFixed(1)} ms)` : ''}`],
    ['  … in the warm-up (JIT, new connections)', (x) => `${x.s.auctions.afterDeadline - x.measured.after}`],
    ['answers > tmax (150 ms) at the source', (x) => `${x.r.overTmax}`],
    ['source statuses', (x) => Object.entries(x.r.statuses).map(([k, v]) => `${k}×${v}`).join(' ') + (x.r.errors ? ` err×${x.r.errors}` : '')],
    ['exchange CPU per auction (ms)', (x) => x.cpuMsPerAuction.toFixed(2)],
    ['event-loop delay p99 / max (ms)', (x) => `${x.loopP99.toFixed(1)} / ${x.loopMax.toFixed(1)}`],
    ['RSS start → end (peak)', (x) => `${mb(x.mem.start?.rss ?? 0)} → ${mb(x.mem.end.rss)} (${mb(x.mem.peakRss)})`],
    ['heap after full GC, start → end', (x) => `${mb(x.mem.start?.heapUsed ?? 0)} → ${mb(x.mem.end.heapUsed)}`],
    ['1-min load average at start', (x) => `${x.load.toFixed(2)} on ${cpus().length} cores`],
  ];
  const w = Math.max(...rows.map((x) => x[0].length));
  const cols = runs.map((x) => rows.map(([, f]) => f(x)));
  const cw = cols.map((c) => Math.max(...c.map((v) => v.length), 12));
  console.log(`\nOpenRTB exchange, 8 partners on loopback (5 answering in 5–80 ms, 1 declining with nbr, 1 hanging, 1 failing); bidders and load generator in their own processes; tmax ${TMAX}, deadline 100 ms${quick ? ' (quick)' : ''}; node ${process.version}`);
  console.log(`${'metric'.padEnd(w)}  ${['steady', 'overload'].map((h, i) => h.padEnd(cw[i])).join('  ')}`);
  console.log(`${'-'.repeat(w)}  ${cw.map((n) => '-'.repeat(n)).join('  ')}`);
  rows.forEach(([k], i) => console.log(`${k.padEnd(w)}  ${cols.map((c, j) => c[i].padEnd(cw[j])).join('  ')}`));
  console.log(`\nlive heap after a full GC during the steady run, every 10 s (MB): ${runs[0].heapTrail.map((h) => (h / 1024 / 1024).toFixed(1)).join(' ')}`);
  const pw = Math.max(...runs[0].s.partners.map((p) => p.name.length), 7);
  for (const [label, x] of [['steady', runs[0]], ['overload', runs[1]]]) {
    console.log(`\n${label} run, per partner (warm-up included)\n${'partner'.padEnd(pw)}  timeout  calls    bids  no-bid  errors  timeouts (late)  skipped open/full/time  p50/p99 ms  breaker`);
    for (const p of x.s.partners) {
      console.log(`${p.name.padEnd(pw)}  ${String(p.timeoutMs).padStart(7)}  ${String(p.calls).padStart(5)}  ${String(p.bidAnswers).padStart(6)}  ${String(p.noBids).padStart(6)}  ${String(p.errors).padStart(6)}  ${`${p.timeouts} (${p.late})`.padStart(15)}  ${`${p.skipped.circuit_open}/${p.skipped.at_capacity}/${p.skipped.no_time}`.padStart(22)}  ${`${Math.round(p.latency.p50Ms)}/${Math.round(p.latency.p99Ms)}`.padStart(10)}  ${p.breaker}`);
    }
  }
}

if (process.argv.includes('--rtb-bidders')) await runBidders();
else if (process.argv.includes('--rtb-loadgen')) await runLoadgen();
else if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main({ quick: process.argv.includes('--quick') });
}
