import { createHedgeState, type HedgeState } from '../core/hedge.js';
import { createOperation, type Command, type Operation } from '../core/operation.js';
import type { PolicySpec } from '../core/policy.js';
import { resolvePolicyInput } from '../presets/index.js';
import { createSeededRandom } from '../core/random.js';
import type { Observation } from '../core/types.js';
import type { ProgressFn } from './common.js';
import { round2, sortedQuantile, streamSeed, Timeline } from './engine.js';

/**
 * A dependency with a slow tail, in virtual time, and what hedging does about it: GETs
 * arrive open-loop (Poisson) at `arrivalsPerSec`; each request to the dependency takes
 * about `fastMs` (± `fastJitter`), or `slowMs` for a `slowShare` of them
 * (independently per request: "The Tail at Scale"). From `failAtMs` for `failForMs` a `failShare` of the requests are answered
 * 503 after `fastMs` instead (a dependency failing, not slow): hedging must stop there.
 * Every operation is the core's operation state machine (createOperation) with the
 * contender's policy and one hedging state for the dependency, as `client.fetch` does:
 * hedges, their wins, aborted losers and the extra load are the real rules'.
 */
export interface TailConfig {
  readonly seed: number | string;
  readonly arrivalsPerSec: number;
  readonly durationMs: number;
  readonly fastMs: number;
  /** The fast requests take fastMs × U[1 − fastJitter, 1 + fastJitter]. */
  readonly fastJitter: number;
  readonly slowMs: number;
  readonly slowShare: number;
  readonly failAtMs: number;
  readonly failForMs: number;
  readonly failShare: number;
  readonly contenders: readonly TailContender[];
}

export interface TailContender {
  readonly name: string;
  /** A preset name or a policy object (with or without `hedge`). */
  readonly policy: string | PolicySpec;
}

export const TAIL_DEFAULTS: Readonly<TailConfig> = Object.freeze({
  seed: 1,
  arrivalsPerSec: 200,
  durationMs: 40_000,
  fastMs: 5,
  fastJitter: 0.2,
  slowMs: 500,
  slowShare: 0.02,
  failAtMs: 30_000,
  failForMs: 10_000,
  failShare: 0.5,
  contenders: Object.freeze([
    { name: 'no hedging', policy: { preset: 'http-429', deadlineMs: 5000 } },
    { name: 'hedge at p95 (maxExtraLoad 5 %)', policy: { preset: 'http-429', deadlineMs: 5000, hedge: { delayMs: 'p95' } } },
    { name: 'hedge at p90, maxExtraLoad 15 %', policy: { preset: 'http-429', deadlineMs: 5000, hedge: { delayMs: 'p90', maxExtraLoad: 0.15 } } },
    {
      name: '20 ms attempt timeout + 1 retry',
      policy: { preset: 'http-429', deadlineMs: 5000, attemptTimeoutMs: 20, maxAttempts: 2, backoff: { kind: 'constant', delayMs: 0 } },
    },
  ] as TailContender[]),
});

export interface TailRow {
  readonly name: string;
  /** Operations started before the failing window: their latency (ms), extra requests and failures. */
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  /** Requests beyond one per operation, as a share of operations. */
  readonly extra: number;
  readonly failed: number;
  readonly hedges: number;
  readonly hedgesWon: number;
  /** The failing window: operations, hedges sent, requests per operation. */
  readonly failingOperations: number;
  readonly failingHedges: number;
  readonly failingAmplification: number;
}

export interface TailResult {
  readonly config: TailConfig;
  readonly rows: readonly TailRow[];
}

function runOne(c: TailConfig, k: TailContender): TailRow {
  const policy = resolvePolicyInput(k.policy);
  const hedging: HedgeState = createHedgeState();
  // The same arrivals and the same draws per request for every contender.
  const arrivals = createSeededRandom(streamSeed(c.seed, 'tail', 'arrivals'));
  const requests = createSeededRandom(streamSeed(c.seed, 'tail', 'requests'));
  const jitter = createSeededRandom(streamSeed(c.seed, 'tail', 'jitter'));
  const q = new Timeline();
  const failEnd = c.failAtMs + c.failForMs;
  const failing = (t: number): boolean => t >= c.failAtMs && t < failEnd;
  const latencies: number[] = [];
  let ops = 0,
    sent = 0,
    failed = 0,
    hedges = 0,
    won = 0;
  let fOps = 0,
    fSent = 0,
    fHedges = 0;
  let now = 0;

  const operation = (): void => {
    const t0 = now;
    const inFailing = failing(t0);
    if (inFailing) fOps++;
    else ops++;
    const op: Operation = createOperation(policy, { method: 'GET', hedging, random: jitter });
    let done = false;
    let hedgeTimer = 0; // which hedge timer is current (a new call or hedge replaces it)
    const flying = new Map<number, number>(); // attempt → start
    const carry = (cmd: Command): void => {
      switch (cmd.kind) {
        case 'call':
        case 'hedge': {
          if (cmd.kind === 'hedge') {
            if (inFailing) fHedges++;
            else hedges++;
          }
          if (inFailing) fSent++;
          else sent++;
          const attempt = cmd.attempt;
          const start = now;
          flying.set(attempt, start);
          const r = requests();
          const fail = failing(now) && requests() < c.failShare;
          const fast = c.fastMs * (1 - c.fastJitter + 2 * c.fastJitter * requests());
          const took = fail ? fast : r < c.slowShare ? c.slowMs : fast;
          const timeoutMs = cmd.timeoutMs;
          const obs: Observation = took > timeoutMs ? { errorClass: 'timeout', elapsedMs: timeoutMs } : { status: fail ? 503 : 200, elapsedMs: took };
          q.push(start + Math.min(took, timeoutMs), () => {
            if (done || !flying.has(attempt)) return;
            flying.delete(attempt);
            carry(op.answered(obs, now, undefined, attempt));
          });
          if (cmd.hedgeInMs !== null) {
            const mine = ++hedgeTimer;
            q.push(now + cmd.hedgeInMs, () => {
              if (done || mine !== hedgeTimer) return;
              carry(op.hedgeDue(now));
            });
          }
          return;
        }
        case 'wait':
          q.push(now + cmd.delayMs, () => {
            if (!done) carry(op.timerFired(now));
          });
          return;
        case 'await':
          return;
        case 'check_state':
          carry(op.checked());
          return;
        case 'end': {
          done = true;
          // The losers of a hedge are aborted: their time so far is a latency of at least that.
          for (const start of flying.values()) op.lost(now - start);
          flying.clear();
          if (op.hedgeWon) won++;
          if (cmd.reason !== 'return') {
            if (!inFailing) failed++;
          }
          if (!inFailing) latencies.push(now - t0);
          return;
        }
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
  while (q.size > 0) {
    const e = q.pop();
    now = e.t;
    e.f();
  }
  latencies.sort((a, b) => a - b);
  return {
    name: k.name,
    p50: round2(sortedQuantile(latencies, 0.5)),
    p99: round2(sortedQuantile(latencies, 0.99)),
    p999: round2(sortedQuantile(latencies, 0.999)),
    extra: ops === 0 ? 0 : round2(sent / ops - 1),
    failed,
    hedges,
    hedgesWon: won,
    failingOperations: fOps,
    failingHedges: fHedges,
    failingAmplification: fOps === 0 ? 0 : round2(fSent / fOps),
  };
}

/** Runs every contender on the same arrivals and the same per-request draws. */
export function runTail(config: Partial<TailConfig> = {}, onProgress?: ProgressFn): TailResult {
  const c: TailConfig = { ...TAIL_DEFAULTS, ...config };
  const rows: TailRow[] = [];
  c.contenders.forEach((k, i) => {
    onProgress?.(i, c.contenders.length, k.name);
    rows.push(runOne(c, k));
  });
  onProgress?.(c.contenders.length, c.contenders.length, 'done');
  return { config: c, rows };
}
