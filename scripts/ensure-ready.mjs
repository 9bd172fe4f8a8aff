#!/usr/bin/env node
// Makes `npm start`, `npm test` and `npm run bench` work on a fresh clone:
//   node scripts/ensure-ready.mjs [--node 22|24|26] [command args…]
// 1. Picks the Node: the one running this script when it is at least relent's floor
//    (22.19), else — or when --node asks for another major — Node 24 (or the asked one)
//    from the npm registry (scripts/runtimes.mjs; fetched once, kept outside the repo),
//    put first on PATH for everything below, with npm_config_nodedir at its headers.
// 2. Installs dependencies when node_modules is missing (npm ci, under that Node; its
//    `prepare` also compiles), and compiles src/ to dist/ when dist/ is missing or older
//    than any source file.
// 3. Runs the command, if any (`node` meaning the Node picked), and exits with its status.
// Says what it does, and every 10 s while it does it when no terminal shows npm's own
// progress. Written for every Node from 18 on: it is what runs first on an older machine.
import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, dirname, delimiter } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runWithProgress } from './run-with-progress.mjs';
import { NODE_DEFAULT, NODE_FLOOR, RUNTIMES, atLeast, ensureRuntime, runtimesDir } from './runtimes.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

let args = process.argv.slice(2);
let asked;
if (args[0] === '--node') {
  asked = args[1];
  args = args.slice(2);
}
if (args[0] === '--') args = args.slice(1);

// 1. The Node.
const mine = process.versions.node;
let nodeBin = process.execPath;
const env = { ...process.env };
const wanted = asked ?? (atLeast(mine, NODE_FLOOR) ? undefined : NODE_DEFAULT);
if (wanted !== undefined && mine.split('.')[0] !== String(wanted)) {
  if (!RUNTIMES.node[wanted]) {
    process.stderr.write(`relent: --node ${wanted}: supported are ${Object.keys(RUNTIMES.node).join(', ')}\n`);
    process.exit(2);
  }
  const why = asked ? `Node ${wanted} asked for` : `this machine's Node ${mine} is older than relent's floor ${NODE_FLOOR}`;
  process.stderr.write(`relent: ${why}: using Node ${RUNTIMES.node[wanted]} from the npm registry (kept in ${runtimesDir()})\n`);
  const rt = ensureRuntime('node', wanted);
  nodeBin = rt.bin;
  env.PATH = `${dirname(rt.bin)}${delimiter}${env.PATH ?? ''}`;
  env.npm_config_nodedir = rt.dir;
  // npm, started from a Node 20 `npm test`, says which node runs scripts in these; keep them true.
  env.npm_node_execpath = rt.bin;
  env.NODE = rt.bin;
}

async function run(cmdArgs, what) {
  const code = await runWithProgress(npm, cmdArgs, { what, cwd: root, env });
  if (code !== 0) process.exit(code);
}

// 2. Dependencies and dist/.
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

// 3. The command.
if (args.length > 0) {
  const [cmd, ...rest] = args;
  env.PATH = `${join(root, 'node_modules', '.bin')}${delimiter}${env.PATH ?? ''}`;
  const child = spawn(cmd === 'node' ? nodeBin : cmd, rest, { stdio: 'inherit', env });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => child.kill(sig));
  child.on('error', (e) => {
    process.stderr.write(`relent: could not start ${cmd}: ${e.message}\n`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => process.exit(code ?? 128 + (constants.signals[signal] ?? 0)));
}
