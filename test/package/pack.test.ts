// The package as a user installs it. A copy of the project's sources (no dist/) is
// packed with `npm pack`, whose `prepare` script must build dist/; the tarball is
// installed into an empty folder like any dependency; then every entry point of
// package.json's `exports` is imported from there, a TypeScript file is type-checked
// against the installed declarations (and a wrong one must fail), every source map
// must name files that ship, the README's CommonJS example runs, and the `relent`
// command works. The copy keeps the worktree's dist/ untouched while other tests use it.
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  name: string;
  version: string;
  files: string[];
  exports: Record<string, unknown>;
  scripts: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, unknown>;
};
const TSC = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const NPM_FLAGS = ['--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error'];

function sh(cmd: string, args: string[], cwd: string, timeout = 240_000): SpawnSyncReturns<string> {
  // npm_* variables of the outer `npm test` would leak into the nested npm (its prefix, its config).
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith('npm_')));
  return spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout, env: { ...env, NO_UPDATE_NOTIFIER: '1' } });
}

function ok(r: SpawnSyncReturns<string>, what: string): string {
  if (r.status !== 0) throw new Error(`${what} exited ${r.status}${r.signal ? ` (${r.signal})` : ''}\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)]));
}

describe('the packed package, installed elsewhere', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'relent-pack-'));
  const src = join(tmp, 'project');
  const app = join(tmp, 'app');
  const installed = join(app, 'node_modules', PKG.name);
  let files: string[] = [];

  beforeAll(() => {
    // A fresh clone, as far as packing goes: what package.json ships and what the build reads, no dist/.
    mkdirSync(src);
    for (const f of [
      ...PKG.files.filter((x) => x !== 'dist'),
      'package.json',
      'package-lock.json',
      'tsconfig.json',
      'tsconfig.build.json',
      'README.md',
      'LICENSE',
    ]) {
      cpSync(join(ROOT, f), join(src, f), { recursive: true });
    }
    symlinkSync(join(ROOT, 'node_modules'), join(src, 'node_modules'), 'dir');
    expect(existsSync(join(src, 'dist'))).toBe(false);
    const packed = JSON.parse(ok(sh('npm', ['pack', '--json', '--pack-destination', tmp, ...NPM_FLAGS], src), 'npm pack')) as {
      filename: string;
      files: { path: string }[];
    }[];
    files = packed[0]!.files.map((f) => f.path);
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'module' }));
    ok(sh('npm', ['install', join(tmp, packed[0]!.filename), ...NPM_FLAGS], app), 'npm install of the tarball');
  }, 300_000);

  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('ships dist/ (built by prepare), the sources its maps name, LICENSE and README; no tests', () => {
    expect(PKG.scripts.prepare).toBeDefined();
    for (const f of ['dist/index.js', 'dist/index.d.ts', 'dist/cli/main.js', 'src/index.ts', 'bin/relent', 'LICENSE', 'README.md', 'package.json'])
      expect(files, f).toContain(f);
    expect(files.filter((f) => /^(test|bench|scripts|\.ci)\//.test(f))).toEqual([]);
    expect(readFileSync(join(installed, 'LICENSE'), 'utf8')).toMatch(/^MIT License/);
  });

  it('imports every entry point of package.json from the installed copy (an optional peer only where it is used)', () => {
    const entries = Object.keys(PKG.exports)
      .filter((k) => k !== './package.json')
      .map((k) => (k === '.' ? PKG.name : `${PKG.name}/${k.slice(2)}`));
    expect(entries.length).toBeGreaterThanOrEqual(9);
    const script = `for (const e of ${JSON.stringify(entries)}) {
      try { const m = await import(e); console.log(e, Object.keys(m).length === 0 ? 'empty' : 'ok'); }
      catch (err) { console.log(e, err.code === 'ERR_MODULE_NOT_FOUND' ? 'missing:' + /package '([^']+)'/.exec(err.message)?.[1] : 'error:' + err.message); }
    }`;
    const importAll = (): Map<string, string> =>
      new Map(
        ok(sh(process.execPath, ['--input-type=module', '-e', script], app), 'importing the entry points')
          .trim()
          .split('\n')
          .map((l) => l.split(' ') as [string, string]),
      );
    // Without the optional peer dependencies: an entry point may only miss one of them.
    const first = importAll();
    expect([...first.keys()]).toEqual(entries);
    const optional = Object.keys(PKG.peerDependenciesMeta ?? {});
    const peers = new Set<string>();
    for (const [e, r] of first) {
      if (r === 'ok') continue;
      const peer = r.startsWith('missing:') ? r.slice('missing:'.length) : '';
      expect(optional, `${e}: ${r}`).toContain(peer);
      peers.add(peer);
    }
    expect(first.get(PKG.name)).toBe('ok');
    expect(first.get(`${PKG.name}/http`)).toBe('ok');
    // With them (as a user of that entry point installs them), everything imports.
    if (peers.size > 0)
      ok(sh('npm', ['install', ...[...peers].map((p) => `${p}@${PKG.peerDependencies![p]}`), ...NPM_FLAGS], app), `npm install ${[...peers].join(' ')}`);
    expect([...importAll().values()].every((r) => r === 'ok')).toBe(true);
    // The acceptance line, as written.
    ok(
      sh(process.execPath, ['-e', `import('${PKG.name}/http').then((m) => { if (typeof m.createClient !== 'function') process.exit(1); })`], app),
      'node -e "import(\'relent/http\')"',
    );
  }, 120_000);

  it('type-checks a file against the installed declarations, and rejects a wrong one', () => {
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          types: ['node'],
          typeRoots: [join(ROOT, 'node_modules', '@types')],
        },
        files: ['check.ts'],
      }),
    );
    writeFileSync(
      join(app, 'check.ts'),
      [
        "import { run, PRESETS, presetPolicy, type PolicySpec, type RelentEvent } from 'relent';",
        "import { createClient, type RelentClient } from 'relent/http';",
        "import { createTestClock } from 'relent/testing';",
        "import { analyzeEventText } from 'relent/report';",
        "const policy: PolicySpec = { preset: 'http-429', deadlineMs: 2000 };",
        'const names: string[] = [...PRESETS.keys()];',
        "const attempts: number = presetPolicy('http-429').spec.maxAttempts;",
        "const client: RelentClient = createClient({ policy: 'http-429' });",
        'const clock = createTestClock();',
        'const events: RelentEvent[] = [];',
        'const result: Promise<number> = run(async () => 42, { policy, clock, onEvent: (e) => events.push(e) }).then((r) => r + attempts + names.length);',
        "const lines: number = analyzeEventText('', {}).lines;",
        'export { client, result, lines };',
        '',
      ].join('\n'),
    );
    const good = sh(process.execPath, [TSC, '-p', join(app, 'tsconfig.json')], app);
    expect(good.stdout + good.stderr).toBe('');
    expect(good.status).toBe(0);
    // The same with a type error: the declarations are really read (not `any`).
    writeFileSync(join(app, 'check.ts'), "import { createClient } from 'relent/http';\nconst n: number = createClient({});\nexport { n };\n");
    const bad = sh(process.execPath, [TSC, '-p', join(app, 'tsconfig.json')], app);
    expect(bad.status).not.toBe(0);
    expect(bad.stdout).toMatch(/check\.ts\(2,7\): error TS2322/);
  }, 120_000);

  it('every source map names files that ship', () => {
    const maps = walk(join(installed, 'dist')).filter((f) => f.endsWith('.js.map'));
    expect(maps.length).toBeGreaterThan(50);
    const missing: string[] = [];
    for (const map of maps) {
      const m = JSON.parse(readFileSync(map, 'utf8')) as { sources: string[]; sourceRoot?: string };
      for (const s of m.sources) {
        const file = resolve(dirname(map), m.sourceRoot ?? '', s);
        if (!existsSync(file)) missing.push(`${map.slice(installed.length)} → ${s}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it("the README's CommonJS example runs (await import from a .cjs file)", async () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const code = /```js\n(\/\/ example\.cjs\n[\s\S]*?)```/.exec(readme)?.[1];
    expect(code, 'README: a ```js block starting with // example.cjs').toBeDefined();
    const server = createServer((_req, res) => res.end('ok'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    writeFileSync(join(app, 'example.cjs'), code!.replace('https://api.example.com', `http://127.0.0.1:${port}`));
    const { spawn } = await import('node:child_process');
    const out = await new Promise<{ code: number | null; stdout: string; stderr: string }>((done) => {
      const child = spawn(process.execPath, ['example.cjs'], { cwd: app, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.on('close', (c) => done({ code: c, stdout, stderr }));
    });
    server.close();
    expect(out.stderr).toBe('');
    expect(out.stdout).toBe('200\n');
    expect(out.code).toBe(0);
    // And require() is refused with Node's own message, as the README says.
    const req = sh(process.execPath, ['-e', `require('${PKG.name}')`], app);
    expect(req.status).not.toBe(0);
  });

  it('the relent command of the installed package runs', () => {
    const r = sh(join(app, 'node_modules', '.bin', 'relent'), ['presets', 'http-429', '--json'], app);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect((JSON.parse(r.stdout) as { presets: { name: string }[] }).presets.map((p) => p.name)).toEqual(['http-429']);
  });
});
