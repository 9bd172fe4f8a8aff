// Where the other runtimes CI installs are (scripts/runtimes.mjs: ~/.cache/relent/runtimes,
// or $RELENT_RUNTIMES_DIR). Tests that run code under Deno or Bun skip with a message when
// the runtime is not there; under CI (.ci/run installs them first) they must be.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
// @ts-expect-error: a plain .mjs module of the scripts, no declarations
import { RUNTIMES, runtimePackage, runtimesDir } from '../../scripts/runtimes.mjs';

/** The binary of Bun or Deno at the version CI uses, or null when it is not installed. */
export function runtimeBin(kind: 'bun' | 'deno'): string | null {
  const version = (RUNTIMES as Record<string, string>)[kind]!;
  const bin = join(runtimesDir() as string, `${kind}-${version}`, (runtimePackage(kind, version) as { bin: string }).bin);
  if (existsSync(bin)) return bin;
  if (process.env.CI) throw new Error(`${kind} ${version} is not installed at ${bin}; .ci/run installs it (node scripts/runtimes.mjs bin ${kind})`);
  console.warn(`skipping the ${kind} tests: ${kind} ${version} is not installed (node scripts/runtimes.mjs bin ${kind})`);
  return null;
}
