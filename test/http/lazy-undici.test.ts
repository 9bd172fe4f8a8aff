import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

// A fresh process: whether undici is loaded is a property of the module graph, which a
// test runner that already imported undici for other files would hide.
const probe = `
import { createRequire } from 'node:module';
const require = createRequire(import.meta.url);
const cache = require('node:module')._cache;
const undiciLoaded = () => Object.keys(cache).some((k) => k.includes('/node_modules/undici/'));
const root = await import('./dist/index.js');
const http = await import('./dist/http/index.js');
const out = { rootHasNoClient: !('createClient' in root), afterImport: undiciLoaded() };
const client = http.createClient();
out.afterCreateClient = undiciLoaded();
await client.close();
const { Agent } = await import('undici');
out.sameAgent = Agent === require('undici').Agent;
console.log(JSON.stringify(out));
`;

describe('import "relent" and "relent/http" do not load the HTTP stack', () => {
  it('undici is loaded by the first createClient(), as the same module the caller imports', async () => {
    const out = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, ['--input-type=module', '-e', probe], { cwd: root }, (err, stdout, stderr) =>
        err ? reject(new Error(stderr || String(err))) : resolve(stdout),
      );
    });
    expect(JSON.parse(out)).toEqual({ rootHasNoClient: true, afterImport: false, afterCreateClient: true, sameAgent: true });
  });
});
