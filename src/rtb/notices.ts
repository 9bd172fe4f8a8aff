// Where an exchange's notices go: NoticeHub calls them from this process, in memory
// (notice-sender.ts) or through the durable queue (notice-durable.ts), and keeps the won
// impressions that wait for a billing event; an outlet elsewhere (a worker process, the
// notice thread) hands its notices to a hub with the requests below. What a notice is,
// and its keys, URLs and policies: notice-model.ts.
import { forDriver } from '../run/instrument.js';
import type { ResolvedNotices } from './config-schema.js';
import { substituteMacros } from './macros.js';
import { DurableNotices } from './notice-durable.js';
import {
  noticePolicies,
  noticeQueueKey,
  type Billable,
  type BillingEventResult,
  type Notice,
  type NoticeHubOptions,
  type NoticeOutlet,
  type NoticeStats,
} from './notice-model.js';
import { NoticeSender } from './notice-sender.js';
import { TtlMap } from './ttl-map.js';

export { NOTICE_KINDS, WIN_NOTICE_OVERRIDES, noticePolicies, noticeQueueKey, noticeDestination } from './notice-model.js';
export type { NoticeKind, Notice, Billable, BillingEventResult, NoticeCounters, NoticeStats, NoticeOutlet, NoticeHubOptions } from './notice-model.js';
export { NoticeSender } from './notice-sender.js';
export { DurableNotices, NOTICE_GROUP_MS, NOTICE_GROUP_MAX, NOTICE_WORKER_DEFAULTS } from './notice-durable.js';

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
  { readonly t: 'event'; readonly id: number; readonly r: BillingEventResult } | { readonly t: 'sync'; readonly id: number; readonly ok: boolean };

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

  constructor(
    private readonly cfg: ResolvedNotices,
    o: NoticeHubOptions,
  ) {
    this.store = cfg.store;
    const policies = noticePolicies(cfg);
    if (cfg.store === 'memory') {
      this.memory = new NoticeSender({
        maxPending: cfg.maxPending,
        policies,
        clock: o.clock,
        random: o.random,
        onEvent: o.onEvent,
        dispatcher: o.dispatcher ?? null,
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
      kind: 'billing',
      partner: b.partner,
      key: noticeQueueKey('billing', requestId, impId),
      url: substituteMacros(b.burl, { ...b.values, impTs: Date.now() }),
    });
    return 'fired';
  }

  stats(): NoticeStats {
    const c = this.memory?.counters ?? this.durable!.counters;
    return {
      win: { ...c.win },
      billing: { ...c.billing },
      loss: { ...c.loss },
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
