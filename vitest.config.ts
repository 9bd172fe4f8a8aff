import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { defineConfig } from 'vitest/config';

/**
 * Under Bun the bare name `undici` is Bun's own partial copy (no compose(), no
 * interceptors); the tests import the npm package, as relent itself does there
 * (src/shared/undici.ts).
 */
const require = createRequire(import.meta.url);
const bunUndici =
  typeof (process.versions as { bun?: string }).bun === 'string' ? { undici: join(dirname(require.resolve('undici/package.json')), 'index.js') } : {};

/**
 * Tests that judge wall-clock timing of whole processes (answers within a few ms of an
 * auction's deadline from the first request of a fresh process) run after the rest, one
 * file at a time: on a 2-core machine, eighty other test files running beside them stall
 * processes for tens of ms whatever the code does. Everything else runs in parallel.
 */
const TIMING = ['test/rtb/coldstart.test.ts'];

/**
 * Tests that judge an answer within tens of ms of a deadline on the real clock, with
 * real partners on loopback (the exchange's auctions and its shutdown): run after the
 * parallel group, one file at a time, for the same reason, with one more try: a stall of
 * the shared machine (measured: a 60 ms partner answering after a 200 ms window, a hang-up
 * 100 ms late, both in a CI run whose load was over 10) fails one try; a wrong rule fails
 * both.
 */
const SERIAL = ['test/rtb/auction.test.ts', 'test/rtb/server.test.ts'];

export default defineConfig({
  resolve: { alias: bunUndici },
  test: {
    testTimeout: 20_000,
    hookTimeout: 30_000,
    pool: 'forks',
    reporters: ['default', './test/support/summary-reporter.ts'],
    projects: [
      { extends: true, test: { name: 'main', include: ['test/**/*.test.ts'], exclude: [...TIMING, ...SERIAL], sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'serial', include: SERIAL, fileParallelism: false, retry: 1, sequence: { groupOrder: 1 } } },
      // One more try of ten fresh starts when the first misses (on this shared 2-core machine a
      // start now and then writes an answer 5.3-6.4 ms after its deadline where the limit is 5):
      // two misses in a row fail. The figures of every try are printed.
      { extends: true, test: { name: 'timing', include: TIMING, fileParallelism: false, retry: 1, sequence: { groupOrder: 2 } } },
    ],
  },
});
