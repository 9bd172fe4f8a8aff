// A realistic event log for the CLI and browser tests: 60 s of traffic to five
// endpoints, a dependency outage from 20 s to 35 s, and one endpoint name crafted to
// break out of HTML if anything forgot to escape it.

export const HOSTILE_ENDPOINT = 'https://evil.example:443/"><script>alert(1)</script><img src=x onerror=alert(2)>';

/** mulberry32: a small seeded generator (test data only; the fixtures' figures depend on this exact sequence). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** JSON lines (with a `ts` on every attempt) and a few malformed lines. */
export function demoLog(seed = 1): string {
  const random = rng(seed);
  const out: string[] = [];
  const start = Date.parse('2026-03-01T12:00:00Z');
  const endpoints: { url: string; weight: number; recover: number }[] = [
    { url: 'https://api.example.com:443/v1/items', weight: 0.5, recover: 0.6 },
    { url: 'https://pay.example.com:443/v1/charge', weight: 0.2, recover: 0.02 },
    { url: 'https://search.example.com:443/q', weight: 0.25, recover: 0.06 },
    { url: 'https://rare.example.com:443/ping', weight: 0.012, recover: 0.5 },
    { url: HOSTILE_ENDPOINT, weight: 0.01, recover: 0.5 },
  ];
  let op = 0;
  for (let t = 0; t < 60_000; t += 20) {
    const e = (() => {
      let x = random();
      for (const c of endpoints) {
        if ((x -= c.weight) < 0) return c;
      }
      return endpoints[0]!;
    })();
    const id = `op-${op++}`;
    const outage = t >= 20_000 && t < 35_000;
    const maxAttempts = 3;
    let at = t;
    for (let a = 1; a <= maxAttempts; a++) {
      const fail = a === 1 ? (outage ? random() < 0.8 : random() < 0.05) : random() >= e.recover;
      const timeout = fail && random() < 0.2;
      const elapsed = timeout ? 1000 : Math.round(10 + random() * 60);
      const last = !fail || a === maxAttempts;
      const decision = !fail ? 'return' : last ? 'max_attempts' : 'retry';
      const delay = decision === 'retry' ? Math.floor(random() * 100 * 2 ** (a - 1)) : null;
      out.push(
        JSON.stringify({
          type: 'attempt',
          operationId: id,
          requestId: `${id}/attempt-${a}`,
          attempt: a,
          method: 'GET',
          endpoint: e.url,
          status: timeout ? null : fail ? 503 : 200,
          errorClass: timeout ? 'timeout' : null,
          elapsedMs: elapsed,
          remainingMs: 5000 - (at - t),
          decision,
          delayMs: delay,
          retryAfterMs: null,
          retryAfterValid: null,
          ts: start + at,
        }),
      );
      at += elapsed + (delay ?? 0);
      if (last) {
        out.push(
          JSON.stringify({
            type: 'result',
            operationId: id,
            status: timeout ? null : fail ? 503 : 200,
            errorClass: timeout ? 'timeout' : null,
            reason: decision,
            attempts: a,
          }),
        );
        break;
      }
    }
    if (op === 500 || op === 1700) out.push('{"type":"attempt","operationId":"broken');
  }
  return out.join('\n') + '\n';
}
