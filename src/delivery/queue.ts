import { randomUUID } from 'node:crypto';
import { clockOption, systemClock } from '../shared/clock.js';
import type { Clock } from '../core/types.js';
import { checkDestinationName, resolveDestinations, type DestinationOptions, type ResolvedDestination } from './config.js';
import { describe } from '../core/errors.js';
import { DeliveryError } from './errors.js';
import { openStore } from './store.js';
import type { BatchDetail, BatchSummary, DeliveryStore, DestinationStats, DropStat, EnqueueResult, ListFilter, NewItem, RequeueFilter } from './types.js';
import { createWorker, type DeliveryWorker, type WorkerOptions } from './worker.js';

/** Largest payload one item may carry (JSON text, bytes). */
export const MAX_ITEM_BYTES = 16 * 1024 * 1024;

export interface QueueOptions {
  /** A store URL (`sqlite:./relent.db`, `postgres://…`) or an opened store. */
  readonly store: string | DeliveryStore;
  /** The destinations this queue knows. When given, enqueue refuses other names. */
  readonly destinations?: ReadonlyMap<string, ResolvedDestination> | Readonly<Record<string, DestinationOptions>>;
  /** The wall clock used for enqueue times and inspection (default: the system clock). */
  readonly clock?: Clock;
  /** With a store URL: open only a queue that is there (ERR_NO_QUEUE, nothing created), to inspect it. */
  readonly mustExist?: boolean;
  /**
   * With a `sqlite:` URL that does not say `runIn`: where the store's work runs (see
   * SqliteStoreOptions.runIn; default `process`). `caller` suits a short command or a
   * process that does little else: no second process to start (about 90 ms).
   */
  readonly sqliteRunIn?: 'process' | 'thread' | 'caller';
}

export interface EnqueueOptions {
  /** Dedupe key, unique per destination while the item is retained (default: a random UUID). */
  readonly key?: string;
}

/** A persistent delivery queue: enqueue, run workers, inspect and requeue. */
export interface DeliveryQueue {
  readonly store: DeliveryStore;
  readonly destinations: ReadonlyMap<string, ResolvedDestination> | null;
  /** Stores one item durably (resolves once it is committed). */
  enqueue(destination: string, payload: unknown, options?: EnqueueOptions): Promise<EnqueueResult>;
  /** Stores many items in one transaction (all or none). */
  enqueueMany(destination: string, items: readonly { readonly payload: unknown; readonly key?: string }[]): Promise<EnqueueResult[]>;
  /** A worker for this queue's destinations (started by the caller). */
  createWorker(options?: Omit<WorkerOptions, 'store' | 'destinations'>): DeliveryWorker;
  stats(): Promise<DestinationStats[]>;
  list(filter?: ListFilter): Promise<BatchSummary[]>;
  show(id: number): Promise<BatchDetail | null>;
  requeue(filter: RequeueFilter): Promise<number>;
  dropStats(): Promise<DropStat[]>;
  /**
   * Pauses a destination for every worker of the store: none claims its batches until
   * `resume` (requests in flight finish; items are still accepted). Resolves to false when
   * it was paused already.
   */
  pause(destination: string): Promise<boolean>;
  /** Resumes a paused destination (workers in other processes hear of it at once on PostgreSQL, at their next poll on SQLite). False when it was not paused. */
  resume(destination: string): Promise<boolean>;
  /** Closes the store (stop workers first). */
  close(): Promise<void>;
}

function hasControl(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

/** Validates an item and turns its payload into the JSON text that is stored. */
export function prepareItem(destination: string, payload: unknown, key: string | undefined, field = 'item'): NewItem {
  checkDestinationName(destination);
  const k = key ?? randomUUID();
  if (typeof k !== 'string' || k.length === 0 || k.length > 255 || hasControl(k)) {
    throw new DeliveryError('ERR_INVALID_ITEM', `Expected \`${field}.key\` to be 1-255 characters without control characters, got ${describe(k)}`, {
      field: `${field}.key`,
    });
  }
  let text: string | undefined;
  try {
    text = JSON.stringify(payload);
  } catch (e) {
    throw new DeliveryError('ERR_INVALID_ITEM', `Expected \`${field}.payload\` to be JSON-serialisable (${e instanceof Error ? e.message : String(e)})`, {
      field: `${field}.payload`,
      cause: e,
    });
  }
  if (text === undefined)
    throw new DeliveryError('ERR_INVALID_ITEM', `Expected \`${field}.payload\` to be a JSON value, got ${describe(payload)}`, { field: `${field}.payload` });
  if (Buffer.byteLength(text) > MAX_ITEM_BYTES) {
    throw new DeliveryError('ERR_INVALID_ITEM', `Expected \`${field}.payload\` to be at most ${MAX_ITEM_BYTES} bytes of JSON`, { field: `${field}.payload` });
  }
  return { destination, key: k, payload: text };
}

export async function openDeliveryQueue(options: QueueOptions): Promise<DeliveryQueue> {
  const destinations =
    options.destinations === undefined
      ? null
      : options.destinations instanceof Map
        ? (options.destinations as ReadonlyMap<string, ResolvedDestination>)
        : resolveDestinations(options.destinations);
  const store =
    typeof options.store === 'string'
      ? await openStore(options.store, {
          mustExist: options.mustExist === true,
          ...(options.sqliteRunIn !== undefined ? { sqliteRunIn: options.sqliteRunIn } : {}),
        })
      : options.store;
  const clock = clockOption(options.clock) ?? systemClock;
  const workers = new Set<DeliveryWorker>();
  const known = (destination: string): void => {
    if (destinations && !destinations.has(destination)) {
      throw new DeliveryError('ERR_UNKNOWN_DESTINATION', `Unknown destination ${JSON.stringify(destination)} (known: ${[...destinations.keys()].join(', ')})`, {
        field: 'destination',
      });
    }
  };
  /** Workers in this process look for work at once: at `destination` only, when given. */
  const wakeAll = (destination?: string): void => {
    for (const w of workers) w.wake(destination === undefined ? undefined : [destination]);
  };
  return {
    store,
    destinations,
    async enqueue(destination, payload, o = {}) {
      known(destination);
      const [r] = await store.enqueue([prepareItem(destination, payload, o.key)], clock.wallNow());
      wakeAll(destination);
      return r!;
    },
    async enqueueMany(destination, items) {
      known(destination);
      const list = items.map((it, i) => prepareItem(destination, it.payload, it.key, `items[${i}]`));
      const out = await store.enqueue(list, clock.wallNow());
      wakeAll(destination);
      return out;
    },
    createWorker(o = {}) {
      if (!destinations) throw new DeliveryError('ERR_INVALID_CONFIG', 'A worker needs the queue to be opened with `destinations`', { field: 'destinations' });
      const w = createWorker({ clock, ...o, store, destinations });
      workers.add(w);
      return w;
    },
    stats: () => store.stats(clock.wallNow()),
    list: (filter = {}) => store.list(filter, clock.wallNow()),
    show: (id) => store.get(id),
    async requeue(filter) {
      const n = await store.requeue(filter, clock.wallNow());
      if (n > 0) wakeAll();
      return n;
    },
    dropStats: () => store.dropStats(),
    async pause(destination) {
      checkDestinationName(destination);
      return store.setPaused(destination, true, clock.wallNow());
    },
    async resume(destination) {
      checkDestinationName(destination);
      const changed = await store.setPaused(destination, false, clock.wallNow());
      if (changed) wakeAll(destination);
      return changed;
    },
    close: () => store.close(),
  };
}
