// What a notice is: its kinds, the notice and the won impression that waits for a billing
// event, the counters and statistics, the outlet an exchange hands notices to, and the
// rules every outlet shares — the queue key and destination of a notice, its URL check
// and each kind's policy. How notices are called: notice-sender.ts (in memory),
// notice-durable.ts (through the durable queue), notices.ts (the hub choosing one).
import { createHash } from 'node:crypto';
import type { Dispatcher } from 'undici';
import type { Policy, PolicySpec } from '../core/policy.js';
import type { Clock, Random } from '../core/types.js';
import type { DeliveryEvent } from '../delivery/index.js';
import { presetPolicy, withOverrides } from '../presets/index.js';
import type { Instrumentation, RelentEvent } from '../run/run.js';
import type { ResolvedNotices } from './config-schema.js';
import type { MacroValues } from './macros.js';

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

export function newCounters(): NoticeCounters {
  return { sent: 0, stored: 0, delivered: 0, failed: 0, dropped: 0, abandoned: 0, attempts: 0 };
}

/** `url` parsed when it is an http(s) URL without credentials, else null (such a notice is dropped). */
export function httpUrl(url: string): URL | null {
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
