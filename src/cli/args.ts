import { RelentError } from '../core/errors.js';

/** The exit status of each way an operation can end (0 only on success). */
export const EXIT = Object.freeze({
  ok: 0,
  failure: 1,
  usage: 2,
  deadline_exceeded: 3,
  max_attempts: 4,
  not_retryable: 5,
  budget_exhausted: 6,
  circuit_open: 7,
  cancelled: 8,
  check_state: 9,
  defer: 10,
});

export function exitFor(reason: string): number {
  if (reason === 'return') return EXIT.ok;
  return (EXIT as Record<string, number>)[reason] ?? EXIT.failure;
}

/**
 * The one duration syntax of every command: `250ms`, `2s`, `1.5s`, `30m`, `1h`; a bare
 * number is milliseconds. Errors name the flag.
 */
export function parseDuration(text: string, flag: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(text);
  if (!m) throw new RelentError('ERR_INVALID_INPUT', `${flag}: expected a duration like 250ms, 2s, 30m or 1h, got ${JSON.stringify(text)}`, { field: flag });
  const n = Number(m[1]);
  const unit = m[2] ?? 'ms';
  const v = n * (unit === 'ms' ? 1 : unit === 's' ? 1000 : unit === 'm' ? 60_000 : 3_600_000);
  if (!Number.isFinite(v) || v > 2 ** 31 - 1) throw new RelentError('ERR_INVALID_INPUT', `${flag}: ${JSON.stringify(text)} is too long (at most 24.8 days)`, { field: flag });
  return Math.round(v);
}

export { jsonErrorWhere } from './json-where.js';

export interface Io {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
}

export const processIo: Io = {
  out: (t) => process.stdout.write(t),
  err: (t) => process.stderr.write(t),
};

/** Why a file could not be read or written, for a message: "no such file", else the error's code, else `fallback`. */
export function fsReason(e: unknown, fallback: string, enoent = 'no such file'): string {
  const code = (e as { code?: string } | null)?.code;
  return code === 'ENOENT' ? enoent : code ?? fallback;
}

/** Rows as left-aligned columns two spaces apart (the first row is the header), no trailing spaces. */
export function alignedTable(rows: readonly (readonly string[])[]): string {
  const w = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(w[i]!))).join('  ').trimEnd()).join('\n') + '\n';
}
