// A small benchmark harness for nanosecond-scale async calls. Libraries like tinybench
// time every iteration (≈50–100 ns of timer overhead each), which would swamp what we
// compare here; this one times batches, interleaves candidates round by round so that
// machine noise hits them alike, and reports the median.

import { readFileSync } from 'node:fs';

/** The peers the benches compare with (devDependencies at their current majors). */
export const PEERS = [
  'p-retry',
  'cockatiel',
  'exponential-backoff',
  'async-retry',
  'undici',
  'got',
  'ky',
  'axios',
  'axios-retry',
  'opossum',
  'bullmq',
  'pg-boss',
];

/** The installed version of a package, as the benches name it in their rows. */
export function peerVersion(name) {
  return JSON.parse(readFileSync(new URL(`../node_modules/${name}/package.json`, import.meta.url), 'utf8')).version;
}

/** Runs `fn` n times sequentially (awaiting each), returns ns per call. */
async function batch(fn, n) {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await fn();
  return Number(process.hrtime.bigint() - t0) / n;
}

function batchSync(fn, n) {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) fn();
  return Number(process.hrtime.bigint() - t0) / n;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

/**
 * candidates: [{ name, fn, sync? }]. Returns rows { name, nsPerOp, opsPerSec } (median of rounds).
 */
export async function compare(candidates, { iterations = 100_000, rounds = 9, warmup = 2 } = {}) {
  const samples = new Map(candidates.map((c) => [c.name, []]));
  for (let r = 0; r < warmup + rounds; r++) {
    for (const c of candidates) {
      const ns = c.sync ? batchSync(c.fn, c.iterations ?? iterations) : await batch(c.fn, c.iterations ?? iterations);
      if (r >= warmup) samples.get(c.name).push(ns);
    }
  }
  return candidates.map((c) => {
    const ns = median(samples.get(c.name));
    return { name: c.name, nsPerOp: ns, opsPerSec: 1e9 / ns };
  });
}

/** Prints a table with a ratio column against `baseline` (by name). */
export function printTable(title, rows, { baseline, note } = {}) {
  const base = baseline ? rows.find((r) => r.name === baseline) : null;
  const w = Math.max(...rows.map((r) => r.name.length), 10);
  console.log(`\n${title}`);
  if (note) console.log(note);
  console.log(`${'candidate'.padEnd(w)}  ${'ns/op'.padStart(10)}  ${'ops/s'.padStart(12)}${base ? `  ${`vs ${baseline}`.padStart(16)}` : ''}`);
  console.log(`${'-'.repeat(w)}  ${'-'.repeat(10)}  ${'-'.repeat(12)}${base ? `  ${'-'.repeat(16)}` : ''}`);
  for (const r of rows) {
    const ratio = base ? `${(r.nsPerOp / base.nsPerOp).toFixed(2)}x time` : '';
    console.log(
      `${r.name.padEnd(w)}  ${r.nsPerOp.toFixed(1).padStart(10)}  ${Math.round(r.opsPerSec).toLocaleString('en-US').padStart(12)}${base ? `  ${ratio.padStart(16)}` : ''}`,
    );
  }
}

/** A connected ioredis client of `url`, or null when Redis does not answer within 2 s (the caller skips its bench). */
export async function connectRedis(url) {
  const { Redis } = await import('ioredis');
  const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false, connectTimeout: 2000 });
  r.on('error', () => {});
  try {
    await r.connect();
    await r.ping();
    return r;
  } catch {
    r.disconnect();
    return null;
  }
}
