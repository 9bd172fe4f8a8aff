import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { analyzeEventText } from '../../src/report/analyze.js';
import { demoLog, HOSTILE_ENDPOINT } from '../report/fixtures.js';

async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(argv, { out: (t) => (out += t), err: (t) => (err += t) });
  return { code, out, err };
}

const dir = mkdtempSync(join(tmpdir(), 'relent-report-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const log = join(dir, 'events.jsonl');
writeFileSync(log, demoLog());

describe('relent report', () => {
  it('prints tables: load, reasons, delays, retry success per endpoint with verdicts, load vs retries', async () => {
    const r = await cli('report', log);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^relent report — .*events\.jsonl\n\d+ lines: \d+ attempts, 3000 results; 2 malformed\n/);
    expect(r.out).toMatch(/Malformed lines \(skipped\): line \d+ \(not valid JSON\), line \d+ \(not valid JSON\)\n/);
    expect(r.out).toContain('\nTerminal reasons\n');
    expect(r.out).toMatch(/\nDelays chosen before retries \(\d+ values\): min /);
    expect(r.out).toMatch(/https:\/\/api\.example\.com:443\/v1\/items +\d+ +[\d.]+ +\d+ +\d+ % +[\d.]+ % +retries help: \d+ % of retried operations succeed\n/);
    expect(r.out).toMatch(
      /https:\/\/pay\.example\.com:443\/v1\/charge .*retries almost never help \([\d.]+ % of retried operations succeed\): consider switching them off\n/,
    );
    expect(r.out).toMatch(/https:\/\/search\.example\.com:443\/q .*retries help a little: \d+ % of retried operations succeed/);
    expect(r.out).toMatch(/https:\/\/rare\.example\.com:443\/ping .*not enough data/);
    expect(r.out).toContain('Load vs retries, by time (the events\' "ts" field)');
    expect(r.out).toContain('starting 2026-03-01T12:00:00.000Z');
  });

  it('--json prints the report object', async () => {
    const r = await cli('report', log, '--json');
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.out) as Record<string, unknown>;
    expect(doc).toEqual(JSON.parse(JSON.stringify(analyzeEventText(demoLog(), { source: log }))));
    expect(Object.keys(doc)).toEqual(
      expect.arrayContaining(['attemptsPerOperation', 'reasons', 'perAttempt', 'delays', 'timeouts', 'load', 'retrySuccess', 'series', 'malformed']),
    );
  });

  it('--html writes one self-contained page: inline SVG charts, no script, everything escaped', async () => {
    const file = join(dir, 'report.html');
    const r = await cli('report', log, '--html', file);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^relent report/);
    const html = readFileSync(file, 'utf8');
    expect(html).toMatch(/^<!doctype html>/);
    for (const id of ['attempts', 'reasons', 'observations', 'delays', 'durations', 'series']) expect(html).toContain(`data-chart="${id}"`);
    expect(html).toContain("default-src 'none'");
    expect(html).not.toMatch(/<script/i);
    expect(html).not.toMatch(/<img/i);
    expect(html).not.toMatch(/\b(src|href)=["']?(https?:)?\/\//i);
    expect(html).toContain('&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;');
    expect(html).not.toContain(HOSTILE_ENDPOINT);
  });

  it('usage errors exit 2 with one line on stderr', async () => {
    let r = await cli('report');
    expect(r.code).toBe(2);
    expect(r.err).toBe('relent report: missing the event log (a JSONL file, or - for standard input)\n');
    r = await cli('report', join(dir, 'nope.jsonl'));
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^relent report: event log .*nope\.jsonl: no such file or directory\n$/);
    r = await cli('report', dir);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/: is a directory\n$/);
    r = await cli('report', log, '--max-open', '0');
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--max-open: expected an integer from 1/);
    r = await cli('report', log, '--html', join(dir, 'no', 'such', 'dir.html'));
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^relent report: --html .*dir\.html: no such file or directory\n$/);
  });

  it('an empty log is a report of nothing, not an error', async () => {
    const empty = join(dir, 'empty.jsonl');
    writeFileSync(empty, '');
    const r = await cli('report', empty);
    expect(r.code).toBe(0);
    expect(r.out).toContain('No attempt or result events in this log.');
  });

  it('is listed in relent help, and has its own', async () => {
    expect((await cli('help')).out).toMatch(/\n {2}report LOG\|- +read an event log/);
    const r = await cli('help', 'report');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^relent report EVENTS\.jsonl\|- \[options\]/);
  });
});

describe('relent simulate --html', () => {
  it('brooker: work and completion-time line charts per strategy, and the tables', async () => {
    const file = join(dir, 'brooker.html');
    const r = await cli('simulate', 'brooker', '--runs', '2', '--clients', '10,20,30', '--html', file);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^relent simulate brooker/);
    const html = readFileSync(file, 'utf8');
    expect(html).toContain('data-chart="brooker-work"');
    expect(html).toContain('data-chart="brooker-time"');
    for (const s of ['none', 'exponential', 'full', 'equal', 'decorrelated']) expect(html).toContain(`>${s}</`);
    expect(html).not.toMatch(/<script/i);
  });

  it('overload and layers: their tables', async () => {
    const scenario = join(dir, 'short.json');
    writeFileSync(
      scenario,
      JSON.stringify({
        scenario: 'overload',
        runs: 1,
        durationMs: 6000,
        faults: [{ startMs: 2000, endMs: 4000, capacityPerSec: 80 }],
        policies: ['none', 'got', 'relent'],
      }),
    );
    const file = join(dir, 'overload.html');
    let r = await cli('simulate', scenario, '--html', file, '--json');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toHaveProperty('rows');
    let html = readFileSync(file, 'utf8');
    expect(html).toContain('<th>amplification</th>');
    expect(html).toMatch(/<td>relent<\/td><td>[\d.]+x<\/td>/);
    const layers = join(dir, 'layers.json');
    writeFileSync(layers, JSON.stringify({ scenario: 'layers', durationMs: 2000 }));
    r = await cli('simulate', layers, '--html', join(dir, 'layers.html'));
    expect(r.code).toBe(0);
    html = readFileSync(join(dir, 'layers.html'), 'utf8');
    expect(html).toMatch(/<td>no budgets<\/td><td>4\.00<\/td><td>16\.00<\/td><td>64\.00<\/td><td>64\.00x<\/td>/);
  });
});
