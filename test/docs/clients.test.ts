// docs/clients.md: every recipe (a ```js block whose first line is `// recipe: NAME`)
// runs as written, in a fresh process, against a real node:http server on loopback that
// answers 503 and then 200: the recipe must print 200 after two calls and nothing on
// stderr (no RELENT_CLIENT_RETRIES warning: the recipes turn the clients' own retries
// off). The file is written under test/artifacts/ (gitignored), inside the package, so
// `relent` resolves to this package's own exports (dist/: `npm run build` first) and
// axios, got, ky and undici to its node_modules.
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DOC = readFileSync(join(ROOT, 'docs/clients.md'), 'utf8');
const OUT = join(ROOT, 'test/artifacts/clients-doc');

const recipes = [...DOC.matchAll(/```js\n\/\/ recipe: ([^\n]+)\n([\s\S]*?)```/g)].map((m) => ({ name: m[1]!.trim(), code: m[2]! }));

let server: Server;
let port = 0;
let hits = 0;

beforeAll(async () => {
  mkdirSync(OUT, { recursive: true });
  server = createServer((req, res) => {
    req.resume();
    hits++;
    if (req.url !== '/items/42') {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(hits === 1 ? 503 : 200, { 'content-type': 'text/plain' }).end(hits === 1 ? 'busy' : 'ok');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

function runFile(file: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('docs/clients.md', () => {
  it('has one recipe per client: fetch, undici, axios, got, ky, node:http', () => {
    expect(recipes.map((r) => r.name)).toEqual(['fetch', 'undici', 'axios', 'got', 'ky', 'node:http']);
  });

  it.each(recipes)('the $name recipe runs as written: 503, then 200 after two calls', async ({ name, code }) => {
    hits = 0;
    const file = join(OUT, `${name.replace(/\W/g, '-')}.mjs`);
    expect(code).toContain('http://127.0.0.1:8080/items/42');
    writeFileSync(file, code.replaceAll('http://127.0.0.1:8080', `http://127.0.0.1:${port}`));
    const out = await runFile(file);
    expect(out.stderr).toBe('');
    expect(out.code).toBe(0);
    expect(out.stdout.trim()).toBe('200');
    expect(hits).toBe(2);
  });
});
