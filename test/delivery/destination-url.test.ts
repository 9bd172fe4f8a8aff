// A destination URL is refused with credentials in it, as the HTTP client refuses one,
// and a URL is never echoed in an error (it may hold a token).
import { describe, expect, it } from 'vitest';
import { parseDeliveryConfig, resolveDestination } from '../../src/delivery/config.js';
import { DeliveryError } from '../../src/delivery/errors.js';
import { openDeliveryQueue } from '../../src/delivery/queue.js';
import { createClient } from '../../src/http/client.js';

const SECRET = 's3cr3t-Pa55';

function thrown(f: () => unknown): DeliveryError {
  try {
    f();
  } catch (e) {
    return e as DeliveryError;
  }
  throw new Error('expected an error');
}

describe('destination URLs', () => {
  it.each([[`https://user:${SECRET}@dest.example/in`], [`https://${SECRET}@dest.example/in`], [`https://user:${SECRET}@dest.example/in?x=1`]])(
    'credentials in %s are refused, as client.fetch refuses them, without echoing them',
    async (url) => {
      const e = thrown(() => resolveDestination('adobe', { url }));
      expect(DeliveryError.is(e)).toBe(true);
      expect(e.code).toBe('ERR_INVALID_CONFIG');
      expect(e.field).toBe('destinations.adobe.url');
      expect(e.message).toMatch(
        /no user name or password: a URL with credentials is refused \(send them in `destinations\.adobe\.headers`, e\.g\. Authorization\)/,
      );
      expect(JSON.stringify({ ...e, message: e.message, stack: e.stack })).not.toContain(SECRET);
      // The same rule as the HTTP client.
      const fetchError = await createClient()
        .fetch(url)
        .then(
          () => null,
          (x: unknown) => x as Error,
        );
      expect(fetchError?.message).toMatch(/credentials is refused/);
      // Through a config file and through openDeliveryQueue.
      expect(() => parseDeliveryConfig({ destinations: { adobe: { url } } })).toThrow(/credentials is refused/);
      await expect(openDeliveryQueue({ store: 'sqlite::memory:', destinations: { adobe: { url } } })).rejects.toThrow(/credentials is refused/);
    },
  );

  it('a malformed URL is named but never echoed (it may hold a token)', () => {
    for (const url of [`not a url ?token=${SECRET}`, `ftp://dest.example/in?token=${SECRET}`]) {
      const e = thrown(() => resolveDestination('a', { url }));
      expect(e.message).toMatch(/^Expected `destinations\.a\.url` to be an absolute http:\/\/ or https:\/\/ URL, got another string \(not shown/);
      expect(e.message).not.toContain(SECRET);
    }
    expect(thrown(() => resolveDestination('a', { url: 42 })).message).toMatch(/got 42$/);
  });

  it('a URL with a query but no credentials is accepted (some endpoints want a key there; events never show it)', () => {
    expect(resolveDestination('a', { url: `https://dest.example/in?key=${SECRET}` }).url.search).toBe(`?key=${SECRET}`);
  });
});
