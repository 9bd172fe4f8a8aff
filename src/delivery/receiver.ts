import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Clock } from '../core/types.js';
import { keyFromHeader } from '../http/idempotency.js';
import { systemClock } from '../run/clock.js';
import { intIn } from './config.js';

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

export interface IdempotentHandlerOptions {
  /** Where keys are remembered (default: a new in-memory cache with its defaults). */
  readonly receipts?: ReceiptStore;
  /** The key of a request; default: the `Idempotency-Key` header. null: no key. */
  readonly keyOf?: (req: IncomingMessage, body: Buffer) => string | null;
  /** A request without a key: `process` it without dedupe (default) or `reject` it with 400. */
  readonly missingKey?: 'process' | 'reject';
  /** A duplicate that arrives while the first is in progress: `wait` for its answer (default) or `conflict` (409, as the draft says). */
  readonly concurrent?: 'wait' | 'conflict';
  /** Refuse a known key with another body (422). Default true. */
  readonly checkPayload?: boolean;
  /** Largest request body read (bytes); more → 413. Default 16 MiB. */
  readonly maxBodyBytes?: number;
  /** Called for every request: whether it was a duplicate (for counting). */
  readonly onRequest?: (info: { readonly key: string | null; readonly duplicate: boolean; readonly status: number }) => void;
}

export type IdempotentHandler = (req: IncomingMessage, body: Buffer, key: string | null) => StoredResponse | Promise<StoredResponse>;

/**
 * A node:http request listener that processes each idempotency key once: the first
 * request runs `handler`; a duplicate gets the first response again (with
 * `Idempotent-Replayed: true`), without running it. Answers of 5xx and thrown errors
 * are not remembered, so the sender's retry is processed. A known key with a different
 * body is refused with 422 (draft-ietf-httpapi-idempotency-key-header).
 */
export function createIdempotentHandler(handler: IdempotentHandler, options: IdempotentHandlerOptions = {}): (req: IncomingMessage, res: ServerResponse) => void {
  const receipts = options.receipts ?? createIdempotencyCache();
  const maxBody = options.maxBodyBytes ?? 16 * 1024 * 1024;
  const keyOf = options.keyOf ?? ((req: IncomingMessage) => {
    const h = req.headers['idempotency-key'];
    const v = Array.isArray(h) ? h[0] : h;
    return v === undefined || v.trim() === '' ? null : keyFromHeader(v);
  });
  const send = (res: ServerResponse, r: StoredResponse, replayed: boolean): void => {
    const headers: Record<string, string> = { ...(r.headers ?? {}) };
    if (replayed) headers['idempotent-replayed'] = 'true';
    res.writeHead(r.status, headers);
    res.end(r.body ?? '');
  };
  return (req, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooBig = false;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > maxBody) tooBig = true;
      else chunks.push(c);
    });
    req.on('error', () => res.destroy());
    req.on('end', () => {
      void (async () => {
        if (tooBig) return send(res, { status: 413, body: 'request body too large\n' }, false);
        const body = Buffer.concat(chunks);
        const key = keyOf(req, body);
        const report = (duplicate: boolean, status: number): void => options.onRequest?.({ key, duplicate, status });
        if (key === null) {
          if (options.missingKey === 'reject') {
            report(false, 400);
            return send(res, { status: 400, body: 'missing Idempotency-Key\n' }, false);
          }
          const r = await handler(req, body, null);
          report(false, r.status);
          return send(res, r, false);
        }
        const fp = options.checkPayload === false ? null : createHash('sha256').update(body).digest('base64url');
        for (;;) {
          const b = await receipts.begin(key, fp);
          if (b.state === 'mismatch') {
            report(true, 422);
            return send(res, { status: 422, body: 'Idempotency-Key reused with another payload\n' }, false);
          }
          if (b.state === 'done') {
            report(true, b.response.status);
            return send(res, b.response, true);
          }
          if (b.state === 'in_progress') {
            if (options.concurrent === 'conflict') {
              report(true, 409);
              return send(res, { status: 409, body: 'a request with this Idempotency-Key is in progress\n' }, false);
            }
            const r = await b.wait;
            if (r) {
              report(true, r.status);
              return send(res, r, true);
            }
            continue; // the first one failed; this one may process it
          }
          let r: StoredResponse;
          try {
            r = await handler(req, body, key);
          } catch {
            await receipts.abort(key);
            report(false, 500);
            return send(res, { status: 500, body: 'internal error\n' }, false);
          }
          if (r.status >= 500) await receipts.abort(key);
          else await receipts.complete(key, r);
          report(false, r.status);
          return send(res, r, false);
        }
      })().catch(() => {
        if (!res.headersSent) send(res, { status: 500, body: 'internal error\n' }, false);
        else res.destroy();
      });
    });
  };
}
