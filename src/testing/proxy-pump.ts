// The connection pump of relent/testing/proxy: each accepted connection as a Link with
// a Pipe each way, and the functions that move its bytes under the faults in force —
// held by a blackhole, delayed by latency and losses, released in order, cut or reset,
// healed after a partition. The proxy (proxy.ts) owns the listening socket and the
// control API and hands the pump a PumpContext; proxy-faults.ts holds the settings.
import { connect, type Socket } from 'node:net';
import type { Clock, Random } from '../core/types.js';
import { systemClock } from '../shared/clock.js';
import { lossPenaltyMs, nextRetransmitAt, SYN_RTO_MS, type ResolvedFaultSettings } from './proxy-faults.js';

/** The proxy's counters the pump adds to. */
export interface PumpCounters {
  accepted: number;
  bytesUpstream: number;
  bytesDownstream: number;
  losses: number;
  resets: number;
  cuts: number;
}

/**
 * What the pump shares with the proxy that owns it: the faults in force (replaced as a
 * whole by set()), time, the random source, the server to connect to, the counters and
 * the open connections.
 */
export interface PumpContext {
  f: ResolvedFaultSettings;
  readonly random: Random;
  readonly clock: Clock;
  readonly target: { readonly host: string; readonly port: number };
  readonly s: PumpCounters;
  readonly links: Set<Link>;
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
  constructor(
    readonly link: Link,
    readonly dir: Dir,
  ) {}
}

/** One connection: the client's socket, the server's (once made), and a Pipe each way. */
export class Link {
  upstream: Socket | null = null;
  readonly up: Pipe;
  readonly down: Pipe;
  cancelConnect: (() => void) | null = null;
  /** After a heal, when the server is reached (the SYN's retransmission); bytes to it wait for that. */
  connectAt = Number.NEGATIVE_INFINITY;
  closed = false;
  constructor(
    readonly client: Socket,
    readonly acceptedAt: number,
  ) {
    this.up = new Pipe(this, 'upstream');
    this.down = new Pipe(this, 'downstream');
  }
}

/**
 * Takes a connection the proxy accepted: its Link, its client's events, and (outside a
 * partition) the connection to the server.
 */
export function openLink(cx: PumpContext, client: Socket): void {
  const link = new Link(client, cx.clock.now());
  cx.links.add(link);
  client.setNoDelay(true);
  client.on('data', (d: Buffer) => read(cx, link.up, { at: 0, kind: 'data', data: d }));
  client.on('end', () => read(cx, link.up, { at: 0, kind: 'end', data: null }));
  client.on('error', () => read(cx, link.up, { at: 0, kind: 'reset', data: null }));
  client.on('close', () => maybeDone(cx, link));
  // A partition: the server does not see the connection until the heal (the SYN is lost).
  if (!cx.f.blackhole) openUpstream(cx, link);
}

function affects(cx: PumpContext, dir: Dir): boolean {
  return cx.f.direction === 'both' || cx.f.direction === dir;
}

function blackholed(cx: PumpContext, dir: Dir): boolean {
  return cx.f.blackhole && affects(cx, dir);
}

function openUpstream(cx: PumpContext, link: Link): void {
  if (link.upstream !== null || link.closed) return;
  link.cancelConnect?.();
  link.cancelConnect = null;
  const up = connect({ host: cx.target.host, port: cx.target.port, allowHalfOpen: true });
  link.upstream = up;
  up.setNoDelay(true);
  up.on('data', (d: Buffer) => read(cx, link.down, { at: 0, kind: 'data', data: d }));
  up.on('end', () => read(cx, link.down, { at: 0, kind: 'end', data: null }));
  up.on('error', () => read(cx, link.down, { at: 0, kind: 'reset', data: null }));
  up.on('close', () => maybeDone(cx, link));
  // Bytes the client sent before the server was reached go out now, in order.
  if (link.up.q.length > 0) arm(cx, link.up);
}

function fromOf(p: Pipe): Socket | null {
  return p.dir === 'upstream' ? p.link.client : p.link.upstream;
}

function toOf(p: Pipe): Socket | null {
  return p.dir === 'upstream' ? p.link.upstream : p.link.client;
}

/** A unit read from one end: held (blackhole), scheduled (latency, loss), or written at once. */
function read(cx: PumpContext, p: Pipe, u: Unit): void {
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
  const now = cx.clock.now();
  const size = u.data?.length ?? 0;
  // A connection accepted during a partition is not made until the heal: its bytes wait with it.
  if (blackholed(cx, p.dir) || (p.link.upstream === null && cx.f.blackhole)) {
    if (p.held.length === 0) p.holdSince = now;
    u.at = now;
    p.held.push(u);
    p.bytes += size;
    backpressure(cx, p);
    return;
  }
  const affected = affects(cx, p.dir);
  const start = p.dir === 'upstream' && p.link.upstream === null ? Math.max(now, p.link.connectAt) : now;
  let delay = start - now;
  if (affected && (cx.f.latencyMs > 0 || cx.f.jitterMs > 0)) {
    delay += Math.max(0, cx.f.latencyMs + (cx.f.jitterMs > 0 ? (2 * cx.random() - 1) * cx.f.jitterMs : 0));
  }
  if (affected && cx.f.lossRate > 0 && u.data !== null) {
    // Each segment may be lost (again): it and everything behind it arrive a retransmission timeout later.
    const seg = cx.f.segmentBytes;
    for (let off = 0; off < u.data.length; off += seg) {
      let k = 0;
      while (k < 16 && cx.random() < cx.f.lossRate) k++;
      cx.s.losses += k;
      const piece = off === 0 && u.data.length <= seg ? u.data : u.data.subarray(off, Math.min(off + seg, u.data.length));
      schedule(p, { at: now + delay + lossPenaltyMs(k, cx.f.lossDelayMs), kind: 'data', data: piece });
    }
    backpressure(cx, p);
    arm(cx, p);
    return;
  }
  if (delay === 0 && p.q.length === 0 && p.held.length === 0) {
    forward(cx, p, u);
    return;
  }
  schedule(p, { ...u, at: now + delay });
  backpressure(cx, p);
  arm(cx, p);
}

function schedule(p: Pipe, u: Unit): void {
  // In order, as TCP delivers: a late unit holds back every unit behind it.
  if (u.at < p.lastAt) u.at = p.lastAt;
  p.lastAt = u.at;
  p.q.push(u);
  p.bytes += u.data?.length ?? 0;
}

/** Stops reading a sender whose bytes pile up (its window is full); reads again when half is gone. */
function backpressure(cx: PumpContext, p: Pipe): void {
  const from = fromOf(p);
  if (from === null) return;
  if (!p.full && p.bytes > HIGH_WATER) {
    p.full = true;
    from.pause();
  } else if (p.full && p.bytes <= HIGH_WATER / 2) {
    p.full = false;
    if (!p.waitingDrain) from.resume();
  }
}

function arm(cx: PumpContext, p: Pipe): void {
  const head = p.q[0];
  if (head === undefined || p.link.closed) return;
  if (p.cancel !== null && p.timerAt <= head.at) return;
  p.cancel?.();
  p.timerAt = head.at;
  p.cancel = cx.clock.setTimer(
    () => {
      p.cancel = null;
      p.timerAt = Number.POSITIVE_INFINITY;
      release(cx, p);
    },
    Math.max(0, head.at - cx.clock.now()),
  );
}

/** Writes the units that are due; a blackhole that began meanwhile holds them instead. */
function release(cx: PumpContext, p: Pipe): void {
  if (p.link.closed) return;
  if (p.dir === 'upstream' && p.link.upstream === null) {
    openUpstream(cx, p.link);
    if (p.link.upstream === null) return;
  }
  const now = cx.clock.now();
  if (blackholed(cx, p.dir)) {
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
    forward(cx, p, u);
  }
  if (i > 0) p.q = p.q.slice(i);
  if (p.link.closed) return;
  backpressure(cx, p);
  arm(cx, p);
}

/** Writes one unit to the other end (data, a FIN or a reset), cutting the connection where the cut setting says. */
function forward(cx: PumpContext, p: Pipe, u: Unit): void {
  const link = p.link;
  const to = toOf(p);
  if (to === null || link.closed) return;
  if (u.kind === 'reset') {
    destroyLink(cx, link, true);
    return;
  }
  if (u.kind === 'end') {
    if (!to.destroyed) to.end();
    return;
  }
  let data = u.data!;
  let cut = false;
  if (cx.f.cutAfterBytes !== null && affects(cx, p.dir)) {
    const left = cx.f.cutAfterBytes - p.sinceCut;
    if (data.length >= left) {
      data = data.subarray(0, Math.max(0, left));
      cut = true;
    }
  }
  p.sinceCut += data.length;
  if (p.dir === 'upstream') cx.s.bytesUpstream += data.length;
  else cx.s.bytesDownstream += data.length;
  if (cut) {
    cx.s.cuts++;
    const how = cx.f.cutWith;
    const end = (): void => {
      if (how === 'reset') destroyLink(cx, link, true);
      else closeLink(cx, link);
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
    const from = fromOf(p);
    from?.pause();
    to.once('drain', () => {
      p.waitingDrain = false;
      if (!p.full) from?.resume();
    });
  }
}

/** After a change of the faults: held bytes of a direction no longer blackholed move (the heal), and a waiting connection is made. */
export function refresh(cx: PumpContext, link: Link): void {
  const now = cx.clock.now();
  const healed = (p: Pipe): number | null => {
    if (p.held.length === 0 || blackholed(cx, p.dir)) return null;
    return cx.f.healWith === 'immediate' ? now : nextRetransmitAt(p.holdSince, now, cx.f.lossDelayMs);
  };
  if (link.upstream === null && !cx.f.blackhole && link.cancelConnect === null) {
    const connectAt = cx.f.healWith === 'immediate' ? now : nextRetransmitAt(link.acceptedAt, now, SYN_RTO_MS);
    link.connectAt = connectAt;
    link.cancelConnect = cx.clock.setTimer(
      () => {
        link.cancelConnect = null;
        openUpstream(cx, link);
      },
      Math.max(0, connectAt - now),
    );
  }
  for (const p of [link.up, link.down]) {
    let at = healed(p);
    if (at === null) continue;
    if (p.dir === 'upstream' && link.upstream === null) at = Math.max(at, link.connectAt);
    const held = p.held;
    p.held = [];
    for (const u of held) {
      p.bytes -= u.data?.length ?? 0;
      schedule(p, { ...u, at });
    }
    arm(cx, p);
  }
}

export function resetLink(cx: PumpContext, link: Link): void {
  cx.s.resets++;
  destroyLink(cx, link, true);
}

/** Ends both sides with a FIN (a cut with `cutWith: close`). */
function closeLink(cx: PumpContext, link: Link): void {
  if (link.closed) return;
  stopTimers(link);
  for (const sock of [link.client, link.upstream]) {
    if (sock === null) continue;
    // (destroySoon: end, then destroy once written; a runtime without it gets end())
    if (typeof sock.destroySoon === 'function') sock.destroySoon();
    else sock.end();
  }
  link.closed = true;
  cx.links.delete(link);
}

function stopTimers(link: Link): void {
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
export function destroyLink(cx: PumpContext, link: Link, rst = false): void {
  if (link.closed) return;
  link.closed = true;
  cx.links.delete(link);
  stopTimers(link);
  for (const s of [link.client, link.upstream]) {
    if (s === null || s.destroyed) continue;
    s.on('error', () => {});
    if (rst && !s.connecting) reset(s);
    else s.destroy();
  }
}

function maybeDone(cx: PumpContext, link: Link): void {
  if (link.closed) return;
  if (link.client.destroyed && (link.upstream === null || link.upstream.destroyed)) {
    link.closed = true;
    stopTimers(link);
    cx.links.delete(link);
  }
}

/** An RST where the runtime can send one (Node 18.3+), else a plain close. */
export function reset(s: Socket): void {
  if (typeof s.resetAndDestroy === 'function') s.resetAndDestroy();
  else s.destroy();
}
