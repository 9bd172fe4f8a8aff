import type { PresetDefinition } from './types.js';

/**
 * Adobe Experience Platform Destination SDK, streaming destinations, best-effort
 * aggregation (Adobe's "Rate limiting and retry policy" page): retry 403, 408, 409, 429, 500, 502, 503,
 * 504; two retries, after 15 s and after 30 s; nothing else (400 is not); then the
 * activation is dropped.
 */
export const adobeBestEffort: PresetDefinition = {
  name: 'adobe-best-effort',
  summary: 'Adobe Destination SDK best-effort aggregation: 2 retries at +15 s and +30 s, then drop',
  source:
    'Adobe Experience Platform, "Rate limiting and retry policy for streaming destinations built with Destination SDK" — https://experienceleague.adobe.com/en/docs/experience-platform/destinations/destination-sdk/functionality/rate-limiting-retry-policy',
  schedule: 'retry 403, 408, 409, 429, 500, 502, 503, 504 after 15 s, then after 30 s; 3 calls in all; 400 and others not retried',
  notes: [
    'Adobe resends activations, so the preset declares the operation idempotent (the delivery queue also sends an idempotency key per batch)',
    'transport failures (refused, reset, timeout) are retried on the same schedule; the doc names only status codes',
    'a valid Retry-After longer than the schedule is honoured (relent never retries earlier than a server asks)',
    'a 429 uses up one of the two retries, as the doc lists 429 with the other retried codes',
  ],
  spec: {
    maxAttempts: 3,
    deadlineMs: 120_000,
    attemptTimeoutMs: 30_000,
    idempotent: true,
    backoff: { kind: 'schedule', delaysMs: [15_000, 30_000] },
    retryOn: {
      status: [403, 408, 409, 429, 500, 502, 503, 504],
      errors: ['connect_refused', 'dns', 'connect_timeout', 'tls', 'timeout', 'reset', 'socket_closed'],
      statusWithWait: [],
    },
    safeStatuses: [403, 408, 409, 429, 500, 502, 503, 504],
    retryAfter: { maxMs: 60_000 },
  },
};

/**
 * Adobe Destination SDK, configurable aggregation (the same page): retry
 * 420, 429 and "codes greater than 500"; everything else is not retried; rate-limited
 * items are retried 30 minutes later (durably: the delivery queue holds them).
 */
export const adobeConfigurable: PresetDefinition = {
  name: 'adobe-configurable',
  summary: 'Adobe Destination SDK configurable aggregation: 420, 429 and >500 retried 30 minutes later (durable)',
  source:
    'Adobe Experience Platform, "Rate limiting and retry policy for streaming destinations built with Destination SDK" — https://experienceleague.adobe.com/en/docs/experience-platform/destinations/destination-sdk/functionality/rate-limiting-retry-policy',
  schedule: 'retry 420, 429 and 501–599 after 30 min, or later if a Retry-After asks (up to 1 h); waits over 60 s are deferred to the durable queue',
  notes: [
    '"greater than 500" is read literally: 500 itself is NOT retried (the Japanese page says "the 500s"; add 500 to retryOn.status to follow it)',
    'the doc shows one re-attempt; relent allows 3 calls for failures other than 429 and 10 rate-limited deferrals, within a 6 h deadline (our choice: 10 × 30 min fits)',
    'in-process drivers hand the 30 min wait to the durable queue (decision `defer`); the queue schedules it',
    'a 429 deferral does not use up an attempt (the doc re-attempts rate-limited items; 3 calls bound the other failures); at most 10 deferrals',
    'a Retry-After can lengthen the 30 minutes, never shorten them (retryAfter.lengthenOnly): 429 with Retry-After: 5 is retried after 30 min, with Retry-After: 2400 after 40 min; one over the 1 h cap stops',
  ],
  spec: {
    maxAttempts: 3,
    deadlineMs: 21_600_000,
    attemptTimeoutMs: 30_000,
    idempotent: true,
    backoff: { kind: 'schedule', delaysMs: [1_800_000] },
    retryOn: {
      status: [420, 429, '>500'],
      errors: ['connect_refused', 'dns', 'connect_timeout', 'tls', 'timeout', 'reset', 'socket_closed'],
      statusWithWait: [],
    },
    safeStatuses: [420, 429, '>500'],
    retryAfter: { statuses: [420, 429, 503], maxMs: 3_600_000, lengthenOnly: true },
    deferOverMs: 60_000,
    throttleCountsAsAttempt: false,
    maxThrottledAttempts: 10,
  },
};
