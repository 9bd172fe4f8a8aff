// `relent` and `relent/testing` in browsers and edge runtimes. Both entry points are
// bundled from the sources as a browser app would bundle them (vite 8, which bundles
// with rolldown, platform browser): the bundle must import no `node:` module and no
// Node builtin by its bare name. Then the bundle runs where only the web platform's
// globals exist: in a node:vm context given exactly those (no process, Buffer or
// setImmediate), and in headless Chromium (Debian's /usr/bin/chromium through
// playwright-core, as test/report/browser.test.ts drives it) against a node:http server
// on loopback: 503, 503, 200 → 200 after 3 calls; Retry-After honoured (on
// relent/testing's clock, in the page); an attempt timeout on the real clock.
import { builtinModules } from 'node:module';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createContext, runInContext } from 'node:vm';
import { chromium, type Browser } from 'playwright-core';
import { build, type Plugin, type Rollup } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const ENTRIES = { relent: join(ROOT, 'src/index.ts'), 'relent-testing': join(ROOT, 'src/testing/index.ts') };
const CHROMIUM = '/usr/bin/chromium';
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
const present = existsSync(CHROMIUM);
const inCi = process.env.CI === 'true';
const NODE_BUILTINS = new Set(builtinModules);

if (!present && !inCi) console.warn(`test/package/browser.test.ts: the Chromium part is skipped — ${CHROMIUM} is missing (apt-get install -y chromium)`);

/** Every import of a Node module the bundler is asked to resolve, with its importer. */
function nodeImports(seen: string[]): Plugin {
  return {
    name: 'relent:no-node-imports',
    enforce: 'pre',
    resolveId(id, importer) {
      if (id.startsWith('node:') || NODE_BUILTINS.has(id) || NODE_BUILTINS.has(id.split('/')[0]!))
        seen.push(`${id} (imported by ${importer?.replace(ROOT, '') ?? '?'})`);
      return null;
    },
  };
}

type Bundle = { code: string; nodeImports: string[] };

async function bundle(entry: string, format: 'es' | 'iife'): Promise<Bundle> {
  const seen: string[] = [];
  const out = (await build({
    configFile: false,
    logLevel: 'silent',
    root: ROOT,
    plugins: [nodeImports(seen)],
    build: {
      write: false,
      minify: true,
      lib: { entry, formats: [format], name: 'relent', fileName: 'bundle' },
    },
  })) as Rollup.RollupOutput | Rollup.RollupOutput[];
  const output = (Array.isArray(out) ? out[0]! : out).output;
  const chunk = output.find((o): o is Rollup.OutputChunk => o.type === 'chunk')!;
  return { code: chunk.code, nodeImports: seen };
}

let dir = '';
let page = ''; // the iife bundle of both entry points, as `relent`
const sizes: Record<string, number> = {};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'relent-browser-'));
  const both = join(dir, 'both.ts');
  writeFileSync(
    both,
    [
      `export { run, execute } from ${JSON.stringify(ENTRIES.relent)};`,
      `export { createTestClock, createSeededRandom } from ${JSON.stringify(ENTRIES['relent-testing'])};`,
    ].join('\n'),
  );
  page = (await bundle(both, 'iife')).code;
}, 60_000);

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  if (Object.keys(sizes).length > 0)
    console.log(
      `browser bundles (minified): ${Object.entries(sizes)
        .map(([k, v]) => `${k} ${(v / 1024).toFixed(1)} KB`)
        .join(', ')}`,
    );
});

describe('relent and relent/testing bundle for the browser', () => {
  it.each(Object.entries(ENTRIES))('%s imports no node: module and no Node builtin', async (name, entry) => {
    const b = await bundle(entry, 'es');
    sizes[name] = b.code.length;
    expect(b.nodeImports).toEqual([]);
    expect(b.code).not.toMatch(/["']node:/);
  });

  it('the check sees a node: import (relent/http has several)', async () => {
    const b = await bundle(join(ROOT, 'src/http/index.ts'), 'es');
    expect(b.nodeImports.some((i) => i.startsWith('node:'))).toBe(true);
  });

  it("run() from the bundle works with only the web platform's globals (no process, Buffer, setImmediate)", async () => {
    // What a browser page or a worker has (the JavaScript builtins come with the context).
    const web = {
      setTimeout,
      clearTimeout,
      queueMicrotask,
      MessageChannel,
      performance,
      console,
      crypto,
      URL,
      AbortController,
      AbortSignal,
      Event,
      EventTarget,
      DOMException,
      TextEncoder,
      TextDecoder,
      Headers,
      Response,
      Request,
    };
    const ctx = createContext({ ...web });
    runInContext(`${page}\nglobalThis.relent = relent;`, ctx);
    expect(runInContext('[typeof process, typeof Buffer, typeof setImmediate]', ctx)).toEqual(['undefined', 'undefined', 'undefined']);
    const relent = (
      ctx as {
        relent: {
          execute: (fn: (c: { attempt: number }) => Promise<unknown>, o: object) => Promise<{ reason: string; attempts: number; outcome: { value: unknown } }>;
        };
      }
    ).relent;
    const answers = [503, 503, 200];
    const r = await relent.execute(async ({ attempt }) => new Response(null, { status: answers[attempt - 1]! }), {
      method: 'GET',
      policy: { backoff: { kind: 'constant', delayMs: 1 }, attemptTimeoutMs: 1000 },
    });
    expect([r.reason, r.attempts, (r.outcome.value as Response).status]).toEqual(['return', 3, 200]);
  });
});

describe.skipIf(!present && !inCi)('run() from the bundle in headless Chromium, against a local node:http server', () => {
  let browser: Browser;
  let server: Server;
  let origin = '';
  const hits = new Map<string, number>();
  const plans: Record<string, (n: number) => { status: number; headers?: Record<string, string> } | 'hang'> = {
    '/flaky': (n) => ({ status: n < 3 ? 503 : 200 }),
    '/limited': (n) => (n === 1 ? { status: 429, headers: { 'retry-after': '1' } } : { status: 200 }),
    '/hang': () => 'hang',
  };

  beforeAll(async () => {
    server = createServer((req, res) => {
      const path = req.url ?? '/';
      if (path === '/') {
        res.writeHead(200, { 'content-type': 'text/html' });
        res.end('<!doctype html><meta charset="utf-8"><title>relent</title><script src="/relent.js"></script>');
        return;
      }
      if (path === '/relent.js') {
        res.writeHead(200, { 'content-type': 'text/javascript' });
        res.end(page);
        return;
      }
      if (path.startsWith('/hits/')) {
        res.writeHead(200, { 'content-type': 'application/json' }).end(String(hits.get(path.slice(5)) ?? 0));
        return;
      }
      const plan = plans[path];
      if (plan === undefined) {
        res.writeHead(404).end();
        return;
      }
      const n = (hits.get(path) ?? 0) + 1;
      hits.set(path, n);
      const step = plan(n);
      if (step === 'hang') return;
      res.writeHead(step.status, { 'content-type': 'text/plain', ...step.headers }).end(step.status === 200 ? 'ok' : 'no');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS, headless: true });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    server?.closeAllConnections();
    await new Promise<void>((r) => server?.close(() => r()));
  });

  async function open() {
    const p = await browser.newPage();
    const errors: string[] = [];
    p.on('pageerror', (e) => errors.push(String(e)));
    await p.goto(`${origin}/`);
    return { p, errors };
  }

  it("503, 503, 200 → 200 after 3 calls (relent's own clock: end-of-turn scheduler and timers in the page)", async () => {
    const { p, errors } = await open();
    const out = await p.evaluate(`(async () => {
      const events = [];
      const res = await relent.run(({ signal }) => fetch('/flaky', { signal }), { method: 'GET', onEvent: (e) => events.push(e) });
      return { status: res.status, seen: events.map((e) => e.type === 'attempt' ? e.status + ':' + e.decision : 'result:' + e.reason) };
    })()`);
    expect(out).toEqual({ status: 200, seen: ['503:retry', '503:retry', '200:return', 'result:return'] });
    expect(hits.get('/flaky')).toBe(3);
    expect(errors).toEqual([]);
    await p.close();
  });

  it("429 with Retry-After: 1 → the wait is the second asked (a pending timer of relent/testing's clock), then 200", async () => {
    const { p, errors } = await open();
    const out = (await p.evaluate(`(async () => {
      const clock = relent.createTestClock();
      const events = [];
      let hitsBefore = null;
      let pendingBefore = null;
      const res = await relent.run(({ signal }) => fetch('/limited', { signal }), {
        clock, random: relent.createSeededRandom(1), method: 'GET',
        onEvent: (e) => {
          if (e.type !== 'attempt') return;
          events.push(e);
          if (e.decision === 'retry') setTimeout(async () => {
            clock.advance(e.delayMs - 1);
            pendingBefore = clock.pending();
            hitsBefore = await (await fetch('/hits/limited')).json();
            clock.advance(1);
          }, 0);
        },
      });
      return { status: res.status, retryAfterMs: events[0].retryAfterMs, delayMs: events[0].delayMs, pendingBefore, hitsBefore, seen: events.map((e) => e.status + ':' + e.decision) };
    })()`)) as { status: number; retryAfterMs: number; delayMs: number; pendingBefore: number; hitsBefore: number; seen: string[] };
    expect(out.seen).toEqual(['429:retry', '200:return']);
    expect(out.status).toBe(200);
    expect(out.retryAfterMs).toBe(1000);
    expect(out.delayMs).toBeGreaterThanOrEqual(1000);
    expect(out.delayMs).toBeLessThanOrEqual(1100);
    // 1 ms short of the wait, the retry was still a pending timer and nothing more had been sent.
    expect(out.pendingBefore).toBeGreaterThanOrEqual(1);
    expect(out.hitsBefore).toBe(1);
    expect(hits.get('/limited')).toBe(2);
    expect(errors).toEqual([]);
    await p.close();
  });

  it('a GET that hangs: the attempt timeout fires in the page (the shared timer), the fetch is aborted, retried once', async () => {
    const { p, errors } = await open();
    const out = await p.evaluate(`(async () => {
      const r = await relent.execute(({ signal }) => fetch('/hang', { signal }), { method: 'GET', policy: { maxAttempts: 2, attemptTimeoutMs: 200, backoff: { kind: 'constant', delayMs: 1 } } });
      return { reason: r.reason, attempts: r.attempts, last: r.last.errorClass, code: r.outcome.error.code };
    })()`);
    expect(out).toEqual({ reason: 'max_attempts', attempts: 2, last: 'timeout', code: 'ERR_MAX_ATTEMPTS' });
    expect(hits.get('/hang')).toBe(2);
    expect(errors).toEqual([]);
    await p.close();
  });
});
