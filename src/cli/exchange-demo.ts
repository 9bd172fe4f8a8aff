import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { undici } from '../shared/undici.js';
import { RelentError } from '../core/errors.js';
import { createSeededRandom } from '../core/random.js';
import { createBidder, type Bidder, type BidderStats } from '../rtb/bidder.js';
import type { ExchangeConfig, PartnerConfig } from '../rtb/config.js';
import { createExchange, type Exchange, type ExchangeStats } from '../rtb/exchange.js';
import { Histogram } from '../rtb/stats.js';
import { EXIT, fsReason, parseDuration, parseFlags, processIo, usageError, type Io } from './args.js';
import { onOutputClosed } from './io.js';
import { bidderLine } from './bidder.js';
import { inConfig, partnerTable, readJsonConfig, statsLine } from './exchange.js';

const EXAMPLE = fileURLToPath(new URL('../../examples/exchange/', import.meta.url));

export const EXCHANGE_DEMO_HELP = `relent exchange-demo [options]

Starts the bundled example in one process, on loopback ports only: the bidders of
examples/exchange/bidders/ (fast, slow, one that hangs, one that fails, one that
declines with nbr), the exchange of examples/exchange/exchange.json in front of
them, and a small traffic generator. Prints a live line of auction statistics,
stops by itself after --duration and prints a summary.

  --duration D   how long to send traffic (default 10s)
  --rate N       bid requests per second (default 100)
  --dir DIR      an example directory with exchange.json and bidders/*.json
  --seed S       seed of the generated traffic (default 1)
`;

function loopback(host: string): boolean {
  return host === '127.0.0.1' || host === 'localhost' || host === '[::1]';
}

/** A checked `relent exchange-demo` command line. */
interface DemoOptions {
  readonly durationMs: number;
  readonly rate: number;
  readonly dir: string;
  readonly isTTY: boolean;
  readonly seed: string | number;
}

/** Reads and checks the flags; --dir must be a directory with exchange.json and bidders/. */
async function demoOptions(argv: string[], opts: { isTTY?: boolean }): Promise<DemoOptions> {
  const { values } = parseFlags({
    args: argv,
    options: {
      duration: { type: 'string' },
      rate: { type: 'string' },
      dir: { type: 'string' },
      seed: { type: 'string' },
    },
  });
  const durationMs = values.duration === undefined ? 10_000 : parseDuration(values.duration, '--duration');
  const rate = values.rate === undefined ? 100 : Number(values.rate);
  if (!Number.isFinite(rate) || rate <= 0 || rate > 100_000)
    throw new RelentError('ERR_INVALID_INPUT', `--rate: expected requests per second in (0, 100000], got ${JSON.stringify(values.rate)}`, { field: '--rate' });
  const dir = values.dir ?? EXAMPLE;
  if (values.dir !== undefined) {
    try {
      if (!(await stat(dir)).isDirectory()) throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
      await stat(join(dir, 'exchange.json'));
      if (!(await stat(join(dir, 'bidders'))).isDirectory()) throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
    } catch (e) {
      throw usageError(
        `--dir ${dir}: expected a directory with exchange.json and bidders/*.json (${fsReason(e, 'unreadable', 'no such file or directory')})`,
        '--dir',
      );
    }
  }
  const isTTY = opts.isTTY ?? process.stdout.isTTY === true;
  return { durationMs, rate, dir, isTTY, seed: values.seed ?? 1 };
}

/** The example running: its bidders (each with the port its config names and the one it got) and the exchange. */
interface DemoServers {
  readonly bidders: readonly { b: Bidder; configuredPort: number }[];
  /** A bidder's configured port → the loopback port it listens on. */
  readonly ports: ReadonlyMap<number, number>;
  readonly exchange: Exchange;
  readonly url: string;
}

/** Starts the bidders on free loopback ports and the exchange with its partner URLs pointed at them. */
async function startServers(dir: string): Promise<DemoServers> {
  const bidderFiles = (await readdir(join(dir, 'bidders'))).filter((f) => f.endsWith('.json')).sort();
  const bidders: { b: Bidder; configuredPort: number }[] = [];
  const ports = new Map<number, number>();
  try {
    for (const f of bidderFiles) {
      const path = join(dir, 'bidders', f);
      const raw = await readJsonConfig(path);
      const b = inConfig(path, () => createBidder(raw as never));
      const info = await b.listen(0, '127.0.0.1');
      bidders.push({ b, configuredPort: b.config.port });
      ports.set(b.config.port, info.port);
    }
  } catch (e) {
    await Promise.all(bidders.map((x) => x.b.close()));
    throw e;
  }
  const exPath = join(dir, 'exchange.json');
  const exRaw = (await readJsonConfig(exPath)) as ExchangeConfig;
  const partners = Array.isArray(exRaw?.partners)
    ? exRaw.partners.map((p: PartnerConfig) => {
        try {
          const u = new URL(p.url);
          const to = ports.get(Number(u.port));
          if (to !== undefined && loopback(u.hostname)) {
            u.port = String(to);
            return { ...p, url: u.href };
          }
        } catch {
          // left as it is: the validation names the field
        }
        return p;
      })
    : exRaw?.partners;
  let exchange;
  try {
    exchange = inConfig(exPath, () => createExchange({ ...exRaw, partners, host: '127.0.0.1' }));
  } catch (e) {
    await Promise.all(bidders.map((x) => x.b.close()));
    throw e;
  }
  const info = await exchange.listen(0, '127.0.0.1');
  return { bidders, ports, exchange, url: info.url };
}

/**
 * The traffic generator: an open loop of bid requests, a few malformed and disabled-source
 * ones among them, and what the source saw of the answers.
 */
class DemoTraffic {
  readonly clientMs = new Histogram();
  readonly clientStatus: Record<string, number> = {};
  sent = 0;
  inFlight = 0;
  overTmax = 0;
  clientErrors = 0;
  private seq = 0;
  private readonly maxInFlight = 512;
  private readonly agent = new (undici().Agent)({ connections: 128, keepAliveTimeout: 10_000 });
  private readonly origin: string;

  constructor(
    url: string,
    private readonly random: () => number,
  ) {
    this.origin = url.slice(0, url.indexOf('/', 8));
  }

  send(): void {
    if (this.inFlight >= this.maxInFlight) return;
    const random = this.random;
    const n = ++this.seq;
    const r = random();
    let body: string;
    const tmax = [120, 150, 200, 300][Math.floor(random() * 4)]!;
    const tmaxGiven = random() > 0.05;
    if (r < 0.01) body = '{"id": "broken", "imp": [';
    else {
      const imps = Array.from({ length: 1 + Math.floor(random() * 2) }, (_, i) => ({
        id: String(i + 1),
        bidfloor: Math.round(random() * 100) / 100,
        banner: { w: 300, h: 250 },
      }));
      const pub = r < 0.03 ? 'pub-disabled' : `pub-${1 + Math.floor(random() * 5)}`;
      body = JSON.stringify({
        id: `demo-${n}`,
        imp: imps,
        ...(tmaxGiven ? { tmax } : {}),
        site: { domain: 'example.com', publisher: { id: pub } },
        cur: ['USD'],
      });
    }
    this.sent++;
    this.inFlight++;
    const t0 = performance.now();
    this.agent
      .request({ origin: this.origin, path: '/openrtb2/auction', method: 'POST', headers: { 'content-type': 'application/json' }, body })
      .then(
        async (res) => {
          await res.body.dump();
          const ms = performance.now() - t0;
          this.clientMs.record(ms);
          this.clientStatus[res.statusCode] = (this.clientStatus[res.statusCode] ?? 0) + 1;
          if (tmaxGiven && res.statusCode !== 400 && ms > tmax) this.overTmax++;
        },
        () => {
          this.clientErrors++;
        },
      )
      .finally(() => {
        this.inFlight--;
      });
  }

  close(): Promise<void> {
    return this.agent.close();
  }
}

/** `relent exchange-demo` (what `npm start` runs). */
export async function exchangeDemoCommand(argv: string[], io: Io, opts: { isTTY?: boolean } = {}): Promise<number> {
  const { durationMs, rate, dir, isTTY, seed } = await demoOptions(argv, opts);
  const random = createSeededRandom(seed);
  const servers = await startServers(dir);
  const { bidders, ports, exchange } = servers;
  io.out(
    `relent exchange-demo: exchange ${servers.url} · bidders ${bidders.map((x) => `${x.b.config.name}:${ports.get(x.configuredPort)}`).join(' ')} · ${rate}/s for ${durationMs / 1000}s\n`,
  );

  // The traffic generator: an open loop at `rate`, a few malformed and disabled-source requests among them.
  const traffic = new DemoTraffic(servers.url, random);
  const started = performance.now();
  let owed = 0;
  let last = started;
  const tick = setInterval(() => {
    const now = performance.now();
    owed += ((now - last) / 1000) * rate;
    last = now;
    while (owed >= 1) {
      owed--;
      traffic.send();
    }
  }, 10);
  const line = (): string => `t=${((performance.now() - started) / 1000).toFixed(1)}s ${statsLine(exchange.stats(), (performance.now() - started) / 1000)}`;
  const columns = Math.max(40, (process.stdout.columns ?? 120) - 1);
  const live = setInterval(
    () => {
      if (isTTY) io.out(`\r\x1b[2K${line().slice(0, columns)}`);
      else io.out(`${line()}\n`);
    },
    isTTY ? 250 : 1000,
  );
  // The run ends after --duration, or earlier when the reader of the output goes away.
  await new Promise<void>((resolve) => {
    const timer = setTimeout(done, durationMs);
    const off = io === processIo ? onOutputClosed(done) : () => undefined;
    function done(): void {
      clearTimeout(timer);
      off();
      resolve();
    }
  });
  clearInterval(tick);
  clearInterval(live);
  const elapsed = (performance.now() - started) / 1000;
  for (let i = 0; i < 100 && traffic.inFlight > 0; i++) await new Promise((r) => setTimeout(r, 20));
  if (isTTY) io.out(`\r\x1b[2K${line().slice(0, columns)}\n`);
  await exchange.close({ noticeDrainMs: 3_000 });
  await traffic.close();
  const stats = exchange.stats();
  const bstats = bidders.map((x) => ({ name: x.b.config.name, s: x.b.stats() }));
  await Promise.all(bidders.map((x) => x.b.close()));
  io.out(summary(elapsed, traffic, stats, bstats));
  return EXIT.ok;
}

/** The closing summary: what the source saw, what the exchange counted, what the bidders counted. */
function summary(elapsed: number, traffic: DemoTraffic, stats: ExchangeStats, bstats: readonly { name: string; s: BidderStats }[]): string {
  const { sent, clientStatus, clientErrors, clientMs, overTmax } = traffic;
  const a = stats.auctions;
  const reasons = Object.entries(a.byReason)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  const billedUnique = bstats.reduce((n, x) => n + x.s.billed, 0);
  const billedRepeats = bstats.reduce((n, x) => n + x.s.billingDuplicates, 0);
  const wins = bstats.reduce((n, x) => n + x.s.wins, 0);
  return [
    '',
    `relent exchange-demo — ${elapsed.toFixed(1)} s, ${sent} bid requests (${Math.round(sent / elapsed)}/s), all on loopback`,
    `source answers: ${Object.entries(clientStatus)
      .map(([k, v]) => `${k} ×${v}`)
      .join(' · ')}${clientErrors ? ` · transport errors ${clientErrors}` : ''} (${reasons})`,
    `answer time at the source: p50 ${clientMs.quantile(0.5).toFixed(1)} ms · p90 ${clientMs.quantile(0.9).toFixed(1)} · p99 ${clientMs.quantile(0.99).toFixed(1)} · max ${clientMs.max.toFixed(1)}; over the request's tmax: ${overTmax}`,
    `inside the exchange: p50 ${a.answerMs.p50Ms} ms · p99 ${a.answerMs.p99Ms} ms; answers more than 5 ms after the auction deadline: ${a.afterDeadline}`,
    '',
    partnerTable(stats).trimEnd(),
    '',
    `win notices: sent ${stats.notices.win.sent}, delivered ${stats.notices.win.delivered}; bidders counted ${wins}`,
    `billing notices (openrtb-billing-notice preset): sent ${stats.notices.billing.sent}, delivered ${stats.notices.billing.delivered}, failed ${stats.notices.billing.failed}, abandoned at exit ${stats.notices.billing.abandoned}; bidders counted ${billedUnique} unique (${billedRepeats} repeats ignored)`,
    ...bstats.map((x) => `  ${bidderLine(x.name, x.s)}`),
    '',
    'Next: relent exchange --config examples/exchange/exchange.json, with relent bidder --config examples/exchange/bidders/<name>.json for each bidder (docs/exchange.md).',
    '',
  ].join('\n');
}
