// Each row of WIRE_ERROR_TABLE against a real socket behaviour on loopback: what the
// client reports (errorClass, sent) when undici fails in that way, one attempt only.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, it, expect, afterAll } from 'vitest';
import { Agent } from 'undici';
import { ERROR_MESSAGE_CLASSES, errorClassOfCode } from '../../src/core/error-codes.js';
import { createClient } from '../../src/http/client.js';
import { classifyWireError, WIRE_ERROR_TABLE, WireError } from '../../src/core/wire.js';
import { RelentFetchError } from '../../src/http/errors.js';
import { closedPort, eventLog, selfSignedCert, startRawServer, startServer } from '../http/helpers.js';
import { runtimeBin } from '../support/runtimes.js';

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups) await c();
});

const once = { maxAttempts: 1, deadlineMs: 3000 } as const;

/** One attempt; returns the error and the attempt event. */
async function failOnce(url: string, init: Parameters<ReturnType<typeof createClient>['fetch']>[1] = {}, agent?: Agent) {
  const log = eventLog();
  const client = createClient({ policy: once, onEvent: log.onEvent, ...(agent ? { dispatcher: agent } : {}) });
  cleanups.push(() => client.close());
  const error = await client.fetch(url, init).then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(RelentFetchError);
  return { error: error as RelentFetchError, attempt: log.attempts()[0]!, result: log.result()! };
}

describe('WIRE_ERROR_TABLE', () => {
  it('covers every error class, and only a started request can be unknown', () => {
    for (const [cls, row] of Object.entries(WIRE_ERROR_TABLE)) {
      expect(row.before_request.sent, cls).toBe('not_sent');
      expect(row.after_request.sent, cls).toBe('unknown');
    }
    expect(classifyWireError({ code: 'ECONNREFUSED' }, 'before_request')).toEqual({ errorClass: 'connect_refused', sent: 'not_sent' });
    expect(classifyWireError({ code: 'ETIMEDOUT' }, 'after_request')).toEqual({ errorClass: 'timeout', sent: 'unknown' });
    expect(classifyWireError({ cause: { code: 'HPE_SOMETHING_NEW' } }, 'after_request')).toEqual({ errorClass: 'protocol', sent: 'unknown' });
    expect(classifyWireError(new Error('what'), 'before_request')).toEqual({ errorClass: 'error', sent: 'not_sent' });
  });
});

describe('each row against a real socket', () => {
  it('closed port → connect_refused, not_sent (ECONNREFUSED)', async () => {
    const port = await closedPort();
    const { error, attempt } = await failOnce(`http://127.0.0.1:${port}/`, { method: 'POST', body: 'x' });
    expect(error.errorClass).toBe('connect_refused');
    expect(error.sent).toBe('not_sent');
    expect((error.cause as { code?: string }).code).toBe('ECONNREFUSED');
    expect(attempt).toMatchObject({ errorClass: 'connect_refused', decision: 'max_attempts' });
  });

  it('DNS failure (.invalid) → dns, not_sent', async () => {
    const { error } = await failOnce('http://relent-test.invalid/');
    expect(error.errorClass).toBe('dns');
    expect(error.sent).toBe('not_sent');
    expect(['ENOTFOUND', 'EAI_AGAIN', 'EAI_NONAME', 'EAI_FAIL']).toContain((error.cause as { code?: string }).code);
  });

  it('TLS server with a self-signed certificate the client rejects → tls, not_sent', async () => {
    const s = await startServer((_q, res) => res.end('secret'), { tls: selfSignedCert() });
    cleanups.push(() => s.close());
    const { error } = await failOnce(s.url, { method: 'POST', body: 'x' });
    expect(error.errorClass).toBe('tls');
    expect(error.sent).toBe('not_sent');
    expect(s.count()).toBe(0);
  });

  it('TLS handshake that never completes → connect_timeout, not_sent (UND_ERR_CONNECT_TIMEOUT)', async () => {
    const raw = await startRawServer(() => {
      /* accept the TCP connection, never answer the ClientHello */
    });
    cleanups.push(() => raw.close());
    const agent = new Agent({ connect: { timeout: 150 } });
    const { error } = await failOnce(`https://127.0.0.1:${raw.port}/`, { method: 'POST', body: 'x' }, agent);
    expect(error.errorClass).toBe('connect_timeout');
    expect(error.sent).toBe('not_sent');
    expect((error.cause as { code?: string }).code).toBe('UND_ERR_CONNECT_TIMEOUT');
  });

  it('reset during the TLS handshake → reset, not_sent (nothing of the request was written)', async () => {
    const raw = await startRawServer((socket) => socket.resetAndDestroy());
    cleanups.push(() => raw.close());
    const { error } = await failOnce(`https://127.0.0.1:${raw.port}/`, { method: 'POST', body: 'x' });
    expect(['reset', 'socket_closed', 'tls']).toContain(error.errorClass);
    expect(error.sent).toBe('not_sent');
  });

  it('reset before the server read the body → reset, unknown (the request head was written)', async () => {
    const raw = await startRawServer((socket, got) => {
      if (got.includes('\r\n\r\n')) socket.resetAndDestroy();
    });
    cleanups.push(() => raw.close());
    const { error } = await failOnce(`${raw.origin}/orders`, { method: 'POST', body: 'x'.repeat(10) });
    expect(['reset', 'socket_closed']).toContain(error.errorClass);
    expect(error.sent).toBe('unknown');
    expect(error.code).toBe('ERR_UNKNOWN_OUTCOME'); // a POST without key: check_state
  });

  it('reset after the server read the body → reset, unknown', async () => {
    const s = await startServer((req) => req.socket.resetAndDestroy());
    cleanups.push(() => s.close());
    const { error, attempt } = await failOnce(`${s.origin}/orders`, { method: 'POST', body: 'pay 10' });
    expect(s.seen.map((x) => x.body)).toEqual(['pay 10']);
    expect(error.errorClass).toBe('reset');
    expect(error.sent).toBe('unknown');
    expect(attempt.decision).toBe('check_state');
  });

  it('socket closed without an answer → socket_closed, unknown (UND_ERR_SOCKET)', async () => {
    const s = await startServer((req) => req.socket.end());
    cleanups.push(() => s.close());
    const { error } = await failOnce(`${s.origin}/`);
    expect(error.errorClass).toBe('socket_closed');
    expect(error.sent).toBe('unknown');
    expect((error.cause as { code?: string }).code).toBe('UND_ERR_SOCKET');
  });

  it('a server that hangs, undici headersTimeout → timeout, unknown (UND_ERR_HEADERS_TIMEOUT)', async () => {
    const s = await startServer(() => {
      /* never answers */
    });
    cleanups.push(() => s.close());
    const agent = new Agent({ headersTimeout: 100 });
    const { error } = await failOnce(s.url, {}, agent);
    expect(error.errorClass).toBe('timeout');
    expect(error.sent).toBe('unknown');
    expect((error.cause as { code?: string }).code).toBe('UND_ERR_HEADERS_TIMEOUT');
  });

  it('a server that hangs, relent attempt timeout → timeout, unknown', async () => {
    const s = await startServer(() => {
      /* never answers */
    });
    cleanups.push(() => s.close());
    const t0 = performance.now();
    const { error, attempt } = await failOnce(s.url, { attemptTimeoutMs: 100 });
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(error.errorClass).toBe('timeout');
    expect(error.sent).toBe('unknown');
    expect(attempt.elapsedMs).toBeGreaterThanOrEqual(95);
  });

  it('attempt timeout while still connecting → connect_timeout, not_sent', async () => {
    const raw = await startRawServer(() => {});
    cleanups.push(() => raw.close());
    // https to a server that never answers the handshake: the request never starts.
    const { error } = await failOnce(`https://127.0.0.1:${raw.port}/`, { method: 'POST', body: 'x', attemptTimeoutMs: 100 });
    expect(error.errorClass).toBe('connect_timeout');
    expect(error.sent).toBe('not_sent');
  });

  it('an answer that is not HTTP → protocol, unknown (HPE_*)', async () => {
    const raw = await startRawServer((socket, got) => {
      if (got.includes('\r\n\r\n')) socket.end('HELLO THERE\r\n\r\n');
    });
    cleanups.push(() => raw.close());
    const { error } = await failOnce(`${raw.origin}/`);
    expect(error.errorClass).toBe('protocol');
    expect(error.sent).toBe('unknown');
    expect((error.cause as { name?: string }).name).toBe('HTTPParserError');
  });

  it("the caller's abort → aborted, never retried (terminal cancelled)", async () => {
    const s = await startServer(() => {
      /* never answers */
    });
    cleanups.push(() => s.close());
    const log = eventLog();
    const client = createClient({ policy: { maxAttempts: 5, deadlineMs: 3000 }, onEvent: log.onEvent });
    cleanups.push(() => client.close());
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('user gave up')), 50);
    const error = (await client.fetch(s.url, { signal: ac.signal }).catch((e: unknown) => e)) as RelentFetchError;
    expect(error.code).toBe('ERR_CANCELLED');
    expect(error.errorClass).toBe('aborted');
    expect(log.attempts()).toHaveLength(1);
    expect(log.attempts()[0]!.decision).toBe('cancelled');
    expect(s.count()).toBe(1);
  });

  it('WireError carries the class for the default classifier', () => {
    const e = new WireError(Object.assign(new Error('x'), { code: 'ECONNRESET' }), { errorClass: 'reset', sent: 'unknown' });
    expect(WireError.is(e)).toBe(true);
    expect(e.message).toBe('reset (ECONNRESET): the request may have reached the server');
  });
});

// Deno's own fetch rejects with TypeError "fetch failed" and a cause that has no code, only
// a message. The messages below are Deno 2.9.6's, as its fetch printed them on loopback.
describe("errors without a code: Deno's fetch", () => {
  const refused = new TypeError('fetch failed', {
    cause: new Error('error sending request for url (http://127.0.0.1:45741/): client error (Connect): tcp connect error: Connection refused (os error 111)'),
  });
  const dns = new TypeError('fetch failed', {
    cause: new Error(
      'error sending request for url (http://relent-test.invalid/): client error (Connect): dns error: failed to lookup address information: Name or service not known',
    ),
  });

  it('a refused connection is connect_refused, a failed lookup dns; nothing else matches', () => {
    expect(errorClassOfCode(refused)).toBe('connect_refused');
    expect(errorClassOfCode(dns)).toBe('dns');
    expect(classifyWireError(refused, 'before_request')).toEqual({ errorClass: 'connect_refused', sent: 'not_sent' });
    expect(classifyWireError(dns, 'before_request')).toEqual({ errorClass: 'dns', sent: 'not_sent' });
    expect(
      errorClassOfCode(
        new TypeError('fetch failed', { cause: new Error('error sending request for url (http://x/): connection closed before message completed') }),
      ),
    ).toBeNull();
    expect(errorClassOfCode(new Error('Connection refused by the remote user'))).toBeNull();
    // A code, when there is one, wins over the message.
    expect(errorClassOfCode(Object.assign(new Error('tcp connect error: Connection refused'), { code: 'ECONNRESET' }))).toBe('reset');
    expect(ERROR_MESSAGE_CLASSES.map(([, cls]) => cls)).toEqual(['connect_refused', 'dns']);
  });

  const deno = runtimeBin('deno');
  it.skipIf(deno === null)('under Deno, run() over fetch: a refused POST is retried as connect_refused, an unknown name is dns', async () => {
    const root = fileURLToPath(new URL('../..', import.meta.url));
    const script = `
      import { run } from './dist/index.js';
      const out = {};
      for (const [name, url] of [['refused', Deno.args[0]], ['dns', 'http://relent-test.invalid/']]) {
        const events = [];
        await run(({ signal }) => fetch(url, { method: 'POST', body: 'x', signal }), {
          method: 'POST', policy: { maxAttempts: 3, deadlineMs: 5000, backoff: { kind: 'constant', delayMs: 1 } }, onEvent: (e) => events.push(e),
        }).catch(() => {});
        out[name] = events.find((e) => e.type === 'result');
      }
      console.log(JSON.stringify(out));`;
    const url = `http://127.0.0.1:${await closedPort()}/`;
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(deno!, ['eval', '--ext=js', script, url], { cwd: root, timeout: 60_000 }, (err, out, stderr) =>
        err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(out),
      );
    });
    const out = JSON.parse(stdout) as Record<string, { errorClass: string; reason: string; attempts: number }>;
    expect(out.refused).toMatchObject({ errorClass: 'connect_refused', reason: 'max_attempts', attempts: 3 });
    expect(out.dns).toMatchObject({ errorClass: 'dns', reason: 'max_attempts', attempts: 3 });
  });
});
