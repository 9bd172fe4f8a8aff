// A worker's delivery of one claimed batch: the core's operation resumed from the batch's
// stored state, one attempt (a request, or the policy's injected chaos), the core's
// decision, its event, and the outcome handed to the outcome writer.
import { createOperation, restoreOperation, type CallCommand, type Command, type Operation } from '../core/operation.js';
import { errorClassOfCode } from '../core/error-codes.js';
import { injectedObservation, type ChaosInjection } from '../core/chaos.js';
import { appendPropagation } from '../core/propagation.js';
import type { Decision, DecisionResult, DecisionWhy, ErrorClass, Observation, TerminalReason } from '../core/types.js';
import { classifyWireError } from '../core/wire.js';
import type { AttemptScope, OperationScope } from '../run/run.js';
import { formatIdempotencyKey } from '../shared/idempotency.js';
import { encodeBatch } from './batching.js';
import { DeliveryError } from './errors.js';
import { cancelledAttemptEvent, deliveryAttemptEvent, deliveryRequestId, type AttemptWho, type BatchRef } from './events.js';
import type { DeliveryRequest, TransportResult } from './transport.js';
import type { AttemptRecord, ClaimedBatch } from './types.js';
import { shed } from './worker-shed.js';
import type { Dest, Held, WorkerCore } from './worker-state.js';

const CONNECT_PHASE: ReadonlySet<ErrorClass> = new Set(['connect_refused', 'dns', 'connect_timeout', 'tls']);

/**
 * Turns what a transport threw into an observation. The class comes from the error's
 * code (src/core/wire.ts's table); undici's `request` does not say whether request
 * bytes were written, so failures of the connect phase (refused, DNS, connect timeout,
 * TLS) count as not sent and everything else as unknown. Every batch carries an
 * idempotency key, so the decision does not depend on it.
 */
export function classifyThrown(error: unknown): { errorClass: ErrorClass; sent: 'not_sent' | 'unknown' } {
  const cls = errorClassOfCode(error);
  const wire = classifyWireError(error, cls !== null && CONNECT_PHASE.has(cls) ? 'before_request' : 'after_request');
  return { errorClass: wire.errorClass, sent: wire.sent === 'not_sent' ? 'not_sent' : 'unknown' };
}

/** The endpoint of a destination as its events and spans name it: scheme, host (the port unless the scheme's default) and path. */
function endpointOf(url: URL): string {
  return `${url.protocol}//${url.host}${url.pathname}`;
}

/** This delivery of a batch as one operation span (ended once, whatever happens). */
interface Span {
  readonly operationId: string;
  scope: OperationScope | null;
  attempts: number;
}

const TIMED_OUT: TransportResult = Object.freeze({ errorClass: 'timeout', sent: 'unknown' });

export class BatchDelivery {
  /** Attempt deadlines (monotonic), swept by one timer instead of a timer per request. */
  private readonly deadlines = new Map<Held, number>();
  private cancelSweep: (() => void) | null = null;
  private sweepAt = Number.POSITIVE_INFINITY;

  constructor(private readonly w: WorkerCore) {}

  /** The worker has stopped: no attempt is watched any more. */
  clear(): void {
    this.deadlines.clear();
    this.cancelSweep?.();
    this.cancelSweep = null;
    this.sweepAt = Number.POSITIVE_INFINITY;
  }

  /**
   * The core's operation of a claimed batch and its first command at `now`: a new
   * operation on its first attempt (of a round), else the stored one, whose wait is over.
   */
  private operationOf(dest: Dest, b: ClaimedBatch, now: number): { op: Operation; cmd: Command } {
    const d = dest.d;
    const o = { method: d.method, idempotencyKey: b.key, budget: dest.budget, random: this.w.random, durable: true };
    if (b.attempt === 0 || b.opStartedAt === null || b.opDeadlineAt === null) {
      const op = createOperation(d.policy, o);
      return { op, cmd: op.start(now) };
    }
    const op = restoreOperation(
      d.policy,
      {
        attempt: b.attempt,
        startedAt: b.opStartedAt,
        deadlineAt: b.opDeadlineAt,
        prevDelayMs: b.prevDelayMs,
        throttled: b.opThrottled,
      },
      o,
    );
    return { op, cmd: op.timerFired(now) };
  }

  /** Delivers a held batch: one attempt, its decision written as the batch's outcome. */
  async deliver(dest: Dest, b: ClaimedBatch, h: Held): Promise<void> {
    const w = this.w;
    const d = dest.d;
    h.started = true;
    dest.inflight++;
    const ref: BatchRef = { destination: d.name, batchId: b.id, key: b.key, items: b.items.length };
    const span: Span = { operationId: b.key, scope: null, attempts: 0 };
    try {
      const startWall = w.clock.wallNow();
      const { op, cmd } = this.operationOf(dest, b, startWall);
      span.attempts = op.attempt;
      if (w.instrumentation !== null) {
        span.scope = w.instrumentation.operation({
          operationId: b.key,
          method: d.method,
          endpoint: endpointOf(d.url),
          driver: 'delivery',
          attributes: {
            'relent.delivery.destination': d.name,
            'relent.delivery.batch_id': b.id,
            'relent.delivery.items': b.items.length,
            'relent.delivery.round': b.round,
          },
        });
      }
      if (cmd.kind === 'end') {
        this.endSpan(span, cmd.reason, null, null);
        // The operation's deadline passed while the batch waited: no call; kept as dropped.
        const why = cmd.why ?? 'deadline_spent';
        w.outcomes.settle(h, {
          id: b.id,
          token: b.token,
          opStartedAt: op.startedAt,
          opDeadlineAt: op.deadlineAt,
          state: 'dropped',
          notBefore: b.notBefore,
          attempt: op.attempt,
          prevDelayMs: op.prevDelayMs,
          opThrottled: op.throttled ?? 0,
          lastStatus: null,
          lastErrorClass: null,
          lastDecision: cmd.reason,
          lastWhy: why,
          finishedAt: startWall,
          record: null,
        });
        this.countDrop(ref, cmd.reason, why, null, null, op.attempt);
        return;
      }
      // (A durable operation never waits for a budget or checks state before a call.)
      if (cmd.kind !== 'call') throw new DeliveryError('ERR_STORE', `internal: a ${cmd.kind} before a call`);
      await this.attempt(dest, b, h, ref, op, cmd, span);
    } catch (e) {
      // Not expected (encoding, a throwing onEvent): the claim is left to expire, so the batch comes back.
      w.storeError(`delivering batch ${b.id}`, e);
    } finally {
      this.endSpan(span, 'cancelled', null, null); // stopped meanwhile, the lease lost, or an unexpected error
      dest.inflight--;
      dest.done++;
      if (h.permit) w.loop.permitUsed(dest, h.permit);
      w.notifyIdle();
      w.loop.pump(dest);
    }
  }

  private endSpan(span: Span, reason: TerminalReason, status: number | null, errorClass: ErrorClass | null): void {
    if (span.scope === null) return;
    span.scope.end({
      type: 'result',
      operationId: span.operationId,
      status,
      errorClass,
      reason,
      attempts: span.attempts,
      ts: Math.round(this.w.clock.wallNow()),
    });
    span.scope = null;
  }

  /** The call of `cmd`: the request (or the injected answer), its observation, the core's decision, the batch's outcome. */
  private async attempt(dest: Dest, b: ClaimedBatch, h: Held, ref: BatchRef, op: Operation, cmd: CallCommand, span: Span): Promise<void> {
    const w = this.w;
    const d = dest.d;
    const attempt = cmd.attempt;
    span.attempts = attempt;
    const remainingMs = cmd.remainingMs;
    const timeoutMs = Math.max(1, cmd.timeoutMs);
    const inject = cmd.inject;
    const who: AttemptWho = { ref, round: b.round, attempt, method: d.method, endpoint: endpointOf(d.url) };
    const requestId = deliveryRequestId(b.key, b.round, attempt);
    const req = this.request(dest, b, h, attempt, requestId, timeoutMs);
    const generation = dest.aimd.generation;
    const t0 = w.clock.now();
    this.watch(h, t0 + timeoutMs);
    const aScope = span.scope === null ? null : span.scope.attempt(attempt, { requestId, remainingMs, timeoutMs });
    let result = await this.send(h, req, inject, aScope);
    if (h.abandoned || w.held.get(b.id) !== h) {
      // Stopped meanwhile, or the lease was lost: nothing is recorded; the span says so.
      aScope?.end(cancelledAttemptEvent(who, Math.max(0, Math.round(w.clock.now() - t0)), remainingMs, w.clock.wallNow()));
      return;
    }
    const elapsedMs = Math.max(0, Math.round(w.clock.now() - t0));
    if (h.timedOut && !('status' in result)) result = TIMED_OUT;
    const obs: Observation =
      'status' in result
        ? { status: result.status, ...(result.headers ? { headers: result.headers } : {}), elapsedMs }
        : { errorClass: result.errorClass, ...(result.sent ? { sent: result.sent } : {}), elapsedMs };
    const now = w.clock.wallNow();
    const next = op.answered(obs, now, now);
    const res: DecisionResult = op.decision!;
    w.c.attempts++;
    const status = obs.status ?? null;
    const errorClass = obs.errorClass ?? null;
    const ev = deliveryAttemptEvent(who, obs, remainingMs, res, now, inject !== undefined ? inject.kind : null);
    aScope?.end(ev);
    // A retry the queue stores is, for this process, a deferral.
    this.endSpan(span, res.decision === 'retry' ? 'defer' : (res.decision as TerminalReason), status, errorClass);
    w.emit(ev);
    shed(w, dest, status, res, generation, t0, now);
    this.record(dest, b, h, ref, op, next, res, { attempt, status, errorClass, elapsedMs, now });
  }

  /** The request of one attempt: the encoded batch, its idempotency key and request id, propagated deadline headers. */
  private request(dest: Dest, b: ClaimedBatch, h: Held, attempt: number, requestId: string, timeoutMs: number): DeliveryRequest {
    const d = dest.d;
    const { body, contentType } = encodeBatch(d.format, b.key, b.items);
    const headers: Record<string, string> = {
      ...d.headers,
      'content-type': contentType,
      'idempotency-key': formatIdempotencyKey(b.key),
      'x-request-id': requestId,
    };
    if (d.propagate.names.length > 0) {
      const pairs = appendPropagation([], d.propagate, attempt, timeoutMs);
      for (let i = 0; i < pairs.length; i += 2) headers[pairs[i]!] = pairs[i + 1]!;
    }
    return { destination: d, url: d.url, method: d.method, headers, body, batchKey: b.key, attempt, items: b.items, signal: h.abort.signal, timeoutMs };
  }

  /** Sends the request (after an injected latency), or answers with the injected fault or outcome without sending. */
  private async send(h: Held, req: DeliveryRequest, inject: ChaosInjection | undefined, aScope: AttemptScope | null): Promise<TransportResult> {
    const transport = this.w.transport;
    try {
      if (inject !== undefined && inject.kind !== 'latency') {
        // Chaos: the injected fault or outcome is the attempt's answer; nothing is sent.
        const o = injectedObservation(inject);
        return o.status !== null && o.status !== undefined
          ? o.headers
            ? { status: o.status, headers: o.headers }
            : { status: o.status }
          : { errorClass: o.errorClass!, sent: o.sent! };
      }
      // Chaos: a latency delays the send within the attempt's time (its timeout cuts the wait too).
      if (inject !== undefined) await this.injectedDelay(h, inject.delayMs);
      return h.timedOut ? TIMED_OUT : await (aScope !== null ? aScope.run(transport, req) : transport(req));
    } catch (e) {
      return h.timedOut ? TIMED_OUT : classifyThrown(e);
    } finally {
      this.deadlines.delete(h);
    }
  }

  /** The core decided: the batch is delivered, deferred (the core's wait, stored) or dropped. */
  private record(
    dest: Dest,
    b: ClaimedBatch,
    h: Held,
    ref: BatchRef,
    op: Operation,
    next: Command,
    res: DecisionResult,
    a: { readonly attempt: number; readonly status: number | null; readonly errorClass: ErrorClass | null; readonly elapsedMs: number; readonly now: number },
  ): void {
    const w = this.w;
    const { attempt, status, errorClass, now } = a;
    const whole = (v: number | null): number | null => (v === null ? null : Math.round(v));
    const record: AttemptRecord = {
      round: b.round,
      attempt,
      at: Math.round(now),
      status,
      errorClass,
      elapsedMs: a.elapsedMs,
      decision: res.decision,
      why: res.why,
      delayMs: whole(res.delayMs),
      retryAfterMs: whole(res.retryAfterMs),
      worker: w.id,
    };
    const base = { id: b.id, token: b.token, opStartedAt: op.startedAt, opDeadlineAt: op.deadlineAt };
    const last = { lastStatus: status, lastErrorClass: errorClass, lastDecision: res.decision, lastWhy: res.why, record };
    if (next.kind === 'end' && next.reason === 'return') {
      w.outcomes.settle(h, {
        ...base,
        ...last,
        state: 'delivered',
        notBefore: b.notBefore,
        attempt,
        prevDelayMs: op.prevDelayMs,
        opThrottled: op.throttled ?? 0,
        finishedAt: now,
      });
      w.c.deliveredBatches++;
      w.c.deliveredItems += b.items.length;
      w.emit({ type: 'delivered', ...ref, attempts: attempt, ts: Math.round(now) });
    } else if (next.kind === 'wait') {
      // The core chose the wait; the queue only stores it (seconds to hours), with the
      // operation's snapshot (a 429 that did not count is remembered).
      const snap = op.snapshot();
      const notBefore = Math.round(now + next.delayMs);
      w.outcomes.settle(h, {
        ...base,
        ...last,
        state: 'queued',
        notBefore,
        attempt: snap.attempt,
        prevDelayMs: snap.prevDelayMs,
        opThrottled: snap.throttled,
        finishedAt: null,
      });
      w.c.deferredBatches++;
      w.emit({ type: 'deferred', ...ref, notBefore, delayMs: next.delayMs, ts: Math.round(now) });
      w.loop.wakeAt(dest, notBefore);
    } else {
      w.outcomes.settle(h, {
        ...base,
        ...last,
        state: 'dropped',
        notBefore: b.notBefore,
        attempt,
        prevDelayMs: op.prevDelayMs,
        opThrottled: op.throttled ?? 0,
        finishedAt: now,
      });
      this.countDrop(ref, res.decision, res.why, status, errorClass, attempt);
    }
  }

  private countDrop(ref: BatchRef, reason: Decision, why: DecisionWhy | null, status: number | null, errorClass: ErrorClass | null, attempts: number): void {
    this.w.c.droppedBatches++;
    this.w.c.droppedItems += ref.items;
    this.w.emit({ type: 'dropped', ...ref, reason, why, status, errorClass, attempts, ts: Math.round(this.w.clock.wallNow()) });
  }

  /** An injected latency: waits `ms`, or less when the attempt is aborted meanwhile (its timeout, a stop). */
  private injectedDelay(h: Held, ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (h.abort.signal.aborted) return resolve();
      const done = (): void => {
        cancel();
        h.abort.signal.removeEventListener('abort', done);
        resolve();
      };
      const cancel = this.w.clock.setTimer(done, ms);
      h.abort.signal.addEventListener('abort', done);
    });
  }

  /** Aborts the attempt of `h` at `due` (monotonic ms). */
  private watch(h: Held, due: number): void {
    this.deadlines.set(h, due);
    if (due < this.sweepAt) this.armSweep(due);
  }

  private armSweep(due: number): void {
    this.cancelSweep?.();
    this.sweepAt = due;
    this.cancelSweep = this.w.clock.setTimer(
      () => {
        this.cancelSweep = null;
        this.sweepAt = Number.POSITIVE_INFINITY;
        const now = this.w.clock.now();
        let next = Number.POSITIVE_INFINITY;
        for (const [held, at] of this.deadlines) {
          if (at <= now) {
            this.deadlines.delete(held);
            held.timedOut = true;
            held.abort.abort(new Error('relent: attempt timeout'));
          } else if (at < next) next = at;
        }
        if (next !== Number.POSITIVE_INFINITY) this.armSweep(next);
      },
      Math.max(0, due - this.w.clock.now()),
    );
  }
}
