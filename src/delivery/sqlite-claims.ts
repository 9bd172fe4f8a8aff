// The SQLite store's writes on the way out: enqueue, seal pending items into batches,
// lease them (alone, or within limits shared through the store), renew, release.
// Each function runs on the store's thread; the store wraps it (closed store, errors).
import { cutBatches, type PendingRow } from './batching.js';
import type { SqliteCx } from './sqlite-statements.js';
import { toClaimed, type BatchRow } from './store-common.js';
import type {
  BatchLimits,
  ClaimedBatch,
  ClaimThenFormResult,
  EnqueueResult,
  FormAndClaimResult,
  FormResult,
  Lease,
  LimitedClaim,
  NewItem,
  SharedLimits,
} from './types.js';

export const NOTHING_PENDING: FormResult = Object.freeze({ formed: 0, nextAt: null });

type ItemRow = { batch_id: number; key: string; payload: string };

export function enqueue(x: SqliteCx, list: readonly NewItem[], now: number): EnqueueResult[] {
  return x.db
    .transaction(() => {
      const out: EnqueueResult[] = [];
      const fresh = new Map<string, number>();
      for (const it of list) {
        const row = x.s.insertItem.get(it.destination, it.key, it.payload, Buffer.byteLength(it.payload), now) as { id: number } | undefined;
        if (row) {
          out.push({ id: row.id, key: it.key, duplicate: false });
          fresh.set(it.destination, (fresh.get(it.destination) ?? 0) + 1);
        } else out.push({ id: (x.s.findItem.get(it.destination, it.key) as { id: number }).id, key: it.key, duplicate: true });
      }
      for (const [d, n] of fresh) x.s.count.run(d, 'pending', 0, n);
      return out;
    })
    .immediate();
}

export function formBatches(x: SqliteCx, destination: string, limits: BatchLimits, now: number, maxBatches: number): FormResult {
  // A read first, without the write lock: most cycles find nothing to aggregate.
  if (x.s.anyPending.get(destination) === undefined) return NOTHING_PENDING;
  return x.db
    .transaction(() => {
      const limit = Math.max(1, maxBatches * limits.maxItems);
      const rows = x.s.pending.all(destination, limit) as PendingRow[];
      if (rows.length === 0) return NOTHING_PENDING;
      const { cuts, nextAt } = cutBatches(destination, rows, limits, now, maxBatches, rows.length < limit);
      const pairs: [number, number][] = [];
      for (const cut of cuts) {
        const { id } = x.s.insertBatch.get(destination, cut.key, cut.rows.length, cut.bytes, now, now, now, cut.rows[0]!.enqueuedAt) as { id: number };
        for (const r of cut.rows) pairs.push([r.id, id]);
      }
      if (pairs.length > 0) {
        x.s.setBatch.run(JSON.stringify(pairs));
        x.s.count.run(destination, 'pending', 0, -pairs.length);
        x.s.count.run(destination, 'queued', cuts.length, pairs.length);
      }
      return { formed: cuts.length, nextAt };
    })
    .immediate();
}

export function formAndClaim(
  x: SqliteCx,
  destination: string,
  limits: BatchLimits,
  now: number,
  maxBatches: number,
  leaseMs: number,
  owner: string,
): FormAndClaimResult {
  if (x.s.anyPending.get(destination) === undefined) return { claimed: [], nextAt: null };
  return x.db.transaction(() => formAndClaimLocked(x, destination, limits, now, maxBatches, leaseMs, owner)).immediate();
}

export function claimThenForm(
  x: SqliteCx,
  destination: string,
  limits: BatchLimits,
  now: number,
  want: number,
  leaseMs: number,
  owner: string,
): ClaimThenFormResult {
  // Reads first, without the write lock: a write transaction only when there is something to lease.
  const anyDue = x.s.anyDue.get(destination, now) !== undefined;
  const anyPending = x.s.anyPending.get(destination) !== undefined;
  if (!anyDue && !anyPending) return { claimed: [], due: 0, formed: true, nextAt: null };
  return x.db
    .transaction((): ClaimThenFormResult => {
      const due = anyDue ? claimLocked(x, destination, want, now, leaseMs, owner) : [];
      if (due.length >= want) return { claimed: due, due: due.length, formed: false, nextAt: null };
      const r = anyPending ? formAndClaimLocked(x, destination, limits, now, want - due.length, leaseMs, owner) : { claimed: [], nextAt: null };
      return { claimed: due.length === 0 ? r.claimed : due.concat(r.claimed), due: due.length, formed: true, nextAt: r.nextAt };
    })
    .immediate();
}

/** Seals up to `maxBatches` batches of pending items, born leased to `owner` (inside a write transaction). */
function formAndClaimLocked(
  x: SqliteCx,
  destination: string,
  limits: BatchLimits,
  now: number,
  maxBatches: number,
  leaseMs: number,
  owner: string,
): FormAndClaimResult {
  const p = x.s.paused.get(destination) as { paused_at: number | null } | undefined;
  if (p && p.paused_at !== null) return { claimed: [], nextAt: null };
  const limit = Math.max(1, maxBatches * limits.maxItems);
  const rows = x.s.pendingPayload.all(destination, limit) as (PendingRow & { payload: string })[];
  if (rows.length === 0) return { claimed: [], nextAt: null };
  const { cuts, nextAt } = cutBatches(destination, rows, limits, now, maxBatches, rows.length < limit);
  const until = now + leaseMs;
  const pairs: [number, number][] = [];
  const claimed: ClaimedBatch[] = [];
  for (const cut of cuts) {
    const { id } = x.s.insertLeased.get(destination, cut.key, cut.rows.length, cut.bytes, now, now, until, cut.rows[0]!.enqueuedAt, owner, until) as {
      id: number;
    };
    for (const r of cut.rows) pairs.push([r.id, id]);
    claimed.push({
      id,
      token: 1,
      destination,
      key: cut.key,
      round: 1,
      attempt: 0,
      opStartedAt: null,
      opDeadlineAt: null,
      prevDelayMs: null,
      opThrottled: 0,
      createdAt: now,
      notBefore: now,
      bytes: cut.bytes,
      items: cut.rows.map((r) => ({ key: r.key, payload: (r as PendingRow & { payload: string }).payload })),
    });
  }
  if (pairs.length > 0) {
    x.s.setBatch.run(JSON.stringify(pairs));
    x.s.count.run(destination, 'pending', 0, -pairs.length);
    x.s.count.run(destination, 'queued', cuts.length, pairs.length);
  }
  return { claimed, nextAt };
}

export function claim(x: SqliteCx, destination: string, limit: number, now: number, leaseMs: number, owner: string): ClaimedBatch[] {
  // A read first, without the write lock: most looks for due batches (retries, expired
  // leases) find none, and then no write transaction is begun.
  if (x.s.anyDue.get(destination, now) === undefined) return [];
  return x.db.transaction(() => claimLocked(x, destination, limit, now, leaseMs, owner)).immediate();
}

function claimLocked(x: SqliteCx, destination: string, limit: number, now: number, leaseMs: number, owner: string): ClaimedBatch[] {
  const until = now + leaseMs;
  const rows = x.s.lease.all({ owner, until, d: destination, now, limit }) as BatchRow[];
  if (rows.length === 0) return [];
  return toClaimed(rows, x.s.batchItems.all(JSON.stringify(rows.map((r) => r.id))) as ItemRow[]);
}

export function reclaim(x: SqliteCx, destination: string, owner: string, known: readonly Lease[], now: number, leaseMs: number): ClaimedBatch[] {
  const { batches } = x.t;
  return x.db
    .transaction(() => {
      const rows = x.db
        .prepare(
          `UPDATE ${batches} SET lease_until = @until, due_at = @until
      WHERE state = 'queued' AND destination = @d AND lease_owner = @owner AND lease_until > @now
        AND NOT EXISTS (SELECT 1 FROM json_each(@known) k WHERE json_extract(k.value, '$[0]') = ${batches}.id AND json_extract(k.value, '$[1]') = ${batches}.lease_token)
      RETURNING *`,
        )
        .all({ until: now + leaseMs, d: destination, owner, now, known: JSON.stringify(known.map((l) => [l.id, l.token])) }) as BatchRow[];
      if (rows.length === 0) return [];
      return toClaimed(rows, x.s.batchItems.all(JSON.stringify(rows.map((r) => r.id))) as ItemRow[]);
    })
    .immediate();
}

/** One write transaction: every process's claims of the database are serialised by SQLite's lock. */
export function claimLimited(x: SqliteCx, destination: string, want: number, limits: SharedLimits, now: number, leaseMs: number, owner: string): LimitedClaim {
  return x.db
    .transaction((): LimitedClaim => {
      const p = x.s.paused.get(destination) as { paused_at: number | null } | undefined;
      if (p && p.paused_at !== null) return { claimed: [], retryAt: null, permit: null };
      let allowed = want;
      if (limits.concurrency !== null) allowed = Math.min(allowed, limits.concurrency - (x.s.leased.get(destination, now) as { n: number }).n);
      const rate = limits.rate;
      let used = 0;
      const since = rate === null ? 0 : now - rate.perMs;
      if (rate !== null) {
        x.s.rateGone.run(destination, since);
        used = (x.s.rateUsed.get(destination, since) as { used: number }).used;
        allowed = Math.min(allowed, rate.requests - used);
      }
      const claimed = allowed > 0 ? claimLocked(x, destination, allowed, now, leaseMs, owner) : [];
      if (rate === null) return { claimed, retryAt: null, permit: null };
      let retryAt: number | null = null;
      if (used + claimed.length >= rate.requests) {
        // The window is full: one more fits when enough of its entries have aged out (this claim's own last).
        let need = used + claimed.length - rate.requests + 1;
        retryAt = now + leaseMs + rate.perMs;
        for (const r of x.s.rateLog.iterate(destination, since) as Iterable<{ end_at: number; n: number }>) {
          need -= r.n;
          if (need <= 0) {
            retryAt = r.end_at + rate.perMs;
            break;
          }
        }
      }
      const permit = claimed.length > 0 ? (x.s.rateTake.get(destination, now, claimed.length, now + leaseMs) as { id: number }).id : null;
      return { claimed, retryAt, permit };
    })
    .immediate();
}

export function endPermit(x: SqliteCx, permit: number, at: number): void {
  x.s.rateEnd.run(at, permit);
}

export function renew(x: SqliteCx, leases: readonly Lease[], now: number, leaseMs: number): number[] {
  return x.db
    .transaction(() => {
      const until = now + leaseMs;
      const lost: number[] = [];
      for (const l of leases) if (x.s.renew.run(until, until, l.id, l.token).changes === 0) lost.push(l.id);
      return lost;
    })
    .immediate();
}

export function release(x: SqliteCx, leases: readonly Lease[]): number {
  return x.db
    .transaction(() => {
      let n = 0;
      for (const l of leases) n += x.s.release.run(l.id, l.token).changes;
      return n;
    })
    .immediate();
}
