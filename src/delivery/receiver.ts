import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { keyFromHeader } from '../shared/idempotency.js';
import { createIdempotencyCache, type ReceiptStore, type StoredResponse } from '../shared/idempotency-cache.js';

export { createIdempotencyCache, noticeKey, IDEMPOTENCY_CACHE_DEFAULTS } from '../shared/idempotency-cache.js';
export type { StoredResponse, BeginResult, ReceiptStore, IdempotencyCacheOptions, IdempotencyCache } from '../shared/idempotency-cache.js';

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
export function createIdempotentHandler(
  handler: IdempotentHandler,
  options: IdempotentHandlerOptions = {},
): (req: IncomingMessage, res: ServerResponse) => void {
  const receipts = options.receipts ?? createIdempotencyCache();
  const maxBody = options.maxBodyBytes ?? 16 * 1024 * 1024;
  const keyOf =
    options.keyOf ??
    ((req: IncomingMessage) => {
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
