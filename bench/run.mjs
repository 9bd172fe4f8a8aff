// `npm run bench`: every benchmark table, in one run. Each module exports main().
import { readdirSync } from 'node:fs';

const quick = process.argv.includes('--quick');
const modules = readdirSync(new URL('.', import.meta.url)).filter((f) => f.endsWith('.mjs') && !['run.mjs', 'harness.mjs'].includes(f)).sort();
// Arguments naming a bench select it; the others go to the benches as sections
// (`npm run bench -- delivery throughput large`).
const args = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const only = args.filter((a) => modules.includes(`${a}.mjs`));
const sections = args.filter((a) => !modules.includes(`${a}.mjs`));
console.log(`relent benchmarks — node ${process.version}, ${new Date().toISOString()}${quick ? ' (quick)' : ''}`);
for (const f of modules) {
  const name = f.replace(/\.mjs$/, '');
  if (only.length > 0 && !only.includes(name)) continue;
  console.log(`\n=== ${name} ===`);
  const mod = await import(new URL(f, import.meta.url).href);
  await mod.main({ quick, only: sections });
}
