// The exchange in production: ready before it serves (connections opened to every
// partner, dry-run auctions against a stand-in, /readyz), stalled clients cut at the
// deadline, loss notices, and the new configuration keys. Real sockets on loopback.
import { spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import { availableParallelism, loadavg } from 'node:os';
import v8 from 'node:v8';
import { afterEach, describe, expect, it } from 'vitest';
import { resolveExchangeConfig } from '../../src/rtb/config.js';
import { createExchange } from '../../src/rtb/exchange.js';
import { answer, bidAfter, bidRequest, exchangeConfig, partnerConfig, post, sleep, startExchange, startPartner, type PartnerSeen } from './helpers.js';

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

/** A partner that also counts the TCP connections it accepted. */
async function countingPartner(reply = bidAfter(1, 1.5)): Promise<Awaited<ReturnType<typeof startPartner>> & { connections: () => number }> {
  const p = await startPartner(reply);
  // The helper's server is not exposed: count connections through a second listener in front.
  let n = 0;
  const front = net.createServer((c) => {
    n++;
    const back = net.connect(p.port, '127.0.0.1');
    c.pipe(back).pipe(c);
    c.on('error', () => back.destroy());
    back.on('error', () => c.destroy());
    c.on('close', () => back.destroy());
    back.on('close', () => c.destroy());
  });
  await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
  const port = (front.address() as net.AddressInfo).port;
  return {
    ...p,
    url: `http://127.0.0.1:${port}/bid`,
    port,
    seen: p.seen,
    reply: p.reply,
    connections: () => n,
    close: async () => {
      await new Promise<void>((resolve) => front.close(() => resolve()));
      await p.close();
    },
  };
}

interface RawResult {
  response: string;
  closedAfterMs: number;
}

/** Opens a connection, writes `bytes`, then nothing; resolves when the server closes it (or after `waitMs`). */
function stall(port: number, bytes: string, waitMs = 3_000): Promise<RawResult> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const s = net.connect(port, '127.0.0.1');
    let response = '';
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      s.destroy();
      resolve({ response, closedAfterMs: performance.now() - t0 });
    };
    s.on('connect', () => {
      if (bytes.length > 0) s.write(bytes);
    });
    s.on('data', (d) => {
      response += d.toString('latin1');
    });
    s.on('close', finish);
    s.on('error', finish);
    setTimeout(finish, waitMs);
  });
}

describe('ready before it serves', () => {
  it('opens connections to every partner and runs dry runs against a stand-in, never the partners, before listening', async () => {
    const a = await countingPartner();
    const b = await countingPartner();
    open.push(a, b);
    const ex = createExchange(
      exchangeConfig([partnerConfig('a', a.url, { maxConcurrency: 8 }), partnerConfig('b', b.url, { maxConcurrency: 40, warmConnections: 5 })], {
        warmup: { auctions: 20 },
      }),
    );
    open.push({ close: () => ex.close({ force: true }) });
    expect(ex.stats().ready).toBe(false);
    const report = await ex.ready();
    expect(report.dryRunAuctions).toBe(20);
    expect(report.partners).toEqual([
      { name: 'a', connections: 8, wanted: 8, error: null },
      { name: 'b', connections: 5, wanted: 5, error: null },
    ]);
    expect(report.noticeStore).toBe('memory');
    // The warm-up's garbage was collected before serving: the young generation starts (almost) empty.
    expect(report.gcMs).toBeGreaterThanOrEqual(0);
    const young = v8.getHeapSpaceStatistics().find((x) => x.space_name === 'new_space')!;
    expect(young.space_used_size).toBeLessThan(512 * 1024);
    // Connections opened, not a single request sent to a partner; nothing counted as an auction.
    expect(a.connections()).toBe(8);
    expect(b.connections()).toBe(5);
    expect(a.seen).toHaveLength(0);
    expect(b.seen).toHaveLength(0);
    expect(ex.stats().auctions.total).toBe(0);
    expect(ex.stats().ready).toBe(true);

    // The first auctions use the connections opened in advance: no new one for 5 at once.
    const info = await ex.listen(0, '127.0.0.1');
    const answers = await Promise.all(Array.from({ length: 5 }, () => post(info.url, bidRequest())));
    expect(answers.map((x) => x.status)).toEqual([200, 200, 200, 200, 200]);
    expect(a.seen).toHaveLength(5);
    expect(a.connections()).toBe(8);
    expect(b.connections()).toBe(5);
  });

  it('a partner that refuses connections does not keep the exchange from serving; the report says so', async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const ok = await countingPartner();
    open.push(ok);
    const ex = await startExchange(
      exchangeConfig([partnerConfig('down', `http://127.0.0.1:${port}/bid`, { maxConcurrency: 3 }), partnerConfig('ok', ok.url, { maxConcurrency: 2 })]),
    );
    open.push(ex);
    const report = await ex.exchange.ready();
    expect(report.partners[0]).toMatchObject({ name: 'down', connections: 0, wanted: 3, error: 'ECONNREFUSED' });
    expect(report.partners[1]).toMatchObject({ name: 'ok', connections: 2, wanted: 2 });
    expect((await post(ex.url, bidRequest())).status).toBe(200);
  });

  it('/healthz answers 200 while the process runs, /readyz 200 when it takes auctions and 503 while it stops', async () => {
    const p = await startPartner(bidAfter(150, 1));
    open.push(p);
    const ex = await startExchange(exchangeConfig([partnerConfig('p', p.url, { timeoutMs: 200 })]));
    open.push(ex);
    const get = async (path: string): Promise<number> => (await fetch(`${ex.origin}${path}`)).status;
    expect(await get('/healthz')).toBe(200);
    expect(await get('/readyz')).toBe(200);
    // While an auction is in flight, close(): the listening socket closes; the open connection still gets its answer.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const ask = (path: string, body?: string): Promise<number> =>
      new Promise((resolve, reject) => {
        const req = http.request(
          `${ex.origin}${path}`,
          { agent, method: body ? 'POST' : 'GET', headers: body ? { 'content-type': 'application/json' } : {} },
          (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode!));
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    const inFlight = ask('/openrtb2/auction', JSON.stringify(bidRequest()));
    await sleep(30);
    const closing = ex.exchange.close();
    const stopped = ex.exchange.stats();
    expect(stopped.ready).toBe(false);
    expect(await inFlight).toBe(200);
    await closing;
    agent.destroy();
  });
});

describe('stalled clients', () => {
  const config = (url: string): ReturnType<typeof exchangeConfig> =>
    exchangeConfig([partnerConfig('p', url, { timeoutMs: 40 })], {
      auctionTimeoutMs: 60,
      reserveMs: 20,
      defaultTmaxMs: 90,
    });

  it('half a body then silence: answered 408 and closed within tmax + 20 ms, counted, not an auction', async () => {
    const p = await startPartner(bidAfter(1, 1));
    open.push(p);
    const ex = await startExchange(config(p.url));
    open.push(ex);
    const port = Number(new URL(ex.url).port);
    const body = JSON.stringify(bidRequest({ tmax: 90 }));
    const r = await stall(
      port,
      `POST /openrtb2/auction HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, body.length >> 1)}`,
    );
    expect(r.response).toMatch(/^HTTP\/1\.1 408 /);
    expect(r.response).toMatch(/x-relent-reason: request_timeout/i);
    expect(r.closedAfterMs).toBeGreaterThanOrEqual(85);
    expect(r.closedAfterMs).toBeLessThan(90 + 20 + 30); // + 30 ms of slack for a loaded machine (the bound itself is checked every 5 ms)
    const s = ex.exchange.stats();
    expect(s.requests.timedOut).toBe(1);
    expect(s.auctions.total).toBe(0);
    expect(p.seen).toHaveLength(0);
  });

  it('a partial head, an unfinished chunked body and a connection that sends nothing are cut the same way', async () => {
    const p = await startPartner(bidAfter(1, 1));
    open.push(p);
    const ex = await startExchange(config(p.url));
    open.push(ex);
    const port = Number(new URL(ex.url).port);
    const [head, chunked, idle] = await Promise.all([
      stall(port, 'POST /openrtb2/auction HTTP/1.1\r\nHost: x\r\nContent-Ty'),
      stall(port, 'POST /openrtb2/auction HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"id"\r\n'),
      stall(port, ''),
    ]);
    expect(head.response).toMatch(/^HTTP\/1\.1 408 /);
    expect(chunked.response).toMatch(/^HTTP\/1\.1 408 /);
    expect(idle.response).toMatch(/^HTTP\/1\.1 408 /);
    for (const r of [head, chunked, idle]) expect(r.closedAfterMs).toBeLessThan(90 + 20 + 30);
    expect(ex.exchange.stats().requests).toMatchObject({ timedOut: 3 });
  });

  it('a request that arrived on time while this process was stalled is served, not cut', async () => {
    const p = await startPartner(bidAfter(1, 1));
    open.push(p);
    const ex = await startExchange(config(p.url));
    open.push(ex);
    const port = Number(new URL(ex.url).port);
    const server = (ex.exchange as unknown as { server: http.Server }).server;
    const accepted = new Promise<void>((resolve) => server.once('connection', () => resolve()));
    // The client, in another process: connects, then sends a whole request when told.
    const body = JSON.stringify(bidRequest({ tmax: 300 }));
    const CLIENT = `
      const s = require('node:net').connect(Number(process.argv[1]), '127.0.0.1');
      let data = '';
      s.on('data', (d) => { data += d; if (data.includes('\\r\\n\\r\\n')) { process.stdout.write(data.split('\\r\\n')[0]); process.exit(0); } });
      process.on('message', () => s.write(process.argv[2], () => require('node:fs').writeFileSync(process.argv[3], 'sent')));
    `;
    const request = `POST /openrtb2/auction HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const { existsSync, mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const marker = join(mkdtempSync(join(tmpdir(), 'relent-stall-')), 'sent');
    const child = spawn(process.execPath, ['-e', CLIENT, String(port), request, marker], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
    });
    await accepted;
    child.send('go');
    // This process stalls longer than readTimeoutMs (90 ms) while the request arrives (the
    // client says when it has written it: on a busy machine that may take a while).
    const t0 = performance.now();
    while ((performance.now() - t0 < 200 || !existsSync(marker)) && performance.now() - t0 < 5_000) {
      /* busy */
    }
    await new Promise<void>((resolve) => child.on('exit', () => resolve()));
    expect(out).toMatch(/^HTTP\/1\.1 (200|204) /);
    expect(ex.exchange.stats().requests.timedOut).toBe(0);
  });

  it('a head over maxHeaderBytes is answered 431 and closed', async () => {
    const p = await startPartner(bidAfter(1, 1));
    open.push(p);
    const ex = await startExchange(exchangeConfig([partnerConfig('p', p.url)], { maxHeaderBytes: 2048 }));
    open.push(ex);
    const r = await stall(Number(new URL(ex.url).port), `POST /openrtb2/auction HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(4096)}\r\n\r\n`);
    expect(r.response).toMatch(/^HTTP\/1\.1 431 /);
    expect(ex.exchange.stats().requests.headerTooLarge).toBe(1);
  });

  // On a machine shared with other work a stall of the whole process can make one answer late
  // without any stalled client; a second run tells that apart from a real delay.
  it('1,000 stalled clients at once do not delay honest auctions past their deadline', { timeout: 30_000, retry: 2 }, async () => {
    const p = await startPartner(bidAfter(5, 1));
    open.push(p);
    const ex = await startExchange(config(p.url));
    open.push(ex);
    const port = Number(new URL(ex.url).port);
    const body = JSON.stringify(bidRequest({ tmax: 90 }));
    const half = `POST /openrtb2/auction HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 20)}`;
    // The honest client's connections are open before the burst (kept alive between requests,
    // they are never cut); the stalled clients live in another process.
    await Promise.all(Array.from({ length: 8 }, () => post(ex.url, bidRequest({ tmax: 90 }))));
    const child = spawn(process.execPath, ['-e', STALLER, String(port), half, '1000'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
    for (let i = 0; i < 200 && !out.includes('connected'); i++) await sleep(10);
    // Honest auctions all along, in particular while the 1,000 are cut at once.
    const honest: Promise<unknown>[] = [];
    for (let i = 0; i < 30; i++) {
      honest.push(post(ex.url, bidRequest({ tmax: 90 })));
      await sleep(10);
    }
    await Promise.all(honest);
    await exited;
    const result = JSON.parse(out.slice(out.indexOf('{'))) as { answered408: number; maxClosedMs: number };
    expect(result.answered408, JSON.stringify({ result, requests: ex.exchange.stats().requests })).toBe(1_000);
    const s = ex.exchange.stats();
    expect(s.requests.timedOut).toBe(1_000);
    expect(s.auctions.total).toBe(38);
    // The exchange's own measure: answers written more than 5 ms after their deadline. A
    // machine whose load average is over twice its cores stalls processes for tens of ms
    // whatever they do: there the figure is printed, not judged.
    const load = loadavg()[0]!;
    if (load > 2 * availableParallelism()) {
      process.stderr.write(
        `[1,000 stalled clients] load average ${load.toFixed(1)}: ${s.auctions.afterDeadline} of 38 answers after deadline + 5 ms (worst ${s.auctions.maxOverDeadlineMs} ms over); not asserted\n`,
      );
    } else expect(s.auctions.afterDeadline, `worst: ${s.auctions.maxOverDeadlineMs} ms over`).toBe(0);
    // Every honest auction was answered by its deadline (a bid, or a no-bid when the partner itself was slow on a loaded machine).
    expect(ex.summaries.map((x) => x.status).filter((x) => x !== 200 && x !== 204)).toEqual([]);
    expect(
      ex.summaries.filter((x) => x.status === 200).length,
      JSON.stringify(ex.summaries.map((x) => [x.status, x.usedMs, x.deadlineMs, x.results[0]?.outcome])),
    ).toBeGreaterThan(0);
  });
});

/** A child process: N connections that send `bytes` and stall; prints "connected", then what came back. */
const STALLER = `
const net = require('node:net');
const [port, bytes, n] = [Number(process.argv[1]), process.argv[2], Number(process.argv[3])];
let connected = 0, closed = 0, answered408 = 0, maxClosedMs = 0;
const t0 = Date.now();
for (let i = 0; i < n; i++) {
  const s = net.connect(port, '127.0.0.1', () => { s.write(bytes); if (++connected === n) process.stdout.write('connected\\n'); });
  let data = '';
  s.on('data', (d) => { data += d; });
  s.on('error', () => {});
  s.on('close', () => {
    if (data.startsWith('HTTP/1.1 408')) answered408++;
    maxClosedMs = Math.max(maxClosedMs, Date.now() - t0);
    if (++closed === n) { process.stdout.write(JSON.stringify({ answered408, maxClosedMs }) + '\\n'); process.exit(0); }
  });
}
setTimeout(() => { process.stdout.write(JSON.stringify({ answered408, maxClosedMs, closed }) + '\\n'); process.exit(0); }, 10000);
`;

describe('loss notices', () => {
  it("calls the lurl of a losing bid with the loss reason (102 outbid, 100 below the floor), and never the winner's", async () => {
    const calls: string[] = [];
    const sink = http.createServer((req, res) => {
      calls.push(req.url!);
      res.writeHead(204).end();
    });
    await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
    open.push({ close: () => new Promise<void>((resolve) => sink.close(() => resolve())) });
    const base = `http://127.0.0.1:${(sink.address() as net.AddressInfo).port}`;
    const bidder =
      (price: number, name: string) =>
      (_req: http.IncomingMessage, res: http.ServerResponse, _n: number, s: PartnerSeen): void => {
        answer(
          res,
          200,
          JSON.stringify({
            id: s.body?.id,
            seatbid: [
              {
                seat: name,
                bid: [{ id: `${name}-bid`, impid: '1', price, adm: '<ad/>', lurl: `${base}/loss/${name}?r=\${AUCTION_LOSS}&win=\${AUCTION_MIN_TO_WIN}` }],
              },
            ],
          }),
        );
      };
    const high = await startPartner(bidder(2, 'high'));
    const low = await startPartner(bidder(1, 'low'));
    const under = await startPartner(bidder(0.1, 'under'));
    open.push(high, low, under);
    const ex = await startExchange(
      exchangeConfig([partnerConfig('high', high.url), partnerConfig('low', low.url), partnerConfig('under', under.url)], {
        notices: { win: 'exchange', billing: 'on-win' },
      }),
    );
    open.push(ex);
    const a = await post(ex.url, bidRequest({ imp: [{ id: '1', bidfloor: 0.5 }] }));
    expect(a.status).toBe(200);
    expect(JSON.stringify(a.json)).not.toContain('lurl');
    for (let i = 0; i < 100 && ex.exchange.stats().notices.loss.delivered < 2; i++) await sleep(10);
    expect(calls.sort()).toEqual(['/loss/low?r=102&win=2', '/loss/under?r=100&win=2']);
    expect(ex.exchange.stats().notices.loss).toMatchObject({ sent: 2, delivered: 2 });
  });
});

describe('new configuration keys', () => {
  const base = { auctionTimeoutMs: 100, reserveMs: 10, partners: [{ name: 'a', url: 'http://127.0.0.1:1/', timeoutMs: 50, maxConcurrency: 4 }] };
  it('are validated with errors that name the field', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ readTimeoutMs: 0 }, /`readTimeoutMs` to be an integer in \[1, 600000\], got 0/],
      [{ maxHeaderBytes: 10 }, /`maxHeaderBytes` to be an integer in \[1024, 1048576\]/],
      [{ warmup: { auctions: -1 } }, /`warmup.auctions`/],
      [{ warmup: { dryRuns: 3 } }, /Unknown field `warmup.dryRuns`/],
      [{ warmup: true }, /`warmup` to be an object/],
      [{ notices: { store: 'mysql://x' } }, /`notices.store` to be "memory", "sqlite:FILE" or a "postgres:\/\/…" URL/],
      [{ notices: { store: 'postgres://u:secret@h/db', worker: { leaseMs: 5 } } }, /`notices.worker.leaseMs`/],
      [{ notices: { worker: { lease: 5 } } }, /notices.worker.lease/],
      [{ notices: { loss: 'sometimes' } }, /`notices.loss` to be one of "exchange", "off"/],
      [{ partners: [{ ...base.partners[0], warmConnections: 5 }] }, /`partners\[0\].warmConnections` to be an integer in \[0, 4\]/],
      [{ partners: [{ ...base.partners[0], retryBudget: { kind: 'lottery' } }] }, /partners\[0\]\.retryBudget/],
      [{ fleet: { prefix: 'x:' } }, /`fleet.url` to be a redis:\/\/ or rediss:\/\/ URL/],
      [{ fleet: 'redis://x' }, /`fleet` to be an object/],
    ];
    for (const [over, message] of cases) {
      expect(() => resolveExchangeConfig({ ...base, ...over })).toThrow(message);
    }
    // A store URL's password is never echoed.
    expect(() => resolveExchangeConfig({ ...base, notices: { store: 'mysql://u:secret@h/db' } })).toThrow(/^(?!.*secret)/);
    const d = resolveExchangeConfig(base);
    expect(d).toMatchObject({ readTimeoutMs: 110, maxHeaderBytes: 16384, warmup: { auctions: 48, timeoutMs: 3000 } });
    expect(d.notices).toMatchObject({ store: 'memory', loss: 'exchange' });
    expect(resolveExchangeConfig({ ...base, warmup: false }).warmup).toBeNull();
  });
});
