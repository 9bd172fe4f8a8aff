// docs/policy.md's tables are the code's defaults: every PolicySpec field has a row
// whose default is POLICY_DEFAULTS' value; every backoff and budget kind has a row whose
// optional defaults are what normalizeBackoff / normalizeBudget fill in; the hedging
// defaults are HEDGE_DEFAULTS; the error table is REASON_CODES.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { BACKOFF_KINDS, normalizeBackoff } from '../../src/core/backoff.js';
import { normalizeBudget, RATIO_BUDGET_DEFAULTS } from '../../src/core/budget.js';
import { REASON_CODES } from '../../src/core/errors.js';
import { HEDGE_DEFAULTS } from '../../src/core/hedge.js';
import { POLICY_DEFAULTS } from '../../src/core/policy.js';

const DOC = readFileSync(fileURLToPath(new URL('../../docs/policy.md', import.meta.url)), 'utf8');

/** The rows of the first table after `heading` (cells trimmed, header and rule dropped). */
function table(heading: string): string[][] {
  const at = DOC.indexOf(heading);
  expect(at, heading).toBeGreaterThanOrEqual(0);
  const lines = DOC.slice(at).split('\n');
  const start = lines.findIndex((l) => l.startsWith('|'));
  const rows: string[][] = [];
  for (const l of lines.slice(start + 2)) {
    if (!l.startsWith('|')) break;
    rows.push(
      l
        .split('|')
        .slice(1, -1)
        .map((c) => c.trim()),
    );
  }
  return rows;
}

const code = (cell: string): string => /^`(.*)`$/.exec(cell)?.[1] ?? cell;
const at = (path: string): unknown => path.split('.').reduce<unknown>((o, k) => (o as Record<string, unknown>)[k], POLICY_DEFAULTS);

/** `name: value` pairs of a cell (`multiplier: 2`, `deposit: "success"`). */
function pairs(cell: string): Record<string, unknown> {
  return Object.fromEntries([...cell.matchAll(/`(\w+): ([^`]+)`/g)].map((m) => [m[1]!, JSON.parse(m[2]!)]));
}

describe('docs/policy.md', () => {
  const rows = table('Every field of `PolicySpec`');

  it('has a row for every PolicySpec field (nested ones by their path), and no other', () => {
    const leaves: string[] = ['preset'];
    for (const [k, v] of Object.entries(POLICY_DEFAULTS)) {
      if (k === 'retryOn' || k === 'retryAfter') leaves.push(...Object.keys(v as object).map((n) => `${k}.${n}`));
      else leaves.push(k);
    }
    expect(rows.map((r) => code(r[0]!)).sort()).toEqual(leaves.sort());
  });

  it.each(table('Every field of `PolicySpec`').filter((r) => r[0] !== '`preset`'))("%s: the default is POLICY_DEFAULTS'", (field, dflt) => {
    expect(JSON.parse(code(dflt!))).toEqual(JSON.parse(JSON.stringify(at(code(field!)))));
  });

  it("lists every backoff kind, with the optional fields' defaults the code fills in", () => {
    const kinds = table('### Backoff kinds');
    expect(kinds.map((r) => code(r[0]!)).sort()).toEqual([...BACKOFF_KINDS].sort());
    const required: Record<string, unknown> = { baseMs: 100, capMs: 1000, delayMs: 5, delaysMs: [1, 2] };
    for (const [kind, req, optional] of kinds) {
      const k = code(kind!);
      const input: Record<string, unknown> = { kind: k };
      for (const f of [...req!.matchAll(/`(\w+)`/g)].map((m) => m[1]!)) input[f] = required[f];
      const resolved = normalizeBackoff(input) as unknown as Record<string, unknown>;
      const documented = pairs(optional!);
      const filled = Object.keys(resolved).filter((f) => f !== 'kind' && !(f in input));
      expect(Object.keys(documented).sort(), k).toEqual(filled.sort());
      for (const [f, v] of Object.entries(documented)) expect(resolved[f], `${k}.${f}`).toEqual(v);
    }
  });

  it("lists every budget kind, with the optional fields' defaults the code fills in", () => {
    const kinds = table('### Budget kinds');
    expect(kinds.map((r) => code(r[0]!))).toEqual(['ratio', 'throttle', 'quota']);
    for (const [kind, req, optional] of kinds) {
      const k = code(kind!);
      const input: Record<string, unknown> = { kind: k };
      for (const f of [...req!.matchAll(/`(\w+)`/g)].map((m) => m[1]!)) input[f] = 10;
      const resolved = normalizeBudget(input) as unknown as Record<string, unknown>;
      const documented = pairs(optional!);
      expect(Object.keys(documented).sort(), k).toEqual(
        Object.keys(resolved)
          .filter((f) => f !== 'kind' && !(f in input))
          .sort(),
      );
      for (const [f, v] of Object.entries(documented)) expect(resolved[f], `${k}.${f}`).toEqual(v);
    }
    expect({ kind: 'ratio', ...pairs(kinds[0]![2]!) }).toEqual({ ...RATIO_BUDGET_DEFAULTS });
  });

  it('the hedging defaults are HEDGE_DEFAULTS', () => {
    const rows = table('### Hedging');
    expect(Object.fromEntries(rows.filter((r) => r[1] !== 'required').map((r) => [code(r[0]!).replace('hedge.', ''), JSON.parse(code(r[1]!))]))).toEqual({
      ...HEDGE_DEFAULTS,
    });
  });

  it('the error table is REASON_CODES', () => {
    const rows = table('| terminal reason | code | when |');
    expect(Object.fromEntries(rows.map((r) => [code(r[0]!), code(r[1]!)]))).toEqual({ ...REASON_CODES });
  });
});
