// The embedded store: one SQLite file. This module opens it and answers the store contract;
// the work is in sqlite-schema.ts (tables, migrations), sqlite-claims.ts (enqueue, seal,
// lease), sqlite-outcomes.ts (outcomes, requeue, purge), sqlite-queries.ts (reads) and
// sqlite-remote.ts (the store in a process or thread of its own).
import type BetterSqlite3 from 'better-sqlite3';
import * as claims from './sqlite-claims.js';
import { DeliveryError } from './errors.js';
import * as outcomes from './sqlite-outcomes.js';
import * as queries from './sqlite-queries.js';
import { openRemoteStore, RUNNER } from './sqlite-remote.js';
import { migrateSqlite, sqliteTables, type SqliteTables } from './sqlite-schema.js';
import { prepareStatements, type SqliteCx, type Statements } from './sqlite-statements.js';
import { PURGE_DELIVERED_CHUNK } from './store-common.js';
import type {
  BatchDetail,
  BatchLimits,
  BatchSummary,
  ClaimedBatch,
  CompleteResult,
  DeliveryStore,
  DestinationStats,
  DropStat,
  ClaimThenFormResult,
  EnqueueResult,
  FinishedState,
  FormAndClaimResult,
  FormResult,
  Lease,
  LimitedClaim,
  ListFilter,
  NewItem,
  Outcome,
  RequeueFilter,
  SharedLimits,
} from './types.js';

type Db = BetterSqlite3.Database;

export interface SqliteStoreOptions {
  /** A file path, or ':memory:' (tests; nothing survives the process). */
  readonly file: string;
  /** How long a write waits for another process's lock before ERR_STORE_LOCKED (ms). Default 5000. */
  readonly busyTimeoutMs?: number;
  /**
   * `NORMAL` (default) survives a process crash (kill -9) in WAL mode; `FULL` also a
   * power loss, at the cost of an fsync per transaction.
   */
  readonly synchronous?: 'NORMAL' | 'FULL';
  /** Prefix of the table names (default `relent_`). */
  readonly tablePrefix?: string;
  /**
   * A cap on the database file (bytes, rounded down to whole pages): past it, writes
   * fail with ERR_STORE_FULL and are rolled back — backpressure before the disk fills.
   */
  readonly maxSizeBytes?: number;
  /**
   * Where the store's work runs. `process` (default for a database file): a process of its
   * own, as a database server would, started and ended with the store — the operating
   * system schedules it as a separate program, and the caller's event loop only posts
   * calls and reads answers. `thread`: a worker thread of the caller's process. `caller`:
   * the caller's thread. A `:memory:` database always runs on the caller's thread.
   */
  readonly runIn?: 'process' | 'thread' | 'caller';
}

export const SQLITE_DEFAULTS = Object.freeze({ busyTimeoutMs: 5_000, synchronous: 'NORMAL' as const, tablePrefix: 'relent_' });

/** Pages of write-ahead log between automatic checkpoints (SQLite's default is 1,000). */
const SQLITE_WAL_CHECKPOINT_PAGES = 10_000;

/** Maps a better-sqlite3 error to a DeliveryError that says what happened and what it means. */
export function sqliteError(e: unknown, where: string, what: string): DeliveryError {
  if (DeliveryError.is(e)) return e;
  const code = typeof (e as { code?: unknown })?.code === 'string' ? (e as { code: string }).code : '';
  const msg = e instanceof Error ? e.message : String(e);
  if (code === 'SQLITE_FULL' || /disk is full|database or disk is full/i.test(msg)) {
    return new DeliveryError(
      'ERR_STORE_FULL',
      `${where}: the disk or the database size limit is full (${code || msg}); ${what} was rolled back, nothing stored earlier is lost`,
      { cause: e },
    );
  }
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) {
    return new DeliveryError(
      'ERR_STORE_LOCKED',
      `${where}: the database file is locked by another process (${code}) for longer than the busy timeout; ${what} did not happen, nothing stored earlier is lost`,
      { cause: e },
    );
  }
  if (
    code.startsWith('SQLITE_CANTOPEN') ||
    code === 'SQLITE_NOTADB' ||
    code.startsWith('SQLITE_READONLY') ||
    code === 'SQLITE_PERM' ||
    code === 'SQLITE_AUTH'
  ) {
    return new DeliveryError('ERR_STORE_UNAVAILABLE', `${where}: cannot open the database (${code}: ${msg})`, { cause: e });
  }
  return new DeliveryError('ERR_STORE', `${where}: ${what} failed (${code || 'error'}: ${msg})`, { cause: e });
}

/**
 * Opens the embedded store: one SQLite file in WAL mode (readers never block the
 * writer), zero setup. `better-sqlite3` is loaded here, on first use, so users of the
 * rest of relent never load it.
 */
export async function openSqliteStore(options: SqliteStoreOptions): Promise<DeliveryStore> {
  const memory = options.file === ':memory:' || options.file === '';
  const runIn = options.runIn ?? 'process';
  if (runIn !== 'process' && runIn !== 'thread' && runIn !== 'caller') {
    throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`runIn\` to be process, thread or caller, got ${JSON.stringify(runIn)}`, { field: 'runIn' });
  }
  if (runIn !== 'caller' && !memory && RUNNER !== null) return openRemoteStore(options, runIn, RUNNER);
  let Ctor: typeof BetterSqlite3;
  try {
    Ctor = (await import('better-sqlite3')).default;
  } catch (e) {
    throw new DeliveryError('ERR_STORE_DRIVER_MISSING', 'The SQLite store needs the optional package better-sqlite3 12 or 13 (npm install better-sqlite3@13)', {
      cause: e,
    });
  }
  const where = `sqlite:${options.file}`;
  let db: Db;
  try {
    db = new Ctor(options.file, { timeout: options.busyTimeoutMs ?? SQLITE_DEFAULTS.busyTimeoutMs });
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('SQLITE_')) throw sqliteError(e, where, 'opening the database');
    // better-sqlite3's own checks (e.g. "the directory does not exist")
    throw new DeliveryError('ERR_STORE_UNAVAILABLE', `${where}: cannot open the database (${e instanceof Error ? e.message : String(e)})`, { cause: e });
  }
  const store = new SqliteStore(db, where, options);
  try {
    await store.init();
  } catch (e) {
    db.close();
    throw e;
  }
  return store;
}

class SqliteStore implements DeliveryStore, SqliteCx {
  readonly kind = 'sqlite' as const;
  readonly description: string;
  readonly t: SqliteTables;
  private statements: Statements | null = null;
  private closed = false;

  constructor(
    readonly db: Db,
    where: string,
    private readonly options: SqliteStoreOptions,
  ) {
    this.description = where;
    const p = options.tablePrefix ?? SQLITE_DEFAULTS.tablePrefix;
    if (!/^[A-Za-z_][A-Za-z0-9_]{0,40}$/.test(p))
      throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`tablePrefix\` to be letters, digits and _, got ${JSON.stringify(p)}`, { field: 'tablePrefix' });
    this.t = sqliteTables(p);
  }

  /** The prepared statements (once the tables are made). */
  get s(): Statements {
    return this.statements!;
  }

  /** Runs `fn` on this thread: a closed store refuses, and an error says what failed and what it means. */
  private guard<T>(what: string, fn: () => T): Promise<T> {
    if (this.closed) return Promise.reject(new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`));
    try {
      return Promise.resolve(fn());
    } catch (e) {
      return Promise.reject(sqliteError(e, this.description, what));
    }
  }

  init(): Promise<void> {
    return this.guard('creating the tables', () => {
      if (this.options.file !== ':memory:' && this.options.file !== '') {
        this.db.pragma('journal_mode = WAL');
        // Checkpoints (which copy the log into the file and, at NORMAL, sync both) every
        // 10,000 pages instead of 1,000: each one stalls the store, and a queue
        // writes a few kilobytes of log per item. The log file is cut back to 64 MB after one.
        this.db.pragma(`wal_autocheckpoint = ${SQLITE_WAL_CHECKPOINT_PAGES}`);
        this.db.pragma(`journal_size_limit = ${64 * 1024 * 1024}`);
      }
      this.db.pragma(`synchronous = ${this.options.synchronous ?? SQLITE_DEFAULTS.synchronous}`);
      if (this.options.maxSizeBytes !== undefined) {
        const pageSize = Number(this.db.pragma('page_size', { simple: true }));
        this.db.pragma(`max_page_count = ${Math.max(1, Math.floor(this.options.maxSizeBytes / pageSize))}`);
      }
      migrateSqlite(this.db, this.t, this.description);
      this.statements = prepareStatements(this.db, this.t);
    });
  }

  enqueue(list: readonly NewItem[], now: number): Promise<EnqueueResult[]> {
    return this.guard(`enqueueing ${list.length} item${list.length === 1 ? '' : 's'}`, () => claims.enqueue(this, list, now));
  }

  formBatches(destination: string, limits: BatchLimits, now: number, maxBatches: number): Promise<FormResult> {
    return this.guard('forming batches', () => claims.formBatches(this, destination, limits, now, maxBatches));
  }

  formAndClaim(destination: string, limits: BatchLimits, now: number, maxBatches: number, leaseMs: number, owner: string): Promise<FormAndClaimResult> {
    return this.guard('forming and claiming batches', () => claims.formAndClaim(this, destination, limits, now, maxBatches, leaseMs, owner));
  }

  claimThenForm(destination: string, limits: BatchLimits, now: number, want: number, leaseMs: number, owner: string): Promise<ClaimThenFormResult> {
    return this.guard('claiming and forming batches', () => claims.claimThenForm(this, destination, limits, now, want, leaseMs, owner));
  }

  claim(destination: string, limit: number, now: number, leaseMs: number, owner: string): Promise<ClaimedBatch[]> {
    return this.guard('claiming batches', () => claims.claim(this, destination, limit, now, leaseMs, owner));
  }

  reclaim(destination: string, owner: string, known: readonly Lease[], now: number, leaseMs: number): Promise<ClaimedBatch[]> {
    return this.guard('looking for leases of unknown claims', () => claims.reclaim(this, destination, owner, known, now, leaseMs));
  }

  claimLimited(destination: string, want: number, limits: SharedLimits, now: number, leaseMs: number, owner: string): Promise<LimitedClaim> {
    return this.guard('claiming batches', () => claims.claimLimited(this, destination, want, limits, now, leaseMs, owner));
  }

  endPermit(permit: number, at: number): Promise<void> {
    return this.guard('ending a rate permit', () => claims.endPermit(this, permit, at));
  }

  renew(leases: readonly Lease[], now: number, leaseMs: number): Promise<number[]> {
    if (leases.length === 0) return Promise.resolve([]);
    return this.guard('renewing leases', () => claims.renew(this, leases, now, leaseMs));
  }

  complete(list: readonly Outcome[]): Promise<CompleteResult> {
    if (list.length === 0) return Promise.resolve({ applied: [], lost: [] });
    return this.guard('recording outcomes', () => outcomes.complete(this, list));
  }

  release(leases: readonly Lease[], _now: number): Promise<number> {
    if (leases.length === 0) return Promise.resolve(0);
    return this.guard('releasing claims', () => claims.release(this, leases));
  }

  stats(now: number): Promise<DestinationStats[]> {
    return this.guard('reading statistics', () => queries.stats(this, now));
  }

  /** Rebuilds the counters behind stats() from the tables. */
  recount(): Promise<void> {
    return this.guard('counting the queue', () => outcomes.recount(this));
  }

  list(filter: ListFilter, now: number): Promise<BatchSummary[]> {
    return this.guard('listing batches', () => queries.list(this, filter, now));
  }

  get(id: number): Promise<BatchDetail | null> {
    return this.guard('reading a batch', () => queries.get(this, id));
  }

  requeue(filter: RequeueFilter, now: number): Promise<number> {
    return this.guard('requeueing batches', () => outcomes.requeue(this, filter, now));
  }

  dropStats(): Promise<DropStat[]> {
    return this.guard('reading drop statistics', () => queries.dropStats(this));
  }

  purgeDelivered(before: number): Promise<number> {
    return this.purge('delivered', before, PURGE_DELIVERED_CHUNK);
  }

  purge(state: FinishedState, before: number, limit: number): Promise<number> {
    if (state !== 'delivered' && state !== 'dropped') {
      return Promise.reject(
        new DeliveryError('ERR_INVALID_CONFIG', `Expected \`state\` to be delivered or dropped, got ${JSON.stringify(state)}`, { field: 'state' }),
      );
    }
    return this.guard(`purging ${state} batches`, () => outcomes.purge(this, state, before, limit));
  }

  setPaused(destination: string, paused: boolean, now: number): Promise<boolean> {
    return this.guard(paused ? 'pausing a destination' : 'resuming a destination', () => queries.setPaused(this, destination, paused, now));
  }

  close(): Promise<void> {
    if (!this.closed) {
      this.closed = true;
      try {
        this.db.close();
      } catch {
        // closing twice or after a failure: nothing left to release
      }
    }
    return Promise.resolve();
  }
}
