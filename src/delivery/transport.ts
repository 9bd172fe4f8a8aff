import { undici } from '../shared/undici.js';
import { pickHintHeaders } from '../core/hints.js';
import type { ErrorClass, SendState } from '../core/types.js';
import type { ResolvedDestination } from './config.js';
import type { BatchItem } from './types.js';

/** One HTTP request for one attempt of one batch. */
export interface DeliveryRequest {
  readonly destination: ResolvedDestination;
  readonly url: URL;
  readonly method: string;
  /** Lower-case names; includes `idempotency-key` and `content-type`. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  /** The batch's idempotency key (also in the headers). */
  readonly batchKey: string;
  readonly attempt: number;
  readonly items: readonly BatchItem[];
  /** Aborts at the attempt timeout or when the worker stops. */
  readonly signal: AbortSignal;
  /** The attempt's time (min of the policy's attempt timeout and the remaining deadline). */
  readonly timeoutMs: number;
}

/**
 * What an attempt produced: a status (with the response headers the core reads:
 * Retry-After, Date, RateLimit fields) or an error class. A transport may also throw:
 * the worker classifies thrown errors by their code (src/core/wire.ts).
 */
export type TransportResult =
  { readonly status: number; readonly headers?: Readonly<Record<string, string>> } | { readonly errorClass: ErrorClass; readonly sent?: SendState };

export type Transport = (req: DeliveryRequest) => Promise<TransportResult>;

export interface HttpTransport extends Transport {
  /** Closes the keep-alive connections. */
  close(): Promise<void>;
}

export interface HttpTransportOptions {
  /** How long an idle keep-alive connection is kept (ms). Default 30 s. */
  readonly keepAliveTimeoutMs?: number;
  /** Connections per origin; default: as many as requests in flight. */
  readonly connections?: number | null;
}

/**
 * The default transport: undici's `request` over one keep-alive Agent shared by every
 * destination of the worker. The response body is read and thrown away (never kept,
 * never logged), so the connection goes back to the pool.
 */
export function createHttpTransport(options: HttpTransportOptions = {}): HttpTransport {
  const { Agent, request } = undici();
  const agent = new Agent({
    keepAliveTimeout: options.keepAliveTimeoutMs ?? 30_000,
    connections: options.connections ?? null,
  });
  const send = (async (req: DeliveryRequest): Promise<TransportResult> => {
    const res = await request(req.url, {
      method: req.method as 'POST',
      headers: req.headers,
      body: req.body,
      dispatcher: agent,
      signal: req.signal,
      headersTimeout: req.timeoutMs,
      bodyTimeout: req.timeoutMs,
    });
    // The answer has arrived; its body does not matter (an error while draining it does not change the status).
    await res.body.dump({ limit: 64 * 1024 }).catch(() => {});
    const headers = pickHintHeaders(res.headers);
    return headers ? { status: res.statusCode, headers } : { status: res.statusCode };
  }) as HttpTransport;
  send.close = () => agent.close();
  return send;
}
