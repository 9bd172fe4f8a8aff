#!/usr/bin/env node
// Makes `npm start`, `npm test` and `npm run bench` work on a fresh clone:
// installs dependencies when node_modules is missing, and compiles src/ to dist/
// when dist/ is missing or older than any source file. Prints what it does.
import { execSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const run = (cmd) => execSync(cmd, { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });

if (!existsSync(join(root, 'node_modules', 'typescript'))) {
  process.stderr.write('relent: installing dependencies (npm ci)…\n');
  run('npm ci --no-audit --no-fund');
}

function newest(dir) {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    latest = Math.max(latest, entry.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return latest;
}

const stamp = join(root, 'dist', 'index.js');
const srcTime = Math.max(newest(join(root, 'src')), statSync(join(root, 'tsconfig.build.json')).mtimeMs);
if (!existsSync(stamp) || statSync(stamp).mtimeMs < srcTime) {
  process.stderr.write('relent: compiling TypeScript (npm run build)…\n');
  run('npm run build --silent');
}
