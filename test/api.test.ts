// The public surface is a reviewed artifact (api/*.api.md, checked by `npm run lint`);
// these are the limits it keeps.
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const API = fileURLToPath(new URL('../api/', import.meta.url));
const values = (file: string): number => Number(/^\d+ exports: (\d+) values/m.exec(readFileSync(`${API}${file}`, 'utf8'))![1]);

describe('the API report', () => {
  it('has one report per entry point of package.json', () => {
    const pkg = JSON.parse(readFileSync(fileURLToPath(new URL('../package.json', import.meta.url)), 'utf8')) as { exports: Record<string, unknown> };
    const entries = Object.keys(pkg.exports)
      .filter((k) => k !== './package.json')
      .map((k) => (k === '.' ? 'relent' : `relent-${k.slice(2).replaceAll('/', '-')}`));
    expect(
      readdirSync(API)
        .filter((f) => f.endsWith('.api.md'))
        .map((f) => f.replace('.api.md', ''))
        .sort(),
    ).toEqual(entries.sort());
  });

  it('the root entry point exports at most 30 values (functions, classes, constants), internals stay inside', () => {
    // Types are not capped: every type a public function takes or returns is exported (next test).
    expect(values('relent.api.md')).toBeLessThanOrEqual(30);
    const root = readFileSync(`${API}relent.api.md`, 'utf8');
    for (const internal of [
      'advanceAttempt',
      'recordRetry',
      'isIdempotent',
      'preflight',
      'compileStatuses',
      'normalizeBudget',
      'boundObservation',
      'MAX_TIMER_MS',
      'systemClock',
    ]) {
      expect(root).not.toContain(`### ${internal} (`);
    }
  });

  it('the root entry point leaves the HTTP client to relent/http (it runs in browsers and edge runtimes)', () => {
    expect(readFileSync(`${API}relent.api.md`, 'utf8')).not.toContain('### createClient (');
    expect(readFileSync(`${API}relent-http.api.md`, 'utf8')).toContain('### createClient (');
  });

  it('every type an export refers to is exported by some entry point (a caller can name it)', () => {
    for (const f of readdirSync(API).filter((x) => x.endsWith('.api.md'))) {
      expect(readFileSync(`${API}${f}`, 'utf8'), f).not.toMatch(/, not exported\)/);
    }
  });
});
