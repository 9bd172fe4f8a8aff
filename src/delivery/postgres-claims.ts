// The PostgreSQL store's writes on the way out: enqueue, seal pending items into batches,
// lease them (alone, or within limits shared through the store), renew, release. Claims use
// FOR UPDATE SKIP LOCKED; every lease carries a fencing token.
import { cutBatches, type PendingRow } from './batching.js';
import { counted, type PgCx, type PgTables } from './postgres-schema.js';
import { toClaimed, type BatchRow } from './store-common.js';
import type { BatchLimits, ClaimedBatch, EnqueueResult, FormAndClaimResult, FormResult, Lease, LimitedClaim, NewItem, SharedLimits } from './types.js';

/** One statement claims and reads the items: due batches of a destination that is not paused, oldest due first. */
export function claimStatement(t: PgTables): string {
  return `
    WITH c AS (
      SELECT id FROM ${t.batches}
      WHERE state = 'queued' AND destination = $1 AND due_at <= $2
        AND NOT EXISTS (SELECT 1 FROM ${t.dests} p WHERE p.destination = $1 AND p.paused_at IS NOT NULL)
      ORDER BY due_at, id LIMIT $3 FOR UPDATE SKIP LOCKED
    ), u AS (
      UPDATE ${t.batches} b SET lease_token = b.lease_token + 1, lease_owner = $4, lease_until = $5, due_at = $5, claims = b.claims + 1
      FROM c WHERE b.id = c.id
      RETURNING b.id, b.destination, b.key, b.lease_token, b.round, b.attempt, b.op_started_at, b.op_deadline_at, b.prev_delay_ms, b.op_throttled,
        b.created_at, b.not_before, b.bytes, b.due_at
    )
    SELECT u.*, i.key AS item_key, i.payload AS item_payload FROM u JOIN ${t.items} i ON i.batch_id = u.id ORDER BY u.id, i.id`;
}

/** A claimed batch row joined with one of its items (the claim reads both in one statement). */
type ClaimRow = BatchRow & { item_key: string; item_payload: string };

/** Splits claim rows (one per item) into batch rows and item rows for toClaimed(). */
function splitClaimRows(rows: readonly ClaimRow[]): { batches: BatchRow[]; items: { batch_id: number; key: string; payload: string }[] } {
  const batches: BatchRow[] = [];
  const items: { batch_id: number; key: string; payload: string }[] = [];
  let last = -1;
  for (const r of rows) {
    if (r.id !== last) {
      batches.push(r);
      last = r.id;
    }
    items.push({ batch_id: r.id, key: r.item_key, payload: r.item_payload });
  }
  return { batches, items };
}

export async function enqueue(x: PgCx, list: readonly NewItem[], now: number): Promise<EnqueueResult[]> {
  if (list.length === 0) return [];
  return x.s.tx(`enqueueing ${list.length} item${list.length === 1 ? '' : 's'}`, async (c) => {
    const dests = list.map((i) => i.destination);
    const keys = list.map((i) => i.key);
    const inserted = await x.s.run<{ id: number; destination: string; key: string }>(
      c,
      `
      WITH ins AS (
        INSERT INTO ${x.t.items} (destination, key, payload, bytes, enqueued_at)
        SELECT d, k, p, octet_length(p), $4 FROM unnest($1::text[], $2::text[], $3::text[]) AS u(d, k, p)
        ON CONFLICT (destination, key) DO NOTHING RETURNING id, destination, key
      ), cnt AS (${counted(x.t, `SELECT destination, 'pending' AS state, 0::bigint AS batches, count(*) AS items FROM ins GROUP BY destination`, '$5')})
      SELECT id, destination, key FROM ins`,
      [dests, keys, list.map((i) => i.payload), now, x.shard()],
    );
    const fresh = new Map(inserted.map((r) => [`${r.destination}\0${r.key}`, r.id]));
    const missing = list.filter((i) => !fresh.has(`${i.destination}\0${i.key}`));
    const known = new Map<string, number>();
    if (missing.length > 0) {
      const rows = await x.s.run<{ id: number; destination: string; key: string }>(
        c,
        `SELECT i.id, i.destination, i.key FROM ${x.t.items} i JOIN unnest($1::text[], $2::text[]) AS u(d, k) ON i.destination = u.d AND i.key = u.k`,
        [missing.map((i) => i.destination), missing.map((i) => i.key)],
      );
      for (const r of rows) known.set(`${r.destination}\0${r.key}`, r.id);
    }
    // Workers of other processes wake up (delivered when the transaction commits).
    if (inserted.length > 0)
      await x.s.run(c, `SELECT pg_notify($1, d) FROM (SELECT DISTINCT unnest($2::text[]) AS d) x`, [
        x.channel,
        [...new Set(inserted.map((r) => r.destination))],
      ]);
    const seen = new Set<string>();
    return list.map((i) => {
      const k = `${i.destination}\0${i.key}`;
      const id = fresh.get(k);
      // The same key twice in one call: the first is stored, the second is a duplicate.
      if (id !== undefined && !seen.has(k)) {
        seen.add(k);
        return { id, key: i.key, duplicate: false };
      }
      return { id: id ?? known.get(k) ?? 0, key: i.key, duplicate: true };
    });
  });
}

export async function formBatches(x: PgCx, destination: string, limits: BatchLimits, now: number, maxBatches: number): Promise<FormResult> {
  return x.s.tx('forming batches', async (c) => {
    const limit = Math.max(1, maxBatches * limits.maxItems);
    const rows = await x.s.run<PendingRow>(
      c,
      `SELECT id, key, bytes, enqueued_at AS "enqueuedAt" FROM ${x.t.items}
       WHERE destination = $1 AND batch_id IS NULL ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`,
      [destination, limit],
    );
    if (rows.length === 0) return { formed: 0, nextAt: null };
    const { cuts, nextAt } = cutBatches(destination, rows, limits, now, maxBatches, rows.length < limit);
    if (cuts.length === 0) return { formed: 0, nextAt };
    const { itemIds, itemBatch } = itemsOfCuts(cuts);
    // The batches and their items' batch_id in one statement (ordinality ties them).
    await x.s.run(
      c,
      `
      WITH b AS (
        INSERT INTO ${x.t.batches} (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at)
        SELECT $1, k, 'queued', n, b, $5, $5, $5, e FROM unnest($2::text[], $3::int[], $4::bigint[], $6::bigint[]) WITH ORDINALITY AS u(k, n, b, e, o) ORDER BY o
        RETURNING id, key
      ), o AS (
        SELECT b.id, u.o FROM b JOIN unnest($2::text[]) WITH ORDINALITY AS u(k, o) ON u.k = b.key
      ), cnt AS (${counted(
        x.t,
        `SELECT $1::text AS destination, s AS state, nb AS batches, ni AS items
          FROM (VALUES ('pending', 0::bigint, -$9::bigint), ('queued', $10::bigint, $9::bigint)) AS v(s, nb, ni)`,
        '$11',
      )})
      UPDATE ${x.t.items} i SET batch_id = o.id FROM unnest($7::bigint[], $8::int[]) AS m(i, o) JOIN o ON o.o = m.o WHERE i.id = m.i`,
      [
        destination,
        cuts.map((cut) => cut.key),
        cuts.map((cut) => cut.rows.length),
        cuts.map((cut) => cut.bytes),
        now,
        cuts.map((cut) => cut.rows[0]!.enqueuedAt),
        itemIds,
        itemBatch,
        itemIds.length,
        cuts.length,
        x.shard(),
      ],
    );
    return { formed: cuts.length, nextAt };
  });
}

export async function formAndClaim(
  x: PgCx,
  destination: string,
  limits: BatchLimits,
  now: number,
  maxBatches: number,
  leaseMs: number,
  owner: string,
): Promise<FormAndClaimResult> {
  if (limits.maxItems === 1) return formAndClaimSingles(x, destination, now, maxBatches, leaseMs, owner);
  return x.s.tx('forming and claiming batches', async (c) => {
    const limit = Math.max(1, maxBatches * limits.maxItems);
    const rows = await x.s.run<PendingRow & { payload: string }>(
      c,
      `SELECT id, key, bytes, enqueued_at AS "enqueuedAt", payload FROM ${x.t.items}
       WHERE destination = $1 AND batch_id IS NULL
         AND NOT EXISTS (SELECT 1 FROM ${x.t.dests} p WHERE p.destination = $1 AND p.paused_at IS NOT NULL)
       ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`,
      [destination, limit],
    );
    if (rows.length === 0) return { claimed: [], nextAt: null };
    const { cuts, nextAt } = cutBatches(destination, rows, limits, now, maxBatches, rows.length < limit);
    if (cuts.length === 0) return { claimed: [], nextAt };
    const until = now + leaseMs;
    const { itemIds, itemBatch } = itemsOfCuts(cuts);
    // The batches, born leased to `owner` (token 1, as a first claim leaves it), and their items' batch_id.
    const made = await x.s.run<{ id: number; o: number }>(
      c,
      `
      WITH b AS (
        INSERT INTO ${x.t.batches} (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at, lease_owner, lease_until, lease_token, claims)
        SELECT $1, k, 'queued', n, b, $5, $5, $12, e, $13, $12, 1, 1 FROM unnest($2::text[], $3::int[], $4::bigint[], $6::bigint[]) WITH ORDINALITY AS u(k, n, b, e, o) ORDER BY o
        RETURNING id, key
      ), o AS (
        SELECT b.id, u.o FROM b JOIN unnest($2::text[]) WITH ORDINALITY AS u(k, o) ON u.k = b.key
      ), cnt AS (${counted(
        x.t,
        `SELECT $1::text AS destination, s AS state, nb AS batches, ni AS items
          FROM (VALUES ('pending', 0::bigint, -$9::bigint), ('queued', $10::bigint, $9::bigint)) AS v(s, nb, ni)`,
        '$11',
      )}
      ), m AS (
        UPDATE ${x.t.items} i SET batch_id = o.id FROM unnest($7::bigint[], $8::int[]) AS m(i, o) JOIN o ON o.o = m.o WHERE i.id = m.i
      )
      SELECT id, o FROM o`,
      [
        destination,
        cuts.map((cut) => cut.key),
        cuts.map((cut) => cut.rows.length),
        cuts.map((cut) => cut.bytes),
        now,
        cuts.map((cut) => cut.rows[0]!.enqueuedAt),
        itemIds,
        itemBatch,
        itemIds.length,
        cuts.length,
        x.shard(),
        until,
        owner,
      ],
    );
    const idOf = new Map(made.map((r) => [Number(r.o), Number(r.id)]));
    const claimed: ClaimedBatch[] = cuts.map((cut, i) => ({
      id: idOf.get(i + 1)!,
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
    }));
    return { claimed, nextAt };
  });
}

/**
 * formAndClaim when every batch holds one item (maxItems 1: every pending item is a full
 * batch, whatever its size or age), in one statement: the batch key is computed by
 * PostgreSQL exactly as batchKey() does (SHA-256 of the length-prefixed destination
 * and item key, lengths in UTF-16 code units as JavaScript counts them).
 */
export async function formAndClaimSingles(
  x: PgCx,
  destination: string,
  now: number,
  maxBatches: number,
  leaseMs: number,
  owner: string,
): Promise<FormAndClaimResult> {
  const limit = Math.max(1, maxBatches);
  // UTF-16 length of k: its characters, plus one for each outside the Basic Multilingual Plane.
  const len16 = `(CASE WHEN octet_length(p.key) = char_length(p.key) THEN char_length(p.key)
    ELSE char_length(p.key) + char_length(regexp_replace(p.key, E'[^\\\\U00010000-\\\\U0010FFFF]', '', 'g')) END)`;
  const rows = await x.s.q<{ id: number; key: string; item_key: string; payload: string; bytes: number }>(
    'forming and claiming batches',
    `
    WITH p AS (
      SELECT id, key, bytes, enqueued_at, payload FROM ${x.t.items}
      WHERE destination = $1 AND batch_id IS NULL
        AND NOT EXISTS (SELECT 1 FROM ${x.t.dests} d WHERE d.destination = $1 AND d.paused_at IS NOT NULL)
      ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED
    ), k AS (
      SELECT p.id, p.key, p.bytes, p.enqueued_at, p.payload,
        'rb-' || left(encode(sha256(convert_to($3::text || E'\\n' || ${len16} || ':' || p.key, 'UTF8')), 'hex'), 40) AS bkey
      FROM p
    ), b AS (
      INSERT INTO ${x.t.batches} (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at, lease_owner, lease_until, lease_token, claims)
      SELECT $1, k.bkey, 'queued', 1, k.bytes, $4, $4, $5, k.enqueued_at, $6, $5, 1, 1 FROM k ORDER BY k.id
      RETURNING id, key
    ), x AS (
      SELECT b.id, b.key, k.id AS item_id, k.key AS item_key, k.payload, k.bytes FROM b JOIN k ON k.bkey = b.key
    ), m AS (
      UPDATE ${x.t.items} i SET batch_id = x.id FROM x WHERE i.id = x.item_id
    ), cnt AS (${counted(
      x.t,
      `SELECT $1::text AS destination, s AS state, nb AS batches, ni AS items
        FROM (SELECT count(*) AS n FROM x) AS c, LATERAL (VALUES ('pending', 0::bigint, -c.n), ('queued', c.n, c.n)) AS v(s, nb, ni)`,
      '$7',
    )}
    )
    SELECT id, key, item_key, payload, bytes FROM x ORDER BY item_id`,
    [destination, limit, `${destination.length}:${destination}`, now, now + leaseMs, owner, x.shard()],
  );
  const claimed: ClaimedBatch[] = rows.map((r) => ({
    id: r.id,
    token: 1,
    destination,
    key: r.key,
    round: 1,
    attempt: 0,
    opStartedAt: null,
    opDeadlineAt: null,
    prevDelayMs: null,
    opThrottled: 0,
    createdAt: now,
    notBefore: now,
    bytes: r.bytes,
    items: [{ key: r.item_key, payload: r.payload }],
  }));
  return { claimed, nextAt: rows.length < limit ? null : now };
}

export async function claim(x: PgCx, destination: string, limit: number, now: number, leaseMs: number, owner: string): Promise<ClaimedBatch[]> {
  const rows = await x.s.q<ClaimRow>('claiming batches', x.claimSql, [destination, now, limit, owner, now + leaseMs]);
  if (rows.length === 0) return [];
  const { batches, items } = splitClaimRows(rows);
  return toClaimed(batches, items);
}

export async function reclaim(x: PgCx, destination: string, owner: string, known: readonly Lease[], now: number, leaseMs: number): Promise<ClaimedBatch[]> {
  const rows = await x.s.q<ClaimRow>(
    'looking for leases of unknown claims',
    `
    WITH u AS (
      UPDATE ${x.t.batches} b SET lease_until = $3, due_at = $3
      WHERE b.state = 'queued' AND b.destination = $1 AND b.lease_owner = $2 AND b.lease_until > $4
        AND NOT EXISTS (SELECT 1 FROM unnest($5::bigint[], $6::bigint[]) AS k(id, token) WHERE k.id = b.id AND k.token = b.lease_token)
      RETURNING b.id, b.destination, b.key, b.lease_token, b.round, b.attempt, b.op_started_at, b.op_deadline_at, b.prev_delay_ms, b.op_throttled,
        b.created_at, b.not_before, b.bytes, b.due_at
    )
    SELECT u.*, i.key AS item_key, i.payload AS item_payload FROM u JOIN ${x.t.items} i ON i.batch_id = u.id ORDER BY u.id, i.id`,
    [destination, owner, now + leaseMs, now, known.map((l) => l.id), known.map((l) => l.token)],
  );
  if (rows.length === 0) return [];
  const { batches, items } = splitClaimRows(rows);
  return toClaimed(batches, items);
}

export async function claimLimited(
  x: PgCx,
  destination: string,
  want: number,
  limits: SharedLimits,
  now: number,
  leaseMs: number,
  owner: string,
): Promise<LimitedClaim> {
  return x.s.tx('claiming batches', async (c) => {
    // Claims of this destination, from every worker, one at a time: the destination's row is the lock.
    const lock = `SELECT paused_at FROM ${x.t.dests} WHERE destination = $1 FOR UPDATE`;
    let row = await x.s.run<{ paused_at: number | null }>(c, lock, [destination]);
    if (row.length === 0) {
      await x.s.run(c, `INSERT INTO ${x.t.dests} (destination) VALUES ($1) ON CONFLICT DO NOTHING`, [destination]);
      row = await x.s.run(c, lock, [destination]);
    }
    if (row[0]?.paused_at !== null && row[0]?.paused_at !== undefined) return { claimed: [], retryAt: null, permit: null };
    // A new statement, so a new snapshot: it sees every claim committed before the lock was ours.
    const perMs = limits.rate?.perMs ?? 0;
    const [use] = await x.s.run<{ used: number; leased: number }>(
      c,
      `
      WITH gone AS (DELETE FROM ${x.t.rate} WHERE destination = $1 AND end_at <= $2::bigint - $3::bigint)
      SELECT (SELECT coalesce(sum(n), 0) FROM ${x.t.rate} WHERE destination = $1 AND end_at > $2::bigint - $3::bigint) AS used,
             (SELECT count(*) FROM ${x.t.batches} WHERE destination = $1 AND state = 'queued' AND lease_owner IS NOT NULL AND lease_until > $2) AS leased`,
      [destination, now, perMs],
    );
    let allowed = want;
    if (limits.concurrency !== null) allowed = Math.min(allowed, limits.concurrency - Number(use!.leased));
    const rate = limits.rate;
    const used = Number(use!.used);
    if (rate !== null) allowed = Math.min(allowed, rate.requests - used);
    const rows = allowed > 0 ? await x.s.run<ClaimRow>(c, x.claimSql, [destination, now, allowed, owner, now + leaseMs]) : [];
    const { batches, items } = splitClaimRows(rows);
    if (rate === null) return { claimed: toClaimed(batches, items), retryAt: null, permit: null };
    let retryAt: number | null = null;
    if (used + batches.length >= rate.requests) {
      // The window is full: one more fits when enough of its entries have aged out (this claim's own last).
      const [first] = await x.s.run<{ end_at: number }>(
        c,
        `
        SELECT end_at FROM (SELECT end_at, sum(n) OVER (ORDER BY end_at, id) AS cum FROM ${x.t.rate} WHERE destination = $1 AND end_at > $2::bigint - $3::bigint) x
        WHERE cum >= $4 ORDER BY end_at LIMIT 1`,
        [destination, now, perMs, used + batches.length - rate.requests + 1],
      );
      retryAt = first ? Number(first.end_at) + perMs : now + leaseMs + perMs;
    }
    let permit: number | null = null;
    if (batches.length > 0) {
      const [p] = await x.s.run<{ id: number }>(c, `INSERT INTO ${x.t.rate} (destination, at, n, end_at) VALUES ($1, $2, $3, $4) RETURNING id`, [
        destination,
        now,
        batches.length,
        now + leaseMs,
      ]);
      permit = p!.id;
    }
    return { claimed: toClaimed(batches, items), retryAt, permit };
  });
}

export async function endPermit(x: PgCx, permit: number, at: number): Promise<void> {
  await x.s.q('ending a rate permit', `UPDATE ${x.t.rate} SET end_at = least(end_at, $2) WHERE id = $1`, [permit, at]);
}

export async function renew(x: PgCx, leases: readonly Lease[], now: number, leaseMs: number): Promise<number[]> {
  if (leases.length === 0) return [];
  const until = now + leaseMs;
  const kept = await x.s.q<{ id: number }>(
    'renewing leases',
    `
    UPDATE ${x.t.batches} b SET lease_until = $3, due_at = $3
    FROM unnest($1::bigint[], $2::bigint[]) AS l(id, token)
    WHERE b.id = l.id AND b.lease_token = l.token AND b.state = 'queued'
    RETURNING b.id`,
    [leases.map((l) => l.id), leases.map((l) => l.token), until],
  );
  const ok = new Set(kept.map((r) => r.id));
  return leases.filter((l) => !ok.has(l.id)).map((l) => l.id);
}

export async function release(x: PgCx, leases: readonly Lease[], _now: number): Promise<number> {
  if (leases.length === 0) return 0;
  const rows = await x.s.q<{ id: number }>(
    'releasing claims',
    `
    UPDATE ${x.t.batches} b SET lease_owner = NULL, lease_until = 0, due_at = b.not_before
    FROM unnest($1::bigint[], $2::bigint[]) AS l(id, token)
    WHERE b.id = l.id AND b.lease_token = l.token AND b.state = 'queued'
    RETURNING b.id`,
    [leases.map((l) => l.id), leases.map((l) => l.token)],
  );
  return rows.length;
}

/** The items of cut batches as two parallel arrays for one statement: each item's id and its batch's ordinal (1-based). */
function itemsOfCuts(cuts: readonly { readonly rows: readonly { readonly id: number }[] }[]): { itemIds: number[]; itemBatch: number[] } {
  const itemIds: number[] = [];
  const itemBatch: number[] = [];
  cuts.forEach((cut, i) => {
    for (const r of cut.rows) {
      itemIds.push(r.id);
      itemBatch.push(i + 1);
    }
  });
  return { itemIds, itemBatch };
}
