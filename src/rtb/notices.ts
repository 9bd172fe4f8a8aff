import { createHash } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import type { Agent, Dispatcher } from 'undici';
import { undici } from '../shared/undici.js';
import type { Policy, PolicySpec } from '../core/policy.js';
import type { Clock, Random } from '../core/types.js';
import type { DeliveryEvent, DeliveryQueue, DeliveryRequest, DeliveryWorker, NewItem, TransportResult } from '../delivery/index.js';
import { normalizeUrlEndpoint } from '../core/endpoint.js';
import { pickHintHeaders } from '../core/hints.js';
import { presetPolicy, withOverrides } from '../presets/index.js';
import { forDriver } from '../run/instrument.js';
import { execute, type AttemptContext, type Instrumentation, type RelentEvent } from '../run/run.js';
import type { ResolvedNotices } from './config.js';
import { substituteMacros, type MacroValues } from './macros.js';
import { TtlMap } from './ttl-map.js';

/** Win notices (nurl), billing notices (burl) and loss notices (lurl). */
export type NoticeKind = 'win' | 'billing' | 'loss';

export const NOTICE_KINDS: readonly NoticeKind[] = Object.freeze(['win', 'billing', 'loss']);

/** One notice the exchange wants called: its URL with the macros substituted. */
export interface Notice {
  readonly kind: NoticeKind;
  /** The partner whose bid carried the URL. */
  readonly partner: string;
  readonly url: string;
  /** Unique per partner and kind (request id + impression id, + bid id for a loss); the durable queue dedupes on it. */
  readonly key: string;
}

/** A won impression waiting for its billing event (`notices.billing` = `on-event`). */
export interface Billable {
  readonly partner: string;
  readonly requestId: string;
  readonly impId: string;
  /** The burl with its macros not yet substituted (`${AUCTION_IMP_TS}` is the event's time). */
  readonly burl: string;
  readonly values: MacroValues;
}

export type BillingEventResult = 'fired' | 'duplicate' | 'unknown';

export interface NoticeCounters {
  /** Notices handed over to be called. */
  sent: number;
  /** Durable store: written to the queue (they survive a crash from then on). Memory: 0. */
  stored: number;
  /** Answered 200 or 204 (billing) / any 2xx (win, loss). */
  delivered: number;
  /** Given up after the policy's attempts or deadline (durable: kept in the queue as dropped). */
  failed: number;
  /** Not taken: too many pending, the exchange was closing, or not an http(s) URL. */
  dropped: number;
  /** Memory: cancelled by shutdown. Durable: not yet written when the store could not be reached at shutdown. */
  abandoned: number;
  attempts: number;
}

export interface NoticeStats {
  readonly win: Readonly<NoticeCounters>;
  readonly billing: Readonly<NoticeCounters>;
  readonly loss: Readonly<NoticeCounters>;
  /** Memory: calls in flight or waiting to retry. Durable: notices not yet written to the store. */
  readonly inFlight: number;
  readonly events: Readonly<{ received: number; fired: number; duplicate: number; unknown: number }>;
  /** Durable store only: failed writes or reads of the store. */
  readonly storeErrors: number;
}

/**
 * Where an exchange hands its notices. The default (`NoticeHub`) calls them from this
 * process, from memory or through the durable queue; several exchange processes hand
 * theirs to one hub (the CLI's `--workers`).
 */
export interface NoticeOutlet {
  /** `memory`, or the durable store's URL (as configured). */
  readonly store: string;
  /** Opens the durable store and starts its delivery worker (no-op in memory). */
  open(): Promise<void>;
  /** Takes one notice; false when it was dropped (counted). */
  send(notice: Notice): boolean;
  /**
   * Resolves true once every notice taken so far is written to the durable store (at once
   * in memory); false when a write failed meanwhile (the notices wait and are tried again).
   */
  stored(): Promise<boolean>;
  keepBillable(billable: Billable): void;
  billingEvent(requestId: string, impId: string): BillingEventResult | Promise<BillingEventResult>;
  stats(): NoticeStats;
  /** Stops taking notices; writes (durable) or drains (memory, up to drainMs) what is pending. */
  close(options: { readonly drainMs: number; readonly force: boolean }): Promise<void>;
}

/**
 * What an outlet that hands its notices to a hub elsewhere asks of that hub: a worker
 * process of the primary's (IpcOutlet), the exchange's process of its notice thread
 * (NoticeThread). Notices and won impressions go in batches; billing events and
 * stored() are questions numbered by the asking side and answered in order with what
 * was handed over before them (one channel).
 */
export type OutletRequest =
  | { readonly t: 'notices'; readonly n: readonly Notice[]; readonly b: readonly Billable[] }
  | { readonly t: 'event'; readonly id: number; readonly requestId: string; readonly impId: string }
  | { readonly t: 'sync'; readonly id: number };

export type OutletReply =
  | { readonly t: 'event'; readonly id: number; readonly r: BillingEventResult }
  | { readonly t: 'sync'; readonly id: number; readonly ok: boolean };

/** The hub's side: serves one request with `hub`, answering questions through `reply`. */
export function serveOutletRequest(hub: NoticeOutlet, m: OutletRequest, reply: (r: OutletReply) => void): void {
  switch (m.t) {
    case 'notices':
      for (const b of m.b) hub.keepBillable(b);
      for (const n of m.n) hub.send(n);
      return;
    case 'event':
      void Promise.resolve(hub.billingEvent(m.requestId, m.impId)).then((r) => reply({ t: 'event', id: m.id, r }));
      return;
    case 'sync':
      void hub.stored().then((ok) => reply({ t: 'sync', id: m.id, ok }));
      return;
  }
}

/** The asking side's questions in flight: numbered, answered by id, or with their fallbacks once the hub is gone. */
export class OutletQuestions {
  private seq = 0;
  private readonly waiting = new Map<number, { readonly resolve: (r: never) => void; readonly fallback: unknown }>();

  /** Posts the question `msg(id)`; resolves with its answer, or with `fallback` once the hub is gone. */
  ask<T>(post: (m: OutletRequest) => void, msg: (id: number) => OutletRequest, fallback: T): Promise<T> {
    const id = ++this.seq;
    return new Promise<T>((resolve) => {
      this.waiting.set(id, { resolve: resolve as (r: never) => void, fallback });
      post(msg(id));
    });
  }

  answer(m: OutletReply): void {
    const w = this.waiting.get(m.id);
    this.waiting.delete(m.id);
    w?.resolve((m.t === 'event' ? m.r : m.ok) as never);
  }

  /** The hub is gone: every question gets its fallback. */
  abandon(): void {
    for (const w of this.waiting.values()) w.resolve(w.fallback as never);
    this.waiting.clear();
  }
}

/** The win-notice policy: the `background-full-jitter` preset, three calls within 10 s. Loss notices use it too. */
export const WIN_NOTICE_OVERRIDES: PolicySpec = Object.freeze({ maxAttempts: 3, deadlineMs: 10_000, attemptTimeoutMs: 2_000 });

/** The policy of each kind of notice: the presets with the configuration's overrides. */
export function noticePolicies(cfg: ResolvedNotices): Record<NoticeKind, Policy> {
  return {
    billing: withOverrides(presetPolicy('openrtb-billing-notice'), cfg.billingPolicy ?? {}),
    win: withOverrides(presetPolicy('background-full-jitter'), { ...WIN_NOTICE_OVERRIDES, ...(cfg.winPolicy ?? {}) }),
    loss: withOverrides(presetPolicy('background-full-jitter'), { ...WIN_NOTICE_OVERRIDES, ...(cfg.lossPolicy ?? {}) }),
  };
}

/**
 * The queue key of a notice: `<kind>:<request id>:<imp id>[:<bid id>]`, or a hash of it
 * when it is too long or holds control characters (ids come from the source and the
 * partner).
 */
export function noticeQueueKey(kind: NoticeKind, requestId: string, impId: string, bidId?: string): string {
  const raw = bidId === undefined ? `${kind}:${requestId}:${impId}` : `${kind}:${requestId}:${impId}:${bidId}`;
  // eslint-disable-next-line no-control-regex
  if (raw.length <= 200 && !/[\x00-\x1f\x7f]/.test(raw)) return raw;
  return `${kind}:sha256:${createHash('sha256').update(raw).digest('hex')}`;
}

/** The queue destination of a partner's notices of one kind. */
export function noticeDestination(partner: string, kind: NoticeKind): string {
  return `rtb:${partner}:${kind}`;
}

function newCounters(): NoticeCounters {
  return { sent: 0, stored: 0, delivered: 0, failed: 0, dropped: 0, abandoned: 0, attempts: 0 };
}

function httpUrl(url: string): URL | null {
  try {
    const u = new URL(url);
    if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.username !== '' || u.password !== '') return null;
    return u;
  } catch {
    return null;
  }
}

export interface NoticeHubOptions {
  readonly clock: Clock;
  readonly random: Random;
  /** The core's events of in-process notice calls (memory store). */
  readonly onEvent?: ((e: RelentEvent) => void) | undefined;
  /** The delivery worker's events (durable store). */
  readonly onDeliveryEvent?: ((e: DeliveryEvent) => void) | null;
  /** Notices' connections (default: an own keep-alive Agent). */
  readonly dispatcher?: Dispatcher | null;
  /** The partners (name and bid URL): one queue destination per partner and kind. */
  readonly partners: readonly { readonly name: string; readonly url: URL }[];
  /** Spans and metrics of notice calls (`relent.driver`: exchange.notice, or delivery through the durable queue). */
  readonly instrumentation?: Instrumentation | null;
}

/**
 * Calls an exchange's notices from this process: in memory (`NoticeSender`), or through
 * relent/delivery's durable queue (`DurableNotices`), and keeps the won impressions that
 * wait for a billing event.
 */
export class NoticeHub implements NoticeOutlet {
  readonly store: string;
  private readonly memory: NoticeSender | null;
  private readonly durable: DurableNotices | null;
  private readonly billables: TtlMap<Billable & { fired: boolean }> | null;
  private readonly events = { received: 0, fired: 0, duplicate: 0, unknown: 0 };

  constructor(private readonly cfg: ResolvedNotices, o: NoticeHubOptions) {
    this.store = cfg.store;
    const policies = noticePolicies(cfg);
    if (cfg.store === 'memory') {
      this.memory = new NoticeSender({
        maxPending: cfg.maxPending, policies, clock: o.clock, random: o.random, onEvent: o.onEvent, dispatcher: o.dispatcher ?? null,
        instrumentation: forDriver(o.instrumentation, 'exchange.notice'),
      });
      this.durable = null;
    } else {
      this.memory = null;
      this.durable = new DurableNotices(cfg, policies, o);
    }
    this.billables = cfg.billing === 'on-event' ? new TtlMap(cfg.eventMaxKeys, cfg.eventTtlMs, o.clock) : null;
  }

  open(): Promise<void> {
    return this.durable === null ? Promise.resolve() : this.durable.open();
  }

  send(n: Notice): boolean {
    return this.memory !== null ? this.memory.fire(n) : this.durable!.send(n);
  }

  stored(): Promise<boolean> {
    return this.durable === null ? Promise.resolve(true) : this.durable.stored();
  }

  keepBillable(b: Billable): void {
    this.billables?.set(billableKey(b.requestId, b.impId), { ...b, fired: false });
  }

  billingEvent(requestId: string, impId: string): BillingEventResult {
    this.events.received++;
    const b = this.billables?.get(billableKey(requestId, impId));
    if (b === undefined) {
      this.events.unknown++;
      return 'unknown';
    }
    if (b.fired) {
      this.events.duplicate++;
      return 'duplicate';
    }
    b.fired = true;
    this.events.fired++;
    this.send({
      kind: 'billing', partner: b.partner, key: noticeQueueKey('billing', requestId, impId),
      url: substituteMacros(b.burl, { ...b.values, impTs: Date.now() }),
    });
    return 'fired';
  }

  stats(): NoticeStats {
    const c = this.memory?.counters ?? this.durable!.counters;
    return {
      win: { ...c.win }, billing: { ...c.billing }, loss: { ...c.loss },
      inFlight: this.memory?.inFlight ?? this.durable!.pending,
      events: { ...this.events },
      storeErrors: this.durable?.storeErrors ?? 0,
    };
  }

  async close(o: { readonly drainMs: number; readonly force: boolean }): Promise<void> {
    if (this.memory !== null) await this.memory.close(o.force ? 0 : o.drainMs);
    else await this.durable!.close();
    this.billables?.clear();
  }
}

function billableKey(requestId: string, impId: string): string {
  return `${requestId}\u0000${impId}`;
}

/**
 * Fires notices in process, each through execute() with its preset: billing notices
 * with `openrtb-billing-notice` (anything but 200/204 retried every 10 s for a
 * minute; the receiver dedupes), win and loss notices with `background-full-jitter`
 * At most `maxPending` notices are in flight or waiting to retry; more are
 * dropped and counted (bounded memory). Lost when the process stops: the durable
 * store (`notices.store`) keeps them.
 */
export class NoticeSender {
  readonly counters: Record<NoticeKind, NoticeCounters> = { win: newCounters(), billing: newCounters(), loss: newCounters() };
  private readonly dispatcher: Dispatcher;
  private readonly own: boolean;
  private readonly abort = new AbortController();
  private pending = 0;
  private idle: (() => void)[] = [];
  private closing = false;

  constructor(private readonly o: {
    readonly maxPending: number;
    readonly policies: Record<NoticeKind, Policy>;
    readonly clock: Clock;
    readonly random: Random;
    readonly onEvent: ((e: RelentEvent) => void) | undefined;
    readonly dispatcher?: Dispatcher | null;
    readonly instrumentation?: Instrumentation | null;
  }) {
    this.own = !o.dispatcher;
    this.dispatcher = o.dispatcher ?? new (undici().Agent)({ connections: 32, keepAliveTimeout: 10_000 });
    setMaxListeners(0, this.abort.signal);
  }

  get inFlight(): number {
    return this.pending;
  }

  /** Starts one notice; false when it was dropped (too many pending, closing, or not an http(s) URL). */
  fire(n: Notice): boolean {
    const c = this.counters[n.kind];
    const u = httpUrl(n.url);
    if (u === null || this.closing || this.pending >= this.o.maxPending) {
      c.dropped++;
      return false;
    }
    c.sent++;
    this.pending++;
    const origin = u.origin;
    const path = `${u.pathname}${u.search}`;
    const dispatcher = this.dispatcher;
    const attempt = async (ctx: AttemptContext): Promise<{ status: number }> => {
      c.attempts++;
      const res = await dispatcher.request({
        origin, path, method: 'GET', signal: ctx.signal, headersTimeout: ctx.timeoutMs, bodyTimeout: ctx.timeoutMs,
      });
      try {
        await res.body.dump({ limit: 64 * 1024 });
      } catch {
        // the status is what counts
      }
      return { status: res.statusCode };
    };
    execute(attempt, {
      policy: this.o.policies[n.kind],
      operationId: `${n.kind}:${n.partner}:${n.key}`,
      method: 'GET',
      endpoint: normalizeUrlEndpoint(u),
      signal: this.abort.signal,
      clock: this.o.clock,
      random: this.o.random,
      onEvent: this.o.onEvent,
      instrumentation: this.o.instrumentation ?? null,
    }).then((r) => {
      if (r.reason === 'return') c.delivered++;
      else if (r.reason === 'cancelled') c.abandoned++;
      else c.failed++;
    }, () => {
      c.failed++;
    }).finally(() => {
      if (--this.pending === 0) {
        const waiters = this.idle;
        this.idle = [];
        for (const w of waiters) w();
      }
    });
    return true;
  }

  /**
   * Stops taking notices, waits up to `drainMs` for those pending (including their
   * retry waits), then cancels the rest (counted as abandoned) and closes the connections.
   */
  async close(drainMs: number): Promise<void> {
    this.closing = true;
    if (this.pending > 0 && drainMs > 0) {
      await new Promise<void>((resolve) => {
        const cancel = this.o.clock.setTimer(resolve, drainMs);
        this.idle.push(() => {
          cancel();
          resolve();
        });
      });
    }
    if (this.pending > 0) {
      this.abort.abort(new Error('relent: the exchange is closing'));
      await new Promise<void>((resolve) => {
        if (this.pending === 0) resolve();
        else this.idle.push(resolve);
      });
    }
    if (this.own) {
      const a = this.dispatcher as Agent;
      if (!a.closed && !a.destroyed) await a.destroy();
    }
  }
}

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
        origin: u.origin, path: `${u.pathname}${u.search}`, method: 'GET', signal: req.signal, headersTimeout: req.timeoutMs, bodyTimeout: req.timeoutMs,
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
    if (this.opening === null && !this.closing) this.open().catch(() => { this.storeErrors++; });
    if (this.closing || this.buffer.length >= this.cfg.maxPending || httpUrl(n.url) === null) {
      c.dropped++;
      return false;
    }
    c.sent++;
    this.buffer.push({ item: { destination: noticeDestination(n.partner, n.kind), key: n.key, payload: JSON.stringify({ url: n.url }) }, kind: n.kind, n: ++this.seq });
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
