// `relent exchange --workers N`: N exchange processes (node:cluster) serving one port. The
// primary process serves no auction: it owns the notices (one hub: the durable queue and
// its delivery worker, or the in-memory sender, and the impressions that wait for a
// billing event), adds up the workers' statistics, restarts a worker that dies, and
// stops them in order on SIGTERM. Each worker warms up before it listens, so the port
// hands connections only to workers that are ready.
import cluster, { type Worker } from 'node:cluster';
import { fileURLToPath } from 'node:url';
import { RelentError } from '../core/errors.js';
import type { Fleet } from '../core/fleet.js';
import { createSeededRandom } from '../core/random.js';
import type { DeliveryEvent } from '../delivery/index.js';
import type { ResolvedExchangeConfig } from '../rtb/config.js';
import { createExchange, exchangeHistograms, type Exchange, type ExchangeOptions, type ExchangeStats, type WarmupReport } from '../rtb/exchange.js';
import { createNoticeOutlet } from '../rtb/notice-thread.js';
import {
  OutletQuestions,
  serveOutletRequest,
  type Billable,
  type BillingEventResult,
  type Notice,
  type NoticeCounters,
  type NoticeOutlet,
  type NoticeStats,
  type OutletReply,
  type OutletRequest,
} from '../rtb/notices.js';
import { mergeExchangeStats, type StatsPart } from '../rtb/stats-merge.js';
import { systemClock } from '../shared/clock.js';
import type { RelentEvent } from '../run/run.js';

const BIN = fileURLToPath(new URL('../../bin/relent', import.meta.url));

/** How often a worker reports its statistics to the primary, ms. */
export const WORKER_STATS_EVERY_MS = 1_000;

/** Memory of the exchange's processes. */
export interface ProcessMemory {
  readonly rssBytes: number;
  readonly heapUsedBytes: number;
  readonly processes: number;
  /** Each process: the primary first (with --workers), then the workers. */
  readonly each: readonly {
    readonly role: 'primary' | 'worker' | 'single';
    readonly rssBytes: number;
    readonly heapUsedBytes: number;
    readonly cpuMicros: number;
  }[];
}

/** A running exchange: one process, or a primary and its workers. */
export interface ExchangeProcesses {
  readonly url: string;
  readonly workers: number;
  /** Each worker's warm-up (one in a single process). */
  readonly warmup: readonly WarmupReport[];
  /** From start to ready to serve, ms. */
  readonly readyMs: number;
  /** The fleet the partners' breakers and budgets are shared through: `redis://host:port (fleet)`, or `… (local: why)`; null without one. */
  readonly fleet: string | null;
  /** The statistics of every worker added up (the workers report every second). */
  stats(): ExchangeStats;
  memory(): ProcessMemory;
  /** Stops accepting, answers what is in flight, hands the notices over, stops. Resolves with the final statistics. */
  close(): Promise<ExchangeStats>;
}

type Mem = { rss: number; heapUsed: number; cpuUs: number };

type ToPrimary =
  | { readonly t: 'ready'; readonly url: string; readonly report: WarmupReport; readonly part: StatsPart; readonly mem: Mem; readonly fleet: string | null }
  | { readonly t: 'failed'; readonly message: string }
  | OutletRequest
  | { readonly t: 'stats'; readonly part: StatsPart; readonly mem: Mem; readonly final: boolean };

type ToWorker = OutletReply | { readonly t: 'stop' };

function zero(): NoticeCounters {
  return { sent: 0, stored: 0, delivered: 0, failed: 0, dropped: 0, abandoned: 0, attempts: 0 };
}

/**
 * A worker's notice outlet: notices and won impressions go to the primary's hub over the
 * IPC channel (one message per turn of the event loop); billing events are asked there.
 */
export class IpcOutlet implements NoticeOutlet {
  readonly store: string;
  private notices: Notice[] = [];
  private billables: Billable[] = [];
  private scheduled = false;
  private readonly questions = new OutletQuestions();
  private readonly counters = { win: zero(), billing: zero(), loss: zero() };
  private readonly post = (m: OutletRequest): void => {
    process.send!(m satisfies ToPrimary);
  };

  constructor(store: string) {
    this.store = store;
    process.on('message', (m: ToWorker) => {
      if (m.t !== 'stop') this.questions.answer(m);
    });
    // The primary is gone: nothing more can be handed over.
    process.on('disconnect', () => this.questions.abandon());
  }

  open(): Promise<void> {
    return Promise.resolve();
  }

  send(n: Notice): boolean {
    if (!process.connected) {
      this.counters[n.kind].dropped++;
      return false;
    }
    this.counters[n.kind].sent++;
    this.notices.push(n);
    this.schedule();
    return true;
  }

  keepBillable(b: Billable): void {
    this.billables.push(b);
    this.schedule();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.flush());
  }

  /** Hands what is waiting to the primary now (it is otherwise sent once per turn of the event loop). */
  flush(): void {
    this.scheduled = false;
    if (this.notices.length === 0 && this.billables.length === 0) return;
    const msg: OutletRequest = { t: 'notices', n: this.notices, b: this.billables };
    this.notices = [];
    this.billables = [];
    if (process.connected) this.post(msg);
  }

  private ask<T>(msg: (id: number) => OutletRequest, fallback: T): Promise<T> {
    this.flush(); // what this worker handed over before goes first (one channel, in order)
    if (!process.connected) return Promise.resolve(fallback);
    return this.questions.ask(this.post, msg, fallback);
  }

  billingEvent(requestId: string, impId: string): Promise<BillingEventResult> {
    return this.ask<BillingEventResult>((id) => ({ t: 'event', id, requestId, impId }), 'unknown');
  }

  /** Resolves once the primary has stored everything this worker handed over (false: a write failed meanwhile). */
  stored(): Promise<boolean> {
    return this.ask((id) => ({ t: 'sync', id }), false);
  }

  stats(): NoticeStats {
    return {
      win: { ...this.counters.win },
      billing: { ...this.counters.billing },
      loss: { ...this.counters.loss },
      inFlight: this.notices.length,
      events: { received: 0, fired: 0, duplicate: 0, unknown: 0 },
      storeErrors: 0,
    };
  }

  /** Waits (at most 5 s) until the primary has stored what this worker handed over. */
  async close(): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.stored(),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), 5_000);
      }),
    ]);
    clearTimeout(timer);
  }
}

export interface WorkerSetup {
  readonly config: ResolvedExchangeConfig | unknown;
  /** The config's `fleet` options. */
  readonly fleet: Readonly<Record<string, unknown>> | null;
  readonly port: number | undefined;
  readonly host: string | undefined;
  readonly processes: number;
  /** This worker's slot, 0-based (its part of each partner's maxConcurrency). */
  readonly processIndex: number;
  readonly onEvent?: ((e: RelentEvent) => void) | null;
  readonly onAuction?: ExchangeOptions['onAuction'];
  readonly onLimitChange?: ExchangeOptions['onLimitChange'];
}

interface OpenedFleet {
  readonly fleet: Fleet;
  /** How the ready line shows it. */
  describe(): string;
  close(): Promise<void>;
}

/**
 * The fleet of the config's `fleet` options (relent/fleet, loaded only then). It joins
 * within 2 s or serves on local state (said in the ready line); errors name `fleet.<field>`.
 */
export async function openFleet(options: Readonly<Record<string, unknown>> | null, join = true): Promise<OpenedFleet | null> {
  if (options === null) return null;
  const { createRedisFleet } = await import('../fleet/index.js');
  let fleet;
  try {
    fleet = createRedisFleet(options as never);
  } catch (e) {
    if (RelentError.is(e) && e.code === 'ERR_INVALID_INPUT') {
      throw new RelentError('ERR_INVALID_INPUT', e.message.replace(/`(\w+)`/, '`fleet.$1`'), { field: `fleet.${e.field ?? ''}` });
    }
    throw e;
  }
  if (join) await fleet.ready(2_000);
  return {
    fleet,
    describe: () => {
      // Where it connects (a URL, a cluster or Sentinels; never credentials).
      const st = fleet.stats();
      return `${st.store} (${st.mode === 'fleet' ? 'shared' : `local: ${st.reason ?? 'not joined'}`})`;
    },
    close: () => fleet.close(),
  };
}

function memoryNow(): Mem {
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed, cpuUs: cpuNow() };
}

/** CPU time this process has used (user + system), µs. */
export function cpuNow(): number {
  const c = process.cpuUsage();
  return c.user + c.system;
}

function partOf(exchange: Exchange): StatsPart {
  return { stats: exchange.stats(), hist: exchangeHistograms(exchange) };
}

/**
 * The body of a worker process: an exchange whose notices go to the primary; it reports
 * its statistics every second and stops on the primary's word, on SIGTERM/SIGINT, or when
 * the primary is gone.
 */
export async function runExchangeWorker(setup: WorkerSetup): Promise<number> {
  const send = (m: ToPrimary): void => {
    if (process.connected) process.send!(m);
  };
  let exchange: Exchange;
  let fleet: OpenedFleet | null = null;
  const outlet = new IpcOutlet((setup.config as ResolvedExchangeConfig).notices?.store ?? 'memory');
  try {
    fleet = await openFleet(setup.fleet);
    exchange = createExchange(setup.config as never, {
      fleet: fleet?.fleet ?? null,
      processes: setup.processes,
      processIndex: setup.processIndex,
      noticeOutlet: outlet,
      onEvent: setup.onEvent ?? null,
      onAuction: setup.onAuction ?? null,
      onLimitChange: setup.onLimitChange ?? null,
    });
  } catch (e) {
    send({ t: 'failed', message: e instanceof Error ? e.message : String(e) });
    await fleet?.close();
    return 2;
  }
  let info;
  try {
    info = await exchange.listen(setup.port, setup.host);
  } catch (e) {
    send({ t: 'failed', message: `cannot listen: ${e instanceof Error ? e.message : String(e)}` });
    await exchange.close({ force: true, noticeDrainMs: 0 });
    await fleet?.close();
    return 1;
  }
  send({ t: 'ready', url: info.url, report: await exchange.ready(), part: partOf(exchange), mem: memoryNow(), fleet: fleet?.describe() ?? null });
  // Reading the statistics takes 0.2 ms, up to several ms in a young process: at a quiet moment.
  const report = (): void => send({ t: 'stats', part: partOf(exchange), mem: memoryNow(), final: false });
  const timer = setInterval(() => exchange.whenQuiet(report), WORKER_STATS_EVERY_MS);
  await new Promise<void>((resolve) => {
    process.on('message', (m: ToWorker) => {
      if (m.t === 'stop') resolve();
    });
    process.once('SIGTERM', () => resolve());
    process.once('SIGINT', () => resolve());
    process.once('disconnect', () => resolve());
  });
  clearInterval(timer);
  await exchange.close();
  // The last auctions' notices (handed over by close()) leave before the final statistics
  // and the disconnect, not on a later turn that would find the channel closed.
  outlet.flush();
  await fleet?.close();
  send({ t: 'stats', part: partOf(exchange), mem: memoryNow(), final: true });
  // Let the last message leave, then let go of the channel (it would keep the process alive).
  await new Promise<void>((resolve) => (process.connected ? process.send!({ t: 'sync', id: 0 } satisfies ToPrimary, () => resolve()) : resolve()));
  if (process.connected) process.disconnect();
  return 0;
}

export interface ClusterOptions {
  /** The resolved configuration (the primary's copy: notices and partners). */
  readonly config: ResolvedExchangeConfig;
  /** The arguments of `relent exchange` each worker is started with. */
  readonly argv: readonly string[];
  readonly workers: number;
  /** The primary's lines (a worker that died and was restarted…). */
  readonly log: (line: string) => void;
  /** In-process notice calls' events (memory store). */
  readonly onEvent?: ((e: RelentEvent) => void) | null;
  readonly onDeliveryEvent?: ((e: DeliveryEvent) => void) | null;
  /** Extra environment of the workers. */
  readonly env?: Readonly<Record<string, string>>;
}

interface Slot {
  worker: Worker;
  part: StatsPart | null;
  /** Statistics of the slot's earlier processes (restarted after they died). */
  past: StatsPart[];
  mem: Mem | null;
  ready: boolean;
}

/** Starts the primary's notice hub and N workers; resolves once every worker is ready to serve. */
export async function startCluster(o: ClusterOptions): Promise<ExchangeProcesses> {
  const t0 = performance.now();
  // The notices run in a thread of their own, below the workers (notice-thread.ts).
  const hub = createNoticeOutlet(o.config.notices, {
    clock: systemClock,
    random: createSeededRandom(Date.now()),
    onEvent: o.onEvent ?? null,
    onDeliveryEvent: o.onDeliveryEvent ?? null,
    partners: o.config.partners.map((p) => ({ name: p.name, url: p.url })),
    log: o.log,
  });
  // A store that cannot be opened stops everything before a worker starts.
  try {
    await hub.open();
  } catch (e) {
    await hub.close({ drainMs: 0, force: true }).catch(() => {});
    throw e;
  }
  cluster.setupPrimary({ exec: BIN, args: ['exchange', ...o.argv], silent: false });
  const slots: Slot[] = [];
  let stopping = false;
  const warmup: WarmupReport[] = [];
  let url = '';
  let fleetLine: string | null = null;
  let failed: ((e: Error) => void) | null = null;
  let allReady: (() => void) | null = null;
  const readyPromise = new Promise<void>((resolve, reject) => {
    allReady = resolve;
    failed = reject;
  });

  const onMessage = (slot: Slot, m: ToPrimary): void => {
    const reply = (r: ToWorker): void => {
      if (slot.worker.isConnected()) slot.worker.send(r);
    };
    switch (m.t) {
      case 'notices':
      case 'event':
        serveOutletRequest(hub, m, reply);
        break;
      case 'sync':
        // (id 0: the worker's last message, sent only to learn that it left)
        if (m.id !== 0) serveOutletRequest(hub, m, reply);
        break;
      case 'stats':
        slot.part = m.part;
        slot.mem = m.mem;
        break;
      case 'ready':
        slot.ready = true;
        slot.part = m.part;
        slot.mem = m.mem;
        url = m.url;
        fleetLine ??= m.fleet;
        warmup.push(m.report);
        if (slots.length === o.workers && slots.every((s) => s.ready)) allReady?.();
        break;
      case 'failed':
        failed?.(new Error(m.message));
        break;
    }
  };

  const fork = (slot?: Slot): Slot => {
    const index = slot === undefined ? slots.length : slots.indexOf(slot);
    const worker = cluster.fork({ ...o.env, RELENT_EXCHANGE_WORKERS: String(o.workers), RELENT_EXCHANGE_SLOT: String(index) });
    const s: Slot = slot ?? { worker, part: null, past: [], mem: null, ready: false };
    if (slot) {
      if (slot.part !== null) slot.past.push(slot.part);
      slot.worker = worker;
      slot.part = null;
      slot.ready = false;
    }
    worker.on('message', (m: ToPrimary) => onMessage(s, m));
    worker.on('exit', (code, signal) => {
      if (stopping || s.worker !== worker) return;
      if (!s.ready && url === '') {
        failed?.(new Error(`a worker exited while starting (${signal ?? `exit ${code}`})`));
        return;
      }
      o.log(`relent exchange: worker ${worker.process.pid} exited (${signal ?? `exit ${code}`}); starting another`);
      setTimeout(() => {
        if (!stopping) fork(s);
      }, 500);
    });
    return s;
  };
  for (let i = 0; i < o.workers; i++) slots.push(fork());
  try {
    await readyPromise;
  } catch (e) {
    stopping = true;
    for (const s of slots) s.worker.kill('SIGKILL');
    await hub.close({ drainMs: 0, force: true });
    throw e;
  }
  const readyMs = Math.round(performance.now() - t0);

  const stats = (): ExchangeStats =>
    mergeExchangeStats(
      slots.flatMap((s) => [...s.past, ...(s.part ? [s.part] : [])]),
      hub.stats(),
    );
  return {
    url,
    workers: o.workers,
    warmup,
    readyMs,
    fleet: fleetLine,
    stats,
    memory: () => {
      const own = process.memoryUsage();
      const each = [
        { role: 'primary' as const, rssBytes: own.rss, heapUsedBytes: own.heapUsed, cpuMicros: cpuNow() },
        ...slots.map((s) => ({ role: 'worker' as const, rssBytes: s.mem?.rss ?? 0, heapUsedBytes: s.mem?.heapUsed ?? 0, cpuMicros: s.mem?.cpuUs ?? 0 })),
      ];
      return { rssBytes: each.reduce((n, x) => n + x.rssBytes, 0), heapUsedBytes: each.reduce((n, x) => n + x.heapUsedBytes, 0), processes: each.length, each };
    },
    close: async () => {
      stopping = true;
      const exits = slots.map(
        (s) =>
          new Promise<void>((resolve) => {
            if (s.worker.isDead()) return resolve();
            s.worker.once('exit', () => resolve());
            if (s.worker.isConnected()) s.worker.send({ t: 'stop' } satisfies ToWorker);
            else s.worker.kill('SIGTERM');
          }),
      );
      // Each answers its auctions (bounded by their deadlines) and hands its notices over.
      const limit = setTimeout(() => {
        for (const s of slots) if (!s.worker.isDead()) s.worker.kill('SIGKILL');
      }, 30_000);
      await Promise.all(exits);
      clearTimeout(limit);
      await hub.close({ drainMs: 2_000, force: false });
      return stats();
    },
  };
}

/** One process: the exchange serves here, and its notices go through a hub in a thread of this process (as the primary's). */
export async function startInProcess(o: {
  readonly config: unknown;
  /** The same configuration, resolved (its notices and partners start the notice thread). */
  readonly resolved: ResolvedExchangeConfig;
  readonly port: number | undefined;
  readonly host: string | undefined;
  readonly options: ExchangeOptions;
  readonly fleet: Readonly<Record<string, unknown>> | null;
  /** Lines of what happens meanwhile (the notice thread died and another started). */
  readonly log?: ((line: string) => void) | null;
}): Promise<ExchangeProcesses & { readonly exchange: Exchange }> {
  const t0 = performance.now();
  const fleet = await openFleet(o.fleet);
  const notices = createNoticeOutlet(o.resolved.notices, {
    clock: systemClock,
    random: createSeededRandom(Date.now()),
    onEvent: o.options.onEvent ?? null,
    onDeliveryEvent: o.options.onDeliveryEvent ?? null,
    partners: o.resolved.partners.map((p) => ({ name: p.name, url: p.url })),
    log: o.log ?? null,
  });
  const closeNotices = (force: boolean): Promise<void> => notices.close({ drainMs: force ? 0 : 2_000, force });
  let exchange: Exchange;
  try {
    exchange = createExchange(o.config as never, { ...o.options, fleet: fleet?.fleet ?? null, noticeOutlet: notices });
  } catch (e) {
    await closeNotices(true);
    await fleet?.close();
    throw e;
  }
  let info;
  try {
    info = await exchange.listen(o.port, o.host);
  } catch (e) {
    await exchange.close({ force: true, noticeDrainMs: 0 });
    await closeNotices(true);
    await fleet?.close();
    throw e;
  }
  const report = await exchange.ready();
  return {
    exchange,
    url: info.url,
    workers: 1,
    warmup: [report],
    readyMs: Math.round(performance.now() - t0),
    fleet: fleet?.describe() ?? null,
    stats: () => exchange.stats(),
    memory: () => {
      const m = process.memoryUsage();
      return {
        rssBytes: m.rss,
        heapUsedBytes: m.heapUsed,
        processes: 1,
        each: [{ role: 'single' as const, rssBytes: m.rss, heapUsedBytes: m.heapUsed, cpuMicros: cpuNow() }],
      };
    },
    close: async () => {
      await exchange.close();
      await closeNotices(false);
      await fleet?.close();
      return exchange.stats();
    },
  };
}

/** True in a process started by startCluster(). */
export function isExchangeWorker(): boolean {
  return cluster.isWorker && process.env.RELENT_EXCHANGE_WORKERS !== undefined;
}
