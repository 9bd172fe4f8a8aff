// The caller's side of a SQLite store that runs in a process (or a worker thread) of its
// own: each call is posted to src/delivery/sqlite-runner.ts and answered there.
import { Worker as Thread } from 'node:worker_threads';
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { DeliveryError } from './errors.js';
import type { SqliteStoreOptions } from './sqlite-store.js';
import type {
  BatchDetail,
  BatchSummary,
  ClaimedBatch,
  CompleteResult,
  DeliveryStore,
  DestinationStats,
  DropStat,
  ClaimThenFormResult,
  EnqueueResult,
  FormAndClaimResult,
  FormResult,
  LimitedClaim,
} from './types.js';

/**
 * The module that runs the store in a process or thread of its own, beside this one. Only
 * compiled JavaScript can be started there; loaded from TypeScript sources (a test runner's
 * transform) there is none, and the store runs on the caller's thread.
 */
export const RUNNER: URL | null = import.meta.url.endsWith('.js') ? new URL('./sqlite-runner.js', import.meta.url) : null;

/** Opens the store in a process (or worker thread) of its own (src/delivery/sqlite-runner.ts) and answers for it here. */
export async function openRemoteStore(options: SqliteStoreOptions, runIn: 'process' | 'thread', entry: URL): Promise<DeliveryStore> {
  const where = `sqlite:${options.file}`;
  const child = { ...options, runIn: 'caller' as const };
  let peer: Peer;
  try {
    // None of the process's own node flags (--input-type, --import of a loader, …): the runner runs only the compiled store.
    peer =
      runIn === 'thread'
        ? new Thread(entry, { workerData: child, execArgv: [] })
        : processPeer(
            fork(fileURLToPath(entry), [JSON.stringify(child)], {
              // A session of its own, where there are sessions: scheduled as a program of its own (Linux autogroups).
              detached: process.platform !== 'win32',
              execArgv: [],
              serialization: 'advanced',
              stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
            }),
          );
  } catch (e) {
    throw new DeliveryError('ERR_STORE_UNAVAILABLE', `${where}: cannot start the store's ${runIn} (${e instanceof Error ? e.message : String(e)})`, {
      cause: e,
    });
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
    terminate: () =>
      new Promise<void>((resolve) => {
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

  constructor(
    private readonly thread: Peer,
    where: string,
    private readonly runIn: 'process' | 'thread',
  ) {
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
    thread.on('error', (e) =>
      fail(new DeliveryError('ERR_STORE', `${where}: the store's ${runIn} failed (${e instanceof Error ? e.message : String(e)})`, { cause: e })),
    );
    thread.on('exit', (code) =>
      fail(
        this.closed
          ? new DeliveryError('ERR_STORE_CLOSED', `${where}: the store is closed`)
          : new DeliveryError('ERR_STORE', `${where}: the store's ${runIn} ended (exit code ${code})`),
      ),
    );
  }

  private call<T>(method: string, args: readonly unknown[]): Promise<T> {
    if (this.closed || this.gone !== null)
      return Promise.reject(this.gone ?? new DeliveryError('ERR_STORE_CLOSED', `${this.description}: the store is closed`));
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

  init(): Promise<void> {
    return this.call('init', []);
  }
  enqueue(...a: Parameters<DeliveryStore['enqueue']>): Promise<EnqueueResult[]> {
    return this.call('enqueue', a);
  }
  formBatches(...a: Parameters<DeliveryStore['formBatches']>): Promise<FormResult> {
    return this.call('formBatches', a);
  }
  formAndClaim(...a: Parameters<NonNullable<DeliveryStore['formAndClaim']>>): Promise<FormAndClaimResult> {
    return this.call('formAndClaim', a);
  }
  claimThenForm(...a: Parameters<NonNullable<DeliveryStore['claimThenForm']>>): Promise<ClaimThenFormResult> {
    return this.call('claimThenForm', a);
  }
  claim(...a: Parameters<DeliveryStore['claim']>): Promise<ClaimedBatch[]> {
    return this.call('claim', a);
  }
  claimLimited(...a: Parameters<DeliveryStore['claimLimited']>): Promise<LimitedClaim> {
    return this.call('claimLimited', a);
  }
  reclaim(...a: Parameters<NonNullable<DeliveryStore['reclaim']>>): Promise<ClaimedBatch[]> {
    return this.call('reclaim', a);
  }
  endPermit(...a: Parameters<DeliveryStore['endPermit']>): Promise<void> {
    return this.call('endPermit', a);
  }
  renew(...a: Parameters<DeliveryStore['renew']>): Promise<number[]> {
    return a[0].length === 0 ? Promise.resolve([]) : this.call('renew', a);
  }
  complete(...a: Parameters<DeliveryStore['complete']>): Promise<CompleteResult> {
    return a[0].length === 0 ? Promise.resolve({ applied: [], lost: [] }) : this.call('complete', a);
  }
  release(...a: Parameters<DeliveryStore['release']>): Promise<number> {
    return a[0].length === 0 ? Promise.resolve(0) : this.call('release', a);
  }
  stats(...a: Parameters<DeliveryStore['stats']>): Promise<DestinationStats[]> {
    return this.call('stats', a);
  }
  recount(): Promise<void> {
    return this.call('recount', []);
  }
  list(...a: Parameters<DeliveryStore['list']>): Promise<BatchSummary[]> {
    return this.call('list', a);
  }
  get(...a: Parameters<DeliveryStore['get']>): Promise<BatchDetail | null> {
    return this.call('get', a);
  }
  requeue(...a: Parameters<DeliveryStore['requeue']>): Promise<number> {
    return this.call('requeue', a);
  }
  dropStats(): Promise<DropStat[]> {
    return this.call('dropStats', []);
  }
  purgeDelivered(...a: Parameters<DeliveryStore['purgeDelivered']>): Promise<number> {
    return this.call('purgeDelivered', a);
  }
  purge(...a: Parameters<DeliveryStore['purge']>): Promise<number> {
    return this.call('purge', a);
  }
  setPaused(...a: Parameters<DeliveryStore['setPaused']>): Promise<boolean> {
    return this.call('setPaused', a);
  }

  /** Closes the database where it runs (after every call posted before), then ends the runner. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.gone === null) await this.post('close', []).catch(() => {});
    await this.thread.terminate().catch(() => {});
  }
}
