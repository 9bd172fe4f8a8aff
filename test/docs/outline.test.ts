// Every page of docs/ has the same outline, in this order: what it is, options and
// defaults, events, errors, anti-patterns (Polly's docs pages; CONVENTIONS.md §12). A
// page may hold other sections between them (how it works, figures) and may repeat the
// outline per component (### under each ##); the first heading of each kind must come in
// this order. The README's Documentation table lists every page.
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const DOCS = fileURLToPath(new URL('../../docs/', import.meta.url));
const README = readFileSync(fileURLToPath(new URL('../../README.md', import.meta.url)), 'utf8');

const OUTLINE: readonly { name: string; heading: RegExp }[] = [
  { name: 'What it is', heading: /^What it is\b/ },
  { name: 'Options and defaults', heading: /^Options\b/ },
  { name: 'Events', heading: /^Events\b/ },
  { name: 'Errors', heading: /^Errors\b/ },
  { name: 'Anti-patterns', heading: /^Anti-patterns\b/ },
];

/**
 * Pages whose owner has not taken the outline yet, with what is missing. Remove an entry
 * when the page has it (the test fails on an entry that is no longer needed).
 */
const PENDING: Readonly<Record<string, string>> = {
  'fleet.md': 'the fleet helper\'s page: "When Redis is slow, down, or wrong" is its Errors, after Events; no Anti-patterns yet',
};

/** Pages that report rather than describe a component: no options, events or errors of their own. */
const REPORTS: Readonly<Record<string, string>> = {
  'conformance.md': "the sources' test cases against relent, generated from test/conformance",
};

/** The ## and ### headings of a page, outside code fences. */
function headings(text: string): string[] {
  const out: string[] = [];
  let fence = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('```')) fence = !fence;
    else if (!fence && /^#{2,3} /.test(line)) out.push(line.replace(/^#+ /, ''));
  }
  return out;
}

/** The outline's sections missing or out of order in a page ([] when it has the outline). */
function outlineProblems(text: string): string[] {
  const hs = headings(text);
  const firsts = OUTLINE.map((o) => hs.findIndex((h) => o.heading.test(h)));
  const problems = OUTLINE.filter((_, i) => firsts[i]! < 0).map((o) => `no "${o.name}"`);
  for (let i = 1; i < OUTLINE.length; i++) {
    if (firsts[i]! >= 0 && firsts[i - 1]! >= 0 && firsts[i]! < firsts[i - 1]!) problems.push(`"${OUTLINE[i]!.name}" before "${OUTLINE[i - 1]!.name}"`);
  }
  return problems;
}

const pages = readdirSync(DOCS)
  .filter((f) => f.endsWith('.md'))
  .sort();

describe('docs/: one outline for every page', () => {
  it.each(pages)('%s: what it is, options and defaults, events, errors, anti-patterns', (page) => {
    if (page in REPORTS) return;
    const problems = outlineProblems(readFileSync(`${DOCS}${page}`, 'utf8'));
    if (page in PENDING) expect(problems, `${page} has the outline now: remove it from PENDING`).not.toEqual([]);
    else expect(problems).toEqual([]);
  });

  it("the README's Documentation table links every page", () => {
    const table = README.slice(README.indexOf('## Documentation'), README.indexOf('\n## ', README.indexOf('## Documentation') + 1));
    for (const page of pages) expect(table, page).toContain(`(docs/${page})`);
  });
});
