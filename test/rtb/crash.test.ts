// kill -9 the exchange (bin/relent exchange, a real process) while 500 billing notices are
// pending against a receiver that fails, then recovers (2 s here; the property does not
// depend on the length); start it again: every notice arrives, once per key at the
// idempotent receiver, none lost.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type net from 'node:net';
import { getPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { openDeliveryQueue } from '../../src/delivery/queue.js';
import { answer, post, sleep, startPartner, type PartnerSeen } from './helpers.js';

const BIN = fileURLToPath(new URL('../../bin/relent', import.meta.url));
const DIST = fileURLToPath(new URL('../../dist/cli/exchange-cluster.js', import.meta.url));

/** A thread's nice value, from /proc (Linux): field 19 of its stat, counted after the command's closing parenthesis. */
function niceOf(pid: number, tid: number): number {
  const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]);
}

/** The nice values of a process's threads. */
function threadNices(pid: number): { tid: number; nice: number }[] {
  return readdirSync(`/proc/${pid}/task`).map((t) => ({ tid: Number(t), nice: niceOf(pid, Number(t)) }));
}
const dir = mkdtempSync(join(tmpdir(), 'relent-rtb-crash-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Every exchange a test started: killed at the end whatever happened (a failed assertion must not leave one running). */
const started: ChildProcess[] = [];
afterEach(() => {
  for (const c of started.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function start(config: string, extra: string[] = []): { child: ChildProcess; url: Promise<string>; log: () => string } {
  const child = spawn(process.execPath, [BIN, 'exchange', '--config', config, '--port', '0', '--quiet', ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
  started.push(child);
  let log = '';
  child.stdout!.on('data', (d: Buffer) => {
    log += d.toString();
  });
  const url = new Promise<string>((resolve, reject) => {
    child.stderr!.on('data', (d: Buffer) => {
      log += d.toString();
      const m = /ready on (\S+)/.exec(log);
      if (m) resolve(m[1]!);
    });
    child.on('exit', (code, signal) => reject(new Error(`exited (${signal ?? code}) before it was ready:\n${log}`)));
  });
  return { child, url, log: () => log };
}

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

describe('SIGTERM while auctions are in flight', () => {
  it.each([
    ['one process', ['--workers', '1']],
    ['two workers', ['--workers', '2']],
  ])(
    "%s: every won auction's billing notice is in the store after the exchange stopped",
    async (_name, flags) => {
      if (!existsSync(DIST)) throw new Error('dist/ is missing: run `npm run build` first (CI builds before testing)');
      // The partner bids after 30 ms; the auctions are answered on its bid, their notices at the
      // first quiet moment (no auction due within 5 ms): a stop right then must hand them over.
      const partner = await startPartner((_req, res, _n, s: PartnerSeen) => {
        const imps = (s.body?.imp as { id: string }[]) ?? [];
        setTimeout(
          () =>
            answer(
              res,
              200,
              JSON.stringify({
                id: s.body?.id,
                seatbid: [
                  {
                    seat: 's',
                    bid: imps.map((imp, i) => ({ id: `b${i}`, impid: imp.id, price: 1, adm: '<ad/>', burl: `http://127.0.0.1:9/bill?id=\${AUCTION_ID}` })),
                  },
                ],
              }),
            ),
          30,
        );
      });
      const store = `sqlite:${join(dir, `stop-${flags[1]}.db`)}`;
      const config = join(dir, `stop-${flags[1]}.json`);
      writeFileSync(
        config,
        JSON.stringify({
          auctionTimeoutMs: 250,
          reserveMs: 20,
          warmup: { auctions: 4 },
          partners: [{ name: 'dsp', url: partner.url, timeoutMs: 200, maxConcurrency: 64, breaker: false }],
          notices: { win: 'source', billing: 'on-win', store, worker: { pollMs: 60_000 } },
        }),
      );
      try {
        const ex = start(config, flags);
        const url = await ex.url;
        const won: string[] = [];
        for (let round = 0; round < 5; round++) {
          const answers = Array.from({ length: 10 }, (_, i) => post(url, { id: `stop-${round}-${i}`, imp: [{ id: '1' }], tmax: 300 }));
          if (round === 4) {
            // The last ten: stop once the partner has them all (their answers come during the stop).
            for (let i = 0; i < 500 && partner.seen.length < 50; i++) await sleep(2);
            ex.child.kill('SIGTERM');
          }
          for (const a of await Promise.all(answers)) if (a.status === 200) won.push(String(a.json!.id));
        }
        await exited(ex.child);
        expect(ex.child.exitCode, ex.log()).toBe(0);
        expect(won.length, ex.log()).toBeGreaterThanOrEqual(45);
        const q = await openDeliveryQueue({ store });
        const items = (await q.list({ destination: 'rtb:dsp:billing', limit: 1000 })).reduce((n, b) => n + b.items, 0);
        const stats = (await q.stats()).find((r) => r.destination === 'rtb:dsp:billing');
        await q.close();
        const stored =
          stats === undefined
            ? 0
            : stats.pendingItems + stats.readyItems + stats.inflightItems + stats.deferredItems + stats.deliveredItems + stats.droppedItems;
        expect(stored, `${ex.log()}\nbatches hold ${items}`).toBe(won.length);
      } finally {
        await partner.close();
      }
    },
    60_000,
  );
});

describe('relent exchange --workers 2', () => {
  it('serves from two processes on one port, replaces a worker that dies, adds their statistics up, and stops cleanly on SIGTERM', async () => {
    if (!existsSync(DIST)) throw new Error('dist/ is missing: run `npm run build` first (CI builds before testing)');
    const partner = await startPartner((_req, res, _n, s: PartnerSeen) => {
      answer(res, 200, JSON.stringify({ id: s.body?.id, seatbid: [{ seat: 's', bid: [{ id: 'b', impid: '1', price: 1, adm: '<ad/>' }] }] }));
    });
    const config = join(dir, 'workers.json');
    writeFileSync(
      config,
      JSON.stringify({
        auctionTimeoutMs: 250,
        reserveMs: 20,
        warmup: { auctions: 4 },
        notices: { store: 'memory' },
        partners: [{ name: 'dsp', url: partner.url, timeoutMs: 200, maxConcurrency: 10, breaker: false }],
      }),
    );
    try {
      const ex = start(config, ['--workers', '2']);
      const url = await ex.url;
      expect(ex.log()).toMatch(/ready on \S+ after \d+ ms \(2 workers; connections dsp 10\/10; 8 dry-run auctions; notices: memory\)/);
      // New connections each time: the primary hands them to both workers in turn.
      for (let i = 0; i < 20; i++) {
        const r = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', connection: 'close' },
          body: JSON.stringify({ id: `w-${i}`, imp: [{ id: '1' }], tmax: 300 }),
        });
        await r.arrayBuffer();
      }
      // Stats are reported every second: let the last report of both workers arrive.
      await sleep(1_500);
      // A worker that dies is replaced; the port keeps serving meanwhile.
      const { execFileSync } = await import('node:child_process');
      const workers = execFileSync('ps', ['-o', 'pid=', '--ppid', String(ex.child.pid)])
        .toString()
        .trim()
        .split(/\s+/)
        .map(Number);
      expect(workers).toHaveLength(2);
      const primary = ex.child.pid!;
      // The test runner's own nice value (0 unless the run itself is niced): the exchange starts from it.
      const base = getPriority();
      const linux = process.platform === 'linux' && base < 10;
      if (linux) {
        // The notices run in one thread of the primary 10 below it (nice 10 from 0); its main thread and the workers keep the base value.
        const nices = threadNices(primary);
        expect(nices.find((t) => t.tid === primary)?.nice).toBe(base);
        expect(nices.filter((t) => t.nice === base + 10)).toHaveLength(1);
        for (const w of workers) expect(threadNices(w).every((t) => t.nice === base)).toBe(true);
      }
      process.kill(workers[0]!, 'SIGKILL');
      for (let i = 0; i < 500 && !/exited \(SIGKILL\); starting another/.test(ex.log()); i++) await sleep(10);
      if (linux) {
        // The worker forked again is not below the others (it would inherit a niced primary's value).
        // (It is forked 500 ms after the death is logged.)
        let fresh: number[] = [];
        for (let i = 0; i < 300 && fresh.length === 0; i++) {
          await sleep(10);
          fresh = execFileSync('ps', ['-o', 'pid=', '--ppid', String(primary)])
            .toString()
            .trim()
            .split(/\s+/)
            .map(Number)
            .filter((w) => w > 0 && !workers.includes(w));
        }
        expect(fresh).toHaveLength(1);
        expect(niceOf(fresh[0]!, fresh[0]!)).toBe(base);
      }
      for (let i = 0; i < 10; i++) {
        const r = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', connection: 'close' },
          body: JSON.stringify({ id: `after-${i}`, imp: [{ id: '1' }], tmax: 300 }),
        });
        expect(r.status).toBe(200);
        await r.arrayBuffer();
      }
      await sleep(1_500);
      ex.child.kill('SIGTERM');
      const code = await new Promise<number | null>((resolve) => ex.child.once('exit', (c) => resolve(c)));
      expect(code).toBe(0);
      expect(ex.log()).toMatch(/stopped\. auctions 30 /);
      expect(ex.log()).toMatch(/^dsp\s+30\s/m);
      expect(partner.seen).toHaveLength(30);
    } finally {
      await partner.close();
    }
  }, 60_000);
});

describe('durable notices across kill -9', () => {
  it.each([
    ['one process', ['--workers', '1']],
    ['two workers', ['--workers', '2']],
  ])(
    '%s: 500 pending billing notices survive kill -9 and arrive once per key after the restart',
    async (_name, flags) => {
      if (!existsSync(DIST)) throw new Error('dist/ is missing: run `npm run build` first (CI builds before testing)');
      // The receiver: idempotent (counts each request id + impression id once), failing at first.
      let failing = true;
      const unique = new Map<string, number>();
      let requests = 0;
      const server = http.createServer((req, res) => {
        requests++;
        if (failing) return void res.writeHead(500).end();
        const u = new URL(req.url!, 'http://x');
        const key = `${u.searchParams.get('id')}:${u.searchParams.get('imp')}`;
        unique.set(key, (unique.get(key) ?? 0) + 1);
        res.writeHead(204).end();
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const base = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
      const partner = await startPartner((_req, res, _n, s: PartnerSeen) => {
        const imps = (s.body?.imp as { id: string }[]) ?? [];
        answer(
          res,
          200,
          JSON.stringify({
            id: s.body?.id,
            seatbid: [
              {
                seat: 's',
                bid: imps.map((imp, i) => ({
                  id: `b${i}`,
                  impid: imp.id,
                  price: 1,
                  adm: '<ad/>',
                  burl: `${base}/bill?id=\${AUCTION_ID}&imp=\${AUCTION_IMP_ID}`,
                })),
              },
            ],
          }),
        );
      });
      const store = `sqlite:${join(dir, `crash-${flags[1]}.db`)}`;
      const config = join(dir, `exchange-${flags[1]}.json`);
      writeFileSync(
        config,
        JSON.stringify({
          auctionTimeoutMs: 250,
          reserveMs: 20,
          warmup: { auctions: 8 },
          partners: [{ name: 'dsp', url: partner.url, timeoutMs: 200, maxConcurrency: 64, breaker: false }],
          notices: {
            win: 'source',
            billing: 'on-win',
            store,
            // The billing preset with its 10 s scaled down to 200 ms (and a longer deadline): the property is the same.
            billingPolicy: { backoff: { kind: 'constant', delayMs: 200 }, maxAttempts: 1000, deadlineMs: 120_000 },
            worker: { leaseMs: 1_000, pollMs: 50 },
          },
        }),
      );
      try {
        const first = start(config, flags);
        const url = await first.url;
        // Auctions of 5 impressions until 500 billing notices are due (100 won auctions; on a loaded
        // machine a partner answer may miss its auction: that auction bills nothing).
        const imp = Array.from({ length: 5 }, (_, i) => ({ id: String(i + 1) }));
        const won: string[] = [];
        for (let k = 0; won.length < 100; k += 10) {
          const answers = await Promise.all(
            Array.from({ length: Math.min(10, 100 - won.length) }, (_, i) => post(url, { id: `crash-${k + i}`, imp, tmax: 300 })),
          );
          for (const a of answers) if (a.status === 200) won.push(String(a.json!.id));
          expect(k).toBeLessThan(1_000);
        }
        // All 500 written to the store and being retried against the failing receiver.
        const q = await openDeliveryQueue({ store });
        const pending = async (): Promise<number> => {
          const r = (await q.stats()).find((x) => x.destination === 'rtb:dsp:billing');
          return r === undefined ? 0 : r.pendingItems + r.readyItems + r.inflightItems + r.deferredItems;
        };
        for (let i = 0; i < 500 && (await pending()) < 500; i++) await sleep(10);
        expect(await pending()).toBe(500);
        for (let i = 0; i < 500 && requests < 500; i++) await sleep(10);
        first.child.kill('SIGKILL');
        await exited(first.child);
        const failedBefore = requests;
        setTimeout(() => {
          failing = false;
        }, 2_000);
        const second = start(config, flags);
        await second.url;
        for (let i = 0; i < 2_000 && unique.size < 500; i++) await sleep(10);
        second.child.kill('SIGTERM');
        await exited(second.child);
        const counts = [...unique.values()];
        expect(unique.size, second.log()).toBe(500);
        expect([...unique.keys()].sort()).toEqual(won.flatMap((id) => imp.map((x) => `${id}:${x.id}`)).sort());
        expect(counts.every((c) => c >= 1)).toBe(true);
        const stats = (await q.stats()).find((r) => r.destination === 'rtb:dsp:billing')!;
        expect(stats).toMatchObject({ pendingItems: 0, readyItems: 0, inflightItems: 0, deferredItems: 0, deliveredItems: 500, droppedItems: 0 });
        await q.close();
        // For the record: failed attempts before the kill, and repeats the receiver absorbed (at most the batches in flight at the kill).
        process.stderr.write(
          `[crash ${flags[1]}] attempts before kill -9: ${failedBefore}; deliveries after: ${counts.reduce((a, b) => a + b, 0)} for 500 keys\n`,
        );
      } finally {
        await partner.close();
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      }
    },
    60_000,
  );
});
