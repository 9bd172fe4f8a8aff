// docs/conformance.md is written from the cases: its counts table, its list of differences,
// of cases waiting for issue 21 and of cases not applicable. This test keeps the document and
// the data in step (`CONFORMANCE_WRITE=1 npx vitest run test/conformance/docs.test.ts`
// rewrites the generated parts), and checks that every link of a difference reaches a heading.

import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { allCases, countsOf, statusOf, type Case, type Source } from './harness.js';
import { COCKATIEL } from './sources/cockatiel.js';
import { ENVOY } from './sources/envoy.js';
import { GRPC } from './sources/grpc.js';
import { HTTP_DATE } from './sources/http-date.js';
import { POLLY } from './sources/polly.js';
import { SMITHY } from './sources/smithy.js';
import { URLLIB3 } from './sources/urllib3.js';

const SOURCES: readonly Source[] = [URLLIB3, HTTP_DATE, GRPC, SMITHY, POLLY, COCKATIEL, ENVOY];
const DOC = new URL('../../docs/conformance.md', import.meta.url);

const cell = (s: string): string => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
const show = (v: unknown): string => cell(v === undefined ? '—' : typeof v === 'string' ? v : JSON.stringify(v));

function counts(): string {
  const rows = [
    '| source | cases | agree | documented difference | not applicable | of the agreeing, waiting for a fix |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
  ];
  const total = { all: 0, agree: 0, differs: 0, na: 0, pending: 0 };
  for (const s of SOURCES) {
    const c = countsOf(s);
    const all = c.agree + c.differs + c.na;
    const pendingAgree = allCases(s).filter((x) => x.pending !== undefined && statusOf(x) === 'agree').length;
    rows.push(`| ${s.title} | ${all} | ${c.agree} | ${c.differs} | ${c.na} | ${pendingAgree} |`);
    total.all += all;
    total.agree += c.agree;
    total.differs += c.differs;
    total.na += c.na;
    total.pending += pendingAgree;
  }
  rows.push(`| **total** | **${total.all}** | **${total.agree}** | **${total.differs}** | **${total.na}** | **${total.pending}** |`);
  return rows.join('\n');
}

function differences(): string {
  const out: string[] = [];
  for (const s of SOURCES) {
    const ds = allCases(s).filter((c) => statusOf(c) === 'differs');
    if (ds.length === 0) continue;
    out.push(
      `### ${s.title}`,
      '',
      '| source | case | upstream | the source answers | relent answers | why relent differs |',
      '| --- | --- | --- | --- | --- | --- |',
    );
    for (const c of ds)
      out.push(
        `| ${s.title} | ${c.id} | ${cell(c.from)} | ${show(c.expected)} | ${show(c.relent)}${c.pending ? ` (once ${cell(c.pending)} lands)` : ''} | ${cell(c.why ?? '')} |`,
      );
    out.push('');
  }
  return out.join('\n').trimEnd();
}

function pending(): string {
  const rows: string[] = [];
  for (const s of SOURCES)
    for (const c of allCases(s).filter((x) => x.pending !== undefined))
      rows.push(`| ${s.title} | ${c.id} | ${cell(c.from)} | ${cell(c.pending!)} | ${show(statusOf(c) === 'differs' ? c.relent : c.expected)} |`);
  if (rows.length === 0) return 'None: every case that waited for a fix passes.';
  return ['| source | case | upstream | waits for | expected answer |', '| --- | --- | --- | --- | --- |', ...rows].join('\n');
}

function notApplicable(): string {
  const out: string[] = [];
  for (const s of SOURCES) {
    const na = allCases(s).filter((c) => statusOf(c) === 'na');
    if (na.length === 0) continue;
    out.push(`### ${s.title} (${na.length})`, '', '| case | upstream | why it does not map onto relent |', '| --- | --- | --- |');
    for (const c of na) out.push(`| ${cell(c.id)} | ${cell(c.from)} | ${cell(c.why ?? '')} |`);
    out.push('');
  }
  return out.join('\n').trimEnd();
}

function upstream(): string {
  return SOURCES.map((s) => `- **${s.title}** (test/conformance/${s.key}.test.ts): ${s.upstream.join('; ')}`).join('\n');
}

const SECTIONS: Record<string, () => string> = { counts, differences, pending, 'not-applicable': notApplicable, upstream };

function render(doc: string): string {
  let out = doc;
  for (const [name, make] of Object.entries(SECTIONS)) {
    const re = new RegExp(`(<!-- conformance:${name} -->\\n)[\\s\\S]*?(<!-- /conformance:${name} -->)`);
    if (!re.test(out)) throw new Error(`docs/conformance.md lacks the markers of section ${name}`);
    out = out.replace(re, (_m, a: string, b: string) => `${a}${make()}\n${b}`);
  }
  return out;
}

/** GitHub's heading anchors of a markdown file. */
function anchors(file: string): Set<string> {
  const text = readFileSync(new URL(file, DOC), 'utf8');
  const set = new Set<string>();
  for (const line of text.split('\n')) {
    const m = /^#{1,6}\s+(.*)$/.exec(line);
    if (!m) continue;
    const slug = m[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s-]/gu, '')
      .trim()
      .replace(/\s/g, '-');
    set.add(slug);
  }
  return set;
}

describe('docs/conformance.md', () => {
  it('its generated sections match the cases', () => {
    const doc = readFileSync(DOC, 'utf8');
    const want = render(doc);
    if (process.env.CONFORMANCE_WRITE) writeFileSync(DOC, want);
    expect(doc, 'run CONFORMANCE_WRITE=1 npx vitest run test/conformance/docs.test.ts').toBe(want);
  });

  it('every link of a difference reaches a heading', () => {
    for (const s of SOURCES) {
      for (const c of allCases(s) as Case<unknown, unknown>[]) {
        if (statusOf(c) !== 'differs') continue;
        for (const [, target] of (c.why ?? '').matchAll(/\]\(([^)]+)\)/g)) {
          const [file, anchor] = target!.split('#') as [string, string | undefined];
          const where = file === '' ? 'conformance.md' : file;
          if (anchor !== undefined) expect(anchors(where), `${s.key} / ${c.id}: ${target}`).toContain(anchor);
        }
      }
    }
  });
});
