// relent/testing/proxy: a TCP fault proxy for tests (toxiproxy's idea, in-process).
//
// A test puts it between a client and a real server (PostgreSQL, Redis, an HTTP
// service) and changes the faults at runtime: latency with jitter, packet loss as it
// shows above TCP (late bytes, never missing ones), a blackhole (a partition), resets
// and a cut after N bytes. Time comes from a Clock (the real one by default, a test
// clock for tests of timing rules) and every random draw from a seeded source.
//
// A subpath of its own (not relent/testing), since it needs node:net.
import { createServer, connect, type Server, type Socket } from 'node:net';
import { createSeededRandom } from '../core/random.js';
import type { Clock, Random } from '../core/types.js';
import { clockOption, systemClock } from '../shared/clock.js';
import {
  FAULT_PROXY_DEFAULTS, invalid, lossPenaltyMs, nextRetransmitAt, SYN_RTO_MS, validateFaults,
  type FaultSettings, type ResolvedFaultSettings,
} from './proxy-faults.js';

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

/** Real time between the last bytes before a cut and the reset. */
const CUT_GAP_MS = 5;
/** A connection whose unsent bytes pass this stops reading its sender (a full window), until half is sent. */
const HIGH_WATER = 1 << 20;

type Dir = 'upstream' | 'downstream';

interface Unit {
  at: number;
  readonly kind: 'data' | 'end' | 'reset';
  readonly data: Buffer | null;
}

/** One direction of one connection: what was read from `from` and waits to be written to the other end. */
class Pipe {
  /** Scheduled units, in order (release times never decrease). */
  q: Unit[] = [];
  /** Units read during a blackhole, not scheduled yet. */
  held: Unit[] = [];
  /** When the first unit now held was sent (the partition began for this sender). */
  holdSince = 0;
  /** Release time of the last scheduled unit (bytes stay in order). */
  lastAt = Number.NEGATIVE_INFINITY;
  /** Bytes in `q` and `held`. */
  bytes = 0;
  /** Bytes forwarded since the cut setting was last changed. */
  sinceCut = 0;
  cancel: (() => void) | null = null;
  timerAt = Number.POSITIVE_INFINITY;
  waitingDrain = false;
  full = false;
  done = false;
  constructor(readonly link: Link, readonly dir: Dir) {}
}

class Link {
  upstream: Socket | null = null;
  readonly up: Pipe;
  readonly down: Pipe;
  cancelConnect: (() => void) | null = null;
  /** After a heal, when the server is reached (the SYN's retransmission); bytes to it wait for that. */
  connectAt = Number.NEGATIVE_INFINITY;
  closed = false;
  constructor(readonly proxy: Proxy, readonly client: Socket, readonly acceptedAt: number) {
    this.up = new Pipe(this, 'upstream');
    this.down = new Pipe(this, 'downstream');
  }
}

class Proxy implements FaultProxy {
  readonly host: string;
  port = 0;
  private readonly server: Server;
  private readonly links = new Set<Link>();
  private f: ResolvedFaultSettings = { ...FAULT_PROXY_DEFAULTS };
  private readonly random: Random;
  private readonly clock: Clock;
  private readonly target: { host: string; port: number };
  private s = { accepted: 0, bytesUpstream: 0, bytesDownstream: 0, losses: 0, resets: 0, cuts: 0 };
  private closing = false;

  constructor(o: FaultProxyOptions) {
    if (o === null || typeof o !== 'object') throw invalid('options', 'an object with a `target`', o);
    this.target = parseTarget(o.target);
    this.host = o.host ?? '127.0.0.1';
    if (o.port !== undefined && !(Number.isInteger(o.port) && o.port >= 0 && o.port <= 65_535)) throw invalid('port', 'an integer in [0, 65535]', o.port);
    if (o.random !== undefined && typeof o.random !== 'function') throw invalid('random', 'a function returning numbers in [0, 1)', typeof o.random);
    this.random = o.random ?? createSeededRandom(o.seed ?? 1);
    this.clock = clockOption(o.clock) ?? systemClock;
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
    return { ...this.f };
  }

  stats(): FaultProxyStats {
    let held = 0;
    for (const l of this.links) held += l.up.bytes + l.down.bytes;
    return { ...this.s, open: this.links.size, heldBytes: held };
  }

  clear(): void {
    this.set(FAULT_PROXY_DEFAULTS);
  }

  set(faults: FaultSettings): void {
    if (faults === null || typeof faults !== 'object') throw invalid('faults', 'an object', faults);
    validateFaults(faults);
    const before = this.f;
    const next: Record<string, unknown> = { ...before };
    for (const [k, v] of Object.entries(faults)) if (v !== undefined && k in FAULT_PROXY_DEFAULTS) next[k] = v;
    this.f = next as ResolvedFaultSettings;
    const cutChanged = before.cutAfterBytes !== this.f.cutAfterBytes || before.direction !== this.f.direction;
    for (const link of [...this.links]) {
      if (this.f.reset) {
        this.resetLink(link);
        continue;
      }
      if (cutChanged) link.up.sinceCut = link.down.sinceCut = 0;
      this.refresh(link);
    }
  }

  close(): Promise<void> {
    this.closing = true;
    for (const link of [...this.links]) this.destroyLink(link);
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private affects(dir: Dir): boolean {
    return this.f.direction === 'both' || this.f.direction === dir;
  }

  private blackholed(dir: Dir): boolean {
    return this.f.blackhole && this.affects(dir);
  }

  private accept(client: Socket): void {
    this.s.accepted++;
    if (this.closing || this.f.reset) {
      this.s.resets += this.closing ? 0 : 1;
      client.on('error', () => {});
      reset(client);
      return;
    }
    const link = new Link(this, client, this.clock.now());
    this.links.add(link);
    client.setNoDelay(true);
    client.on('data', (d: Buffer) => this.read(link.up, { at: 0, kind: 'data', data: d }));
    client.on('end', () => this.read(link.up, { at: 0, kind: 'end', data: null }));
    client.on('error', () => this.read(link.up, { at: 0, kind: 'reset', data: null }));
    client.on('close', () => this.maybeDone(link));
    // A partition: the server does not see the connection until the heal (the SYN is lost).
    if (!this.f.blackhole) this.openUpstream(link);
  }

  private openUpstream(link: Link): void {
    if (link.upstream !== null || link.closed) return;
    link.cancelConnect?.();
    link.cancelConnect = null;
    const up = connect({ host: this.target.host, port: this.target.port, allowHalfOpen: true });
    link.upstream = up;
    up.setNoDelay(true);
    up.on('data', (d: Buffer) => this.read(link.down, { at: 0, kind: 'data', data: d }));
    up.on('end', () => this.read(link.down, { at: 0, kind: 'end', data: null }));
    up.on('error', () => this.read(link.down, { at: 0, kind: 'reset', data: null }));
    up.on('close', () => this.maybeDone(link));
    // Bytes the client sent before the server was reached go out now, in order.
    if (link.up.q.length > 0) this.arm(link.up);
  }

  private fromOf(p: Pipe): Socket | null {
    return p.dir === 'upstream' ? p.link.client : p.link.upstream;
  }

  private toOf(p: Pipe): Socket | null {
    return p.dir === 'upstream' ? p.link.upstream : p.link.client;
  }

  /** A unit read from one end: held (blackhole), scheduled (latency, loss), or written at once. */
  private read(p: Pipe, u: Unit): void {
    if (p.link.closed || p.done) return;
    if (u.kind !== 'data') p.done = true;
    if (u.kind === 'reset') {
      // A sender that resets its connection drops what it had not delivered yet (a FIN keeps it).
      p.q = [];
      p.held = [];
      p.bytes = 0;
      p.lastAt = Number.NEGATIVE_INFINITY;
      p.cancel?.();
      p.cancel = null;
      p.timerAt = Number.POSITIVE_INFINITY;
    }
    const now = this.clock.now();
    const size = u.data?.length ?? 0;
    // A connection accepted during a partition is not made until the heal: its bytes wait with it.
    if (this.blackholed(p.dir) || (p.link.upstream === null && this.f.blackhole)) {
      if (p.held.length === 0) p.holdSince = now;
      u.at = now;
      p.held.push(u);
      p.bytes += size;
      this.backpressure(p);
      return;
    }
    const affected = this.affects(p.dir);
    const start = p.dir === 'upstream' && p.link.upstream === null ? Math.max(now, p.link.connectAt) : now;
    let delay = start - now;
    if (affected && (this.f.latencyMs > 0 || this.f.jitterMs > 0)) {
      delay += Math.max(0, this.f.latencyMs + (this.f.jitterMs > 0 ? (2 * this.random() - 1) * this.f.jitterMs : 0));
    }
    if (affected && this.f.lossRate > 0 && u.data !== null) {
      // Each segment may be lost (again): it and everything behind it arrive a retransmission timeout later.
      const seg = this.f.segmentBytes;
      for (let off = 0; off < u.data.length; off += seg) {
        let k = 0;
        while (k < 16 && this.random() < this.f.lossRate) k++;
        this.s.losses += k;
        const piece = off === 0 && u.data.length <= seg ? u.data : u.data.subarray(off, Math.min(off + seg, u.data.length));
        this.schedule(p, { at: now + delay + lossPenaltyMs(k, this.f.lossDelayMs), kind: 'data', data: piece });
      }
      this.backpressure(p);
      this.arm(p);
      return;
    }
    if (delay === 0 && p.q.length === 0 && p.held.length === 0) {
      this.forward(p, u);
      return;
    }
    this.schedule(p, { ...u, at: now + delay });
    this.backpressure(p);
    this.arm(p);
  }

  private schedule(p: Pipe, u: Unit): void {
    // In order, as TCP delivers: a late unit holds back every unit behind it.
    if (u.at < p.lastAt) u.at = p.lastAt;
    p.lastAt = u.at;
    p.q.push(u);
    p.bytes += u.data?.length ?? 0;
  }

  /** Stops reading a sender whose bytes pile up (its window is full); reads again when half is gone. */
  private backpressure(p: Pipe): void {
    const from = this.fromOf(p);
    if (from === null) return;
    if (!p.full && p.bytes > HIGH_WATER) {
      p.full = true;
      from.pause();
    } else if (p.full && p.bytes <= HIGH_WATER / 2) {
      p.full = false;
      if (!p.waitingDrain) from.resume();
    }
  }

  private arm(p: Pipe): void {
    const head = p.q[0];
    if (head === undefined || p.link.closed) return;
    if (p.cancel !== null && p.timerAt <= head.at) return;
    p.cancel?.();
    p.timerAt = head.at;
    p.cancel = this.clock.setTimer(() => {
      p.cancel = null;
      p.timerAt = Number.POSITIVE_INFINITY;
      this.release(p);
    }, Math.max(0, head.at - this.clock.now()));
  }

  /** Writes the units that are due; a blackhole that began meanwhile holds them instead. */
  private release(p: Pipe): void {
    if (p.link.closed) return;
    if (p.dir === 'upstream' && p.link.upstream === null) {
      this.openUpstream(p.link);
      if (p.link.upstream === null) return;
    }
    const now = this.clock.now();
    if (this.blackholed(p.dir)) {
      // Bytes on the wire when the partition began are lost with it, and sent again after the heal.
      if (p.q.length > 0) {
        if (p.held.length === 0) p.holdSince = p.q[0]!.at;
        p.held = p.q.concat(p.held);
        p.q = [];
      }
      return;
    }
    let i = 0;
    while (i < p.q.length && p.q[i]!.at <= now && !p.link.closed) {
      const u = p.q[i++]!;
      p.bytes -= u.data?.length ?? 0;
      this.forward(p, u);
    }
    if (i > 0) p.q = p.q.slice(i);
    if (p.link.closed) return;
    this.backpressure(p);
    this.arm(p);
  }

  /** Writes one unit to the other end (data, a FIN or a reset), cutting the connection where the cut setting says. */
  private forward(p: Pipe, u: Unit): void {
    const link = p.link;
    const to = this.toOf(p);
    if (to === null || link.closed) return;
    if (u.kind === 'reset') {
      this.destroyLink(link, true);
      return;
    }
    if (u.kind === 'end') {
      if (!to.destroyed) to.end();
      return;
    }
    let data = u.data!;
    let cut = false;
    if (this.f.cutAfterBytes !== null && this.affects(p.dir)) {
      const left = this.f.cutAfterBytes - p.sinceCut;
      if (data.length >= left) {
        data = data.subarray(0, Math.max(0, left));
        cut = true;
      }
    }
    p.sinceCut += data.length;
    if (p.dir === 'upstream') this.s.bytesUpstream += data.length;
    else this.s.bytesDownstream += data.length;
    if (cut) {
      this.s.cuts++;
      const how = this.f.cutWith;
      const end = (): void => {
        if (how === 'reset') this.destroyLink(link, true);
        else this.closeLink(link);
      };
      // The bytes before the cut are handed to the kernel first, and read (a reset that finds
      // them unread may show as an end of stream to the reader on Linux): a few ms of real time.
      if (data.length > 0 && !to.destroyed) to.write(data, () => systemClock.setTimer(end, CUT_GAP_MS));
      else end();
      link.up.done = link.down.done = true;
      return;
    }
    if (to.destroyed || data.length === 0) return;
    if (!to.write(data) && !p.waitingDrain) {
      p.waitingDrain = true;
      const from = this.fromOf(p);
      from?.pause();
      to.once('drain', () => {
        p.waitingDrain = false;
        if (!p.full) from?.resume();
      });
    }
  }

  /** After a change of the faults: held bytes of a direction no longer blackholed move (the heal), and a waiting connection is made. */
  private refresh(link: Link): void {
    const now = this.clock.now();
    const healed = (p: Pipe): number | null => {
      if (p.held.length === 0 || this.blackholed(p.dir)) return null;
      return this.f.healWith === 'immediate' ? now : nextRetransmitAt(p.holdSince, now, this.f.lossDelayMs);
    };
    if (link.upstream === null && !this.f.blackhole && link.cancelConnect === null) {
      const connectAt = this.f.healWith === 'immediate' ? now : nextRetransmitAt(link.acceptedAt, now, SYN_RTO_MS);
      link.connectAt = connectAt;
      link.cancelConnect = this.clock.setTimer(() => {
        link.cancelConnect = null;
        this.openUpstream(link);
      }, Math.max(0, connectAt - now));
    }
    for (const p of [link.up, link.down]) {
      let at = healed(p);
      if (at === null) continue;
      if (p.dir === 'upstream' && link.upstream === null) at = Math.max(at, link.connectAt);
      const held = p.held;
      p.held = [];
      for (const u of held) {
        p.bytes -= u.data?.length ?? 0;
        this.schedule(p, { ...u, at });
      }
      this.arm(p);
    }
  }

  private resetLink(link: Link): void {
    this.s.resets++;
    this.destroyLink(link, true);
  }

  /** Ends both sides with a FIN (a cut with `cutWith: close`). */
  private closeLink(link: Link): void {
    if (link.closed) return;
    this.stopTimers(link);
    for (const sock of [link.client, link.upstream]) {
      if (sock === null) continue;
      // (destroySoon: end, then destroy once written; a runtime without it gets end())
      if (typeof sock.destroySoon === 'function') sock.destroySoon();
      else sock.end();
    }
    link.closed = true;
    this.links.delete(link);
  }

  private stopTimers(link: Link): void {
    for (const p of [link.up, link.down]) {
      p.cancel?.();
      p.cancel = null;
      p.q = [];
      p.held = [];
      p.bytes = 0;
    }
    link.cancelConnect?.();
    link.cancelConnect = null;
  }

  /** Destroys both sides: with an RST (`rst`), else quietly (close()). */
  private destroyLink(link: Link, rst = false): void {
    if (link.closed) return;
    link.closed = true;
    this.links.delete(link);
    this.stopTimers(link);
    for (const s of [link.client, link.upstream]) {
      if (s === null || s.destroyed) continue;
      s.on('error', () => {});
      if (rst && !s.connecting) reset(s);
      else s.destroy();
    }
  }

  private maybeDone(link: Link): void {
    if (link.closed) return;
    if (link.client.destroyed && (link.upstream === null || link.upstream.destroyed)) {
      link.closed = true;
      this.stopTimers(link);
      this.links.delete(link);
    }
  }
}

/** An RST where the runtime can send one (Node 18.3+), else a plain close. */
function reset(s: Socket): void {
  if (typeof s.resetAndDestroy === 'function') s.resetAndDestroy();
  else s.destroy();
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
