#!/usr/bin/env node
// Makes `npm start`, `npm test` and `npm run bench` work on a fresh clone:
// installs dependencies when node_modules is missing (npm ci, whose `prepare` also
// compiles), and compiles src/ to dist/ when dist/ is missing or older than any source
// file. Says what it does, and every 10 s while it does it when no terminal shows npm's
// own progress.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runWithProgress } from './run-with-progress.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

async function run(args, what) {
  const code = await runWithProgress(npm, args, { what, cwd: root });
  if (code !== 0) process.exit(code);
}

if (!existsSync(join(root, 'node_modules', 'typescript'))) {
  await run(['ci', '--no-audit', '--no-fund'], 'installing dependencies with npm ci (first run only: a minute or two)');
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
  await run(['run', 'build', '--silent'], 'compiling TypeScript (npm run build)');
}
