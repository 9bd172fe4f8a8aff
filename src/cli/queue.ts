import { openDeliveryQueue, type DeliveryQueue } from '../delivery/queue.js';
import { DeliveryError } from '../delivery/errors.js';
import type { BatchSummary, ListState } from '../delivery/types.js';
import { EXIT, parseFlags, processIo, type Io } from './args.js';
import { colorEnabled, NO_PAINT, paintFor, table, type Paint } from './io.js';
import { int, readConfig, relative, reportError, storeUrl } from './delivery-common.js';

export const QUEUE_HELP = `relent queue <ls|show|requeue|drop-stats|stats|pause|resume> [--store URL] [--config FILE] [--json]

Inspects the delivery queue.

  ls [--state S] [--destination D] [--reason R] [--limit N] [--after ID]
        batches, oldest first; S is queued, ready, inflight, deferred, delivered or dropped
  show ID
        one batch: its items and every attempt of every round
  requeue (ID… | --destination D [--reason R] | --all) [--limit N]
        puts dropped batches back: a new round with fresh attempts, history and key kept
  drop-stats
        dropped batches counted by destination, reason and last status
  stats
        items per destination and state, the oldest waiting item, paused destinations
  pause DEST
        workers (every process on the store) claim nothing for DEST until resume;
        requests in flight finish, enqueue still accepts items
  resume DEST
        DEST is claimed again

The store is --store, else the config's "store", else $RELENT_STORE, else sqlite:./relent.db.
None of these creates a store: a SQLite file that does not exist is an error (status 1).
`;

const STATES: readonly ListState[] = ['queued', 'ready', 'inflight', 'deferred', 'delivered', 'dropped'];

function lastOf(b: { lastStatus: number | null; lastErrorClass: string | null }): string {
  return b.lastStatus !== null ? String(b.lastStatus) : (b.lastErrorClass ?? '-');
}

function stateOf(b: BatchSummary, now: number): string {
  if (b.state !== 'queued') return b.state;
  if (b.leaseUntil > now) return 'inflight';
  return b.notBefore > now ? 'deferred' : 'ready';
}

function positiveInt(v: string | undefined, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0)
    throw new DeliveryError('ERR_INVALID_CONFIG', `${flag}: expected a whole number, got ${JSON.stringify(v)}`, { field: flag });
  return n;
}

const SUBCOMMANDS = ['ls', 'show', 'requeue', 'drop-stats', 'stats', 'pause', 'resume'];

/** A checked `relent queue` command line: the subcommand, its arguments and the flags it reads. */
interface QueueRequest {
  readonly sub: string;
  readonly args: readonly string[];
  readonly json: boolean;
  readonly state: ListState | undefined;
  readonly destination: string | undefined;
  readonly reason: string | undefined;
  readonly limit: number | undefined;
  readonly after: number | undefined;
  readonly ids: number[];
}

/** What every subcommand runs with: the request, the open queue, where to write and the time it started. */
interface QueueContext {
  readonly req: QueueRequest;
  readonly queue: DeliveryQueue;
  readonly io: Io;
  readonly paint: Paint;
  readonly now: number;
}

/** Checks the flags and arguments of a subcommand; a bad one throws a DeliveryError naming it. */
function queueRequest(
  sub: string,
  args: readonly string[],
  values: { json?: boolean; state?: string; destination?: string; reason?: string; limit?: string; after?: string; all?: boolean },
): QueueRequest {
  const state = values.state as ListState | undefined;
  if (state !== undefined && !STATES.includes(state)) {
    throw new DeliveryError('ERR_INVALID_CONFIG', `--state: expected one of ${STATES.join(', ')}, got ${JSON.stringify(state)}`, { field: '--state' });
  }
  const limit = positiveInt(values.limit, '--limit');
  const after = positiveInt(values.after, '--after');
  const ids = sub === 'show' || sub === 'requeue' ? args.map((a) => positiveInt(a, 'ID')!) : [];
  if (sub === 'show' && ids.length !== 1) throw new DeliveryError('ERR_INVALID_CONFIG', 'queue show: expected one batch ID', { field: 'ID' });
  if ((sub === 'pause' || sub === 'resume') && args.length !== 1) {
    throw new DeliveryError('ERR_INVALID_CONFIG', `queue ${sub}: expected one DEST (the destination's name)`, { field: 'DEST' });
  }
  if (sub === 'requeue' && ids.length === 0 && values.destination === undefined && values.reason === undefined && !values.all) {
    throw new DeliveryError('ERR_INVALID_CONFIG', 'queue requeue: name batch IDs, or --destination/--reason, or --all', { field: 'ID' });
  }
  return {
    sub,
    args,
    json: values.json === true,
    state,
    destination: values.destination,
    reason: values.reason,
    limit,
    after,
    ids,
  };
}

export async function queueCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseFlags({
    args: argv,
    allowPositionals: true,
    options: {
      store: { type: 'string' },
      config: { type: 'string' },
      json: { type: 'boolean' },
      state: { type: 'string' },
      destination: { type: 'string' },
      reason: { type: 'string' },
      limit: { type: 'string' },
      after: { type: 'string' },
      all: { type: 'boolean' },
    },
  });
  const [sub, ...args] = positionals;
  if (sub === undefined) {
    io.err(QUEUE_HELP);
    return EXIT.usage;
  }
  const paint = io === processIo ? paintFor(colorEnabled('stdout')) : NO_PAINT;
  if (!SUBCOMMANDS.includes(sub)) {
    io.err(`relent queue: unknown subcommand ${JSON.stringify(sub)} (ls, show, requeue, drop-stats, stats, pause, resume)\n`);
    return EXIT.usage;
  }
  let queue: DeliveryQueue | null = null;
  try {
    const req = queueRequest(sub, args, values);
    const config = values.config ? await readConfig(values.config) : null;
    const url = storeUrl(values.store, config);
    // Inspecting never creates a store: a SQLite file that is not there, or a PostgreSQL
    // schema without the queue's tables, is said so.
    try {
      queue = await openDeliveryQueue({ store: url, mustExist: true, sqliteRunIn: 'caller' });
    } catch (e) {
      if (!DeliveryError.is(e) || e.code !== 'ERR_NO_QUEUE') throw e;
      io.err(`relent queue ${sub}: ${e.message}; --store, the config's "store" or $RELENT_STORE names another\n`);
      return EXIT.failure;
    }
    return await runSubcommand({ req, queue, io, paint, now: Date.now() });
  } catch (e) {
    return reportError(`queue ${sub}`, e, io);
  } finally {
    await queue?.close();
  }
}

/** Runs the checked subcommand on the open queue and prints its answer. */
async function runSubcommand(ctx: QueueContext): Promise<number> {
  const { req, queue, io } = ctx;
  switch (req.sub) {
    case 'ls':
      await printList(ctx);
      break;
    case 'show':
      return printBatch(ctx);
    case 'requeue': {
      const n = await queue.requeue({
        ...(req.ids.length ? { ids: req.ids } : {}),
        ...(req.destination ? { destination: req.destination } : {}),
        ...(req.reason ? { reason: req.reason } : {}),
        ...(req.limit !== undefined ? { limit: req.limit } : {}),
      });
      if (req.json) io.out(JSON.stringify({ requeued: n }) + '\n');
      else io.out(`requeued ${int(n)} dropped batch${n === 1 ? '' : 'es'}\n`);
      break;
    }
    case 'drop-stats':
      await printDropStats(ctx);
      break;
    case 'stats':
      await printStats(ctx);
      break;
    case 'pause':
    case 'resume': {
      const dest = req.args[0]!;
      const changed = req.sub === 'pause' ? await queue.pause(dest) : await queue.resume(dest);
      if (req.json) io.out(JSON.stringify({ destination: dest, paused: req.sub === 'pause', changed }) + '\n');
      else if (req.sub === 'pause')
        io.out(changed ? `paused ${dest}: no worker claims its batches until \`relent queue resume ${dest}\`\n` : `${dest} was paused already\n`);
      else io.out(changed ? `resumed ${dest}\n` : `${dest} was not paused\n`);
      break;
    }
  }
  return EXIT.ok;
}

/** `queue ls`: the batches, as JSON lines or a table. */
async function printList({ req, queue, io, paint, now }: QueueContext): Promise<void> {
  const rows = await queue.list({
    ...(req.state ? { state: req.state } : {}),
    ...(req.destination ? { destination: req.destination } : {}),
    ...(req.reason ? { reason: req.reason } : {}),
    ...(req.limit !== undefined ? { limit: req.limit } : {}),
    ...(req.after !== undefined ? { afterId: req.after } : {}),
  });
  if (req.json) {
    io.out(rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : ''));
    return;
  }
  if (rows.length === 0) {
    io.out('no batches\n');
    return;
  }
  io.out(
    table(
      ['id', 'destination', 'state', 'items', 'round', 'attempts', 'last', 'decision', 'next', 'key'],
      rows.map((b) => {
        const st = stateOf(b, now);
        return [
          String(b.id),
          b.destination,
          st,
          int(b.items),
          String(b.round),
          String(b.attempt),
          lastOf(b),
          b.lastDecision ?? '-',
          st === 'deferred' || st === 'ready' ? relative(b.notBefore, now) : st === 'inflight' ? `lease ${relative(b.leaseUntil, now)}` : '-',
          b.key,
        ];
      }),
      { align: ['r', 'l', 'l', 'r', 'r', 'r', 'l', 'l', 'l', 'l'], paint },
    ),
  );
}

/** `queue show ID`: one batch, its attempts and its items; exit 1 when there is no such batch. */
async function printBatch({ req, queue, io, paint, now }: QueueContext): Promise<number> {
  const b = await queue.show(req.ids[0]!);
  if (!b) {
    io.err(`relent queue show: no batch ${req.ids[0]}\n`);
    return EXIT.failure;
  }
  if (req.json) {
    io.out(JSON.stringify({ ...b, itemList: b.itemList.map((i) => ({ ...i, payload: JSON.parse(i.payload) as unknown })) }, null, 2) + '\n');
    return EXIT.ok;
  }
  const iso = (t: number | null): string => (t === null ? '-' : new Date(t).toISOString());
  io.out(`batch ${b.id} → ${b.destination}: ${stateOf(b, now)}${b.lastDecision ? ` (${b.lastDecision}${b.lastWhy ? `: ${b.lastWhy}` : ''})` : ''}\n`);
  io.out(`  key ${b.key}\n  items ${b.items} (${int(b.bytes)} bytes), created ${iso(b.createdAt)}, round ${b.round}, claims ${b.claims}\n`);
  if (b.state === 'queued') io.out(`  next attempt ${iso(b.notBefore)} (${relative(b.notBefore, now)})\n`);
  if (b.finishedAt !== null) io.out(`  finished ${iso(b.finishedAt)}\n`);
  io.out('attempts:\n');
  if (b.attempts.length === 0) io.out('  none\n');
  else {
    io.out(
      table(
        ['round', 'attempt', 'at', 'result', 'elapsed', 'decision', 'why', 'delay', 'retry-after', 'worker'],
        b.attempts.map((a) => [
          String(a.round),
          String(a.attempt),
          iso(a.at),
          a.status !== null ? String(a.status) : (a.errorClass ?? '-'),
          `${a.elapsedMs}ms`,
          a.decision,
          a.why ?? '-',
          a.delayMs === null ? '-' : `${a.delayMs}ms`,
          a.retryAfterMs === null ? '-' : `${a.retryAfterMs}ms`,
          a.worker ?? '-',
        ]),
        { align: ['r', 'r', 'l', 'l', 'r', 'l', 'l', 'r', 'r', 'l'], paint },
      )
        .replace(/^/gm, '  ')
        .replace(/ +$/gm, ''),
    );
  }
  io.out('items:\n');
  for (const i of b.itemList) io.out(`  ${i.key}  ${i.payload.length > 120 ? `${i.payload.slice(0, 117)}...` : i.payload}\n`);
  return EXIT.ok;
}

/** `queue drop-stats`: dropped batches by destination, reason and last status. */
async function printDropStats({ req, queue, io, paint }: QueueContext): Promise<void> {
  const rows = await queue.dropStats();
  if (req.json) {
    io.out(JSON.stringify({ dropped: rows }) + '\n');
    return;
  }
  if (rows.length === 0) {
    io.out('nothing dropped\n');
    return;
  }
  io.out(
    table(
      ['destination', 'reason', 'why', 'last', 'batches', 'items'],
      rows.map((r) => [r.destination, r.reason, r.why ?? '-', lastOf(r), int(Number(r.batches)), int(Number(r.items))]),
      { align: ['l', 'l', 'l', 'l', 'r', 'r'], paint },
    ),
  );
}

/** `queue stats`: items per destination and state. */
async function printStats({ req, queue, io, paint, now }: QueueContext): Promise<void> {
  const rows = await queue.stats();
  if (req.json) {
    io.out(JSON.stringify({ destinations: rows }) + '\n');
    return;
  }
  if (rows.length === 0) {
    io.out('the queue is empty\n');
    return;
  }
  io.out(
    table(
      ['destination', 'pending', 'ready', 'in flight', 'deferred', 'delivered', 'dropped', 'oldest waiting'],
      rows.map((r) => [
        r.paused ? `${r.destination} (paused)` : r.destination,
        int(r.pendingItems),
        int(r.readyItems),
        int(r.inflightItems),
        int(r.deferredItems),
        int(r.deliveredItems),
        int(r.droppedItems),
        r.oldestEnqueuedAt === null ? '-' : relative(r.oldestEnqueuedAt, now),
      ]),
      { paint },
    ),
  );
}
