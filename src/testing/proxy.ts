// relent/testing/proxy: a TCP fault proxy for tests (toxiproxy's idea, in-process).
//
// A test puts it between a client and a real server (PostgreSQL, Redis, an HTTP
// service) and changes the faults at runtime: latency with jitter, packet loss as it
// shows above TCP (late bytes, never missing ones), a blackhole (a partition), resets
// and a cut after N bytes. Time comes from a Clock (the real one by default, a test
// clock for tests of timing rules) and every random draw from a seeded source.
//
// A subpath of its own (not relent/testing), since it needs node:net. This file holds
// the control API (listen, set, clear, stats, close); the fault settings and their TCP
// timing are in proxy-faults.ts, the connection pump that applies them in proxy-pump.ts.
import { createServer, type Server, type Socket } from 'node:net';
import { createSeededRandom } from '../core/random.js';
import type { Clock, Random } from '../core/types.js';
import { clockOption, systemClock } from '../shared/clock.js';
import { FAULT_PROXY_DEFAULTS, invalid, validateFaults, type FaultSettings, type ResolvedFaultSettings } from './proxy-faults.js';
import { destroyLink, openLink, refresh, reset, resetLink, type PumpContext } from './proxy-pump.js';

export { FAULT_PROXY_DEFAULTS, lossPenaltyMs, nextRetransmitAt } from './proxy-faults.js';
export type { FaultDirection, FaultSettings, ResolvedFaultSettings } from './proxy-faults.js';

export interface FaultProxyOptions {
  /** The server the proxy forwards to: `host:port` or `{ host, port }`. */
  readonly target: string | { readonly host: string; readonly port: number };
  /** Where the proxy listens. Default 127.0.0.1. */
  readonly host?: string;
  /** Default 0: a free port (read it from `port`). */
  readonly port?: number;
  /** Seed of the random draws (jitter, losses). Default 1. */
  readonly seed?: number | string;
  /** A random source instead of `seed`. */
  readonly random?: Random;
  /** Time for latency, losses and heals. Default the real clock; a test clock makes them advance only when the test says. */
  readonly clock?: Clock;
  /** Faults in force from the start. */
  readonly faults?: FaultSettings;
}

export interface FaultProxyStats {
  /** Connections accepted so far. */
  readonly accepted: number;
  /** Connections open now. */
  readonly open: number;
  /** Bytes forwarded client → server and server → client. */
  readonly bytesUpstream: number;
  readonly bytesDownstream: number;
  /** Bytes read and not forwarded yet (delayed, lost and waiting for their retransmission, or held by a blackhole). */
  readonly heldBytes: number;
  /** Segment losses drawn (a segment lost twice counts twice). */
  readonly losses: number;
  /** Connections reset by `reset`, and cut by `cutAfterBytes`. */
  readonly resets: number;
  readonly cuts: number;
}

export interface FaultProxy {
  readonly host: string;
  readonly port: number;
  /** `host:port` of the proxy. */
  readonly address: string;
  /** `url` with its host and port replaced by the proxy's (postgres://u@db:5432/x → postgres://u@127.0.0.1:<port>/x). */
  via(url: string): string;
  /** Changes the faults now (the fields given; the others keep their value). */
  set(faults: FaultSettings): void;
  /** Back to no faults (held bytes move as a heal moves them). */
  clear(): void;
  faults(): ResolvedFaultSettings;
  stats(): FaultProxyStats;
  /** Stops listening and destroys every connection. */
  close(): Promise<void>;
}

class Proxy implements FaultProxy {
  readonly host: string;
  port = 0;
  private readonly server: Server;
  /** The faults, counters and connections the pump (proxy-pump.ts) works on. */
  private readonly cx: PumpContext;
  private closing = false;

  constructor(o: FaultProxyOptions) {
    if (o === null || typeof o !== 'object') throw invalid('options', 'an object with a `target`', o);
    const target = parseTarget(o.target);
    this.host = o.host ?? '127.0.0.1';
    if (o.port !== undefined && !(Number.isInteger(o.port) && o.port >= 0 && o.port <= 65_535)) throw invalid('port', 'an integer in [0, 65535]', o.port);
    if (o.random !== undefined && typeof o.random !== 'function') throw invalid('random', 'a function returning numbers in [0, 1)', typeof o.random);
    const random: Random = o.random ?? createSeededRandom(o.seed ?? 1);
    const clock: Clock = clockOption(o.clock) ?? systemClock;
    this.cx = {
      f: { ...FAULT_PROXY_DEFAULTS },
      random,
      clock,
      target,
      s: { accepted: 0, bytesUpstream: 0, bytesDownstream: 0, losses: 0, resets: 0, cuts: 0 },
      links: new Set(),
    };
    if (o.faults !== undefined) this.set(o.faults);
    this.server = createServer({ allowHalfOpen: true, pauseOnConnect: false }, (socket) => this.accept(socket));
  }

  listen(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, this.host, () => {
        this.server.off('error', reject);
        this.server.on('error', () => {});
        this.port = (this.server.address() as { port: number }).port;
        resolve();
      });
    });
  }

  get address(): string {
    return `${this.host.includes(':') ? `[${this.host}]` : this.host}:${this.port}`;
  }

  via(url: string): string {
    const u = new URL(url);
    u.hostname = this.host.includes(':') ? `[${this.host}]` : this.host;
    u.port = String(this.port);
    return u.toString();
  }

  faults(): ResolvedFaultSettings {
    return { ...this.cx.f };
  }

  stats(): FaultProxyStats {
    let held = 0;
    for (const l of this.cx.links) held += l.up.bytes + l.down.bytes;
    return { ...this.cx.s, open: this.cx.links.size, heldBytes: held };
  }

  clear(): void {
    this.set(FAULT_PROXY_DEFAULTS);
  }

  set(faults: FaultSettings): void {
    if (faults === null || typeof faults !== 'object') throw invalid('faults', 'an object', faults);
    validateFaults(faults);
    const before = this.cx.f;
    const next: Record<string, unknown> = { ...before };
    for (const [k, v] of Object.entries(faults)) if (v !== undefined && k in FAULT_PROXY_DEFAULTS) next[k] = v;
    this.cx.f = next as ResolvedFaultSettings;
    const cutChanged = before.cutAfterBytes !== this.cx.f.cutAfterBytes || before.direction !== this.cx.f.direction;
    for (const link of [...this.cx.links]) {
      if (this.cx.f.reset) {
        resetLink(this.cx, link);
        continue;
      }
      if (cutChanged) link.up.sinceCut = link.down.sinceCut = 0;
      refresh(this.cx, link);
    }
  }

  close(): Promise<void> {
    this.closing = true;
    for (const link of [...this.cx.links]) destroyLink(this.cx, link);
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    this.cx.s.accepted++;
    if (this.closing || this.cx.f.reset) {
      this.cx.s.resets += this.closing ? 0 : 1;
      client.on('error', () => {});
      reset(client);
      return;
    }
    openLink(this.cx, client);
  }
}

function parseTarget(t: FaultProxyOptions['target']): { host: string; port: number } {
  if (typeof t === 'string') {
    const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(t);
    if (m) return { host: m[1]!, port: checkPort(Number(m[2])) };
  } else if (t !== null && typeof t === 'object' && typeof t.host === 'string') {
    return { host: t.host, port: checkPort(t.port) };
  }
  throw invalid('target', '"host:port" or { host, port }', t);
}

function checkPort(p: number): number {
  if (!(Number.isInteger(p) && p > 0 && p <= 65_535)) throw invalid('target', 'a port in [1, 65535]', p);
  return p;
}

/**
 * Starts a fault proxy in front of `target` and resolves once it listens. With no faults
 * set it forwards bytes unchanged; `set()` changes the faults of every connection at once.
 *
 *     const proxy = await createFaultProxy({ target: '127.0.0.1:5432', seed: 7 });
 *     const db = new pg.Pool({ connectionString: proxy.via('postgres://postgres@127.0.0.1:5432/test') });
 *     proxy.set({ latencyMs: 100, jitterMs: 20, lossRate: 0.1 });
 *     proxy.set({ blackhole: true });   // a partition …
 *     proxy.set({ blackhole: false });  // … healed
 *     await proxy.close();
 */
export async function createFaultProxy(options: FaultProxyOptions): Promise<FaultProxy> {
  const proxy = new Proxy(options);
  await proxy.listen(options.port ?? 0);
  return proxy;
}
