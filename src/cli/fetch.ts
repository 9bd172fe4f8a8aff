import { readFile } from 'node:fs/promises';
import { RelentError } from '../core/errors.js';
import { type PolicySpec, type PresetName } from '../core/policy.js';
import type { ResultEvent } from '../core/types.js';
import { createClient } from '../http/client.js';
import { RelentFetchError } from '../http/errors.js';
import { resolvePolicy } from '../presets/index.js';
import { formatHuman } from '../run/format.js';
import type { RelentEvent } from '../run/run.js';
import { createJsonlSink, type JsonlSink } from '../run/sinks.js';
import { EXIT, exitFor, fsReason, jsonErrorWhere, parseDuration, parseFlags, processIo, usageError, type Io } from './args.js';
import { outputClosed, writeTo } from './io.js';

export const FETCH_HELP = `relent fetch URL [options]

Makes one HTTP request through relent's client: retries, waits and stops as the
policy decides, and prints the response body to standard output. With --events,
it also writes one JSON line per attempt and one for the result (the shape of
\`relent replay\`'s output, which \`relent report\` reads); with -v, a readable
attempt log on standard error.

  -X, --request METHOD        the method (default GET, or POST with -d)
  -H, --header 'Name: value'  a request header (repeatable)
  -d, --data DATA             the request body; @FILE reads a file, @- standard input
                              (repeatable: joined with &)
      --preset NAME           start from a preset (see relent presets)
      --policy JSON|@FILE     a policy object, as in a timeline (may name a preset)
      --deadline D            the whole operation's deadline, waits included
      --attempt-timeout D     each attempt's timeout
      --max-attempts N        calls in all, the first included
      --idempotency-key KEY   sent as Idempotency-Key on every attempt (makes POST retryable)
      --events FILE|-         write the events as JSON lines to FILE (- for standard error)
  -v, --verbose               a human-readable attempt log on standard error

Flags override --policy, which overrides --preset. Durations: 250ms, 2s, 30m (a bare
number is ms). Header values, the query string and the body are never printed.

Exit status: 0 when the operation returned; otherwise the status of its terminal
reason (3 deadline_exceeded, 4 max_attempts, 5 not_retryable — e.g. a 404 —,
6 budget_exhausted, 7 circuit_open, 8 cancelled — Ctrl-C or SIGTERM —, 9
check_state, 10 defer), with one line on standard error naming it; 2 for a
malformed flag, JSON or URL; 1 otherwise.
`;

const usage = usageError;

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** `Name: value` → [name, value]; the message never shows the value. */
function parseHeader(h: string, i: number, flag: string): [string, string] {
  const colon = h.indexOf(':');
  const name = colon > 0 ? h.slice(0, colon).trim() : '';
  if (!TOKEN.test(name)) throw usage(`${flag} #${i + 1}: expected 'Name: value' with a header name made of token characters`, flag);
  const value = h.slice(colon + 1).trim();
  if (/[\r\n\0]/.test(value)) throw usage(`${flag} ${name}: the value must not contain CR, LF or NUL (not shown)`, flag);
  return [name, value];
}

async function readStdin(): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

async function readAt(arg: string, flag: string): Promise<Buffer> {
  const path = arg.slice(1);
  if (path === '-') return readStdin();
  try {
    return await readFile(path);
  } catch (e) {
    throw usage(`${flag}: cannot read ${JSON.stringify(path)} (${fsReason(e, 'error')})`, flag);
  }
}

async function policyFrom(text: string): Promise<PolicySpec> {
  const raw = text.startsWith('@') ? (await readAt(text, '--policy')).toString('utf8') : text;
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    throw usage(`--policy: invalid JSON at ${jsonErrorWhere(raw)}`, '--policy');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw usage('--policy: expected a JSON object (a policy, as in a timeline)', '--policy');
  return value as PolicySpec;
}

const OPTIONS = {
  request: { type: 'string', short: 'X' },
  header: { type: 'string', short: 'H', multiple: true },
  data: { type: 'string', short: 'd', multiple: true },
  preset: { type: 'string' },
  policy: { type: 'string' },
  deadline: { type: 'string' },
  'attempt-timeout': { type: 'string' },
  'max-attempts': { type: 'string' },
  'idempotency-key': { type: 'string' },
  events: { type: 'string' },
  verbose: { type: 'boolean', short: 'v' },
} as const;

/** The policy fields the flags set, and the flag of each. */
const FLAG_OF_FIELD: Record<string, string> = { deadlineMs: 'deadline', attemptTimeoutMs: 'attempt-timeout', maxAttempts: 'max-attempts' };

export async function fetchCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals, flag } = parseFlags({ args: argv, allowPositionals: true, options: OPTIONS });
  if (positionals.length !== 1) {
    io.err(`relent fetch: expected one URL, got ${positionals.length} (try: relent fetch --help)\n`);
    return EXIT.usage;
  }
  let url: URL;
  try {
    url = new URL(positionals[0]!);
  } catch {
    throw usage('URL: expected an absolute http:// or https:// URL (not shown: it may hold a token)', 'URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw usage(`URL: expected http:// or https://, got ${url.protocol}`, 'URL');

  // Policy: --preset, then --policy on top, then the flags on top. Each error names what the user gave.
  let spec: PolicySpec = values.policy !== undefined ? await policyFrom(values.policy) : {};
  if (values.preset !== undefined) spec = { ...spec, preset: values.preset as PresetName }; // checked just below
  try {
    resolvePolicy(spec);
  } catch (e) {
    if (RelentError.is(e)) {
      const which = values.policy === undefined || (e.field === 'preset' && values.preset !== undefined) ? '--preset' : '--policy';
      throw usage(`${which}: ${e.message}`, which);
    }
    throw e;
  }
  const over: { deadlineMs?: number; attemptTimeoutMs?: number; maxAttempts?: number } = {};
  if (values.deadline !== undefined) over.deadlineMs = parseDuration(values.deadline, '--deadline');
  if (values['attempt-timeout'] !== undefined) over.attemptTimeoutMs = parseDuration(values['attempt-timeout'], '--attempt-timeout');
  if (values['max-attempts'] !== undefined) {
    const n = Number(values['max-attempts']);
    if (!/^\d+$/.test(values['max-attempts']) || !Number.isInteger(n) || n < 1 || n > 10_000) {
      throw usage(`--max-attempts: expected an integer from 1 to 10000, got ${JSON.stringify(values['max-attempts'])}`, '--max-attempts');
    }
    over.maxAttempts = n;
  }
  spec = { ...spec, ...over };
  try {
    resolvePolicy(spec); // validate now: errors name the flag
  } catch (e) {
    if (!RelentError.is(e)) throw e;
    const f = FLAG_OF_FIELD[e.field ?? ''];
    if (f !== undefined && values[f as keyof typeof values] !== undefined) {
      const range = /in \[(\d+), \d+\]/.exec(e.message);
      const want =
        range && f !== 'max-attempts'
          ? `expected a duration of at least ${range[1]}ms`
          : e.message.replace(/^Expected `\w+` to be /, 'expected ').replace(/, got .*$/, '');
      throw usage(`--${f}: ${want}, got ${JSON.stringify(values[f as keyof typeof values])}`, `--${f}`);
    }
    throw usage(`--policy: ${e.message}`, '--policy');
  }

  const headers = (values.header ?? []).map((h, i) => parseHeader(h, i, flag('header')));
  let body: Buffer | undefined;
  if (values.data !== undefined && values.data.length > 0) {
    const parts = await Promise.all(values.data.map((d) => (d.startsWith('@') ? readAt(d, flag('data')) : Promise.resolve(Buffer.from(d, 'utf8')))));
    body = Buffer.concat(parts.flatMap((p, i) => (i === 0 ? [p] : [Buffer.from('&'), p])));
    if (!headers.some(([n]) => n.toLowerCase() === 'content-type')) headers.push(['content-type', 'application/x-www-form-urlencoded']);
  }
  const method = values.request ?? (body !== undefined ? 'POST' : 'GET');
  if (!TOKEN.test(method)) throw usage(`${flag('request')}: expected an HTTP method, got ${JSON.stringify(method)}`, flag('request'));

  let sink: JsonlSink | null = null;
  if (values.events !== undefined) {
    try {
      sink = createJsonlSink(values.events);
    } catch (e) {
      throw usage(`--events: cannot open ${JSON.stringify(values.events)} (${(e as { code?: string }).code ?? 'error'})`, '--events');
    }
  }
  let result: ResultEvent | null = null;
  const onEvent = (e: RelentEvent): void => {
    if (e.type === 'result') result = e;
    if (sink !== null) sink.onEvent(e);
    if (values.verbose) io.err(`${formatHuman(e)}\n`);
  };

  // Ctrl-C (or SIGTERM) cancels the operation: the call or the wait in progress ends at
  // once, and the command exits with the documented status of `cancelled` and one line.
  // A second signal exits at once.
  const controller = new AbortController();
  let stoppedBy: string | null = null;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (stoppedBy !== null) process.exit(signal === 'SIGINT' ? 130 : 143);
    stoppedBy = signal;
    controller.abort(new Error(`stopped by ${signal}`));
  };
  const listen = io === processIo;
  if (listen) {
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  }
  const cancelled = (attempts: number | null): number => {
    io.err(
      `relent fetch: cancelled by ${stoppedBy}${attempts !== null ? ` after ${attempts} attempt${attempts === 1 ? '' : 's'}` : ' while reading the body'}\n`,
    );
    return EXIT.cancelled;
  };

  const client = createClient({ policy: spec });
  const decoder = new TextDecoder();
  const write = async (c: Uint8Array): Promise<void> => {
    if (io !== processIo) return io.out(decoder.decode(c, { stream: true }));
    if (!writeTo('stdout', c) && !outputClosed('stdout')) await new Promise((r) => process.stdout.once('drain', r));
  };
  const pipe = async (res: Response): Promise<void> => {
    if (res.body === null) return;
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) await write(chunk);
    if (io !== processIo) io.out(decoder.decode());
  };
  try {
    const res = await client.fetch(url, {
      method,
      headers,
      ...(body !== undefined ? { body } : {}),
      ...(values['idempotency-key'] !== undefined ? { idempotencyKey: values['idempotency-key'] } : {}),
      signal: controller.signal,
      onEvent,
    });
    try {
      await pipe(res);
    } catch (e) {
      if (stoppedBy !== null) return cancelled(null);
      throw e;
    }
    const r = result as ResultEvent | null;
    const reason = r?.reason ?? 'return';
    const code = exitFor(reason);
    if (code !== EXIT.ok) io.err(`relent fetch: ${reason} after ${r?.attempts ?? 1} attempt${r?.attempts === 1 ? '' : 's'} (status ${res.status})\n`);
    return code;
  } catch (e) {
    if (e instanceof RelentFetchError && e.reason !== null) {
      if (e.reason === 'cancelled' && stoppedBy !== null) return cancelled(e.attempts);
      if (e.response !== null) await pipe(e.response).catch(() => undefined);
      io.err(`relent fetch: ${e.message}\n`);
      return exitFor(e.reason);
    }
    throw e;
  } finally {
    if (listen) {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
    sink?.close();
    await client.close();
  }
}
