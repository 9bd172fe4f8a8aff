// The notice hub in a worker thread of its own, below the threads that answer auctions.
// Notices have no deadline: writing them to the durable queue and calling them can wait
// for a free core, the auctions cannot. On Linux a thread has its own nice value, so the
// hub's thread runs at nice 10 (NOTICE_THREAD_NICE) while the process's main thread, and
// every process it forks, keep theirs; elsewhere the value is per process, and the thread
// keeps the process's priority.
import { Worker } from 'node:worker_threads';
import type { DeliveryEvent } from '../delivery/index.js';
import type { RelentEvent } from '../run/run.js';
import type { Clock, Random } from '../core/types.js';
import type { ResolvedNotices } from './config-schema.js';
import type { Billable, BillingEventResult, Notice, NoticeCounters, NoticeOutlet, NoticeStats } from './notice-model.js';
import { NoticeHub, OutletQuestions, type OutletReply, type OutletRequest } from './notices.js';

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

export type ToNoticeThread = OutletRequest | { readonly t: 'close'; readonly drainMs: number; readonly force: boolean };

export type FromNoticeThread =
  | { readonly t: 'opened' }
  | { readonly t: 'failed'; readonly message: string; readonly code: string | null }
  | OutletReply
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
  /** A line when the thread died and another is started. */
  readonly log?: ((line: string) => void) | null;
}

function zero(): NoticeCounters {
  return { sent: 0, stored: 0, delivered: 0, failed: 0, dropped: 0, abandoned: 0, attempts: 0 };
}

/** The first wait before a notice thread that died is started again, ms (doubling up to 5 s while it cannot open the store). */
export const NOTICE_THREAD_RESTART_MS = 500;

function zeroStats(): NoticeStats {
  return { win: zero(), billing: zero(), loss: zero(), inFlight: 0, events: { received: 0, fired: 0, duplicate: 0, unknown: 0 }, storeErrors: 0 };
}

function addCounters(a: NoticeCounters, b: NoticeCounters): NoticeCounters {
  return {
    sent: a.sent + b.sent,
    stored: a.stored + b.stored,
    delivered: a.delivered + b.delivered,
    failed: a.failed + b.failed,
    dropped: a.dropped + b.dropped,
    abandoned: a.abandoned + b.abandoned,
    attempts: a.attempts + b.attempts,
  };
}

function addStats(a: NoticeStats, b: NoticeStats): NoticeStats {
  return {
    win: addCounters(a.win, b.win),
    billing: addCounters(a.billing, b.billing),
    loss: addCounters(a.loss, b.loss),
    inFlight: a.inFlight + b.inFlight,
    events: {
      received: a.events.received + b.events.received,
      fired: a.events.fired + b.events.fired,
      duplicate: a.events.duplicate + b.events.duplicate,
      unknown: a.events.unknown + b.events.unknown,
    },
    storeErrors: a.storeErrors + b.storeErrors,
  };
}

/**
 * A NoticeHub run in a worker thread. Notices and won impressions are handed over once per
 * microtask checkpoint (one message for all those of a turn); billing events and stored()
 * are asked and answered in order with them. stats() is the thread's last report (every
 * NOTICE_THREAD_STATS_MS, and a final one at close), added to those of threads before it.
 *
 * A thread that dies (an uncaught error in it) is started again after
 * NOTICE_THREAD_RESTART_MS; meanwhile notices wait here (at most `maxPending`, more are
 * dropped and counted), billing events are answered `unknown` and stored() false (the
 * event is answered 503: send it again). Durable notices written before are delivered by
 * the new thread; the won impressions the dead thread kept for billing events are lost,
 * and so are the counters of its last report period.
 */
export class NoticeThread implements NoticeOutlet {
  readonly store: string;
  /** How many times a thread died and another was started. */
  restarts = 0;
  private readonly data: NoticeThreadData;
  private readonly maxPending: number;
  private worker: Worker | null = null;
  /** A thread runs and has opened the store. */
  private up = false;
  private everUp = false;
  private notices: Notice[] = [];
  private billables: Billable[] = [];
  private scheduled = false;
  private readonly questions = new OutletQuestions();
  private readonly post = (m: ToNoticeThread): void => {
    this.worker!.postMessage(m);
  };
  private last: NoticeStats = zeroStats();
  /** The last reports of the threads that died, added up. */
  private past: NoticeStats = zeroStats();
  /** Notices this side dropped (too many waiting while no thread ran) or abandoned at close. */
  private readonly lost = { win: zero(), billing: zero(), loss: zero() };
  private readonly opening: Promise<void>;
  private closing: Promise<void> | null = null;
  private exited: Promise<void> = Promise.resolve();
  private restartMs = NOTICE_THREAD_RESTART_MS;
  private restartTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    cfg: ResolvedNotices,
    private readonly o: NoticeThreadOptions,
  ) {
    this.store = cfg.store;
    this.maxPending = cfg.maxPending;
    if (ENTRY === null) throw new Error('relent: the notice thread runs from the compiled package only');
    this.data = {
      cfg,
      partners: o.partners.map((p) => ({ name: p.name, url: p.url.href })),
      nice: o.nice === undefined ? NOTICE_THREAD_NICE : o.nice,
      events: typeof o.onEvent === 'function',
      deliveryEvents: typeof o.onDeliveryEvent === 'function',
      statsEveryMs: NOTICE_THREAD_STATS_MS,
    };
    this.opening = this.start();
    this.opening.catch(() => {});
  }

  /** Starts a thread; resolves once it has opened the store (rejects as the store's open would). */
  private start(): Promise<void> {
    // None of the process's own node flags (a loader, --cpu-prof…): the thread runs only the compiled hub.
    // Kept referenced: the process lives until close() has ended the thread (its notices written).
    const worker = new Worker(ENTRY!, { workerData: this.data, execArgv: [] });
    this.worker = worker;
    let opened: () => void = () => {};
    let failed: (e: Error) => void = () => {};
    const opening = new Promise<void>((resolve, reject) => {
      opened = resolve;
      failed = reject;
    });
    worker.on('message', (m: FromNoticeThread) => {
      if (this.worker !== worker) return;
      switch (m.t) {
        case 'opened':
          this.up = true;
          this.everUp = true;
          this.restartMs = NOTICE_THREAD_RESTART_MS;
          opened();
          this.flush(); // what waited while no thread ran
          break;
        case 'failed':
          failed(Object.assign(new Error(m.message), m.code === null ? {} : { code: m.code }));
          break;
        case 'event':
        case 'sync':
          this.questions.answer(m);
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
    let why = 'it exited';
    worker.on('error', (e) => {
      why = e instanceof Error ? e.message : String(e);
      failed(e instanceof Error ? e : new Error(why));
    });
    this.exited = new Promise<void>((resolve) =>
      worker.once('exit', (code) => {
        failed(new Error(`relent: the notice thread exited (code ${code}) before it opened the store`));
        this.down(worker, why);
        resolve();
      }),
    );
    return opening;
  }

  /** A thread ended: whoever waits gets the fallback answer; unless closing, another is started. */
  private down(worker: Worker, why: string): void {
    if (this.worker !== worker) return;
    this.worker = null;
    this.up = false;
    this.past = addStats(this.past, this.last);
    this.last = zeroStats();
    this.questions.abandon();
    // The first start's failure is open()'s rejection; a thread that ended as asked is not replaced.
    if (this.closing !== null || !this.everUp) return;
    this.restarts++;
    this.o.log?.(`relent exchange: the notice thread stopped (${why}); another starts in ${this.restartMs} ms`);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = null;
      if (this.closing !== null) return;
      this.start().catch(() => {});
    }, this.restartMs);
    this.restartMs = Math.min(5_000, this.restartMs * 2);
  }

  /** Resolves once the thread has opened the store (rejects as the store's open would). */
  open(): Promise<void> {
    return this.opening;
  }

  send(n: Notice): boolean {
    if (this.closing !== null || (!this.up && this.notices.length >= this.maxPending)) {
      this.lost[n.kind].dropped++;
      return false;
    }
    this.notices.push(n);
    this.schedule();
    return true;
  }

  keepBillable(b: Billable): void {
    if (this.closing !== null || (!this.up && this.billables.length >= this.maxPending)) return;
    this.billables.push(b);
    this.schedule();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => this.flush());
  }

  /** Hands what waits to the thread (kept here while no thread runs). */
  private flush(): void {
    this.scheduled = false;
    if (!this.up || (this.notices.length === 0 && this.billables.length === 0)) return;
    const msg: OutletRequest = { t: 'notices', n: this.notices, b: this.billables };
    this.notices = [];
    this.billables = [];
    this.post(msg);
  }

  private ask<T>(msg: (id: number) => OutletRequest, fallback: T): Promise<T> {
    this.flush(); // what was handed over before goes first
    if (!this.up) return Promise.resolve(fallback);
    return this.questions.ask(this.post, msg, fallback);
  }

  billingEvent(requestId: string, impId: string): Promise<BillingEventResult> {
    return this.ask<BillingEventResult>((id) => ({ t: 'event', id, requestId, impId }), 'unknown');
  }

  stored(): Promise<boolean> {
    return this.ask((id) => ({ t: 'sync', id }), false);
  }

  stats(): NoticeStats {
    const s = addStats(this.past, this.last);
    const add = (k: 'win' | 'billing' | 'loss'): NoticeCounters => ({
      ...s[k],
      dropped: s[k].dropped + this.lost[k].dropped,
      abandoned: s[k].abandoned + this.lost[k].abandoned,
    });
    return { ...s, win: add('win'), billing: add('billing'), loss: add('loss'), inFlight: s.inFlight + this.notices.length };
  }

  /** Hands what is waiting over, closes the hub in the thread (as NoticeHub.close) and ends the thread. */
  close(o: { readonly drainMs: number; readonly force: boolean }): Promise<void> {
    this.closing ??= (async () => {
      if (this.restartTimer !== null) clearTimeout(this.restartTimer);
      this.restartTimer = null;
      this.flush();
      const worker = this.worker;
      if (worker !== null) {
        worker.postMessage({ t: 'close', drainMs: o.drainMs, force: o.force } satisfies ToNoticeThread);
        // The hub stops its delivery worker within its stop timeout; past a generous cap the thread is ended.
        const cap = setTimeout(() => void worker.terminate(), o.drainMs + 30_000);
        await this.exited;
        clearTimeout(cap);
      }
      // No thread took these (it was down, or it never opened the store).
      for (const n of this.notices.splice(0)) this.lost[n.kind].abandoned++;
      this.billables = [];
    })();
    return this.closing;
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

/** A NoticeHub in a thread when the build can start one, else in this thread (TypeScript sources). */
export function createNoticeOutlet(cfg: ResolvedNotices, o: NoticeThreadOptions & { readonly clock: Clock; readonly random: Random }): NoticeOutlet {
  if (ENTRY !== null) return new NoticeThread(cfg, o);
  return new NoticeHub(cfg, {
    clock: o.clock,
    random: o.random,
    onEvent: o.onEvent ?? undefined,
    onDeliveryEvent: o.onDeliveryEvent ?? null,
    partners: o.partners,
  });
}
