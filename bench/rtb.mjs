// The exchange under load: `relent exchange-bench` with one and with two worker processes.
// For each, the highest open-loop rate whose p99 at the source stays within the tmax with
// no answer written more than 5 ms after its deadline, then a run at 80 % of it (60 s;
// --quick: 10 s, 2 s search steps): auctions/s, p50/p99, answers after deadline + 5 ms,
// memory over time, and the ratio of two workers to one. The bidders (fast, slow, hanging,
// failing, nbr) and the load generator run in their own processes on the same machine.
// Run after `npm run build` (imports ../dist): `node bench/rtb.mjs [--quick]`, or
// `npm run bench -- rtb`.
import { loadavg } from 'node:os';
import { pathToFileURL } from 'node:url';

export async function main({ quick = false } = {}) {
  const { runExchangeBench, formatBench } = await import('../dist/cli/exchange-bench.js');
  const workers = (process.env.RTB_BENCH_WORKERS ?? '1,2').split(',').map(Number);
  const start = loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  const result = await runExchangeBench({
    config: null,
    workers,
    rate: Number(process.env.RTB_BENCH_RATE ?? 200),
    findMax: true,
    p99Ms: null,
    durationMs: quick ? 10_000 : 60_000,
    stepMs: quick ? 2_000 : 5_000,
    tmaxMs: null,
    connections: 256,
    log: (line) => process.stderr.write(`${line}\n`),
  });
  console.log(`load average at the start: ${start}`);
  process.stdout.write(formatBench(result));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main({ quick: process.argv.includes('--quick') });
}
