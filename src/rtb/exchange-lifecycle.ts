// An exchange's lifecycle: getting ready before it serves (opening the notice store,
// warming partner connections, dry-run auctions through the whole hot path against a
// stand-in partner) and shutting down (stop accepting, answer every auction in flight,
// close connections, hand the notices over).
import http from 'node:http';
import type { Pool } from 'undici';
import { undici } from '../shared/undici.js';
import { ExchangeCore } from './exchange-core.js';
import { HttpFront } from './exchange-http.js';
import type { CloseOptions, WarmupReport } from './exchange-types.js';
import { listenOn } from './http-util.js';
import type { NoticeOutlet } from './notice-model.js';
import { round } from './stats.js';
import { collectGarbage, startStandIn } from './warm.js';

/** A notice outlet that takes nothing (the dry-run auctions). */
const DISCARD: NoticeOutlet = {
  store: 'memory',
  open: () => Promise.resolve(),
  send: () => true,
  stored: () => Promise.resolve(true),
  keepBillable: () => {},
  billingEvent: () => 'unknown',
  stats: () => {
    const z = { sent: 0, stored: 0, delivered: 0, failed: 0, dropped: 0, abandoned: 0, attempts: 0 };
    return { win: z, billing: z, loss: z, inFlight: 0, events: { received: 0, fired: 0, duplicate: 0, unknown: 0 }, storeErrors: 0 };
  },
  close: () => Promise.resolve(),
};

/** Gets `core` ready to serve (see `Exchange.ready()`). */
export async function warmUp(core: ExchangeCore): Promise<WarmupReport> {
  const t0 = core.clock.now();
  // A store that cannot be opened is an error of the configuration: nothing is served.
  await core.notices.open();
  const w = core.config.warmup;
  const connections = Promise.all(
    core.partners.map(async (p) => {
      const wanted = w === null ? 0 : p.warmTarget;
      const r = wanted > 0 && p.connector !== null ? await p.connector.open(p.config.url, wanted) : { opened: 0, error: null };
      return { name: p.name, connections: r.opened, wanted, error: r.error };
    }),
  );
  const dry = w === null || w.auctions === 0 ? Promise.resolve(0) : dryRun(core, w.auctions).catch(() => 0);
  let timedOut = false;
  let cancel: (() => void) | null = null;
  const limit = new Promise<null>((resolve) => {
    cancel = core.clock.setTimer(() => {
      timedOut = true;
      resolve(null);
    }, w?.timeoutMs ?? 0);
  });
  const done = await Promise.race([Promise.all([connections, dry]), limit]);
  (cancel as (() => void) | null)?.();
  const partners =
    done === null
      ? core.partners.map((p) => ({ name: p.name, connections: p.connector?.available ?? 0, wanted: w === null ? 0 : p.warmTarget, error: 'warmup_timeout' }))
      : done[0];
  // The dry-run auctions filled the young generation; collected now, not in the first burst.
  const gcMs = w === null || w.auctions === 0 ? null : collectGarbage();
  core.isReady = !core.stopping;
  return { ms: round(core.clock.now() - t0), dryRunAuctions: done === null ? 0 : done[1], partners, noticeStore: core.notices.store, timedOut, gcMs };
}

/**
 * Dry-run auctions through the whole hot path — the HTTP server's parser, body read,
 * validation, the fan-out through execute() and undici, answer classification,
 * selection, macros, the answer — on a copy of this exchange whose partners are one
 * stand-in on loopback and whose notices go nowhere. Nothing leaves the machine.
 */
async function dryRun(core: ExchangeCore, n: number): Promise<number> {
  const standIn = await startStandIn();
  const url = new URL(standIn.url);
  const shadow = new ExchangeCore(
    {
      ...core.config,
      warmup: null,
      partners: core.config.partners.map((p) => ({
        ...p,
        url: new URL(`${url.href}?partner=${encodeURIComponent(p.name)}`),
        enabled: true,
        warmConnections: 0,
      })),
    },
    { clock: core.clock, random: core.random, noticeOutlet: DISCARD },
  );
  const server = http.createServer(new HttpFront(shadow).handler);
  let client: Pool | null = null;
  let ran = 0;
  try {
    const addr = await listenOn(server, 0, '127.0.0.1', true);
    const burst = 16;
    client = new (undici().Pool)(`http://127.0.0.1:${addr.port}`, { connections: burst, pipelining: 1 });
    const c = client;
    const tmax = core.config.defaultTmaxMs;
    const one = async (k: number): Promise<void> => {
      const imps =
        k % 3 === 0
          ? [
              { id: '1', bidfloor: 0.5 },
              { id: '2', bidfloor: 0.2 },
            ]
          : [{ id: '1', bidfloor: 0.5 }];
      const body = JSON.stringify({
        id: `warmup-${k}`,
        imp: imps,
        tmax,
        cur: [core.config.currency],
        ...(k % 2 === 0 ? { site: { domain: 'warmup.example', publisher: { id: 'warmup' } } } : { app: { bundle: 'warmup', publisher: { id: 'warmup' } } }),
        device: { ua: 'warmup', ip: '192.0.2.1' },
      });
      const res = await c.request({ path: core.config.path, method: 'POST', headers: { 'content-type': 'application/json' }, body });
      await res.body.dump();
      ran++;
    };
    for (let k = 0; k < n; k += burst) {
      await Promise.all(Array.from({ length: Math.min(burst, n - k) }, (_, j) => one(k + j)));
    }
  } finally {
    await client?.close().catch(() => {});
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await shutdown(shadow, { force: true, noticeDrainMs: 0 }, null, () => null);
    await standIn.close();
  }
  return ran;
}

/**
 * Stops accepting (the listening socket is closed, /readyz answers 503), answers every
 * auction in flight (each by its own deadline), closes the connections, then hands the
 * notices over: written to the durable store, or drained for `noticeDrainMs` in memory.
 */
export async function shutdown(
  core: ExchangeCore,
  o: CloseOptions,
  readying: Promise<WarmupReport> | null,
  serverNow: () => http.Server | null,
): Promise<void> {
  core.stopping = true;
  if (readying !== null) await readying.catch(() => {});
  const server = serverNow();
  let serverClosed: Promise<void> | null = null;
  if (server !== null) {
    serverClosed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
  }
  // Every auction in flight is answered (each ends by its own deadline).
  if (core.running > 0) await core.idle();
  if (server !== null) {
    server.closeIdleConnections();
    const timer = setTimeout(() => server.closeAllConnections(), 1000);
    await serverClosed;
    clearTimeout(timer);
  }
  await Promise.all(core.partners.map((p) => p.close(o.force === true)));
  // No auction is left: the notices still waiting for a quiet moment are handed over now.
  core.lanes.runQuiet();
  if (core.ownNotices) await core.notices.close({ drainMs: o.noticeDrainMs ?? 2000, force: o.force === true });
}
