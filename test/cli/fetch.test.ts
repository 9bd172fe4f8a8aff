// `relent fetch` end to end (main() with a captured Io) against real loopback servers.
import { describe, it, expect, afterEach } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { main } from '../../src/cli/main.js';
import type { Io } from '../../src/cli/args.js';
import { closedPort, startServer, type TestServer } from '../http/helpers.js';

let servers: TestServer[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
async function server(...args: Parameters<typeof startServer>): Promise<TestServer> {
  const s = await startServer(...args);
  servers.push(s);
  return s;
}
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'relent-cli-'));
  dirs.push(d);
  return d;
}
async function run(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const io: Io = { out: (t) => (out += t), err: (t) => (err += t) };
  const code = await main(['fetch', ...argv], io);
  return { code, out, err };
}
const lines = (file: string): Record<string, unknown>[] =>
  readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe('relent fetch', () => {
  it('prints the body, writes the events as JSONL (attempt lines, then one result line) and exits 0', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n === 1 ? 503 : 200);
      res.end(n === 1 ? 'busy' : 'hello\n');
    });
    const events = join(tmp(), 'events.jsonl');
    const r = await run(`${s.origin}/x?token=t`, '--policy', '{"backoff":{"kind":"constant","delayMs":5}}', '--events', events);
    expect(r.code).toBe(0);
    expect(r.out).toBe('hello\n');
    expect(r.err).toBe('');
    const ev = lines(events);
    expect(ev.map((e) => e.type)).toEqual(['attempt', 'attempt', 'result']);
    expect(Object.keys(ev[0]!)).toEqual([
      'type',
      'operationId',
      'requestId',
      'attempt',
      'method',
      'endpoint',
      'status',
      'errorClass',
      'elapsedMs',
      'remainingMs',
      'decision',
      'delayMs',
      'retryAfterMs',
      'retryAfterValid',
      'ts',
    ]);
    expect(ev[2]).toMatchObject({ type: 'result', status: 200, errorClass: null, reason: 'return', attempts: 2 });
    // `ts`: wall-clock epoch ms, in order, the result last.
    const ts = ev.map((e) => e.ts as number);
    expect(ts.every((t) => Number.isInteger(t) && Math.abs(t - Date.now()) < 60_000)).toBe(true);
    expect([...ts].sort((a, b) => a - b)).toEqual(ts);
    expect(ev[0]!.endpoint).toBe(`${s.origin}/x`);
  });

  it('fetch --events, then report --html: the load-vs-retries chart has a time axis in milliseconds (from `ts`)', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n <= 2 ? 503 : 200);
      res.end('x');
    });
    const dir = tmp();
    const events = join(dir, 'e.jsonl');
    const html = join(dir, 'r.html');
    expect((await run(s.url, '--policy', '{"backoff":{"kind":"constant","delayMs":30}}', '--events', events)).code).toBe(0);
    let out = '';
    const io: Io = { out: (t) => (out += t), err: () => {} };
    expect(await main(['report', events, '--html', html], io)).toBe(0);
    expect(out).toMatch(/by time \(the events' "ts" field\), buckets of \d+ ms/);
    const page = readFileSync(html, 'utf8');
    expect(page).toContain('By time (the events&#39; &quot;ts&quot; field)');
    expect(page).toContain('milliseconds since 20');
    expect(page).not.toContain('line of the log');
  });

  it('exit status names the terminal reason: 503 until attempts run out → 4, 404 → 5', async () => {
    const s = await server((q, res) => {
      res.writeHead(q.url === '/missing' ? 404 : 503);
      res.end('nope');
    });
    const a = await run(s.url, '--max-attempts', '2', '--policy', '{"backoff":{"kind":"constant","delayMs":1}}');
    expect(a.code).toBe(4);
    expect(a.out).toBe('nope');
    expect(a.err).toBe('relent fetch: max_attempts after 2 attempts (status 503)\n');
    const b = await run(`${s.origin}/missing`);
    expect(b.code).toBe(5);
    expect(b.err).toMatch(/not_retryable/);
  });

  it('a refused port: retried, then exit 4 with one line naming the reason and the class', async () => {
    const port = await closedPort();
    const r = await run(`http://127.0.0.1:${port}/`, '--max-attempts', '2', '--deadline', '2s');
    expect(r.code).toBe(4);
    expect(r.out).toBe('');
    expect(r.err.trim().split('\n')).toHaveLength(1);
    expect(r.err).toMatch(/^relent fetch: max_attempts: connect_refused \(ECONNREFUSED\)/);
  });

  it('-d sends a POST with the body; --idempotency-key makes it retryable with the same key', async () => {
    const s = await server((_q, res, n) => {
      res.writeHead(n === 1 ? 503 : 201);
      res.end('created');
    });
    const r = await run(
      s.url,
      '-d',
      'a=1',
      '-d',
      'b=2',
      '--idempotency-key',
      'order-7',
      '-H',
      'X-Trace: 1',
      '--policy',
      '{"backoff":{"kind":"constant","delayMs":1}}',
    );
    expect(r.code).toBe(0);
    expect(s.seen.map((x) => [x.method, x.body, x.headers['idempotency-key'], x.headers['x-trace'], x.headers['content-type']])).toEqual([
      ['POST', 'a=1&b=2', '"order-7"', '1', 'application/x-www-form-urlencoded'],
      ['POST', 'a=1&b=2', '"order-7"', '1', 'application/x-www-form-urlencoded'],
    ]);
  });

  it('--preset with a Retry-After over its cap → the clear error, exit 5', async () => {
    const s = await server((_q, res) => {
      res.writeHead(429, { 'retry-after': '3600' });
      res.end('later');
    });
    const r = await run(s.url, '--preset', 'http-429', '--deadline', '2s');
    expect(r.code).toBe(5);
    expect(r.err).toMatch(/asked to wait 3600000 ms, over the policy's cap of 30000 ms/);
    expect(s.count()).toBe(1);
  });

  it('malformed flags, JSON or URL → exit 2 and a message naming what was wrong', async () => {
    const cases: [string[], RegExp][] = [
      [['http://127.0.0.1:1/', '--deadline', 'soon'], /--deadline/],
      [['http://127.0.0.1:1/', '--attempt-timeout', '-5'], /--attempt-timeout/],
      [['http://127.0.0.1:1/', '--max-attempts', '0'], /--max-attempts/],
      [['http://127.0.0.1:1/', '--policy', '{"maxAttempts": 3,'], /--policy: invalid JSON at line 1/],
      [['http://127.0.0.1:1/', '--policy', '{"backoff":{"kind":"nope"}}'], /--policy: .*backoff\.kind/],
      [['http://127.0.0.1:1/', '--preset', 'nope'], /Unknown preset "nope"/],
      [['http://127.0.0.1:1/', '-H', 'no colon here'], /-H #1: expected 'Name: value'/],
      [['not a url'], /URL: expected an absolute/],
      [['ftp://127.0.0.1/'], /URL: expected http/],
      [['http://127.0.0.1:1/', '--bogus'], /bogus/],
      [[], /expected one URL/],
      [['http://127.0.0.1:1/', '--policy', '@/nonexistent/policy.json'], /--policy: cannot read/],
    ];
    for (const [argv, re] of cases) {
      const r = await run(...argv);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.err, argv.join(' ')).toMatch(re);
      expect(r.err.trim().split('\n'), argv.join(' ')).toHaveLength(1);
    }
  });

  it('never prints secrets: Authorization, Cookie, query string, body (also with --verbose)', async () => {
    const secret = 'Zq8vSecretToken41x';
    const s = await server((_q, res) => {
      res.writeHead(503);
      res.end();
    });
    const events = join(tmp(), 'e.jsonl');
    const r = await run(
      `${s.origin}/p?api_key=${secret}`,
      '-v',
      '-H',
      `Authorization: Bearer ${secret}`,
      '-H',
      `Cookie: s=${secret}`,
      '-d',
      `pw=${secret}`,
      '--idempotency-key',
      'k1',
      '--max-attempts',
      '2',
      '--events',
      events,
      '--policy',
      '{"backoff":{"kind":"constant","delayMs":1}}',
    );
    expect(r.code).toBe(4);
    expect(r.err).toContain('op-');
    for (const text of [r.out, r.err, readFileSync(events, 'utf8')]) expect(text).not.toContain(secret);
    const bad = await run(`nope://x?api_key=${secret}`);
    expect(bad.err).not.toContain(secret);
    const badHeader = await run('http://127.0.0.1:1/', '-H', secret);
    expect(badHeader.err).not.toContain(secret);
  });

  it('--help', async () => {
    const r = await run('--help');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/relent fetch URL/);
  });
});
