import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type * as Undici from 'undici';

let undiciModule: typeof Undici | null = null;

/**
 * undici, the npm package (relent's dependency), loaded on first use: `import 'relent'`
 * for run() alone should not pay for an HTTP stack (~160 ms of a ~215 ms import on the
 * 2-core machine). undici is CommonJS, so on Node and Deno this is the same module instance
 * an `import 'undici'` gives the caller. Under Bun the bare name `undici` is the runtime's
 * own partial copy (no `compose`, no interceptors, no `buildConnector`), so the package is
 * loaded by its resolved path there.
 */
export function undici(): typeof Undici {
  if (undiciModule) return undiciModule;
  const require = createRequire(import.meta.url);
  if (typeof (process.versions as { bun?: string }).bun === 'string') {
    const pkg = require.resolve('undici/package.json');
    const main = (require(pkg) as { main?: string }).main ?? 'index.js';
    undiciModule = require(join(dirname(pkg), main)) as typeof Undici;
  } else {
    undiciModule = require('undici') as typeof Undici;
  }
  return undiciModule;
}
