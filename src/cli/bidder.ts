import { createBidder, type Bidder, type BidderStats } from '../rtb/bidder.js';
import { EXIT, parseFlags, type Io } from './args.js';
import { inConfig, readJsonConfig, SERVER_FLAGS, serverSettings, waitForStop } from './exchange.js';

export const BIDDER_HELP = `relent bidder --config FILE [options]

Serves a simulated DSP for testing exchanges: POST /openrtb2/bid answers with bids
at the configured price and latency, declines a configured share (204, or 200 with
an nbr), fails on purpose (500, resets, hangs, malformed JSON), sheds load with 204
and no nbr over maxConcurrency, and answers 400 to a request without the required
fields. GET /notice/win and /notice/billing count each request id + impression id
once (repeats are answered alike and not counted).

  --config FILE        the bidder configuration (JSON; see docs/exchange.md)
  --port N             listen on this port (default: the config's, else 9100; 0 = any)
  --host H             listen on this address (default: the config's, else 127.0.0.1)
  --stats-every D      a line of statistics on stderr every D (default 10s; 0 = never)
  -q, --quiet          no statistics lines

Stops on SIGINT or SIGTERM. Exit status: 0 after a clean stop; 2 for a bad flag or
configuration (the field is named); 1 when the port cannot be opened.
`;

export function bidderLine(name: string, s: BidderStats): string {
  const b = s.byBehaviour;
  return (
    `${name}: requests ${s.requests} · bids ${b.bid} · no-bids ${b.no_bid} (+${b.no_bid_nbr} with nbr) · shed ${b.shed} · 400 ${b.bad_request}` +
    ` · injected 500 ${b.error500} reset ${b.reset} hang ${b.hang} malformed ${b.malformed}` +
    ` · wins ${s.wins} · billed ${s.billed} (${s.billingDuplicates} repeats ignored)`
  );
}

export async function bidderCommand(argv: string[], io: Io): Promise<number> {
  const { values } = parseFlags({
    args: argv,
    options: SERVER_FLAGS,
  });
  const { config, port, everyMs: every } = serverSettings(values, 'bidder');
  const raw = await readJsonConfig(config);
  const bidder: Bidder = inConfig(config, () => createBidder(raw as never));
  let info;
  try {
    info = await bidder.listen(port, values.host);
  } catch (e) {
    io.err(`relent bidder: cannot listen: ${e instanceof Error ? e.message : String(e)}\n`);
    return EXIT.failure;
  }
  const name = bidder.config.name;
  io.out(`relent bidder ${name}: listening on ${info.url} (notices at ${info.publicUrl}/notice/…)\n`);
  const timer = !values.quiet && every > 0 ? setInterval(() => io.err(`${bidderLine(name, bidder.stats())}\n`), every) : null;
  timer?.unref();
  const stop = waitForStop(() => process.exit(EXIT.cancelled));
  try {
    await stop.stopped;
    if (timer) clearInterval(timer);
    await bidder.close();
  } finally {
    stop.dispose();
  }
  io.out(`relent bidder: stopped. ${bidderLine(name, bidder.stats())}\n`);
  return EXIT.ok;
}
