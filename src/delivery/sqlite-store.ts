import type BetterSqlite3 from 'better-sqlite3';
import { Worker as Thread } from 'node:worker_threads';
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { cutBatches, type PendingRow } from './batching.js';
import { DeliveryError } from './errors.js';
import {
  assembleStats, listCondition, rowToAttempt, rowToSummary, toClaimed, LIST_DEFAULT_LIMIT, PURGE_DELIVERED_CHUNK, REQUEUE_DEFAULT_LIMIT, SCHEMA_VERSION,
  type AttemptRow, type BatchRow,
} from './store-common.js';
import type {
  BatchDetail, BatchLimits, BatchSummary, ClaimedBatch, CompleteResult, DeliveryStore, DestinationStats, DropStat,
  ClaimThenFormResult, EnqueueResult, FinishedState, FormAndClaimResult, FormResult, Lease, LimitedClaim, ListFilter, NewItem, Outcome, RequeueFilter, SharedLimits,
} from './types.js';

const NOTHING_PENDING: FormResult = Object.freeze({ formed: 0, nextAt: null });

type Db = BetterSqlite3.Database;
type Stmt = BetterSqlite3.Statement;

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
    return new DeliveryError('ERR_STORE_FULL', `${where}: the disk or the database size limit is full (${code || msg}); ${what} was rolled back, nothing stored earlier is lost`, { cause: e });
  }
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) {
    return new DeliveryError('ERR_STORE_LOCKED', `${where}: the database file is locked by another process (${code}) for longer than the busy timeout; ${what} did not happen, nothing stored earlier is lost`, { cause: e });
  }
  if (code.startsWith('SQLITE_CANTOPEN') || code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_READONLY') || code === 'SQLITE_PERM' || code === 'SQLITE_AUTH') {
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
    throw new DeliveryError('ERR_STORE_DRIVER_MISSING', 'The SQLite store needs the optional package better-sqlite3 12 or 13 (npm install better-sqlite3@13)', { cause: e });
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

/**
 * The module that runs the store in a process or thread of its own, beside this one. Only
 * compiled JavaScript can be started there; loaded from TypeScript sources (a test runner's
 * transform) there is none, and the store runs on the caller's thread.
 */
const RUNNER: URL | null = import.meta.url.endsWith('.js') ? new URL('./sqlite-runner.js', import.meta.url) : null;

/** Opens the store in a process (or worker thread) of its own (src/delivery/sqlite-runner.ts) and answers for it here. */
async function openRemoteStore(options: SqliteStoreOptions, runIn: 'process' | 'thread', entry: URL): Promise<DeliveryStore> {
  const where = `sqlite:${options.file}`;
  const child = { ...options, runIn: 'caller' as const };
  let peer: Peer;
  try {
    // None of the process's own node flags (--input-type, --import of a loader, …): the runner runs only the compiled store.
    peer = runIn === 'thread'
      ? new Thread(entry, { workerData: child, execArgv: [] })
      : processPeer(fork(fileURLToPath(entry), [JSON.stringify(child)], {
        // A session of its own, where there are sessions: scheduled as a program of its own (Linux autogroups).
        detached: process.platform !== 'win32', execArgv: [], serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      }));
  } catch (e) {
    throw new DeliveryError('ERR_STORE_UNAVAILABLE', `${where}: cannot start the store's ${runIn} (${e instanceof Error ? e.message : String(e)})`, { cause: e });
  }
  const store = new RemoteSqliteStore(peer, where, runIn);
  try {
    await store.opened;
  } catch (e) {
    await peer.terminate().catch(() => {});
    throw e;
  }
  return store;
}

/** What the caller's side needs of a worker thread or a child process. */
interface Peer {
  on(event: 'message', f: (m: RunnerAnswer) => void): unknown;
  on(event: 'error', f: (e: unknown) => void): unknown;
  on(event: 'exit', f: (code: number | null) => void): unknown;
  postMessage(m: unknown): void;
  ref(): void;
  unref(): void;
  terminate(): Promise<unknown>;
}

/** A child process (IPC channel, structured-clone serialization) as a Peer. */
function processPeer(child: ChildProcess): Peer {
  const channel = child as unknown as { channel?: { ref?(): void; unref?(): void } };
  return {
    on: (event: string, f: (...a: unknown[]) => void) => child.on(event, f),
    postMessage: (m) => {
      child.send(m as never);
    },
    ref: () => {
      child.ref();
      channel.channel?.ref?.();
    },
    unref: () => {
      child.unref();
      channel.channel?.unref?.();
    },
    terminate: () => new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.ref(); // the caller waits for the exit: keep its event loop alive until then
      child.once('exit', () => resolve());
      // Closing the channel ends the runner after it closed the database; a kill if it does not.
      if (child.connected) child.disconnect();
      else child.kill();
    }),
  } as Peer;
}

type RunnerAnswer = readonly [number, 0, unknown] | readonly [number, 1, { code: string; message: string; field: string | null }];

/**
 * The caller's side of a store that runs in a process or thread of its own: each call is
 * posted as a message and its promise settles with the answer. Calls run there in the
 * order they are made, each in its own transaction, exactly as on the caller's thread; a
 * call resolves only after its transaction committed. The runner keeps the caller's
 * process alive only while a call is waiting for its answer.
 */
class RemoteSqliteStore implements DeliveryStore {
  readonly kind = 'sqlite' as const;
  readonly description: string;
  /** Resolves once the thread has opened the database (rejects as opening it would). */
  readonly opened: Promise<void>;
  private readonly waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void }>();
  private next = 1;
  private closed = false;
  /** Why the thread is gone (it exited or failed): every later call fails with it. */
  private gone: DeliveryError | null = null;

  constructor(private readonly thread: Peer, where: string, private readonly runIn: 'process' | 'thread') {
    this.description = where;
    this.opened = new Promise<void>((resolve, reject) => {
      this.waiting.set(0, { resolve: () => resolve(), reject });
    });
    thread.on('message', (m: RunnerAnswer) => {
      const w = this.waiting.get(m[0]);
      if (w === undefined) return;
      this.waiting.delete(m[0]);
      if (this.waiting.size === 0) thread.unref();
      if (m[1] === 0) w.resolve(m[2]);
      else w.reject(new DeliveryError(m[2].code as DeliveryError['code'], m[2].message, { field: m[2].field }));
    });
    const fail = (e: DeliveryError): void => {
      this.gone ??= e;
      const all = [...this.waiting.values()];
      this.waiting.clear();
      for (const w of all) w.reject(this.gone);
    };
    thread.on('error', (e) => fail(new DeliveryError('ERR_STORE', `${where}: the store's ${runIn} failed (${e instanceof Error ? e.message : String(e)})`, { cause: e })));
    thread.on('exit', (code) => fail(this.closed
      ? new DeliveryError('ERR_STORE_CLOSED', `${where}: the store is closed`)
      : new DeliveryError('ERR_STORE', `${where}: the store's ${runIn} ended (exit code ${code})`)));
  }

  private call<T>(method: string, args: readonly unknown[]): Promise<T> {
    if (this.closed || this.gone !== null) return Promise.reject(this.gone ?? new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`));
    return this.post<T>(method, args);
  }

  private post<T>(method: string, args: readonly unknown[]): Promise<T> {
    const id = this.next++;
    return new Promise<T>((resolve, reject) => {
      if (this.waiting.size === 0) this.thread.ref();
      this.waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.thread.postMessage([id, method, args]);
    });
  }

  init(): Promise<void> { return this.call('init', []); }
  enqueue(...a: Parameters<DeliveryStore['enqueue']>): Promise<EnqueueResult[]> { return this.call('enqueue', a); }
  formBatches(...a: Parameters<DeliveryStore['formBatches']>): Promise<FormResult> { return this.call('formBatches', a); }
  formAndClaim(...a: Parameters<NonNullable<DeliveryStore['formAndClaim']>>): Promise<FormAndClaimResult> { return this.call('formAndClaim', a); }
  claimThenForm(...a: Parameters<NonNullable<DeliveryStore['claimThenForm']>>): Promise<ClaimThenFormResult> { return this.call('claimThenForm', a); }
  claim(...a: Parameters<DeliveryStore['claim']>): Promise<ClaimedBatch[]> { return this.call('claim', a); }
  claimLimited(...a: Parameters<DeliveryStore['claimLimited']>): Promise<LimitedClaim> { return this.call('claimLimited', a); }
  reclaim(...a: Parameters<NonNullable<DeliveryStore['reclaim']>>): Promise<ClaimedBatch[]> { return this.call('reclaim', a); }
  endPermit(...a: Parameters<DeliveryStore['endPermit']>): Promise<void> { return this.call('endPermit', a); }
  renew(...a: Parameters<DeliveryStore['renew']>): Promise<number[]> { return a[0].length === 0 ? Promise.resolve([]) : this.call('renew', a); }
  complete(...a: Parameters<DeliveryStore['complete']>): Promise<CompleteResult> { return a[0].length === 0 ? Promise.resolve({ applied: [], lost: [] }) : this.call('complete', a); }
  release(...a: Parameters<DeliveryStore['release']>): Promise<number> { return a[0].length === 0 ? Promise.resolve(0) : this.call('release', a); }
  stats(...a: Parameters<DeliveryStore['stats']>): Promise<DestinationStats[]> { return this.call('stats', a); }
  recount(): Promise<void> { return this.call('recount', []); }
  list(...a: Parameters<DeliveryStore['list']>): Promise<BatchSummary[]> { return this.call('list', a); }
  get(...a: Parameters<DeliveryStore['get']>): Promise<BatchDetail | null> { return this.call('get', a); }
  requeue(...a: Parameters<DeliveryStore['requeue']>): Promise<number> { return this.call('requeue', a); }
  dropStats(): Promise<DropStat[]> { return this.call('dropStats', []); }
  purgeDelivered(...a: Parameters<DeliveryStore['purgeDelivered']>): Promise<number> { return this.call('purgeDelivered', a); }
  purge(...a: Parameters<DeliveryStore['purge']>): Promise<number> { return this.call('purge', a); }
  setPaused(...a: Parameters<DeliveryStore['setPaused']>): Promise<boolean> { return this.call('setPaused', a); }

  /** Closes the database where it runs (after every call posted before), then ends the runner. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.gone === null) await this.post('close', []).catch(() => {});
    await this.thread.terminate().catch(() => {});
  }
}

class SqliteStore implements DeliveryStore {
  readonly kind = 'sqlite' as const;
  readonly description: string;
  private readonly t: { items: string; batches: string; attempts: string; meta: string; dests: string; rate: string; counts: string };
  private s: Record<string, Stmt> = {};
  private closed = false;

  constructor(private readonly db: Db, where: string, private readonly options: SqliteStoreOptions) {
    this.description = where;
    const p = options.tablePrefix ?? SQLITE_DEFAULTS.tablePrefix;
    if (!/^[A-Za-z_][A-Za-z0-9_]{0,40}$/.test(p)) throw new DeliveryError('ERR_INVALID_CONFIG', `Expected \`tablePrefix\` to be letters, digits and _, got ${JSON.stringify(p)}`, { field: 'tablePrefix' });
    this.t = { items: `${p}items`, batches: `${p}batches`, attempts: `${p}attempts`, meta: `${p}meta`, dests: `${p}destinations`, rate: `${p}rate`, counts: `${p}counts` };
  }

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
      const { items, batches, attempts, meta, dests, rate, counts } = this.t;
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
      this.db.exec(`
        CREATE TABLE IF NOT EXISTS ${meta} (k TEXT PRIMARY KEY, v TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS ${items} (
          id INTEGER PRIMARY KEY,
          destination TEXT NOT NULL,
          key TEXT NOT NULL,
          payload TEXT NOT NULL,
          bytes INTEGER NOT NULL,
          enqueued_at INTEGER NOT NULL,
          batch_id INTEGER,
          UNIQUE (destination, key)
        );
        CREATE INDEX IF NOT EXISTS ${items}_pending ON ${items} (destination, id) WHERE batch_id IS NULL;
        CREATE INDEX IF NOT EXISTS ${items}_batch ON ${items} (batch_id);
        CREATE TABLE IF NOT EXISTS ${batches} (
          id INTEGER PRIMARY KEY,
          destination TEXT NOT NULL,
          key TEXT NOT NULL,
          state TEXT NOT NULL,
          items INTEGER NOT NULL,
          bytes INTEGER NOT NULL,
          created_at INTEGER NOT NULL,
          not_before INTEGER NOT NULL,
          due_at INTEGER NOT NULL,
          lease_owner TEXT,
          lease_until INTEGER NOT NULL DEFAULT 0,
          lease_token INTEGER NOT NULL DEFAULT 0,
          claims INTEGER NOT NULL DEFAULT 0,
          round INTEGER NOT NULL DEFAULT 1,
          attempt INTEGER NOT NULL DEFAULT 0,
          op_started_at INTEGER,
          op_deadline_at INTEGER,
          prev_delay_ms INTEGER,
          op_throttled INTEGER NOT NULL DEFAULT 0,
          last_status INTEGER,
          last_error_class TEXT,
          last_decision TEXT,
          last_why TEXT,
          finished_at INTEGER,
          enqueued_at INTEGER
        );
        CREATE INDEX IF NOT EXISTS ${batches}_due ON ${batches} (destination, due_at, id) WHERE state = 'queued';
        CREATE INDEX IF NOT EXISTS ${batches}_dropped ON ${batches} (destination, id) WHERE state = 'dropped';
        DROP INDEX IF EXISTS ${batches}_key;
        CREATE TABLE IF NOT EXISTS ${attempts} (
          batch_id INTEGER NOT NULL,
          round INTEGER NOT NULL,
          attempt INTEGER NOT NULL,
          at INTEGER NOT NULL,
          status INTEGER,
          error_class TEXT,
          elapsed_ms INTEGER NOT NULL,
          decision TEXT NOT NULL,
          why TEXT,
          delay_ms INTEGER,
          retry_after_ms INTEGER,
          worker TEXT,
          PRIMARY KEY (batch_id, round, attempt)
        );
        CREATE TABLE IF NOT EXISTS ${dests} (destination TEXT PRIMARY KEY, paused_at INTEGER);
        CREATE TABLE IF NOT EXISTS ${rate} (id INTEGER PRIMARY KEY, destination TEXT NOT NULL, at INTEGER NOT NULL, n INTEGER NOT NULL, end_at INTEGER NOT NULL);
      `);
      if (!(this.db.pragma(`table_info(${rate})`) as { name: string }[]).some((c) => c.name === 'end_at')) {
        this.db.transaction(() => this.db.exec(`DROP INDEX IF EXISTS ${rate}_window; ALTER TABLE ${rate} ADD COLUMN end_at INTEGER NOT NULL DEFAULT 0; UPDATE ${rate} SET end_at = at`)).immediate();
      }
      this.db.exec(`CREATE INDEX IF NOT EXISTS ${rate}_end ON ${rate} (destination, end_at)`);
      // The counters behind stats() (O(1) on any number of rows): made, and filled from the tables, once.
      // Looked for first outside a transaction: an up-to-date file takes no write lock here
      // (a worker opening a file another process holds locked must not wait on it).
      const hasCounts = (): boolean => this.db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?`).get(counts) !== undefined;
      if (!hasCounts()) this.db.transaction(() => {
        if (hasCounts()) return;
        this.db.exec(`CREATE TABLE ${counts} (destination TEXT NOT NULL, state TEXT NOT NULL, batches INTEGER NOT NULL DEFAULT 0, items INTEGER NOT NULL DEFAULT 0,
          PRIMARY KEY (destination, state))`);
        this.recountLocked();
      }).immediate();
      this.addMissingColumns();
      // Indexes added later (after the columns they name): live leases per destination (shared
      // concurrency, stats) and finished batches by age (retention).
      this.db.exec(`
        CREATE INDEX IF NOT EXISTS ${batches}_leased ON ${batches} (destination, lease_until) WHERE state = 'queued' AND lease_owner IS NOT NULL;
        CREATE INDEX IF NOT EXISTS ${batches}_delivered_at ON ${batches} (finished_at) WHERE state = 'delivered';
        CREATE INDEX IF NOT EXISTS ${batches}_dropped_at ON ${batches} (finished_at) WHERE state = 'dropped';
        CREATE INDEX IF NOT EXISTS ${batches}_oldest ON ${batches} (destination, enqueued_at) WHERE state = 'queued';
      `);
      const v = this.db.prepare(`SELECT v FROM ${meta} WHERE k = 'schema'`).get() as { v: string } | undefined;
      if (v === undefined) this.db.prepare(`INSERT INTO ${meta} (k, v) VALUES ('schema', ?)`).run(String(SCHEMA_VERSION));
      else if (v.v !== String(SCHEMA_VERSION)) {
        throw new DeliveryError('ERR_STORE', `${this.description}: schema version ${v.v}, this relent knows ${SCHEMA_VERSION}`);
      }
      this.prepare();
    });
  }

  /**
   * Columns added to the tables after they were first released: a database created by an
   * earlier relent gets them here (checked again inside a write transaction, so two
   * processes opening the same file do not both add them). Each has a default, so
   * existing rows stay valid. An up-to-date file takes no write lock here.
   */
  private addMissingColumns(): void {
    const { batches } = this.t;
    const has = (name: string): boolean => (this.db.pragma(`table_info(${batches})`) as { name: string }[]).some((c) => c.name === name);
    if (has('op_throttled') && has('enqueued_at')) return;
    this.db.transaction(() => {
      if (!has('op_throttled')) this.db.exec(`ALTER TABLE ${batches} ADD COLUMN op_throttled INTEGER NOT NULL DEFAULT 0`);
      if (!has('enqueued_at')) {
        this.db.exec(`ALTER TABLE ${batches} ADD COLUMN enqueued_at INTEGER`);
        this.db.exec(`UPDATE ${batches} SET enqueued_at = created_at`);
      }
    }).immediate();
  }

  private prepare(): void {
    const { items, batches, attempts, dests, rate, counts } = this.t;
    const p = (sql: string): Stmt => this.db.prepare(sql);
    this.s = {
      insertItem: p(`INSERT INTO ${items} (destination, key, payload, bytes, enqueued_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (destination, key) DO NOTHING RETURNING id`),
      findItem: p(`SELECT id FROM ${items} WHERE destination = ? AND key = ?`),
      anyDue: p(`SELECT 1 FROM ${batches} WHERE state = 'queued' AND destination = ? AND due_at <= ? LIMIT 1`),
      anyPending: p(`SELECT 1 FROM ${items} WHERE destination = ? AND batch_id IS NULL LIMIT 1`),
      pending: p(`SELECT id, key, bytes, enqueued_at AS enqueuedAt FROM ${items} WHERE destination = ? AND batch_id IS NULL ORDER BY id LIMIT ?`),
      insertBatch: p(`INSERT INTO ${batches} (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at) VALUES (?, ?, 'queued', ?, ?, ?, ?, ?, ?) RETURNING id`),
      pendingPayload: p(`SELECT id, key, bytes, enqueued_at AS enqueuedAt, payload FROM ${items} WHERE destination = ? AND batch_id IS NULL ORDER BY id LIMIT ?`),
      // A batch born leased: the row a first claim leaves (token 1, one claim).
      insertLeased: p(`INSERT INTO ${batches} (destination, key, state, items, bytes, created_at, not_before, due_at, enqueued_at, lease_owner, lease_until, lease_token, claims)
        VALUES (?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, 1, 1) RETURNING id`),
      setBatch: p(`UPDATE ${items} SET batch_id = m.b FROM (SELECT value ->> 0 AS i, value ->> 1 AS b FROM json_each(?)) AS m
        WHERE ${items}.id = m.i AND +${items}.batch_id IS NULL`), // `+`: look rows up by id, never scan the index
      // One statement for the whole claim; the subquery picks the oldest due batches.
      lease: p(`UPDATE ${batches} SET lease_token = lease_token + 1, lease_owner = @owner, lease_until = @until, due_at = @until, claims = claims + 1
        WHERE id IN (SELECT id FROM ${batches} WHERE state = 'queued' AND destination = @d AND due_at <= @now
          AND NOT EXISTS (SELECT 1 FROM ${dests} WHERE destination = @d AND paused_at IS NOT NULL) ORDER BY due_at, id LIMIT @limit)
        RETURNING id, destination, key, lease_token, round, attempt, op_started_at, op_deadline_at, prev_delay_ms, op_throttled, created_at, not_before, bytes, due_at`),
      batchItems: p(`SELECT batch_id, key, payload FROM ${items} WHERE batch_id IN (SELECT value FROM json_each(?)) ORDER BY batch_id, id`),
      renew: p(`UPDATE ${batches} SET lease_until = ?, due_at = ? WHERE id = ? AND lease_token = ? AND state = 'queued'`),
      // Fenced: a row is written only while its lease token still matches. Outcomes come as one JSON array.
      complete: p(`UPDATE ${batches} SET state = o.state, not_before = o.nb, due_at = o.nb, lease_owner = NULL, lease_until = 0, attempt = o.att,
          op_started_at = o.os, op_deadline_at = o.od, prev_delay_ms = o.pd, op_throttled = o.ot, last_status = o.ls, last_error_class = o.le, last_decision = o.ld,
          last_why = o.lw, finished_at = o.fa
        FROM (SELECT value ->> 0 AS id, value ->> 1 AS token, value ->> 2 AS state, value ->> 3 AS nb, value ->> 4 AS att, value ->> 5 AS os,
                     value ->> 6 AS od, value ->> 7 AS pd, value ->> 8 AS ls, value ->> 9 AS le, value ->> 10 AS ld, value ->> 11 AS lw,
                     value ->> 12 AS fa, value ->> 13 AS ot FROM json_each(?)) AS o
        WHERE ${batches}.id = o.id AND ${batches}.lease_token = o.token AND +${batches}.state = 'queued'
        RETURNING ${batches}.id AS id, ${batches}.round AS round, ${batches}.destination AS destination, ${batches}.state AS state, ${batches}.items AS items`),
      insertAttempts: p(`INSERT INTO ${attempts} (batch_id, round, attempt, at, status, error_class, elapsed_ms, decision, why, delay_ms, retry_after_ms, worker)
        SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6, value ->> 7, value ->> 8, value ->> 9,
               value ->> 10, value ->> 11 FROM json_each(?) WHERE true
        ON CONFLICT DO NOTHING`),
      release: p(`UPDATE ${batches} SET lease_owner = NULL, lease_until = 0, due_at = not_before WHERE id = ? AND lease_token = ? AND state = 'queued'`),
      getBatch: p(`SELECT * FROM ${batches} WHERE id = ?`),
      getItems: p(`SELECT id, key, payload, enqueued_at AS enqueuedAt FROM ${items} WHERE batch_id = ? ORDER BY id`),
      getAttempts: p(`SELECT * FROM ${attempts} WHERE batch_id = ? ORDER BY round, attempt`),
      paused: p(`SELECT paused_at FROM ${dests} WHERE destination = ?`),
      rateUsed: p(`SELECT coalesce(sum(n), 0) AS used FROM ${rate} WHERE destination = ? AND end_at > ?`),
      rateLog: p(`SELECT end_at, n FROM ${rate} WHERE destination = ? AND end_at > ? ORDER BY end_at, id`),
      rateGone: p(`DELETE FROM ${rate} WHERE destination = ? AND end_at <= ?`),
      rateTake: p(`INSERT INTO ${rate} (destination, at, n, end_at) VALUES (?, ?, ?, ?) RETURNING id`),
      rateEnd: p(`UPDATE ${rate} SET end_at = min(end_at, ?) WHERE id = ?`),
      leased: p(`SELECT count(*) AS n FROM ${batches} WHERE destination = ? AND state = 'queued' AND lease_owner IS NOT NULL AND lease_until > ?`),
      count: p(`INSERT INTO ${counts} (destination, state, batches, items) VALUES (?, ?, ?, ?)
        ON CONFLICT (destination, state) DO UPDATE SET batches = batches + excluded.batches, items = items + excluded.items`),
      requeueOne: p(`UPDATE ${batches} SET state = 'queued', round = round + 1, attempt = 0, op_started_at = NULL, op_deadline_at = NULL,
        prev_delay_ms = NULL, op_throttled = 0, not_before = ?, due_at = ?, lease_owner = NULL, lease_until = 0, lease_token = lease_token + 1, finished_at = NULL
        WHERE id = ? AND state = 'dropped' RETURNING destination, items`),
    };
  }

  enqueue(list: readonly NewItem[], now: number): Promise<EnqueueResult[]> {
    return this.guard(`enqueueing ${list.length} item${list.length === 1 ? '' : 's'}`, () => this.db.transaction(() => {
      const out: EnqueueResult[] = [];
      const fresh = new Map<string, number>();
      for (const it of list) {
        const row = this.s.insertItem!.get(it.destination, it.key, it.payload, Buffer.byteLength(it.payload), now) as { id: number } | undefined;
        if (row) {
          out.push({ id: row.id, key: it.key, duplicate: false });
          fresh.set(it.destination, (fresh.get(it.destination) ?? 0) + 1);
        } else out.push({ id: (this.s.findItem!.get(it.destination, it.key) as { id: number }).id, key: it.key, duplicate: true });
      }
      for (const [d, n] of fresh) this.s.count!.run(d, 'pending', 0, n);
      return out;
    }).immediate());
  }

  formBatches(destination: string, limits: BatchLimits, now: number, maxBatches: number): Promise<FormResult> {
    return this.guard('forming batches', () => {
      // A read first, without the write lock: most cycles find nothing to aggregate.
      if (this.s.anyPending!.get(destination) === undefined) return NOTHING_PENDING;
      return this.formLocked(destination, limits, now, maxBatches);
    });
  }

  private formLocked(destination: string, limits: BatchLimits, now: number, maxBatches: number): FormResult {
    return this.db.transaction(() => {
      const limit = Math.max(1, maxBatches * limits.maxItems);
      const rows = this.s.pending!.all(destination, limit) as PendingRow[];
      if (rows.length === 0) return NOTHING_PENDING;
      const { cuts, nextAt } = cutBatches(destination, rows, limits, now, maxBatches, rows.length < limit);
      const pairs: [number, number][] = [];
      for (const cut of cuts) {
        const { id } = this.s.insertBatch!.get(destination, cut.key, cut.rows.length, cut.bytes, now, now, now, cut.rows[0]!.enqueuedAt) as { id: number };
        for (const r of cut.rows) pairs.push([r.id, id]);
      }
      if (pairs.length > 0) {
        this.s.setBatch!.run(JSON.stringify(pairs));
        this.s.count!.run(destination, 'pending', 0, -pairs.length);
        this.s.count!.run(destination, 'queued', cuts.length, pairs.length);
      }
      return { formed: cuts.length, nextAt };
    }).immediate();
  }

  formAndClaim(destination: string, limits: BatchLimits, now: number, maxBatches: number, leaseMs: number, owner: string): Promise<FormAndClaimResult> {
    return this.guard('forming and claiming batches', () => {
      if (this.s.anyPending!.get(destination) === undefined) return { claimed: [], nextAt: null };
      return this.db.transaction(() => this.formAndClaimLocked(destination, limits, now, maxBatches, leaseMs, owner)).immediate();
    });
  }

  claimThenForm(destination: string, limits: BatchLimits, now: number, want: number, leaseMs: number, owner: string): Promise<ClaimThenFormResult> {
    return this.guard('claiming and forming batches', () => {
      // Reads first, without the write lock: a write transaction only when there is something to lease.
      const anyDue = this.s.anyDue!.get(destination, now) !== undefined;
      const anyPending = this.s.anyPending!.get(destination) !== undefined;
      if (!anyDue && !anyPending) return { claimed: [], due: 0, formed: true, nextAt: null };
      return this.db.transaction((): ClaimThenFormResult => {
        const due = anyDue ? this.claimLocked(destination, want, now, leaseMs, owner) : [];
        if (due.length >= want) return { claimed: due, due: due.length, formed: false, nextAt: null };
        const r = anyPending ? this.formAndClaimLocked(destination, limits, now, want - due.length, leaseMs, owner) : { claimed: [], nextAt: null };
        return { claimed: due.length === 0 ? r.claimed : due.concat(r.claimed), due: due.length, formed: true, nextAt: r.nextAt };
      }).immediate();
    });
  }

  /** Seals up to `maxBatches` batches of pending items, born leased to `owner` (inside a write transaction). */
  private formAndClaimLocked(destination: string, limits: BatchLimits, now: number, maxBatches: number, leaseMs: number, owner: string): FormAndClaimResult {
    const p = this.s.paused!.get(destination) as { paused_at: number | null } | undefined;
    if (p && p.paused_at !== null) return { claimed: [], nextAt: null };
    const limit = Math.max(1, maxBatches * limits.maxItems);
    const rows = this.s.pendingPayload!.all(destination, limit) as (PendingRow & { payload: string })[];
    if (rows.length === 0) return { claimed: [], nextAt: null };
    const { cuts, nextAt } = cutBatches(destination, rows, limits, now, maxBatches, rows.length < limit);
    const until = now + leaseMs;
    const pairs: [number, number][] = [];
    const claimed: ClaimedBatch[] = [];
    for (const cut of cuts) {
      const { id } = this.s.insertLeased!.get(destination, cut.key, cut.rows.length, cut.bytes, now, now, until, cut.rows[0]!.enqueuedAt, owner, until) as { id: number };
      for (const r of cut.rows) pairs.push([r.id, id]);
      claimed.push({
        id, token: 1, destination, key: cut.key, round: 1, attempt: 0, opStartedAt: null, opDeadlineAt: null, prevDelayMs: null, opThrottled: 0,
        createdAt: now, notBefore: now, bytes: cut.bytes, items: cut.rows.map((r) => ({ key: r.key, payload: (r as PendingRow & { payload: string }).payload })),
      });
    }
    if (pairs.length > 0) {
      this.s.setBatch!.run(JSON.stringify(pairs));
      this.s.count!.run(destination, 'pending', 0, -pairs.length);
      this.s.count!.run(destination, 'queued', cuts.length, pairs.length);
    }
    return { claimed, nextAt };
  }

  claim(destination: string, limit: number, now: number, leaseMs: number, owner: string): Promise<ClaimedBatch[]> {
    return this.guard('claiming batches', () => {
      // A read first, without the write lock: most looks for due batches (retries, expired
      // leases) find none, and then no write transaction is begun.
      if (this.s.anyDue!.get(destination, now) === undefined) return [];
      return this.db.transaction(() => this.claimLocked(destination, limit, now, leaseMs, owner)).immediate();
    });
  }

  private claimLocked(destination: string, limit: number, now: number, leaseMs: number, owner: string): ClaimedBatch[] {
    const until = now + leaseMs;
    const rows = this.s.lease!.all({ owner, until, d: destination, now, limit }) as BatchRow[];
    if (rows.length === 0) return [];
    return toClaimed(rows, this.s.batchItems!.all(JSON.stringify(rows.map((r) => r.id))) as { batch_id: number; key: string; payload: string }[]);
  }

  reclaim(destination: string, owner: string, known: readonly Lease[], now: number, leaseMs: number): Promise<ClaimedBatch[]> {
    return this.guard('looking for leases of unknown claims', () => this.db.transaction(() => {
      const rows = this.db.prepare(`UPDATE ${this.t.batches} SET lease_until = @until, due_at = @until
        WHERE state = 'queued' AND destination = @d AND lease_owner = @owner AND lease_until > @now
          AND NOT EXISTS (SELECT 1 FROM json_each(@known) k WHERE json_extract(k.value, '$[0]') = ${this.t.batches}.id AND json_extract(k.value, '$[1]') = ${this.t.batches}.lease_token)
        RETURNING *`).all({ until: now + leaseMs, d: destination, owner, now, known: JSON.stringify(known.map((l) => [l.id, l.token])) }) as BatchRow[];
      if (rows.length === 0) return [];
      return toClaimed(rows, this.s.batchItems!.all(JSON.stringify(rows.map((r) => r.id))) as { batch_id: number; key: string; payload: string }[]);
    }).immediate());
  }

  claimLimited(destination: string, want: number, limits: SharedLimits, now: number, leaseMs: number, owner: string): Promise<LimitedClaim> {
    // One write transaction: every process's claims of the database are serialised by SQLite's lock.
    return this.guard('claiming batches', () => this.db.transaction((): LimitedClaim => {
      const p = this.s.paused!.get(destination) as { paused_at: number | null } | undefined;
      if (p && p.paused_at !== null) return { claimed: [], retryAt: null, permit: null };
      let allowed = want;
      if (limits.concurrency !== null) allowed = Math.min(allowed, limits.concurrency - (this.s.leased!.get(destination, now) as { n: number }).n);
      const rate = limits.rate;
      let used = 0;
      const since = rate === null ? 0 : now - rate.perMs;
      if (rate !== null) {
        this.s.rateGone!.run(destination, since);
        used = (this.s.rateUsed!.get(destination, since) as { used: number }).used;
        allowed = Math.min(allowed, rate.requests - used);
      }
      const claimed = allowed > 0 ? this.claimLocked(destination, allowed, now, leaseMs, owner) : [];
      if (rate === null) return { claimed, retryAt: null, permit: null };
      let retryAt: number | null = null;
      if (used + claimed.length >= rate.requests) {
        // The window is full: one more fits when enough of its entries have aged out (this claim's own last).
        let need = used + claimed.length - rate.requests + 1;
        retryAt = now + leaseMs + rate.perMs;
        for (const r of this.s.rateLog!.iterate(destination, since) as Iterable<{ end_at: number; n: number }>) {
          need -= r.n;
          if (need <= 0) {
            retryAt = r.end_at + rate.perMs;
            break;
          }
        }
      }
      const permit = claimed.length > 0 ? (this.s.rateTake!.get(destination, now, claimed.length, now + leaseMs) as { id: number }).id : null;
      return { claimed, retryAt, permit };
    }).immediate());
  }

  endPermit(permit: number, at: number): Promise<void> {
    return this.guard('ending a rate permit', () => {
      this.s.rateEnd!.run(at, permit);
    });
  }

  renew(leases: readonly Lease[], now: number, leaseMs: number): Promise<number[]> {
    if (leases.length === 0) return Promise.resolve([]);
    return this.guard('renewing leases', () => this.db.transaction(() => {
      const until = now + leaseMs;
      const lost: number[] = [];
      for (const l of leases) if (this.s.renew!.run(until, until, l.id, l.token).changes === 0) lost.push(l.id);
      return lost;
    }).immediate());
  }

  complete(outcomes: readonly Outcome[]): Promise<CompleteResult> {
    if (outcomes.length === 0) return Promise.resolve({ applied: [], lost: [] });
    return this.guard('recording outcomes', () => this.db.transaction(() => {
      const rows = outcomes.map((o) => [o.id, o.token, o.state, o.notBefore, o.attempt, o.opStartedAt, o.opDeadlineAt, o.prevDelayMs,
        o.lastStatus, o.lastErrorClass, o.lastDecision, o.lastWhy, o.finishedAt, o.opThrottled]);
      const done = this.s.complete!.all(JSON.stringify(rows)) as { id: number; round: number; destination: string; state: string; items: number }[];
      const roundOf = new Map(done.map((r) => [r.id, r.round]));
      this.countMoves(done.filter((r) => r.state !== 'queued').map((r) => ({ destination: r.destination, from: 'queued', to: r.state, items: r.items })));
      const records: unknown[] = [];
      for (const o of outcomes) {
        const round = roundOf.get(o.id);
        const r = o.record;
        if (round === undefined || !r) continue;
        records.push([o.id, round, r.attempt, r.at, r.status, r.errorClass, r.elapsedMs, r.decision, r.why, r.delayMs, r.retryAfterMs, r.worker]);
      }
      if (records.length > 0) this.s.insertAttempts!.run(JSON.stringify(records));
      // Written already by this very claim (the same write made again): done, not lost.
      const again = (o: Outcome): boolean => {
        if (o.state === 'queued') return false;
        const row = this.db.prepare(`SELECT state, lease_token FROM ${this.t.batches} WHERE id = ?`).get(o.id) as { state: string; lease_token: number } | undefined;
        return row !== undefined && row.state === o.state && Number(row.lease_token) === o.token;
      };
      const applied: number[] = [];
      const lost: number[] = [];
      for (const o of outcomes) (roundOf.has(o.id) || again(o) ? applied : lost).push(o.id);
      return { applied, lost };
    }).immediate());
  }

  release(leases: readonly Lease[], _now: number): Promise<number> {
    if (leases.length === 0) return Promise.resolve(0);
    return this.guard('releasing claims', () => this.db.transaction(() => {
      let n = 0;
      for (const l of leases) n += this.s.release!.run(l.id, l.token).changes;
      return n;
    }).immediate());
  }

  /** As the PostgreSQL store: counters for the totals, indexes for the rest; no statement reads the whole queue. */
  stats(now: number): Promise<DestinationStats[]> {
    return this.guard('reading statistics', () => {
      const { items, batches, dests, counts } = this.t;
      const totals = this.db.prepare(`SELECT destination, state, batches AS b, items AS i FROM ${counts}`).all() as { destination: string; state: string; b: number; i: number }[];
      const inflight = this.db.prepare(`SELECT destination, count(*) AS b, coalesce(sum(items), 0) AS i FROM ${batches}
        WHERE state = 'queued' AND lease_owner IS NOT NULL AND lease_until > ? GROUP BY destination`).all(now) as { destination: string; b: number; i: number }[];
      const deferred = this.db.prepare(`SELECT count(*) AS b, coalesce(sum(items), 0) AS i,
          (SELECT min(enqueued_at) FROM ${batches} WHERE state = 'queued' AND destination = @d) AS oldest_b,
          (SELECT enqueued_at FROM ${items} WHERE destination = @d AND batch_id IS NULL ORDER BY id LIMIT 1) AS oldest_p
        FROM ${batches} WHERE state = 'queued' AND destination = @d AND due_at > @now AND lease_until <= @now`);
      const per = [...new Set(totals.map((r) => r.destination))].map((d) => ({ destination: d, ...(deferred.get({ d, now }) as { b: number; i: number; oldest_b: number | null; oldest_p: number | null }) }));
      const paused = (this.db.prepare(`SELECT destination FROM ${dests} WHERE paused_at IS NOT NULL`).all() as { destination: string }[]).map((r) => r.destination);
      return assembleStats(totals, inflight, per, paused);
    });
  }

  /** Rebuilds the counters behind stats() from the tables. */
  recount(): Promise<void> {
    return this.guard('counting the queue', () => this.db.transaction(() => this.recountLocked()).immediate());
  }

  private recountLocked(): void {
    const { items, batches, counts } = this.t;
    this.db.exec(`DELETE FROM ${counts};
      INSERT INTO ${counts} (destination, state, batches, items)
        SELECT destination, 'pending', 0, count(*) FROM ${items} WHERE batch_id IS NULL GROUP BY destination
        UNION ALL SELECT destination, state, count(*), coalesce(sum(items), 0) FROM ${batches} GROUP BY destination, state;`);
  }

  /** Batches that changed state (to null: deleted): the counters follow. */
  private countMoves(moves: readonly { destination: string; from: string; to: string | null; items: number }[]): void {
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
    for (const [dest, state, b, i] of d.values()) this.s.count!.run(dest, state, b, i);
  }

  list(filter: ListFilter, now: number): Promise<BatchSummary[]> {
    return this.guard('listing batches', () => {
      const where: string[] = [];
      const params: Record<string, unknown> = { now, after: filter.afterId ?? 0, limit: filter.limit ?? LIST_DEFAULT_LIMIT };
      const cond = listCondition(filter.state, '@now');
      if (cond) where.push(cond);
      if (filter.destination !== undefined) {
        where.push('destination = @destination');
        params.destination = filter.destination;
      }
      if (filter.reason !== undefined) {
        where.push('last_decision = @reason');
        params.reason = filter.reason;
      }
      where.push('id > @after');
      const rows = this.db.prepare(`SELECT * FROM ${this.t.batches} WHERE ${where.join(' AND ')} ORDER BY id LIMIT @limit`).all(params) as BatchRow[];
      return rows.map(rowToSummary);
    });
  }

  get(id: number): Promise<BatchDetail | null> {
    return this.guard('reading a batch', () => {
      const b = this.s.getBatch!.get(id) as BatchRow | undefined;
      if (!b) return null;
      return {
        ...rowToSummary(b),
        itemList: this.s.getItems!.all(id) as BatchDetail['itemList'],
        attempts: (this.s.getAttempts!.all(id) as AttemptRow[]).map(rowToAttempt),
      };
    });
  }

  requeue(filter: RequeueFilter, now: number): Promise<number> {
    return this.guard('requeueing batches', () => this.db.transaction(() => {
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
      const ids = this.db.prepare(`SELECT id FROM ${this.t.batches} WHERE ${where.join(' AND ')} ORDER BY id LIMIT ?`).all(...params) as { id: number }[];
      let n = 0;
      const moved: { destination: string; from: string; to: string; items: number }[] = [];
      for (const { id } of ids) {
        const r = this.s.requeueOne!.get(now, now, id) as { destination: string; items: number } | undefined;
        if (!r) continue;
        n++;
        moved.push({ destination: r.destination, from: 'dropped', to: 'queued', items: r.items });
      }
      this.countMoves(moved);
      return n;
    }).immediate());
  }

  dropStats(): Promise<DropStat[]> {
    return this.guard('reading drop statistics', () => (this.db.prepare(`SELECT destination, last_decision AS reason, last_why AS why, last_status AS lastStatus,
        last_error_class AS lastErrorClass, count(*) AS batches, sum(items) AS items
      FROM ${this.t.batches} WHERE state = 'dropped'
      GROUP BY destination, last_decision, last_why, last_status, last_error_class
      ORDER BY batches DESC, destination`).all() as DropStat[]).map((r) => ({ ...r, reason: r.reason ?? 'unknown' })));
  }

  purgeDelivered(before: number): Promise<number> {
    return this.purge('delivered', before, PURGE_DELIVERED_CHUNK);
  }

  purge(state: FinishedState, before: number, limit: number): Promise<number> {
    if (state !== 'delivered' && state !== 'dropped') {
      return Promise.reject(new DeliveryError('ERR_INVALID_CONFIG', `Expected \`state\` to be delivered or dropped, got ${JSON.stringify(state)}`, { field: 'state' }));
    }
    return this.guard(`purging ${state} batches`, () => this.db.transaction(() => {
      const { items, batches, attempts } = this.t;
      // At most `limit` batches per call (one short transaction), oldest first, through the finished index.
      const rows = this.db.prepare(`SELECT id, destination, items FROM ${batches} WHERE state = '${state}' AND finished_at < ? ORDER BY finished_at LIMIT ?`)
        .all(before, limit) as { id: number; destination: string; items: number }[];
      const ids = JSON.stringify(rows.map((r) => r.id));
      const sub = 'SELECT value FROM json_each(?)';
      this.db.prepare(`DELETE FROM ${items} WHERE batch_id IN (${sub})`).run(ids);
      this.db.prepare(`DELETE FROM ${attempts} WHERE batch_id IN (${sub})`).run(ids);
      this.countMoves(rows.map((r) => ({ destination: r.destination, from: state, to: null, items: r.items })));
      return this.db.prepare(`DELETE FROM ${batches} WHERE id IN (${sub})`).run(ids).changes;
    }).immediate());
  }

  setPaused(destination: string, paused: boolean, now: number): Promise<boolean> {
    return this.guard(paused ? 'pausing a destination' : 'resuming a destination', () => {
      const { dests } = this.t;
      const r = paused
        ? this.db.prepare(`INSERT INTO ${dests} (destination, paused_at) VALUES (?, ?) ON CONFLICT (destination) DO UPDATE SET paused_at = excluded.paused_at WHERE paused_at IS NULL`).run(destination, now)
        : this.db.prepare(`UPDATE ${dests} SET paused_at = NULL WHERE destination = ? AND paused_at IS NOT NULL`).run(destination);
      return r.changes > 0;
    });
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
