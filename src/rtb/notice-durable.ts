// Notices through relent/delivery's durable queue (DurableNotices): written in groups
// (one transaction per NOTICE_GROUP_MS), retried with backoff while the store is
// unreachable, and delivered by a delivery worker in this process with each kind's policy.
import type { Agent } from 'undici';
import { undici } from '../shared/undici.js';
import type { Policy } from '../core/policy.js';
import type { DeliveryEvent, DeliveryQueue, DeliveryRequest, DeliveryWorker, NewItem, TransportResult } from '../delivery/index.js';
import { pickHintHeaders } from '../core/hints.js';
import type { ResolvedNotices } from './config-schema.js';
import {
  httpUrl,
  newCounters,
  NOTICE_KINDS,
  noticeDestination,
  type Notice,
  type NoticeCounters,
  type NoticeHubOptions,
  type NoticeKind,
} from './notice-model.js';

/**
 * How long a notice waits for others to be written with it (group commit), ms. A crash
 * loses at most the notices of that long that were not yet written, as it loses those
 * of the answer's quiet wait (timer-lanes.ts).
 */
export const NOTICE_GROUP_MS = 10;

/** Notices waiting that are written on the next turn without waiting out NOTICE_GROUP_MS. */
export const NOTICE_GROUP_MAX = 1_000;

/** The worker settings of the exchange's notice queue, where they differ from relent/delivery's defaults. */
export const NOTICE_WORKER_DEFAULTS = Object.freeze({ pollMs: 250, stopTimeoutMs: 2_000 });

/**
 * Notices through relent/delivery's durable queue: each is an item of destination
 * `rtb:<partner>:<kind>` (payload `{"url": …}`, key `noticeQueueKey`), delivered by a
 * worker in this process with the kind's policy (GET of the item's URL; the policy
 * decides every retry, and the wait between them is stored, so a retry survives a
 * restart). Notices are written in batches, one transaction per NOTICE_GROUP_MS;
 * a notice is safe from a crash once written (`stored` counts them). At most `maxPending`
 * wait to be written; more are dropped and counted.
 */
export class DurableNotices {
  readonly counters: Record<NoticeKind, NoticeCounters> = { win: newCounters(), billing: newCounters(), loss: newCounters() };
  storeErrors = 0;
  private queue: DeliveryQueue | null = null;
  private worker: DeliveryWorker | null = null;
  private opening: Promise<void> | null = null;
  /** Notices waiting to be written, oldest first; `n` numbers them in the order they came. */
  private buffer: { item: NewItem; kind: NoticeKind; n: number }[] = [];
  private seq = 0;
  /** The notices of the write in progress (its first `n`), or null. */
  private writingFrom: number | null = null;
  private flushing: Promise<void> | null = null;
  private scheduled = false;
  /** Cancels the group timer of the write scheduled (null: none, or on the next turn). */
  private cancelGroup: (() => void) | null = null;
  private closing = false;
  private retryMs = 0;
  private cancelRetry: (() => void) | null = null;
  /** stored() calls, each waiting until every notice up to its `n` is written (or given up). */
  private waiters: { upTo: number; resolve: (ok: boolean) => void }[] = [];
  private readonly agent: Agent;
  private readonly own: boolean;
  private readonly kindOf = new Map<string, NoticeKind>();

  constructor(
    private readonly cfg: ResolvedNotices,
    private readonly policies: Record<NoticeKind, Policy>,
    private readonly o: NoticeHubOptions,
  ) {
    this.own = !o.dispatcher;
    this.agent = (o.dispatcher as Agent | null | undefined) ?? new (undici().Agent)({ connections: 32, keepAliveTimeout: 10_000 });
  }

  get pending(): number {
    return this.buffer.length;
  }

  open(): Promise<void> {
    this.opening ??= this.doOpen();
    return this.opening;
  }

  private async doOpen(): Promise<void> {
    const delivery = await import('../delivery/index.js');
    const destinations: Record<string, unknown> = {};
    for (const p of this.o.partners) {
      for (const kind of NOTICE_KINDS) {
        const name = noticeDestination(p.name, kind);
        this.kindOf.set(name, kind);
        destinations[name] = {
          // Shown by `relent queue`; each notice goes to its own URL (the transport below).
          url: p.url.href,
          policy: this.policies[kind],
          batch: { maxItems: 1, maxAgeMs: 0 },
          format: 'single',
          concurrency: { initial: 16, max: 64 },
        };
      }
    }
    const resolved = delivery.resolveDestinations(destinations);
    // The store's SQLite work stays in this process (the notice thread): a store process of
    // its own would be one more process starting and competing for the cores just as the
    // first auctions of a fresh exchange arrive.
    const queue = await delivery.openDeliveryQueue({ store: this.cfg.store, sqliteRunIn: 'caller', destinations: resolved, clock: this.o.clock });
    this.queue = queue;
    const agent = this.agent;
    const transport = async (req: DeliveryRequest): Promise<TransportResult> => {
      const payload = JSON.parse(req.items[0]!.payload) as { url?: unknown };
      const u = typeof payload.url === 'string' ? httpUrl(payload.url) : null;
      // Not an http(s) URL (only if edited in the store by hand): answered like a bad request.
      if (u === null) return { status: 400 };
      const res = await agent.request({
        origin: u.origin,
        path: `${u.pathname}${u.search}`,
        method: 'GET',
        signal: req.signal,
        headersTimeout: req.timeoutMs,
        bodyTimeout: req.timeoutMs,
      });
      await res.body.dump({ limit: 64 * 1024 }).catch(() => {});
      const headers = pickHintHeaders(res.headers);
      return headers ? { status: res.statusCode, headers } : { status: res.statusCode };
    };
    const user = this.o.onDeliveryEvent ?? null;
    this.worker = queue.createWorker({
      ...NOTICE_WORKER_DEFAULTS,
      ...this.cfg.worker,
      clock: this.o.clock,
      random: this.o.random,
      transport,
      instrumentation: this.o.instrumentation ?? null,
      onEvent: (e) => {
        this.count(e);
        if (user !== null) {
          try {
            user(e);
          } catch {
            // a listener's error must not stop the worker
          }
        }
      },
    });
    this.worker.start();
    if (this.buffer.length > 0) this.schedule();
  }

  private count(e: DeliveryEvent): void {
    if (e.type === 'store_error') {
      this.storeErrors++;
      return;
    }
    const kind = 'destination' in e ? this.kindOf.get(e.destination) : undefined;
    if (kind === undefined) return;
    const c = this.counters[kind];
    if (e.type === 'attempt') c.attempts++;
    else if (e.type === 'delivered') c.delivered++;
    else if (e.type === 'dropped') c.failed++;
  }

  send(n: Notice): boolean {
    const c = this.counters[n.kind];
    // Auctions run without ready() (exchange.auction()) open the store on the first notice.
    if (this.opening === null && !this.closing)
      this.open().catch(() => {
        this.storeErrors++;
      });
    if (this.closing || this.buffer.length >= this.cfg.maxPending || httpUrl(n.url) === null) {
      c.dropped++;
      return false;
    }
    c.sent++;
    this.buffer.push({
      item: { destination: noticeDestination(n.partner, n.kind), key: n.key, payload: JSON.stringify({ url: n.url }) },
      kind: n.kind,
      n: ++this.seq,
    });
    this.schedule();
    return true;
  }

  /**
   * Resolves true once every notice taken so far is written — not waiting for later
   * ones; false as soon as a write of one of them fails (it waits and is tried again), or
   * it is dropped or abandoned.
   */
  stored(): Promise<boolean> {
    if (this.oldestPending() > this.seq) return Promise.resolve(true);
    const p = new Promise<boolean>((resolve) => this.waiters.push({ upTo: this.seq, resolve }));
    this.schedule(true);
    return p;
  }

  /** The `n` of the oldest notice not yet written or given up (seq + 1 when there is none). */
  private oldestPending(): number {
    return this.writingFrom ?? this.buffer[0]?.n ?? this.seq + 1;
  }

  /**
   * Writes what waits after NOTICE_GROUP_MS (group commit: one transaction, and one look
   * of the delivery worker, for all the notices of that time), or on the next turn when
   * NOTICE_GROUP_MAX wait or somebody waits for stored().
   */
  private schedule(now = false): void {
    if (this.flushing !== null || this.cancelRetry !== null || this.queue === null) return;
    now ||= this.buffer.length >= NOTICE_GROUP_MAX || this.waiters.length > 0;
    if (this.scheduled) {
      if (!now || this.cancelGroup === null) return;
      this.cancelGroup();
      this.cancelGroup = null;
    }
    this.scheduled = true;
    const run = (): void => {
      this.cancelGroup = null;
      this.scheduled = false;
      void this.flush();
    };
    if (now) setImmediate(run);
    else this.cancelGroup = this.o.clock.setTimer(run, NOTICE_GROUP_MS);
  }

  private flush(): Promise<void> {
    if (this.flushing !== null) return this.flushing;
    if (this.buffer.length === 0 || this.queue === null) {
      this.release();
      return Promise.resolve();
    }
    const batch = this.buffer;
    this.buffer = [];
    this.writingFrom = batch[0]!.n;
    const queue = this.queue;
    this.flushing = (async () => {
      try {
        const items = batch.map((b) => b.item);
        await queue.store.enqueue(items, this.o.clock.wallNow());
        for (const b of batch) this.counters[b.kind].stored++;
        this.retryMs = 0;
        this.worker?.wake(new Set(items.map((it) => it.destination)));
      } catch {
        // The store is unreachable or full: keep the notices, oldest first, and try again
        // later; past maxPending the newest are dropped (counted).
        this.storeErrors++;
        // Who waits for one of these learns it now (a billing event is answered 503: send it again).
        const first = batch[0]!.n;
        this.waiters = this.waiters.filter((w) => {
          if (w.upTo < first) return true;
          w.resolve(false);
          return false;
        });
        const all = batch.concat(this.buffer);
        for (const b of all.splice(this.cfg.maxPending)) this.counters[b.kind].dropped++;
        this.buffer = all;
        this.retryMs = Math.min(5_000, this.retryMs === 0 ? 100 : this.retryMs * 2);
      }
    })().finally(() => {
      this.flushing = null;
      this.writingFrom = null;
      this.release();
      if (this.retryMs > 0 && this.buffer.length > 0 && !this.closing) {
        this.cancelRetry = this.o.clock.setTimer(() => {
          this.cancelRetry = null;
          this.schedule();
        }, this.retryMs);
      } else if (this.buffer.length > 0 && !this.closing) this.schedule();
    });
    return this.flushing;
  }

  /** Resolves the stored() calls whose notices are all written or given up. */
  private release(): void {
    if (this.waiters.length === 0) return;
    const oldest = this.oldestPending();
    const still: typeof this.waiters = [];
    for (const w of this.waiters) {
      if (w.upTo < oldest) w.resolve(true);
      else still.push(w);
    }
    this.waiters = still;
  }

  /**
   * Stops taking notices, writes those waiting (one last try), stops the delivery worker
   * (requests in flight get `stopTimeoutMs`, then their claims are released: they are
   * due again at the next start) and closes the store.
   */
  async close(): Promise<void> {
    this.closing = true;
    this.cancelRetry?.();
    this.cancelRetry = null;
    if (this.cancelGroup !== null) {
      this.cancelGroup();
      this.cancelGroup = null;
      this.scheduled = false;
    }
    if (this.opening !== null) await this.opening.catch(() => {});
    if (this.flushing !== null) await this.flushing;
    if (this.buffer.length > 0 && this.queue !== null) await this.flush();
    for (const b of this.buffer.splice(0)) this.counters[b.kind].abandoned++;
    this.release();
    for (const w of this.waiters.splice(0)) w.resolve(false);
    if (this.worker !== null) await this.worker.stop().catch(() => {});
    if (this.queue !== null) await this.queue.close().catch(() => {});
    if (this.own && !this.agent.closed && !this.agent.destroyed) await this.agent.destroy();
  }
}
