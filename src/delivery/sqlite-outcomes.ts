// The SQLite store's writes of what became of batches: outcomes (fenced), requeues,
// purges, and the counters behind stats() that follow every move between states.
import { SQLITE_RECOUNT } from './sqlite-schema.js';
import type { SqliteCx } from './sqlite-statements.js';
import { fill } from './migrations.js';
import { outcomeColumns, REQUEUE_DEFAULT_LIMIT } from './store-common.js';
import type { CompleteResult, FinishedState, Outcome, RequeueFilter } from './types.js';

/** Writes outcomes, each only while its lease token matches (fenced), in one transaction. */
export function complete(x: SqliteCx, outcomes: readonly Outcome[]): CompleteResult {
  return x.db
    .transaction(() => {
      const rows = outcomes.map(outcomeColumns);
      const done = x.s.complete.all(JSON.stringify(rows)) as { id: number; round: number; destination: string; state: string; items: number }[];
      const roundOf = new Map(done.map((r) => [r.id, r.round]));
      countMoves(
        x,
        done.filter((r) => r.state !== 'queued').map((r) => ({ destination: r.destination, from: 'queued', to: r.state, items: r.items })),
      );
      const records: unknown[] = [];
      for (const o of outcomes) {
        const round = roundOf.get(o.id);
        const r = o.record;
        if (round === undefined || !r) continue;
        records.push([o.id, round, r.attempt, r.at, r.status, r.errorClass, r.elapsedMs, r.decision, r.why, r.delayMs, r.retryAfterMs, r.worker]);
      }
      if (records.length > 0) x.s.insertAttempts.run(JSON.stringify(records));
      // Written already by this very claim (the same write made again): done, not lost.
      const again = (o: Outcome): boolean => {
        if (o.state === 'queued') return false;
        const row = x.db.prepare(`SELECT state, lease_token FROM ${x.t.batches} WHERE id = ?`).get(o.id) as { state: string; lease_token: number } | undefined;
        return row !== undefined && row.state === o.state && Number(row.lease_token) === o.token;
      };
      const applied: number[] = [];
      const lost: number[] = [];
      for (const o of outcomes) (roundOf.has(o.id) || again(o) ? applied : lost).push(o.id);
      return { applied, lost };
    })
    .immediate();
}

/** Rebuilds the counters behind stats() from the tables. */
export function recount(x: SqliteCx): void {
  x.db.transaction(() => x.db.exec(fill(SQLITE_RECOUNT, { ...x.t }))).immediate();
}

/** Batches that changed state (to null: deleted): the counters follow. */
function countMoves(x: SqliteCx, moves: readonly { destination: string; from: string; to: string | null; items: number }[]): void {
  if (moves.length === 0) return;
  const d = new Map<string, [string, string, number, number]>();
  const add = (dest: string, state: string, b: number, i: number): void => {
    const k = `${dest}\0${state}`;
    const e = d.get(k);
    if (e) {
      e[2] += b;
      e[3] += i;
    } else d.set(k, [dest, state, b, i]);
  };
  for (const m of moves) {
    add(m.destination, m.from, -1, -m.items);
    if (m.to !== null) add(m.destination, m.to, 1, m.items);
  }
  for (const [dest, state, b, i] of d.values()) x.s.count.run(dest, state, b, i);
}

export function requeue(x: SqliteCx, filter: RequeueFilter, now: number): number {
  return x.db
    .transaction(() => {
      const where = [`state = 'dropped'`];
      const params: unknown[] = [];
      if (filter.ids !== undefined) {
        if (filter.ids.length === 0) return 0;
        where.push(`id IN (${filter.ids.map(() => '?').join(',')})`);
        params.push(...filter.ids);
      }
      if (filter.destination !== undefined) {
        where.push('destination = ?');
        params.push(filter.destination);
      }
      if (filter.reason !== undefined) {
        where.push('last_decision = ?');
        params.push(filter.reason);
      }
      params.push(filter.limit ?? REQUEUE_DEFAULT_LIMIT);
      const ids = x.db.prepare(`SELECT id FROM ${x.t.batches} WHERE ${where.join(' AND ')} ORDER BY id LIMIT ?`).all(...params) as { id: number }[];
      let n = 0;
      const moved: { destination: string; from: string; to: string; items: number }[] = [];
      for (const { id } of ids) {
        const r = x.s.requeueOne.get(now, now, id) as { destination: string; items: number } | undefined;
        if (!r) continue;
        n++;
        moved.push({ destination: r.destination, from: 'dropped', to: 'queued', items: r.items });
      }
      countMoves(x, moved);
      return n;
    })
    .immediate();
}

/** Deletes up to `limit` finished batches of `state` (oldest first, through the finished index), with their items and history. */
export function purge(x: SqliteCx, state: FinishedState, before: number, limit: number): number {
  return x.db
    .transaction(() => {
      const { items, batches, attempts } = x.t;
      // At most `limit` batches per call (one short transaction), oldest first, through the finished index.
      const rows = x.db
        .prepare(`SELECT id, destination, items FROM ${batches} WHERE state = '${state}' AND finished_at < ? ORDER BY finished_at LIMIT ?`)
        .all(before, limit) as { id: number; destination: string; items: number }[];
      const ids = JSON.stringify(rows.map((r) => r.id));
      const sub = 'SELECT value FROM json_each(?)';
      x.db.prepare(`DELETE FROM ${items} WHERE batch_id IN (${sub})`).run(ids);
      x.db.prepare(`DELETE FROM ${attempts} WHERE batch_id IN (${sub})`).run(ids);
      countMoves(
        x,
        rows.map((r) => ({ destination: r.destination, from: state, to: null, items: r.items })),
      );
      return x.db.prepare(`DELETE FROM ${batches} WHERE id IN (${sub})`).run(ids).changes;
    })
    .immediate();
}
