import type { PresetDefinition } from './types.js';

/**
 * Google Cloud Model Armor "Retry strategy":
 * wait min(2^n + random_fraction, maximum_backoff) seconds, n from 0, random_fraction
 * <= 1 s, maximum_backoff 32 s (or 64 s), stop after `deadline` (300 s in the
 * example); retry 500, 502, 503, 504 (429 optionally).
 */
export const modelArmor: PresetDefinition = {
  name: 'model-armor',
  summary: 'Google Model Armor: truncated exponential backoff with jitter until a 300 s deadline',
  source: 'Google Cloud, Model Armor "Retry strategy" — https://docs.cloud.google.com/model-armor/retry-strategy',
  schedule: 'min(2^n s + U[0,1) s, 32 s), n = 0, 1, 2…; stop after 300 s; retry 500, 502, 503, 504',
  notes: [
    'maximum_backoff: 32 s (the doc allows 32 or 64; override backoff.capMs for 64 s)',
    '429 is "optional" in the doc: add it with retryOn.status if your quota allows',
    'maxAttempts is 100 so that the deadline, not a count, ends the operation, as the doc says',
    'Model Armor calls are POSTs that only inspect content (sanitize templates), so the preset declares them idempotent; the doc applies the strategy to "requests that are safe to retry"',
  ],
  spec: {
    maxAttempts: 100,
    deadlineMs: 300_000,
    idempotent: true,
    backoff: { kind: 'truncated-exponential', baseMs: 1000, capMs: 32_000, fractionMs: 1000 },
    retryOn: {
      status: [500, 502, 503, 504],
      errors: ['connect_refused', 'dns', 'connect_timeout', 'tls', 'timeout', 'reset', 'socket_closed'],
      statusWithWait: [],
    },
    retryAfter: { statuses: [503], maxMs: 32_000 },
  },
};
