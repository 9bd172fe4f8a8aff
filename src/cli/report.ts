import { createReadStream } from 'node:fs';
import { stat, writeFile } from 'node:fs/promises';
import { RelentError } from '../core/errors.js';
import { analyzeEventStream, REPORT_DEFAULTS } from '../report/analyze.js';
import type { EventReport } from '../report/types.js';
import { formatReport } from '../report/format.js';
import { renderReportHtml } from '../report/html.js';
import { EXIT, parseFlags, processIo, type Io } from './args.js';
import { colorEnabled, NO_PAINT, paintFor, paintTables } from './io.js';
import { createProgress } from './progress.js';

export const REPORT_HELP = `relent report EVENTS.jsonl|- [options]

Reads an event log (one {"type":"attempt",…} line per attempt, one {"type":"result",…}
per operation, as relent's JSONL sinks, \`replay\` and \`fetch --events\` write it) and
reports whether retries help: attempts per operation, terminal reasons, statuses and
error classes, delays, timeouts, load sent, retry success per endpoint with a verdict,
and load vs retries over time (by the events' "ts"/"time" field, else by line order).

Any size of log: it is streamed in constant memory. A malformed line is counted and
reported with its line number, never fatal; a log in which no line is an event
exits with status 2. \`-\` reads standard input.

Options:
  --json           the report as one JSON object on stdout instead of tables
  --html FILE      also write the report as one self-contained HTML page with charts
  --max-open N     operations held between their first attempt and their result line
                   (default ${REPORT_DEFAULTS.maxOpenOperations}; the oldest is evicted beyond and counted)
  --endpoints N    endpoints with their own row (default ${REPORT_DEFAULTS.maxEndpoints}; later ones share a row)
  -q, --quiet      no progress on standard error (by default, for a log that takes a
                   while: a bar on a terminal, else a line every 5 s)
`;

function positiveInt(text: string | undefined, flag: string, max: number): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isInteger(n) || n < 1 || n > max) {
    throw new RelentError('ERR_INVALID_INPUT', `${flag}: expected an integer from 1 to ${max}, got ${JSON.stringify(text)}`, { field: flag });
  }
  return n;
}

function cannot(what: string, path: string, e: unknown): RelentError {
  const code = (e as { code?: string }).code;
  const why =
    code === 'ENOENT'
      ? 'no such file or directory'
      : code === 'EISDIR'
        ? 'is a directory'
        : code === 'EACCES'
          ? 'permission denied'
          : (code ?? (e instanceof Error ? e.message : String(e)));
  return new RelentError('ERR_INVALID_INPUT', `${what} ${path}: ${why}`, { field: what });
}

export async function reportCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseFlags({
    args: argv,
    allowPositionals: true,
    options: {
      json: { type: 'boolean' },
      html: { type: 'string' },
      'max-open': { type: 'string' },
      endpoints: { type: 'string' },
      quiet: { type: 'boolean', short: 'q' },
    },
  });
  if (positionals.length !== 1) {
    io.err(`relent report: ${positionals.length === 0 ? 'missing the event log (a JSONL file, or - for standard input)' : 'one event log at a time'}\n`);
    return EXIT.usage;
  }
  if (values.html !== undefined && values.html.trim() === '') throw new RelentError('ERR_INVALID_INPUT', '--html: expected a file name', { field: '--html' });
  const maxOpenOperations = positiveInt(values['max-open'], '--max-open', 10_000_000);
  const maxEndpoints = positiveInt(values.endpoints, '--endpoints', 1_000_000);
  const path = positionals[0]!;

  let report: EventReport;
  const options = {
    source: path === '-' ? 'standard input' : path,
    ...(maxOpenOperations ? { maxOpenOperations } : {}),
    ...(maxEndpoints ? { maxEndpoints } : {}),
  };
  // Progress while reading: how much of the file (or of standard input) is read.
  const progress = createProgress({ name: 'relent report', io, quiet: values.quiet === true });
  const mb = (n: number): string => `${(n / 1e6).toFixed(n < 1e7 ? 1 : 0)} MB`;
  const watch = (stream: { readonly bytesRead?: number }, size: number | null): (() => void) => {
    const timer = setInterval(() => {
      const read = stream.bytesRead ?? 0;
      if (size !== null && size > 0) progress.update(read, size, `${mb(read)} of ${mb(size)} read`);
      else progress.status(`${mb(read)} read from ${options.source}`);
    }, 100);
    return () => {
      clearInterval(timer);
      progress.clear();
    };
  };
  if (path === '-') {
    const stop = watch(process.stdin as { bytesRead?: number }, null);
    try {
      report = await analyzeEventStream(process.stdin, options);
    } finally {
      stop();
    }
  } else {
    let size: number;
    try {
      const st = await stat(path);
      if (st.isDirectory()) throw Object.assign(new Error('is a directory'), { code: 'EISDIR' });
      size = st.size;
    } catch (e) {
      throw cannot('event log', path, e);
    }
    const stream = createReadStream(path, { highWaterMark: 1024 * 1024 });
    const stop = watch(stream, size);
    try {
      report = await analyzeEventStream(stream, options);
    } catch (e) {
      if ((e as { code?: string }).code !== undefined) throw cannot('event log', path, e);
      throw e;
    } finally {
      stop();
    }
  }

  if (values.html !== undefined) {
    try {
      await writeFile(values.html, renderReportHtml(report));
    } catch (e) {
      throw cannot('--html', values.html, e);
    }
  }
  io.out(values.json ? JSON.stringify(report) + '\n' : paintTables(formatReport(report), io === processIo ? paintFor(colorEnabled('stdout')) : NO_PAINT));
  // Lines, but not one of them an event: this is not an event log (a wrong file?).
  if (report.malformed.count > 0 && report.lines - report.blankLines === report.malformed.count) {
    const n = report.malformed.count;
    io.err(
      `relent report: ${options.source}: ${n === 1 ? 'its one line is not' : `none of its ${n} lines is`} a relent event (see "Malformed lines" above); is it the right file?\n`,
    );
    return EXIT.usage;
  }
  return EXIT.ok;
}
