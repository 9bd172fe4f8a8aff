#!/usr/bin/env node
// The runtimes relent supports and CI runs, in one place, and how to bring one onto this
// machine from the npm registry (Node is `node-<os>-<cpu>`: its binary plus the headers
// native addons build against; Bun and Deno are their platform packages). They are kept
// outside the repository, under $RELENT_RUNTIMES_DIR or ~/.cache/relent/runtimes, one
// folder per version, so `npm ci` (which empties node_modules) keeps them.
//
//   node scripts/runtimes.mjs bin node 24     installs Node 24 if missing, prints its binary
//   node scripts/runtimes.mjs bin bun|deno    the same for Bun or Deno
//   node scripts/runtimes.mjs list            the supported versions
//
// Written for every Node from 18 on: it is what runs first on an older machine.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, chmodSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Exact versions, so every machine and CI run the same ones. Update here only. */
export const RUNTIMES = Object.freeze({
  node: Object.freeze({ 22: '22.23.5', 24: '24.22.3', 26: '26.12.1' }),
  bun: '1.4.5',
  deno: '2.9.6',
});

/** The oldest Node relent runs on: undici 8 needs 22.19. */
export const NODE_FLOOR = '22.19.0';

/** The Node `npm start`, `npm test` and `npm run bench` bring when the machine's is older than the floor. */
export const NODE_DEFAULT = '24';

export function runtimesDir() {
  return process.env.RELENT_RUNTIMES_DIR || join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'relent', 'runtimes');
}

/** `a` ≥ `b`, both "x.y.z" (a leading v allowed). */
export function atLeast(a, b) {
  const pa = a.replace(/^v/, '').split('.').map(Number);
  const pb = b.replace(/^v/, '').split('.').map(Number);
  for (let i = 0; i < 3; i++) if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) > (pb[i] ?? 0);
  return true;
}

function cpu(names) {
  const name = names[process.arch];
  if (!name) throw new Error(`relent: no ${Object.keys(names).join('/')} build for this processor (${process.arch}); install the runtime yourself`);
  return name;
}

/** The registry package of a runtime for this machine, and where its binary sits inside it. */
export function runtimePackage(kind, version) {
  if (process.platform !== 'linux' && process.platform !== 'darwin') {
    throw new Error(`relent: fetching ${kind} from the npm registry is set up for Linux and macOS only (this is ${process.platform}); install Node ${NODE_FLOOR} or later yourself`);
  }
  const os = process.platform;
  if (kind === 'node') return { spec: `node-${os}-${cpu({ x64: 'x64', arm64: 'arm64' })}@${version}`, bin: 'bin/node' };
  if (kind === 'bun') return { spec: `@oven/bun-${os}-${cpu({ x64: 'x64', arm64: 'aarch64' })}@${version}`, bin: 'bin/bun' };
  if (kind === 'deno') {
    const target = os === 'linux' ? `linux-${cpu({ x64: 'x64', arm64: 'arm64' })}-glibc` : `darwin-${cpu({ x64: 'x64', arm64: 'arm64' })}`;
    return { spec: `@deno/${target}@${version}`, bin: 'deno' };
  }
  throw new Error(`relent: unknown runtime ${kind}`);
}

/**
 * The folder of a runtime's package (for Node: bin/node and include/node, what
 * `npm_config_nodedir` wants), fetched with `npm pack` and unpacked the first time.
 * @param {'node' | 'bun' | 'deno'} kind
 * @param {string} [major] for Node: 22, 24 or 26
 * @param {(line: string) => void} [say]
 */
export function ensureRuntime(kind, major = NODE_DEFAULT, say = (l) => process.stderr.write(`${l}\n`)) {
  const version = kind === 'node' ? RUNTIMES.node[major] : RUNTIMES[kind];
  if (!version) throw new Error(`relent: no supported ${kind} ${major} (supported: ${JSON.stringify(RUNTIMES)})`);
  const pkg = runtimePackage(kind, version);
  const root = runtimesDir();
  const dir = join(root, `${kind}-${version}`);
  const bin = join(dir, pkg.bin);
  if (existsSync(bin)) return { kind, version, dir, bin };
  mkdirSync(root, { recursive: true });
  const started = Date.now();
  say(`relent: fetching ${kind} ${version} from the npm registry (${pkg.spec}, once, into ${dir})…`);
  const tmp = mkdtempSync(join(root, `.${kind}-${version}-`));
  try {
    const out = execFileSync(npmCommand(), ['pack', pkg.spec, '--pack-destination', tmp, '--silent', '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
    const file = JSON.parse(out)[0].filename;
    const unpacked = join(tmp, 'unpacked');
    mkdirSync(unpacked);
    execFileSync('tar', ['-xzf', join(tmp, file), '-C', unpacked, '--strip-components=1'], { stdio: 'inherit' });
    chmodSync(join(unpacked, pkg.bin), 0o755);
    try {
      renameSync(unpacked, dir);
    } catch (e) {
      if (!existsSync(bin)) throw e; // another process got there first
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  say(`relent: ${kind} ${version} ready in ${Math.round((Date.now() - started) / 1000)} s`);
  return { kind, version, dir, bin };
}

function npmCommand() {
  return process.platform === 'win32' ? 'npm.cmd' : 'npm';
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const [cmd, kind, major] = process.argv.slice(2);
  if (cmd === 'bin' && kind) console.log(ensureRuntime(kind, major).bin);
  else if (cmd === 'dir' && kind) console.log(ensureRuntime(kind, major).dir);
  else if (cmd === 'list') console.log(JSON.stringify(RUNTIMES));
  else {
    console.error('usage: node scripts/runtimes.mjs bin|dir node 22|24|26 | bin|dir bun | bin|dir deno | list');
    process.exit(2);
  }
}
