import { createHash } from 'node:crypto';
import type { BodyFormat } from './config.js';
import type { BatchItem, BatchLimits } from './types.js';

/** An item waiting to be aggregated, as a store reads it (in enqueue order). */
export interface PendingRow {
  readonly id: number;
  readonly key: string;
  readonly bytes: number;
  readonly enqueuedAt: number;
}

export interface Cut {
  readonly rows: readonly PendingRow[];
  readonly bytes: number;
  /** The batch's idempotency key, derived from its content: stable across attempts and restarts. */
  readonly key: string;
}

/** What `cutBatches` sealed, and when the rest is due. */
export interface CutResult {
  readonly cuts: Cut[];
  /**
   * When the items left over must be looked at again: `now` if more batches can be
   * sealed at once (maxBatches was reached, or more rows than were read may wait), the
   * time the oldest left-over item reaches maxAgeMs, or null when nothing is left.
   */
  readonly nextAt: number | null;
}

/**
 * Cuts pending items (in enqueue order) into batches: a batch is sealed when it holds
 * `maxItems`, or when the next item would take it past `maxBytes` (an item larger than
 * maxBytes travels alone), whichever comes first; the last, partial batch is sealed
 * only when its oldest item is `maxAgeMs` old. Both stores call this inside the
 * transaction that locked the rows, so a batch's content is fixed once, forever.
 * `readAll` says whether `rows` holds every pending item (false: a LIMIT cut the read).
 */
export function cutBatches(destination: string, rows: readonly PendingRow[], limits: BatchLimits, now: number, maxBatches: number, readAll = true): CutResult {
  const cuts: Cut[] = [];
  let cur: PendingRow[] = [];
  let bytes = 0;
  for (const r of rows) {
    if (cur.length > 0 && (cur.length >= limits.maxItems || bytes + r.bytes > limits.maxBytes)) {
      cuts.push(seal(destination, cur, bytes));
      cur = [];
      bytes = 0;
      if (cuts.length >= maxBatches) return { cuts, nextAt: now };
    }
    cur.push(r);
    bytes += r.bytes;
  }
  if (cur.length > 0 && (cur.length >= limits.maxItems || bytes >= limits.maxBytes || now - cur[0]!.enqueuedAt >= limits.maxAgeMs)) {
    cuts.push(seal(destination, cur, bytes));
    cur = [];
  }
  if (!readAll) return { cuts, nextAt: now };
  return { cuts, nextAt: cur.length > 0 ? cur[0]!.enqueuedAt + limits.maxAgeMs : null };
}

function seal(destination: string, rows: PendingRow[], bytes: number): Cut {
  return {
    rows,
    bytes,
    key: batchKey(
      destination,
      rows.map((r) => r.key),
    ),
  };
}

/**
 * The idempotency key of a batch: a hash of its destination and item keys. The same
 * items always make the same key, so a batch sent again (a retry, a redelivery after a
 * crash, a requeue) is recognised by an idempotent receiver.
 */
export function batchKey(destination: string, itemKeys: readonly string[]): string {
  // Length-prefixed, so no two different key lists hash the same input.
  const h = createHash('sha256');
  h.update(`${destination.length}:${destination}`);
  for (const k of itemKeys) h.update(`\n${k.length}:${k}`);
  return `rb-${h.digest('hex').slice(0, 40)}`;
}

const CONTENT_TYPES: Readonly<Record<BodyFormat, string>> = {
  envelope: 'application/json',
  array: 'application/json',
  ndjson: 'application/x-ndjson',
  single: 'application/json',
};

/** The request body of a batch (payloads are stored as JSON text and spliced in as is). */
export function encodeBatch(format: BodyFormat, key: string, items: readonly BatchItem[]): { body: string; contentType: string } {
  let body: string;
  switch (format) {
    case 'envelope':
      body = `{"key":${JSON.stringify(key)},"items":[${items.map((i) => `{"key":${JSON.stringify(i.key)},"payload":${i.payload}}`).join(',')}]}`;
      break;
    case 'array':
      body = `[${items.map((i) => i.payload).join(',')}]`;
      break;
    case 'ndjson':
      body = items.map((i) => i.payload).join('\n') + '\n';
      break;
    case 'single':
      body = items[0]?.payload ?? 'null';
      break;
  }
  return { body, contentType: CONTENT_TYPES[format] };
}
