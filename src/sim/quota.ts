import { createOperation, type Command, type Operation } from '../core/operation.js';
import type { PolicySpec } from '../core/policy.js';
import { createSeededRandom } from '../core/random.js';
import { createTokenBucket, normalizeRateLimit, observeRateAnswer, type RateLimitSpec, type TokenBucket } from '../core/token-bucket.js';
import type { Observation } from '../core/types.js';
import { resolvePolicyInput } from '../presets/index.js';
import type { ProgressFn } from './common.js';
import { round2, sortedQuantile, streamSeed, Timeline } from './engine.js';

/**
 * A dependency that publishes a quota, in virtual time: operations arrive open-loop
 * (Poisson) at `arrivalsPerSec`, more than the dependency's `quotaPerSec` (its own token
 * bucket, `quotaBurst`); a request over the quota is answered 429 with `Retry-After:
 * retryAfterSec`, one within it 200 after `serviceMs`. Every operation is the core's
 * operation state machine with the contender's policy (429s retried after the server's
 * wait, within the deadline); a contender with a `rateLimit` first takes a token from
 * the core's token bucket — waiting in line for at most `maxWaitMs`, or refused at once
 * (`rate_limited`) — and the bucket hears every answer (a 429 pauses it and lowers its
 * rate), as `client.fetch` with `rateLimit` does.
 */
export interface QuotaConfig {
  readonly seed: number | string;
  readonly arrivalsPerSec: number;
  readonly durationMs: number;
  readonly quotaPerSec: number;
  readonly quotaBurst: number;
  readonly retryAfterSec: number;
  readonly serviceMs: number;
  readonly contenders: readonly QuotaContender[];
}

export interface QuotaContender {
  readonly name: string;
  /** A preset name or a policy object. */
  readonly policy: string | PolicySpec;
  /** The client's rate limit (relent's `rateLimit` option), or none. */
  readonly rateLimit?: RateLimitSpec | null;
}

const POLICY: PolicySpec = { preset: 'http-429', deadlineMs: 10_000 };

export const QUOTA_DEFAULTS: Readonly<QuotaConfig> = Object.freeze({
  seed: 1,
  arrivalsPerSec: 150,
  durationMs: 30_000,
  quotaPerSec: 100,
  quotaBurst: 10,
  retryAfterSec: 1,
  serviceMs: 10,
  contenders: Object.freeze([
    { name: 'no rate limit (429s retried)', policy: POLICY },
    { name: 'rateLimit at the quota (100/s)', policy: POLICY, rateLimit: { ratePerSecond: 100, burst: 10, maxWaitMs: 2000 } },
    { name: 'rateLimit at 2x the quota (learns)', policy: POLICY, rateLimit: { ratePerSecond: 200, burst: 20, maxWaitMs: 2000 } },
    { name: 'rateLimit at the quota, no wait', policy: POLICY, rateLimit: { ratePerSecond: 100, burst: 10, maxWaitMs: 0 } },
  ] as QuotaContender[]),
});

export interface QuotaRow {
  readonly name: string;
  readonly operations: number;
  /** Requests the dependency received per second, and of them answered 429. */
  readonly sentPerSec: number;
  readonly throttled: number;
  readonly succeeded: number;
  /** Refused by the client's own rate limit (no request sent). */
  readonly refused: number;
  /** Ended otherwise (deadline, attempts). */
  readonly failed: number;
  /** Requests per operation. */
  readonly amplification: number;
  /** Latency of the operations that succeeded, ms. */
  readonly p50: number;
  readonly p99: number;
}

export interface QuotaResult {
  readonly config: QuotaConfig;
  readonly rows: readonly QuotaRow[];
}

function runOne(c: QuotaConfig, k: QuotaContender): QuotaRow {
  const policy = resolvePolicyInput(k.policy);
  const arrivals = createSeededRandom(streamSeed(c.seed, 'quota', 'arrivals'));
  const jitter = createSeededRandom(streamSeed(c.seed, 'quota', 'jitter'));
  const q = new Timeline();
  // The dependency's quota: its own token bucket (never lowered: it is the server's).
  const server = createTokenBucket({ ratePerSecond: c.quotaPerSec, burst: c.quotaBurst, decrease: 1, maxWaitMs: 0 });
  const bucket: TokenBucket | null = k.rateLimit ? createTokenBucket(k.rateLimit) : null;
  const retryAfter = { 'retry-after': String(c.retryAfterSec) };
  const latencies: number[] = [];
  let now = 0,
    ops = 0,
    sent = 0,
    throttled = 0,
    ok = 0,
    refused = 0,
    failed = 0;
  // Calls waiting for a token, in line.
  const line: { grant: () => void; refuse: () => void; giveUpAt: number }[] = [];
  let lineHead = 0;
  let pumpAt = -1;
  const pump = (): void => {
    pumpAt = -1;
    while (lineHead < line.length) {
      const w = line[lineHead]!;
      if (now > w.giveUpAt) {
        lineHead++;
        w.refuse();
        continue;
      }
      if (!bucket!.tryTake(now)) break;
      lineHead++;
      w.grant();
    }
    if (lineHead > 1024 && lineHead * 2 > line.length) {
      line.splice(0, lineHead);
      lineHead = 0;
    }
    if (lineHead < line.length) {
      // (A token due "now" by the estimate but not there by a rounding: look again a moment later.)
      const at = Math.max(now + 0.01, Math.min(bucket!.readyAt(now, 0), line[lineHead]!.giveUpAt + 0.001));
      if (pumpAt < 0 || at < pumpAt) {
        pumpAt = at;
        q.push(at, pump);
      }
    }
  };

  const operation = (): void => {
    const t0 = now;
    ops++;
    const op: Operation = createOperation(policy, { method: 'GET', random: jitter });
    const call = (attempt: number, timeoutMs: number): void => {
      sent++;
      const over = !server.tryTake(now);
      if (over) throttled++;
      const took = over ? 1 : c.serviceMs;
      const obs: Observation =
        took > timeoutMs
          ? { errorClass: 'timeout', elapsedMs: timeoutMs }
          : over
            ? { status: 429, headers: retryAfter, elapsedMs: took }
            : { status: 200, elapsedMs: took };
      q.push(now + Math.min(took, timeoutMs), () => {
        const cmd = op.answered(obs, now, now, attempt);
        if (bucket !== null && obs.status !== undefined && obs.status !== null) {
          observeRateAnswer(bucket, now, obs.status, obs.headers, op.decision?.retryAfterMs ?? null, policy.throttleStatuses);
        }
        carry(cmd);
      });
    };
    const carry = (cmd: Command): void => {
      switch (cmd.kind) {
        case 'call':
        case 'hedge': {
          const attempt = cmd.attempt;
          const timeoutMs = cmd.timeoutMs;
          if (bucket === null) return call(attempt, timeoutMs);
          bucket.arrived(now);
          if (lineHead >= line.length && bucket.tryTake(now)) return call(attempt, timeoutMs);
          const bound = Math.min(bucket.spec.maxWaitMs, cmd.remainingMs);
          if (bucket.readyAt(now, line.length - lineHead) - now > bound) return carry(op.slotRefused('rate_limited'));
          line.push({
            giveUpAt: now + bound,
            // The token is taken: the call the operation grants goes at once.
            grant: () => {
              const next = op.slotGranted(now);
              if (next.kind === 'call' || next.kind === 'hedge') call(next.attempt, next.timeoutMs);
              else carry(next);
            },
            refuse: () => carry(op.slotRefused('rate_limited')),
          });
          pump();
          return;
        }
        case 'wait':
          q.push(now + cmd.delayMs, () => carry(op.timerFired(now)));
          return;
        case 'await':
          return;
        case 'check_state':
          carry(op.checked());
          return;
        case 'end':
          if (cmd.reason === 'return') {
            ok++;
            latencies.push(now - t0);
          } else if (cmd.reason === 'rate_limited') refused++;
          else failed++;
          return;
      }
    };
    carry(op.start(now));
  };
  const arrive = (): void => {
    operation();
    const gap = (-Math.log(1 - arrivals()) * 1000) / c.arrivalsPerSec;
    if (now + gap < c.durationMs) q.push(now + gap, arrive);
  };
  q.push(0, arrive);
  let end = 0;
  while (q.size > 0) {
    const e = q.pop();
    now = e.t;
    end = now;
    e.f();
  }
  latencies.sort((a, b) => a - b);
  return {
    name: k.name,
    operations: ops,
    sentPerSec: round2(sent / (Math.max(end, c.durationMs) / 1000)),
    throttled,
    succeeded: ok,
    refused,
    failed,
    amplification: ops === 0 ? 0 : round2(sent / ops),
    p50: round2(sortedQuantile(latencies, 0.5)),
    p99: round2(sortedQuantile(latencies, 0.99)),
  };
}

/** Runs every contender on the same arrivals. */
export function runQuota(config: Partial<QuotaConfig> = {}, onProgress?: ProgressFn): QuotaResult {
  const c: QuotaConfig = { ...QUOTA_DEFAULTS, ...config };
  for (const k of c.contenders) if (k.rateLimit) normalizeRateLimit(k.rateLimit);
  const rows: QuotaRow[] = [];
  c.contenders.forEach((k, i) => {
    onProgress?.(i, c.contenders.length, k.name);
    rows.push(runOne(c, k));
  });
  onProgress?.(c.contenders.length, c.contenders.length, 'done');
  return { config: c, rows };
}
