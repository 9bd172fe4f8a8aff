// HTTP client throughput on loopback, keep-alive, GET of a small JSON body: relent's
// client.fetch and relentInterceptor against the same undici APIs bare, undici's own
// retry interceptor, got, ky and axios + axios-retry. Sequential (1 in flight) and 32
// concurrent. Run after `npm run build` (imports ../dist): `node bench/http.mjs [--quick]`,
// or through `npm run bench` (bench/run.mjs calls main()).
//
// The server is a node:http server in a CHILD PROCESS (forked from this file), so it does
// not share the client's event loop; on a 2-core machine each side gets a core. Every
// candidate has its own connection pool. Candidates are measured round-robin, round after
// round, and the median of the rounds is reported, so machine noise hits them alike; within
// a round each cell is cut into slices that the candidates take in turn. The client's CPU
// per request (this process only) is printed for the goal pairs too.
// Every retrying candidate runs with its default retry settings; all requests succeed
// (this measures the cost of the happy path, which is what a retry layer adds to every call).
import { fork } from 'node:child_process';
import http from 'node:http';
import { loadavg } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { peerVersion } from './harness.mjs';

const BODY = JSON.stringify({ id: 42, name: 'relent', tags: ['retry', 'deadline', 'budget'], ok: true });

function serve() {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) });
      res.end(BODY);
    });
  });
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 130_000;
  server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
  process.on('disconnect', () => process.exit(0));
}

async function candidates(url) {
  const undici = await import('undici');
  const { createClient, relentInterceptor } = await import('../dist/http/index.js');
  const { default: got } = await import('got');
  const { default: ky } = await import('ky');
  const { default: axios } = await import('axios');
  const { default: axiosRetry } = await import('axios-retry');

  const agents = [];
  const agent = (o = {}) => {
    const a = new undici.Agent({ keepAliveTimeout: 60_000, ...o });
    agents.push(a);
    return a;
  };
  const bare = agent();
  const noop = agent().compose((dispatch) => (opts, handler) => dispatch(opts, handler));
  const withRelent = agent().compose(relentInterceptor());
  const withUndiciRetry = agent().compose(undici.interceptors.retry());
  const fetchAgent = agent();
  const client = createClient({ agent: { keepAliveTimeout: 60_000 } });
  const gotClient = got.extend({ agent: { http: new http.Agent({ keepAlive: true, maxSockets: 256 }) } });
  const ax = axios.create({ httpAgent: new http.Agent({ keepAlive: true, maxSockets: 256 }) });
  axiosRetry(ax, { retries: 2 });

  const list = [
    {
      name: 'undici.request (bare)',
      api: 'request',
      fn: async () => {
        const r = await undici.request(url, { dispatcher: bare });
        await r.body.text();
      },
    },
    {
      name: 'undici.request + compose(no-op)',
      api: 'request',
      fn: async () => {
        const r = await undici.request(url, { dispatcher: noop });
        await r.body.text();
      },
    },
    {
      name: 'undici.request + relentInterceptor',
      api: 'request',
      relent: true,
      fn: async () => {
        const r = await undici.request(url, { dispatcher: withRelent });
        await r.body.text();
      },
    },
    {
      name: 'undici.request + interceptors.retry',
      api: 'request',
      fn: async () => {
        const r = await undici.request(url, { dispatcher: withUndiciRetry });
        await r.body.text();
      },
    },
    {
      name: 'undici.fetch (bare)',
      api: 'fetch',
      fn: async () => {
        const r = await undici.fetch(url, { dispatcher: fetchAgent });
        await r.text();
      },
    },
    {
      name: 'relent client.fetch',
      api: 'fetch',
      relent: true,
      fn: async () => {
        const r = await client.fetch(url);
        await r.text();
      },
    },
    // The deadline covers the body by default (one timer per response); this is the cost of that default.
    {
      name: 'relent client.fetch (bodyDeadline: false)',
      api: 'fetch',
      relent: true,
      fn: async () => {
        const r = await client.fetch(url, { bodyDeadline: false });
        await r.text();
      },
    },
    {
      name: 'Node global fetch',
      api: 'fetch',
      fn: async () => {
        const r = await fetch(url);
        await r.text();
      },
    },
    {
      name: `got ${peerVersion('got')} (retry limit 2)`,
      api: 'other',
      fn: async () => {
        await gotClient(url).text();
      },
    },
    {
      name: `ky ${peerVersion('ky')} (retry limit 2)`,
      api: 'other',
      fn: async () => {
        await ky.get(url).text();
      },
    },
    {
      name: `axios ${peerVersion('axios')} + axios-retry ${peerVersion('axios-retry')} (2)`,
      api: 'other',
      fn: async () => {
        await ax.get(url, { responseType: 'text' });
      },
    },
  ];
  const close = async () => {
    await client.close();
    await Promise.all(agents.map((a) => a.close()));
  };
  return { list, close };
}

/** Runs `fn` with `concurrency` loops for `ms`; returns the requests done, the wall ms and this process's CPU µs. */
async function measure(fn, concurrency, ms) {
  let done = 0;
  let failed = 0;
  const end = performance.now() + ms;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        try {
          await fn();
          done++;
        } catch {
          failed++;
        }
      }
    }),
  );
  if (failed > 0) throw new Error(`${failed} requests failed`);
  const c = process.cpuUsage(c0);
  return { done, ms: performance.now() - t0, cpu: c.user + c.system };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (n) => Math.round(n).toLocaleString('en-US');

/** Prints the table; returns the rows ({ name, seq, c32 } in requests/s). */
export async function main({ quick = false } = {}) {
  const rounds = quick ? 1 : 3;
  const ms = quick ? 400 : 1000;
  const warm = quick ? 100 : 200;
  const child = fork(fileURLToPath(import.meta.url), ['--server'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const { port } = await new Promise((resolve) => child.once('message', resolve));
  const url = `http://127.0.0.1:${port}/item`;
  const { list, close } = await candidates(url);
  const samples = new Map(list.map((c) => [c.name, { seq: [], c32: [], seqCpu: [], c32Cpu: [] }]));
  const loads = [];
  // Each cell's time is cut into SLICES slices, and the candidates take turns slice by
  // slice: a burst of load on the shared machine then falls on every candidate alike
  // rather than on the one that happened to be running.
  const SLICES = 5;
  try {
    for (let r = 0; r < rounds; r++) {
      loads.push(loadavg());
      for (const mode of [
        ['seq', 1],
        ['c32', 32],
      ]) {
        for (const c of list) await measure(c.fn, mode[1], warm);
        const sum = new Map(list.map((c) => [c.name, { done: 0, ms: 0, cpu: 0 }]));
        for (let i = 0; i < SLICES; i++) {
          for (const c of list) {
            const m = await measure(c.fn, mode[1], ms / SLICES);
            const t = sum.get(c.name);
            t.done += m.done;
            t.ms += m.ms;
            t.cpu += m.cpu;
          }
        }
        for (const c of list) {
          const t = sum.get(c.name);
          samples.get(c.name)[mode[0]].push(t.done / (t.ms / 1000));
          samples.get(c.name)[`${mode[0]}Cpu`].push(t.cpu / t.done);
        }
      }
    }
  } finally {
    await close();
    child.disconnect();
    child.kill();
  }
  const rows = list.map((c) => ({ name: c.name, api: c.api, seq: median(samples.get(c.name).seq), c32: median(samples.get(c.name).c32) }));
  const base = rows[0];
  const sameApi = (row) => rows.find((x) => x.api === row.api && x !== row && x.name.endsWith('(bare)')) ?? base;
  const w = Math.max(...rows.map((r) => r.name.length));
  console.log(`\nHTTP GET, loopback keep-alive, ${BODY.length}-byte JSON body; server: node:http in a child process; node ${process.version}`);
  console.log(
    `median of ${rounds} round${rounds === 1 ? '' : 's'} × ${ms} ms per cell; ratio = requests/s ÷ the bare undici API it is built on (request or fetch), and ÷ bare undici.request\n`,
  );
  console.log(
    `${'candidate'.padEnd(w)}  ${'seq req/s'.padStart(10)}  ${'ratio'.padStart(5)}  ${'vs request'.padStart(10)}  ${'32 conc req/s'.padStart(13)}  ${'ratio'.padStart(5)}  ${'vs request'.padStart(10)}`,
  );
  console.log(`${'-'.repeat(w)}  ${'-'.repeat(10)}  ${'-'.repeat(5)}  ${'-'.repeat(10)}  ${'-'.repeat(13)}  ${'-'.repeat(5)}  ${'-'.repeat(10)}`);
  for (const r of rows) {
    const s = sameApi(r);
    const same = (k) => (r.api === 'other' || r === s || r.name.endsWith('(bare)') ? '' : (r[k] / s[k]).toFixed(2));
    console.log(
      `${r.name.padEnd(w)}  ${fmt(r.seq).padStart(10)}  ${same('seq').padStart(5)}  ${(r.seq / base.seq).toFixed(2).padStart(10)}  ${fmt(r.c32).padStart(13)}  ${same('c32').padStart(5)}  ${(r.c32 / base.c32).toFixed(2).padStart(10)}`,
    );
  }
  const noop = rows.find((r) => r.name.includes('no-op'));
  const ri = rows.find((r) => r.name.includes('relentInterceptor'));
  if (noop && ri) {
    console.log(
      `\nrelentInterceptor ÷ compose(no-op) (relent's own cost, without undici's cost of compose()): seq ${(ri.seq / noop.seq).toFixed(2)}, 32 concurrent ${(ri.c32 / noop.c32).toFixed(2)}`,
    );
  }
  // The goals, per round (each round measures every candidate once, interleaved), with the load average when it began.
  const s = (name) => samples.get(name);
  const pair = (a, b, k, r) => (s(a)[k][r] / s(b)[k][r]).toFixed(2);
  const I = 'undici.request + relentInterceptor';
  const N = 'undici.request + compose(no-op)';
  const F = 'relent client.fetch';
  const B = 'undici.request (bare)';
  // This process's CPU per request (the server runs in another): steadier than requests/s on a shared machine.
  const cpuPair = (a, b, k, r) => (s(b)[`${k}Cpu`][r] / s(a)[`${k}Cpu`][r]).toFixed(2);
  const us = (name, k, r) => s(name)[`${k}Cpu`][r].toFixed(1);
  console.log('\nPer round (goals: interceptor ÷ compose(no-op) ≥ 0.95 at 32 concurrent; client.fetch ÷ bare undici.request ≥ 0.6):');
  console.log(
    `${'round'.padEnd(5)}  ${'load avg 1/5/15'.padEnd(16)}  ${'interceptor÷compose seq'.padStart(23)}  ${'32 conc'.padStart(7)}  ${'client.fetch÷request seq'.padStart(24)}  ${'32 conc'.padStart(7)}`,
  );
  for (let r = 0; r < rounds; r++) {
    console.log(
      `${String(r + 1).padEnd(5)}  ${loads[r]
        .map((x) => x.toFixed(2))
        .join(' ')
        .padEnd(
          16,
        )}  ${pair(I, N, 'seq', r).padStart(23)}  ${pair(I, N, 'c32', r).padStart(7)}  ${pair(F, B, 'seq', r).padStart(24)}  ${pair(F, B, 'c32', r).padStart(7)}`,
    );
  }
  console.log('\nThe same pairs as client CPU per request (µs, 32 concurrent), and its inverse ratio (what requests/s would be if CPU-bound):');
  console.log(
    `${'round'.padEnd(5)}  ${'request'.padStart(8)}  ${'no-op'.padStart(8)}  ${'relent'.padStart(8)}  ${'fetch'.padStart(8)}  ${'interceptor÷compose'.padStart(19)}  ${'client.fetch÷request'.padStart(20)}`,
  );
  for (let r = 0; r < rounds; r++) {
    console.log(
      `${String(r + 1).padEnd(5)}  ${us(B, 'c32', r).padStart(8)}  ${us(N, 'c32', r).padStart(8)}  ${us(I, 'c32', r).padStart(8)}  ${us(F, 'c32', r).padStart(8)}  ${cpuPair(I, N, 'c32', r).padStart(19)}  ${cpuPair(F, B, 'c32', r).padStart(20)}`,
    );
  }
  return rows;
}

if (process.argv.includes('--server')) serve();
else if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main({ quick: process.argv.includes('--quick') });
}
