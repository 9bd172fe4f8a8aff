import { channel } from 'node:diagnostics_channel';
import type { BreakerStateChange } from '../core/breaker.js';
import type { AttemptEvent, ResultEvent } from '../core/types.js';
import { safeEndpoint } from './endpoint.js';
import { scrubEvent } from './sinks.js';

/**
 * relent's `node:diagnostics_channel` channels (undici-style zero-dependency tracing):
 * subscribe with `diagnostics_channel.subscribe('relent:attempt', fn)`. Messages are
 * the events themselves (AttemptEvent, ResultEvent, BreakerStateChange), endpoints
 * scrubbed. Publishing costs one boolean check when nobody subscribes.
 */
export const DIAGNOSTICS_CHANNELS = Object.freeze({
  attempt: 'relent:attempt',
  result: 'relent:result',
  breaker: 'relent:breaker',
} as const);

const attemptChannel = channel(DIAGNOSTICS_CHANNELS.attempt);
const resultChannel = channel(DIAGNOSTICS_CHANNELS.result);
const breakerChannel = channel(DIAGNOSTICS_CHANNELS.breaker);

/** Publishes an attempt or result event on `relent:attempt` / `relent:result`. Pass as `onEvent`. */
export function publishEvent(event: AttemptEvent | ResultEvent): void {
  const ch = event.type === 'attempt' ? attemptChannel : resultChannel;
  if (ch.hasSubscribers) ch.publish(scrubEvent(event));
}

/** Publishes a breaker state change on `relent:breaker`. Pass as a breaker's `onStateChange`. */
export function publishBreakerChange(change: BreakerStateChange): void {
  if (!breakerChannel.hasSubscribers) return;
  const name = change.name === null ? null : safeEndpoint(change.name);
  breakerChannel.publish(name === change.name ? change : { ...change, name });
}
