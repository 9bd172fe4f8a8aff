// The overload scenario, for real: a node:http dependency on loopback whose
// capacity (a token bucket, 400/s, burst 20) drops to 80/s for a fault window, answering
// 503 over capacity; 320 operations/s arrive (Poisson), each with a 2 s deadline. The
// figures, for each peer's defaults: amplification in the fault window
// (requests received in it ÷ operations started in it) and the success share of the
// operations started in it, with the simulator's prediction beside them.
//   node bench/overload.mjs [--quick]     (or: npm run bench -- overload [--quick])
// Plain ESM over the compiled library: run `npm run build` first (npm run bench does).
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { createClient } from '../dist/http/index.js';
import { createSeededRandom } from '../dist/testing/index.js';
import { PEER_POLICIES, RELENT_POLICIES, runOverload, textTable } from '../dist/sim/index.js';

const FULL = { durationMs: 30_000, fault: [10_000, 20_000] };
const QUICK = { durationMs: 12_000, fault: [4000, 8000] };
const RATE = 400;
const FAULT_RATE = 80;
const BURST = 20;
const ARRIVALS = 320;
const DEADLINE_MS = 2000;
const CLIENTS = 10;

/** The dependency: one token bucket, 200 with a token, 503 without. Records each request's arrival. */
function startDependency(setup) {
  let t0 = 0;
  let tokens = BURST;
  let last = 0;
  const arrivals = [];
  const rateAt = (t) => (t >= setup.fault[0] && t < setup.fault[1] ? FAULT_RATE : RATE);
  const server = http.createServer((req, res) => {
    const now = performance.now() - t0;
    arrivals.push(now);
    // Refill piecewise over (last, now]: the rate changes at the fault's edges.
    let t = last;
    for (const edge of [...setup.fault, Infinity]) {
      if (edge <= t) continue;
      const until = Math.min(edge, now);
      if (until > t) tokens = Math.min(BURST, tokens + ((until - t) * rateAt(t)) / 1000);
      t = until;
      if (t >= now) break;
    }
    last = now;
    req.resume();
    if (tokens >= 1) {
      tokens -= 1;
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 }).end('ok');
    } else {
      res.writeHead(503, { 'content-type': 'text/plain', 'content-length': 4 }).end('busy');
    }
  });
  server.keepAliveTimeout = 60_000;
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      resolve({
        url: `http://127.0.0.1:${server.address().port}/item`,
        start() {
          t0 = performance.now();
          last = 0;
          tokens = BURST;
          arrivals.length = 0;
        },
        arrivals,
        close: () =>
          new Promise((r) => {
            server.closeAllConnections();
            server.close(() => r());
          }),
      });
    });
  });
}

/** The contenders: each gives `call(i)` → Promise<boolean> (success) for operation i, and `close()`. */
async function contenders(url) {
  const out = [];
  // relent-hedged: relent's defaults plus hedging at the observed p95 (it must stop hedging in a storm).
  for (const [name, policy] of [
    ['relent', undefined],
    ['relent-fail-fast', { budgetExhausted: 'stop' }],
    ['relent-hedged', { hedge: { delayMs: 'p95' } }],
  ]) {
    out.push({
      name,
      make: () => {
        // one client per simulated process, each with its own budget, as in the simulator
        const clients = Array.from({ length: CLIENTS }, () => createClient(policy ? { policy } : {}));
        return {
          call: async (i) => {
            try {
              const r = await clients[i % CLIENTS].fetch(url, { deadlineMs: DEADLINE_MS });
              await r.arrayBuffer();
              return r.status === 200;
            } catch {
              return false;
            }
          },
          close: () => Promise.all(clients.map((c) => c.close())),
        };
      },
    });
  }
  try {
    const { default: got } = await import('got');
    out.push({
      name: 'got',
      make: () => {
        const agent = new http.Agent({ keepAlive: true });
        return {
          call: async () => {
            try {
              const r = await got(url, { agent: { http: agent }, signal: AbortSignal.timeout(DEADLINE_MS), throwHttpErrors: false });
              return r.statusCode === 200;
            } catch {
              return false;
            }
          },
          close: async () => agent.destroy(),
        };
      },
    });
  } catch {
    // got is a devDependency: without it, the comparison leaves it out
  }
  const undici = await import('undici');
  out.push({
    name: 'undici',
    make: () => {
      const agent = new undici.Agent().compose(undici.interceptors.retry());
      return {
        call: async () => {
          try {
            const r = await undici.request(url, { dispatcher: agent, signal: AbortSignal.timeout(DEADLINE_MS) });
            await r.body.arrayBuffer();
            return r.statusCode === 200;
          } catch {
            return false;
          }
        },
        close: () => agent.close(),
      };
    },
  });
  return out;
}

/** One contender through the whole scenario. */
async function measure(dep, c, setup, seed) {
  const impl = c.make();
  // Poisson arrivals from a seeded generator, the same for every contender.
  const uniform = createSeededRandom(seed);
  const starts = [];
  const pending = [];
  const outcomes = [];
  dep.start();
  const t0 = performance.now();
  let next = 0;
  let i = 0;
  await new Promise((resolve) => {
    const tick = () => {
      const now = performance.now() - t0;
      while (next <= now && next < setup.durationMs) {
        const k = i++;
        starts[k] = now;
        pending.push(
          impl.call(k).then((ok) => {
            outcomes[k] = ok;
          }),
        );
        next += -Math.log(1 - uniform()) * (1000 / ARRIVALS);
      }
      if (next >= setup.durationMs) return resolve();
      setTimeout(tick, Math.max(0, Math.min(5, next - now)));
    };
    tick();
  });
  await Promise.all(pending);
  await impl.close();
  const [fs, fe] = setup.fault;
  let ops = 0;
  let ok = 0;
  for (let k = 0; k < starts.length; k++) {
    if (starts[k] >= fs && starts[k] < fe) {
      ops++;
      if (outcomes[k]) ok++;
    }
  }
  const requests = dep.arrivals.filter((t) => t >= fs && t < fe).length;
  return { amplification: requests / Math.max(1, ops), success: ok / Math.max(1, ops), ops };
}

export async function main({ quick = false } = {}) {
  const setup = quick ? QUICK : FULL;
  const dep = await startDependency(setup);
  const rows = [];
  try {
    const list = await contenders(dep.url);
    const simPolicies = [...PEER_POLICIES, ...RELENT_POLICIES].filter((p) => list.some((c) => c.name === p.name));
    const sim = runOverload({
      runs: 3,
      durationMs: setup.durationMs,
      clients: CLIENTS,
      arrivalsPerSec: ARRIVALS,
      deadlineMs: DEADLINE_MS,
      faults: [{ startMs: setup.fault[0], endMs: setup.fault[1], capacityPerSec: FAULT_RATE }],
      policies: simPolicies,
    });
    for (const c of list) {
      const m = await measure(dep, c, setup, 42);
      const p = sim.rows.find((r) => r.policy === c.name);
      rows.push([
        c.name,
        `${m.amplification.toFixed(2)}x`,
        p ? `${p.fault.amplification.toFixed(2)}x` : '',
        `${(m.success * 100).toFixed(1)} %`,
        p ? `${(p.fault.successShare * 100).toFixed(1)} %` : '',
        String(m.ops),
      ]);
    }
  } finally {
    await dep.close();
  }
  console.log(
    `overload, for real: capacity ${RATE}/s cut to ${FAULT_RATE}/s from ${setup.fault[0] / 1000} s to ${setup.fault[1] / 1000} s, ${ARRIVALS} operations/s, ${DEADLINE_MS / 1000} s deadline, loopback node:http`,
  );
  console.log('fault window: requests received ÷ operations started, and the share of those operations that succeeded; "sim": relent simulate, same set-up');
  console.log(textTable(['contender', 'amplification', 'sim', 'success', 'sim', 'operations'], rows));
  const amp = (name) => Number(rows.find((r) => r[0] === name)?.[1]?.replace('x', ''));
  if (Number.isFinite(amp('relent-hedged')) && Number.isFinite(amp('relent'))) {
    console.log(
      `hedging in the storm: relent-hedged's amplification is ${(amp('relent-hedged') / amp('relent')).toFixed(3)}x relent's (hedges stop while the dependency fails)`,
    );
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main({ quick: process.argv.includes('--quick') });
