// `relent exchange-bench`: the load test runs end to end (real processes: the exchange's
// primary and worker, the simulated bidders, the open-loop load generator) and reports
// what it promises. No speed is asserted here: speed is measured by `npm run bench -- rtb`.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';

const DIST = fileURLToPath(new URL('../../dist/cli/exchange-bench.js', import.meta.url));

describe('relent exchange-bench', () => {
  it('drives the exchange open-loop at the rate with a slow, a hanging and a failing bidder, and reports rate, p50/p99, late answers and memory', async () => {
    if (!existsSync(DIST)) throw new Error('dist/ is missing: run `npm run build` first (CI builds before testing)');
    let out = '';
    let err = '';
    const code = await main(['exchange-bench', '--workers', '1', '--rate', '40', '--duration', '2s', '--json'], {
      out: (t) => {
        out += t;
      },
      err: (t) => {
        err += t;
      },
    });
    expect(code, err).toBe(0);
    const r = JSON.parse(out) as {
      tmaxMs: number;
      bidders: { partner: string; behaviour: string }[];
      results: {
        workers: number;
        run: { load: { rate: number; sent: number; answered: number; p50Ms: number; p99Ms: number }; auctions: number; afterDeadline: number };
        memory: { atS: number; rssMB: number; late: number }[];
        exchange: { auctions: { total: number } };
      }[];
    };
    expect(r.tmaxMs).toBe(150);
    expect(r.bidders.map((b) => b.behaviour)).toEqual(['fast', 'slow', 'hangs', 'failing', 'nbr']);
    const w = r.results[0]!;
    expect(w.workers).toBe(1);
    expect(w.run.load.rate).toBe(40);
    // Open loop: 40/s for 2 s is 80 requests due, whatever the answers.
    expect(w.run.load.sent).toBe(80);
    expect(w.run.load.answered).toBe(80);
    expect(w.run.load.p99Ms).toBeGreaterThanOrEqual(w.run.load.p50Ms);
    expect(w.run.auctions).toBeGreaterThanOrEqual(80);
    expect(typeof w.run.afterDeadline).toBe('number');
    expect(w.memory.length).toBeGreaterThanOrEqual(2);
    expect(w.memory.every((m) => m.rssMB > 10)).toBe(true);
    // Late answers over time: never fewer than before, and the last sample is the run's count.
    expect(w.memory.every((m, i) => i === 0 || m.late >= w.memory[i - 1]!.late)).toBe(true);
    expect(w.memory[w.memory.length - 1]!.late).toBe(w.run.afterDeadline);
    expect(err).toContain('measured run at 40/s');
  }, 60_000);

  it('refuses bad flags with the flag named (exit 2)', async () => {
    for (const [flag, value] of [
      ['--workers', '0'],
      ['--rate', 'fast'],
      ['--duration', '10ms'],
    ]) {
      let err = '';
      expect(
        await main(['exchange-bench', flag!, value!], {
          out: () => {},
          err: (t) => {
            err += t;
          },
        }),
      ).toBe(2);
      expect(err).toContain(flag);
    }
  });
});
