// The exchange's HTTP surface: size limit, fuzzed bodies, graceful shutdown.
import net from 'node:net';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { answer, bidAfter, bidBody, bidRequest, exchangeConfig, partnerConfig, post, sleep, startExchange, startPartner } from './helpers.js';

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((x) => x.close()));
});

/** Sends raw bytes; resolves with what came back and how much of the body could be written. */
function raw(port: number, head: string, bodyBytes: number, chunked = false, chunk = 16 * 1024): Promise<{ response: string; written: number }> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let response = '';
    let written = 0;
    let finished = false;
    const done = (): void => {
      if (finished) return;
      finished = true;
      s.destroy();
      resolve({ response, written });
    };
    s.on('data', (d) => {
      response += d.toString('latin1');
    });
    s.on('close', done);
    s.on('error', done);
    s.on('connect', () => {
      s.write(head);
      const data = Buffer.alloc(chunk, 0x20);
      const buf = chunked ? Buffer.concat([Buffer.from(`${chunk.toString(16)}\r\n`), data, Buffer.from('\r\n')]) : data;
      const pump = (): void => {
        while (written < bodyBytes && !finished) {
          written += chunk;
          if (!s.write(buf)) {
            s.once('drain', pump);
            return;
          }
        }
      };
      pump();
    });
    setTimeout(done, 5_000);
  });
}

describe('exchange HTTP server', () => {
  it('refuses a body over the size limit without reading it all (declared length, and chunked)', async () => {
    const p = await startPartner(bidAfter(1, 1));
    open.push(p);
    const ex = await startExchange(exchangeConfig([partnerConfig('p', p.url)], { maxRequestBytes: 64 * 1024 }));
    open.push(ex);
    const port = Number(new URL(ex.url).port);
    const total = 50 * 1024 * 1024;
    const declared = await raw(port, `POST /openrtb2/auction HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${total}\r\n\r\n`, total);
    expect(declared.response).toMatch(/^HTTP\/1\.1 400 /);
    expect(declared.response).toMatch(/x-relent-reason: too_large/i);
    expect(declared.written).toBeLessThan(total / 4);
    const chunked = await raw(port, 'POST /openrtb2/auction HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n', total, true);
    // (no length to check first: the server must stop reading on its own)
    expect(chunked.response).toMatch(/^HTTP\/1\.1 400 /);
    expect(chunked.written).toBeLessThan(total / 4);
    expect(p.seen).toHaveLength(0);
    expect(ex.exchange.stats().auctions.byReason).toMatchObject({ too_large: 2 });
    // The server still works.
    expect((await post(ex.url, bidRequest())).status).toBe(200);
  });

  it('answers 405 to GET, 404 elsewhere, 400 to a gzip body', async () => {
    const p = await startPartner(bidAfter(1, 1));
    open.push(p);
    const ex = await startExchange(exchangeConfig([partnerConfig('p', p.url)]));
    open.push(ex);
    const { request } = await import('undici');
    expect((await request(ex.url, { method: 'GET' })).statusCode).toBe(405);
    expect((await request(`${ex.origin}/nope`, { method: 'POST', body: '{}' })).statusCode).toBe(404);
    const gz = await request(ex.url, { method: 'POST', body: 'x', headers: { 'content-encoding': 'gzip' } });
    expect(gz.statusCode).toBe(400);
    await gz.body.dump();
  });

  it('no input makes it answer 500 or crash (fuzzed bodies)', async () => {
    const p = await startPartner((_q, res, n, s) => (n % 3 === 0 ? answer(res, 204) : answer(res, 200, bidBody(s, 1 + (n % 5)))));
    open.push(p);
    const ex = await startExchange(exchangeConfig([partnerConfig('p', p.url, { timeoutMs: 100 })], { maxRequestBytes: 32 * 1024 }));
    open.push(ex);
    const json = fc.letrec((tie) => ({
      value: fc.oneof(
        { depthSize: 'small' },
        fc.constant(null),
        fc.boolean(),
        fc.double(),
        fc.integer(),
        fc.string(),
        fc.array(tie('value'), { maxLength: 4 }),
        fc.dictionary(fc.string(), tie('value'), { maxKeys: 4 }),
      ),
    })).value;
    const impLike = fc.record(
      {
        id: fc.oneof(fc.string(), fc.integer(), fc.constant(undefined)),
        bidfloor: fc.oneof(fc.double(), fc.constant(undefined), fc.string()),
        bidfloorcur: fc.oneof(fc.constant('USD'), fc.constant('EUR'), fc.string(), fc.constant(undefined)),
      },
      { requiredKeys: [] },
    );
    const requestLike = fc.record(
      {
        id: fc.oneof(fc.string(), fc.integer(), fc.constant(undefined)),
        imp: fc.oneof(fc.array(impLike, { maxLength: 4 }), json),
        tmax: fc.oneof(fc.integer({ min: -10, max: 400 }), fc.double(), fc.string(), fc.constant(undefined)),
        cur: fc.oneof(fc.array(fc.string(), { maxLength: 2 }), json),
        site: fc.oneof(json, fc.record({ publisher: fc.record({ id: fc.string() }) })),
        app: fc.oneof(fc.constant(undefined), json),
        ext: json,
      },
      { requiredKeys: [] },
    );
    const body = fc.oneof(
      requestLike.map((v) => JSON.stringify(v)),
      json.map((v) => JSON.stringify(v)),
      fc.string({ maxLength: 200 }),
      fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)),
      requestLike.map((v) => JSON.stringify(v).slice(0, -3)),
      fc.nat({ max: 20_000 }).map((n) => '['.repeat(n) + ']'.repeat(n)),
    );
    await fc.assert(
      fc.asyncProperty(body, async (b) => {
        const a = await post(ex.url, b);
        expect([200, 204, 400]).toContain(a.status);
        if (a.status === 200) expect(a.json).not.toBeNull();
      }),
      { numRuns: 300 },
    );
    expect(ex.exchange.stats().internalErrors).toBe(0);
    expect((await post(ex.url, bidRequest())).status).toBeLessThan(300);
  });

  it('shuts down gracefully: auctions in flight are answered, new connections refused', async () => {
    const p = await startPartner(bidAfter(80, 1));
    open.push(p);
    const ex = await startExchange(exchangeConfig([partnerConfig('p', p.url)]));
    const inflight = [post(ex.url, bidRequest()), post(ex.url, bidRequest()), post(ex.url, bidRequest())];
    await sleep(20);
    expect(ex.exchange.inFlight).toBe(3);
    const closed = ex.exchange.close();
    const answers = await Promise.all(inflight);
    for (const a of answers) expect(a.status).toBe(200);
    await closed;
    await expect(post(ex.url, bidRequest())).rejects.toThrow();
  });
});
