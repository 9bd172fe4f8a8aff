import { setMaxListeners } from 'node:events';
import { Agent, type Dispatcher } from 'undici';
import type { Policy, PolicySpec } from '../core/policy.js';
import type { Clock, Random } from '../core/types.js';
import { normalizeEndpoint } from '../http/endpoint.js';
import { presetPolicy, withOverrides } from '../presets/index.js';
import { execute, type AttemptContext, type RelentEvent } from '../run/run.js';

/** Win notices (nurl) and billing notices (burl). */
export type NoticeKind = 'win' | 'billing';

export interface NoticeCounters {
  /** Notices started. */
  sent: number;
  /** Answered 200 or 204 (billing) / any 2xx (win). */
  delivered: number;
  /** Given up after the policy's attempts or deadline. */
  failed: number;
  /** Not sent: too many notices pending, or the exchange was closing. */
  dropped: number;
  /** Cancelled by a forced shutdown. */
  abandoned: number;
  attempts: number;
}

/** The win-notice policy: the `background-full-jitter` preset (R21), three calls within 10 s. */
export const WIN_NOTICE_OVERRIDES: PolicySpec = Object.freeze({ maxAttempts: 3, deadlineMs: 10_000, attemptTimeoutMs: 2_000 });

/**
 * Fires notices in process, each through execute() with its preset: billing notices
 * with `openrtb-billing-notice` (R22: anything but 200/204 retried every 10 s for a
 * minute; the receiver dedupes), win notices with `background-full-jitter` (R21).
 * At most `maxPending` notices are in flight or waiting to retry; more are dropped and
 * counted (bounded memory). The durable queue (relent/delivery) is the place for
 * notices that must survive a restart.
 */
export class NoticeSender {
  readonly counters: Record<NoticeKind, NoticeCounters> = { win: newCounters(), billing: newCounters() };
  private readonly dispatcher: Dispatcher;
  private readonly own: boolean;
  private readonly policies: Record<NoticeKind, Policy>;
  private readonly abort = new AbortController();
  private pending = 0;
  private idle: (() => void)[] = [];
  private seq = 0;
  private closing = false;

  constructor(private readonly o: {
    readonly maxPending: number;
    readonly billingPolicy: PolicySpec | null;
    readonly winPolicy: PolicySpec | null;
    readonly clock: Clock;
    readonly random: Random;
    readonly onEvent: ((e: RelentEvent) => void) | undefined;
    readonly dispatcher?: Dispatcher | null;
  }) {
    this.own = !o.dispatcher;
    this.dispatcher = o.dispatcher ?? new Agent({ connections: 32, keepAliveTimeout: 10_000 });
    this.policies = {
      billing: withOverrides(presetPolicy('openrtb-billing-notice'), o.billingPolicy ?? {}),
      win: withOverrides(presetPolicy('background-full-jitter'), { ...WIN_NOTICE_OVERRIDES, ...(o.winPolicy ?? {}) }),
    };
    setMaxListeners(0, this.abort.signal);
  }

  get inFlight(): number {
    return this.pending;
  }

  /** Starts one notice; false when it was dropped (too many pending, closing, or not an http(s) URL). */
  fire(kind: NoticeKind, url: string, operationId?: string): boolean {
    const c = this.counters[kind];
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      c.dropped++;
      return false;
    }
    if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.username !== '' || u.password !== '') {
      c.dropped++;
      return false;
    }
    if (this.closing || this.pending >= this.o.maxPending) {
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
      policy: this.policies[kind],
      operationId: operationId ?? `notice-${kind}-${++this.seq}`,
      method: 'GET',
      endpoint: normalizeEndpoint(u),
      signal: this.abort.signal,
      clock: this.o.clock,
      random: this.o.random,
      onEvent: this.o.onEvent,
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

function newCounters(): NoticeCounters {
  return { sent: 0, delivered: 0, failed: 0, dropped: 0, abandoned: 0, attempts: 0 };
}
