// relent/fleet on real infrastructure: a Redis Cluster of 3 masters + 3
// replicas, a slow and lossy link to Redis, a partition. Ten processes (child processes,
// bench/workers/fleet-faults-child.mjs) each call the dependencies at a steady offered
// load; the dependencies are loopback node:http servers that count first attempts and
// retries. Sections (`npm run bench -- fleet-faults cluster slow partition`):
//  1. cluster: 3 dependencies on 3 different masters, each failing 100 % for 15 s — on one
//     Redis, then on the cluster (retries, joins, breakers); then kill -9 of a master under
//     load (errors, time to be shared again after the promotion); `url:` to a node.
//  2. slow: Redis behind the fault proxy (relent/testing/proxy) at 100 ± 20 ms each way and
//     10 % loss, default fleet options: retries against separate budgets, mode changes.
//  3. partition: Redis in a network namespace cut off for 10 s (iptables DROP both ways;
//     the fault proxy's blackhole when not root), then healed: time to be shared again,
//     retries over the whole run against the documented bound.
// Starts its own redis-servers (test/fleet/servers.mjs), never touches 6379. Run after
// `npm run build`. --quick: shorter runs.
import { spawn } from 'node:child_process';
import http from 'node:http';
import { loadavg } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { namespacedRedis, namespacesUnavailable, ownCluster, ownRedis, sleep } from '../test/fleet/servers.mjs';

const P = 10;
const CHILD = fileURLToPath(new URL('./workers/fleet-faults-child.mjs', import.meta.url));
const load = () =>
  loadavg()
    .map((x) => x.toFixed(1))
    .join(' ');
/** relent's default budget: ratio 0.1, 1 token/s, 10 tokens; a lease of 1 per process. */
const BUDGET = { ratio: 0.1, minPerSecond: 1, maxTokens: 10, lease: 1 };

function table(title, head, rows, note) {
  const cells = [head, ...rows].map((r) => r.map((c) => String(c)));
  const w = head.map((_, i) => Math.max(...cells.map((r) => r[i].length)));
  console.log(`\n${title}`);
  console.log(cells[0].map((c, i) => c.padEnd(w[i])).join('  '));
  console.log(w.map((n) => '-'.repeat(n)).join('  '));
  for (const r of cells.slice(1)) console.log(r.map((c, i) => (i === 0 ? c.padEnd(w[i]) : c.padStart(w[i]))).join('  '));
  if (note) console.log(note);
}

/** A dependency: answers by `answer()`, counts first attempts and retries. */
async function dependency(name) {
  const d = { name, first: 0, retries: 0, answer: () => 503, server: null, url: '' };
  d.server = http.createServer((req, res) => {
    req.resume();
    const attempt = Number(req.headers['x-relent-attempt'] ?? 1);
    if (attempt > 1) d.retries++;
    else d.first++;
    res.statusCode = d.answer();
    res.end('x');
  });
  d.server.keepAliveTimeout = 120_000;
  await new Promise((r) => d.server.listen(0, '127.0.0.1', r));
  d.url = `http://127.0.0.1:${d.server.address().port}/work`;
  d.reset = () => {
    d.first = 0;
    d.retries = 0;
  };
  return d;
}

/**
 * Runs P children with `cfg` until each has finished `durationMs` of calls; `during(live)`
 * runs meanwhile (live.events: every child's mode and dependency events as they come).
 */
async function fleetRun(cfg, during) {
  const kids = [];
  const ready = [];
  const done = [];
  const live = { events: [], startedAt: 0 };
  for (let i = 0; i < P; i++) {
    const k = spawn(process.execPath, [CHILD, JSON.stringify({ ...cfg, index: i })], { stdio: ['pipe', 'pipe', 'inherit'] });
    k.stdin.on('error', () => {});
    kids.push(k);
    let out = '';
    let onReady;
    let onDone;
    ready.push(new Promise((r) => (onReady = r)));
    done.push(
      new Promise((r, reject) => {
        onDone = r;
        k.on('exit', (code) => (code === 0 ? null : reject(new Error(`child ${i} exited with ${code}`))));
      }),
    );
    k.stdout.on('data', (chunk) => {
      out += chunk;
      const lines = out.split('\n');
      out = lines.pop();
      for (const l of lines) {
        const m = JSON.parse(l);
        if (m.ready) onReady(m);
        else if (m.mode !== undefined || m.dep !== undefined) live.events.push({ child: i, ...m });
        else onDone(m);
      }
    });
  }
  const joined = await Promise.all(ready);
  live.startedAt = Date.now();
  for (const k of kids) k.stdin.write('go\n');
  if (during) await during(live);
  const summaries = await Promise.all(done);
  return { summaries, live, joined: joined.filter((j) => j.joined).length };
}

const sum = (xs) => xs.reduce((a, b) => a + b, 0);
const rejected = (summaries) => sum(summaries.map((s) => sum(Object.values(s.rejections))));
const fmt = (ms) => (Number.isFinite(ms) ? `${Math.round(ms)} ms` : '—');

/** Three names whose fleet keys sit on three different masters (test/fleet/support.ts namesOnMasters, in JavaScript). */
async function namesOnMasters(cluster, prefix) {
  const { keySlot } = await import('../dist/fleet/slot.js');
  const masters = await cluster.masters();
  const slots = await cluster.node(masters[0]).cluster('SLOTS');
  const out = new Map();
  for (let i = 0; out.size < masters.length && i < 10_000; i++) {
    const name = `dep-${i}`;
    const slot = keySlot(`${prefix}{${name}}:budget`);
    const hit = slots.find(([a, b]) => slot >= a && slot <= b);
    if (hit && !out.has(Number(hit[2][1]))) out.set(Number(hit[2][1]), name);
  }
  return out;
}

// --- 1. the cluster ----------------------------------------------------------------------

async function clusterSection(quick) {
  const durationMs = quick ? 6000 : 15_000;
  const rate = 10; // per dependency, per process
  const cluster = await ownCluster();
  const single = await ownRedis();
  const deps = [];
  try {
    const prefix = `bench-faults:${process.pid}:`;
    const names = [...(await namesOnMasters(cluster, prefix)).entries()];
    for (const [, name] of names) deps.push(await dependency(name));
    const breaker = { failureRatio: 0.5, minimumThroughput: 200, windowMs: 10_000, openMs: 3000 };
    const runs = [];
    for (const [label, redis, withBreaker] of [
      ['one Redis', { url: single.url }, false],
      ['Redis Cluster', { cluster: cluster.urls }, false],
      ['Redis Cluster + breaker', { cluster: cluster.urls }, true],
    ]) {
      for (const d of deps) {
        d.reset();
        d.answer = () => 503;
      }
      const r = await fleetRun({
        redis,
        prefix: `${prefix}${runs.length}:`,
        deps: deps.map((d) => ({ name: d.name, url: d.url })),
        rate,
        durationMs,
        breaker: withBreaker ? breaker : false,
      });
      const perDep = deps.map((d) => {
        const opens = r.summaries.map((s) => s.breakerChanges.find((c) => c.dep === d.name && c.to === 'open')?.t ?? Infinity);
        const opened = opens.filter(Number.isFinite);
        const shared = r.summaries.filter((s) => s.stats?.budgets[d.name]?.mode === 'fleet' && s.stats?.budgets[d.name]?.processes === P).length;
        return {
          name: d.name,
          first: d.first,
          retries: d.retries,
          opened: withBreaker ? opened.length : null,
          spread: Math.max(...opened) - Math.min(...opened),
          shared,
        };
      });
      runs.push({ label, r, perDep });
    }
    const [one, clu] = runs;
    const rows = [];
    for (const run of runs) {
      for (const d of run.perDep) {
        rows.push([
          run.label,
          d.name,
          `${d.shared}/${P}`,
          d.first,
          d.retries,
          d.opened === null ? '—' : `${d.opened}/${P}`,
          d.opened === null ? '—' : fmt(d.spread),
        ]);
      }
      const fb = sum(run.r.summaries.map((s) => s.stats?.fallbacks ?? 0));
      rows.push([
        run.label,
        'all',
        `joined ${run.r.joined}/${P}`,
        sum(run.perDep.map((d) => d.first)),
        sum(run.perDep.map((d) => d.retries)),
        `problems ${sum(run.r.summaries.map((s) => s.problems.length))}`,
        `fallbacks ${fb}`,
      ]);
    }
    const ratio = sum(clu.perDep.map((d) => d.retries)) / Math.max(1, sum(one.perDep.map((d) => d.retries)));
    table(
      `Redis Cluster (3 masters + 3 replicas) against one Redis: ${P} processes × 3 dependencies × ${rate} calls/s, each dependency on its own master, failing 100 % for ${durationMs / 1000} s; relent's default policy and budget; the last run with breakers ${JSON.stringify(breaker)} (load ${load()})`,
      ['store', 'dependency', 'shared by', 'first attempts', 'retries', 'breaker open in', 'first → last open'],
      rows,
      `retries on the cluster ÷ on one Redis (budgets only): ${ratio.toFixed(2)} (goal ≤ 1.2). Bound per dependency (one floor + ${P} leases): ${BUDGET.maxTokens + (BUDGET.minPerSecond * durationMs) / 1000 + P * BUDGET.lease}; separate budgets: ${P * (BUDGET.maxTokens + (BUDGET.minPerSecond * durationMs) / 1000)}.`,
    );

    // kill -9 of the master of the first dependency, under load.
    const [victim, victimDep] = names[0];
    for (const d of deps) {
      d.reset();
      d.answer = () => (Math.random() < 0.1 ? 503 : 200);
    }
    let killedAt = 0;
    let promotedAt = 0;
    const kill = await fleetRun(
      {
        redis: { cluster: cluster.urls },
        prefix: `${prefix}k:`,
        deps: deps.map((d) => ({ name: d.name, url: d.url })),
        rate,
        durationMs: quick ? 8000 : 12_000,
      },
      async () => {
        await sleep(3000);
        killedAt = Date.now();
        await cluster.kill(victim);
        await cluster.failedOver(victim);
        promotedAt = Date.now();
      },
    );
    const after = (child, dep, shared, since) =>
      kill.live.events.find((e) => e.child === child && e.dep === dep && e.shared === shared && e.t >= since)?.t ?? Infinity;
    const krows = deps.map((d) => {
      const wentLocal = Array.from({ length: P }, (_, i) => after(i, d.name, false, killedAt)).filter(Number.isFinite);
      const back = Array.from({ length: P }, (_, i) => (Number.isFinite(after(i, d.name, false, killedAt)) ? after(i, d.name, true, killedAt) : killedAt));
      const lastBack = Math.max(...back);
      return [
        d.name,
        d.name === victimDep ? `yes (${victim})` : 'no',
        `${wentLocal.length}/${P}`,
        fmt(Math.min(...wentLocal) - killedAt),
        Number.isFinite(lastBack) ? fmt(Math.max(0, lastBack - promotedAt)) : 'never',
        d.first + d.retries,
      ];
    });
    table(
      `kill -9 of a master under load (${P} processes × 3 dependencies × ${rate} calls/s, 10 % 503): promotion ${promotedAt - killedAt} ms after the kill (cluster-node-timeout 1000 ms); errors raised by relent: ${rejected(kill.summaries)}; uncaught errors and unhandled rejections: ${sum(kill.summaries.map((s) => s.problems.length))}`,
      [
        'dependency',
        'on the killed master',
        'processes that fell back',
        'first fallback after the kill',
        'all shared again after the promotion',
        'calls answered',
      ],
      krows,
      '(goal: 0 errors; shared again within 1 s of the promotion. With cluster-require-full-coverage (the default) every slot is refused from the failure report to the promotion, so dependencies on other masters may fall back too.)',
    );

    // url: to one node.
    const { createRedisFleet } = await import('../dist/fleet/index.js');
    const urows = [];
    for (const url of [cluster.urls.find((u) => !u.endsWith(`:${victim}`)), `${cluster.urls.find((u) => !u.endsWith(`:${victim}`))}/1`]) {
      const f = createRedisFleet({ url, prefix: `${prefix}u:` });
      const joined = await f.ready(5000);
      const s = f.stats();
      urows.push([url, joined ? 'joined' : 'not joined', s.store, s.reason ?? '']);
      await f.close();
    }
    table('`url:` pointing at one cluster node', ['url', 'ready()', 'store', 'reason'], urows);
    return { ratio, runs: runs.map((r) => r.perDep), kill: krows };
  } finally {
    for (const d of deps) d.server.close();
    await cluster.stop();
    await single.stop();
  }
}

// --- 2. a slow, lossy link ---------------------------------------------------------------

async function slowSection(quick) {
  const durationMs = quick ? 6000 : 15_000;
  const rate = 10;
  const { createFaultProxy } = await import('../dist/testing/proxy.js');
  const redis = await ownRedis();
  const proxy = await createFaultProxy({ target: `127.0.0.1:${redis.port}`, seed: 20, faults: { latencyMs: 100, jitterMs: 20, lossRate: 0.1 } });
  const dep = await dependency('slow-dep');
  try {
    const rows = [];
    const out = {};
    for (const separate of [false, true]) {
      dep.reset();
      const r = await fleetRun({
        redis: { url: `redis://127.0.0.1:${proxy.port}` },
        separate,
        prefix: `bench-slow:${process.pid}:`,
        deps: [{ name: dep.name, url: dep.url }],
        rate,
        durationMs,
      });
      const changes = Array.from(
        { length: P },
        (_, i) => r.live.events.filter((e) => e.child === i && e.mode !== undefined && e.t >= r.live.startedAt && e.reason !== 'the fleet was closed').length,
      );
      const rtt = r.summaries
        .map((s) => s.stats?.rtt.avg)
        .filter((x) => typeof x === 'number')
        .sort((a, b) => a - b);
      const shared = r.summaries.filter((s) => s.stats?.budgets[dep.name]?.mode === 'fleet').length;
      out[separate ? 'separate' : 'fleet'] = { retries: dep.retries, changes };
      const why = r.live.events
        .filter((e) => e.mode === 'local' && e.t >= r.live.startedAt && e.reason !== 'the fleet was closed')
        .map((e) => `${e.t - r.live.startedAt} ms: ${e.reason}`);
      if (why.length > 0) out.reasons = why;
      rows.push([
        separate ? 'a budget per process' : 'fleet (defaults)',
        separate ? '—' : `${r.joined}/${P}`,
        separate ? '—' : `${shared}/${P}`,
        dep.first,
        dep.retries,
        separate ? '—' : `${Math.max(...changes)} (total ${sum(changes)})`,
        separate ? '—' : `${Math.round(rtt[rtt.length >> 1] ?? 0)} ms`,
      ]);
    }
    table(
      `Redis behind the fault proxy: 100 ± 20 ms each way, 10 % loss (a lost segment and what follows it 200 ms+ late); ${P} processes × ${rate} calls/s, a dependency failing 100 % for ${durationMs / 1000} s (load ${load()})`,
      ['budget', 'joined', 'shared at the end', 'first attempts', 'retries', 'fleet_mode changes per process (max)', 'median sync rtt'],
      rows,
      `fleet ÷ separate retries: ${(out.fleet.retries / Math.max(1, out.separate.retries)).toFixed(2)} (goal ≤ 1); goal ≤ 2 mode changes per process in 15 s.${out.reasons ? `\nfallbacks: ${out.reasons.join('; ')}` : ''}`,
    );
    return out;
  } finally {
    dep.server.close();
    await proxy.close();
    await redis.stop();
  }
}

// --- 3. a partition ----------------------------------------------------------------------

async function partitionSection(quick) {
  const cutMs = 10_000;
  const beforeMs = quick ? 3000 : 5000;
  const afterMs = quick ? 4000 : 5000;
  const durationMs = beforeMs + cutMs + afterMs;
  const rate = 10;
  const why = await namespacesUnavailable();
  let redis;
  let proxy = null;
  let how;
  if (why === null) {
    redis = await namespacedRedis();
    how = 'a network namespace, iptables DROP both ways';
  } else {
    const { createFaultProxy } = await import('../dist/testing/proxy.js');
    const own = await ownRedis();
    proxy = await createFaultProxy({ target: `127.0.0.1:${own.port}` });
    redis = {
      url: `redis://127.0.0.1:${proxy.port}`,
      partition: async () => proxy.set({ blackhole: true }),
      heal: async () => proxy.set({ blackhole: false }),
      stop: () => own.stop(),
    };
    how = `the fault proxy's blackhole (no namespaces: ${why})`;
  }
  const dep = await dependency('cut-dep');
  try {
    let cutAt = 0;
    let healedAt = 0;
    const r = await fleetRun(
      { redis: { url: redis.url }, prefix: `bench-cut:${process.pid}:`, deps: [{ name: dep.name, url: dep.url }], rate, durationMs },
      async () => {
        await sleep(beforeMs);
        await redis.partition();
        cutAt = Date.now();
        await sleep(cutMs);
        await redis.heal();
        healedAt = Date.now();
      },
    );
    const back = Array.from(
      { length: P },
      (_, i) => r.live.events.find((e) => e.child === i && e.dep === dep.name && e.shared === true && e.t >= healedAt)?.t ?? Infinity,
    );
    const local = Array.from(
      { length: P },
      (_, i) => r.live.events.find((e) => e.child === i && e.dep === dep.name && e.shared === false && e.t >= cutAt)?.t ?? Infinity,
    );
    const t = durationMs / 1000;
    const bound = BUDGET.maxTokens + BUDGET.minPerSecond * t + BUDGET.ratio * 0 + P * BUDGET.lease;
    const sorted = back.map((x) => x - healedAt).sort((a, b) => a - b);
    table(
      `A ${cutMs / 1000} s partition from Redis (${how}), then healed; ${P} processes × ${rate} calls/s, a dependency failing 100 % for the whole ${t} s; default fleet options (load ${load()})`,
      ['measure', 'value'],
      [
        [
          'every process fell back, after the cut',
          `${local.filter(Number.isFinite).length}/${P}, ${fmt(Math.min(...local) - cutAt)} – ${fmt(Math.max(...local) - cutAt)}`,
        ],
        ['shared again after the heal (median / slowest)', `${fmt(sorted[P >> 1])} / ${fmt(sorted[P - 1])}`],
        ['retries over the run', dep.retries],
        ['the documented bound (one floor + P leases)', bound],
        ['separate budgets would allow', P * (BUDGET.maxTokens + BUDGET.minPerSecond * t)],
        ['errors raised by relent', rejected(r.summaries)],
      ],
      '(goals: every process shared again ≤ 2 s after the heal; retries within the bound.)',
    );
    return { back: sorted, retries: dep.retries, bound };
  } finally {
    dep.server.close();
    await redis.stop();
    await proxy?.close();
  }
}

export async function main({ quick = false, only = [] } = {}) {
  const want = (s) => only.length === 0 || only.includes(s);
  console.log(`fleet under faults: node ${process.version}, load ${load()}${quick ? ' (quick)' : ''}`);
  const out = {};
  if (want('cluster')) out.cluster = await clusterSection(quick);
  if (want('slow')) out.slow = await slowSection(quick);
  if (want('partition')) out.partition = await partitionSection(quick);
  return out;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main({ quick: process.argv.includes('--quick'), only: process.argv.slice(2).filter((a) => !a.startsWith('--')) });
}
