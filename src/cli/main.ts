import { readFileSync } from 'node:fs';
import { RelentError } from '../core/errors.js';
import { DeliveryError } from '../delivery/errors.js';
import { EXIT, processIo, type Io } from './args.js';
import { DEMO_HELP, demoCommand } from './demo.js';
import { guardOutput } from './io.js';
import { PRESETS_HELP, presetsCommand } from './presets.js';
import { REPLAY_HELP, replayCommand } from './replay.js';

const HELP = `relent — outbound calls that fail well

Usage: relent <command> [options]

Commands:
  replay FILE|-     replay observation timelines against a policy in virtual time (JSON lines)
  presets [NAME]    list the documented retry policies of real services
  demo              replay the bundled example timelines in virtual time, with what each expects
  deliver           run a durable delivery worker (--store URL --config FILE)
  enqueue DEST      store items for a destination in the delivery queue
  queue SUB         inspect the delivery queue: ls, show, requeue, drop-stats, stats, pause, resume
  simulate SCENARIO simulate a fleet of clients: brooker, overload, layers, or a scenario file
  fetch URL         one HTTP request through relent's client: body to stdout, events as JSON lines
  exchange          an OpenRTB exchange that holds its deadline (--config FILE; POST /openrtb2/auction)
  bidder            a simulated DSP: price, latency, no-bids, failures, load shedding (--config FILE)
  exchange-demo     the bundled example (what \`npm start\` runs): bidders, exchange and traffic, live statistics
  exchange-bench    the exchange's load test: open-loop traffic at a rate, simulated bidders, p50/p99, late answers, memory
  report LOG|-      read an event log (JSONL): do retries help? tables, --json, or --html FILE with charts
  help [COMMAND]    this text, or a command's own

Durations: 250ms, 2s, 30m, 1h (a bare number is ms). Exit status 0 only on success, 2
for a malformed flag or input (one line on stderr names it). Ctrl-C: fetch ends with 8
(cancelled); deliver, exchange and bidder stop gracefully (0); the others exit at once
(130). A reader that goes away (| head) ends a command quietly. Progress of long work
goes to stderr (--quiet silences it); colour only on a terminal, never with NO_COLOR.
`;

type Command = (argv: string[], io: Io) => Promise<number>;
/** Every command; each loads its module on first use, so `relent replay` loads no HTTP or database code. */
const COMMANDS: Record<string, Command> = {
  replay: replayCommand,
  presets: presetsCommand,
  demo: demoCommand,
  fetch: async (argv, io) => (await import('./fetch.js')).fetchCommand(argv, io),
  simulate: async (argv, io) => (await import('./simulate.js')).simulateCommand(argv, io),
  report: async (argv, io) => (await import('./report.js')).reportCommand(argv, io),
  deliver: async (argv, io) => (await import('./deliver.js')).deliverCommand(argv, io),
  enqueue: async (argv, io) => (await import('./deliver.js')).enqueueCommand(argv, io),
  queue: async (argv, io) => (await import('./queue.js')).queueCommand(argv, io),
  exchange: async (argv, io) => (await import('./exchange.js')).exchangeCommand(argv, io),
  bidder: async (argv, io) => (await import('./bidder.js')).bidderCommand(argv, io),
  'exchange-demo': async (argv, io) => (await import('./exchange-demo.js')).exchangeDemoCommand(argv, io),
  'exchange-bench': async (argv, io) => (await import('./exchange-bench.js')).exchangeBenchCommand(argv, io),
};

/** Each command's help text, read without running (or even loading the rest of) the command. */
const HELPS: Record<string, () => Promise<string>> = {
  replay: async () => REPLAY_HELP,
  presets: async () => PRESETS_HELP,
  demo: async () => DEMO_HELP,
  fetch: async () => (await import('./fetch.js')).FETCH_HELP,
  simulate: async () => (await import('./simulate.js')).SIMULATE_HELP,
  report: async () => (await import('./report.js')).REPORT_HELP,
  deliver: async () => (await import('./deliver.js')).DELIVER_HELP,
  enqueue: async () => (await import('./deliver.js')).ENQUEUE_HELP,
  queue: async () => (await import('./queue.js')).QUEUE_HELP,
  exchange: async () => (await import('./exchange.js')).EXCHANGE_HELP,
  bidder: async () => (await import('./bidder.js')).BIDDER_HELP,
  'exchange-demo': async () => (await import('./exchange-demo.js')).EXCHANGE_DEMO_HELP,
  'exchange-bench': async () => (await import('./exchange-bench.js')).EXCHANGE_BENCH_HELP,
};

/** The names of every command (what `relent help` lists). */
export const COMMAND_NAMES: readonly string[] = Object.keys(COMMANDS);

/** Whether the arguments ask for help (`--help` or `-h` before any `--`): then the command does not run. */
function asksHelp(argv: readonly string[]): boolean {
  for (const a of argv) {
    if (a === '--') return false;
    if (a === '--help' || a === '-h') return true;
  }
  return false;
}

/** Runs one command; returns the exit status. Never throws. */
export async function main(argv: string[], io: Io = processIo): Promise<number> {
  if (io === processIo) guardOutput();
  const [name, ...rest] = argv;
  if (name === undefined) {
    io.err(HELP);
    return EXIT.usage;
  }
  if (name === 'help' || name === '--help' || name === '-h') {
    const sub = rest[0];
    if (sub === undefined) {
      io.out(HELP);
      return EXIT.ok;
    }
    const help = HELPS[sub];
    if (!help) {
      io.err(`relent help: unknown command ${JSON.stringify(sub)} (commands: ${COMMAND_NAMES.join(', ')})\n`);
      return EXIT.usage;
    }
    io.out(await help());
    return EXIT.ok;
  }
  if (name === '--version' || name === '-v') {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    io.out(`${pkg.version}\n`);
    return EXIT.ok;
  }
  const command = COMMANDS[name];
  if (!command) {
    io.err(`relent: unknown command ${JSON.stringify(name)} (try: relent help)\n`);
    return EXIT.usage;
  }
  if (asksHelp(rest)) {
    io.out(await HELPS[name]!());
    return EXIT.ok;
  }
  try {
    return await command(rest, io);
  } catch (e) {
    if (RelentError.is(e) && (e.code === 'ERR_INVALID_INPUT' || e.code === 'ERR_INVALID_POLICY')) {
      io.err(`relent ${name}: ${e.message}\n`);
      return EXIT.usage;
    }
    if (DeliveryError.is(e) && (e.code === 'ERR_INVALID_CONFIG' || e.code === 'ERR_INVALID_ITEM' || e.code === 'ERR_UNKNOWN_DESTINATION')) {
      io.err(`relent ${name}: ${e.message}\n`);
      return EXIT.usage;
    }
    if (e instanceof TypeError && (e as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      io.err(`relent ${name}: ${e.message.replace(/\s*\n\s*/g, ' ')}\n`);
      return EXIT.usage;
    }
    io.err(`relent ${name}: internal error (a bug in relent: please report it with the command line): ${e instanceof Error ? e.message : String(e)}\n`);
    return EXIT.failure;
  }
}
