// The child processes of `relent exchange-bench`: the simulated bidders and the load
// generator, each started as `relent exchange-bench` again with its role in the
// environment, and the messages the parent exchanges with them.
import { fork, type ChildProcess } from 'node:child_process';
import { setPriority } from 'node:os';
import { fileURLToPath } from 'node:url';
import { undici } from '../shared/undici.js';
import type { BidderConfig } from '../rtb/config.js';
import { Histogram } from '../rtb/stats.js';
import { cpuNow } from './exchange-cluster.js';

/** The CLI's own entry, which the children and the cold starts' exchanges are started from. */
export const BIN = fileURLToPath(new URL('../../bin/relent', import.meta.url));
/** The environment variable that tells a child `relent exchange-bench` its role. */
export const ROLE_ENV = 'RELENT_EXCHANGE_BENCH_ROLE';

export type BiddersMsg =
  | { readonly t: 'urls'; readonly urls: readonly string[] }
  | { readonly t: 'stats'; readonly stats: readonly Record<string, unknown>[] }
  | { readonly t: 'cpu'; readonly us: number };

/**
 * The niceness of the bidders and the load generator: they stand in for other machines,
 * so when the cores are all busy the exchange's processes go first (on one machine they
 * would otherwise take the CPU the exchange's deadlines need, which a real partner or
 * client never does).
 */
export const STAND_IN_NICE = 10;

function standInPriority(): void {
  // The cold starts keep the bidders at the exchange's priority (see runColdStarts).
  if (process.env.RELENT_BENCH_NICE === '0') return;
  try {
    setPriority(STAND_IN_NICE);
  } catch {
    // not allowed here: they run at the exchange's priority
  }
}

/** The `bidders` role: the simulated partners, on loopback, until told to stop. */
export async function runBidders(): Promise<void> {
  const { createBidder } = await import('../rtb/bidder.js');
  standInPriority();
  const configs = JSON.parse(process.env.RELENT_BENCH_BIDDERS ?? '[]') as BidderConfig[];
  const bidders = configs.map((c, i) => createBidder({ ...c, seed: i + 1, maxConcurrency: 1_000_000 }));
  const urls: string[] = [];
  for (const b of bidders) urls.push((await b.listen(0, '127.0.0.1')).url);
  process.send!({ t: 'urls', urls } satisfies BiddersMsg);
  process.on('message', (m: { t: string }) => {
    if (m.t === 'cpu') process.send!({ t: 'cpu', us: cpuNow() } satisfies BiddersMsg);
    if (m.t !== 'stop') return;
    const stats = bidders.map((b) => ({ name: b.config.name, ...b.stats() }));
    void Promise.all(bidders.map((b) => b.close())).then(() => process.send!({ t: 'stats', stats } satisfies BiddersMsg, () => process.exit(0)));
  });
  process.on('disconnect', () => process.exit(0));
}

/** One run the parent asks of the load generator. */
export interface LoadRun {
  readonly rate: number;
  readonly durationMs: number;
  /** Sent at the rate first, not counted. */
  readonly warmupMs: number;
}

/** What the load generator saw in one run (the counted part). */
export interface LoadResult {
  readonly rate: number;
  readonly seconds: number;
  readonly sent: number;
  readonly answered: number;
  /** Answers per second. */
  readonly achieved: number;
  readonly statuses: Readonly<Record<string, number>>;
  /** Transport errors (refused, reset), and requests not sent because 10,000 were already waiting. */
  readonly errors: number;
  readonly shed: number;
  /** From the time the request was due (not sent: an open loop) to the end of the answer, ms. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** Answers that came later than the request's tmax. */
  readonly overTmax: number;
  /** CPU the load generator used during the run (with its warm-up), ms. */
  readonly cpuMs: number;
}

/** The `loadgen` role: open-loop bid requests at the rate of each run it is sent, measured. */
export async function runLoadgen(): Promise<void> {
  standInPriority();
  const { Pool } = undici();
  const url = new URL(process.env.RELENT_BENCH_URL!);
  const tmax = Number(process.env.RELENT_BENCH_TMAX);
  const pool = new Pool(url.origin, { connections: Number(process.env.RELENT_BENCH_CONNECTIONS), pipelining: 1, keepAliveTimeout: 60_000 });
  let n = 0;
  const bodyOf = (): string => {
    const k = ++n;
    const imp =
      k % 4 === 0
        ? [
            { id: '1', bidfloor: 0.5 },
            { id: '2', bidfloor: 0.2 },
          ]
        : [{ id: '1', bidfloor: 0.5 }];
    return JSON.stringify({
      id: `bench-${process.pid}-${k}`,
      imp,
      tmax,
      cur: ['USD'],
      site: { domain: 'bench.example', publisher: { id: `pub-${k % 7}` } },
      device: { ua: 'bench', ip: '192.0.2.1' },
    });
  };
  const run = (r: LoadRun): Promise<LoadResult> =>
    new Promise((resolve) => {
      const hist = new Histogram();
      const statuses: Record<string, number> = {};
      let sent = 0;
      let answered = 0;
      let errors = 0;
      let shed = 0;
      let overTmax = 0;
      let waiting = 0;
      let k = 0;
      const cpu0 = cpuNow();
      const start = performance.now();
      const countFrom = start + r.warmupMs;
      const end = countFrom + r.durationMs;
      const gap = 1000 / r.rate;
      const one = (due: number): void => {
        const counted = due >= countFrom;
        if (waiting >= 10_000) {
          if (counted) shed++;
          return;
        }
        waiting++;
        if (counted) sent++;
        pool
          .request({ path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json' }, body: bodyOf() })
          .then(
            async (res) => {
              await res.body.dump();
              const ms = performance.now() - due;
              if (!counted) return;
              answered++;
              hist.record(ms);
              statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
              if (ms > tmax) overTmax++;
            },
            () => {
              if (counted) errors++;
            },
          )
          .finally(() => {
            waiting--;
          });
      };
      const tick = setInterval(() => {
        const now = performance.now();
        // Every request due by now (the time it was due is the start of its answer time).
        while (start + k * gap <= now && start + k * gap < end) one(start + k++ * gap);
        if (now >= end) {
          clearInterval(tick);
          const finish = (): void => {
            if (waiting > 0 && performance.now() < end + 10_000) return void setTimeout(finish, 20);
            const seconds = r.durationMs / 1000;
            resolve({
              rate: r.rate,
              seconds,
              sent,
              answered,
              achieved: Math.round(answered / seconds),
              statuses,
              errors,
              shed,
              p50Ms: Math.round(hist.quantile(0.5) * 10) / 10,
              p99Ms: Math.round(hist.quantile(0.99) * 10) / 10,
              maxMs: Math.round(hist.max * 10) / 10,
              overTmax,
              cpuMs: Math.round((cpuNow() - cpu0) / 1000),
            });
          };
          finish();
        }
      }, 1);
    });
  process.on('message', (m: { t: string; run?: LoadRun }) => {
    if (m.t === 'run') void run(m.run!).then((result) => process.send!({ t: 'result', result }));
    else if (m.t === 'stop') void pool.close().finally(() => process.exit(0));
  });
  process.on('disconnect', () => process.exit(0));
  process.send!({ t: 'ready' });
}

/** Starts `relent exchange-bench` again as a child process in `role`. */
export function forkRole(role: string, env: Record<string, string>): ChildProcess {
  return fork(BIN, ['exchange-bench'], { env: { ...process.env, ...env, [ROLE_ENV]: role }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
}

/** The next message of type `t` from a child; rejects when it exits first. */
export function next<T>(child: ChildProcess, t: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMsg = (m: { t: string }): void => {
      if (m.t !== t) return;
      child.off('message', onMsg);
      child.off('exit', onExit);
      resolve(m as T);
    };
    const onExit = (code: number | null): void => reject(new Error(`a bench process exited (${code}) before it answered`));
    child.on('message', onMsg);
    child.once('exit', onExit);
  });
}
