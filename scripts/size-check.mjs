#!/usr/bin/env node
// Keeps src/ readable: no file over 600 lines, no function (or method, arrow, class
// static block) over 150 lines. `--report` lists the largest without failing.
// Uses the TypeScript compiler's parser (a devDependency already), not a regex.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = fileURLToPath(new URL('..', import.meta.url));
const MAX_FILE = 600;
const MAX_FUNCTION = 150;
const report = process.argv.includes('--report');

function files(dir) {
  const out = [];
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...files(p));
    else if (p.endsWith('.ts') && !p.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

const problems = [];
const all = [];
for (const file of files(join(root, 'src'))) {
  const text = readFileSync(file, 'utf8');
  const rel = relative(root, file);
  const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
  all.push({ what: rel, lines, kind: 'file' });
  if (lines > MAX_FILE) problems.push(`${rel}: ${lines} lines (at most ${MAX_FILE})`);
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const visit = (node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const start = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line;
      const end = sf.getLineAndCharacterOfPosition(node.getEnd()).line;
      const n = end - start + 1;
      const name = node.name && 'text' in node.name ? node.name.text : ts.SyntaxKind[node.kind];
      all.push({ what: `${rel}:${start + 1} ${name}`, lines: n, kind: 'function' });
      if (n > MAX_FUNCTION) problems.push(`${rel}:${start + 1}: function ${name} is ${n} lines (at most ${MAX_FUNCTION})`);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
}

if (report) {
  for (const kind of ['file', 'function']) {
    console.log(`largest ${kind}s:`);
    for (const x of all
      .filter((a) => a.kind === kind)
      .sort((a, b) => b.lines - a.lines)
      .slice(0, 15))
      console.log(`  ${String(x.lines).padStart(5)}  ${x.what}`);
  }
}
if (problems.length > 0) {
  console.error(`size-check: ${problems.length} over the limits:\n  ${problems.join('\n  ')}`);
  if (!report) process.exit(1);
} else console.log(`size-check: every file in src/ within ${MAX_FILE} lines, every function within ${MAX_FUNCTION}`);
