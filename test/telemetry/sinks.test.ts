import { describe, expect, it } from 'vitest';
import type { AttemptEvent, ResultEvent } from '../../src/core/types.js';
import { run } from '../../src/run/run.js';
import { normalizeEndpoint, safeEndpoint } from '../../src/telemetry/endpoint.js';
import { combineSinks, createConsoleSink } from '../../src/telemetry/sinks.js';
import { createTestClock } from '../../src/testing/index.js';

type Ev = AttemptEvent | ResultEvent;

describe('normalizeEndpoint', () => {
  it.each([
    ['https://user:pw@API.Example.com:443/v1/items?token=x#frag', undefined, 'https://api.example.com:443/v1/items'],
    ['https://api.example.com/v1/items', undefined, 'https://api.example.com:443/v1/items'],
    ['http://example.com:8080/a/b/?q', undefined, 'http://example.com:8080/a/b/'],
    ['https://api.example.com/users/42?x=1', '/users/:id', 'https://api.example.com:443/users/:id'],
    ['https://api.example.com/users/42?x=1', '/users/{id}', 'https://api.example.com:443/users/{id}'],
    ['https://api.example.com/users/42', 'users/{id}?junk', 'https://api.example.com:443/users/{id}'],
    ['https://[::1]:9000/x', undefined, 'https://[::1]:9000/x'],
    ['/relative/path?token=x#f', undefined, '/relative/path'],
    ['//user:pw@host.example/p?q', undefined, '//host.example/p'],
    ['mailto:someone@example.com?subject=x', undefined, 'mailto:'],
    ['https://h.example/users/{id}', undefined, 'https://h.example:443/users/{id}'],
  ])('%s (template %s) → %s', (url, template, want) => {
    expect(normalizeEndpoint(url, template)).toBe(want);
  });

  it('takes URL objects', () => {
    expect(normalizeEndpoint(new URL('https://a:b@x.example/p?q=1'))).toBe('https://x.example:443/p');
  });

  it('safeEndpoint leaves clean endpoints alone (same string) and normalises the rest', () => {
    const clean = 'https://x.example:443/p';
    expect(safeEndpoint(clean)).toBe(clean);
    expect(safeEndpoint('https://x.example/p?token=1')).toBe(clean);
    expect(safeEndpoint('https://u:p@x.example/p')).toBe(clean);
    expect(safeEndpoint('/users/@me')).toBe('/users/@me');
  });
});

describe('createConsoleSink', () => {
  it('writes one human-readable line per event (formatHuman)', async () => {
    const lines: string[] = [];
    const clock = createTestClock();
    const p = run(async (ctx) => ({ status: ctx.attempt === 1 ? 503 : 200 }), {
      policy: { backoff: { kind: 'constant', delayMs: 40 } },
      clock,
      operationId: 'op-42',
      method: 'GET',
      endpoint: 'https://api.example.com/items',
      onEvent: createConsoleSink({ write: (l) => lines.push(l) }),
    });
    await clock.runAll();
    await p;
    expect(lines).toEqual([
      'op-42 #1 GET https://api.example.com/items 503 in 0ms (10s left) → retry in 40ms',
      'op-42 #2 GET https://api.example.com/items 200 in 0ms (9960ms left) → return',
      'op-42 ⇒ return after 2 attempts (status 200)',
    ]);
  });

  it('json format, and scrubs an endpoint that was not normalised', () => {
    const lines: string[] = [];
    const sink = createConsoleSink({ write: (l) => lines.push(l), format: 'json' });
    sink({
      type: 'attempt',
      operationId: 'op-1',
      requestId: 'op-1/attempt-1',
      attempt: 1,
      method: 'GET',
      endpoint: 'https://x.example/p?api_key=SECRET',
      status: 200,
      errorClass: null,
      elapsedMs: 1,
      remainingMs: 1,
      decision: 'return',
      delayMs: null,
      retryAfterMs: null,
      retryAfterValid: null,
      ts: 0,
    });
    expect(JSON.parse(lines[0]!).endpoint).toBe('https://x.example:443/p');
    expect(lines[0]).not.toContain('SECRET');
  });

  it('writes to stderr by default', () => {
    const original = process.stderr.write;
    const written: string[] = [];
    process.stderr.write = ((s: string) => {
      written.push(s);
      return true;
    }) as typeof process.stderr.write;
    try {
      createConsoleSink()({ type: 'result', operationId: 'op-1', status: 200, errorClass: null, reason: 'return', attempts: 1, ts: 0 });
    } finally {
      process.stderr.write = original;
    }
    expect(written).toEqual(['op-1 ⇒ return after 1 attempt (status 200)\n']);
  });

  it('rejects an unknown format, naming the option', () => {
    expect(() => createConsoleSink({ format: 'xml' as never })).toThrow(/`format`/);
  });
});

describe('combineSinks', () => {
  const ev: Ev = { type: 'result', operationId: 'op-1', status: 200, errorClass: null, reason: 'return', attempts: 1, ts: 0 };

  it('hands each event to every sink in order, skipping falsy entries; takes functions and { onEvent } objects', () => {
    const seen: string[] = [];
    const sink = combineSinks<Ev>((e) => seen.push(`a:${e.type}`), null, false, undefined, { onEvent: (e) => seen.push(`b:${e.type}`) });
    sink(ev);
    expect(seen).toEqual(['a:result', 'b:result']);
  });

  it('a throwing sink does not starve the others; the first error is rethrown', () => {
    const seen: string[] = [];
    const first = new Error('first');
    const sink = combineSinks<Ev>(
      () => {
        throw first;
      },
      () => seen.push('second'),
      () => {
        throw new Error('third');
      },
    );
    expect(() => sink(ev)).toThrow(first);
    expect(seen).toEqual(['second']);
  });

  it('no sinks → a no-op; one sink → that sink', () => {
    expect(() => combineSinks()(ev)).not.toThrow();
    const f = (_e: Ev) => {};
    expect(combineSinks(f)).toBe(f);
  });
});
