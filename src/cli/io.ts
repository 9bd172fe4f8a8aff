// The terminal side of every command: standard output and error that may be closed by
// their reader (`relent presets | head -1`), colour only where it can be seen, and one
// table style.
import { textTable } from '../sim/format.js';

type Stream = 'stdout' | 'stderr';

const closed = { stdout: false, stderr: false };
let guarded = false;
let handlers: (() => void)[] = [];

/** Whether standard output (or error) was closed by its reader. */
export function outputClosed(stream: Stream = 'stdout'): boolean {
  return closed[stream];
}

/**
 * A reader that goes away (`| head -1`, a closed terminal) is not an error: from then on
 * writes to that stream are dropped. A command that registered a stop with
 * `onOutputClosed` (a server, a worker) stops through it, gracefully, with its own
 * status. Otherwise, when standard output closes the process ends at once, quietly, with
 * status 0 (the reader has what it wanted); when only standard error closes, the command
 * goes on without it and ends with its own status. Any other write error ends the process
 * with status 1 and one line. Installed once, for the real process streams only.
 */
export function guardOutput(): void {
  if (guarded) return;
  guarded = true;
  for (const name of ['stdout', 'stderr'] as const) {
    process[name].on('error', (e: NodeJS.ErrnoException) => {
      const wasClosed = closed.stdout || closed.stderr;
      closed[name] = true;
      if (e.code !== 'EPIPE' && e.code !== 'ERR_STREAM_DESTROYED' && e.code !== 'ECONNRESET') {
        if (!closed.stderr) process.stderr.write(`relent: cannot write to standard ${name === 'stdout' ? 'output' : 'error'} (${e.code ?? e.message})\n`);
        process.exit(1);
      }
      if (handlers.length === 0) {
        if (name === 'stdout') process.exit(0);
        return;
      }
      if (wasClosed) return;
      const list = handlers;
      handlers = [];
      for (const h of list) h();
    });
  }
}

/** Registers a graceful stop for when an output stream closes; returns its removal. */
export function onOutputClosed(stop: () => void): () => void {
  handlers.push(stop);
  return () => {
    handlers = handlers.filter((h) => h !== stop);
  };
}

/** Writes to a process stream unless its reader is gone. Returns false when the stream asks to wait for 'drain'. */
export function writeTo(stream: Stream, chunk: string | Uint8Array): boolean {
  if (closed[stream]) return true;
  try {
    return process[stream].write(chunk);
  } catch {
    closed[stream] = true; // a synchronous EPIPE: the 'error' event follows
    return true;
  }
}

/**
 * Colour where a person sees it: the stream is a terminal, NO_COLOR is unset or empty
 * (https://no-color.org), and TERM is not "dumb". FORCE_COLOR (non-empty, not "0") turns
 * it on anywhere, except that NO_COLOR still wins.
 */
export function colorEnabled(stream: Stream, env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  if (env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== '' && env.FORCE_COLOR !== '0') return true;
  return process[stream].isTTY === true && env.TERM !== 'dumb';
}

export interface Paint {
  readonly bold: (s: string) => string;
  readonly dim: (s: string) => string;
  readonly red: (s: string) => string;
  readonly green: (s: string) => string;
  readonly yellow: (s: string) => string;
}

const sgr =
  (open: number, close: number) =>
  (s: string): string =>
    s === '' ? s : `\x1b[${open}m${s}\x1b[${close}m`;
const ON: Paint = { bold: sgr(1, 22), dim: sgr(2, 22), red: sgr(31, 39), green: sgr(32, 39), yellow: sgr(33, 39) };
const same = (s: string): string => s;
export const NO_PAINT: Paint = { bold: same, dim: same, red: same, green: same, yellow: same };

/** The colours for text written to `stream` by the real process (none for any other sink). */
export function paintFor(enabled: boolean): Paint {
  return enabled ? ON : NO_PAINT;
}

export interface TableOptions {
  /** Per column: 'l' (text) or 'r' (numbers). Default: the first column left, the others right. */
  readonly align?: readonly ('l' | 'r')[];
  readonly paint?: Paint;
}

/**
 * The one table style of every command: a header row, a rule of dashes, columns two
 * spaces apart, text left-aligned and numbers right-aligned, no trailing spaces. With
 * colour, the header is bold.
 */
export function table(header: readonly string[], rows: readonly (readonly string[])[], options: TableOptions = {}): string {
  const text = textTable(header, rows, options.align);
  const paint = options.paint ?? NO_PAINT;
  if (paint === NO_PAINT) return text;
  const nl = text.indexOf('\n');
  return paint.bold(text.slice(0, nl)) + text.slice(nl);
}

/** Bolds the header of every table in a text (a line followed by a rule of dashes), for output built by the drivers' formatters. */
export function paintTables(text: string, paint: Paint): string {
  if (paint === NO_PAINT) return text;
  const lines = text.split('\n');
  for (let i = 1; i < lines.length; i++) {
    if (/^ *-+( +-+)*$/.test(lines[i]!) && lines[i - 1]!.trim() !== '') lines[i - 1] = paint.bold(lines[i - 1]!);
  }
  return lines.join('\n');
}
