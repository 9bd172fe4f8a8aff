// The exchange's HTTP side (HttpFront): the request listener (the auction endpoint,
// billing events, /healthz and /readyz), reading and refusing auction bodies, writing
// the answer, and the stalled or broken clients node:http reports (408, 431, 400),
// cut a few per turn of the event loop. The auction itself is auction.ts.
import http from 'node:http';
import type net from 'node:net';
import { headerSafe, plain } from './http-util.js';
import { earlyOutcome, runAuction, type Finished } from './auction.js';
import type { ExchangeCore } from './exchange-core.js';
import type { AuctionReason } from './exchange-types.js';

/** How often the server looks for requests past `readTimeoutMs` (the cut is at most this late). */
export const READ_CHECK_INTERVAL_MS = 5;

/**
 * How many more of node:http's checks (5 ms apart) a request past `readTimeoutMs` gets
 * when bytes of it were read since the last (they waited behind a stall of this process).
 */
const STALL_GRACE_CHECKS = 4;

const BILLING_EVENT_PATH = '/openrtb2/billing';

/** An exchange's HTTP side, on its shared state. */
export class HttpFront {
  /** Sockets whose request timed out, answered a few per turn of the event loop (a burst of stalled clients must not stall the auctions). */
  private cutQueue: net.Socket[] = [];
  private readonly cutSeen = new WeakSet<net.Socket>();
  private cutScheduled = false;
  /** Sockets node:http reported past readTimeoutMs, looked at again after the loop's read phase. */
  private readonly stalled = new WeakMap<net.Socket, { lastAt: number; bytes: number; graces: number; pending: boolean }>();

  constructor(private readonly core: ExchangeCore) {}

  /**
   * A server for this front with the stalled-client limits (`readTimeoutMs`,
   * `maxHeaderBytes`) of the configuration.
   */
  createServer(): http.Server {
    const cfg = this.core.config;
    const server = http.createServer(
      {
        // A stalled client is cut when its request has not all arrived readTimeoutMs after its first byte (checked every few ms).
        requestTimeout: cfg.readTimeoutMs,
        headersTimeout: cfg.readTimeoutMs,
        connectionsCheckingInterval: READ_CHECK_INTERVAL_MS,
        maxHeaderSize: cfg.maxHeaderBytes,
      },
      this.handler,
    );
    server.keepAliveTimeout = 65_000;
    server.on('clientError', this.onClientError);
    return server;
  }

  readonly handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const arrivedAt = this.core.clock.now();
    try {
      const url = req.url ?? '/';
      const q = url.indexOf('?');
      const path = q < 0 ? url : url.slice(0, q);
      if (this.core.stopping) res.setHeader('connection', 'close');
      if (path === this.core.config.path) {
        if (req.method !== 'POST') return plain(res, 405, 'POST only\n', { allow: 'POST' });
        return this.readAuction(req, res, arrivedAt);
      }
      if (path === BILLING_EVENT_PATH && this.core.config.notices.billing === 'on-event') return this.onBillingEvent(req, res, q < 0 ? '' : url.slice(q + 1));
      if ((path === '/healthz' || path === '/readyz') && (req.method === 'GET' || req.method === 'HEAD')) {
        // healthz: the process serves (also while draining); readyz: send it auctions (warmed up, not closing).
        if (path === '/healthz') return plain(res, 200, 'ok\n');
        if (this.core.isReady && !this.core.stopping) return plain(res, 200, 'ready\n');
        return plain(res, 503, this.core.stopping ? 'closing\n' : 'starting\n');
      }
      return plain(res, 404, 'not found\n');
    } catch {
      this.core.metrics.internalErrors++;
      if (!res.headersSent) plain(res, 500, 'internal error\n');
      else res.destroy();
    }
  };

  /**
   * What node:http could not make a request of: a head or body not all there
   * `readTimeoutMs` after its first byte, or a new connection that sent nothing for that
   * long (408 and close), a head over `maxHeaderBytes` (431), bytes that are not HTTP
   * (400), a client that went away.
   */
  readonly onClientError = (err: Error & { code?: string }, socket: net.Socket): void => {
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return this.onStalled(socket);
    if (err.code === 'ECONNRESET' || !socket.writable) {
      this.core.metrics.requests.reset++;
      socket.destroy();
      return;
    }
    let head: string;
    if (err.code === 'HPE_HEADER_OVERFLOW') {
      this.core.metrics.requests.headerTooLarge++;
      head = `HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\nx-relent-reason: header_too_large: over ${this.core.config.maxHeaderBytes} bytes\r\n\r\n`;
    } else {
      this.core.metrics.requests.malformed++;
      head = 'HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\nx-relent-reason: malformed_http\r\n\r\n';
    }
    if (!(socket as net.Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent) socket.write(head);
    socket.destroy();
  };

  /**
   * node:http checks for requests past readTimeoutMs in the timers phase, before the
   * loop reads what arrived meanwhile: after a stall of this process (a long GC, a busy
   * machine) a request whose bytes are waiting to be read would be cut with the stalled
   * ones. So the cut is decided after the read phase (setImmediate): a socket that got
   * new bytes there is left to node:http's next check (every 5 ms), at most
   * STALL_GRACE_CHECKS times (a client trickling bytes gains 20 ms, no more); one that got
   * none is cut. node:http reports a socket at every check until it is gone; a report
   * 50 ms after the last is a new request of the connection.
   */
  private onStalled(socket: net.Socket): void {
    if (this.cutSeen.has(socket)) return;
    const now = this.core.clock.now();
    let s = this.stalled.get(socket);
    if (s === undefined || now - s.lastAt > 50) {
      s = { lastAt: now, bytes: socket.bytesRead, graces: 0, pending: false };
      this.stalled.set(socket, s);
    }
    s.lastAt = now;
    if (s.pending) return;
    s.pending = true;
    const entry = s;
    setImmediate(() => {
      entry.pending = false;
      if (socket.destroyed || this.cutSeen.has(socket)) return;
      if (socket.bytesRead !== entry.bytes && entry.graces < STALL_GRACE_CHECKS) {
        entry.bytes = socket.bytesRead;
        entry.graces++;
        return;
      }
      this.cutSeen.add(socket);
      this.cutQueue.push(socket);
      if (!this.cutScheduled) {
        this.cutScheduled = true;
        setImmediate(this.cutSome);
      }
    });
  }

  private readonly cutSome = (): void => {
    this.cutScheduled = false;
    const batch = this.cutQueue.splice(0, 64);
    for (const socket of batch) {
      if (socket.destroyed) continue;
      // Also a new connection that sent nothing yet: RFC 9110 §15.5.9 lets a server send 408 on an idle connection.
      this.core.metrics.requests.timedOut++;
      const res = (socket as net.Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
      if (socket.writable && !res?.headersSent) {
        socket.write(
          'HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\nx-relent-reason: request_timeout: the request did not arrive within readTimeoutMs\r\n\r\n',
        );
      }
      socket.destroy();
    }
    if (this.cutQueue.length > 0) {
      this.cutScheduled = true;
      setImmediate(this.cutSome);
    }
  };

  /** Refuses a request whose body is not read: answer, then close the connection. */
  private refuse(req: http.IncomingMessage, res: http.ServerResponse, arrivedAt: number, reason: AuctionReason, detail: string): void {
    res.writeHead(400, { 'content-length': '0', connection: 'close', 'x-relent-reason': `${reason}: ${detail}` });
    res.end(() => req.socket.destroy());
    this.core.completed(earlyOutcome(400, reason, null, 0, this.core.clock.now() - arrivedAt, null), null, arrivedAt, this.core.clock.now());
  }

  private readAuction(req: http.IncomingMessage, res: http.ServerResponse, arrivedAt: number): void {
    const max = this.core.config.maxRequestBytes;
    const enc = req.headers['content-encoding'];
    if (enc !== undefined && enc.trim().toLowerCase() !== 'identity')
      return this.refuse(req, res, arrivedAt, 'unsupported_encoding', 'compressed request bodies are not accepted');
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > max) return this.refuse(req, res, arrivedAt, 'too_large', `over ${max} bytes`);
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    const onData = (c: Buffer): void => {
      size += c.length;
      if (size > max) {
        refused = true;
        req.off('data', onData);
        req.pause();
        this.refuse(req, res, arrivedAt, 'too_large', `over ${max} bytes`);
        return;
      }
      chunks.push(c);
    };
    req.on('data', onData);
    req.on('error', () => {
      // The client went away mid-body, or it stalled and was cut (counted there).
      if (!this.cutSeen.has(req.socket)) this.core.metrics.requests.reset++;
      refused = true;
      res.destroy();
    });
    req.on('end', () => {
      if (refused) return;
      const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
      // Tracked until the answer is written: a shutdown waits for it.
      void this.core.track(
        runAuction(this.core, body, arrivedAt).then(
          (f) => this.write(res, f, arrivedAt),
          () => {
            this.core.metrics.internalErrors++;
            if (!res.headersSent && !res.destroyed) plain(res, 500, 'internal error\n');
          },
        ),
      );
    });
  }

  private write(res: http.ServerResponse, f: Finished, arrivedAt: number): void {
    const o = f.outcome;
    if (!res.destroyed && !res.writableEnded) {
      if (o.status === 200) {
        res.writeHead(200, { 'content-type': 'application/json', 'x-openrtb-version': '2.6', 'content-length': String(Buffer.byteLength(o.body!)) });
        res.end(o.body);
      } else if (o.status === 204) {
        res.writeHead(204, { 'x-openrtb-version': '2.6', 'x-relent-reason': o.reason });
        res.end();
      } else {
        const why = o.summary.invalidField === null ? o.reason : `${o.reason}: ${o.summary.invalidField}`;
        res.writeHead(400, { 'content-length': '0', 'x-relent-reason': headerSafe(why) });
        res.end();
      }
    }
    this.core.completed(o, f.fire, arrivedAt, this.core.clock.now());
  }

  private onBillingEvent(req: http.IncomingMessage, res: http.ServerResponse, query: string): void {
    if (req.method !== 'GET' && req.method !== 'POST') return plain(res, 405, 'GET or POST\n', { allow: 'GET, POST' });
    req.resume();
    const params = new URLSearchParams(query);
    const id = params.get('id');
    const imp = params.get('imp');
    if (!id || !imp) return plain(res, 400, 'expected ?id=<bid request id>&imp=<impression id>\n');
    // 204 only once the billing notice is stored (durable store): an answered event is not lost.
    this.core
      .billingEvent(id, imp)
      .then(async (r) => {
        if (r === 'unknown') return plain(res, 404, 'no won impression with this id (or it expired)\n');
        if (!(await this.core.notices.stored())) return plain(res, 503, 'the billing notice is not stored yet; send the event again\n', { 'retry-after': '1' });
        res.writeHead(204);
        res.end();
      })
      .catch(() => {
        this.core.metrics.internalErrors++;
        if (!res.headersSent) plain(res, 503, 'the billing notice could not be stored; send the event again\n');
      });
  }
}
