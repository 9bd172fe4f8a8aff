/**
 * Where the SQLite store runs when it does not run on the caller's thread: a process of its
 * own (the default for a database file; started by `openSqliteStore`, connected by an IPC
 * channel) or a worker thread. It opens the store here and runs each call the caller
 * posts, one at a time, in the order they were posted; every answer goes back as a
 * message. Nothing else runs here, so a store call's work (SQLite's statements, the
 * write-ahead log, checkpoints) never holds up the caller's event loop. A process ends
 * when its caller's channel closes (the caller closed the store, exited or was killed),
 * after closing the database.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { DeliveryError } from './errors.js';
import { openSqliteStore, type SqliteStoreOptions } from './sqlite-store.js';
import type { DeliveryStore } from './types.js';

/** A call: [id, method, arguments]. The answer: [id, 0, value] or [id, 1, error]. Id 0 is the opening. */
export type ThreadCall = readonly [number, string, readonly unknown[]];
export type ThreadAnswer = readonly [number, 0, unknown] | readonly [number, 1, ThreadError];
export interface ThreadError {
  readonly code: string;
  readonly message: string;
  readonly field: string | null;
}

function toThreadError(e: unknown): ThreadError {
  if (DeliveryError.is(e)) return { code: e.code, message: e.message, field: e.field };
  return { code: 'ERR_STORE', message: e instanceof Error ? e.message : String(e), field: null };
}

async function serve(): Promise<void> {
  const ipc = parentPort === null && typeof process.send === 'function';
  const port =
    parentPort ??
    (ipc
      ? {
          // The caller may be gone (it exited, or was killed): an answer nobody reads is dropped, not an error.
          postMessage: (m: unknown) => {
            if (process.connected) process.send!(m, undefined, undefined, () => {});
          },
          on: (ev: 'message', f: (m: ThreadCall) => void) => process.on(ev, f as never),
          close: () => process.disconnect(),
        }
      : null);
  if (port === null) return;
  if (ipc) {
    process.on('disconnect', () => {
      void (store?.close() ?? Promise.resolve()).finally(() => process.exit(0));
    });
  }
  let store: DeliveryStore | undefined;
  try {
    const options = (ipc ? JSON.parse(process.argv[2]!) : workerData) as SqliteStoreOptions;
    store = await openSqliteStore({ ...options, runIn: 'caller' });
  } catch (e) {
    port.postMessage([0, 1, toThreadError(e)] satisfies ThreadAnswer);
    return;
  }
  const methods = store as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  port.on('message', ([id, method, args]: ThreadCall) => {
    const f = methods[method];
    if (typeof f !== 'function') {
      port.postMessage([id, 1, { code: 'ERR_STORE', message: `internal: the SQLite store has no method ${method}`, field: null }] satisfies ThreadAnswer);
      return;
    }
    // The store's methods do their work before they return (better-sqlite3 is synchronous),
    // so calls run one after the other, in the order they came.
    f.apply(store!, args as unknown[]).then(
      (value) => {
        port.postMessage([id, 0, value] satisfies ThreadAnswer);
        if (method === 'close') port.close();
      },
      (e: unknown) => port.postMessage([id, 1, toThreadError(e)] satisfies ThreadAnswer),
    );
  });
  port.postMessage([0, 0, null] satisfies ThreadAnswer);
}

void serve();
