#!/usr/bin/env node
// The runtime × entry-point probe: one real check per entry point of package.json (and
// the `relent` command), each against servers on loopback, imported by the package's own
// name as a user's code would. Runs under Node, Bun and Deno from the repository root,
// after `npm ci` and `npm run build`:
//
//   node scripts/probe.mjs          bun scripts/probe.mjs          deno run -A scripts/probe.mjs
//
// Prints one line per check, then "N passed, N failed"; exits 1 when a check fails. A
// check that needs Redis on 127.0.0.1:6379 is skipped, with a line saying so, when none
// answers (CI starts it). The README's runtime table lists these checks (test/runtimes).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(ROOT, 'package.json'));

export function runtimeName() {
  if (typeof process.versions.bun === 'string') return `bun ${process.versions.bun}`;
  if (typeof process.versions.deno === 'string') return `deno ${process.versions.deno}`;
  return `node ${process.versions.node}`;
}

/** How this runtime runs a script file: Deno needs `run -A`. */
function scriptCommand(file, args) {
  if (typeof process.versions.deno === 'string') return [process.execPath, ['run', '-A', '--ext=js', file, ...args]];
  return [process.execPath, [file, ...args]];
}

/** undici, the npm package (Bun's bare `undici` is its own partial copy). */
function npmUndici() {
  const pkg = require.resolve('undici/package.json');
  return require(join(dirname(pkg), JSON.parse(readFileSync(pkg, 'utf8')).main ?? 'index.js'));
}

const FAST = { maxAttempts: 3, deadlineMs: 5000, backoff: { kind: 'constant', delayMs: 1 } };

/** A node:http server on 127.0.0.1:0 answering with `statuses` in turn (the last one repeats). */
async function statusServer(statuses, onRequest = () => {}) {
  let n = 0;
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      onRequest(req, Buffer.concat(chunks).toString());
      const status = statuses[Math.min(n++, statuses.length - 1)];
      res.writeHead(status, { 'content-type': 'text/plain' }).end(status === 200 ? 'ok' : 'busy');
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}/`,
    count: () => n,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections?.();
        server.close(() => r());
      }),
  };
}

async function closedPort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const port = s.address().port;
  await new Promise((r) => s.close(() => r()));
  return port;
}

function expect(cond, what) {
  if (!cond) throw new Error(what);
}

async function redisAnswers() {
  return new Promise((resolve) => {
    const s = net.connect(6379, '127.0.0.1');
    const done = (v) => {
      s.destroy();
      resolve(v);
    };
    s.setTimeout(500, () => done(false));
    s.on('error', () => done(false));
    s.on('connect', () => s.write('PING\r\n'));
    s.on('data', (d) => done(String(d).startsWith('+PONG')));
  });
}

/** An exchange with readTimeoutMs 150; a raw client sends `what(body)` and waits: what came back, and when the connection closed. */
async function stalledClient(what) {
  const { createExchange } = await import('relent/rtb');
  const partner = await statusServer([204]);
  const exchange = createExchange({
    auctionTimeoutMs: 60,
    reserveMs: 20,
    readTimeoutMs: 150,
    partners: [{ name: 'p', url: partner.url, timeoutMs: 40, maxConcurrency: 4 }],
  });
  try {
    const { port } = await exchange.listen(0, '127.0.0.1');
    const body = JSON.stringify({ id: 'r1', imp: [{ id: '1' }], tmax: 500 });
    return await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1');
      let d = '',
        t0 = 0;
      c.on('connect', () => {
        t0 = Date.now();
        c.write(what(body));
      });
      c.on('data', (b) => (d += b));
      c.on('close', () => resolve({ d, ms: Date.now() - t0 }));
      c.on('error', () => {});
      setTimeout(() => c.destroy(), 3000);
    });
  } finally {
    await exchange.close();
    await partner.close();
  }
}

class Skip extends Error {}

/** [entry point, what is checked, check]. The README's runtime table has one row per entry point. */
export const CHECKS = [
  [
    'relent',
    'run() over fetch: 503, 503, 200 → 200 after 3 calls',
    async () => {
      const { run } = await import('relent');
      const s = await statusServer([503, 503, 200]);
      try {
        const res = await run(({ signal }) => fetch(s.url, { signal }), { method: 'GET', policy: FAST });
        expect(res.status === 200 && s.count() === 3, `status ${res.status} after ${s.count()} calls`);
        await res.text();
      } finally {
        await s.close();
      }
    },
  ],
  [
    'relent',
    "run() over fetch: a refused POST is connect_refused and retried (the runtime's error read)",
    async () => {
      const { run } = await import('relent');
      const events = [];
      const url = `http://127.0.0.1:${await closedPort()}/`;
      await run(({ signal }) => fetch(url, { method: 'POST', body: 'x', signal }), { method: 'POST', policy: FAST, onEvent: (e) => events.push(e) }).catch(
        () => {},
      );
      const result = events.find((e) => e.type === 'result');
      expect(result?.errorClass === 'connect_refused' && result.reason === 'max_attempts' && result.attempts === 3, `result ${JSON.stringify(result)}`);
    },
  ],
  [
    'relent/testing',
    'test clock and seeded random',
    async () => {
      const { createTestClock, createSeededRandom } = await import('relent/testing');
      const clock = createTestClock();
      let fired = 0;
      clock.setTimer(() => fired++, 10);
      clock.advance(9);
      expect(fired === 0, 'fired early');
      clock.advance(1);
      const a = createSeededRandom(7),
        b = createSeededRandom(7);
      expect(fired === 1 && a() === b() && a() === b(), 'timer or random');
    },
  ],
  [
    'relent/testing/proxy',
    'createFaultProxy(): 50 ms of latency, then a reset, between a client and a server',
    async () => {
      const { createFaultProxy } = await import('relent/testing/proxy');
      const s = await statusServer([200]);
      const proxy = await createFaultProxy({ target: new URL(s.url).host, faults: { latencyMs: 50 } });
      try {
        const t0 = Date.now();
        const res = await fetch(proxy.via(s.url));
        await res.text();
        const ms = Date.now() - t0;
        proxy.set({ reset: true });
        const failed = await fetch(proxy.via(s.url)).then(
          () => false,
          () => true,
        );
        expect(
          res.status === 200 && ms >= 45 && failed && proxy.stats().resets >= 1,
          `status ${res.status} after ${ms} ms, reset failed the call: ${failed}, ${JSON.stringify(proxy.stats())}`,
        );
      } finally {
        await proxy.close();
        await s.close();
      }
    },
  ],
  [
    'relent/http',
    'createClient().fetch: 503, 503, 200 → 200 (undici from npm)',
    async () => {
      const { createClient } = await import('relent/http');
      const s = await statusServer([503, 503, 200]);
      const client = createClient({ policy: FAST });
      try {
        const res = await client.fetch(s.url);
        expect(res.status === 200 && s.count() === 3, `status ${res.status} after ${s.count()} calls`);
        await res.text();
      } finally {
        await client.close();
        await s.close();
      }
    },
  ],
  [
    'relent/http',
    'relentInterceptor() composed on an undici Agent',
    async () => {
      const { relentInterceptor } = await import('relent/http');
      const { Agent } = npmUndici();
      const s = await statusServer([503, 200]);
      const agent = new Agent().compose(relentInterceptor({ policy: FAST }));
      try {
        const res = await agent.request({ origin: s.url.slice(0, -1), path: '/', method: 'GET' });
        await res.body.text();
        expect(res.statusCode === 200 && s.count() === 2, `status ${res.statusCode} after ${s.count()} calls`);
      } finally {
        await agent.close();
        await s.close();
      }
    },
  ],
  [
    'relent/server',
    "relentMiddleware(): the caller's deadline reaches the handler",
    async () => {
      const { relentMiddleware } = await import('relent/server');
      const mw = relentMiddleware({ maxConcurrent: 4, maxQueue: 4 });
      const server = http.createServer((req, res) => mw(req, res, () => res.end(String(Math.round(req.relent.remainingMs())))));
      await new Promise((r) => server.listen(0, '127.0.0.1', r));
      try {
        const res = await fetch(`http://127.0.0.1:${server.address().port}/`, { headers: { 'x-relent-deadline-ms': '4000' } });
        const left = Number(await res.text());
        expect(res.status === 200 && left > 0 && left <= 4000, `status ${res.status}, remaining ${left}`);
      } finally {
        server.closeAllConnections?.();
        await new Promise((r) => server.close(r));
      }
    },
  ],
  [
    'relent/sim',
    'runOverload(): one run of a policy in virtual time',
    async () => {
      const { runOverload } = await import('relent/sim');
      const { rows } = runOverload({ runs: 1, policies: [{ name: 'mine', policy: { preset: 'http-429', maxAttempts: 3 } }] });
      expect(rows.length >= 1, 'no rows');
    },
  ],
  [
    'relent/telemetry',
    'publishEvent() on diagnostics_channel, a JSONL sink',
    async () => {
      const { publishEvent, createJsonlSink, DIAGNOSTICS_CHANNELS } = await import('relent/telemetry');
      const { run } = await import('relent');
      const dc = await import('node:diagnostics_channel');
      const seen = [];
      const listener = (m) => seen.push(m);
      dc.subscribe(DIAGNOSTICS_CHANNELS.result, listener);
      const dir = mkdtempSync(join(tmpdir(), 'relent-probe-'));
      const sink = createJsonlSink(join(dir, 'events.jsonl'));
      try {
        await run(async () => ({ status: 200 }), {
          onEvent: (e) => {
            publishEvent(e);
            sink.onEvent(e);
          },
        });
        sink.close();
        await new Promise((r) => setTimeout(r, 50));
        const lines = readFileSync(join(dir, 'events.jsonl'), 'utf8').trim().split('\n');
        expect(seen.length === 1 && lines.length === 2, `${seen.length} published, ${lines.length} lines`);
      } finally {
        dc.unsubscribe(DIAGNOSTICS_CHANNELS.result, listener);
        rmSync(dir, { recursive: true, force: true });
      }
    },
  ],
  [
    'relent/otel',
    'createOtelInstrumentation(): a span per attempt',
    async () => {
      const { createOtelInstrumentation } = await import('relent/otel');
      const { run } = await import('relent');
      const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = await import('@opentelemetry/sdk-trace-base');
      const exporter = new InMemorySpanExporter();
      const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
      const otel = createOtelInstrumentation({ tracerProvider, metrics: false });
      let n = 0;
      await run(async () => ({ status: ++n < 2 ? 503 : 200 }), { instrumentation: otel, policy: FAST });
      expect(exporter.getFinishedSpans().length >= 2, `${exporter.getFinishedSpans().length} spans`);
    },
  ],
  [
    'relent/report',
    'analyzeEventText() and renderReportHtml()',
    async () => {
      const { analyzeEventText, renderReportHtml, formatReport } = await import('relent/report');
      const { run } = await import('relent');
      const events = [];
      let n = 0;
      await run(async () => ({ status: ++n < 2 ? 503 : 200 }), { policy: FAST, onEvent: (e) => events.push(e) });
      const report = analyzeEventText(events.map((e) => JSON.stringify(e)).join('\n'));
      expect(formatReport(report).length > 0 && renderReportHtml(report).includes('<html'), 'empty report');
    },
  ],
  [
    'relent/delivery',
    'a SQLite queue: 3 items delivered once each through a 503 (better-sqlite3 13)',
    async () => {
      const { openDeliveryQueue } = await import('relent/delivery');
      const keys = [];
      const s = await statusServer([503, 200], (req, body) => {
        if (!body.includes('busy')) keys.push(req.headers['idempotency-key']);
      });
      const dir = mkdtempSync(join(tmpdir(), 'relent-probe-'));
      const queue = await openDeliveryQueue({
        store: `sqlite:${join(dir, 'q.db')}`,
        destinations: { d: { url: s.url, policy: FAST, batch: { maxItems: 10, maxAgeMs: 0 } } },
      });
      const worker = queue.createWorker();
      try {
        for (const i of [1, 2, 3]) await queue.enqueue('d', { i }, { key: `k${i}` });
        worker.start();
        const until = Date.now() + 10_000;
        let stats;
        while (Date.now() < until) {
          stats = await queue.stats();
          if (stats[0]?.deliveredItems === 3) break;
          await new Promise((r) => setTimeout(r, 50));
        }
        expect(stats[0]?.deliveredItems === 3 && s.count() >= 2, `stats ${JSON.stringify(stats)}, ${s.count()} requests`);
      } finally {
        await worker.stop();
        await queue.close();
        await s.close();
        rmSync(dir, { recursive: true, force: true });
      }
    },
  ],
  [
    'relent/rtb',
    'createExchange(): an auction with one partner bids',
    async () => {
      const { createExchange } = await import('relent/rtb');
      const partner = http.createServer((req, res) => {
        let body = '';
        req.on('data', (c) => (body += c));
        req.on('end', () => {
          const br = JSON.parse(body);
          res
            .writeHead(200, { 'content-type': 'application/json' })
            .end(JSON.stringify({ id: br.id, seatbid: [{ bid: [{ id: 'b1', impid: br.imp[0].id, price: 1.5, adm: '<p>ad</p>' }] }] }));
        });
      });
      await new Promise((r) => partner.listen(0, '127.0.0.1', r));
      const exchange = createExchange({
        auctionTimeoutMs: 300,
        reserveMs: 20,
        partners: [{ name: 'p', url: `http://127.0.0.1:${partner.address().port}/bid`, timeoutMs: 200, maxConcurrency: 4 }],
      });
      try {
        const { status, body } = await exchange.auction({ id: 'r1', imp: [{ id: '1' }], tmax: 500 });
        expect(status === 200 && String(body).includes('"price":1.5'), `status ${status} ${body}`);
      } finally {
        await exchange.close();
        partner.closeAllConnections?.();
        await new Promise((r) => partner.close(r));
      }
    },
  ],
  [
    'relent/rtb',
    'the exchange cuts a client that stops halfway through its body at readTimeoutMs (408)',
    async () => {
      const r = await stalledClient(
        (body) =>
          `POST /openrtb2/auction HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, body.length >> 1)}`,
      );
      expect(/^HTTP\/1\.1 408 /.test(r.d) && r.ms < 150 + 400, `${JSON.stringify(r.d.slice(0, 30))} after ${r.ms} ms`);
    },
  ],
  [
    'relent/rtb',
    'the exchange cuts a client that sends nothing at readTimeoutMs (408)',
    async () => {
      const r = await stalledClient(() => '');
      expect(/^HTTP\/1\.1 408 /.test(r.d) && r.ms < 150 + 400, `${JSON.stringify(r.d.slice(0, 30))} after ${r.ms} ms`);
    },
    {
      bun: 'Bun closes a server socket that never sent a byte on its own one-second sweep: the 408 leaves after about 1.2 s, whatever readTimeoutMs says (a client that sent part of a request is cut on time)',
    },
  ],
  [
    'relent/fleet',
    'createRedisFleet(): a client shares the fleet (ioredis, Redis 127.0.0.1:6379)',
    async () => {
      if (!(await redisAnswers())) throw new Skip('no Redis on 127.0.0.1:6379');
      const { createRedisFleet } = await import('relent/fleet');
      const { createClient } = await import('relent/http');
      const fleet = createRedisFleet({ url: 'redis://127.0.0.1:6379', prefix: `relent:probe:${process.pid}:${Date.now()}:` });
      const s = await statusServer([503, 200]);
      const client = createClient({ fleet, policy: FAST });
      try {
        await fleet.ready();
        const res = await client.fetch(s.url);
        await res.text();
        expect(res.status === 200 && s.count() === 2, `status ${res.status} after ${s.count()} calls`);
      } finally {
        await client.close();
        await fleet.close();
        await s.close();
      }
    },
  ],
  [
    'relent (command)',
    '`relent demo` replays the bundled timelines as expected',
    async () => {
      const [cmd, args] = scriptCommand(join(ROOT, 'bin', 'relent'), ['demo']);
      const { code, out } = await new Promise((resolve) => {
        const child = spawn(cmd, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        child.stdout.on('data', (d) => (out += d));
        child.stderr.on('data', (d) => (out += d));
        child.on('close', (code) => resolve({ code, out }));
      });
      expect(code === 0, `exit ${code}: ${out.slice(-300)}`);
    },
  ],
];

export const ENTRY_POINTS = [...new Set(CHECKS.map(([entry]) => entry))];

async function main() {
  const only = process.argv.slice(2).filter((a) => !a.startsWith('-'));
  const runtime = runtimeName();
  let passed = 0,
    failed = 0,
    skipped = 0;
  const kind = runtime.split(' ')[0];
  let known = 0;
  for (const [entry, what, check, exceptions] of CHECKS) {
    if (only.length > 0 && !only.includes(entry)) continue;
    const t0 = Date.now();
    try {
      await Promise.race([check(), new Promise((_, reject) => setTimeout(() => reject(new Error('no answer in 20 s')), 20_000).unref?.())]);
      if (exceptions?.[kind]) {
        known++;
        console.log(`known ${runtime}  ${entry}: ${what}: passes now (${Date.now() - t0} ms): the documented exception no longer holds (${exceptions[kind]})`);
      } else {
        passed++;
        console.log(`ok    ${runtime}  ${entry}: ${what} (${Date.now() - t0} ms)`);
      }
    } catch (e) {
      if (exceptions?.[kind] && !(e instanceof Skip)) {
        known++;
        console.log(`known ${runtime}  ${entry}: ${what}: a documented exception: ${exceptions[kind]} (${e.message})`);
      } else if (e instanceof Skip) {
        skipped++;
        console.log(`skip  ${runtime}  ${entry}: ${what}: ${e.message}`);
      } else {
        failed++;
        console.log(`FAIL  ${runtime}  ${entry}: ${what}: ${e?.stack ?? e}`);
      }
    }
  }
  console.log(
    `probe (${runtime}): ${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}${known ? `, ${known} documented exception${known > 1 ? 's' : ''}` : ''}`,
  );
  process.exit(failed > 0 ? 1 : 0);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();
