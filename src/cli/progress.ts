// Progress of long work on standard error: on a terminal a bar redrawn in place; in a log
// (no terminal) one plain line every few seconds; nothing with --quiet, and nothing at all
// for work that ends before the first draw.
import { processIo, type Io } from './args.js';

export interface Progress {
  /** `done` of `total` units, with what is being done now. Cheap to call often. */
  update(done: number, total: number, label: string): void;
  /** A status line (no bar): what is happening, e.g. the delivery worker's counts. */
  status(text: string): void;
  /** Clears the bar (on a terminal) before other output. Safe to call twice. */
  clear(): void;
}

export interface ProgressOptions {
  /** The command, as the lines name it: "relent simulate". */
  readonly name: string;
  readonly io: Io;
  /** Nothing at all (--quiet). */
  readonly quiet?: boolean;
  /** A terminal: redraw in place. Default: standard error is a terminal (for the real process). */
  readonly tty?: boolean;
  /** Terminal width. Default: standard error's, else 80. */
  readonly columns?: number;
  /** Milliseconds, monotonic. Default: performance.now. */
  readonly now?: () => number;
  /** Without a terminal: a line at most this often (default 5 s); the first after this long. */
  readonly everyMs?: number;
  /** On a terminal: nothing before this long (default 300 ms), then at most 10 redraws a second. */
  readonly delayMs?: number;
}

const QUIET: Progress = { update() {}, status() {}, clear() {} };

const seconds = (ms: number): string => (ms < 60_000 ? `${Math.round(ms / 1000)} s` : `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`);

export function createProgress(o: ProgressOptions): Progress {
  if (o.quiet) return QUIET;
  const now = o.now ?? (() => performance.now());
  const tty = o.tty ?? (o.io === processIo && process.stderr.isTTY === true);
  const started = now();
  const everyMs = o.everyMs ?? 5000;
  const delayMs = o.delayMs ?? 300;
  let last = started;
  let drawn = false;
  const columns = (): number => {
    const c = o.columns ?? (o.io === processIo ? process.stderr.columns : undefined);
    return typeof c === 'number' && c >= 20 ? c : 80;
  };
  const draw = (text: string): void => {
    o.io.err(`\r\x1b[2K${text.slice(0, columns() - 1)}`);
    drawn = true;
  };
  const due = (): boolean => {
    const t = now();
    if (tty ? t - started < delayMs || (drawn && t - last < 100) : t - last < everyMs) return false;
    last = t;
    return true;
  };
  return {
    update(done, total, label) {
      if (!due()) return;
      const frac = total > 0 ? Math.min(1, Math.max(0, done / total)) : 0;
      const pct = `${String(Math.floor(frac * 100)).padStart(3)}%`;
      const elapsed = now() - started;
      const left = frac > 0.02 && frac < 1 ? `, about ${seconds((elapsed / frac) * (1 - frac))} left` : '';
      if (tty) {
        const width = 24;
        const fill = Math.round(frac * width);
        draw(`[${'#'.repeat(fill)}${'.'.repeat(width - fill)}] ${pct} ${label}${left}`);
      } else {
        o.io.err(`${o.name}: ${pct.trim()} ${label}; ${seconds(elapsed)} so far${left}\n`);
      }
    },
    status(text) {
      if (!due()) return;
      if (tty) draw(text);
      else o.io.err(`${o.name}: ${text}\n`);
    },
    clear() {
      if (!tty || !drawn) return;
      o.io.err('\r\x1b[2K');
      drawn = false;
    },
  };
}
