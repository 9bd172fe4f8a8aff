import { closeSync, openSync, writeSync } from 'node:fs';
import { openDeliveryQueue, prepareItem, type DeliveryQueue } from '../delivery/queue.js';
import { resolveWorkerSettings, type DeliveryConfig } from '../delivery/config.js';
import { DeliveryError } from '../delivery/errors.js';
import type { DeliveryEvent, DeliveryWorker } from '../delivery/worker.js';
import type { DestinationStats } from '../delivery/types.js';
import { systemClock } from '../shared/clock.js';
import { EXIT, parseDuration, parseFlags, processIo, type Io } from './args.js';
import { onOutputClosed } from './io.js';
import { int, readConfig, relative, reportError, storeUrl } from './delivery-common.js';
import { createProgress, type Progress } from './progress.js';

export const DELIVER_HELP = `relent deliver --config FILE [--store URL] [options]

Runs a delivery worker: aggregates queued items into batches per destination, sends
them with each destination's retry policy (the same decision core as run()), and
stores every decision (retry at not_before, dropped, delivered). Several workers may
share a PostgreSQL store.

  --config FILE       destinations and worker settings (JSON; see docs/delivery.md)
  --store URL         sqlite:./relent.db (default) or postgres://user@host/db[?schema=NAME]
  --lease D           claim lease (default 15s; a dead worker's batches return after it)
  --poll D            how often an idle worker looks for work (default 500ms)
  --exit-when-idle    stop (exit 0) once nothing is queued, deferred or in flight
                      (a paused destination's items wait for \`relent queue resume\`)
  --events FILE|-     write every event as a JSON line (- for stderr)
  --progress / --no-progress   the progress line on stderr redrawn in place, or none
                      (default: redrawn on a terminal, else a line every 5 s), with
                      when the next deferred batch is due
  -q, --quiet         no progress line (errors and the final summary still print)
  --worker-id ID      the name written into leases and attempt history

SIGINT/SIGTERM stop gracefully: requests in flight finish (up to stopTimeoutMs), the
rest give their claims back. A second signal exits at once (claims then expire).
Exit status: 0 after a graceful stop; 2 for a malformed config; 1 when the store
cannot be used (unreachable, full, locked).
`;

export const ENQUEUE_HELP = `relent enqueue DESTINATION [--data JSON | --file FILE|-] [--key KEY] [--store URL] [--config FILE] [--json]

Stores items durably for a destination (one transaction per 1000 items; nothing is
stored from a chunk that fails).

  --data JSON      one item: this payload
  --key KEY        its dedupe key (default: a random UUID); a known key is not stored twice
  --file FILE|-    JSON lines, each {"key"?: "...", "payload": ...}
  --config FILE    refuse a DESTINATION the config does not name (and take its store);
                   without it, a warning says that nothing checked the destination
`;

function formatStats(stats: readonly DestinationStats[], limits: string, nextDue: string | null = null): string {
  let queued = 0;
  let inflight = 0;
  let deferred = 0;
  let delivered = 0;
  let dropped = 0;
  for (const s of stats) {
    queued += s.pendingItems + s.readyItems;
    deferred += s.deferredItems;
    inflight += s.inflightItems;
    delivered += s.deliveredItems;
    dropped += s.droppedItems;
  }
  return `queued ${int(queued)} · in flight ${int(inflight)} · delivered ${int(delivered)} · deferred ${int(deferred)}${deferred > 0 && nextDue !== null ? ` (next retry ${nextDue})` : ''} · dropped ${int(dropped)}${limits}`;
}

/** What `relent deliver` was asked, its flags checked. */
interface DeliverFlags {
  readonly config: string;
  readonly store: string | undefined;
  readonly events: string | undefined;
  /** --progress / --no-progress as given (undefined: by the terminal). */
  readonly progress: boolean | undefined;
  readonly quiet: boolean;
  readonly workerId: string | undefined;
  readonly exitWhenIdle: boolean;
  /** --lease and --poll, when given. */
  readonly settings: { leaseMs?: number; pollMs?: number };
}

/** A running `relent deliver`: what its event handler, its progress tick and its stop share. */
interface DeliverSession {
  readonly io: Io;
  readonly flags: DeliverFlags;
  readonly queue: DeliveryQueue;
  readonly progress: Progress;
  /** The events file (2: stderr), or null: none asked, or stderr's reader is gone. */
  fd: number | null;
  /** The last store error printed (the same one is not printed again in a row). */
  lastError: string;
  /** When each deferred batch is due, from this worker's events (and the store, at start). */
  readonly deferredUntil: Map<number, number>;
}

/** The flags, checked before anything is opened; each error names its flag (then the exit status). */
function parseDeliverFlags(argv: string[], io: Io): DeliverFlags | number {
  const { values } = parseFlags({
    args: argv,
    options: {
      config: { type: 'string' },
      store: { type: 'string' },
      lease: { type: 'string' },
      poll: { type: 'string' },
      'exit-when-idle': { type: 'boolean' },
      events: { type: 'string' },
      progress: { type: 'boolean' },
      'no-progress': { type: 'boolean' },
      'worker-id': { type: 'string' },
      quiet: { type: 'boolean', short: 'q' },
    },
  });
  if (!values.config) {
    io.err('relent deliver: missing --config FILE (the destinations to deliver to)\n');
    return EXIT.usage;
  }
  const flagged: { leaseMs?: number; pollMs?: number } = {};
  if (values.lease !== undefined) flagged.leaseMs = parseDuration(values.lease, '--lease');
  if (values.poll !== undefined) flagged.pollMs = parseDuration(values.poll, '--poll');
  try {
    resolveWorkerSettings(flagged, 'worker');
  } catch (e) {
    if (!DeliveryError.is(e)) throw e;
    const flag = e.field === 'worker.pollMs' ? '--poll' : '--lease';
    const given = flag === '--poll' ? values.poll : values.lease;
    const range = flag === '--poll' ? 'from 1ms to 1h' : 'from 100ms to 24h';
    io.err(`relent deliver: ${flag}: expected a duration ${range}, got ${JSON.stringify(given)}\n`);
    return EXIT.usage;
  }
  return {
    config: values.config,
    store: values.store,
    events: values.events,
    progress: values.progress,
    quiet: values.quiet === true || values['no-progress'] === true,
    workerId: values['worker-id'],
    exitWhenIdle: values['exit-when-idle'] === true,
    settings: flagged,
  };
}

export async function deliverCommand(argv: string[], io: Io): Promise<number> {
  const flags = parseDeliverFlags(argv, io);
  if (typeof flags === 'number') return flags;
  let config: DeliveryConfig;
  let queue: DeliveryQueue;
  try {
    config = await readConfig(flags.config);
    queue = await openDeliveryQueue({ store: storeUrl(flags.store, config), destinations: config.destinations });
  } catch (e) {
    return reportError('deliver', e, io);
  }
  const progress = createProgress({
    name: 'relent deliver',
    io,
    quiet: flags.quiet,
    ...(flags.progress !== undefined ? { tty: flags.progress } : {}),
    delayMs: 0,
  });
  let fd: number | null;
  try {
    fd = flags.events === undefined ? null : flags.events === '-' ? 2 : openSync(flags.events, 'a');
  } catch (e) {
    await queue.close();
    io.err(`relent deliver: --events: cannot open ${JSON.stringify(flags.events)} (${(e as { code?: string }).code ?? 'error'})\n`);
    return EXIT.usage;
  }
  const s: DeliverSession = { io, flags, queue, progress, fd, lastError: '', deferredUntil: new Map() };
  const worker = queue.createWorker({
    ...config.worker,
    ...flags.settings,
    ...(flags.workerId !== undefined ? { workerId: flags.workerId } : {}),
    onEvent: (e) => printEvent(s, e),
  });
  try {
    for (const b of await queue.list({ state: 'deferred', limit: 1000 })) if (!s.deferredUntil.has(b.id)) s.deferredUntil.set(b.id, b.notBefore);
  } catch {
    // the next-retry time is a nicety; the worker reports the store's errors
  }
  worker.start();
  return runWorker(s, worker, [...config.destinations.keys()]);
}

/** When the next deferred batch is due, as "in 3 s" (null: none). */
function nextDue(s: DeliverSession): string | null {
  const now = Date.now();
  let next = Infinity;
  for (const t of s.deferredUntil.values()) if (t > now && t < next) next = t;
  return next === Infinity ? null : relative(next, now);
}

/** A worker's event: written to the events file, noted when it defers or settles a batch, printed when the store failed. */
function printEvent(s: DeliverSession, e: DeliveryEvent): void {
  if (s.fd !== null) {
    try {
      writeSync(s.fd, JSON.stringify(e.type === 'store_error' ? { type: e.type, during: e.during, code: e.error.code, message: e.error.message } : e) + '\n');
    } catch (err) {
      if (s.fd === 2 && (err as { code?: string }).code === 'EPIPE')
        s.fd = null; // stderr's reader is gone
      else throw err;
    }
  }
  if (e.type === 'deferred') s.deferredUntil.set(e.batchId, e.notBefore);
  else if (e.type === 'attempt' || e.type === 'delivered' || e.type === 'dropped') s.deferredUntil.delete(e.batchId);
  if (e.type === 'store_error' && e.error.message !== s.lastError) {
    s.lastError = e.error.message;
    s.progress.clear();
    s.io.err(`relent deliver: ${e.error.message}\n`);
  }
}

/** The started worker until a signal, a closed output or (--exit-when-idle) an empty queue stops it: the exit status. */
function runWorker(s: DeliverSession, worker: DeliveryWorker, names: string[]): Promise<number> {
  const { io, queue, progress } = s;
  const exitWhenIdle = s.flags.exitWhenIdle;
  const limits = (): string => (names.length <= 4 ? ` · concurrency ${names.map((n) => `${n}=${worker.concurrency(n)}`).join(' ')}` : '');

  return new Promise<number>((resolve) => {
    let stopping = false;
    let cancelTick: (() => void) | null = null;
    const finish = async (code: number, why: string): Promise<void> => {
      if (stopping) return;
      stopping = true;
      cancelTick?.();
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      offClosed();
      process.once('SIGINT', () => process.exit(130));
      process.once('SIGTERM', () => process.exit(143));
      const r = await worker.stop();
      let summary = '';
      try {
        summary = formatStats(
          (await queue.stats()).filter((st) => names.includes(st.destination)),
          '',
        );
      } catch {
        // the store may be the reason we stop
      }
      await queue.close();
      if (s.fd !== null && s.fd !== 2) closeSync(s.fd);
      progress.clear();
      io.err(`relent deliver: ${why}; released ${r.released} claim${r.released === 1 ? '' : 's'}${summary ? ` — ${summary}` : ''}\n`);
      resolve(code);
    };
    const onSignal = (signal: NodeJS.Signals): void => {
      void finish(EXIT.ok, `stopped by ${signal}`);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    // Output closed by its reader (`relent deliver … | head`): stop as on a signal, claims given back.
    const offClosed = io === processIo ? onOutputClosed(() => void finish(EXIT.ok, 'output closed')) : () => undefined;
    const tick = (): void => {
      cancelTick = null;
      void (async () => {
        try {
          const stats = (await queue.stats()).filter((st) => names.includes(st.destination));
          const c = worker.counters();
          progress.status(formatStats(stats, limits(), nextDue(s)));
          if (
            exitWhenIdle &&
            c.inflight === 0 &&
            stats.every((st) => st.inflightBatches === 0 && (st.paused || st.pendingItems + st.readyBatches + st.deferredBatches === 0))
          ) {
            await finish(EXIT.ok, 'idle');
            return;
          }
        } catch (e) {
          if (DeliveryError.is(e) && e.message !== s.lastError) {
            s.lastError = e.message;
            progress.clear();
            io.err(`relent deliver: ${e.message}\n`);
          }
        }
        if (!stopping) cancelTick = systemClock.setTimer(tick, exitWhenIdle ? 250 : 1_000);
      })();
    };
    cancelTick = systemClock.setTimer(tick, 250);
  });
}

interface FileItem {
  readonly key?: string;
  readonly payload: unknown;
}

async function readItems(source: string): Promise<FileItem[]> {
  let text: string;
  if (source === '-') {
    const chunks: Buffer[] = [];
    for await (const c of process.stdin) chunks.push(c as Buffer);
    text = Buffer.concat(chunks).toString('utf8');
  } else {
    const { readFile } = await import('node:fs/promises');
    try {
      text = await readFile(source, 'utf8');
    } catch (e) {
      throw new DeliveryError('ERR_INVALID_ITEM', `${source}: cannot read (${(e as { code?: string }).code ?? String(e)})`);
    }
  }
  const out: FileItem[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === '') continue;
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch {
      throw new DeliveryError('ERR_INVALID_ITEM', `${source}:${i + 1}: invalid JSON`, { field: `line ${i + 1}` });
    }
    if (typeof v !== 'object' || v === null || Array.isArray(v) || !('payload' in v)) {
      throw new DeliveryError('ERR_INVALID_ITEM', `${source}:${i + 1}: expected {"key"?: "...", "payload": ...}`, { field: `line ${i + 1}` });
    }
    const o = v as { key?: unknown; payload: unknown };
    if (o.key !== undefined && typeof o.key !== 'string')
      throw new DeliveryError('ERR_INVALID_ITEM', `${source}:${i + 1}: expected \`key\` to be a string`, { field: `line ${i + 1}.key` });
    out.push(o.key === undefined ? { payload: o.payload } : { key: o.key, payload: o.payload });
  }
  return out;
}

export async function enqueueCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseFlags({
    args: argv,
    allowPositionals: true,
    options: {
      data: { type: 'string' },
      key: { type: 'string' },
      file: { type: 'string' },
      store: { type: 'string' },
      config: { type: 'string' },
      json: { type: 'boolean' },
    },
  });
  const destination = positionals[0];
  if (destination === undefined || positionals.length > 1) {
    io.err('relent enqueue: expected one DESTINATION (try: relent enqueue --help)\n');
    return EXIT.usage;
  }
  if ((values.data === undefined) === (values.file === undefined)) {
    io.err('relent enqueue: give exactly one of --data JSON and --file FILE\n');
    return EXIT.usage;
  }
  let queue: DeliveryQueue | null = null;
  try {
    const config = values.config ? await readConfig(values.config) : null;
    // A destination no worker knows would wait forever: refused when a config names the
    // destinations, else a warning (the worker's config is not known here).
    if (config !== null && !config.destinations.has(destination)) {
      throw new DeliveryError(
        'ERR_UNKNOWN_DESTINATION',
        `unknown destination ${JSON.stringify(destination)}: ${values.config} names ${[...config.destinations.keys()].map((d) => JSON.stringify(d)).join(', ')}`,
        { field: 'DESTINATION' },
      );
    }
    let items: FileItem[];
    if (values.data !== undefined) {
      let payload: unknown;
      try {
        payload = JSON.parse(values.data);
      } catch {
        throw new DeliveryError('ERR_INVALID_ITEM', '--data: invalid JSON', { field: '--data' });
      }
      items = [values.key === undefined ? { payload } : { key: values.key, payload }];
    } else {
      if (values.key !== undefined)
        throw new DeliveryError('ERR_INVALID_ITEM', '--key goes with --data (in --file, each line has its own key)', { field: '--key' });
      items = await readItems(values.file!);
    }
    // Validate everything before storing anything.
    items.forEach((it, i) => prepareItem(destination, it.payload, it.key, `items[${i}]`));
    queue = await openDeliveryQueue({ store: storeUrl(values.store, config), ...(config ? { destinations: config.destinations } : {}) });
    let stored = 0;
    let duplicates = 0;
    for (let i = 0; i < items.length; i += 1000) {
      let res;
      try {
        res = await queue.enqueueMany(destination, items.slice(i, i + 1000));
      } catch (e) {
        if (DeliveryError.is(e) && i > 0) {
          throw new DeliveryError(e.code, `${e.message} (items 1-${i} were stored; items ${i + 1}-${items.length} were not)`, { cause: e });
        }
        throw e;
      }
      for (const r of res) {
        if (r.duplicate) duplicates++;
        else stored++;
      }
    }
    if (config === null)
      io.err(
        `relent enqueue: warning: no --config given, so nothing checked that a worker delivers to ${JSON.stringify(destination)}; items for a destination missing from the worker's config wait until one names it\n`,
      );
    if (values.json) io.out(JSON.stringify({ destination, stored, duplicates }) + '\n');
    else io.out(`enqueued ${int(stored)} item${stored === 1 ? '' : 's'} for ${destination}${duplicates ? ` (${int(duplicates)} already queued)` : ''}\n`);
    return EXIT.ok;
  } catch (e) {
    return reportError('enqueue', e, io);
  } finally {
    await queue?.close();
  }
}
