// The idempotent receiver: a node:http handler tested on a real loopback server (the
// dedupe table under it is tested in test/shared/idempotency-cache.test.ts).
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { createIdempotentHandler } from '../../src/delivery/receiver.js';
import { listen } from './support.js';

describe('createIdempotentHandler on node:http', () => {
  it('processes a key once; duplicates get the first response with Idempotent-Replayed; 5xx is not remembered; another body is 422', async () => {
    let processed = 0;
    let answer = 500;
    const seen: { key: string | null; duplicate: boolean; status: number }[] = [];
    const server = await listen(
      createIdempotentHandler(
        (_req, body) => {
          processed++;
          return { status: answer, headers: { 'content-type': 'text/plain' }, body: `took ${body.toString()}` };
        },
        { onRequest: (i) => seen.push(i) },
      ),
    );
    const post = async (key: string | null, body: string) => {
      const r = await request(`${server.url}/billing`, { method: 'POST', body, headers: key ? { 'idempotency-key': `"${key}"` } : {} });
      return { status: r.statusCode, replayed: r.headers['idempotent-replayed'] ?? null, text: await r.body.text() };
    };
    try {
      expect(await post('n1', 'a')).toEqual({ status: 500, replayed: null, text: 'took a' });
      answer = 200;
      expect(await post('n1', 'a')).toEqual({ status: 200, replayed: null, text: 'took a' }); // the 500 was not kept: processed
      expect(await post('n1', 'a')).toEqual({ status: 200, replayed: 'true', text: 'took a' });
      expect(await post('n1', 'b')).toMatchObject({ status: 422 });
      expect(await post(null, 'c')).toEqual({ status: 200, replayed: null, text: 'took c' }); // no key: processed, not deduped
      expect(processed).toBe(3);
      expect(seen.map((s) => [s.key, s.duplicate, s.status])).toEqual([
        ['n1', false, 500],
        ['n1', false, 200],
        ['n1', true, 200],
        ['n1', true, 422],
        [null, false, 200],
      ]);
    } finally {
      await server.close();
    }
  });

  it("concurrent duplicates: wait for the first answer (default) or 409 (the draft's choice)", async () => {
    for (const mode of ['wait', 'conflict'] as const) {
      let processed = 0;
      const server = await listen(
        createIdempotentHandler(
          async () => {
            processed++;
            await new Promise((r) => setTimeout(r, 100));
            return { status: 201, body: 'made' };
          },
          { concurrent: mode, keyOf: (req) => new URL(req.url!, 'http://x').searchParams.get('id') },
        ),
      );
      try {
        const [a, b] = await Promise.all([1, 2].map(async () => (await request(`${server.url}/n?id=7`)).statusCode));
        expect(processed).toBe(1);
        expect([a, b].sort()).toEqual(mode === 'wait' ? [201, 201] : [201, 409]);
      } finally {
        await server.close();
      }
    }
  });

  it('missingKey: reject answers 400 without processing', async () => {
    let processed = 0;
    const server = await listen(
      createIdempotentHandler(
        () => {
          processed++;
          return { status: 200 };
        },
        { missingKey: 'reject' },
      ),
    );
    try {
      const r = await request(`${server.url}/`, { method: 'POST', body: 'x' });
      expect(r.statusCode).toBe(400);
      await r.body.dump();
      expect(processed).toBe(0);
    } finally {
      await server.close();
    }
  });
});

describe('a relent/server receiver behind the delivery worker', () => {
  it("reads each attempt's number and deadline from the worker's headers (real HTTP): retries are known as retries", async () => {
    const { relentMiddleware } = await import('../../src/server/guard.js');
    const { openDeliveryQueue } = await import('../../src/delivery/queue.js');
    const events: { type: string; attempt?: number | null; deadlineMs?: number | null; deadlineSource?: string | null }[] = [];
    const guard = relentMiddleware({ onEvent: (e) => events.push(e as never) });
    let calls = 0;
    const server = await listen((req, res) =>
      guard(req, res, () => {
        req.resume();
        res.writeHead(++calls === 1 ? 503 : 200).end();
      }),
    );
    const queue = await openDeliveryQueue({
      store: 'sqlite::memory:',
      destinations: {
        d: {
          url: `${server.url}/in`,
          batch: { maxItems: 1, maxAgeMs: 0 },
          policy: { backoff: { kind: 'constant', delayMs: 20 }, maxAttempts: 3, attemptTimeoutMs: 3_000, deadlineMs: 30_000 },
        },
      },
    });
    const worker = queue.createWorker({ pollMs: 20 });
    try {
      worker.start();
      await queue.enqueue('d', { n: 1 }, { key: 'k1' });
      for (let i = 0; i < 300 && calls < 2; i++) await new Promise((r) => setTimeout(r, 10));
      expect(calls).toBe(2);
      expect(guard.stats().attempts).toMatchObject({ 1: 1, 2: 1, none: 0 });
      const admitted = events.filter((e) => e.type === 'server_request');
      expect(admitted.map((e) => e.deadlineSource)).toEqual(['x-relent-deadline-ms', 'x-relent-deadline-ms']);
      for (const e of admitted) expect(e.deadlineMs).toBe(3_000);
    } finally {
      await worker.stop();
      await queue.close();
      await server.close();
    }
  });
});
