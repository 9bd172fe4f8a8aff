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
    const server = await listen(createIdempotentHandler((_req, body) => {
      processed++;
      return { status: answer, headers: { 'content-type': 'text/plain' }, body: `took ${body.toString()}` };
    }, { onRequest: (i) => seen.push(i) }));
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
      expect(seen.map((s) => [s.key, s.duplicate, s.status])).toEqual([['n1', false, 500], ['n1', false, 200], ['n1', true, 200], ['n1', true, 422], [null, false, 200]]);
    } finally {
      await server.close();
    }
  });

  it('concurrent duplicates: wait for the first answer (default) or 409 (the draft\'s choice)', async () => {
    for (const mode of ['wait', 'conflict'] as const) {
      let processed = 0;
      const server = await listen(createIdempotentHandler(async () => {
        processed++;
        await new Promise((r) => setTimeout(r, 100));
        return { status: 201, body: 'made' };
      }, { concurrent: mode, keyOf: (req) => new URL(req.url!, 'http://x').searchParams.get('id') }));
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
    const server = await listen(createIdempotentHandler(() => {
      processed++;
      return { status: 200 };
    }, { missingKey: 'reject' }));
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
