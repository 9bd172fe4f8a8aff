// Chaos through the HTTP drivers against real loopback servers: an injected fault or
// outcome sends nothing to the server; a latency delays the request; the events say
// what was injected. No driver has chaos code of its own: the executor carries it out.
import { afterEach, describe, expect, it } from 'vitest';
import { Agent, request } from 'undici';
import { createClient } from '../../src/http/index.js';
import { relentInterceptor } from '../../src/http/interceptor.js';
import type { RelentEvent } from '../../src/run/run.js';
import { createSeededRandom } from '../../src/testing/index.js';
import { startServer, type TestServer } from './helpers.js';

let servers: TestServer[] = [];
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((c) => c()));
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
});
async function server(): Promise<TestServer> {
  const s = await startServer((_q, res) => {
    res.writeHead(200);
    res.end('real');
  });
  servers.push(s);
  return s;
}
const FAST = { budget: null, backoff: { kind: 'constant', delayMs: 1 } } as const;

describe('client.fetch with chaos', () => {
  it('an injected outcome at rate 1: the server sees nothing, the call ends by the rules (ERR_INJECTED after 3 attempts)', async () => {
    const s = await server();
    const events: RelentEvent[] = [];
    const c = createClient({ policy: { ...FAST, chaos: { outcome: { rate: 1, status: 503 } } }, onEvent: (e) => events.push(e) });
    closers.push(() => c.close());
    await expect(c.fetch(s.url)).rejects.toMatchObject({ code: 'ERR_INJECTED', status: 503 });
    expect(s.count()).toBe(0);
    expect(s.connections()).toBe(0);
    expect(events.filter((e) => e.type === 'attempt').map((e) => e.type === 'attempt' && e.injected)).toEqual(['outcome', 'outcome', 'outcome']);
  });

  it('an injected fault on a POST: nothing sent, a refused connection is retried, a timeout asks for the state', async () => {
    const s = await server();
    const refused = createClient({ policy: { ...FAST, chaos: { fault: { rate: 1, errorClass: 'connect_refused' } } } });
    closers.push(() => refused.close());
    await expect(refused.fetch(s.url, { method: 'POST', body: 'x' })).rejects.toMatchObject({ code: 'ERR_INJECTED', errorClass: 'connect_refused' });
    const timeout = createClient({ policy: { ...FAST, chaos: { fault: { rate: 1, errorClass: 'timeout' } } } });
    closers.push(() => timeout.close());
    await expect(timeout.fetch(s.url, { method: 'POST', body: 'x' })).rejects.toMatchObject({ code: 'ERR_UNKNOWN_OUTCOME' });
    expect(s.count()).toBe(0);
  });

  it('a seeded share: the requests the server sees are the attempts not injected', async () => {
    const s = await server();
    const events: RelentEvent[] = [];
    const c = createClient({
      random: createSeededRandom(11),
      policy: { ...FAST, maxAttempts: 5, chaos: { outcome: { rate: 0.5, status: 503 } } },
      onEvent: (e) => events.push(e),
    });
    closers.push(() => c.close());
    let ok = 0;
    for (let i = 0; i < 20; i++) {
      const r = await c.fetch(s.url).catch(() => null);
      if (r !== null) {
        ok++;
        await r.text();
      }
    }
    const attempts = events.filter((e) => e.type === 'attempt');
    const injected = attempts.filter((e) => e.type === 'attempt' && e.injected === 'outcome').length;
    expect(injected).toBeGreaterThan(0);
    expect(s.count()).toBe(attempts.length - injected);
    expect(ok).toBe(s.count());
  });

  it('an injected latency delays the request by at least its delay', async () => {
    const s = await server();
    const c = createClient({ policy: { ...FAST, chaos: { latency: { rate: 1, delayMs: 120 } } } });
    closers.push(() => c.close());
    const t0 = performance.now();
    const r = await c.fetch(s.url);
    expect(await r.text()).toBe('real');
    expect(s.seen[0]!.at - t0).toBeGreaterThanOrEqual(119);
  });
});

describe('the undici interceptor with chaos', () => {
  it('an injected outcome at rate 1 never reaches the server; an injected fault neither', async () => {
    const s = await server();
    const agent = new Agent();
    closers.push(() => agent.close());
    const out = agent.compose(relentInterceptor({ policy: { ...FAST, chaos: { outcome: { rate: 1, status: 429 } } } }));
    await expect(request(s.url, { dispatcher: out })).rejects.toMatchObject({ code: 'ERR_INJECTED', status: 429 });
    const fault = agent.compose(relentInterceptor({ policy: { ...FAST, chaos: { fault: { rate: 1, errorClass: 'reset' } } } }));
    await expect(request(s.url, { dispatcher: fault })).rejects.toMatchObject({ code: 'ERR_INJECTED', errorClass: 'reset' });
    expect(s.count()).toBe(0);
  });
});
