// Ready before serving: connections opened to every partner ahead of the first auction,
// and a stand-in partner on loopback for the dry-run auctions that compile the hot path.
import http from 'node:http';
import type net from 'node:net';
import v8 from 'node:v8';
import vm from 'node:vm';
import type { buildConnector } from 'undici';
import { listenOn } from './http-util.js';

type Connector = buildConnector.connector;
type ConnectOptions = buildConnector.Options;

const noop = (): void => {};

/**
 * An undici connector that first hands out connections opened in advance (`open()`),
 * then connects as usual. A pre-opened connection that the partner closed meanwhile,
 * or on which anything arrived, is never handed out.
 */
export class WarmConnector {
  private readonly idle: net.Socket[] = [];
  private closed = false;

  constructor(private readonly base: Connector) {}

  /** The connector given to the pool. */
  readonly connect = ((options: ConnectOptions, callback: Connector extends (o: ConnectOptions, cb: infer C) => unknown ? C : never) => {
    while (this.idle.length > 0) {
      const socket = this.idle.pop()!;
      if (socket.destroyed || socket.readyState !== 'open' || socket.bytesRead > 0 || socket.readableLength > 0) {
        socket.destroy();
        continue;
      }
      // Asynchronously, as a fresh connection would be (undici expects the callback later).
      queueMicrotask(() => callback(null, socket));
      return socket;
    }
    return this.base(options, callback);
  }) as Connector;

  /** Idle pre-opened connections. */
  get available(): number {
    return this.idle.length;
  }

  /**
   * Opens `n` connections to `url`'s origin at once (TCP, and TLS for https). Resolves
   * with how many opened and the first error's code, never rejects.
   */
  open(url: URL, n: number): Promise<{ opened: number; error: string | null }> {
    if (n <= 0 || this.closed) return Promise.resolve({ opened: 0, error: null });
    let hostname = url.hostname;
    if (hostname.startsWith('[')) hostname = hostname.slice(1, -1);
    const options = { hostname, host: url.host, protocol: url.protocol, port: url.port, servername: null, localAddress: null } as unknown as ConnectOptions;
    let error: string | null = null;
    const one = (): Promise<boolean> =>
      new Promise<boolean>((resolve) => {
        try {
          this.base(options, (err, socket) => {
            if (err !== null || socket === null) {
              error ??= codeOf(err);
              resolve(false);
              return;
            }
            const s = socket as net.Socket;
            if (this.closed) {
              s.destroy();
              resolve(false);
              return;
            }
            s.on('error', noop); // an idle connection's error only closes it (it is skipped when handed out)
            this.idle.push(s);
            resolve(true);
          });
        } catch (e) {
          error ??= codeOf(e);
          resolve(false);
        }
      });
    return Promise.all(Array.from({ length: n }, one)).then((ok) => ({ opened: ok.filter(Boolean).length, error }));
  }

  /** Closes the connections not handed out. */
  close(): void {
    this.closed = true;
    for (const s of this.idle.splice(0)) s.destroy();
  }
}

function codeOf(e: unknown): string {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : e instanceof Error ? e.name : 'error';
}

/**
 * A stand-in partner for the dry-run auctions: on loopback, it answers bid requests in
 * turn with bids on every impression (with notice URLs and macros), a 204, a 200 with
 * `nbr`, a 500, a bid below the floor, no answer at all (the partner is cut at its time,
 * as a hanging partner is) and a reset connection, so that every path an auction takes —
 * the cut and the late-answer grace included — is run before the first real one.
 */
export async function startStandIn(): Promise<{ readonly url: string; close(): Promise<void> }> {
  let n = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let request: { id?: unknown; imp?: { id?: unknown; bidfloor?: unknown }[] } = {};
      try {
        request = JSON.parse(Buffer.concat(chunks).toString('utf8')) as typeof request;
      } catch {
        // answered below like any other
      }
      const k = n++ % 8;
      if (k === 1) return void res.writeHead(204).end();
      if (k === 2) return send(res, 200, JSON.stringify({ id: request.id, nbr: 8 }));
      if (k === 3) return send(res, 500, 'no');
      if (k === 5) return; // never answers: the exchange cuts it (closeAllConnections() ends it at the latest)
      if (k === 6) return void req.socket.destroy();
      const imps = Array.isArray(request.imp) ? request.imp : [];
      const host = `http://${req.headers.host ?? '127.0.0.1'}`;
      const bid = imps.map((imp, i) => {
        const floor = typeof imp.bidfloor === 'number' ? imp.bidfloor : 0;
        return {
          id: `w${i}`,
          impid: imp.id,
          price: k === 4 ? floor / 2 || 0.01 : floor + 1 + i,
          adid: 'ad',
          crid: 'cr',
          adm: '<a href="${AUCTION_PRICE}">${AUCTION_ID}</a>',
          nurl: `${host}/win?id=\${AUCTION_ID}&p=\${AUCTION_PRICE}`,
          burl: `${host}/bill?id=\${AUCTION_ID}&imp=\${AUCTION_IMP_ID}&p=\${AUCTION_PRICE}`,
          lurl: `${host}/loss?id=\${AUCTION_ID}&r=\${AUCTION_LOSS}`,
        };
      });
      send(res, 200, JSON.stringify({ id: request.id, bidid: 'standin', cur: 'USD', seatbid: [{ seat: 'standin', bid }] }));
    });
  });
  server.keepAliveTimeout = 5_000;
  const addr = await listenOn(server, 0, '127.0.0.1', true);
  return {
    url: `http://127.0.0.1:${addr.port}/bid`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function send(res: http.ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) });
  res.end(body);
}

let gcFn: (() => void) | null | undefined;

/**
 * A full garbage collection now; its time in ms, or null when the runtime does not allow
 * it. A process that just ran its warm-up holds a young generation full of that work's
 * garbage: left alone, the first burst of real auctions pays for collecting it (seen as
 * 10–36 ms scavenges there on a busy machine). The collector is reached the way test
 * runners reach it without `--expose-gc` (the flag, then `gc` from a new context).
 */
export function collectGarbage(): number | null {
  if (gcFn === undefined) {
    gcFn = null;
    try {
      const own = (globalThis as { gc?: unknown }).gc;
      const bun = (globalThis as { Bun?: { gc?: (force: boolean) => void } }).Bun;
      if (typeof own === 'function') gcFn = own as () => void;
      else if (typeof bun?.gc === 'function')
        gcFn = () => bun.gc!(true); // Bun: no V8 flags; its own collector call
      else {
        v8.setFlagsFromString('--expose-gc');
        const fn = vm.runInNewContext('gc') as unknown;
        if (typeof fn === 'function') gcFn = fn as () => void;
      }
    } catch {
      gcFn = null;
    }
  }
  if (gcFn === null) return null;
  const t0 = performance.now();
  gcFn();
  return Math.round((performance.now() - t0) * 10) / 10;
}
