import { parseArgs, type ParseArgsConfig } from 'node:util';
import { RelentError } from '../core/errors.js';
import { writeTo } from './io.js';

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
  bulkhead_full: 11,
  concurrency_limited: 12,
  rate_limited: 13,
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
  if (!Number.isFinite(v) || v > 2 ** 31 - 1)
    throw new RelentError('ERR_INVALID_INPUT', `${flag}: ${JSON.stringify(text)} is too long (at most 24.8 days)`, { field: flag });
  return Math.round(v);
}

export { jsonErrorWhere } from './json-where.js';

export interface Io {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
}

export const processIo: Io = {
  out: (t) => void writeTo('stdout', t),
  err: (t) => void writeTo('stderr', t),
};

/** Why a file could not be read or written, for a message: "no such file", else the error's code, else `fallback`. */
export function fsReason(e: unknown, fallback: string, enoent = 'no such file'): string {
  const code = (e as { code?: string } | null)?.code;
  return code === 'ENOENT' ? enoent : (code ?? fallback);
}

/** A usage error (exit 2) that names the flag. */
export function usageError(message: string, field: string): RelentError {
  return new RelentError('ERR_INVALID_INPUT', message, { field });
}

type Parsed<T extends ParseArgsConfig> = ReturnType<typeof parseArgs<T>>;

/**
 * `node:util`'s parseArgs with the CLI's conventions: a negative number or duration after
 * a flag that takes a value (`--deadline -5s`) reaches that flag's own check, which says
 * what it expects in one line (parseArgs would call it "ambiguous" over three lines); any
 * other parse error becomes one line naming the flag as typed; and `flag(name)` gives
 * the spelling the user typed (`-X` or `--request`) for messages.
 */
export function parseFlags<T extends ParseArgsConfig>(config: T): Parsed<T> & { flag: (name: string) => string } {
  const options = (config.options ?? {}) as Record<string, { type: string; short?: string }>;
  const takesValue = new Set<string>();
  for (const [name, o] of Object.entries(options)) {
    if (o.type !== 'string') continue;
    takesValue.add(`--${name}`);
    if (o.short) takesValue.add(`-${o.short}`);
  }
  const args = [...(config.args ?? [])];
  for (let i = 0; i < args.length - 1; i++) {
    if (args[i] === '--') break;
    if (takesValue.has(args[i]!) && /^-\.?\d/.test(args[i + 1]!)) {
      args.splice(i, 2, args[i]!.startsWith('--') ? `${args[i]}=${args[i + 1]}` : `${args[i]}${args[i + 1]}`);
    }
  }
  let parsed: Parsed<T>;
  try {
    parsed = parseArgs({ ...config, args, tokens: true } as T);
  } catch (e) {
    const code = (e as { code?: string }).code ?? '';
    if (!code.startsWith('ERR_PARSE_ARGS')) throw e;
    const message = (e as Error).message;
    // Node names the option as "-X, --request <value>"; the message names it as typed.
    const spellings = (/'(-[^']*)'/.exec(message)?.[1] ?? '').split(/[\s,]+/).filter((x) => x.startsWith('-'));
    const flagName =
      [...args]
        .reverse()
        .map((a) => a.replace(/=.*$/, ''))
        .find((a) => spellings.includes(a)) ?? spellings[0];
    const long = spellings.find((x) => x.startsWith('--')) ?? /'(--[\w-]+)=-XYZ'/.exec(message)?.[1] ?? flagName;
    let text: string;
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') text = `unknown option ${flagName ?? JSON.stringify(message.split('.')[0])}`;
    else if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') text = `unexpected argument ${JSON.stringify(/'([^']*)'/.exec(message)?.[1] ?? '')}`;
    else if (/argument missing/.test(message)) text = `${flagName ?? 'an option'} needs a value`;
    else if (/ambiguous/.test(message)) text = `${flagName ?? 'an option'} needs a value (one that starts with a dash is written ${long ?? '--flag'}=VALUE)`;
    else if (/does not take an argument/.test(message)) text = `${flagName ?? 'an option'} takes no value`;
    else text = message.replace(/\s*\n\s*/g, ' ');
    throw usageError(text, flagName ?? 'flags');
  }
  const typed = new Map<string, string>();
  for (const t of (parsed as { tokens?: { kind: string; name?: string; rawName?: string }[] }).tokens ?? []) {
    if (t.kind === 'option' && t.name !== undefined && t.rawName !== undefined) typed.set(t.name, t.rawName);
  }
  return Object.assign(parsed, { flag: (name: string): string => typed.get(name) ?? `--${name}` });
}
