// The supported runtimes, written once (scripts/runtimes.mjs), agree with what package.json
// declares, what .ci/run runs and what the README's runtime table says; and the README's
// commands bring a supported Node on a machine whose own is older than the floor.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
// @ts-expect-error: plain .mjs modules of the scripts, no declarations
import { CI_PLAN, NODE_FLOOR, RUNTIMES, atLeast, runtimeTable, runtimesDir } from '../../scripts/runtimes.mjs';
// @ts-expect-error: see above
import { CHECKS } from '../../scripts/probe.mjs';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const read = (f: string): string => readFileSync(join(ROOT, f), 'utf8');
type Plan = { name: string; kind: string; major?: string; suite: string; probe: boolean };
const PLAN = CI_PLAN as Plan[];
const argOf = (p: Plan): string => (p.major ? `${p.kind} ${p.major}` : p.kind);

describe('supported runtimes', () => {
  it('package.json declares the floor; every supported Node major is at or above it', () => {
    const pkg = JSON.parse(read('package.json')) as { engines: { node: string } };
    expect(pkg.engines.node).toBe(`>=${NODE_FLOOR}`);
    for (const v of Object.values(RUNTIMES.node as Record<string, string>)) expect(atLeast(v, NODE_FLOOR), v).toBe(true);
    expect(PLAN.map((p) => p.name).sort()).toEqual(['Bun', 'Deno', 'Node 22', 'Node 24', 'Node 26']);
  });

  it('.ci/run probes every runtime of the plan and runs its part of the suite (the whole one as `npm test`)', () => {
    const ci = read('.ci/run');
    const loop = (what: string): string[] => {
      const m = new RegExp(`for rt in ((?:"[^"]+" ?)+); do\\n(?:\\s*#.*\\n)*\\s*check "[^"]*" node scripts/runtimes\\.mjs ${what} \\$rt`).exec(ci);
      expect(m, `a loop running scripts/runtimes.mjs ${what} in .ci/run`).not.toBeNull();
      return [...m![1]!.matchAll(/"([^"]+)"/g)].map((x) => x[1]!);
    };
    expect(loop('probe').sort()).toEqual(
      PLAN.filter((p) => p.probe)
        .map(argOf)
        .sort(),
    );
    expect(loop('suite').sort()).toEqual(
      PLAN.filter((p) => p.suite !== 'full')
        .map(argOf)
        .sort(),
    );
    const full = PLAN.filter((p) => p.suite === 'full');
    expect(full.map((p) => p.name)).toEqual(['Node 24']);
    expect(ci).toMatch(/\n[^#\n]*npm test\n/);
  });

  it("the README's runtime table is the one the plan and the probe make", () => {
    const readme = read('README.md');
    const section = readme.slice(readme.indexOf('\n## Runtimes'), readme.indexOf('\n## ', readme.indexOf('\n## Runtimes') + 5));
    expect(section.length).toBeGreaterThan(100);
    expect(section).toContain(runtimeTable(CHECKS));
  });

  // The machine's own Node (Debian's, outside the PATH entries npm and the runner put first).
  const older = ['/usr/bin/node', '/usr/local/bin/node'].find((p) => existsSync(p));
  const node24 = join(runtimesDir() as string, `node-${RUNTIMES.node['24']}`, 'bin', 'node');
  it.skipIf(!older || !existsSync(node24))(
    'on a Node older than the floor, scripts/ensure-ready.mjs runs the command under Node 24 and says so in one line',
    async () => {
      const mine = await new Promise<string>((resolve, reject) =>
        execFile(older!, ['-p', 'process.versions.node'], (e, out) => (e ? reject(e) : resolve(out.trim()))),
      );
      if (atLeast(mine, NODE_FLOOR)) return; // this machine's Node is new enough: nothing to bring
      const out = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) => {
        execFile(
          older!,
          ['scripts/ensure-ready.mjs', 'node', '-p', 'process.version + " " + process.env.npm_config_nodedir'],
          { cwd: ROOT, timeout: 60_000 },
          (e, stdout, stderr) => (e ? reject(new Error(`${e.message}\n${stderr}`)) : resolve({ stdout, stderr })),
        );
      });
      expect(out.stdout.trim()).toBe(`v${RUNTIMES.node['24']} ${join(runtimesDir() as string, `node-${RUNTIMES.node['24']}`)}`);
      expect(out.stderr.split('\n').filter((l) => l.startsWith('relent: this machine'))).toEqual([
        `relent: this machine's Node ${mine} is older than relent's floor ${NODE_FLOOR}: using Node ${RUNTIMES.node['24']} from the npm registry (kept in ${runtimesDir()})`,
      ]);
    },
  );
});
