// R14: no secret (query token, Authorization, Cookie, body) in any event or error message,
// whatever the secret and however the call ends. A property test with random secrets
// against real loopback servers.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fc from 'fast-check';
import { request, Agent } from 'undici';
import { createClient } from '../../src/http/client.js';
import { relentInterceptor } from '../../src/http/interceptor.js';
import type { RelentEvent } from '../../src/run/run.js';
import { closedPort, startServer, type TestServer } from './helpers.js';

let busy: TestServer;
let hang: TestServer;
let reset: TestServer;
let refused: number;
beforeAll(async () => {
  busy = await startServer((_q, res) => {
    res.writeHead(503, { 'retry-after': 'soon' });
    res.end('busy');
  });
  hang = await startServer(() => {
    /* hangs */
  });
  reset = await startServer((req) => req.socket.resetAndDestroy());
  refused = await closedPort();
});
afterAll(async () => {
  await Promise.all([busy.close(), hang.close(), reset.close()]);
});

/** Everything an error carries that could reach a log: messages and own fields along the cause chain. */
function errorText(e: unknown): string {
  const parts: string[] = [];
  let cur: unknown = e;
  for (let i = 0; i < 6 && cur !== null && cur !== undefined; i++) {
    if (cur instanceof Error) {
      parts.push(cur.message, String(cur), cur.stack ?? '');
      for (const k of Object.keys(cur)) {
        const v = (cur as unknown as Record<string, unknown>)[k];
        if (k === 'response' || k === 'cause') continue;
        try {
          parts.push(`${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`);
        } catch {
          parts.push(`${k}=?`);
        }
      }
      cur = (cur as { cause?: unknown }).cause;
    } else {
      parts.push(String(cur));
      break;
    }
  }
  return parts.join('\n');
}

const secret = fc.stringMatching(/^[A-Za-z0-9]{16,32}$/);
const scenario = fc.constantFrom('busy', 'hang', 'reset', 'refused');

describe('no secrets in events or errors', () => {
  it('client.fetch: query token, Authorization, Cookie and body never appear', async () => {
    const events: RelentEvent[] = [];
    const client = createClient({
      onEvent: (e) => events.push(e),
      policy: { maxAttempts: 2, deadlineMs: 1000, attemptTimeoutMs: 60, backoff: { kind: 'constant', delayMs: 1 } },
    });
    try {
      await fc.assert(
        fc.asyncProperty(secret, scenario, fc.constantFrom('GET', 'POST', 'PUT'), async (s, where, method) => {
          events.length = 0;
          const origin = where === 'busy' ? busy.origin : where === 'hang' ? hang.origin : where === 'reset' ? reset.origin : `http://127.0.0.1:${refused}`;
          const url = `${origin}/api/v1/items?token=${s}&x=1#frag${s}`;
          const init = {
            method,
            headers: { authorization: `Bearer ${s}`, cookie: `sid=${s}`, 'x-api-key': s },
            ...(method === 'GET' ? {} : { body: `{"password":"${s}"}` }),
          };
          let text = '';
          try {
            const res = await client.fetch(url, init);
            await res.arrayBuffer();
          } catch (e) {
            text = errorText(e);
          }
          const log = JSON.stringify(events);
          expect(events.length).toBeGreaterThan(0);
          expect(log).not.toContain(s);
          expect(text).not.toContain(s);
        }),
        { numRuns: 24 },
      );
    } finally {
      await client.close();
    }
  });

  it('relentInterceptor: the same through undici.request', async () => {
    const events: RelentEvent[] = [];
    const agent = new Agent().compose(
      relentInterceptor({
        onEvent: (e) => events.push(e),
        policy: { maxAttempts: 2, deadlineMs: 1000, attemptTimeoutMs: 60, backoff: { kind: 'constant', delayMs: 1 } },
      }),
    );
    try {
      await fc.assert(
        fc.asyncProperty(secret, scenario, async (s, where) => {
          events.length = 0;
          const origin = where === 'busy' ? busy.origin : where === 'hang' ? hang.origin : where === 'reset' ? reset.origin : `http://127.0.0.1:${refused}`;
          let text = '';
          try {
            const r = await request(`${origin}/api?token=${s}`, {
              method: 'POST',
              dispatcher: agent,
              headers: { authorization: `Bearer ${s}`, cookie: `c=${s}` },
              body: s,
            });
            await r.body.dump();
          } catch (e) {
            text = errorText(e);
          }
          expect(JSON.stringify(events)).not.toContain(s);
          expect(text).not.toContain(s);
        }),
        { numRuns: 16 },
      );
    } finally {
      await agent.close();
    }
  });

  it('input errors do not echo a URL with credentials or a bad header value', async () => {
    const client = createClient();
    await fc.assert(
      fc.asyncProperty(secret, async (s) => {
        const e1 = await client.fetch(`http://u:${s}@127.0.0.1:1/`).then(
          () => null,
          (e: unknown) => e,
        );
        const e2 = await client.fetch(`::bad::?t=${s}`).then(
          () => null,
          (e: unknown) => e,
        );
        const e3 = await client.fetch('http://127.0.0.1:1/', { headers: { authorization: `${s}\n` } }).then(
          () => null,
          (e: unknown) => e,
        );
        for (const e of [e1, e2, e3]) {
          expect(e).not.toBeNull();
          expect(errorText(e)).not.toContain(s);
        }
      }),
      { numRuns: 20 },
    );
    await client.close();
  });
});
