// The public surface is a reviewed artifact (api/*.api.md, checked by `npm run lint`);
// these are the limits it keeps.
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const API = fileURLToPath(new URL('../api/', import.meta.url));
const count = (file: string): number => Number(/^(\d+) exports:/m.exec(readFileSync(`${API}${file}`, 'utf8'))![1]);

describe('the API report', () => {
  it('has one report per entry point of package.json', () => {
    const pkg = JSON.parse(readFileSync(fileURLToPath(new URL('../package.json', import.meta.url)), 'utf8')) as { exports: Record<string, unknown> };
    const entries = Object.keys(pkg.exports).filter((k) => k !== './package.json').map((k) => (k === '.' ? 'relent' : `relent-${k.slice(2).replaceAll('/', '-')}`));
    expect(readdirSync(API).filter((f) => f.endsWith('.api.md')).map((f) => f.replace('.api.md', '')).sort()).toEqual(entries.sort());
  });

  it('the root entry point exports at most 58 names (half of the 116 it had), internals stay inside', () => {
    expect(count('relent.api.md')).toBeLessThanOrEqual(58);
    const root = readFileSync(`${API}relent.api.md`, 'utf8');
    for (const internal of ['startOperation', 'beginAttempt', 'afterRetry', 'preflight', 'compileStatuses', 'normalizeBudget', 'boundObservation', 'MAX_TIMER_MS', 'systemClock']) {
      expect(root).not.toContain(`### ${internal} (`);
    }
  });

  it('the root entry point leaves the HTTP client to relent/http (it runs in browsers and edge runtimes)', () => {
    expect(readFileSync(`${API}relent.api.md`, 'utf8')).not.toContain('### createClient (');
    expect(readFileSync(`${API}relent-http.api.md`, 'utf8')).toContain('### createClient (');
  });
});
