import { describe, expect, it } from 'vitest';
import { RelentError } from '../../src/core/errors.js';
import { parseScenario, parseScenarioText, runScenario } from '../../src/sim/config.js';

function errorOf(f: () => unknown): RelentError {
  try {
    f();
  } catch (e) {
    if (RelentError.is(e)) return e;
    throw e;
  }
  throw new Error('expected an error');
}

describe('scenario files: validated, errors name the field', () => {
  it.each([
    [{ scenario: 'nope' }, 'scenario', /Expected `scenario` to be one of brooker, overload, layers, capacity, tail, quota, got "nope"/],
    [{}, 'scenario', /Expected `scenario`/],
    [{ scenario: 'overload', runs: 0 }, 'runs', /Expected `runs` to be an integer in \[1, 10000\], got 0/],
    [{ scenario: 'overload', arrivalsPerSecond: 10 }, 'arrivalsPerSecond', /Unknown field `arrivalsPerSecond`/],
    [{ scenario: 'overload', dependency: { capacityPerSec: -1 } }, 'dependency.capacityPerSec', /`dependency.capacityPerSec`/],
    [{ scenario: 'overload', dependency: { speed: 1 } }, 'dependency.speed', /Unknown field `dependency.speed`/],
    [
      { scenario: 'overload', faults: [{ startMs: 5000, endMs: 4000, capacityPerSec: 1 }] },
      'faults[0].endMs',
      /`faults\[0\].endMs` to be greater than startMs/,
    ],
    [
      {
        scenario: 'overload',
        faults: [
          { startMs: 0, endMs: 4000, capacityPerSec: 1 },
          { startMs: 3000, endMs: 5000, capacityPerSec: 1 },
        ],
      },
      'faults',
      /must not overlap/,
    ],
    [{ scenario: 'overload', arrival: 'bursty' }, 'arrival', /"poisson" or "uniform"/],
    [
      { scenario: 'overload', policies: [{ name: 'x', policy: { maxAttempts: 0 } }] },
      'policies[0].policy.maxAttempts',
      /policies\[0\].policy: Expected `maxAttempts`/,
    ],
    [
      { scenario: 'overload', policies: [{ name: 'x', policy: { backoff: { kind: 'full-jitter', baseMs: 10, capMs: 5 } } }] },
      'policies[0].policy.backoff.capMs',
      /`backoff.capMs`/,
    ],
    [{ scenario: 'overload', policies: ['no-such-preset'] }, 'policies[0].preset', /Unknown preset "no-such-preset"/],
    [{ scenario: 'overload', policies: ['relent', 'relent'] }, 'policies[1].name', /used twice/],
    [{ scenario: 'brooker', clients: [10, 0] }, 'clients[1]', /`clients\[1\]`/],
    [{ scenario: 'brooker', strategies: ['fastest'] }, 'strategies[0]', /`strategies\[0\]` to be one of none, exponential, full, equal, decorrelated/],
    [{ scenario: 'brooker', strategies: [{ name: 'b', backoff: { kind: 'warp' } }] }, 'strategies[0].backoff.kind', /`strategies\[0\].backoff.kind`/],
    [{ scenario: 'brooker', network: { meanMs: 'ten' } }, 'network.meanMs', /`network.meanMs`/],
    [{ scenario: 'layers', variants: [{ name: 'v' }] }, 'variants[0].budget', /`variants\[0\].budget` to be a boolean or a budget object/],
    [
      { scenario: 'layers', variants: [{ name: 'v', budget: { kind: 'ratio', deposit: 'request' } }] },
      'variants[0].budget.deposit',
      /`variants\[0\].budget.deposit` to be "success" or "operation"/,
    ],
    [{ scenario: 'layers', policy: { policy: 'http-429', budget: 'yes' } }, 'policy.budget', /`policy.budget` to be a boolean/],
    [{ scenario: 'layers', variants: [{ name: 'v', budget: true, processes: 0 }] }, 'variants[0].processes', /`variants\[0\].processes`/],
    [
      { scenario: 'layers', variants: [{ name: 'v', budget: true, sharedBudget: 'yes' }] },
      'variants[0].sharedBudget',
      /`variants\[0\].sharedBudget` to be a boolean/,
    ],
    [{ scenario: 'layers', variants: [{ name: 'v', budget: true, noRetry: 1 }] }, 'variants[0].noRetry', /`variants\[0\].noRetry` to be a boolean/],
  ])('%o → %s', (input, field, message) => {
    const e = errorOf(() => parseScenario(input));
    expect(e.code).toBe('ERR_INVALID_INPUT');
    expect(e.field).toBe(field);
    expect(e.message).toMatch(message);
  });

  it('JSON syntax errors and non-objects are reported with the file name', () => {
    expect(errorOf(() => parseScenarioText('{"scenario": "overload",', 'my.json')).message).toMatch(/^my\.json: invalid JSON/);
    expect(errorOf(() => parseScenarioText('[1]', 'my.json')).message).toMatch(/^my\.json: Expected `scenario file` to be a JSON object/);
    const e = errorOf(() => parseScenarioText('{"scenario":"overload","faults":[{"startMs":1}]}', 'f.json'));
    expect(e.message).toMatch(/^f\.json: Expected `faults\[0\].endMs`/);
    expect(e.field).toBe('faults[0].endMs');
  });

  it('a valid file runs, with everything left out at its default', () => {
    const s = parseScenarioText(
      JSON.stringify({
        scenario: 'overload',
        seed: 'x',
        runs: 1,
        durationMs: 8000,
        faults: [{ startMs: 3000, endMs: 5000, capacityPerSec: 40 }],
        dependency: { capacityPerSec: 200 },
        policies: ['none', 'http-429', { name: 'mine', policy: { preset: 'http-429', maxAttempts: 2 }, budget: false }, { maxAttempts: 2 }],
      }),
    );
    const r = runScenario(s);
    expect(r.scenario).toBe('overload');
    if (r.scenario !== 'overload') return;
    expect(r.result.rows.map((x) => x.policy)).toEqual(['none', 'http-429', 'mine', 'custom-4']);
    expect(r.result.rows[0]!.fault.successShare).toBeLessThan(0.2); // 40/s of 320/s
  });

  it('brooker and layers files run too', () => {
    const b = runScenario(
      parseScenario({ scenario: 'brooker', runs: 1, clients: [5], strategies: ['full', { name: 'slow', backoff: { kind: 'constant', delayMs: 50 } }] }),
    );
    expect(b.scenario === 'brooker' && b.result.rows.map((x) => x.strategy)).toEqual(['full', 'slow']);
    const l = runScenario(parseScenario({ scenario: 'layers', layers: 2, durationMs: 2000, variants: [{ name: 'v', budget: false }] }));
    expect(l.scenario === 'layers' && l.result.rows[0]!.callsPerAction).toEqual([4, 16]);
  });
});
