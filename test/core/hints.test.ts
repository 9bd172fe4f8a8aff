import { describe, expect, it } from 'vitest';
import { pickHintHeaders, SERVER_HINT_HEADERS } from '../../src/core/hints.js';

describe('pickHintHeaders: what a driver copies from a response into an observation', () => {
  it('a Headers object: only the hint headers, lower-cased', () => {
    const h = new Headers({ 'Retry-After': '3', Date: 'Mon, 30 Nov 2026 08:00:00 GMT', 'Set-Cookie': 'sid=secret', Authorization: 'Bearer x' });
    expect(pickHintHeaders(h)).toEqual({ 'retry-after': '3', date: 'Mon, 30 Nov 2026 08:00:00 GMT' });
  });
  it('a record (undici, node:http): lower-case keys, repeated values joined; other-cased keys found too', () => {
    expect(pickHintHeaders({ 'retry-after': '5', ratelimit: ['a', 'b'], 'ratelimit-policy': 'p', cookie: 'c=1' })).toEqual({
      'retry-after': '5',
      ratelimit: 'a, b',
    });
    expect(pickHintHeaders({ 'Retry-After': '7', 'X-Secret': 'nope' })).toEqual({ 'retry-after': '7' });
  });
  it('nothing to copy → undefined; junk is ignored, never thrown on', () => {
    expect(pickHintHeaders({ 'content-type': 'text/plain' })).toBeUndefined();
    expect(pickHintHeaders(null)).toBeUndefined();
    expect(pickHintHeaders('retry-after: 1')).toBeUndefined();
    expect(pickHintHeaders({ 'retry-after': 3, date: [1, 2], ratelimit: undefined })).toBeUndefined();
  });
  it('every name it copies is one the core reads', () => {
    const all = Object.fromEntries(SERVER_HINT_HEADERS.map((n) => [n.toUpperCase(), 'v']));
    expect(Object.keys(pickHintHeaders({ ...all, other: 'x' })!).sort()).toEqual([...SERVER_HINT_HEADERS].sort());
  });
});
