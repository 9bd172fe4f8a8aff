import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { undici } from '../shared/undici.js';
import { RelentError } from '../core/errors.js';
import { createSeededRandom } from '../core/random.js';
import { createBidder, type Bidder } from '../rtb/bidder.js';
import type { ExchangeConfig, PartnerConfig } from '../rtb/config.js';
import { createExchange } from '../rtb/exchange.js';
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

/** `relent exchange-demo` (what `npm start` runs). */
export async function exchangeDemoCommand(argv: string[], io: Io, opts: { isTTY?: boolean } = {}): Promise<number> {
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
  if (!Number.isFinite(rate) || rate <= 0 || rate > 100_000) throw new RelentError('ERR_INVALID_INPUT', `--rate: expected requests per second in (0, 100000], got ${JSON.stringify(values.rate)}`, { field: '--rate' });
  const dir = values.dir ?? EXAMPLE;
  if (values.dir !== undefined) {
    try {
      if (!(await stat(dir)).isDirectory()) throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
      await stat(join(dir, 'exchange.json'));
      if (!(await stat(join(dir, 'bidders'))).isDirectory()) throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
    } catch (e) {
      throw usageError(`--dir ${dir}: expected a directory with exchange.json and bidders/*.json (${fsReason(e, 'unreadable', 'no such file or directory')})`, '--dir');
    }
  }
  const isTTY = opts.isTTY ?? (process.stdout.isTTY === true);
  const random = createSeededRandom(values.seed ?? 1);

  // The bidders, on free loopback ports; the exchange's partner URLs are pointed at them.
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
  const partners = Array.isArray(exRaw?.partners) ? exRaw.partners.map((p: PartnerConfig) => {
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
  }) : exRaw?.partners;
  let exchange;
  try {
    exchange = inConfig(exPath, () => createExchange({ ...exRaw, partners, host: '127.0.0.1' }));
  } catch (e) {
    await Promise.all(bidders.map((x) => x.b.close()));
    throw e;
  }
  const info = await exchange.listen(0, '127.0.0.1');
  io.out(`relent exchange-demo: exchange ${info.url} · bidders ${bidders.map((x) => `${x.b.config.name}:${ports.get(x.configuredPort)}`).join(' ')} · ${rate}/s for ${durationMs / 1000}s\n`);

  // The traffic generator: an open loop at `rate`, a few malformed and disabled-source requests among them.
  const agent = new (undici().Agent)({ connections: 128, keepAliveTimeout: 10_000 });
  const clientMs = new Histogram();
  const clientStatus: Record<string, number> = {};
  let sent = 0;
  let inFlight = 0;
  let overTmax = 0;
  let clientErrors = 0;
  let seq = 0;
  const maxInFlight = 512;
  const send = (): void => {
    if (inFlight >= maxInFlight) return;
    const n = ++seq;
    const r = random();
    let body: string;
    const tmax = [120, 150, 200, 300][Math.floor(random() * 4)]!;
    const tmaxGiven = random() > 0.05;
    if (r < 0.01) body = '{"id": "broken", "imp": [';
    else {
      const imps = Array.from({ length: 1 + Math.floor(random() * 2) }, (_, i) => ({ id: String(i + 1), bidfloor: Math.round(random() * 100) / 100, banner: { w: 300, h: 250 } }));
      const pub = r < 0.03 ? 'pub-disabled' : `pub-${1 + Math.floor(random() * 5)}`;
      body = JSON.stringify({ id: `demo-${n}`, imp: imps, ...(tmaxGiven ? { tmax } : {}), site: { domain: 'example.com', publisher: { id: pub } }, cur: ['USD'] });
    }
    sent++;
    inFlight++;
    const t0 = performance.now();
    agent.request({ origin: info.url.slice(0, info.url.indexOf('/', 8)), path: '/openrtb2/auction', method: 'POST', headers: { 'content-type': 'application/json' }, body })
      .then(async (res) => {
        await res.body.dump();
        const ms = performance.now() - t0;
        clientMs.record(ms);
        clientStatus[res.statusCode] = (clientStatus[res.statusCode] ?? 0) + 1;
        if (tmaxGiven && res.statusCode !== 400 && ms > tmax) overTmax++;
      }, () => {
        clientErrors++;
      })
      .finally(() => {
        inFlight--;
      });
  };
  const started = performance.now();
  let owed = 0;
  let last = started;
  const tick = setInterval(() => {
    const now = performance.now();
    owed += ((now - last) / 1000) * rate;
    last = now;
    while (owed >= 1) {
      owed--;
      send();
    }
  }, 10);
  const line = (): string => `t=${((performance.now() - started) / 1000).toFixed(1)}s ${statsLine(exchange.stats(), (performance.now() - started) / 1000)}`;
  const columns = Math.max(40, (process.stdout.columns ?? 120) - 1);
  const live = setInterval(() => {
    if (isTTY) io.out(`\r\x1b[2K${line().slice(0, columns)}`);
    else io.out(`${line()}\n`);
  }, isTTY ? 250 : 1000);
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
  for (let i = 0; i < 100 && inFlight > 0; i++) await new Promise((r) => setTimeout(r, 20));
  if (isTTY) io.out(`\r\x1b[2K${line().slice(0, columns)}\n`);
  await exchange.close({ noticeDrainMs: 3_000 });
  await agent.close();
  const stats = exchange.stats();
  const bstats = bidders.map((x) => ({ name: x.b.config.name, s: x.b.stats() }));
  await Promise.all(bidders.map((x) => x.b.close()));

  const a = stats.auctions;
  const reasons = Object.entries(a.byReason).map(([k, v]) => `${k} ${v}`).join(', ');
  const billedUnique = bstats.reduce((n, x) => n + x.s.billed, 0);
  const billedRepeats = bstats.reduce((n, x) => n + x.s.billingDuplicates, 0);
  const wins = bstats.reduce((n, x) => n + x.s.wins, 0);
  io.out([
    '',
    `relent exchange-demo — ${elapsed.toFixed(1)} s, ${sent} bid requests (${Math.round(sent / elapsed)}/s), all on loopback`,
    `source answers: ${Object.entries(clientStatus).map(([k, v]) => `${k} ×${v}`).join(' · ')}${clientErrors ? ` · transport errors ${clientErrors}` : ''} (${reasons})`,
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
  ].join('\n'));
  return EXIT.ok;
}
