// Slow, not failing: hedged requests and the adaptive concurrency limit, for real
// (node:http dependencies on loopback, open-loop arrivals from a seeded generator).
//   node bench/slow.mjs [--quick] [--drop-only]     (or: npm run bench -- slow [--quick])
//   SLOW_DROP_S=N sets the capacity drop's length (default 20 s; --quick: 8 s).
// 1. A slow tail: p50 5 ms, 2 % of requests 500 ms (independent per request). The
//    client's latency percentiles and the extra requests it sends: relent without
//    hedging, relent hedging at the observed p95 (maxExtraLoad 5 %, the default), and
//    the peers configured to approximate hedging (no Node library hedges): a short
//    timeout and one retry (cockatiel, got).
// 2. Capacity drops 5x for a while: a dependency with 50 workers (50 ms per request)
//    keeps 10; 400 operations/s (1 s deadline, no retries). Calls in flight, the time to
//    reach the new capacity, the dependency's own latency (queue + work) and the
//    failures: the gradient and AIMD limits, fixed bulkheads, no limit.
// Ratios within one run; absolute times depend on the machine (load average printed).
// Plain ESM over the compiled library: run `npm run build` first (npm run bench does).
import http from 'node:http';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { createClient } from '../dist/index.js';
import { createSeededRandom } from '../dist/testing/index.js';
import { textTable } from '../dist/sim/index.js';

const pct = (xs, q) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
};
const ms = (v) => (Number.isFinite(v) ? v.toFixed(1) : '-');

function listen(server) {
  server.keepAliveTimeout = 60_000;
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${server.address().port}/item`)));
}
function close(server) {
  return new Promise((r) => { server.closeAllConnections(); server.close(() => r()); });
}

/** Calls `call(i)` for ops arriving as a Poisson process at `rate`/s; resolves with each op's [start, latency, ok]. */
async function openLoop(rate, ops, seed, call) {
  const uniform = createSeededRandom(seed);
  const out = new Array(ops);
  const pending = [];
  const t0 = performance.now();
  let next = 0;
  let i = 0;
  await new Promise((resolve) => {
    const tick = () => {
      const now = performance.now() - t0;
      while (next <= now && i < ops) {
        const k = i++;
        const start = performance.now();
        pending.push(call(k).then((ok) => { out[k] = [start - t0, performance.now() - start, ok]; }, () => { out[k] = [start - t0, performance.now() - start, false]; }));
        next += -Math.log(1 - uniform()) * (1000 / rate);
      }
      if (i >= ops) return resolve();
      setTimeout(tick, Math.max(0, Math.min(4, next - now)));
    };
    tick();
  });
  await Promise.all(pending);
  return out;
}

// --- 1. the slow tail -----------------------------------------------------------------

async function slowTail(quick) {
  const RATE = 200;
  const OPS = quick ? 1500 : 6000;
  const contenders = [
    { name: 'relent, no hedging', make: relent({}) },
    { name: 'relent, hedge at p95 (maxExtraLoad 5 %)', make: relent({ hedge: { delayMs: 'p95' } }) },
    { name: 'cockatiel 3: 20 ms timeout + 1 retry', make: cockatiel },
    { name: 'got 14: 20 ms timeout + 1 retry', make: gotPeer },
  ];
  const rows = [];
  let base = null;
  for (const c of contenders) {
    const rnd = createSeededRandom(7);
    let received = 0;
    const server = http.createServer((req, res) => {
      received++;
      const slow = rnd() < 0.02;
      const t = setTimeout(() => res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 }).end('ok'), slow ? 500 : 5);
      res.on('close', () => clearTimeout(t));
    });
    const url = await listen(server);
    const impl = await c.make(url);
    // Warm-up: connections, JIT, and (for relent's percentile) the first observations.
    await openLoop(RATE, 200, 1, impl.call);
    received = 0;
    const out = await openLoop(RATE, OPS, 42, impl.call);
    await impl.close();
    await new Promise((r) => setTimeout(r, 600)); // losers still counted by the server
    await close(server);
    const lat = out.map((o) => o[1]);
    const failed = out.filter((o) => !o[2]).length;
    const r = { p50: pct(lat, 0.5), p99: pct(lat, 0.99), p999: pct(lat, 0.999), extra: received / OPS - 1, failed, hedgeStats: impl.stats?.() };
    if (base === null) base = r;
    rows.push([c.name, ms(r.p50), ms(r.p99), ms(r.p999), `${(r.extra * 100).toFixed(1)} %`, String(failed), `${(base.p99 / r.p99).toFixed(1)}x`]);
  }
  console.log(`slow tail: p50 5 ms, 2 % at 500 ms (independent), ${RATE} operations/s, ${OPS} operations per contender (after 200 of warm-up); load average ${loadavg().map((x) => x.toFixed(1)).join(' ')}`);
  console.log('client latency (ms); extra = requests the dependency received beyond one per operation; "p99 cut" = relent without hedging\'s p99 ÷ this p99');
  console.log(textTable(['contender', 'p50', 'p99', 'p99.9', 'extra', 'failed', 'p99 cut'], rows));

  function relent(policy) {
    return (url) => {
      const client = createClient({ policy: { ...policy, deadlineMs: 5000 } });
      return {
        call: async () => {
          const r = await client.fetch(url);
          await r.arrayBuffer();
          return r.status === 200;
        },
        close: () => client.close(),
      };
    };
  }
  async function cockatiel(url) {
    const { retry, handleAll, timeout, TimeoutStrategy, wrap, ConstantBackoff } = await import('cockatiel');
    const undici = await import('undici');
    const agent = new undici.Agent();
    const policy = wrap(retry(handleAll, { maxAttempts: 1, backoff: new ConstantBackoff(0) }), timeout(20, TimeoutStrategy.Aggressive));
    return {
      call: () => policy.execute(async ({ signal }) => {
        const r = await undici.request(url, { dispatcher: agent, signal });
        await r.body.arrayBuffer();
        return r.statusCode === 200;
      }),
      close: () => agent.close(),
    };
  }
  async function gotPeer(url) {
    const { default: got } = await import('got');
    const agent = new http.Agent({ keepAlive: true });
    return {
      call: async () => (await got(url, { agent: { http: agent }, timeout: { request: 20 }, retry: { limit: 1, calculateDelay: ({ attemptCount }) => (attemptCount <= 1 ? 1 : 0) } })).statusCode === 200,
      close: async () => agent.destroy(),
    };
  }
}

// --- 2. capacity drops 5x -----------------------------------------------------------

async function capacityDrop(quick) {
  const RATE = 400;
  const SERVICE_MS = 50;
  const CAPACITY = 50;
  const DEGRADED = 10;
  const dropS = process.env.SLOW_DROP_S === undefined ? null : Number(process.env.SLOW_DROP_S);
  if (dropS !== null && !(dropS >= 3 && dropS <= 600)) throw new Error(`SLOW_DROP_S: expected seconds in [3, 600], got ${process.env.SLOW_DROP_S}`);
  const phase = quick ? { before: 4000, drop: 8000, after: 4000 } : { before: 10_000, drop: 20_000, after: 10_000 };
  if (dropS !== null) phase.drop = dropS * 1000;
  const total = phase.before + phase.drop + phase.after;
  const OPS = Math.round((RATE * total) / 1000);
  const policy = { maxAttempts: 1, deadlineMs: 1000, minAttemptMs: 100 };
  const contenders = [
    { name: 'relent, gradient limit', options: { concurrencyLimit: { kind: 'gradient', initial: 20, max: 200, maxQueue: 1000 } } },
    { name: 'relent, AIMD limit (slowMs 100)', options: { concurrencyLimit: { kind: 'aimd', initial: 20, max: 200, slowMs: 100, maxQueue: 1000 } } },
    { name: 'relent, fixed bulkhead 10 (degraded capacity)', options: { bulkhead: { maxConcurrent: 10, maxQueue: 1000 } } },
    { name: 'relent, fixed bulkhead 20 (healthy need)', options: { bulkhead: { maxConcurrent: 20, maxQueue: 1000 } } },
    { name: 'relent, fixed bulkhead 50 (healthy capacity)', options: { bulkhead: { maxConcurrent: 50, maxQueue: 1000 } } },
    { name: 'no limit', options: {} },
  ];
  const rows = [];
  const results = [];
  for (const c of contenders) {
    const rnd = createSeededRandom(11);
    let t0 = 0;
    let busy = 0;
    const queue = [];
    const serverLat = []; // [arrival, latency at the dependency]
    const capacity = () => {
      const t = performance.now() - t0;
      return t >= phase.before && t < phase.before + phase.drop ? DEGRADED : CAPACITY;
    };
    const serve = () => {
      while (busy < capacity() && queue.length > 0) {
        const { res, arrived } = queue.shift();
        if (res.destroyed || res.writableEnded) continue; // its caller gave up: skipped, not served
        busy++;
        setTimeout(() => {
          busy--;
          serverLat.push([arrived - t0, performance.now() - arrived]);
          if (!res.destroyed) res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 }).end('ok');
          serve();
        }, SERVICE_MS * (0.8 + 0.4 * rnd()));
      }
    };
    const server = http.createServer((req, res) => {
      queue.push({ res, arrived: performance.now() });
      serve();
    });
    setInterval(serve, 5).unref(); // capacity coming back
    const url = await listen(server);
    const origin = new URL(url).origin;
    const client = createClient({ policy, ...c.options });
    let inFlight = 0;
    const call = async () => {
      try {
        const r = await client.fetch(url);
        await r.arrayBuffer();
        return r.status === 200;
      } finally {
        inFlight--;
      }
    };
    // Calls in flight to the dependency, every 50 ms.
    const samples = [];
    t0 = performance.now();
    const sampler = setInterval(() => {
      const limit = client.concurrencyLimits.get(origin) ?? client.bulkheads.get(origin);
      samples.push([performance.now() - t0, limit ? limit.active : inFlight, limit?.limit ?? null]);
    }, 50);
    const out = await openLoop(RATE, OPS, 5, () => {
      inFlight++;
      return call();
    });
    clearInterval(sampler);
    await client.close();
    await close(server);
    // Converged: from then on (to the end of the drop), calls in flight stay within 1.5x the new capacity.
    const dropStart = phase.before;
    const dropEnd = phase.before + phase.drop;
    let converged = null;
    for (let k = samples.length - 1; k >= 0; k--) {
      const [t, n] = samples[k];
      if (t < dropStart || t >= dropEnd) continue;
      if (n > 1.5 * DEGRADED) break;
      converged = t - dropStart;
    }
    const during = samples.filter(([t]) => t >= dropStart + 2000 && t < dropEnd).map(([, n]) => n);
    const healthy = serverLat.filter(([t]) => t < dropStart).map(([, l]) => l);
    const degraded = serverLat.filter(([t]) => t >= dropStart + 2000 && t < dropEnd).map(([, l]) => l);
    const failed = out.filter((o) => !o[2]).length;
    const failedDrop = out.filter((o) => !o[2] && o[0] >= dropStart && o[0] < dropEnd).length;
    const ratio = pct(degraded, 0.5) / pct(healthy, 0.5);
    results.push({ name: c.name, adaptive: 'concurrencyLimit' in c.options, fixed: 'bulkhead' in c.options, converged, ratio, failed });
    rows.push([
      c.name,
      converged === null ? 'never' : `${(converged / 1000).toFixed(2)} s`,
      ms(pct(during, 0.5)), ms(pct(during, 0.99)),
      ms(pct(healthy, 0.5)), ms(pct(degraded, 0.5)), `${ratio.toFixed(2)}x`,
      String(failed), String(failedDrop),
    ]);
  }
  console.log(`capacity drop: ${CAPACITY} workers (${SERVICE_MS} ms each) cut to ${DEGRADED} from ${phase.before / 1000} s for ${phase.drop / 1000} s; ${RATE} operations/s (${OPS}), 1 s deadline, no retries; load average ${loadavg().map((x) => x.toFixed(1)).join(' ')}`);
  console.log('"converged": from the drop until calls in flight stay within 1.5x the new capacity; in flight and the dependency\'s latency from 2 s after the drop; failures over the whole run and in the drop');
  console.log(textTable(['contender', 'converged', 'in flight p50', 'p99', 'dep. latency healthy p50', 'in the drop p50', 'ratio', 'failed', 'in the drop'], rows));
  // The goals: converged within 2 s, the dependency's latency within 2x its healthy p50,
  // no more failures than the best fixed limit of the run.
  const bestFixed = Math.min(...results.filter((r) => r.fixed).map((r) => r.failed));
  for (const r of results.filter((x) => x.adaptive)) {
    const ok = (b) => (b ? 'yes' : 'NO');
    console.log(`  ${r.name}: converged within 2 s ${ok(r.converged !== null && r.converged <= 2000)}; dependency latency within 2x ${ok(r.ratio <= 2)} (${r.ratio.toFixed(2)}x); failures at most the best fixed bulkhead's ${ok(r.failed <= bestFixed)} (${r.failed} vs ${bestFixed})`);
  }
}

export async function main({ quick = false, dropOnly = false } = {}) {
  if (!dropOnly) {
    await slowTail(quick);
    console.log('');
  }
  await capacityDrop(quick);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main({ quick: process.argv.includes('--quick'), dropOnly: process.argv.includes('--drop-only') });
