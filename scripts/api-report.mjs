#!/usr/bin/env node
// The API report: every export of every entry point in package.json, with its type, as
// the declaration files give it. Checked in under api/ so that every change to the
// public surface shows in review; CI fails when the surface and the report differ.
//
//   npm run api:update    write api/*.api.md from the sources
//   npm run api:check     exit 1 (and say which entry point) when they differ
//
// A typed snapshot in the manner of API Extractor's report, made with the TypeScript
// compiler this project already uses: declarations are emitted to memory from src/,
// each entry point's exports are resolved through re-exports and printed without
// comments, and every type of this package that an export refers to but the entry
// point does not export is printed too (marked), so a change to it shows as well.
// It also checks that one name means one thing: a name exported by two entry points
// must be the same declaration.
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(ROOT, 'api');
const check = process.argv.includes('--check');

function entryPoints() {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  const out = [];
  for (const [subpath, target] of Object.entries(pkg.exports)) {
    if (typeof target !== 'object' || target === null || typeof target.types !== 'string') continue;
    const name = subpath === '.' ? pkg.name : `${pkg.name}/${subpath.slice(2)}`;
    // ./dist/x/index.d.ts → dist/x/index.d.ts (emitted from src/x/index.ts)
    out.push({ name, file: join(ROOT, target.types.replace(/^\.\//, '')), report: `${name.replaceAll('/', '-')}.api.md` });
  }
  return out;
}

/** Emits the declaration files of src/ to memory: path → text. */
function emitDeclarations() {
  const configPath = join(ROOT, 'tsconfig.build.json');
  const config = ts.readConfigFile(configPath, ts.sys.readFile);
  const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, ROOT, undefined, configPath);
  const options = { ...parsed.options, declaration: true, emitDeclarationOnly: true, sourceMap: false, declarationMap: false, noEmit: false };
  const program = ts.createProgram(parsed.fileNames, options);
  const files = new Map();
  const result = program.emit(
    undefined,
    (path, text) => {
      if (path.endsWith('.d.ts')) files.set(resolve(path), text);
    },
    undefined,
    true,
  );
  const diags = ts
    .getPreEmitDiagnostics(program)
    .concat(result.diagnostics)
    .filter((d) => d.category === ts.DiagnosticCategory.Error);
  if (diags.length > 0) {
    process.stderr.write(ts.formatDiagnostics(diags.slice(0, 10), { getCanonicalFileName: (f) => f, getCurrentDirectory: () => ROOT, getNewLine: () => '\n' }));
    process.exit(2);
  }
  return { files, options };
}

/** A program over the emitted declarations (and node's and dependencies' types from disk). */
function declarationProgram(files, options, roots) {
  const host = ts.createCompilerHost({ ...options, noEmit: true });
  const readFile = host.readFile.bind(host);
  const fileExists = host.fileExists.bind(host);
  host.readFile = (f) => files.get(resolve(f)) ?? readFile(f);
  host.fileExists = (f) => files.has(resolve(f)) || fileExists(f);
  // The emitted declarations' folders exist for the compiler even before `npm run build`
  // (module resolution asks for the folder first, and dist/ may not be there).
  const dirs = new Set();
  for (const f of files.keys()) for (let d = dirname(f); !dirs.has(d) && d !== dirname(d); d = dirname(d)) dirs.add(d);
  const directoryExists = host.directoryExists?.bind(host);
  host.directoryExists = (d) => dirs.has(resolve(d)) || (directoryExists ? directoryExists(d) : true);
  host.getSourceFile = (f, lang) => {
    const text = host.readFile(f);
    return text === undefined ? undefined : ts.createSourceFile(f, text, lang, true);
  };
  return ts.createProgram(roots, { ...options, noEmit: true, declaration: false, emitDeclarationOnly: false }, host);
}

const printer = ts.createPrinter({ removeComments: true, newLine: ts.NewLineKind.LineFeed });

function ownDeclaration(decl, files) {
  return files.has(resolve(decl.getSourceFile().fileName));
}

/** The printed declaration of a symbol (every declaration of it, e.g. an interface and a const of one name). */
function printSymbol(symbol, exportName) {
  const parts = [];
  for (const decl of symbol.declarations ?? []) {
    let node = decl;
    if (ts.isVariableDeclaration(decl)) node = decl.parent.parent; // the variable statement
    if (ts.isExportSpecifier(decl)) continue;
    let text = printer.printNode(ts.EmitHint.Unspecified, node, decl.getSourceFile());
    text = text.replace(/^export (default )?/m, '').replace(/^declare /m, '');
    parts.push(text);
  }
  if (exportName !== symbol.name) parts.unshift(`// exported as ${exportName}`);
  return parts.join('\n');
}

/** The symbols of this package that the declarations of `symbol` refer to. */
function referenced(symbol, checker, files) {
  const found = new Set();
  const visit = (node) => {
    let target = null;
    if (ts.isTypeReferenceNode(node)) target = node.typeName;
    else if (ts.isExpressionWithTypeArguments(node)) target = node.expression;
    else if (ts.isTypeQueryNode(node)) target = node.exprName;
    if (target !== null) {
      let s = checker.getSymbolAtLocation(target);
      if (s && s.flags & ts.SymbolFlags.Alias) s = checker.getAliasedSymbol(s);
      if (s && (s.declarations ?? []).some((d) => ownDeclaration(d, files)) && !(s.flags & ts.SymbolFlags.TypeParameter)) found.add(s);
    }
    ts.forEachChild(node, visit);
  };
  for (const decl of symbol.declarations ?? []) visit(decl);
  return found;
}

function kindOf(symbol) {
  const f = symbol.flags;
  if (f & ts.SymbolFlags.Class) return 'class';
  if (f & ts.SymbolFlags.Function) return 'function';
  if (f & ts.SymbolFlags.Variable) return 'const';
  if (f & ts.SymbolFlags.Interface) return 'interface';
  if (f & ts.SymbolFlags.TypeAlias) return 'type';
  if (f & ts.SymbolFlags.Enum) return 'enum';
  return 'other';
}

function report(entry, program, files) {
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(entry.file);
  if (!source) throw new Error(`${entry.name}: ${relative(ROOT, entry.file)} was not emitted`);
  const moduleSymbol = checker.getSymbolAtLocation(source);
  const exports = checker.getExportsOfModule(moduleSymbol).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const exported = new Set();
  const names = new Map();
  const lines = [];
  let values = 0;
  let types = 0;
  for (const e of exports) {
    const target = e.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(e) : e;
    exported.add(target);
    names.set(e.name, target);
    const kind = kindOf(target);
    if (kind === 'interface' || kind === 'type') types++;
    else values++;
    lines.push(`### ${e.name} (${kind})`, '', '```ts', printSymbol(target, e.name), '```', '');
  }
  // Types of this package the exports refer to without exporting them.
  const extra = [];
  const queue = [...exported];
  const seen = new Set(queue);
  while (queue.length > 0) {
    const s = queue.shift();
    for (const r of referenced(s, checker, files)) {
      if (seen.has(r)) continue;
      seen.add(r);
      queue.push(r);
      if (!exported.has(r)) extra.push(r);
    }
  }
  extra.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const head = [
    `# API report: \`${entry.name}\``,
    '',
    '<!-- Generated by scripts/api-report.mjs (`npm run api:update`). Do not edit: CI checks it (`npm run api:check`). -->',
    '',
    `${exports.length} exports: ${values} values (functions, classes, constants), ${types} types.`,
    '',
  ];
  const tail =
    extra.length === 0
      ? []
      : [
          '## Referenced, not exported here',
          '',
          'Types of relent that the exports above use and another entry point exports.',
          '',
          ...extra.flatMap((s) => [`### ${s.name} (${kindOf(s)}, not exported)`, '', '```ts', printSymbol(s, s.name), '```', '']),
        ];
  return { text: [...head, '## Exports', '', ...lines, ...tail].join('\n').replace(/\n+$/, '\n'), names, extra, count: exports.length, values };
}

const entries = entryPoints();
const { files, options } = emitDeclarations();
const program = declarationProgram(
  files,
  options,
  entries.map((e) => e.file),
);
const reports = entries.map((e) => ({ entry: e, ...report(e, program, files) }));

// One name, one thing: a name two entry points export must be the same declaration.
const problems = [];
const owners = new Map();
for (const r of reports) {
  for (const [name, symbol] of r.names) {
    const prev = owners.get(name);
    if (prev && prev.symbol !== symbol) problems.push(`\`${name}\` is two different things: in ${prev.entry} and in ${r.entry.name}`);
    else if (!prev) owners.set(name, { symbol, entry: r.entry.name });
  }
}
// Every type an export refers to is exported by some entry point (a user can name what a
// public function takes or returns); a report says where the ones it does not export are.
const exportedBy = new Map();
for (const r of reports) for (const symbol of r.names.values()) if (!exportedBy.has(symbol)) exportedBy.set(symbol, r.entry.name);
for (const r of reports) {
  for (const s of r.extra) {
    const home = exportedBy.get(s);
    if (home === undefined) problems.push(`\`${s.name}\` (used by ${r.entry.name}) is exported by no entry point: export its type`);
    else r.text = r.text.replace(`### ${s.name} (${kindOf(s)}, not exported)`, `### ${s.name} (${kindOf(s)}, exported by ${home})`);
  }
}
if (problems.length > 0) {
  process.stderr.write(`api-report: ${problems.join('\n')}\n`);
  process.exit(1);
}

if (check) {
  const stale = [];
  for (const r of reports) {
    const path = join(OUT, r.entry.report);
    if (!existsSync(path) || readFileSync(path, 'utf8') !== r.text) stale.push(r.entry.name);
  }
  const known = new Set(reports.map((r) => r.entry.report));
  const extra = existsSync(OUT) ? readdirSync(OUT).filter((f) => f.endsWith('.api.md') && !known.has(f)) : [];
  if (stale.length > 0 || extra.length > 0) {
    const what = [...stale.map((n) => `${n} changed`), ...extra.map((f) => `api/${f} has no entry point`)].join('; ');
    process.stderr.write(
      `api-report: the public surface differs from the checked-in report (${what}).\nIf the change is intended, run \`npm run api:update\` and commit api/.\n`,
    );
    process.exit(1);
  }
  process.stdout.write(`api-report: ${reports.length} entry points match api/ (${reports.map((r) => `${r.entry.name} ${r.count}`).join(', ')})\n`);
} else {
  if (existsSync(OUT)) for (const f of readdirSync(OUT)) if (f.endsWith('.api.md')) rmSync(join(OUT, f));
  mkdirSync(OUT, { recursive: true });
  for (const r of reports) writeFileSync(join(OUT, r.entry.report), r.text);
  process.stdout.write(`api-report: wrote ${reports.length} reports to api/ (${reports.map((r) => `${r.entry.name} ${r.count}`).join(', ')})\n`);
}
