import { closeSync, openSync, writeSync } from 'node:fs';
import type { AttemptEvent, ResultEvent } from '../core/types.js';
import { formatJsonLine } from './format.js';

export interface JsonlSink {
  /** Pass as `onEvent`. */
  readonly onEvent: (event: AttemptEvent | ResultEvent) => void;
  close(): void;
}

/**
 * Appends one JSON line per event to a file (or to stderr for `-`). Writes are
 * synchronous so that the log is complete and in order when the operation settles,
 * and survives a crash right after.
 */
export function createJsonlSink(path: string): JsonlSink {
  const fd = path === '-' ? 2 : openSync(path, 'a');
  let gone = false;
  return {
    onEvent(event) {
      if (gone) return;
      try {
        writeSync(fd, formatJsonLine(event) + '\n');
      } catch (e) {
        // Standard error closed by its reader (`2>&1 | head`): the log ends there, quietly.
        if (fd === 2 && (e as { code?: string }).code === 'EPIPE') gone = true;
        else throw e;
      }
    },
    close() {
      if (fd !== 2) closeSync(fd);
    },
  };
}
