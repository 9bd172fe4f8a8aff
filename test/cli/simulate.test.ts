import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';

async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(['simulate', ...argv], { out: (t) => (out += t), err: (t) => (err += t) });
  return { code, out, err };
}

const dir = mkdtempSync(join(tmpdir(), 'relent-sim-'));

describe('relent simulate', () => {
  it('capacity: a table of the limits through a capacity drop; --json rows; --policy and --runs refused, named', async () => {
    const r = await cli('capacity', '-q');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^relent simulate capacity — 400 operations\/s, 50 workers of 50 ms cut to 10 from 10 s for 20 s/);
    expect(r.out).toMatch(/relent gradient +\d\.\d\d s/);
    const j = await cli('capacity', '--json', '-q', '--seed', '3');
    const doc = JSON.parse(j.out) as { rows: { name: string; failed: number }[] };
    expect(doc.rows.map((x) => x.name)).toEqual([
      'relent gradient',
      'relent aimd (slowMs 100)',
      'fixed 10 (degraded capacity)',
      'fixed 20 (healthy need)',
      'fixed 50 (healthy capacity)',
      'no limit',
    ]);
    const p = await cli('capacity', '--policy', 'http-429');
    expect(p.code).toBe(2);
    expect(p.err).toMatch(/--policy: the capacity scenario compares limits/);
    expect((await cli('capacity', '--runs', '2')).err).toMatch(/--runs: the capacity scenario runs each contender once/);
  });

  it('tail: hedging against a slow tail; --policy adds a contender', async () => {
    const r = await cli('tail', '-q', '--policy', '{"name":"fixed 10 ms","policy":{"preset":"http-429","hedge":{"delayMs":10}}}');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^relent simulate tail — 200 GETs\/s/);
    expect(r.out).toMatch(/\nhedge at p95 \(maxExtraLoad 5 %\) .*\n/);
    expect(r.out).toMatch(/\nfixed 10 ms .*\n/);
    const dup = await cli('tail', '--policy', '{"name":"no hedging","policy":"http-429"}');
    expect(dup.code).toBe(2);
  });

  it('brooker --json prints {"rows":[{clients, strategy, work, completionTime}, …]}', async () => {
    const r = await cli('brooker', '--json', '--runs', '2', '--clients', '10,20');
    expect(r.code).toBe(0);
    expect(r.err).toBe('');
    const doc = JSON.parse(r.out) as { rows: Record<string, unknown>[] };
    expect(Object.keys(doc)).toEqual(['rows']);
    expect(doc.rows).toHaveLength(10);
    expect(doc.rows.map((x) => x.strategy)).toEqual([
      'none',
      'exponential',
      'full',
      'equal',
      'decorrelated',
      'none',
      'exponential',
      'full',
      'equal',
      'decorrelated',
    ]);
    for (const row of doc.rows) {
      expect(typeof row.clients).toBe('number');
      expect(typeof row.work).toBe('number');
      expect(typeof row.completionTime).toBe('number');
    }
  });

  it('the same seed prints the same output; another seed other numbers', async () => {
    const a = await cli('brooker', '--json', '--runs', '1', '--clients', '15', '--seed', '9');
    const b = await cli('brooker', '--json', '--runs', '1', '--clients', '15', '--seed', '9');
    const c = await cli('brooker', '--json', '--runs', '1', '--clients', '15', '--seed', 'other');
    expect(b.out).toBe(a.out);
    expect(c.out).not.toBe(a.out);
  });

  it('prints tables by default; --policy adds a contender (name, JSON or @FILE)', async () => {
    const file = join(dir, 'careful.json');
    writeFileSync(file, JSON.stringify({ maxAttempts: 2, backoff: { kind: 'equal-jitter', baseMs: 500, capMs: 5000 } }));
    const scenario = join(dir, 'short.json');
    writeFileSync(
      scenario,
      JSON.stringify({
        scenario: 'overload',
        runs: 1,
        durationMs: 8000,
        faults: [{ startMs: 3000, endMs: 6000, capacityPerSec: 80 }],
        policies: ['none', 'cockatiel'],
      }),
    );
    const r = await cli(scenario, '--policy', `@${file}`, '--policy', '{"name":"two","policy":{"maxAttempts":2}}');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^relent simulate overload/);
    expect(r.out).toMatch(/\ncareful +\d/);
    expect(r.out).toMatch(/\ntwo +\d/);
    // a 3 s fault is not the set-up the peers were measured in: no measured column beside it
    expect(r.out).toMatch(/\ncockatiel +\d+\.\d+x +\d+\.\d %/);
    expect(r.out).not.toContain('49.70x');
    expect(r.out).not.toMatch(/\np-retry/);
  });

  it('layers prints the calls per layer', async () => {
    const file = join(dir, 'layers.json');
    writeFileSync(file, JSON.stringify({ scenario: 'layers', durationMs: 3000 }));
    const r = await cli(file, '--seed', '2');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/no budgets +4\.00 +16\.00 +64\.00 +64\.00x/);
    expect(r.out).toMatch(/fleet, shared budget, "don't retry" +1\.00 +1\.00 +[\d.]+ +[\d.]+x +0\.0 % +10\n/);
  });

  it("layers --processes P sets the fleet rows' processes per layer; elsewhere it is refused", async () => {
    const r = await cli('layers', '--processes', '3', '--json');
    expect(r.code).toBe(0);
    const rows = (JSON.parse(r.out) as { rows: { variant: string; processes: number }[] }).rows;
    expect(rows.filter((x) => x.variant.startsWith('fleet')).map((x) => x.processes)).toEqual([3, 3, 3, 3]);
    expect((await cli('brooker', '--processes', '3')).code).toBe(2);
    expect((await cli('layers', '--processes', '0')).code).toBe(2);
  });

  it('runs a scenario file; a malformed one exits 2 naming the field', async () => {
    const good = join(dir, 'brooker.json');
    writeFileSync(good, JSON.stringify({ scenario: 'brooker', runs: 1, clients: [5], strategies: ['none', 'full'] }));
    const ok = await cli(good, '--json');
    expect(ok.code).toBe(0);
    expect((JSON.parse(ok.out) as { rows: unknown[] }).rows).toHaveLength(2);

    const bad = join(dir, 'bad.json');
    writeFileSync(bad, JSON.stringify({ scenario: 'overload', faults: [{ startMs: 10, endMs: 5, capacityPerSec: 1 }] }));
    const r = await cli(bad);
    expect(r.code).toBe(2);
    expect(r.out).toBe('');
    expect(r.err).toMatch(/faults\[0\]\.endMs/);

    const broken = join(dir, 'broken.json');
    writeFileSync(broken, '{"scenario": ');
    const b = await cli(broken);
    expect(b.code).toBe(2);
    expect(b.err).toMatch(/broken\.json: invalid JSON/);
  });

  it('usage errors exit 2 with one line on stderr', async () => {
    for (const argv of [
      [],
      ['nope'],
      ['brooker', '--runs', 'x'],
      ['overload', '--clients', '10'],
      ['overload', '--policy', '{"maxAttempts": 0}'],
      ['layers', '--policy', 'none', '--policy', 'got'],
      ['overload', '--policy', 'relent'],
    ]) {
      const r = await cli(...argv);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.err.trim().split('\n'), argv.join(' ')).toHaveLength(1);
    }
  });

  it('help', async () => {
    const r = await cli('--help');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/relent simulate SCENARIO/);
  });
});
