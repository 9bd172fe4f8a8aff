// `npm run bench`: every benchmark table, in one run. Each module exports main().
import { readdirSync } from 'node:fs';

const only = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const quick = process.argv.includes('--quick');
const modules = readdirSync(new URL('.', import.meta.url)).filter((f) => f.endsWith('.mjs') && !['run.mjs', 'harness.mjs'].includes(f)).sort();
console.log(`relent benchmarks — node ${process.version}, ${new Date().toISOString()}${quick ? ' (quick)' : ''}`);
for (const f of modules) {
  const name = f.replace(/\.mjs$/, '');
  if (only.length > 0 && !only.includes(name)) continue;
  console.log(`\n=== ${name} ===`);
  const mod = await import(new URL(f, import.meta.url).href);
  await mod.main({ quick });
}
