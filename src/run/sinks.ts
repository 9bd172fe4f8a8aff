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
  return {
    onEvent(event) {
      writeSync(fd, formatJsonLine(event) + '\n');
    },
    close() {
      if (fd !== 2) closeSync(fd);
    },
  };
}
