import { describe, expect, it } from 'vitest';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { POLICY_DEFAULTS } from '../src/core/policy.js';
import { dropPrefix, REDIS_URL, redisEnabled, uniquePrefix } from './fleet/support.js';

const redisOn = await redisEnabled();
const README = readFileSync(fileURLToPath(new URL('../README.md', import.meta.url)), 'utf8');
const DIST = pathToFileURL(fileURLToPath(new URL('../dist/index.js', import.meta.url))).href;

describe('README', () => {
  it('the library example runs as written against a real server (503, then 200)', async () => {
    const section = README.slice(README.indexOf('## In your code'));
    const code = /```ts\n([\s\S]*?)```/.exec(section)![1]!;
    let hits = 0;
    const server = createServer((req, res) => {
      hits++;
      expect(req.headers['x-request-id']).toMatch(/\/attempt-\d$/);
      res.statusCode = hits === 1 ? 503 : 200;
      res.end(hits === 1 ? 'busy' : 'ok');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const dir = mkdtempSync(join(tmpdir(), 'relent-readme-'));
    const file = join(dir, 'example.mjs');
    writeFileSync(file, code.replace(`from 'relent'`, `from '${DIST}'`).replace('http://127.0.0.1:8080', `http://127.0.0.1:${port}`));
    const out = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.on('close', (c) => resolve({ code: c, stdout, stderr }));
    });
    server.close();
    expect(out.stderr).toBe('');
    expect(out.code).toBe(0);
    const lines = out.stdout.trim().split('\n');
    expect(lines.at(-1)).toBe('200');
    const events = lines.slice(0, -1).map((l) => JSON.parse(l));
    expect(events.map((e) => (e.type === 'attempt' ? `${e.status}:${e.decision}` : `result:${e.reason}`))).toEqual([
      '503:retry',
      '200:return',
      'result:return',
    ]);
    expect(hits).toBe(2);
  });

  it("the first working retry is within the README's first 40 lines", () => {
    const lines = README.split('\n');
    const heading = lines.indexOf('## In your code');
    const open = lines.indexOf('```ts', heading);
    const close = lines.indexOf('```', open + 1);
    expect(heading).toBeGreaterThan(0);
    expect(lines.slice(open, close).join('\n')).toContain('await run(');
    expect(close + 1).toBeLessThanOrEqual(40);
  });

  it.skipIf(!redisOn)('the fleet example runs as written against a real server and the shared Redis', async () => {
    const section = README.slice(README.indexOf('## A fleet of processes'));
    const code = /```js\n([\s\S]*?)```/.exec(section)![1]!;
    const server = createServer((_req, res) => res.end('ok'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const prefix = uniquePrefix('readme');
    const dir = mkdtempSync(join(tmpdir(), 'relent-readme-'));
    const file = join(dir, 'fleet.mjs');
    const dist = (entry: string) => pathToFileURL(fileURLToPath(new URL(`../dist/${entry}/index.js`, import.meta.url))).href;
    writeFileSync(
      file,
      code
        .replace(`from 'relent/http'`, `from '${dist('http')}'`)
        .replace(`from 'relent/fleet'`, `from '${dist('fleet')}'`)
        .replace('http://127.0.0.1:8080', `http://127.0.0.1:${port}`)
        .replace('redis://127.0.0.1:6379', REDIS_URL)
        .replace(`'relent:prod:'`, `'${prefix}'`),
    );
    const out = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.on('close', (c) => resolve({ code: c, stdout, stderr }));
    });
    server.close();
    try {
      expect(out.stderr).toBe('');
      expect(out.code).toBe(0);
      expect(out.stdout.trim()).toBe('200');
      // It joined the fleet: close() handed in the budget's deposits and the breaker's counts.
      const r = new Redis(REDIS_URL);
      try {
        expect((await r.keys(`${prefix}*`)).sort()).toEqual([
          `${prefix}{http://127.0.0.1:${port}}:budget`,
          `${prefix}{http://127.0.0.1:${port}}:members`,
          `${prefix}{http://127.0.0.1:${port}}:window`,
        ]);
      } finally {
        r.disconnect();
      }
    } finally {
      await dropPrefix(prefix);
    }
  });

  it('the defaults table matches POLICY_DEFAULTS', () => {
    const row = (name: string) => new RegExp(`\\| \`${name.replace('.', '\\.')}\` \\| ([^|]+) \\|`).exec(README)?.[1]?.trim();
    expect(row('maxAttempts')).toMatch(new RegExp(`^${POLICY_DEFAULTS.maxAttempts}\\b`));
    expect(row('deadlineMs')).toBe(String(POLICY_DEFAULTS.deadlineMs));
    expect(row('attemptTimeoutMs')).toMatch(/^null/);
    expect(POLICY_DEFAULTS.attemptTimeoutMs).toBeNull();
    const b = POLICY_DEFAULTS.backoff as { kind: string; baseMs: number; capMs: number; multiplier: number };
    expect(row('backoff')).toBe(`full jitter, base ${b.baseMs} ms, cap ${b.capMs} ms, ×${b.multiplier}`);
    expect(b.kind).toBe('full-jitter');
    expect(row('retryOn.status')).toBe(POLICY_DEFAULTS.retryOn.status.join(', '));
    expect(row('retryOn.statusWithWait')).toMatch(new RegExp(`^${POLICY_DEFAULTS.retryOn.statusWithWait.join(', ')} \\(`));
    expect(row('retryAfter.maxMs')).toMatch(new RegExp(`^${POLICY_DEFAULTS.retryAfter.maxMs}\\b`));
    const budget = POLICY_DEFAULTS.budget as { ratio: number; minPerSecond: number; maxTokens: number; deposit: string; refund: boolean };
    expect(row('budget')).toBe(
      `ratio ${budget.ratio}, minPerSecond ${budget.minPerSecond}, maxTokens ${budget.maxTokens}, deposit "${budget.deposit}", refund ${budget.refund}`,
    );
    expect(row('budgetExhausted')).toBe(`"${POLICY_DEFAULTS.budgetExhausted}"`);
  });
});
