// relent/fleet: what sharing a budget and a breaker through Redis costs, and what it buys.
//  1. The success path: run() with the fleet's budget (and breaker) against the
//     in-process ones, same run (goal: within 2x of the local budget).
//  2. Redis round trips per 1,000 calls at a steady offered load: createClient({ fleet })
//     against a loopback node:http server (in a child process), all answers 200, and with
//     2 % 503s (goal: at most 10 per 1,000 calls).
//  3. The acceptance figure at full size: 10 processes, 20 ops/s each, a dependency that
//     fails 100 % for 20 s: calls it receives with one shared budget and with a budget
//     per process (--quick: 5 s).
// Needs Redis at RELENT_BENCH_REDIS (default redis://127.0.0.1:6379); skipped without it.
// Run after `npm run build` (imports ../dist): `node bench/fleet.mjs [--quick]`, or
// through `npm run bench` (bench/run.mjs calls main()).
import { fork } from 'node:child_process';
import http from 'node:http';
import { loadavg } from 'node:os';
import { pathToFileURL } from 'node:url';
import { compare, connectRedis, printTable } from './harness.mjs';

const REDIS_URL = process.env.RELENT_BENCH_REDIS ?? 'redis://127.0.0.1:6379';
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function dropPrefix(prefix) {
  const { Redis } = await import('ioredis');
  const r = new Redis(REDIS_URL);
  let cursor = '0';
  do {
    const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await r.del(...keys);
  } while (cursor !== '0');
  r.disconnect();
}

// --- 1. the success path --------------------------------------------------------------

async function successPath(quick, prefix) {
  const { run, createRetryBudget, createCircuitBreaker, POLICY_DEFAULTS } = await import('../dist/index.js');
  const { createRedisFleet } = await import('../dist/fleet/index.js');
  const fleet = createRedisFleet({ url: REDIS_URL, prefix });
  if (!(await fleet.ready(5000))) throw new Error(`the fleet did not join Redis at ${REDIS_URL}`);
  const spec = POLICY_DEFAULTS.budget;
  const local = createRetryBudget(spec);
  const shared = fleet.budget('bench', spec);
  const localBreaker = createCircuitBreaker({});
  const sharedBreaker = fleet.breaker('bench', {});
  const op = async () => ({ status: 200 });
  const before = fleet.stats().roundTrips;
  const t0 = performance.now();
  const rows = await compare(
    [
      { name: 'run(), no budget', fn: () => run(op, { budget: null }) },
      { name: 'run() + local budget', fn: () => run(op, { budget: local }) },
      { name: 'run() + fleet budget', fn: () => run(op, { budget: shared }) },
      { name: 'run({ fleet, dependency })', fn: () => run(op, { fleet, dependency: 'bench' }) },
      { name: 'run() + local budget + breaker', fn: () => run(op, { budget: local, breaker: localBreaker }) },
      { name: 'run() + fleet budget + breaker', fn: () => run(op, { budget: shared, breaker: sharedBreaker }) },
    ],
    { iterations: quick ? 20_000 : 100_000, rounds: quick ? 5 : 9 },
  );
  const seconds = (performance.now() - t0) / 1000;
  const trips = fleet.stats().roundTrips - before;
  const mode = fleet.mode;
  await fleet.close();
  printTable(`The success path: run() of an operation that answers at once (node ${process.version}, load ${load()})`, rows, {
    baseline: 'run() + local budget',
    note: `Median of rounds; the fleet was in ${mode} mode and made ${trips} Redis round trips in ${seconds.toFixed(1)} s of these calls (in the background).`,
  });
  const local1 = rows.find((r) => r.name === 'run() + local budget');
  const fleet1 = rows.find((r) => r.name === 'run() + fleet budget');
  console.log(`fleet budget ÷ local budget: ${(fleet1.nsPerOp / local1.nsPerOp).toFixed(2)}x time (goal: within 2x)`);
  return rows;
}

// --- 2. round trips per 1,000 calls ----------------------------------------------------

function serve() {
  let n = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    n++;
    const fail = Number(req.headers['x-fail-every'] ?? 0);
    res.statusCode = fail > 0 && n % fail === 0 ? 503 : 200;
    res.end('ok');
  });
  server.keepAliveTimeout = 120_000;
  server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
  process.on('disconnect', () => process.exit(0));
}

async function roundTrips(quick, prefix) {
  const { createClient } = await import('../dist/http/index.js');
  const { createRedisFleet } = await import('../dist/fleet/index.js');
  const child = fork(new URL(import.meta.url), ['--server'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const { port } = await new Promise((r) => child.once('message', r));
  const url = `http://127.0.0.1:${port}/x`;
  const rows = [];
  try {
    for (const [rate, failEvery] of [
      [200, 0],
      [1000, 0],
      [1000, 50],
    ]) {
      const fleet = createRedisFleet({ url: REDIS_URL, prefix });
      await fleet.ready(5000);
      const client = createClient({ fleet, breaker: {} });
      const headers = { 'x-fail-every': String(failEvery) };
      const offer = async (ms) => {
        const start = performance.now();
        const every = 1000 / rate;
        let i = 0;
        const pending = [];
        while (performance.now() - start < ms) {
          while (i * every <= performance.now() - start) {
            i++;
            pending.push(
              client.fetch(url, { headers }).then(
                (r) => r.arrayBuffer(),
                () => {},
              ),
            );
          }
          await sleep(1);
        }
        await Promise.all(pending);
        return i;
      };
      await offer(1000); // warm-up: the lease and the breaker have joined
      const before = fleet.stats().roundTrips;
      const calls = await offer(quick ? 3000 : 10_000);
      const trips = fleet.stats().roundTrips - before;
      rows.push({ rate, failEvery, calls, trips, per1000: (trips / calls) * 1000, mode: fleet.mode, rtt: fleet.stats().rttMs.avg });
      await client.close();
      await fleet.close();
    }
  } finally {
    child.disconnect();
    child.kill();
  }
  console.log(`\nRedis round trips at a steady offered load: createClient({ fleet, breaker }) → loopback node:http (load ${load()})`);
  console.log('offered load   answers           calls   round trips   per 1,000 calls   avg rtt ms   mode');
  console.log('------------   ---------------   -----   -----------   ---------------   ----------   -----');
  for (const r of rows) {
    console.log(
      `${`${r.rate}/s`.padEnd(12)}   ${(r.failEvery ? `2 % 503 (retried)` : 'all 200').padEnd(15)}   ${String(r.calls).padStart(5)}   ${String(r.trips).padStart(11)}   ${r.per1000.toFixed(2).padStart(15)}   ${(r.rtt ?? 0).toFixed(2).padStart(10)}   ${r.mode}`,
    );
  }
  console.log('(goal: at most 10 round trips per 1,000 calls at steady state; one sync per syncMs = 1 s carries every dependency)');
  return rows;
}

// --- 3. the acceptance figure at full size ---------------------------------------------

async function fleetChild() {
  const cfg = JSON.parse(process.argv[process.argv.indexOf('--child') + 1]);
  const { createClient } = await import('../dist/http/index.js');
  const { createRedisFleet } = await import('../dist/fleet/index.js');
  const fleet = cfg.shared ? createRedisFleet({ url: REDIS_URL, prefix: cfg.prefix, timeoutMs: 1000 }) : null;
  const client = createClient({ fleet, policy: { deadlineMs: 60_000 } });
  if (fleet) await fleet.ready(20_000);
  process.send({ ready: true });
  await new Promise((r) => process.once('message', r));
  const start = Date.now();
  const every = 1000 / cfg.rate;
  let i = 0;
  const pending = [];
  while (Date.now() - start < cfg.durationMs) {
    while (i * every <= Date.now() - start) {
      i++;
      pending.push(
        client.fetch(cfg.url).then(
          (r) => r.arrayBuffer(),
          () => {},
        ),
      );
    }
    await sleep(5);
  }
  await Promise.all(pending);
  const fallbacks = fleet ? fleet.stats().fallbacks : 0;
  if (fleet) await fleet.close();
  await client.close();
  process.send({ done: true, fallbacks });
  process.disconnect();
}

async function fullSize(quick, prefix) {
  const P = 10;
  const rate = 20;
  const durationMs = quick ? 5000 : 20_000;
  const spec = { ratio: 0.1, minPerSecond: 1, maxTokens: 10 };
  const rows = [];
  for (const shared of [true, false]) {
    let first = 0;
    let calls = 0;
    const times = [];
    const server = http.createServer((req, res) => {
      req.resume();
      calls++;
      times.push(Date.now());
      if (req.headers['x-relent-attempt'] === '1' || /attempt-1$/.test(String(req.headers['x-request-id']))) first++;
      res.statusCode = 503;
      res.end('down');
    });
    await new Promise((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${server.address().port}/x`;
    const kids = Array.from({ length: P }, () =>
      fork(new URL(import.meta.url), ['--child', JSON.stringify({ shared, prefix, rate, durationMs, url })], {
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      }),
    );
    await Promise.all(kids.map((k) => new Promise((r) => k.once('message', r))));
    const done = kids.map((k) => new Promise((r) => k.once('message', r)));
    for (const k of kids) k.send('go');
    const ends = await Promise.all(done);
    server.close();
    const seconds = (Math.max(...times) - Math.min(...times)) / 1000;
    const floor = spec.maxTokens + spec.minPerSecond * seconds;
    rows.push({ shared, first, calls, retries: calls - first, seconds, floor, fallbacks: ends.reduce((a, e) => a + e.fallbacks, 0) });
  }
  console.log(
    `\n${P} processes × ${rate} ops/s, a dependency failing 100 % for ${durationMs / 1000} s; relent's default budget (ratio 0.1, 1/s, 10 tokens); load ${load()}`,
  );
  console.log('budget                 first attempts   retries   calls   bound (1.1 × first + one floor + 10 leases)   P floors');
  console.log('---------------------  --------------   -------   -----   -------------------------------------------   --------');
  for (const r of rows) {
    const bound = 1.1 * r.first + r.floor + P;
    console.log(
      `${(r.shared ? 'one, shared (fleet)' : 'one per process').padEnd(21)}  ${String(r.first).padStart(14)}   ${String(r.retries).padStart(7)}   ${String(r.calls).padStart(5)}   ${bound.toFixed(1).padStart(43)}   ${(P * r.floor).toFixed(1).padStart(8)}`,
    );
  }
  const s = rows[0];
  console.log(
    `shared: ${s.retries} retries = ${(s.retries / s.floor).toFixed(2)} floors (fallbacks to local: ${s.fallbacks}); per process: ${rows[1].retries} retries = ${(rows[1].retries / rows[1].floor).toFixed(2)} floors`,
  );
  return rows;
}

export async function main({ quick = false } = {}) {
  const probe = await connectRedis(REDIS_URL);
  probe?.disconnect();
  if (probe === null) {
    console.log(`\nRedis at ${REDIS_URL} unreachable: the fleet benchmarks are skipped`);
    return null;
  }
  const prefix = `relent-bench:${process.pid}:`;
  try {
    const success = await successPath(quick, prefix);
    const trips = await roundTrips(quick, prefix);
    const full = await fullSize(quick, prefix);
    return { success, trips, full };
  } finally {
    await dropPrefix(prefix);
  }
}

if (process.argv.includes('--server')) serve();
else if (process.argv.includes('--child')) await fleetChild();
else if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main({ quick: process.argv.includes('--quick') });
}
