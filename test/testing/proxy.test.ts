// relent/testing/proxy against real sockets on loopback: a server on port 0, the proxy in
// front of it, clients through the proxy. Timing rules run on a test clock (the proxy
// moves bytes only when the test advances it); the real clock only waits for I/O.
import { createServer, connect, type Server, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { createFaultProxy, lossPenaltyMs, nextRetransmitAt, FAULT_PROXY_DEFAULTS, type FaultProxy, type FaultProxyOptions } from '../../src/testing/proxy.js';
import { createTestClock } from '../../src/testing/index.js';

interface Peer {
  readonly socket: Socket;
  received: Buffer;
  ended: boolean;
  error: string | null;
}

/** A server that records what each connection sends; `echo` writes it back. */
async function startServer(mode: 'echo' | 'sink'): Promise<{ server: Server; port: number; peers: Peer[]; close(): Promise<void> }> {
  const peers: Peer[] = [];
  const server = createServer({ allowHalfOpen: true }, (socket) => {
    const peer: Peer = { socket, received: Buffer.alloc(0), ended: false, error: null };
    peers.push(peer);
    socket.on('data', (d: Buffer) => {
      peer.received = Buffer.concat([peer.received, d]);
      if (mode === 'echo') socket.write(d);
    });
    socket.on('end', () => {
      peer.ended = true;
      socket.end();
    });
    socket.on('error', (e: NodeJS.ErrnoException) => (peer.error = e.code ?? e.message));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    server,
    port,
    peers,
    close: () =>
      new Promise<void>((r) => {
        for (const p of peers) p.socket.destroy();
        server.close(() => r());
      }),
  };
}

/** A client through the proxy that records what it receives. */
function client(port: number): Peer & { connected: Promise<void> } {
  const socket = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
  const peer = {
    socket,
    received: Buffer.alloc(0),
    ended: false,
    error: null as string | null,
    connected: new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    }),
  };
  peer.connected.catch(() => {}); // a test that expects a refusal awaits it
  socket.on('data', (d: Buffer) => (peer.received = Buffer.concat([peer.received, d])));
  socket.on('end', () => (peer.ended = true));
  socket.on('error', (e: NodeJS.ErrnoException) => (peer.error = e.code ?? e.message));
  return peer;
}

/** Waits for I/O until `cond` holds (the real clock only bounds the wait; nothing is timed). */
async function until(cond: () => boolean, what: string, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** Lets pending I/O happen (for checks that something did not happen). */
const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 30));

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function setup(
  mode: 'echo' | 'sink',
  options: Omit<FaultProxyOptions, 'target'> = {},
): Promise<{ srv: Awaited<ReturnType<typeof startServer>>; proxy: FaultProxy }> {
  const srv = await startServer(mode);
  cleanups.push(() => srv.close());
  const proxy = await createFaultProxy({ target: `127.0.0.1:${srv.port}`, ...options });
  cleanups.push(() => proxy.close());
  return { srv, proxy };
}

function track<T extends { socket: Socket }>(c: T): T {
  cleanups.push(() => void c.socket.destroy());
  return c;
}

describe('relent/testing/proxy: no faults', () => {
  it('forwards bytes both ways unchanged, half-closes included, 4 MiB through its backpressure', async () => {
    const { proxy } = await setup('echo');
    const c = track(client(proxy.port));
    await c.connected;
    const payload = randomBytes(4 << 20);
    c.socket.end(payload);
    await until(() => c.ended, 'the echo and its FIN', 20_000);
    expect(c.received.equals(payload)).toBe(true);
    const s = proxy.stats();
    expect(s.bytesUpstream).toBe(payload.length);
    expect(s.bytesDownstream).toBe(payload.length);
    expect(s.accepted).toBe(1);
    await until(() => proxy.stats().open === 0, 'the connection to close');
  });

  it('rewrites a URL to go through it, and validates what it is given, naming the option', async () => {
    const { proxy } = await setup('sink');
    expect(proxy.via('postgres://app@db.internal:5432/orders?sslmode=disable')).toBe(`postgres://app@127.0.0.1:${proxy.port}/orders?sslmode=disable`);
    expect(proxy.via('redis://10.0.0.1:6379/0')).toBe(`redis://127.0.0.1:${proxy.port}/0`);
    expect(proxy.address).toBe(`127.0.0.1:${proxy.port}`);
    expect(() => proxy.set({ lossRate: 1 })).toThrow('Expected `lossRate` to be a number in [0, 1), got 1');
    expect(() => proxy.set({ latencyMs: -1 })).toThrow('`latencyMs`');
    expect(() => proxy.set({ cutAfterBytes: 1.5 })).toThrow('`cutAfterBytes`');
    expect(() => proxy.set({ direction: 'sideways' as never })).toThrow('`direction`');
    await expect(createFaultProxy({ target: 'nowhere' })).rejects.toThrow('Expected `target` to be "host:port" or { host, port }');
    expect(proxy.faults()).toEqual(FAULT_PROXY_DEFAULTS);
    proxy.set({ latencyMs: 5 });
    proxy.set({ jitterMs: 1 });
    expect(proxy.faults()).toMatchObject({ latencyMs: 5, jitterMs: 1 });
    proxy.clear();
    expect(proxy.faults()).toEqual(FAULT_PROXY_DEFAULTS);
  });
});

describe('relent/testing/proxy: latency and jitter (test clock)', () => {
  it('holds each chunk latencyMs, one way: the server sees it at 100 ms, the answer comes back 100 ms later', async () => {
    const clock = createTestClock();
    const { srv, proxy } = await setup('echo', { clock, faults: { latencyMs: 100 } });
    const c = track(client(proxy.port));
    await c.connected;
    c.socket.write('hello');
    await until(() => proxy.stats().heldBytes === 5, 'the proxy to read the chunk');
    clock.advance(99);
    await settle();
    expect(proxy.stats().bytesUpstream).toBe(0);
    expect(srv.peers[0]?.received.length ?? 0).toBe(0);
    clock.advance(1);
    await until(() => srv.peers[0]?.received.toString() === 'hello', 'the server to get it');
    await until(() => proxy.stats().heldBytes === 5, 'the echo to reach the proxy');
    clock.advance(99);
    await settle();
    expect(c.received.length).toBe(0);
    clock.advance(1);
    await until(() => c.received.toString() === 'hello', 'the echo');
  });

  it('jitter spreads release times over latency ± jitter, keeps bytes in order, and a seed repeats it', async () => {
    const releaseTimes = async (seed: number): Promise<number[]> => {
      const clock = createTestClock();
      const { proxy } = await setup('sink', { clock, seed, faults: { latencyMs: 100, jitterMs: 50, direction: 'upstream' } });
      const c = track(client(proxy.port));
      await c.connected;
      // 40 chunks, one every 10 ms, each read by the proxy before the next is sent; the clock
      // moves 1 ms at a time, and after each step the forwarded bytes say which chunks left.
      const sentAt: number[] = [];
      const released: number[] = [];
      const step = (): void => {
        clock.advance(1);
        const n = proxy.stats().bytesUpstream / 10;
        while (released.length < n) released.push(clock.now());
      };
      for (let i = 0; i < 40; i++) {
        sentAt.push(clock.now());
        c.socket.write(Buffer.alloc(10, i));
        await until(() => proxy.stats().heldBytes + proxy.stats().bytesUpstream === (i + 1) * 10, 'the chunk to reach the proxy');
        for (let t = 0; t < 10; t++) step();
      }
      for (let t = 0; t < 300 && released.length < 40; t++) step();
      return released.map((at, i) => at - sentAt[i]!);
    };
    const a = await releaseTimes(7);
    expect(a).toHaveLength(40);
    // In order: a chunk never overtakes the one before it, so some wait past their own latency.
    for (const d of a) expect(d).toBeGreaterThanOrEqual(50);
    expect(Math.max(...a)).toBeLessThanOrEqual(150 + 1);
    expect(new Set(a).size).toBeGreaterThan(10);
    expect(await releaseTimes(7)).toEqual(a);
    expect(await releaseTimes(8)).not.toEqual(a);
  });
});

describe('relent/testing/proxy: packet loss as TCP shows it (test clock)', () => {
  it('the retransmission arithmetic: one timeout per loss, doubling; a heal waits for the next retransmission', () => {
    expect(lossPenaltyMs(0, 200)).toBe(0);
    expect(lossPenaltyMs(1, 200)).toBe(200);
    expect(lossPenaltyMs(3, 200)).toBe(200 + 400 + 800);
    expect(lossPenaltyMs(12, 200)).toBe(200 * (2 ** 10 - 1) + 120_000 * 2); // capped at 120 s a step
    // Partitioned at 0 with a 200 ms timeout: retransmissions at 200, 600, 1400, 3000, 6200, 12600, 25400 …
    expect(nextRetransmitAt(0, 100, 200)).toBe(200);
    expect(nextRetransmitAt(0, 600, 200)).toBe(600);
    expect(nextRetransmitAt(0, 15_000, 200)).toBe(25_400);
    expect(nextRetransmitAt(0, 15_000, 1_000)).toBe(15_000); // a SYN: 1, 3, 7, 15, 31 s
    expect(nextRetransmitAt(0, 15_500, 1_000)).toBe(31_000);
  });

  it('delays lost segments by a retransmission timeout, never drops a byte, never reorders', async () => {
    const clock = createTestClock();
    const { srv, proxy } = await setup('sink', { clock, seed: 3, faults: { lossRate: 0.3, lossDelayMs: 200, segmentBytes: 100, direction: 'upstream' } });
    const c = track(client(proxy.port));
    await c.connected;
    const sent: Buffer[] = [];
    const sentAt: number[] = [];
    const released: number[] = [];
    const step = (): void => {
      clock.advance(10);
      const n = proxy.stats().bytesUpstream / 100;
      while (released.length < n) released.push(clock.now());
    };
    for (let i = 0; i < 100; i++) {
      const chunk = randomBytes(100);
      sent.push(chunk);
      sentAt.push(clock.now());
      c.socket.write(chunk);
      await until(() => proxy.stats().heldBytes + proxy.stats().bytesUpstream === (i + 1) * 100, 'the chunk to reach the proxy');
      for (let t = 0; t < 25; t++) step(); // 250 ms apart: a single loss (200 ms) holds back no other segment
    }
    for (let t = 0; t < 2_000 && released.length < 100; t++) step();
    await until(() => (srv.peers[0]?.received.length ?? 0) === 10_000, 'every byte at the server');
    expect(srv.peers[0]!.received.equals(Buffer.concat(sent))).toBe(true);
    const delays = released.map((at, i) => at - sentAt[i]!);
    const losses = proxy.stats().losses;
    // About 30 % of 100 segments lost (a few twice, three times); on time, or one timeout late, or
    // 200 + 400 ms late …, or held behind the segment before it (in order, as TCP delivers).
    expect(losses).toBeGreaterThanOrEqual(15);
    expect(losses).toBeLessThanOrEqual(50);
    const penalties = [0, 1, 2, 3, 4, 5].map((k) => lossPenaltyMs(k, 200));
    for (let i = 0; i < delays.length; i++) {
      // (seen at the end of the 10 ms step it left in)
      const own = penalties.some((p) => delays[i]! - 10 <= p && p <= delays[i]!);
      expect(own || (i > 0 && released[i] === released[i - 1]), `segment ${i}: ${delays[i]} ms late`).toBe(true);
      if (i > 0) expect(released[i]).toBeGreaterThanOrEqual(released[i - 1]!);
    }
    expect(delays.filter((d) => d === 10).length).toBeGreaterThan(50);
    expect(delays.filter((d) => d === 200).length).toBeGreaterThan(10);
    expect(delays.some((d) => d === 600)).toBe(true);
  });
});

describe('relent/testing/proxy: blackhole (a partition)', () => {
  it('stalls open connections and accepts new ones without reaching the server; after the heal, held bytes go at the next retransmission', async () => {
    const clock = createTestClock();
    const { srv, proxy } = await setup('echo', { clock });
    const a = track(client(proxy.port));
    await a.connected;
    a.socket.write('one');
    await until(() => a.received.toString() === 'one', 'the first echo');
    proxy.set({ blackhole: true });
    const t0 = clock.now();
    a.socket.write('two');
    await until(() => proxy.stats().heldBytes === 3, 'the held bytes');
    // A new connection is accepted (the client cannot tell) but the server never sees it.
    const b = track(client(proxy.port));
    await b.connected;
    b.socket.write('three');
    await until(() => proxy.stats().heldBytes === 8, "the new connection's bytes");
    clock.advance(15_500);
    await settle();
    expect(srv.peers).toHaveLength(1);
    expect(a.received.toString()).toBe('one');
    expect(proxy.stats().bytesUpstream).toBe(3);
    proxy.set({ blackhole: false });
    // TCP's next try: the data at 25.4 s (200 ms doubling), the new connection's SYN at 31 s (1 s doubling).
    clock.advance(nextRetransmitAt(t0, clock.now(), 200) - clock.now() - 1);
    await settle();
    expect(a.received.toString()).toBe('one');
    clock.advance(1);
    await until(() => a.received.toString() === 'onetwo', 'the held bytes after the heal');
    expect(srv.peers).toHaveLength(1);
    clock.advance(31_000 - (clock.now() - t0) + 1);
    await until(() => b.received.toString() === 'three', 'the new connection made after the heal');
    expect(srv.peers).toHaveLength(2);
  });

  it('healWith immediate: held bytes go at once', async () => {
    const { proxy } = await setup('echo', { faults: { healWith: 'immediate' } });
    const a = track(client(proxy.port));
    await a.connected;
    proxy.set({ blackhole: true });
    a.socket.write('held');
    await until(() => proxy.stats().heldBytes === 4, 'the held bytes');
    await settle();
    expect(a.received.length).toBe(0);
    proxy.set({ blackhole: false });
    await until(() => a.received.toString() === 'held', 'the echo after the heal');
  });

  it('a client that resets its connection during the partition drops what it had sent (a FIN would keep it)', async () => {
    const { srv, proxy } = await setup('sink', { faults: { healWith: 'immediate' } });
    const a = track(client(proxy.port));
    await until(() => srv.peers.length === 1, 'the first connection at the server');
    const b = track(client(proxy.port));
    await until(() => srv.peers.length === 2, 'the second connection at the server');
    proxy.set({ blackhole: true });
    a.socket.write('never');
    b.socket.write('later');
    await until(() => proxy.stats().heldBytes === 10, 'the held bytes');
    a.socket.resetAndDestroy();
    b.socket.end();
    await until(() => proxy.stats().heldBytes === 5, "the reset connection's bytes dropped");
    proxy.set({ blackhole: false });
    const [pa, pb] = srv.peers as [Peer, Peer];
    await until(() => pa.error !== null && pb.ended, 'the reset and the FIN at the server');
    expect(pa.received.length).toBe(0);
    expect(pb.received.toString()).toBe('later');
  });

  it('one direction only: requests arrive, answers are held', async () => {
    const { srv, proxy } = await setup('echo', { faults: { healWith: 'immediate' } });
    const a = track(client(proxy.port));
    await a.connected;
    proxy.set({ blackhole: true, direction: 'downstream' });
    a.socket.write('ask');
    await until(() => srv.peers[0]?.received.toString() === 'ask', 'the request at the server');
    await until(() => proxy.stats().heldBytes === 3, 'the answer held');
    expect(a.received.length).toBe(0);
    proxy.set({ blackhole: false });
    await until(() => a.received.toString() === 'ask', 'the answer after the heal');
  });
});

describe('relent/testing/proxy: resets and cuts', () => {
  it('reset: open connections get an RST at both ends, new ones are reset when accepted, until switched off', async () => {
    const { srv, proxy } = await setup('echo');
    const a = track(client(proxy.port));
    await a.connected;
    a.socket.write('x');
    await until(() => a.received.toString() === 'x', 'the echo');
    proxy.set({ reset: true });
    await until(() => a.error !== null && srv.peers[0]!.error !== null, 'both ends to see the reset');
    expect(a.error).toBe('ECONNRESET');
    expect(srv.peers[0]!.error).toBe('ECONNRESET');
    const b = track(client(proxy.port));
    await until(() => b.error !== null, 'the new connection to be reset');
    expect(b.error).toBe('ECONNRESET');
    expect(srv.peers).toHaveLength(1);
    expect(proxy.stats().resets).toBe(2);
    proxy.set({ reset: false });
    const c = track(client(proxy.port));
    await c.connected;
    c.socket.write('y');
    await until(() => c.received.toString() === 'y', 'an echo after the resets');
  });

  it('cutAfterBytes: exactly that many bytes arrive, then an RST (or a FIN with cutWith close)', async () => {
    for (const cutWith of ['reset', 'close'] as const) {
      const { srv, proxy } = await setup('sink', { faults: { cutAfterBytes: 1000, cutWith, direction: 'downstream' } });
      const a = track(client(proxy.port));
      await a.connected;
      a.socket.write('send me 5000');
      await until(() => srv.peers.length === 1 && srv.peers[0]!.received.length === 12, 'the request');
      const body = randomBytes(5000);
      srv.peers[0]!.socket.write(body);
      await until(() => a.error !== null || a.ended, `the ${cutWith}`);
      await settle();
      expect(a.received.equals(body.subarray(0, 1000))).toBe(true);
      if (cutWith === 'reset') expect(a.error).toBe('ECONNRESET');
      else {
        expect(a.ended).toBe(true);
        expect(a.error).toBe(null);
      }
      expect(proxy.stats().cuts).toBe(1);
    }
  });

  it('a cut counts from when it is set, per connection', async () => {
    const { srv, proxy } = await setup('echo');
    const a = track(client(proxy.port));
    await a.connected;
    a.socket.write('0123456789');
    await until(() => a.received.length === 10, 'the echo');
    proxy.set({ cutAfterBytes: 4, direction: 'upstream' });
    a.socket.write('abcdefgh');
    await until(() => a.error !== null, 'the cut');
    await until(() => srv.peers[0]!.error !== null, 'the server to see the reset');
    expect(srv.peers[0]!.received.toString()).toBe('0123456789abcd');
  });

  it('close() ends every connection and stops listening', async () => {
    const { proxy } = await setup('echo');
    const a = track(client(proxy.port));
    await a.connected;
    const port = proxy.port;
    await proxy.close();
    await until(() => a.socket.destroyed || a.ended || a.error !== null, 'the connection to end');
    const b = client(port);
    await expect(b.connected).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });
});

describe('docs/testing.md', () => {
  it('states the defaults the code has', () => {
    const doc = readFileSync(fileURLToPath(new URL('../../docs/testing.md', import.meta.url)), 'utf8');
    for (const [name, value] of Object.entries(FAULT_PROXY_DEFAULTS)) {
      const line = doc.split('\n').find((l) => l.startsWith(`| \`${name}\` |`));
      expect(line, `docs/testing.md has a row for ${name}`).toBeDefined();
      expect(line!.split('|')[2]!.trim()).toBe(typeof value === 'string' ? `\`"${value}"\`` : String(value));
    }
  });
});
