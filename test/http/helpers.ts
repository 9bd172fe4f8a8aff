// Real loopback servers for the HTTP tests: node:http / node:https on 127.0.0.1, port 0.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RelentEvent } from '../../src/run/run.js';

export interface Seen {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
  /** performance.now() when the request head arrived. */
  readonly at: number;
}

export type Handler = (req: http.IncomingMessage, res: http.ServerResponse, n: number, body: string) => void;

export interface TestServer {
  readonly url: string;
  readonly origin: string;
  readonly port: number;
  readonly seen: Seen[];
  /** Requests whose head arrived (also those the handler never answered). */
  readonly count: () => number;
  /** Sockets accepted. */
  readonly connections: () => number;
  close(): Promise<void>;
}

/**
 * A server whose handler sees each request after its body was read (unless
 * `readBody: false`). `n` counts requests from 1.
 */
export async function startServer(handler: Handler, opts: { readBody?: boolean; tls?: { key: string; cert: string } } = {}): Promise<TestServer> {
  const seen: Seen[] = [];
  let n = 0;
  let conns = 0;
  const sockets = new Set<net.Socket>();
  const onRequest = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const at = performance.now();
    const k = ++n;
    if (opts.readBody === false) {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: '', at });
      handler(req, res, k, '');
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body, at });
      handler(req, res, k, body);
    });
  };
  const server = opts.tls ? https.createServer({ key: opts.tls.key, cert: opts.tls.cert }, onRequest) : http.createServer(onRequest);
  server.keepAliveTimeout = 10_000;
  server.on(opts.tls ? 'secureConnection' : 'connection', (s: net.Socket) => {
    conns++;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  const origin = `${opts.tls ? 'https' : 'http'}://127.0.0.1:${port}`;
  return {
    url: `${origin}/`,
    origin,
    port,
    seen,
    count: () => seen.length,
    connections: () => conns,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A port on which nothing listens (bound, then closed). */
export async function closedPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/** A raw TCP server: `onSocket` gets each accepted socket and the bytes read so far. */
export async function startRawServer(
  onData: (socket: net.Socket, received: string, n: number) => void,
): Promise<{ origin: string; port: number; count: () => number; received: () => string[]; close(): Promise<void> }> {
  let n = 0;
  const got: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    const k = ++n;
    let buf = '';
    got.push('');
    socket.on('data', (d) => {
      buf += d.toString('latin1');
      got[k - 1] = buf;
      onData(socket, buf, k);
    });
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    origin: `http://127.0.0.1:${port}`,
    port,
    count: () => n,
    received: () => got,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

let certCache: { key: string; cert: string } | null = null;

/** A self-signed certificate for 127.0.0.1, made with the openssl CLI (once per test file). */
export function selfSignedCert(): { key: string; cert: string } {
  if (certCache) return certCache;
  const dir = mkdtempSync(join(tmpdir(), 'relent-tls-'));
  try {
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-sha256',
        '-days',
        '1',
        '-subj',
        '/CN=127.0.0.1',
        '-addext',
        'subjectAltName=IP:127.0.0.1',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
      ],
      { stdio: 'ignore' },
    );
    certCache = { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
    return certCache;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Collects events; `attempts()` and `result()` pick them apart. */
export function eventLog(): {
  onEvent: (e: RelentEvent) => void;
  events: RelentEvent[];
  attempts: () => Extract<RelentEvent, { type: 'attempt' }>[];
  result: () => Extract<RelentEvent, { type: 'result' }> | undefined;
} {
  const events: RelentEvent[] = [];
  return {
    events,
    onEvent: (e) => events.push(e),
    attempts: () => events.filter((e): e is Extract<RelentEvent, { type: 'attempt' }> => e.type === 'attempt'),
    result: () => events.find((e): e is Extract<RelentEvent, { type: 'result' }> => e.type === 'result'),
  };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Waits, a macrotask at a time and without a timer, until `cond` holds: for a real socket
 * event (a request reaching the server) before a test clock is moved.
 */
export async function until(what: string, cond: () => boolean): Promise<void> {
  for (let i = 0; !cond(); i++) {
    if (i > 200_000) throw new Error(`never happened: ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}
