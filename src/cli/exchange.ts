import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { RelentError } from '../core/errors.js';
import type { AuctionSummary, Exchange, ExchangeStats } from '../rtb/exchange.js';
import { createExchange } from '../rtb/exchange.js';
import { createJsonlSink, type JsonlSink } from '../run/sinks.js';
import { alignedTable, EXIT, fsReason, jsonErrorWhere, parseDuration, type Io } from './args.js';

export const EXCHANGE_HELP = `relent exchange --config FILE [options]

Serves an OpenRTB exchange: POST /openrtb2/auction polls the configured demand
partners in parallel under the source's tmax and answers 200 with the winning
bids, 204 when there is none (or the source is disabled), 400 for a request it
cannot parse (the field is named in the x-relent-reason header).

  --config FILE        the exchange configuration (JSON; see docs/exchange.md)
  --port N             listen on this port (default: the config's, else 8080; 0 = any)
  --host H             listen on this address (default: the config's, else 127.0.0.1)
  --events FILE|-      every partner call's attempt events as JSON lines (- for stderr)
  --auctions FILE|-    one JSON line per auction (the summary) (- for stderr)
  --stats-every D      a line of statistics on stderr every D (default 10s; 0 = never)
  -q, --quiet          no statistics lines

Stops on SIGINT or SIGTERM: new connections are refused, every auction in flight
is answered, pending notices get two seconds. A second signal exits at once.
Exit status: 0 after a clean stop; 2 for a bad flag or configuration (the field
is named); 1 when the port cannot be opened.
`;

function usage(message: string, field: string): RelentError {
  return new RelentError('ERR_INVALID_INPUT', message, { field });
}

/** Reads a JSON configuration file; errors name the file and the position. */
export async function readJsonConfig(path: string, flag = '--config'): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    throw usage(`${flag} ${path}: cannot read (${fsReason(e, 'error')})`, flag);
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw usage(`${flag} ${path}: invalid JSON at ${jsonErrorWhere(text)}`, flag);
  }
}

/** Re-throws a configuration error with the file's name in front. */
export function inConfig<T>(path: string, f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (RelentError.is(e) && (e.code === 'ERR_INVALID_INPUT' || e.code === 'ERR_INVALID_POLICY')) {
      throw new RelentError('ERR_INVALID_INPUT', `${path}: ${e.message}`, { field: e.field });
    }
    throw e;
  }
}

export function parsePort(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d{1,5}$/.test(v) || Number(v) > 65_535) throw usage(`--port: expected a port number 0–65535, got ${JSON.stringify(v)}`, '--port');
  return Number(v);
}

/** The flags every long-running server command takes (exchange, bidder), for parseArgs. */
export const SERVER_FLAGS = {
  config: { type: 'string' },
  port: { type: 'string' },
  host: { type: 'string' },
  'stats-every': { type: 'string' },
  quiet: { type: 'boolean', short: 'q' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** The server flags checked: the config file (required), the port and the stats interval (default 10 s). */
export function serverSettings(values: { readonly config?: string; readonly port?: string; readonly 'stats-every'?: string }, command: string): { config: string; port: number | undefined; everyMs: number } {
  if (values.config === undefined) throw usage(`--config FILE is required (see relent help ${command})`, '--config');
  const port = parsePort(values.port);
  const everyMs = values['stats-every'] === undefined ? 10_000 : parseDuration(values['stats-every'], '--stats-every');
  return { config: values.config, port, everyMs };
}

export function parseFlagsOrUsage<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof TypeError && (e as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) throw usage(e.message.replace(/\s*\n\s*/g, ' '), 'flags');
    throw e;
  }
}

/**
 * Resolves with the name of the first SIGINT/SIGTERM; a second one calls `onSecond`.
 * The listeners are removed by the returned `dispose`.
 */
export function waitForStop(onSecond: () => void): { stopped: Promise<string>; dispose: () => void } {
  let count = 0;
  let resolve!: (s: string) => void;
  const stopped = new Promise<string>((r) => {
    resolve = r;
  });
  const on = (signal: string): void => {
    if (++count === 1) resolve(signal);
    else onSecond();
  };
  const onInt = (): void => on('SIGINT');
  const onTerm = (): void => on('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);
  return {
    stopped,
    dispose: () => {
      process.off('SIGINT', onInt);
      process.off('SIGTERM', onTerm);
    },
  };
}

const pct = (n: number, total: number): string => (total === 0 ? '0%' : `${Math.round((n / total) * 100)}%`);

/** One line of exchange statistics (also the demo's live line). */
export function statsLine(s: ExchangeStats, seconds: number | null = null): string {
  const a = s.auctions;
  const st = a.byStatus;
  const rate = seconds !== null && seconds > 0 ? ` ${Math.round(a.total / seconds)}/s` : '';
  const timeouts = s.partners.reduce((n, p) => n + p.timeouts, 0);
  const skipped = s.partners.reduce((n, p) => n + p.skipped.circuit_open + p.skipped.at_capacity + p.skipped.no_time, 0);
  const open = s.partners.filter((p) => p.breaker === 'open' || p.breaker === 'half_open').map((p) => p.name);
  return [
    `auctions ${a.total}${rate}`,
    `200 ${pct(st['200'] ?? 0, a.total)} 204 ${pct(st['204'] ?? 0, a.total)} 400 ${st['400'] ?? 0}`,
    `p50 ${Math.round(a.answerMs.p50Ms)} p99 ${Math.round(a.answerMs.p99Ms)} ms`,
    `after deadline ${a.afterDeadline}`,
    `partner timeouts ${timeouts} skipped ${skipped}`,
    ...(open.length > 0 ? [`open: ${open.join(',')}`] : []),
  ].join(' | ');
}

/** A table of per-partner statistics. */
export function partnerTable(s: ExchangeStats): string {
  const rows = [['partner', 'calls', 'bids (answers)', 'won', 'no-bids (nbr)', 'errors', 'timeouts (late)', 'skipped open/full/time', 'p50/p99 ms', 'breaker']];
  for (const p of s.partners) {
    const nbr = Object.values(p.noBidReasons).reduce((x, y) => x + y, 0);
    const kinds = Object.entries(p.errorKinds).map(([k, v]) => `${k}×${v}`).join(' ');
    rows.push([
      p.name, String(p.calls), `${p.bidsReceived} (${p.bidAnswers})`, String(p.bidsWon), `${p.noBids} (${nbr})`, p.errors === 0 ? '0' : `${p.errors} ${kinds}`,
      `${p.timeouts} (${p.late})`, `${p.skipped.circuit_open}/${p.skipped.at_capacity}/${p.skipped.no_time}`,
      p.latency.count === 0 ? '-' : `${Math.round(p.latency.p50Ms)}/${Math.round(p.latency.p99Ms)}`, p.breaker,
    ]);
  }
  return alignedTable(rows);
}

function sinkFor(path: string | undefined): JsonlSink | null {
  return path === undefined ? null : createJsonlSink(path);
}

export async function exchangeCommand(argv: string[], io: Io): Promise<number> {
  const { values } = parseFlagsOrUsage(() => parseArgs({
    args: argv,
    options: { ...SERVER_FLAGS, events: { type: 'string' }, auctions: { type: 'string' } },
  }));
  if (values.help) {
    io.out(EXCHANGE_HELP);
    return EXIT.ok;
  }
  const { config, port, everyMs: every } = serverSettings(values, 'exchange');
  const raw = await readJsonConfig(config);
  const events = sinkFor(values.events);
  const auctions = values.auctions === undefined ? null : createJsonlSink(values.auctions);
  let exchange: Exchange;
  try {
    exchange = inConfig(config, () => createExchange(raw as never, {
      onEvent: events === null ? null : events.onEvent,
      onAuction: auctions === null ? null : (s: AuctionSummary) => auctions.onEvent(s as never),
    }));
  } catch (e) {
    events?.close();
    auctions?.close();
    throw e;
  }
  let info;
  try {
    info = await exchange.listen(port, values.host);
  } catch (e) {
    await exchange.close({ force: true, noticeDrainMs: 0 });
    events?.close();
    auctions?.close();
    io.err(`relent exchange: cannot listen: ${e instanceof Error ? e.message : String(e)}\n`);
    return EXIT.failure;
  }
  const started = performance.now();
  io.out(`relent exchange: listening on ${info.url} (partners: ${exchange.config.partners.map((p) => p.name).join(', ')})\n`);
  const timer = !values.quiet && every > 0 ? setInterval(() => io.err(`${statsLine(exchange.stats(), (performance.now() - started) / 1000)}\n`), every) : null;
  timer?.unref();
  const stop = waitForStop(() => {
    io.err('relent exchange: second signal, exiting now\n');
    process.exit(EXIT.cancelled);
  });
  try {
    const signal = await stop.stopped;
    if (timer) clearInterval(timer);
    io.err(`relent exchange: ${signal}: answering ${exchange.inFlight} auction(s) in flight, then stopping\n`);
    await exchange.close();
  } finally {
    stop.dispose();
    events?.close();
    auctions?.close();
  }
  const s = exchange.stats();
  io.out(`relent exchange: stopped. ${statsLine(s, (performance.now() - started) / 1000)}\n`);
  io.out(partnerTable(s));
  return EXIT.ok;
}
