// run() success-path overhead vs peers, and decide() throughput.
// Peers at their current majors (p-retry 9, cockatiel 4, exponential-backoff 3,
// async-retry 1), named with their installed versions in the rows.
import pRetry from 'p-retry';
import { retry, handleAll, ExponentialBackoff, timeout, TimeoutStrategy, wrap } from 'cockatiel';
import { backOff } from 'exponential-backoff';
import asyncRetry from 'async-retry';
import { run, resolvePolicy, decide, createOperation } from '../dist/index.js';
import { createSeededRandom } from '../dist/testing/index.js';
import { compare, printTable } from './harness.mjs';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';

const versions = Object.fromEntries(
  ['p-retry', 'cockatiel', 'exponential-backoff', 'async-retry'].map((n) => [
    n,
    JSON.parse(readFileSync(new URL(`../node_modules/${n}/package.json`, import.meta.url), 'utf8')).version,
  ]),
);

export async function main({ quick = false } = {}) {
  const work = async () => 42;
  const policy = resolvePolicy({}); // relent's defaults, validated once
  const noop = () => {};
  const pRetryOptions = { retries: 2 };
  const cockatielPolicy = retry(handleAll, { maxAttempts: 2, backoff: new ExponentialBackoff() });
  // The same protection relent's run() gives by default: a deadline over the retries.
  const cockatielWithDeadline = wrap(timeout(10_000, TimeoutStrategy.Aggressive), retry(handleAll, { maxAttempts: 2, backoff: new ExponentialBackoff() }));
  const ebOptions = { numOfAttempts: 3 };

  const candidates = [
    { name: 'bare await fn()', fn: () => work() },
    // The least a wrapper pays that can end the call on its own timer: a promise of its
    // own, and the call's promise handed two closures (no timer, no rules, no checks).
    {
      name: 'floor: new Promise + then(2 closures)',
      fn: () =>
        new Promise((resolve, reject) => {
          work().then(
            (v) => resolve(v),
            (e) => reject(e),
          );
        }),
    },
    // Less still: the call's promise handed the wrapper's own resolve and reject, so the
    // answer is passed on unread (no retry could be decided): what owning the promise costs.
    {
      name: 'floor: new Promise + then(resolve, reject)',
      fn: () =>
        new Promise((resolve, reject) => {
          work().then(resolve, reject);
        }),
    },
    { name: 'relent run()', fn: () => run(work, { policy }) },
    { name: 'relent run() + onEvent', fn: () => run(work, { policy, onEvent: noop }) },
    { name: `p-retry ${versions['p-retry']} (options reused)`, fn: () => pRetry(work, pRetryOptions), iterations: 20_000 },
    { name: `p-retry ${versions['p-retry']} (fresh options)`, fn: () => pRetry(work, { retries: 2 }), iterations: 20_000 },
    { name: `cockatiel ${versions.cockatiel} retry`, fn: () => cockatielPolicy.execute(work) },
    { name: `cockatiel ${versions.cockatiel} retry + 10 s timeout`, fn: () => cockatielWithDeadline.execute(work), iterations: 10_000 },
    { name: `exponential-backoff ${versions['exponential-backoff']}`, fn: () => backOff(work, ebOptions), iterations: 20_000 },
    { name: `async-retry ${versions['async-retry']}`, fn: () => asyncRetry(work, { retries: 2 }), iterations: 20_000 },
  ];
  // Three repetitions of the whole comparison, each the median of seven rounds (candidates
  // interleaved round by round), with the load average when each began: on a shared
  // machine a ratio means something only next to the load it was measured under.
  const repetitions = [];
  for (let rep = 0; rep < 3; rep++) {
    const load = loadavg();
    const rows = await compare(candidates, quick ? { iterations: 20_000, rounds: 3, warmup: 1 } : { rounds: 7, warmup: rep === 0 ? 4 : 1 });
    repetitions.push({ load, rows });
  }
  const by = (rows, name) => rows.find((r) => r.name === name).nsPerOp;
  const cockatielName = `cockatiel ${versions.cockatiel} retry`;
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  // The table: each candidate's median over the three repetitions.
  const rows = candidates.map((c) => {
    const ns = median(repetitions.map((r) => by(r.rows, c.name)));
    return { name: c.name, nsPerOp: ns, opsPerSec: 1e9 / ns };
  });
  printTable('Success-path overhead: one call that succeeds (sequential awaits), median of 3 repetitions', rows, {
    baseline: 'bare await fn()',
    note: 'Lower ns/op is better. Each library retries up to 2 times on failure; no retry happens here.',
  });

  console.log('\nrelent run() with defaults per repetition (goal: within 2x of a bare await fn(), faster than cockatiel):');
  console.log(
    `${'rep'.padEnd(3)}  ${'load avg 1/5/15'.padEnd(16)}  ${'bare ns'.padStart(8)}  ${'run() ns'.padStart(8)}  ${'run÷bare'.padStart(8)}  ${'floor÷bare'.padStart(10)}  ${'unread÷bare'.padStart(11)}  ${'cockatiel ns'.padStart(12)}  ${'cockatiel÷run'.padStart(13)}`,
  );
  repetitions.forEach(({ load, rows: r }, i) => {
    const bare = by(r, 'bare await fn()');
    const ours = by(r, 'relent run()');
    const floor = by(r, 'floor: new Promise + then(2 closures)');
    const unread = by(r, 'floor: new Promise + then(resolve, reject)');
    const ck = by(r, cockatielName);
    console.log(
      `${String(i + 1).padEnd(3)}  ${load
        .map((x) => x.toFixed(2))
        .join(' ')
        .padEnd(
          16,
        )}  ${bare.toFixed(1).padStart(8)}  ${ours.toFixed(1).padStart(8)}  ${`${(ours / bare).toFixed(2)}x`.padStart(8)}  ${`${(floor / bare).toFixed(2)}x`.padStart(10)}  ${`${(unread / bare).toFixed(2)}x`.padStart(11)}  ${ck.toFixed(1).padStart(12)}  ${`${(ck / ours).toFixed(2)}x`.padStart(13)}`,
    );
  });

  const ours = rows.find((r) => r.name === 'relent run()');
  console.log('\nrelent run() (deadline, attempt timeout, events-ready) against each peer, same run (medians):');
  for (const r of rows.filter((x) => !x.name.startsWith('relent') && x.name !== 'bare await fn()' && !x.name.startsWith('floor'))) {
    const ratio = r.nsPerOp / ours.nsPerOp;
    console.log(`  ${r.name}: relent ${ratio >= 1 ? `${ratio.toFixed(2)}x faster` : `${(1 / ratio).toFixed(2)}x slower`}`);
  }

  const random = createSeededRandom(1);
  const state = createOperation(policy, { method: 'GET', random }); // an operation in its first attempt
  state.start(0);
  const ok = { status: 200, elapsedMs: 5 };
  const busy = { status: 503, elapsedMs: 5 };
  const limited = { status: 429, elapsedMs: 5, headers: { 'retry-after': '2' } };
  const ctx = { now: 5, wallNow: Date.UTC(2026, 0, 1), random };
  const d = await compare(
    [
      { name: 'decide(): 200 → return', fn: () => decide(policy, state, ok, ctx), sync: true },
      { name: 'decide(): 503 → retry (full jitter)', fn: () => decide(policy, state, busy, ctx), sync: true },
      { name: 'decide(): 429 + Retry-After → retry', fn: () => decide(policy, state, limited, ctx), sync: true },
    ],
    quick ? { iterations: 200_000, rounds: 3, warmup: 1 } : { iterations: 1_000_000, rounds: 5 },
  );
  printTable('decide() throughput (pure function, no I/O)', d);
  return { rows, repetitions, decide: d };
}

if (import.meta.url === `file://${process.argv[1]}`) await main({ quick: process.argv.includes('--quick') });
