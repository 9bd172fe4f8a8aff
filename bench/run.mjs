// `npm run bench`: every benchmark table, in one run. Each module exports main().
// The figures are taken on Node 24 (the README's and docs' tables say so): started on
// another Node, this re-runs itself under Node 24 from the npm registry (scripts/runtimes.mjs,
// fetched once); `--any-node` stays on the Node it was started with.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureRuntime } from '../scripts/runtimes.mjs';
import { PEERS, peerVersion } from './harness.mjs';

if (process.versions.node.split('.')[0] !== '24' && !process.argv.includes('--any-node')) {
  const rt = ensureRuntime('node', '24');
  process.stderr.write(`relent benchmarks run on Node 24: re-running under Node ${rt.version} (--any-node to stay on ${process.version})\n`);
  const r = spawnSync(rt.bin, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
    stdio: 'inherit',
    env: { ...process.env, PATH: `${dirname(rt.bin)}:${process.env.PATH ?? ''}` },
  });
  process.exit(r.status ?? 1);
}

const quick = process.argv.includes('--quick');
const modules = readdirSync(new URL('.', import.meta.url))
  .filter((f) => f.endsWith('.mjs') && !['run.mjs', 'harness.mjs'].includes(f))
  .sort();
// Arguments naming a bench select it; the others go to the benches as sections
// (`npm run bench -- delivery throughput large`).
const args = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const only = args.filter((a) => modules.includes(`${a}.mjs`));
const sections = args.filter((a) => !modules.includes(`${a}.mjs`));
console.log(`relent benchmarks — node ${process.version}, ${new Date().toISOString()}${quick ? ' (quick)' : ''}`);
console.log(`peers: ${PEERS.map((p) => `${p} ${peerVersion(p)}`).join(', ')}`);
for (const f of modules) {
  const name = f.replace(/\.mjs$/, '');
  if (only.length > 0 && !only.includes(name)) continue;
  console.log(`\n=== ${name} ===`);
  const mod = await import(new URL(f, import.meta.url).href);
  await mod.main({ quick, only: sections });
}
