// An overload at the bottom of a real call chain: three relent-served hops on loopback
// (node:http + relent/server, a relent client below each), the bottom shedding
// everything (its one slot held, no queue). Three layers (the caller, hop A, hop B) each
// make up to 3 attempts. Prints the calls the bottom receives per top-level call with
// and without the servers' "don't retry" marker (SRE book ch. 22: retry at one layer).
import http from 'node:http';
import { createClient } from '../dist/http/index.js';
import { relentMiddleware } from '../dist/server/index.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function listen(guard, handler, closers) {
  const s = http.createServer((req, res) => guard(req, res, () => void handler(req, res)));
  const sockets = new Set();
  s.on('connection', (c) => {
    sockets.add(c);
    c.on('close', () => sockets.delete(c));
  });
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  closers.push(
    () =>
      new Promise((r) => {
        for (const c of sockets) c.destroy();
        s.close(r);
      }),
  );
  return `http://127.0.0.1:${s.address().port}/`;
}

async function variant({ marker, retryAfter, budget }, actions) {
  const closers = [];
  const release = [];
  const bottomGuard = relentMiddleware({ maxConcurrent: 1, maxQueue: 0, noRetryMarker: marker, retryAfterSec: retryAfter ? 1 : null });
  const bottom = await listen(
    bottomGuard,
    async (_req, res) => {
      await new Promise((r) => release.push(r));
      res.end();
    },
    closers,
  );
  const hold = new Promise((r) => http.get(bottom, { agent: false }, r).on('error', () => {}));
  while (bottomGuard.stats().inFlight === 0) await sleep(2);
  const policy = { maxAttempts: 3, deadlineMs: 2000, backoff: { kind: 'constant', delayMs: 1 } };
  const hopTo = async (below) => {
    const client = createClient({ policy, budget });
    closers.push(() => client.close());
    return listen(
      relentMiddleware({ noRetryMarker: marker }),
      async (_req, res) => {
        try {
          const r = await client.fetch(below);
          res.statusCode = r.status;
          res.end(await r.text());
        } catch {
          res.statusCode = 504;
          res.end();
        }
      },
      closers,
    );
  };
  const b = await hopTo(bottom);
  const a = await hopTo(b);
  let topAttempts = 0;
  const top = createClient({
    policy,
    budget,
    onEvent: (e) => {
      if (e.type === 'attempt') topAttempts++;
    },
  });
  closers.push(() => top.close());
  const t0 = performance.now();
  for (let i = 0; i < actions; i++) await (await top.fetch(a)).arrayBuffer();
  const ms = performance.now() - t0;
  for (const r of release) r();
  await hold;
  const h = bottomGuard.stats().attempts;
  const received = Object.values(h).reduce((x, y) => x + y, 0) - 1;
  for (const c of closers.reverse()) await c();
  return { perAction: received / actions, topPerAction: topAttempts / actions, h, msPerAction: ms / actions };
}

export async function main({ quick } = {}) {
  const n = quick ? 10 : 50;
  const rows = [
    ['"don\'t retry" marker (relent/server defaults), budgets on', { marker: true, retryAfter: true, budget: true }],
    ['no marker, no Retry-After, budgets off', { marker: false, retryAfter: false, budget: false }],
    ["no marker, no Retry-After, relent's default budgets", { marker: false, retryAfter: false, budget: true }],
  ];
  console.log(
    `\nOverload at the bottom of 3 relent-served hops; 3 layers × 3 attempts; ${n} top-level calls each (load ${(await import('node:os'))
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' ')})`,
  );
  const w = Math.max(...rows.map((r) => r[0].length));
  console.log(`${'variant'.padEnd(w)}  bottom calls/top call  top attempts/call  bottom by attempt (1/2/3)  ms/top call`);
  console.log(`${'-'.repeat(w)}  ---------------------  -----------------  -------------------------  -----------`);
  for (const [name, v] of rows) {
    const r = await variant(v, n);
    console.log(
      `${name.padEnd(w)}  ${(r.perAction.toFixed(2) + 'x').padStart(21)}  ${r.topPerAction.toFixed(2).padStart(17)}  ${`${r.h['1']}/${r.h['2']}/${r.h['3']}`.padStart(25)}  ${r.msPerAction.toFixed(1).padStart(11)}`,
    );
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main({ quick: process.argv.includes('--quick') });
