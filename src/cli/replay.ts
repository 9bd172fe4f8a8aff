import { readFile } from 'node:fs/promises';
import { RelentError } from '../core/errors.js';
import { formatHuman, formatJsonLine } from '../run/format.js';
import { parseTimeline, replay, type Timeline } from '../run/replay.js';
import { EXIT, exitFor, fsReason, jsonErrorWhere, parseFlags, type Io } from './args.js';

export const REPLAY_HELP = `relent replay FILE|- [FILE…] [--human]

Replays observation timelines against a policy in virtual time and prints one JSON
line per attempt, then one result line per timeline. A file holds one timeline, an
array of timelines, or one timeline per line (JSONL). '-' reads standard input.

  --human   print events for people instead of JSON lines

Exit status: 0 when every operation returned; otherwise the status of the first
terminal reason (3 deadline_exceeded, 4 max_attempts, 5 not_retryable, 6
budget_exhausted, 7 circuit_open, 8 cancelled, 9 check_state, 10 defer); 2 for
malformed input (the message says where).
`;

async function readSource(source: string): Promise<string> {
  if (source === '-') {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString('utf8');
  }
  try {
    return await readFile(source, 'utf8');
  } catch (e) {
    throw new RelentError('ERR_INVALID_INPUT', `${source}: cannot read (${fsReason(e, String(e))})`);
  }
}

/** Parses a file's text into timelines; errors say which file, line and field. */
export function timelinesFrom(text: string, name: string): { timelines: Timeline[]; warnings: string[] } {
  const trimmed = text.trim();
  if (trimmed.length === 0) throw new RelentError('ERR_INVALID_INPUT', `${name}: empty input, expected a timeline JSON object`);
  let docs: { value: unknown; where: string }[];
  try {
    const value: unknown = JSON.parse(trimmed);
    docs = Array.isArray(value) ? value.map((v, i) => ({ value: v, where: `${name}[${i}]` })) : [{ value, where: name }];
  } catch {
    // Not one JSON document: JSON lines, if every line parses; else say where the document breaks.
    const lines = trimmed.split('\n');
    const parsed: { value: unknown; where: string }[] = [];
    let lineOk = lines.length > 1;
    for (let i = 0; lineOk && i < lines.length; i++) {
      const line = lines[i]!;
      if (line.trim() === '') continue;
      try {
        parsed.push({ value: JSON.parse(line), where: `${name}:${i + 1}` });
      } catch {
        if (parsed.length > 0)
          throw new RelentError('ERR_INVALID_INPUT', `${name}: invalid JSON on line ${i + 1} (${jsonErrorWhere(line).replace(/^line 1, /, '')})`);
        lineOk = false;
      }
    }
    if (!lineOk) throw new RelentError('ERR_INVALID_INPUT', `${name}: invalid JSON at ${jsonErrorWhere(trimmed)}`);
    docs = parsed;
  }
  const warnings: string[] = [];
  const timelines = docs.map((d) => {
    const r = parseTimeline(d.value, d.where);
    warnings.push(...r.warnings);
    return r.timeline;
  });
  return { timelines, warnings };
}

export async function replayCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseFlags({ args: argv, allowPositionals: true, options: { human: { type: 'boolean' } } });
  if (positionals.length === 0) {
    io.err('relent replay: missing FILE (or - for standard input)\n');
    return EXIT.usage;
  }
  const all: Timeline[] = [];
  for (const source of positionals) {
    const { timelines, warnings } = timelinesFrom(await readSource(source), source === '-' ? 'stdin' : source);
    for (const w of warnings) io.err(`relent replay: warning: ${w}\n`);
    all.push(...timelines);
  }
  let exit: number = EXIT.ok;
  let firstFailure = '';
  for (const t of all) {
    const { events, result } = await replay(t);
    io.out(events.map((e) => (values.human ? formatHuman(e) : formatJsonLine(e)) + '\n').join(''));
    const code = exitFor(result.reason);
    if (code !== EXIT.ok && exit === EXIT.ok) {
      exit = code;
      firstFailure = `relent replay: ${t.operationId} ended with ${result.reason} after ${result.attempts} attempt${result.attempts === 1 ? '' : 's'}\n`;
    }
  }
  if (firstFailure) io.err(firstFailure);
  return exit;
}
