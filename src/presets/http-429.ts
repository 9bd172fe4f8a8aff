import type { PresetDefinition } from './types.js';

/**
 * A generic policy for rate-limited APIs (RFC 6585 §4, RFC 9110 §10.2.3): Retry-After first (never earlier, a
 * small positive jitter after it), otherwise capped full jitter; stop when the delay
 * exceeds the cap or the time left; check cancellation, safety and the shared budget
 * before every retry.
 */
export const http429: PresetDefinition = {
  name: 'http-429',
  summary: 'Rate-limited APIs (429/503): Retry-After first, capped full jitter otherwise, shared budget, stop when the wait is too long',
  source:
    'RFC 6585 §4 "429 Too Many Requests" — https://www.rfc-editor.org/rfc/rfc6585#section-4; RFC 9110 §10.2.3 "Retry-After" — https://www.rfc-editor.org/rfc/rfc9110#section-10.2.3; full jitter as in Marc Brooker, "Exponential Backoff And Jitter" (AWS Architecture Blog, 2015) — https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/',
  schedule: 'Retry-After + U[0, clamp(10%, 100 ms, 1 s)) when valid, else U[0, min(30 s, 1 s·2^n)); stop if the wait > 30 s or >= time left; 5 calls in 60 s',
  notes: [
    "one cap serves both the server's wait and the backoff: 30 s",
    'retries 429 and 503 (the statuses that carry Retry-After) and transport failures',
    'the shared budget is the ratio budget (failed retries within 10% of answered calls + 1 retry/s; a retry waits for it within the deadline)',
  ],
  spec: {
    maxAttempts: 5,
    deadlineMs: 60_000,
    backoff: { kind: 'full-jitter', baseMs: 1000, capMs: 30_000, multiplier: 2 },
    retryOn: { status: [429, 503], errors: ['connect_refused', 'dns', 'connect_timeout', 'tls', 'timeout', 'reset', 'socket_closed'] },
    retryAfter: { statuses: [429, 503], maxMs: 30_000, jitterRatio: 0.1, jitterMinMs: 100, jitterMaxMs: 1000 },
    budget: { kind: 'ratio', ratio: 0.1, minPerSecond: 1, maxTokens: 10 },
  },
};
