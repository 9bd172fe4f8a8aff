// Notices called in memory from this process (NoticeSender): each through execute() with
// its kind's policy, at most `maxPending` at once, drained or cancelled at shutdown.
import { setMaxListeners } from 'node:events';
import type { Agent, Dispatcher } from 'undici';
import { undici } from '../shared/undici.js';
import type { Policy } from '../core/policy.js';
import type { Clock, Random } from '../core/types.js';
import { normalizeUrlEndpoint } from '../core/endpoint.js';
import { execute, type AttemptContext, type Instrumentation, type RelentEvent } from '../run/run.js';
import { httpUrl, newCounters, type Notice, type NoticeCounters, type NoticeKind } from './notice-model.js';

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

  constructor(
    private readonly o: {
      readonly maxPending: number;
      readonly policies: Record<NoticeKind, Policy>;
      readonly clock: Clock;
      readonly random: Random;
      readonly onEvent: ((e: RelentEvent) => void) | undefined;
      readonly dispatcher?: Dispatcher | null;
      readonly instrumentation?: Instrumentation | null;
    },
  ) {
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
        origin,
        path,
        method: 'GET',
        signal: ctx.signal,
        headersTimeout: ctx.timeoutMs,
        bodyTimeout: ctx.timeoutMs,
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
    })
      .then(
        (r) => {
          if (r.reason === 'return') c.delivered++;
          else if (r.reason === 'cancelled') c.abandoned++;
          else c.failed++;
        },
        () => {
          c.failed++;
        },
      )
      .finally(() => {
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
