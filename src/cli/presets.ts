import { PRESETS, presetPolicy, isPresetName, type PresetName } from '../presets/index.js';
import { EXIT, parseFlags, processIo, type Io } from './args.js';
import { colorEnabled, NO_PAINT, paintFor } from './io.js';

export const PRESETS_HELP = `relent presets [NAME…] [--json]

Lists the documented retry policies of real services: each one's parameters, the
schedule it follows, and the public document it copies (title and address).

  --json   the presets as one JSON object instead of text
`;

const dur = (ms: number): string =>
  ms >= 3_600_000 && ms % 3_600_000 === 0
    ? `${ms / 3_600_000}h`
    : ms >= 60_000 && ms % 60_000 === 0
      ? `${ms / 60_000}m`
      : ms >= 1000 && ms % 1000 === 0
        ? `${ms / 1000}s`
        : `${ms}ms`;

export async function presetsCommand(argv: string[], io: Io): Promise<number> {
  const { values, positionals } = parseFlags({ args: argv, allowPositionals: true, options: { json: { type: 'boolean' } } });
  const paint = io === processIo ? paintFor(colorEnabled('stdout')) : NO_PAINT;
  const names = positionals.length > 0 ? positionals : [...PRESETS.keys()];
  for (const n of names) {
    if (!isPresetName(n)) {
      io.err(`relent presets: unknown preset ${JSON.stringify(n)} (known: ${[...PRESETS.keys()].join(', ')})\n`);
      return EXIT.usage;
    }
  }
  const rows = (names as PresetName[]).map((n) => {
    const def = PRESETS.get(n)!;
    const p = presetPolicy(n);
    return { name: n, summary: def.summary, schedule: def.schedule, source: def.source, notes: def.notes, policy: p.spec };
  });
  if (values.json) {
    io.out(JSON.stringify({ presets: rows }, null, 2) + '\n');
    return EXIT.ok;
  }
  for (const r of rows) {
    const p = r.policy;
    io.out(`${paint.bold(r.name)}\n  ${r.summary}\n`);
    io.out(`  schedule: ${r.schedule}\n`);
    io.out(
      `  attempts ${p.maxAttempts} · deadline ${dur(p.deadlineMs)}${p.attemptTimeoutMs !== null ? ` · attempt timeout ${dur(p.attemptTimeoutMs)}` : ''} · backoff ${JSON.stringify(p.backoff)}\n`,
    );
    const withWait = p.retryAfter.honor && p.retryOn.statusWithWait.length > 0 ? ` · with a Retry-After also ${JSON.stringify(p.retryOn.statusWithWait)}` : '';
    io.out(`  retry on status ${JSON.stringify(p.retryOn.status)}${withWait} · errors ${p.retryOn.errors.join(', ') || 'none'}\n`);
    io.out(
      `  Retry-After ${p.retryAfter.honor ? `honoured on ${JSON.stringify(p.retryAfter.statuses)} up to ${dur(p.retryAfter.maxMs)}${p.retryAfter.lengthenOnly ? ' (lengthens the own wait, never shortens it)' : ''}` : 'ignored'} · budget ${p.budget ? JSON.stringify(p.budget) : 'none'}${p.deferOverMs !== null ? ` · defer waits over ${dur(p.deferOverMs)}` : ''}\n`,
    );
    io.out(`  source: ${r.source}\n`);
    for (const note of r.notes) io.out(`  note: ${note}\n`);
    io.out('\n');
  }
  return EXIT.ok;
}
