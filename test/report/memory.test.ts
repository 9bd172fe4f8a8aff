// The built CLI in a child process: `relent report` on standard input, and the
// acceptance test "report on a 1 GB generated log stays under 200 MB of memory".
//
// BIG TEST: writes a 1 GiB log to a temp dir (≈ 10–20 s), runs `node bin/relent report
// BIG.jsonl --json` on it (≈ 10–20 s) and measures the child's peak RSS (the kernel's
// ru_maxrss, printed by a preloaded exit hook). The file is deleted afterwards. For quick
// local runs it can be skipped with RELENT_SKIP_BIG_TESTS=1; under CI (CI=true) it
// always runs.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventReport } from '../../src/report/analyze.js';
import { writeBigLog, type BigLogStats } from './biglog.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = join(root, 'bin', 'relent');
const LIMIT_BYTES = 200 * 1024 * 1024;
const SIZE = 1024 * 1024 * 1024;
const skipBig = process.env.RELENT_SKIP_BIG_TESTS === '1' && process.env.CI !== 'true';

const dir = mkdtempSync(join(tmpdir(), 'relent-report-big-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function newest(path: string): number {
  if (!existsSync(path)) return 0;
  const st = statSync(path);
  if (!st.isDirectory()) return st.mtimeMs;
  return Math.max(0, ...readdirSync(path).map((n) => newest(join(path, n))));
}

beforeAll(() => {
  // The child runs dist/: compile when it is missing or older than the sources it runs
  // (`npm test` does the same in its pretest step; CI builds before testing).
  const sources = Math.max(newest(join(root, 'src', 'report')), newest(join(root, 'src', 'cli')));
  const built = Math.min(newest(join(root, 'dist', 'cli', 'report.js')), newest(join(root, 'dist', 'report', 'analyze.js')));
  if (built < sources) execFileSync(process.execPath, [join(root, 'scripts', 'ensure-ready.mjs')], { cwd: root, stdio: 'inherit' });
}, 180_000);

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  maxRssBytes: number;
  wallMs: number;
}

/** Runs the built CLI with a preloaded hook that prints process.resourceUsage().maxRSS (KiB) at exit. */
function runCli(args: string[], input?: string): Promise<Run> {
  const hook = join(dir, 'maxrss-hook.mjs');
  if (!existsSync(hook)) {
    writeFileSync(hook, "process.on('exit', () => { process.stderr.write(`\\nRELENT_MAXRSS_KB=${process.resourceUsage().maxRSS}\\n`); });\n");
  }
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', pathToFileURL(hook).href, BIN, ...args], { cwd: root, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (t: string) => (stdout += t));
    child.stderr.setEncoding('utf8').on('data', (t: string) => (stderr += t));
    child.on('error', reject);
    child.on('close', (code) => {
      const m = /\nRELENT_MAXRSS_KB=(\d+)\n/.exec(stderr);
      resolve({
        code,
        stdout,
        stderr: stderr.replace(/\nRELENT_MAXRSS_KB=\d+\n/, ''),
        maxRssBytes: m ? Number(m[1]) * 1024 : Number.NaN,
        wallMs: performance.now() - started,
      });
    });
    child.stdin.end(input ?? '');
  });
}

describe('the built CLI', () => {
  it('reads standard input for -', async () => {
    const lines = [
      '{"type":"attempt","operationId":"a","requestId":"a/1","attempt":1,"method":"GET","endpoint":"https://x.example:443/","status":503,"errorClass":null,"elapsedMs":5,"remainingMs":100,"decision":"retry","delayMs":10,"retryAfterMs":null,"retryAfterValid":null}',
      '{"type":"attempt","operationId":"a","requestId":"a/2","attempt":2,"method":"GET","endpoint":"https://x.example:443/","status":200,"errorClass":null,"elapsedMs":5,"remainingMs":85,"decision":"return","delayMs":null,"retryAfterMs":null,"retryAfterValid":null}',
      '{"type":"result","operationId":"a","status":200,"errorClass":null,"reason":"return","attempts":2}',
      'oops',
    ];
    const r = await runCli(['report', '-', '--json'], lines.join('\n') + '\n');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout) as EventReport;
    expect(doc.source).toBe('standard input');
    expect(doc.operations.withResult).toBe(1);
    expect(doc.retrySuccess.overall).toMatchObject({ retried: 1, retriedReturned: 1 });
    expect(doc.malformed.lines).toEqual([{ line: 4, reason: 'not a JSON object' }]);
  }, 30_000);
});

describe.skipIf(skipBig)('BIG: relent report on a 1 GB log (set RELENT_SKIP_BIG_TESTS=1 to skip locally; always runs under CI)', () => {
  let stats: BigLogStats;
  const big = join(dir, 'BIG.jsonl');

  it('stays under 200 MB of memory and counts every line', async () => {
    const t0 = performance.now();
    stats = writeBigLog(big, SIZE);
    const genMs = performance.now() - t0;
    expect(statSync(big).size).toBeGreaterThanOrEqual(SIZE);

    const r = await runCli(['report', big, '--json']);
    rmSync(big, { force: true });
    // Only progress on stderr (a log, not a terminal: a line every 5 s with how much is read).
    expect(r.stderr.split('\n').filter((l) => l !== '' && !/^relent report: \d+% \d+ MB of \d+ MB read; [^;]* so far/.test(l))).toEqual([]);
    expect(r.code).toBe(0);
    const mb = (b: number): string => (b / 1024 / 1024).toFixed(1);
    console.log(
      `relent report on ${mb(stats.bytes)} MiB (${stats.lines} lines): peak RSS ${mb(r.maxRssBytes)} MiB, wall ${(r.wallMs / 1000).toFixed(1)} s (log written in ${(genMs / 1000).toFixed(1)} s)`,
    );
    expect(Number.isFinite(r.maxRssBytes)).toBe(true);
    expect(r.maxRssBytes).toBeLessThan(LIMIT_BYTES);

    const doc = JSON.parse(r.stdout) as EventReport;
    expect(doc.lines).toBe(stats.lines);
    expect(doc.events.attempt).toBe(stats.attempts);
    expect(doc.events.result).toBe(stats.results);
    expect(doc.malformed.count).toBe(stats.malformed);
    expect(doc.malformed.lines.some((m) => m.reason === 'line too long')).toBe(true);
    expect(doc.operations.withResult).toBe(stats.results);
    expect(doc.operations.unfinished).toBe(stats.unclosed);
    expect(doc.operations.evicted).toBeGreaterThan(0); // more unclosed operations than the open set holds
    expect(doc.retrySuccess.overall.retried).toBe(stats.retried);
    expect(doc.retrySuccess.overall.retriedReturned).toBe(stats.retriedReturned);
    expect(doc.retrySuccess.endpointsFolded).toBe(true);
    expect(doc.series.basis).toBe('time');
    expect(doc.series.buckets.length).toBeLessThanOrEqual(120);
  }, 240_000);
});
