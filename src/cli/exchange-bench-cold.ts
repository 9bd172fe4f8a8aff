// The cold starts of `relent exchange-bench --cold-starts N`: fresh `relent exchange`
// processes, each hit by a burst of auctions the moment it says it is ready (how the
// first auctions of a new process fare, with and without its warm-up), and their table.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { undici } from '../shared/undici.js';
import type { BidderConfig } from '../rtb/config.js';
import { BIN, forkRole, next } from './exchange-bench-roles.js';

/** One fresh `relent exchange` process hit by a burst of auctions the moment it says it is ready. */
export interface ColdStart {
  /** From spawning the process to its ready line, ms. */
  readonly readyMs: number;
  /** Answer time of each auction of the burst at the source, ms. */
  readonly sourceMs: readonly number[];
  readonly statuses: readonly number[];
  /** The exchange's own count: answers written more than 5 ms after their deadline. */
  readonly afterDeadline: number;
  readonly worstOverDeadlineMs: number;
  /** Auctions of the burst in which the 20 ms partner's bid was taken (its answer came in time). */
  readonly fastPartnerBid: number;
}

export interface ColdStartResult {
  readonly warmup: boolean;
  readonly workers: number;
  readonly burst: number;
  readonly tmaxMs: number;
  readonly starts: readonly ColdStart[];
}

/** The cold-start configuration: a 20 ms partner beside a slow, a hanging and a failing one. */
export const COLD_START_BIDDERS: readonly (BidderConfig & { readonly name: string })[] = Object.freeze([
  { name: 'fast20', latency: { kind: 'fixed', ms: 20 }, price: { kind: 'fixed', cpm: 2 } },
  { name: 'slow', latency: { kind: 'lognormal', medianMs: 40, p99Ms: 120 }, price: { kind: 'fixed', cpm: 1 } },
  { name: 'hangs', failures: { hang: 1 } },
  { name: 'failing', latency: { kind: 'fixed', ms: 3 }, failures: { error500: 0.8, reset: 0.1 } },
]);

/**
 * Starts `starts` fresh exchange processes one after the other; the moment each prints
 * its ready line, `burst` auctions (tmax `tmaxMs`) are sent at once on new connections.
 */
export async function runColdStarts(o: {
  starts: number;
  burst: number;
  tmaxMs: number;
  workers: number;
  warmup: boolean;
  log: (l: string) => void;
}): Promise<ColdStartResult> {
  const { Agent } = undici();
  const { readFileSync } = await import('node:fs');
  const { spawn } = await import('node:child_process');
  const dir = mkdtempSync(join(tmpdir(), 'relent-cold-start-'));
  // Not niced here: while a fresh exchange takes in its first burst it uses every core for
  // a few ms, and a niced bidder then answered its 20 ms bids after the 60 ms timeout
  // (0 of 16 in whole starts), which a bidder on its own machine never does.
  const bidders = forkRole('bidders', { RELENT_BENCH_BIDDERS: JSON.stringify(COLD_START_BIDDERS), RELENT_BENCH_NICE: '0' });
  const starts: ColdStart[] = [];
  try {
    const { urls } = await next<{ urls: string[] }>(bidders, 'urls');
    const configPath = join(dir, 'exchange.json');
    writeFileSync(
      configPath,
      JSON.stringify({
        auctionTimeoutMs: 100,
        reserveMs: 15,
        notices: { win: 'source', billing: 'on-win', store: `sqlite:${join(dir, 'notices.db')}` },
        ...(o.warmup ? {} : { warmup: false }),
        partners: COLD_START_BIDDERS.map((b, i) => ({ name: b.name, url: urls[i]!, timeoutMs: [60, 90, 80, 80][i]!, maxConcurrency: 64 })),
      }),
    );
    for (let k = 0; k < o.starts; k++) {
      const auctions = join(dir, `auctions-${k}.jsonl`);
      const t0 = performance.now();
      const child = spawn(
        process.execPath,
        [BIN, 'exchange', '--config', configPath, '--port', '0', '--host', '127.0.0.1', '--workers', String(o.workers), '--quiet', '--auctions', auctions],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let err = '';
      let readyMs: number;
      let answers: { ms: number; status: number }[];
      try {
        const url = await new Promise<string>((resolve, reject) => {
          child.stderr!.on('data', (d: Buffer) => {
            err += d.toString();
            const m = /ready on (\S+)/.exec(err);
            if (m) resolve(m[1]!);
          });
          child.once('exit', (code) => reject(new Error(`relent exchange exited (${code}) before it was ready: ${err}`)));
          setTimeout(() => reject(new Error(`relent exchange was not ready after 60 s: ${err}`)), 60_000).unref();
        });
        readyMs = Math.round(performance.now() - t0);
        const agent = new Agent({ connections: o.burst });
        const body = (i: number): string => JSON.stringify({ id: `cold-${k}-${i}`, imp: [{ id: '1' }], tmax: o.tmaxMs, site: { publisher: { id: 'p' } } });
        answers = await Promise.all(
          Array.from({ length: o.burst }, async (_, i) => {
            const t = performance.now();
            const res = await agent.request({
              origin: url.slice(0, url.indexOf('/', 8)),
              path: new URL(url).pathname,
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: body(i),
            });
            await res.body.dump();
            return { ms: Math.round((performance.now() - t) * 10) / 10, status: res.statusCode };
          }),
        );
        await agent.close();
        child.kill('SIGTERM');
        const stopping = performance.now();
        await new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', () => resolve())));
        const stopMs = performance.now() - stopping;
        if (stopMs > 5_000) o.log(`exchange-bench: cold start ${k + 1}: the exchange took ${Math.round(stopMs)} ms to stop`);
      } finally {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      }
      const summaries = readFileSync(auctions, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map(
          (l) =>
            JSON.parse(l) as {
              usedMs: number;
              deadlineMs: number | null;
              results: { partner: string; outcome: string }[];
            },
        );
      const over = summaries.map((x) => (x.deadlineMs === null ? 0 : x.usedMs - x.deadlineMs));
      const start: ColdStart = {
        readyMs,
        sourceMs: answers.map((a) => a.ms),
        statuses: answers.map((a) => a.status),
        afterDeadline: over.filter((x) => x > 5).length,
        worstOverDeadlineMs: Math.round(Math.max(...over) * 10) / 10,
        fastPartnerBid: summaries.filter((x) => x.results.some((r) => r.partner === 'fast20' && r.outcome === 'bid')).length,
      };
      starts.push(start);
      o.log(
        `exchange-bench: cold start ${k + 1}/${o.starts}: ready after ${readyMs} ms, slowest answer ${Math.max(...start.sourceMs)} ms, after deadline + 5 ms ${start.afterDeadline}, 20 ms partner's bid in ${start.fastPartnerBid}/${o.burst}`,
      );
    }
    return { warmup: o.warmup, workers: o.workers, burst: o.burst, tmaxMs: o.tmaxMs, starts };
  } finally {
    bidders.send({ t: 'stop' });
    await new Promise<void>((resolve) => (bidders.exitCode !== null ? resolve() : bidders.once('exit', () => resolve())));
    rmSync(dir, { recursive: true, force: true });
  }
}

export function formatColdStarts(results: readonly ColdStartResult[]): string {
  const lines: string[] = [];
  for (const r of results) {
    const all = r.starts.flatMap((x) => x.sourceMs);
    const late = r.starts.reduce((n, x) => n + x.afterDeadline, 0);
    const fast = r.starts.reduce((n, x) => n + x.fastPartnerBid, 0);
    lines.push(
      `cold starts, warm-up ${r.warmup ? 'on' : 'off'} (${r.workers} worker${r.workers === 1 ? '' : 's'}): ${r.starts.length} fresh processes × ${r.burst} auctions at once (tmax ${r.tmaxMs})`,
    );
    lines.push('  start  ready ms  slowest answer ms  after deadline + 5 ms  worst over deadline ms  20 ms partner bid');
    r.starts.forEach((x, i) => {
      lines.push(
        `  ${String(i + 1).padStart(5)}  ${String(x.readyMs).padStart(8)}  ${Math.max(...x.sourceMs)
          .toFixed(1)
          .padStart(17)}  ${String(x.afterDeadline).padStart(21)}  ${x.worstOverDeadlineMs.toFixed(1).padStart(22)}  ${x.fastPartnerBid}/${r.burst}`,
      );
    });
    lines.push(
      `  total: answers after deadline + 5 ms ${late} of ${all.length}; the 20 ms partner's bid in ${fast} of ${all.length}; slowest answer ${Math.max(...all).toFixed(1)} ms`,
    );
  }
  return `${lines.join('\n')}\n`;
}
