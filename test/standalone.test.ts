// What ships stands alone: the README, docs/, the examples, the benchmarks, the scripts,
// the sources (comments included), every command's help and `relent presets` cite
// public material by title and address — never the project's internal requirement
// numbers, reference notes, seed documents or issue numbers, which do not ship — and
// quote in English.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { COMMAND_NAMES, main } from '../src/cli/main.js';
import { PRESETS } from '../src/presets/index.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** Internal references, as they appeared before: "SPEC R20", "(R13)", "REFERENCE.md §3", "seed S0", "issue 6", "../shared/DESIGN.md"… */
const INTERNAL: readonly [string, RegExp][] = [
  ['a requirement number', /\bR\d{1,2}\b|\bSPEC\b/],
  [
    'an internal file',
    /REFERENCE(\.md)?\s*§|REFERENCE\.md|ANCHORS-|DESIGN\.md|CONVENTIONS\.md|\.\.\/shared\/(SPEC|DESIGN|REFERENCE|CONVENTIONS|ANCHORS|seeds)/,
  ],
  ['a seed document', /\bseeds? (S\d|0\d\d)\b/i],
  ['an issue number', /\bissue #?\d+/i],
  ['an untranslated quote', /[\u0400-\u04FF]/],
];

function files(dir: string, ext: RegExp): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? files(p, ext) : ext.test(name) ? [p] : [];
  });
}

function offences(text: string, where: string): string[] {
  const out: string[] = [];
  text.split('\n').forEach((line, i) => {
    for (const [what, re] of INTERNAL) {
      const m = re.exec(line);
      if (m) out.push(`${where}:${i + 1}: ${what} (${JSON.stringify(m[0])}): ${line.trim().slice(0, 120)}`);
    }
  });
  return out;
}

describe('what ships cites public sources only', () => {
  it('README, docs, examples, benchmarks, scripts and sources (comments included)', () => {
    const list = [
      join(ROOT, 'README.md'),
      ...files(join(ROOT, 'docs'), /\.md$/),
      ...files(join(ROOT, 'examples'), /\.(json|md)$/),
      ...files(join(ROOT, 'bench'), /\.(mjs|js|ts)$/),
      ...files(join(ROOT, 'scripts'), /\.(mjs|js)$/),
      ...files(join(ROOT, 'src'), /\.ts$/),
    ];
    expect(list.length).toBeGreaterThan(100);
    const found = list.flatMap((f) => offences(readFileSync(f, 'utf8'), relative(ROOT, f)));
    expect(found).toEqual([]);
  });

  it("every command's help and `relent presets` (text and --json)", async () => {
    const outputs: [string, string][] = [];
    for (const argv of [...COMMAND_NAMES.map((c) => ['help', c]), ['help'], ['presets'], ['presets', '--json']]) {
      let out = '';
      const code = await main(argv, { out: (t) => (out += t), err: (t) => (out += t) });
      expect(code, argv.join(' ')).toBe(0);
      outputs.push([`relent ${argv.join(' ')}`, out]);
    }
    expect(outputs.flatMap(([where, text]) => offences(text, where))).toEqual([]);
  });

  it('each preset names its public source: a title and an https address', () => {
    for (const [name, def] of PRESETS) {
      expect(def.source, name).toMatch(/^[A-Za-z][^—]*[a-z0-9"”)] — https:\/\/\S+/);
    }
  });

  it('the checks catch what they are for', () => {
    for (const bad of [
      'see SPEC R20',
      'events (R13)',
      'REFERENCE.md §3',
      'REFERENCE §4.1',
      'seed S0',
      'seed 000 asks',
      'issue 6',
      '../shared/DESIGN.md',
      'задержка(n)',
    ]) {
      expect(offences(bad, 'x'), bad).toHaveLength(1);
    }
    for (const ok of ['Amazon S3', 'RFC 9110 §10.2.3', 'R2D2.', 'a seed of 1', '--seed S', 'Finagle 6.31', 'HTTP/2']) {
      expect(offences(ok, 'x'), ok).toEqual([]);
    }
  });
});
