import type { RelentEvent } from '../run/types.js';
import { formatHuman, formatJsonLine } from '../run/format.js';
import { safeEndpoint } from './endpoint.js';

/** Anything that takes events: a function (pass as `onEvent`) or an object with `onEvent` (e.g. a JSONL sink). */
export type Sink<E = RelentEvent> = ((event: E) => void) | { readonly onEvent: (event: E) => void };

/**
 * One `onEvent` that hands every event to each sink in order. Falsy entries are
 * skipped, so sinks can be switched on inline: `combineSinks(verbose && consoleSink, jsonl)`.
 * A sink that throws does not starve the others: all run, then the first error is rethrown.
 * Works for breaker state changes too (`combineSinks(publishBreakerChange, otel.onBreakerStateChange)`).
 */
export function combineSinks<E = RelentEvent>(...sinks: ReadonlyArray<Sink<E> | null | undefined | false>): (event: E) => void {
  const fns: ((event: E) => void)[] = [];
  for (const s of sinks) {
    if (!s) continue;
    if (typeof s === 'function') fns.push(s);
    else if (typeof s.onEvent === 'function') fns.push((e) => s.onEvent(e));
    else throw new TypeError('combineSinks: every sink is a function or has an onEvent function');
  }
  if (fns.length === 0) return () => {};
  if (fns.length === 1) return fns[0]!;
  return (event: E) => {
    let failed = false;
    let first: unknown;
    for (const f of fns) {
      try {
        f(event);
      } catch (error) {
        if (!failed) {
          failed = true;
          first = error;
        }
      }
    }
    if (failed) throw first;
  };
}

/** An attempt event whose endpoint holds something that must not leak gets a normalised copy. */
export function scrubEvent<E extends RelentEvent>(event: E): E {
  if (event.type !== 'attempt' || event.endpoint === null) return event;
  const safe = safeEndpoint(event.endpoint);
  return safe === event.endpoint ? event : { ...event, endpoint: safe };
}

export interface ConsoleSinkOptions {
  /** Where each line goes (no trailing newline given). Default: process.stderr. */
  readonly write?: (line: string) => void;
  /** `human` (default): `op-42 #2 GET https://api/items 503 in 80ms (280ms left) → retry in 40ms`; `json`: one JSON line. */
  readonly format?: 'human' | 'json';
}

/** Writes one line per event, readable by people (formatHuman) or as JSON lines. */
export function createConsoleSink(options: ConsoleSinkOptions = {}): (event: RelentEvent) => void {
  const write =
    options.write ??
    ((line: string) => {
      process.stderr.write(line + '\n');
    });
  const format = options.format ?? 'human';
  if (format !== 'human' && format !== 'json') throw new TypeError(`createConsoleSink: Expected \`format\` to be "human" or "json", got ${String(format)}`);
  const fmt = format === 'human' ? formatHuman : formatJsonLine;
  return (event) => write(fmt(scrubEvent(event)));
}
