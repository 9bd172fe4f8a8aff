// A receiver's dedupe table by idempotency key, shared by the delivery receiver and the
// OpenRTB bidder (billing notices).
import { RelentError, describe } from '../core/errors.js';
import type { Clock } from '../core/types.js';
import { systemClock } from './clock.js';

function intIn(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new RelentError('ERR_INVALID_INPUT', `Expected \`${field}\` to be an integer in [${min}, ${max}], got ${describe(v)}`, { field });
  }
  return v;
}

/** A response as the receiver keeps it for duplicates. */
export interface StoredResponse {
  readonly status: number;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string;
}

export type BeginResult =
  /** First time this key is seen (or it was forgotten): process it, then `complete` or `abort`. */
  | { readonly state: 'new' }
  /** The first request with this key is still being processed; `wait` settles with its response (null if it failed). */
  | { readonly state: 'in_progress'; readonly wait: Promise<StoredResponse | null> }
  /** Already processed: answer with the first response. */
  | { readonly state: 'done'; readonly response: StoredResponse }
  /** The key was used with another payload (draft-ietf-httpapi-idempotency-key-header: 422). */
  | { readonly state: 'mismatch' };

/** Where a receiver remembers keys. The memory cache is one; a database table can be another. */
export interface ReceiptStore {
  begin(key: string, fingerprint: string | null): BeginResult | Promise<BeginResult>;
  complete(key: string, response: StoredResponse): void | Promise<void>;
  /** The processing failed: forget the key so that a retry is processed. */
  abort(key: string): void | Promise<void>;
}

export interface IdempotencyCacheOptions {
  /** Keys kept at most (least recently used go first). Default 100,000. */
  readonly maxKeys?: number;
  /** How long a key is remembered after it was processed (ms). Default 24 h. */
  readonly ttlMs?: number;
  readonly clock?: Clock;
}

export const IDEMPOTENCY_CACHE_DEFAULTS = Object.freeze({ maxKeys: 100_000, ttlMs: 86_400_000 });

interface Entry {
  fingerprint: string | null;
  response: StoredResponse | null;
  expiresAt: number;
  waiters: ((r: StoredResponse | null) => void)[] | null;
}

export interface IdempotencyCache extends ReceiptStore {
  begin(key: string, fingerprint?: string | null): BeginResult;
  complete(key: string, response: StoredResponse): void;
  abort(key: string): void;
  /** Keys held now (in progress and done). */
  readonly size: number;
  /**
   * Runs `fn` once per key: the first call runs it, duplicates get its value (concurrent
   * ones wait for it). A throw forgets the key, so a retry runs `fn` again.
   */
  once<T extends StoredResponse>(key: string, fn: () => Promise<T> | T): Promise<{ readonly response: StoredResponse; readonly duplicate: boolean }>;
}

/**
 * An in-memory dedupe table with bounded memory: at most `maxKeys` keys (least recently
 * used evicted first; keys in progress are never evicted) and each remembered for
 * `ttlMs`. Bound it to cover the senders' retry window: a key evicted or expired before
 * its last retry is processed again (for billing notices retried every 10 s for a
 * minute, minutes are plenty).
 */
export function createIdempotencyCache(options: IdempotencyCacheOptions = {}): IdempotencyCache {
  const maxKeys = intIn(options.maxKeys ?? IDEMPOTENCY_CACHE_DEFAULTS.maxKeys, 'maxKeys', 1, 100_000_000);
  const ttlMs = intIn(options.ttlMs ?? IDEMPOTENCY_CACHE_DEFAULTS.ttlMs, 'ttlMs', 1, 2 ** 31 - 1);
  const clock = options.clock ?? systemClock;
  const map = new Map<string, Entry>();

  const evict = (now: number): void => {
    for (const [k, e] of map) {
      if (map.size <= maxKeys && e.expiresAt > now) break;
      if (e.waiters !== null) continue; // in progress: its owner will complete or abort it
      map.delete(k);
    }
  };

  const cache: IdempotencyCache = {
    get size() {
      return map.size;
    },
    begin(key, fingerprint = null) {
      const now = clock.now();
      const e = map.get(key);
      if (e && (e.waiters !== null || e.expiresAt > now)) {
        map.delete(key);
        map.set(key, e); // most recently used
        if (e.fingerprint !== null && fingerprint !== null && e.fingerprint !== fingerprint) return { state: 'mismatch' };
        if (e.waiters !== null) {
          const waiters = e.waiters;
          return { state: 'in_progress', wait: new Promise<StoredResponse | null>((resolve) => waiters.push(resolve)) };
        }
        return { state: 'done', response: e.response! };
      }
      map.delete(key);
      map.set(key, { fingerprint, response: null, expiresAt: Number.POSITIVE_INFINITY, waiters: [] });
      evict(now);
      return { state: 'new' };
    },
    complete(key, response) {
      const e = map.get(key);
      if (!e) return;
      const waiters = e.waiters ?? [];
      e.response = response;
      e.waiters = null;
      e.expiresAt = clock.now() + ttlMs;
      for (const w of waiters) w(response);
    },
    abort(key) {
      const e = map.get(key);
      if (!e || e.waiters === null) return;
      map.delete(key);
      for (const w of e.waiters) w(null);
    },
    async once(key, fn) {
      for (;;) {
        const b = cache.begin(key);
        if (b.state === 'done') return { response: b.response, duplicate: true };
        if (b.state === 'in_progress') {
          const r = await b.wait;
          if (r) return { response: r, duplicate: true };
          continue; // the first one failed: try to own it
        }
        if (b.state === 'mismatch') throw new Error('unreachable: once() takes no fingerprint');
        try {
          const response = await fn();
          cache.complete(key, response);
          return { response, duplicate: false };
        } catch (e) {
          cache.abort(key);
          throw e;
        }
      }
    },
  };
  return cache;
}

/** The dedupe key of an OpenRTB billing notice: request id + impression id. */
export function noticeKey(requestId: string, impId: string): string {
  return `${requestId}:${impId}`;
}
