import type { PresetDefinition } from './types.js';

/**
 * A bid request inside an auction (relent's rule, on OpenRTB 2.6's transport): retry only failures before the
 * partner started processing (refused connection, TLS failure, an immediate 503), at
 * most one extra attempt, only if the time left covers a whole partner timeout; never
 * after a timeout; never on 204 or nbr; the same BidRequest.id on the retry.
 * Worked example: tmax 300, partner timeout 120, auction deadline 260.
 */
export const openrtbBid: PresetDefinition = {
  name: 'openrtb-bid',
  summary: 'OpenRTB bid request inside an auction: one immediate retry of pre-send failures, only if a full partner timeout still fits',
  source:
    'OpenRTB 2.6, §2.1 "Transport", §4.2.1 "BidResponse" (no-bid forms, nbr) and BidRequest.tmax — https://github.com/InteractiveAdvertisingBureau/openrtb2.x/blob/main/2.6.md; which failures are retried, and only if a whole partner timeout still fits, is relent\'s rule',
  schedule: 'retry refused / DNS / connect timeout / TLS failure and 503 once, at once, if remaining >= attempt timeout (120 ms); never a timeout, 204 or nbr',
  notes: [
    'the exchange sets deadlineMs to the auction deadline and attemptTimeoutMs/minAttemptMs to the partner timeout per call',
    'a timeout is not retried (the partner is slow; the other answers are waiting) and, being a bid, needs no state check',
    'same BidRequest.id on the retry: the preset declares the request idempotent so the 503 retry is allowed',
  ],
  spec: {
    maxAttempts: 2,
    deadlineMs: 260,
    attemptTimeoutMs: 120,
    minAttemptMs: 120,
    idempotent: true,
    unknownOutcome: 'stop',
    backoff: { kind: 'constant', delayMs: 0 },
    retryOn: { status: [503], errors: ['connect_refused', 'dns', 'connect_timeout', 'tls'] },
    retryAfter: { honor: false },
    budget: null,
  },
};

/**
 * Billing notices (burl) (OpenRTB 2.6 implementation guide §7.8): "If an entity calling a billing
 * notice receives a response other than HTTP 200 or 204, it should consider a retry
 * scheme (e.g., every 10 seconds for the next minute)"; the receiver is idempotent.
 */
export const openrtbBillingNotice: PresetDefinition = {
  name: 'openrtb-billing-notice',
  summary: 'OpenRTB billing notice: retry anything but 200/204 every 10 s for a minute (the receiver dedupes)',
  source:
    'OpenRTB 2.6 implementation guide, §7.8 "Counting Billable Events and Tracked Ads" (the same text as OpenRTB 3.0 "Event: Billing") — https://github.com/InteractiveAdvertisingBureau/openrtb2.x/blob/main/implementation.md',
  schedule: 'every 10 s for the next minute: 1 call + up to 6 retries; success is exactly 200 or 204',
  notes: [
    'every status but 200 and 204 is retried, including other 2xx and 4xx, as the text says',
    'idempotent: the receiver must dedupe (key: request id + impression id), so repeats are safe',
    'fixed 10 s with no jitter, as documented; notices are independent, so they do not move in waves',
  ],
  spec: {
    maxAttempts: 7,
    deadlineMs: 70_000,
    attemptTimeoutMs: 5_000,
    idempotent: true,
    backoff: { kind: 'constant', delayMs: 10_000 },
    retryOn: {
      status: ['100-199', '201-203', '205-999'],
      errors: ['connect_refused', 'dns', 'connect_timeout', 'tls', 'timeout', 'reset', 'socket_closed', 'protocol'],
    },
    retryAfter: { maxMs: 10_000 },
  },
};

/** Between auctions and background work: full jitter (Brooker 2015), 200 ms base, 10 s cap. */
export const backgroundFullJitter: PresetDefinition = {
  name: 'background-full-jitter',
  summary: 'Background work and asking again after no fill: full jitter random(0, min(10 s, 200 ms·2^n))',
  source:
    'Marc Brooker, "Exponential Backoff And Jitter" (AWS Architecture Blog, 2015) — https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/ — "full jitter": delay(n) = random(0, min(cap, base × 2^n)); base 200 ms and cap 10 s are relent\'s choice for work between auctions',
  schedule: 'U[0, min(10 s, 200 ms·2^n)), n = 0, 1, 2…; 8 calls within 2 min',
  notes: ['attempts and deadline are our choice too: the formula fixes only the delays (never a tight loop)'],
  spec: {
    maxAttempts: 8,
    deadlineMs: 120_000,
    backoff: { kind: 'full-jitter', baseMs: 200, capMs: 10_000, multiplier: 2 },
  },
};
