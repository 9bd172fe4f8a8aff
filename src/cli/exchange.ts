import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { basename, dirname, join, resolve as resolvePath } from 'node:path';
import { RelentError } from '../core/errors.js';
import { resolveExchangeConfig, type ResolvedExchangeConfig } from '../rtb/config.js';
import type { AuctionSummary, ExchangeStats, PartnerLimitChange, WarmupReport } from '../rtb/exchange.js';
import { createJsonlSink, type JsonlSink } from '../run/sinks.js';
import { isExchangeWorker, openFleet, runExchangeWorker, startCluster, startInProcess, type ExchangeProcesses } from './exchange-cluster.js';
import { EXIT, fsReason, jsonErrorWhere, parseDuration, parseFlags, type Io } from './args.js';
import { onOutputClosed, table } from './io.js';

export const EXCHANGE_HELP = `relent exchange --config FILE [options]

Serves an OpenRTB exchange: POST /openrtb2/auction polls the configured demand
partners in parallel under the source's tmax and answers 200 with the winning
bids, 204 when there is none (or the source is disabled), 400 for a request it
cannot parse (the field is named in the x-relent-reason header), 408 (and the
connection closed) for a request that has not all arrived within readTimeoutMs.
GET /healthz answers 200 while the process runs; GET /readyz 200 when it takes
auctions (503 while it stops).

Before it listens, each process opens connections to every partner and runs
dry-run auctions against a stand-in partner on loopback; then one line on
stderr says it is ready. Win, billing and loss notices go through the durable
delivery queue: by default a SQLite file next to the config (FILE without .json
+ .notices.db); "notices.store" in the config names another (postgres://…) or
"memory". \`relent queue --store sqlite:… ls\` shows them.

  --config FILE        the exchange configuration (JSON; see docs/exchange.md)
  --port N             listen on this port (default: the config's, else 8080; 0 = any)
  --host H             listen on this address (default: the config's, else 127.0.0.1)
  --workers N          exchange processes sharing the port (default: one per core);
                       1 serves from this process alone
  --events FILE|-      every partner call's attempt events as JSON lines (- for stderr),
                       and each change of a partner's adaptive limit ("type": "limit")
  --auctions FILE|-    one JSON line per auction (the summary) (- for stderr)
  --stats-every D      a line of statistics on stderr every D (default 10s; 0 = never)
  -q, --quiet          no statistics lines

Stops on SIGINT or SIGTERM: the port is closed, every auction in flight is
answered by its deadline, notices are written to the queue (in memory: they get
two seconds), then it exits. A second signal exits at once.
Exit status: 0 after a clean stop; 2 for a bad flag or configuration (the field
is named); 1 when the port or the notice store cannot be opened.
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
} as const;

/** The server flags checked: the config file (required), the port and the stats interval (default 10 s). */
export function serverSettings(
  values: { readonly config?: string; readonly port?: string; readonly 'stats-every'?: string },
  command: string,
): { config: string; port: number | undefined; everyMs: number } {
  if (values.config === undefined) throw usage(`--config FILE is required (see relent help ${command})`, '--config');
  const port = parsePort(values.port);
  const everyMs = values['stats-every'] === undefined ? 10_000 : parseDuration(values['stats-every'], '--stats-every');
  return { config: values.config, port, everyMs };
}

/**
 * Resolves with the name of the first SIGINT/SIGTERM (or "output closed" when the reader
 * of standard output or error goes away); a second signal calls `onSecond`. The
 * listeners are removed by the returned `dispose`.
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
  const offClosed = onOutputClosed(() => on('output closed'));
  return {
    stopped,
    dispose: () => {
      process.off('SIGINT', onInt);
      process.off('SIGTERM', onTerm);
      offClosed();
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
  const skipped = s.partners.reduce((n, p) => n + p.skipped.circuit_open + p.skipped.at_capacity + p.skipped.concurrency_limited + p.skipped.no_time, 0);
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
  const header = [
    'partner',
    'calls',
    'bids (answers)',
    'won',
    'no-bids (nbr)',
    'errors',
    'timeouts (late)',
    'skipped open/full/limit/time',
    'limit (lowest)',
    'p50/p99 ms',
    'breaker',
  ];
  const rows: string[][] = [];
  for (const p of s.partners) {
    const nbr = Object.values(p.noBidReasons).reduce((x, y) => x + y, 0);
    const kinds = Object.entries(p.errorKinds)
      .map(([k, v]) => `${k}×${v}`)
      .join(' ');
    rows.push([
      p.name,
      String(p.calls),
      `${p.bidsReceived} (${p.bidAnswers})`,
      String(p.bidsWon),
      `${p.noBids} (${nbr})`,
      p.errors === 0 ? '0' : `${p.errors} ${kinds}`,
      `${p.timeouts} (${p.late})`,
      `${p.skipped.circuit_open}/${p.skipped.at_capacity}/${p.skipped.concurrency_limited}/${p.skipped.no_time}`,
      p.concurrencyLimit === null ? `${p.maxConcurrency} fixed` : `${p.concurrencyLimit.limit} (${p.concurrencyLimit.lowest}) ${p.concurrencyLimit.kind}`,
      p.latency.count === 0 ? '-' : `${Math.round(p.latency.p50Ms)}/${Math.round(p.latency.p99Ms)}`,
      p.breaker,
    ]);
  }
  return table(header, rows, { align: ['l', 'r', 'r', 'r', 'r', 'l', 'r', 'r', 'r', 'r', 'l'] });
}

function sinkFor(path: string | undefined): JsonlSink | null {
  return path === undefined ? null : createJsonlSink(path);
}

/** The default notice store of a config file: a SQLite file next to it, `<name without .json>.notices.db`. */
export function defaultNoticeStore(configPath: string): string {
  const abs = resolvePath(configPath);
  return `sqlite:${join(dirname(abs), `${basename(abs).replace(/\.json$/i, '')}.notices.db`)}`;
}

/**
 * Reads an exchange config file and validates it. The notice store defaults to a SQLite
 * file next to the config, and a relative `sqlite:` path is taken from the config's
 * directory (the same file whichever directory the exchange is started from).
 */
export async function loadExchangeConfig(path: string): Promise<{ raw: unknown; config: ResolvedExchangeConfig }> {
  const raw = await readJsonConfig(path);
  let withStore = raw;
  if (typeof raw === 'object' && raw !== null && !Array.isArray(raw)) {
    const o = raw as Record<string, unknown>;
    const n = o.notices;
    if (n === undefined || (typeof n === 'object' && n !== null && !Array.isArray(n))) {
      const notices = (n ?? {}) as Record<string, unknown>;
      let store = notices.store;
      if (store === undefined) store = defaultNoticeStore(path);
      else if (typeof store === 'string' && store.startsWith('sqlite:')) {
        const file = store.slice('sqlite:'.length);
        if (file !== ':memory:' && !file.startsWith('/') && !file.startsWith(':')) store = `sqlite:${join(dirname(resolvePath(path)), file)}`;
      }
      withStore = { ...o, notices: { ...notices, store } };
    }
  }
  const config = inConfig(path, () => resolveExchangeConfig(withStore));
  return { raw: withStore, config };
}

function parseWorkers(v: string | undefined): number {
  if (v === undefined) return availableParallelism();
  if (!/^\d{1,3}$/.test(v) || Number(v) < 1 || Number(v) > 256)
    throw usage(`--workers: expected a number of processes 1–256, got ${JSON.stringify(v)}`, '--workers');
  return Number(v);
}

/** The ready line's account of the warm-up (the workers' connections added up). */
export function warmupSummary(reports: readonly WarmupReport[]): string {
  const first = reports[0];
  if (first === undefined) return '';
  const partners = first.partners.map((p, i) => {
    let opened = 0;
    let wanted = 0;
    let error: string | null = null;
    for (const r of reports) {
      const x = r.partners[i]!;
      opened += x.connections;
      wanted += x.wanted;
      error ??= x.error;
    }
    return `${p.name} ${opened}/${wanted}${error !== null && opened < wanted ? ` ${error}` : ''}`;
  });
  const dry = reports.reduce((n, r) => n + r.dryRunAuctions, 0);
  const late = reports.some((r) => r.timedOut) ? '; warm-up cut by warmup.timeoutMs' : '';
  return `connections ${partners.join(', ')}; ${dry} dry-run auctions${late}; notices: ${first.noticeStore}`;
}

export async function exchangeCommand(argv: string[], io: Io): Promise<number> {
  const { values } = parseFlags({
    args: argv,
    options: { ...SERVER_FLAGS, events: { type: 'string' }, auctions: { type: 'string' }, workers: { type: 'string' } },
  });
  const { config: path, port, everyMs: every } = serverSettings(values, 'exchange');
  const workers = parseWorkers(values.workers);
  const { raw, config } = await loadExchangeConfig(path);
  const events = sinkFor(values.events);
  const auctions = sinkFor(values.auctions);
  const onAuction = auctions === null ? null : (s: AuctionSummary): void => auctions.onEvent(s as never);
  // The partners' adaptive limits: every change goes with the call events.
  const onLimitChange = events === null ? null : (c: PartnerLimitChange): void => events.onEvent(c as never);
  const closeSinks = (): void => {
    events?.close();
    auctions?.close();
  };
  if (isExchangeWorker()) {
    try {
      return await runExchangeWorker({
        config: raw,
        fleet: config.fleet,
        port,
        host: values.host,
        processes: Number(process.env.RELENT_EXCHANGE_WORKERS),
        processIndex: Number(process.env.RELENT_EXCHANGE_SLOT ?? 0),
        onEvent: events?.onEvent ?? null,
        onAuction,
        onLimitChange,
      });
    } finally {
      closeSinks();
    }
  }
  // A bad `fleet` option is a configuration error (exit 2) before any worker starts.
  if (workers > 1) await (await openFleet(config.fleet, false))?.close();
  let running: ExchangeProcesses;
  try {
    running =
      workers === 1
        ? await startInProcess({
            config: raw,
            resolved: config,
            log: (l) => io.err(`${l}\n`),
            fleet: config.fleet,
            port,
            host: values.host,
            options: { onEvent: events?.onEvent ?? null, onAuction, onLimitChange },
          })
        : await startCluster({ config, argv, workers, log: (l) => io.err(`${l}\n`), onEvent: events?.onEvent ?? null });
  } catch (e) {
    closeSinks();
    if (RelentError.is(e) && e.code === 'ERR_INVALID_INPUT') throw e;
    io.err(`relent exchange: cannot start: ${e instanceof Error ? e.message : String(e)}\n`);
    return EXIT.failure;
  }
  const started = performance.now();
  const fleet = running.fleet === null ? '' : `; breakers and budgets shared through ${running.fleet}`;
  io.err(
    `relent exchange: ready on ${running.url} after ${running.readyMs} ms (${workers === 1 ? '1 process' : `${workers} workers`}; ${warmupSummary(running.warmup)}${fleet})\n`,
  );
  const timer = !values.quiet && every > 0 ? setInterval(() => io.err(`${statsLine(running.stats(), (performance.now() - started) / 1000)}\n`), every) : null;
  timer?.unref();
  const stop = waitForStop(() => {
    io.err('relent exchange: second signal, exiting now\n');
    process.exit(EXIT.cancelled);
  });
  let final: ExchangeStats;
  try {
    const signal = await stop.stopped;
    if (timer) clearInterval(timer);
    io.err(`relent exchange: ${signal}: answering ${running.stats().auctions.inFlight} auction(s) in flight, then stopping\n`);
    final = await running.close();
  } finally {
    stop.dispose();
    closeSinks();
  }
  io.out(`relent exchange: stopped. ${statsLine(final, (performance.now() - started) / 1000)}\n`);
  io.out(partnerTable(final));
  return EXIT.ok;
}
