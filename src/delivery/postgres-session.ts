// The PostgreSQL store's connections: statements with a time limit on their answer (past
// it the connection is reset), transactions with deadlocks retried, pg errors turned into
// DeliveryErrors that say what happened, and connections ended even across a partition.
import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import type * as Pg from 'pg';
import { systemClock } from '../shared/clock.js';
import { DeliveryError } from './errors.js';

const CONNECT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'ECONNRESET',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  '28P01',
  '28000',
  '3D000',
  '57P01',
  '57P02',
  '57P03',
  '08001',
  '08006',
  '08004',
]);

/** A statement that got no answer within queryTimeoutMs (its connection was reset). */
class QueryTimeout extends Error {
  readonly code = 'RELENT_QUERY_TIMEOUT';
  constructor(readonly ms: number) {
    super(`no answer within ${ms} ms`);
  }
}

/** Maps a pg error to a DeliveryError that says what happened. */
export function postgresError(e: unknown, where: string, what: string): DeliveryError {
  if (DeliveryError.is(e)) return e;
  const code = typeof (e as { code?: unknown })?.code === 'string' ? (e as { code: string }).code : '';
  const msg = e instanceof Error ? e.message : String(e);
  if (e instanceof QueryTimeout) {
    return new DeliveryError(
      'ERR_STORE_UNAVAILABLE',
      `${where}: no answer from PostgreSQL within ${e.ms} ms (queryTimeoutMs), the connection was reset; ${what} may not have happened, nothing stored earlier is lost`,
      { cause: e },
    );
  }
  if (code === '57014') {
    return new DeliveryError(
      'ERR_STORE',
      `${where}: PostgreSQL cancelled a statement that ran past statement_timeout (statementTimeoutMs; ${msg}); ${what} was rolled back`,
      { cause: e },
    );
  }
  if (CONNECT_CODES.has(code) || /timeout exceeded when trying to connect|Connection terminated|connect ECONNREFUSED/i.test(msg)) {
    return new DeliveryError(
      'ERR_STORE_UNAVAILABLE',
      `${where}: cannot reach PostgreSQL (${code || msg}${code && msg ? `: ${msg}` : ''}); ${what} did not happen, nothing stored earlier is lost`,
      { cause: e },
    );
  }
  if (code === '53100' || code === '53200' || code === '53400') {
    return new DeliveryError(
      'ERR_STORE_FULL',
      `${where}: PostgreSQL is out of disk or memory (${code}: ${msg}); ${what} was rolled back, nothing stored earlier is lost`,
      { cause: e },
    );
  }
  if (code === '55P03') {
    return new DeliveryError('ERR_STORE_LOCKED', `${where}: a lock could not be taken (${code}: ${msg}); ${what} did not happen`, { cause: e });
  }
  return new DeliveryError('ERR_STORE', `${where}: ${what} failed (${code || 'error'}: ${msg})`, { cause: e });
}

/** Resets a connection (an RST: what it had not delivered is dropped); pg then reports its end as an error, which is expected. */
export function resetConnection(c: Pg.ClientBase): void {
  c.on('error', () => {});
  const stream = (c as unknown as { connection?: { stream?: Socket } }).connection?.stream;
  if (stream === undefined || stream.destroyed) return;
  if (typeof stream.resetAndDestroy === 'function' && !stream.connecting) stream.resetAndDestroy();
  else stream.destroy();
}

/**
 * An error the server returned for a statement (the session goes on: a constraint, a
 * deadlock, a cancelled statement), as opposed to a connection that failed, was reset or
 * was ended by the server (FATAL).
 */
function isStatementError(e: unknown): boolean {
  return !(e instanceof QueryTimeout) && (e as { severity?: unknown } | null)?.severity === 'ERROR';
}

const RETRYABLE_PG = new Set(['40P01', '40001']); // deadlock detected, serialization failure

/** The pools of one store, and how every statement goes through them. */
export class PgSession {
  closed = false;
  private readonly names = new Map<string, string>();
  /** Connections this store reset after a query timeout: given back to the pool as broken (closed, not reused). */
  private readonly broken = new WeakSet<Pg.ClientBase>();
  /** Every connection of the pools (close() resets those a partition keeps from ending). */
  private readonly clients = new Set<Pg.ClientBase>();

  constructor(
    readonly pool: Pg.Pool,
    readonly outcomePool: Pg.Pool,
    readonly description: string,
    readonly listenClient: (connectMs?: number) => Pg.Client,
    readonly queryTimeoutMs: number,
  ) {
    for (const p of new Set([pool, outcomePool])) {
      p.on('connect', (c) => this.clients.add(c));
      p.on('remove', (c) => this.clients.delete(c));
    }
  }

  /** A statement as a named (prepared) query: parsed and planned once per connection. */
  named(text: string, values: unknown[]): Pg.QueryConfig {
    let name = this.names.get(text);
    if (name === undefined) {
      name = `relent_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
      this.names.set(text, name);
    }
    return { name, text, values };
  }

  /**
   * One statement on `c`, answered within `timeoutMs` (0: no limit) or the connection is
   * reset: an RST, so the bytes it had not delivered yet (this statement, in a partition)
   * are dropped rather than run by the server minutes later, and the server ends the
   * session (rolling back its transaction) when it hears of it. The statement then fails
   * with a QueryTimeout.
   */
  async exec(c: Pg.ClientBase, query: Pg.QueryConfig | string, timeoutMs = this.queryTimeoutMs): Promise<Pg.QueryResult> {
    if (timeoutMs <= 0) return c.query(query);
    const pending = c.query(query);
    let cancel: () => void = () => {};
    const timeout = new Promise<never>((_resolve, reject) => {
      cancel = systemClock.setTimer(() => {
        this.broken.add(c);
        resetConnection(c);
        reject(new QueryTimeout(timeoutMs));
      }, timeoutMs);
    });
    try {
      return await Promise.race([pending, timeout]);
    } finally {
      cancel();
      pending.catch(() => {});
    }
  }

  async run<R>(c: Pg.PoolClient, text: string, values: unknown[] = []): Promise<R[]> {
    return (await this.exec(c, this.named(text, values))).rows as R[];
  }

  /** Gives a client back to its pool; a connection that was reset or failed is closed, not reused. */
  private giveBack(c: Pg.PoolClient, failed: unknown = null): void {
    c.release(failed !== null && (this.broken.has(c) || !isStatementError(failed)) ? (failed instanceof Error ? failed : true) : undefined);
  }

  /**
   * Runs `fn` with a client inside a transaction; a deadlock is retried (twice) before it is
   * reported. `unbounded`: no statement timeout, on either side (creating tables, recount).
   */
  async tx<T>(what: string, fn: (c: Pg.PoolClient) => Promise<T>, unbounded = false): Promise<T> {
    if (this.closed) throw new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`);
    for (let tries = 0; ; tries++) {
      let client: Pg.PoolClient;
      try {
        client = await this.pool.connect();
      } catch (e) {
        throw postgresError(e, this.description, what);
      }
      const limit = unbounded ? 0 : this.queryTimeoutMs;
      try {
        await this.exec(client, 'BEGIN', limit);
        if (unbounded) await this.exec(client, 'SET LOCAL statement_timeout = 0', limit);
        const out = await fn(client);
        await this.exec(client, 'COMMIT', limit);
        client.release();
        return out;
      } catch (e) {
        let failed: unknown = e;
        if (!this.broken.has(client) && isStatementError(e)) {
          // The connection is sound: roll back and reuse it (if the rollback fails, it is closed).
          await this.exec(client, 'ROLLBACK', limit).then(
            () => (failed = null),
            (r: unknown) => (failed = r),
          );
        }
        this.giveBack(client, failed);
        const code = (e as { code?: string }).code ?? '';
        if (RETRYABLE_PG.has(code) && tries < 2) continue;
        throw postgresError(e, this.description, what);
      }
    }
  }

  async q<R>(what: string, text: string, values: unknown[] = [], pool: Pg.Pool = this.pool): Promise<R[]> {
    if (this.closed) throw new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`);
    for (let tries = 0; ; tries++) {
      let client: Pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (e) {
        throw postgresError(e, this.description, what);
      }
      try {
        const rows = (await this.exec(client, this.named(text, values))).rows as R[];
        client.release();
        return rows;
      } catch (e) {
        this.giveBack(client, e);
        const code = (e as { code?: string }).code ?? '';
        if (RETRYABLE_PG.has(code) && tries < 2) continue;
        throw postgresError(e, this.description, what);
      }
    }
  }

  /**
   * Whether PostgreSQL answers now, over a new connection (none of the pool's, which may
   * be stalled): resolves when it does within `timeoutMs`, rejects otherwise. A worker
   * asks while the store fails, to start again as soon as it is back.
   */
  async ping(timeoutMs: number): Promise<void> {
    if (this.closed) throw new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`);
    const c = this.listenClient(timeoutMs);
    c.on('error', () => {});
    try {
      await c.connect();
      await this.exec(c, 'SELECT 1', timeoutMs);
    } catch (e) {
      throw postgresError(e, this.description, 'the check that PostgreSQL answers');
    } finally {
      await this.endClient(c);
    }
  }

  /** Ends a connection politely; one that does not answer within queryTimeoutMs (a partition holds its goodbye) is reset. */
  async endClient(c: Pg.ClientBase): Promise<void> {
    let cancel: () => void = () => {};
    const late = new Promise<void>((resolve) => {
      cancel = systemClock.setTimer(
        () => {
          resetConnection(c);
          resolve();
        },
        this.queryTimeoutMs > 0 ? this.queryTimeoutMs : 3_000,
      );
    });
    try {
      await Promise.race([(c as Pg.Client).end().catch(() => {}), late]);
    } finally {
      cancel();
    }
  }

  /** Ends a pool; connections that do not say goodbye within queryTimeoutMs are reset. */
  private async endPool(pool: Pg.Pool): Promise<void> {
    let cancel: () => void = () => {};
    const ended = pool.end().catch(() => {});
    const late = new Promise<boolean>((resolve) => {
      cancel = systemClock.setTimer(() => resolve(true), this.queryTimeoutMs > 0 ? this.queryTimeoutMs : 3_000);
    });
    const timedOut = await Promise.race([ended.then(() => false), late]);
    cancel();
    if (!timedOut) return;
    for (const c of this.clients) resetConnection(c);
    await ended;
  }

  /** Ends both pools (connections that do not say goodbye in time are reset). */
  async end(): Promise<void> {
    await this.endPool(this.pool);
    if (this.outcomePool !== this.pool) await this.endPool(this.outcomePool);
  }
}
