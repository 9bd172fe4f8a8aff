// The notice hub in a worker thread of its own, below the threads that answer auctions.
// Notices have no deadline: writing them to the durable queue and calling them can wait
// for a free core, the auctions cannot. On Linux a thread has its own nice value, so the
// hub's thread runs at nice 10 (NOTICE_THREAD_NICE) while the process's main thread, and
// every process it forks, keep theirs; elsewhere the value is per process, and the thread
// keeps the process's priority.
import { Worker } from 'node:worker_threads';
import type { DeliveryEvent } from '../delivery/index.js';
import type { RelentEvent } from '../run/run.js';
import type { ResolvedNotices } from './config.js';
import { NoticeHub, type Billable, type BillingEventResult, type Notice, type NoticeCounters, type NoticeOutlet, type NoticeStats } from './notices.js';

/** How far below the process's own nice value the notice thread runs (Linux; at most 19): 0 → 10. */
export const NOTICE_THREAD_NICE = 10;

/** How often the thread reports its counters to stats(), ms. */
export const NOTICE_THREAD_STATS_MS = 200;

/** What the thread is started with (structured-clone data only). */
export interface NoticeThreadData {
  readonly cfg: ResolvedNotices;
  readonly partners: readonly { readonly name: string; readonly url: string }[];
  /** null: the thread keeps the process's priority. */
  readonly nice: number | null;
  readonly events: boolean;
  readonly deliveryEvents: boolean;
  readonly statsEveryMs: number;
}

export type ToNoticeThread =
  | { readonly t: 'n'; readonly n: readonly Notice[]; readonly b: readonly Billable[] }
  | { readonly t: 'event'; readonly id: number; readonly requestId: string; readonly impId: string }
  | { readonly t: 'stored'; readonly id: number }
  | { readonly t: 'close'; readonly drainMs: number; readonly force: boolean };

export type FromNoticeThread =
  | { readonly t: 'opened'; readonly nice: number | null; readonly why: string | null }
  | { readonly t: 'failed'; readonly message: string; readonly code: string | null }
  | { readonly t: 'event'; readonly id: number; readonly r: BillingEventResult }
  | { readonly t: 'stored'; readonly id: number; readonly ok: boolean }
  | { readonly t: 'stats'; readonly s: NoticeStats }
  | { readonly t: 'closed'; readonly s: NoticeStats }
  | { readonly t: 'ev'; readonly e: RelentEvent }
  | { readonly t: 'dev'; readonly e: DeliveryEvent };

/** The compiled thread body; none when loaded from TypeScript sources (a test runner's transform). */
const ENTRY: URL | null = import.meta.url.endsWith('.js') ? new URL('./notice-thread-main.js', import.meta.url) : null;

export interface NoticeThreadOptions {
  readonly partners: readonly { readonly name: string; readonly url: URL }[];
  readonly onEvent?: ((e: RelentEvent) => void) | null;
  readonly onDeliveryEvent?: ((e: DeliveryEvent) => void) | null;
  /** How far the thread's nice value goes above the process's (Linux); null: the process's. Default NOTICE_THREAD_NICE. */
  readonly nice?: number | null;
}

function zero(): NoticeCounters {
  return { sent: 0, stored: 0, delivered: 0, failed: 0, dropped: 0, abandoned: 0, attempts: 0 };
}

/**
 * A NoticeHub run in a worker thread. Notices and won impressions are handed over once per
 * microtask checkpoint (one message for all those of a turn); billing events and stored()
 * are asked and answered in order with them. stats() is the thread's last report (every
 * NOTICE_THREAD_STATS_MS, and a final one at close).
 */
export class NoticeThread implements NoticeOutlet {
  readonly store: string;
  /** The thread's nice value once open; null when it kept the process's priority. */
  nice: number | null = null;
  /** Why the thread kept the process's priority (null when niced or not asked). */
  niceWhy: string | null = null;
  private readonly worker: Worker;
  private notices: Notice[] = [];
  private billables: Billable[] = [];
  private scheduled = false;
  private seq = 0;
  private readonly waiting = new Map<number, (r: never) => void>();
  private last: NoticeStats;
  /** Notices not handed over because the thread was gone (counted here). */
  private readonly lost = { win: zero(), billing: zero(), loss: zero() };
  private alive = true;
  private readonly opening: Promise<void>;
  private closing: Promise<void> | null = null;
  private readonly exited: Promise<void>;

  constructor(cfg: ResolvedNotices, private readonly o: NoticeThreadOptions) {
    this.store = cfg.store;
    this.last = { win: zero(), billing: zero(), loss: zero(), inFlight: 0, events: { received: 0, fired: 0, duplicate: 0, unknown: 0 }, storeErrors: 0 };
    if (ENTRY === null) throw new Error('relent: the notice thread runs from the compiled package only');
    const data: NoticeThreadData = {
      cfg,
      partners: o.partners.map((p) => ({ name: p.name, url: p.url.href })),
      nice: o.nice === undefined ? NOTICE_THREAD_NICE : o.nice,
      events: typeof o.onEvent === 'function',
      deliveryEvents: typeof o.onDeliveryEvent === 'function',
      statsEveryMs: NOTICE_THREAD_STATS_MS,
    };
    // None of the process's own node flags (a loader, --cpu-prof…): the thread runs only the compiled hub.
    // Kept referenced: the process lives until close() has ended the thread (its notices written).
    this.worker = new Worker(ENTRY, { workerData: data, execArgv: [] });
    let opened: () => void = () => {};
    let failed: (e: Error) => void = () => {};
    this.opening = new Promise<void>((resolve, reject) => {
      opened = resolve;
      failed = reject;
    });
    this.opening.catch(() => {});
    this.worker.on('message', (m: FromNoticeThread) => {
      switch (m.t) {
        case 'opened':
          this.nice = m.nice;
          this.niceWhy = m.why;
          opened();
          break;
        case 'failed':
          failed(Object.assign(new Error(m.message), m.code === null ? {} : { code: m.code }));
          break;
        case 'event':
        case 'stored':
          this.answer(m.id, m.t === 'event' ? m.r : m.ok);
          break;
        case 'stats':
        case 'closed':
          this.last = m.s;
          break;
        case 'ev':
          call(this.o.onEvent, m.e);
          break;
        case 'dev':
          call(this.o.onDeliveryEvent, m.e);
          break;
      }
    });
    this.worker.on('error', (e) => {
      failed(e);
      this.gone();
    });
    this.exited = new Promise<void>((resolve) => this.worker.once('exit', () => {
      failed(new Error('relent: the notice thread exited while opening the store'));
      this.gone();
      resolve();
    }));
  }

  /** Resolves once the thread has opened the store (rejects as the store's open would). */
  open(): Promise<void> {
    return this.opening;
  }

  send(n: Notice): boolean {
    if (!this.alive || this.closing !== null) {
      this.lost[n.kind].dropped++;
      return false;
    }
    this.notices.push(n);
    this.schedule();
    return true;
  }

  keepBillable(b: Billable): void {
    if (!this.alive || this.closing !== null) return;
    this.billables.push(b);
    this.schedule();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => this.flush());
  }

  private flush(): void {
    this.scheduled = false;
    if (this.notices.length === 0 && this.billables.length === 0) return;
    const msg: ToNoticeThread = { t: 'n', n: this.notices, b: this.billables };
    this.notices = [];
    this.billables = [];
    if (this.alive) this.worker.postMessage(msg);
  }

  private ask<T>(msg: (id: number) => ToNoticeThread, fallback: T): Promise<T> {
    this.flush(); // what was handed over before goes first
    if (!this.alive) return Promise.resolve(fallback);
    const id = ++this.seq;
    return new Promise<T>((resolve) => {
      this.waiting.set(id, resolve as (r: never) => void);
      this.worker.postMessage(msg(id));
    });
  }

  private answer(id: number, r: unknown): void {
    const f = this.waiting.get(id);
    this.waiting.delete(id);
    f?.(r as never);
  }

  billingEvent(requestId: string, impId: string): Promise<BillingEventResult> {
    return this.ask<BillingEventResult>((id) => ({ t: 'event', id, requestId, impId }), 'unknown');
  }

  stored(): Promise<boolean> {
    return this.ask((id) => ({ t: 'stored', id }), false);
  }

  stats(): NoticeStats {
    const s = this.last;
    const add = (k: 'win' | 'billing' | 'loss'): NoticeCounters => ({ ...s[k], dropped: s[k].dropped + this.lost[k].dropped });
    return { ...s, win: add('win'), billing: add('billing'), loss: add('loss') };
  }

  /** Hands what is waiting over, closes the hub in the thread (as NoticeHub.close) and ends the thread. */
  close(o: { readonly drainMs: number; readonly force: boolean }): Promise<void> {
    this.closing ??= (async () => {
      this.flush();
      if (this.alive) {
        this.worker.postMessage({ t: 'close', drainMs: o.drainMs, force: o.force } satisfies ToNoticeThread);
        // The hub stops its delivery worker within its stop timeout; past a generous cap the thread is ended.
        const cap = setTimeout(() => void this.worker.terminate(), o.drainMs + 30_000);
        await this.exited;
        clearTimeout(cap);
      }
    })();
    return this.closing;
  }

  /** The thread is gone: whoever waits gets the fallback answer. */
  private gone(): void {
    if (!this.alive) return;
    this.alive = false;
    for (const [id] of this.waiting) this.answer(id, undefined);
    this.notices = [];
    this.billables = [];
  }
}

function call<E>(f: ((e: E) => void) | null | undefined, e: E): void {
  if (typeof f !== 'function') return;
  try {
    f(e);
  } catch {
    // a listener's error must not stop the notices
  }
}

/** True when this build can run the notice hub in a thread (compiled JavaScript). */
export function noticeThreadAvailable(): boolean {
  return ENTRY !== null;
}

/** A NoticeHub in a thread when the build can start one, else in this thread (TypeScript sources). */
export function createNoticeOutlet(cfg: ResolvedNotices, o: NoticeThreadOptions & { readonly clock: NoticeHubClock; readonly random: () => number }): NoticeOutlet & { billingEvent(requestId: string, impId: string): BillingEventResult | Promise<BillingEventResult> } {
  if (ENTRY !== null) return new NoticeThread(cfg, o);
  return new NoticeHub(cfg, { clock: o.clock, random: o.random, onEvent: o.onEvent ?? undefined, onDeliveryEvent: o.onDeliveryEvent ?? null, partners: o.partners });
}

type NoticeHubClock = ConstructorParameters<typeof NoticeHub>[1]['clock'];
