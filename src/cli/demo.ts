import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { formatHuman } from '../run/format.js';
import { replay } from '../run/replay.js';
import { EXIT, parseFlags, type Io } from './args.js';
import { timelinesFrom } from './replay.js';

const EXAMPLES = fileURLToPath(new URL('../../examples/timelines/', import.meta.url));

export const DEMO_HELP = `relent demo

Replays the example timelines bundled in examples/timelines/ in virtual time (no
network, no waiting): every attempt's decision, then whether the operation ended as
the timeline expects. Exit status 0 when every one did, 1 otherwise.
`;

/** Replays the bundled example timelines and checks what each expects. */
export async function demoCommand(argv: string[], io: Io): Promise<number> {
  parseFlags({ args: argv, allowPositionals: false, options: {} });
  const files = (await readdir(EXAMPLES)).filter((f) => f.endsWith('.json')).sort();
  let failed = 0;
  let count = 0;
  for (const f of files) {
    const { timelines } = timelinesFrom(await readFile(join(EXAMPLES, f), 'utf8'), f);
    for (const t of timelines) {
      count++;
      const { events, result } = await replay(t);
      io.out(`\n▸ ${t.name ?? t.operationId} — ${f}\n`);
      if (t.description) io.out(`  ${t.description}\n`);
      for (const e of events) io.out(`  ${formatHuman(e)}\n`);
      const exp = t.expect;
      if (exp) {
        const got = { reason: result.reason, attempts: result.attempts, status: result.last?.status ?? null };
        const wrong = (['reason', 'attempts', 'status'] as const).filter((k) => exp[k] !== undefined && exp[k] !== got[k]);
        if (wrong.length > 0) {
          failed++;
          io.out(`  ✗ expected ${wrong.map((k) => `${k}=${String(exp[k])}`).join(', ')}, got ${wrong.map((k) => `${k}=${String(got[k])}`).join(', ')}\n`);
        } else io.out('  ✓ as expected\n');
      }
    }
  }
  io.out(`\n${count} timelines replayed in virtual time from examples/timelines/; ${failed === 0 ? 'all as expected' : `${failed} not as expected`}.\n`);
  io.out('Try: ./bin/relent replay examples/timelines/s3-read.json   ·   ./bin/relent presets\n');
  return failed === 0 ? EXIT.ok : EXIT.failure;
}
