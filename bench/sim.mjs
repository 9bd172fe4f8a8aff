// Simulator throughput: simulated attempts per second (each one a decide() call).
// Plain ESM over the compiled library: run `npm run build` first (npm run bench does).
//   node bench/sim.mjs          (or: npm run bench -- sim [--quick])
import { fileURLToPath } from 'node:url';
import { runBrooker, runLayers, runOverload, textTable } from '../dist/sim/index.js';

const CASES = [
  // Brooker's experiment, every client count, 10 runs per cell (the full table uses 100).
  { name: 'brooker (10…190 clients, 10 runs)', run: () => runBrooker({ runs: 10 }) },
  // The calibrated overload scenario: every contender, cockatiel's retry storm included.
  { name: 'overload (13 policies, 1 run)', run: () => runOverload({ runs: 1 }) },
  { name: 'layers (3 variants)', run: () => runLayers({ runs: 1 }) },
];

function measure(c, quick) {
  c.run(); // warm-up: let the JIT settle
  let attempts = 0;
  let ms = 0;
  let rounds = 0;
  while (rounds < 1 || (!quick && (ms < 1500 || rounds < 2))) {
    const t0 = performance.now();
    attempts += c.run().attempts;
    ms += performance.now() - t0;
    rounds++;
  }
  return { attempts: attempts / rounds, ms: ms / rounds, perSecond: (attempts / ms) * 1000 };
}

/** Prints the table; `quick` measures one round per scenario instead of ≥ 1.5 s. */
export function main({ quick = false } = {}) {
  const rows = [];
  let attempts = 0;
  let ms = 0;
  for (const c of CASES) {
    const r = measure(c, quick);
    attempts += r.attempts;
    ms += r.ms;
    rows.push([c.name, Math.round(r.attempts).toLocaleString('en-US'), r.ms.toFixed(0), `${(r.perSecond / 1e6).toFixed(2)} M`]);
  }
  rows.push(['all', Math.round(attempts).toLocaleString('en-US'), ms.toFixed(0), `${(((attempts / ms) * 1000) / 1e6).toFixed(2)} M`]);
  process.stdout.write('relent/sim: simulated attempts per second (every attempt is one decide() call)\n');
  process.stdout.write(textTable(['scenario', 'attempts', 'ms', 'attempts/s'], rows));
  return rows;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
