// Slow, not failing: hedged requests and the adaptive concurrency limit, for real
// (node:http dependencies on loopback, open-loop arrivals from a seeded generator).
//   node bench/slow.mjs [--quick] [--only=tail,drop,exchange]     (or: npm run bench -- slow [--quick])
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
// 3. The same for an exchange partner (relent/rtb): 20 workers of 20 ms cut to 4; the
//    partner's requests held, the auctions it still fills, its timeouts and skips, under
//    the fixed cap and the adaptive limits (partners[].concurrencyLimit).
// Ratios within one run; absolute times depend on the machine (load average printed).
// Plain ESM over the compiled library: run `npm run build` first (npm run bench does).
import http from 'node:http';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { peerVersion } from './harness.mjs';
import { createClient } from '../dist/http/index.js';
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
  return new Promise((r) => {
    server.closeAllConnections();
    server.close(() => r());
  });
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
        pending.push(
          call(k).then(
            (ok) => {
              out[k] = [start - t0, performance.now() - start, ok];
            },
            () => {
              out[k] = [start - t0, performance.now() - start, false];
            },
          ),
        );
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
    { name: `cockatiel ${peerVersion('cockatiel')}: 20 ms timeout + 1 retry`, make: cockatiel },
    { name: `got ${peerVersion('got')}: 20 ms timeout + 1 retry`, make: gotPeer },
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
  console.log(
    `slow tail: p50 5 ms, 2 % at 500 ms (independent), ${RATE} operations/s, ${OPS} operations per contender (after 200 of warm-up); load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}`,
  );
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
      call: () =>
        policy.execute(async ({ signal }) => {
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
      call: async () =>
        (
          await got(url, {
            agent: { http: agent },
            timeout: { request: 20 },
            retry: { limit: 1, calculateDelay: ({ attemptCount }) => (attemptCount <= 1 ? 1 : 0) },
          })
        ).statusCode === 200,
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
        setTimeout(
          () => {
            busy--;
            serverLat.push([arrived - t0, performance.now() - arrived]);
            if (!res.destroyed) res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 }).end('ok');
            serve();
          },
          SERVICE_MS * (0.8 + 0.4 * rnd()),
        );
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
      ms(pct(during, 0.5)),
      ms(pct(during, 0.99)),
      ms(pct(healthy, 0.5)),
      ms(pct(degraded, 0.5)),
      `${ratio.toFixed(2)}x`,
      String(failed),
      String(failedDrop),
    ]);
  }
  console.log(
    `capacity drop: ${CAPACITY} workers (${SERVICE_MS} ms each) cut to ${DEGRADED} from ${phase.before / 1000} s for ${phase.drop / 1000} s; ${RATE} operations/s (${OPS}), 1 s deadline, no retries; load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}`,
  );
  console.log(
    '"converged": from the drop until calls in flight stay within 1.5x the new capacity; in flight and the dependency\'s latency from 2 s after the drop; failures over the whole run and in the drop',
  );
  console.log(
    textTable(['contender', 'converged', 'in flight p50', 'p99', 'dep. latency healthy p50', 'in the drop p50', 'ratio', 'failed', 'in the drop'], rows),
  );
  // The goals: converged within 2 s, the dependency's latency within 2x its healthy p50,
  // no more failures than the best fixed limit of the run.
  const bestFixed = Math.min(...results.filter((r) => r.fixed).map((r) => r.failed));
  for (const r of results.filter((x) => x.adaptive)) {
    const ok = (b) => (b ? 'yes' : 'NO');
    console.log(
      `  ${r.name}: converged within 2 s ${ok(r.converged !== null && r.converged <= 2000)}; dependency latency within 2x ${ok(r.ratio <= 2)} (${r.ratio.toFixed(2)}x); failures at most the best fixed bulkhead's ${ok(r.failed <= bestFixed)} (${r.failed} vs ${bestFixed})`,
    );
  }
}

// --- 3. an exchange partner whose capacity drops 5x ------------------------------------

async function partnerDrop(quick) {
  const RATE = 400; // auctions/s (in process: exchange.auction(), no HTTP on the source's side)
  const SERVICE_MS = 20;
  const CAPACITY = 20; // workers: 1 000 calls/s
  const DEGRADED = 4; // 200 calls/s
  const dropS = process.env.SLOW_DROP_S === undefined ? null : Number(process.env.SLOW_DROP_S);
  const phase = quick ? { before: 3000, drop: 8000, after: 3000 } : { before: 5000, drop: dropS ?? 20_000, after: 5000 };
  if (dropS !== null && !quick) phase.drop = dropS * 1000;
  const total = phase.before + phase.drop + phase.after;
  const OPS = Math.round((RATE * total) / 1000);
  const partnerBase = { name: 'dsp', timeoutMs: 100, maxConcurrency: 40, lateGraceMs: 0, breaker: false, warmConnections: 0 };
  const contenders = [
    { name: 'fixed cap (maxConcurrency 40)', over: {} },
    { name: 'gradient limit, ceiling 40', over: { concurrencyLimit: { kind: 'gradient' } } },
    { name: 'AIMD limit (slowMs 40), ceiling 40', over: { concurrencyLimit: { kind: 'aimd', slowMs: 40 } } },
  ];
  const rows = [];
  for (const c of contenders) {
    const rnd = createSeededRandom(13);
    let t0 = 0;
    let busy = 0;
    let holding = 0;
    const queue = [];
    const capacity = () => {
      const t = performance.now() - t0;
      return t >= phase.before && t < phase.before + phase.drop ? DEGRADED : CAPACITY;
    };
    const serve = () => {
      while (busy < capacity() && queue.length > 0) {
        const { res, id } = queue.shift();
        if (res.destroyed) continue; // cut by the exchange: not served
        busy++;
        setTimeout(
          () => {
            busy--;
            if (!res.destroyed) {
              const body = JSON.stringify({ id, seatbid: [{ seat: 's', bid: [{ id: 'b', impid: '1', price: 1, adm: '<ad/>' }] }] });
              res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
            }
            serve();
          },
          SERVICE_MS * (0.8 + 0.4 * rnd()),
        );
      }
    };
    const server = http.createServer((req, res) => {
      holding++;
      res.on('close', () => holding--);
      const chunks = [];
      req.on('data', (d) => chunks.push(d));
      req.on('end', () => {
        const raw = Buffer.concat(chunks).toString();
        const m = /"id":"([^"]+)"/.exec(raw);
        queue.push({ res, id: m ? m[1] : '' });
        serve();
      });
    });
    const timer = setInterval(serve, 5);
    const url = await listen(server);
    const { createExchange } = await import('../dist/rtb/index.js');
    const changes = [];
    const ex = createExchange(
      {
        auctionTimeoutMs: 150,
        reserveMs: 10,
        warmup: false,
        notices: { win: 'source', billing: 'source', loss: 'off' },
        partners: [{ ...partnerBase, url, ...c.over }],
      },
      { onLimitChange: (e) => changes.push(e) },
    );
    const samples = [];
    t0 = performance.now();
    const sampler = setInterval(() => samples.push([performance.now() - t0, holding]), 50);
    let k = 0;
    const out = await openLoop(RATE, OPS, 9, async () => {
      const o = await ex.auction({ id: `a${++k}`, imp: [{ id: '1', bidfloor: 0.1 }], tmax: 200, site: { publisher: { id: 'p' } } });
      return o.status === 200;
    });
    clearInterval(sampler);
    clearInterval(timer);
    const st = ex.stats();
    await ex.close({ force: true, noticeDrainMs: 0 });
    await close(server);
    const dropStart = phase.before;
    const dropEnd = phase.before + phase.drop;
    // Converged: from then to the end of the drop, the median of every 1 s of samples is
    // at most 2x the new capacity (at a capacity of 4, the gradient's tolerance and
    // headroom alone make 6).
    let converged = null;
    for (let i = samples.length - 1; i >= 0; i--) {
      const [t] = samples[i];
      if (t < dropStart || t >= dropEnd) continue;
      const last = samples.filter(([u]) => u > t - 1000 && u <= t && u >= dropStart).map(([, n]) => n);
      if (pct(last, 0.5) > 2 * DEGRADED) break;
      converged = Math.max(0, t - 1000 - dropStart);
    }
    const held = samples.filter(([t]) => t >= dropStart + 2000 && t < dropEnd).map(([, n]) => n);
    const inDrop = out.filter((o) => o[0] >= dropStart && o[0] < dropEnd);
    const filled = inDrop.filter((o) => o[2]).length;
    const after = out.filter((o) => o[0] >= dropEnd + 2000);
    const p = st.partners[0];
    const lowest = p.concurrencyLimit === null ? '-' : String(p.concurrencyLimit.lowest);
    rows.push([
      c.name,
      converged === null ? 'never' : `${(converged / 1000).toFixed(2)} s`,
      ms(pct(held, 0.5)),
      ms(pct(held, 0.99)),
      `${((filled / inDrop.length) * 100).toFixed(1)} %`,
      `${((after.filter((o) => o[2]).length / Math.max(1, after.length)) * 100).toFixed(1)} %`,
      String(p.timeouts),
      String(p.skipped.concurrency_limited + p.skipped.at_capacity),
      lowest,
      String(changes.length),
      ms(st.auctions.answerMs.p99Ms),
      String(st.auctions.afterDeadline),
    ]);
  }
  console.log(
    `exchange partner: ${CAPACITY} workers (${SERVICE_MS} ms each) cut to ${DEGRADED} from ${phase.before / 1000} s for ${phase.drop / 1000} s; ${RATE} auctions/s (${OPS}) in process, the partner's timeoutMs 100, auctions 150 ms; load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}`,
  );
  console.log(
    'held = requests at the partner (queued or in work), sampled every 50 ms; "converged": from the drop until every 1 s median of held is at most 2x the new capacity; held p50/p99 from 2 s after the drop; filled = auctions answered with the partner\'s bid (at most 50 % in the drop: 200 calls/s for 400 auctions/s)',
  );
  console.log(
    textTable(
      [
        'contender',
        'converged',
        'held p50',
        'p99',
        'filled in the drop',
        'after',
        'timeouts',
        'skipped',
        'lowest limit',
        'changes',
        'answer p99',
        'after deadline',
      ],
      rows,
    ),
  );
}

export async function main({ quick = false, only = null } = {}) {
  const sections = only ?? ['tail', 'drop', 'exchange'];
  if (sections.includes('tail')) {
    await slowTail(quick);
    console.log('');
  }
  if (sections.includes('drop')) {
    await capacityDrop(quick);
    console.log('');
  }
  if (sections.includes('exchange')) await partnerDrop(quick);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const only = process.argv.filter((a) => a.startsWith('--only=')).flatMap((a) => a.slice('--only='.length).split(','));
  await main({ quick: process.argv.includes('--quick'), only: only.length > 0 ? only : process.argv.includes('--drop-only') ? ['drop'] : null });
}
