import type { BackoffSpec } from '../core/backoff.js';
import { createOperation, type Command, type Operation } from '../core/operation.js';
import { withOverrides } from '../presets/index.js';
import { budgetFor, resolveSimPolicy, round, statusObservation, type ProgressFn, type ResolvedSimPolicy } from './common.js';
import { EventQueue, Sampler, streamSeed } from './engine.js';
import type { SimPolicy } from './policies.js';

/**
 * Brooker's optimistic-concurrency contention experiment ("Exponential Backoff And
 * Jitter", AWS Architecture Blog, 2015), set up as in the blog's own simulator
 * (https://github.com/aws-samples/aws-arch-backoff-simulator): one row with one version number; each client updates it exactly
 * once: it reads the version, then writes conditionally; the write succeeds only if
 * the version is unchanged (and bumps it). On a failed write the client sleeps
 * net + backoff and reads again. Every message takes |N(10, 2)|. Work = write calls;
 * completion time = when the last client has its answer.
 *
 * Every client's write is one operation of the core (createOperation): a failed write
 * is the observation `409`, the policy retries 409, has no deadline to speak of and
 * 10 000 attempts. An attempt is a read followed by the conditional write.
 */
export interface BrookerConfig {
  readonly seed: number | string;
  /** Runs per (clients, strategy) cell, averaged. Brooker: 100. */
  readonly runs: number;
  /** Client counts. Brooker's 2015 code: 10, 20, …, 190. */
  readonly clients: readonly number[];
  /** Message delay |N(meanMs, sdMs)|. Brooker: mean 10, sd 2. */
  readonly network: { readonly meanMs: number; readonly sdMs: number };
  /** The strategies compared (relent policies; 409 is made retryable and the write idempotent). */
  readonly strategies: readonly SimPolicy[];
}

export interface BrookerRow {
  readonly clients: number;
  readonly strategy: string;
  /** Write calls per run (the blog's "client work"), averaged over the runs. */
  readonly work: number;
  /** When the last client has its answer, averaged over the runs (ms). */
  readonly completionTime: number;
  /** Clients whose policy gave up before their write succeeded (0 for Brooker's strategies), per run. */
  readonly gaveUp: number;
}

export interface BrookerResult {
  readonly rows: BrookerRow[];
  /** Write calls simulated in all (every one a decide() call). */
  readonly attempts: number;
}

/** Brooker's base and cap (ms). */
export const BROOKER_BASE_MS = 5;
export const BROOKER_CAP_MS = 2000;

/**
 * Brooker's five strategies as relent backoff specs.
 *
 * Brooker's simulator increments the attempt counter before computing the backoff, so
 * its first wait uses n = 1: min(cap, 5·2^n) = 10, 20, 40, … relent counts retries
 * from n = 0 (min(cap, base·2^n)), so the same waits need base 10: 10·2^0 = 10 = 5·2^1.
 * Full and equal jitter take the same base. Decorrelated jitter does not use n
 * (sleep = min(cap, U(base, 3·previous)), starting from base), so it keeps base 5.
 * relent returns whole milliseconds (floors each wait); Brooker's waits are real
 * numbers — a difference below 1 ms per wait.
 */
export const BROOKER_BACKOFFS: Readonly<Record<string, BackoffSpec>> = Object.freeze({
  none: { kind: 'constant', delayMs: 0 },
  exponential: { kind: 'exponential', baseMs: 2 * BROOKER_BASE_MS, capMs: BROOKER_CAP_MS, multiplier: 2 },
  full: { kind: 'full-jitter', baseMs: 2 * BROOKER_BASE_MS, capMs: BROOKER_CAP_MS, multiplier: 2 },
  equal: { kind: 'equal-jitter', baseMs: 2 * BROOKER_BASE_MS, capMs: BROOKER_CAP_MS, multiplier: 2 },
  decorrelated: { kind: 'decorrelated-jitter', baseMs: BROOKER_BASE_MS, capMs: BROOKER_CAP_MS },
});

/** The policy a Brooker client runs with a given backoff: retry the conflict, no other limit. */
export function brookerPolicySpec(backoff: BackoffSpec): SimPolicy['policy'] {
  return {
    maxAttempts: 10_000,
    deadlineMs: 2 ** 31 - 1,
    backoff,
    retryOn: { status: [409], errors: [] },
    retryAfter: { honor: false },
    idempotent: true,
    budget: null,
  };
}

export const BROOKER_STRATEGIES: readonly SimPolicy[] = Object.freeze(
  Object.entries(BROOKER_BACKOFFS).map(([name, backoff]) => ({ name, policy: brookerPolicySpec(backoff), budget: false })),
);

export const BROOKER_DEFAULTS: BrookerConfig = Object.freeze({
  seed: 1,
  runs: 100,
  clients: Object.freeze(Array.from({ length: 19 }, (_, i) => (i + 1) * 10)),
  network: Object.freeze({ meanMs: 10, sdMs: 2 }),
  strategies: BROOKER_STRATEGIES,
});

const READ = 0;
const WRITE = 1;
const OBS_CONFLICT = statusObservation(409);
const OBS_OK = statusObservation(200);

/**
 * A strategy of the experiment: Brooker's own run as given; any other relent policy
 * (a user's) is run as the client's policy with 409 made retryable and the
 * conditional write declared idempotent (a failed conditional write changed nothing).
 */
function resolveStrategy(s: SimPolicy, field: string): ResolvedSimPolicy {
  const r = resolveSimPolicy(s, field);
  if (BROOKER_STRATEGIES.includes(s)) return r;
  const policy = withOverrides(r.policy, { retryOn: { status: [409] }, idempotent: true });
  return { ...r, policy };
}

/** Runs the experiment; rows in (clients, strategy) order. */
export function runBrooker(config: Partial<BrookerConfig> = {}, onProgress?: ProgressFn): BrookerResult {
  const c: BrookerConfig = { ...BROOKER_DEFAULTS, ...config };
  const strategies = c.strategies.map((s, i) => resolveStrategy(s, `strategies[${i}]`));
  const queue = new EventQueue(256);
  const rows: BrookerRow[] = [];
  let attempts = 0;
  // Progress in units of expected work (~clients² per run) so the bar moves evenly.
  const total = c.clients.reduce((a, n) => a + n * n, 0) * strategies.length;
  let done = 0;
  for (const n of c.clients) {
    for (const s of strategies) {
      let work = 0;
      let time = 0;
      let gaveUp = 0;
      for (let run = 0; run < c.runs; run++) {
        const r = brookerRun(queue, n, s, c, run);
        work += r.writes;
        time += r.completionTime;
        gaveUp += r.gaveUp;
      }
      attempts += work;
      rows.push({
        clients: n,
        strategy: s.name,
        work: round(work / c.runs, 2),
        completionTime: round(time / c.runs, 2),
        gaveUp: round(gaveUp / c.runs, 2),
      });
      done += n * n;
      onProgress?.(done, total, `brooker ${n} clients, ${s.name}`);
    }
  }
  return { rows, attempts };
}

/** One run of one cell: returns write calls, completion time and clients that gave up. */
function brookerRun(
  queue: EventQueue,
  n: number,
  s: ResolvedSimPolicy,
  c: BrookerConfig,
  run: number,
): { writes: number; completionTime: number; gaveUp: number } {
  const rng = new Sampler(streamSeed(c.seed, 'brooker', n, s.name, run));
  const mean = c.network.meanMs;
  const sd = c.network.sdMs;
  const policy = s.policy;
  const ops: Operation[] = new Array<Operation>(n);
  // 1: the operation has asked for the next call (a read, then the write), 0: it is waiting.
  const calling = new Uint8Array(n);
  const seen = new Int32Array(n);
  let version = 0;
  let writes = 0;
  let last = 0;
  let gaveUp = 0;
  queue.clear();
  for (let i = 0; i < n; i++) {
    const op = createOperation(policy, { idempotent: true, budget: budgetFor(s), random: rng.uniform });
    ops[i] = op;
    calling[i] = op.start(0).kind === 'call' ? 1 : 0;
    // client.start(0): the read request reaches the server after one network delay
    queue.push(rng.absNormal(mean, sd), READ, i);
  }
  while (queue.pop()) {
    const t = queue.time;
    const i = queue.id;
    const op = ops[i]!;
    if (queue.kind === READ) {
      // The server answers with the current version; the client writes on receipt.
      seen[i] = version;
      const sendAt = t + rng.absNormal(mean, sd);
      if (calling[i] === 0) {
        const cmd: Command = op.timerFired(sendAt);
        if (cmd.kind === 'wait') {
          // The retry waits for the client's budget: read again after the wait.
          queue.push(sendAt + cmd.delayMs, READ, i);
          continue;
        }
        if (cmd.kind !== 'call') {
          gaveUp++;
          if (sendAt > last) last = sendAt;
          continue;
        }
      }
      calling[i] = 0;
      queue.push(sendAt + rng.absNormal(mean, sd), WRITE, i);
      continue;
    }
    // WRITE reaches the server: a conditional write on the version the client read.
    writes++;
    const ok = seen[i] === version;
    if (ok) version++;
    const answerAt = t + rng.absNormal(mean, sd);
    // The client's operation hears the answer. Computed here, at the write's arrival, with
    // now = the answer's arrival: it depends only on this client's own state.
    const cmd = op.answered(ok ? OBS_OK : OBS_CONFLICT, answerAt);
    if (cmd.kind === 'wait') {
      // Brooker: sleep net.delay() + backoff, then the read reaches the server.
      queue.push(answerAt + rng.absNormal(mean, sd) + cmd.delayMs, READ, i);
    } else {
      if (!ok) gaveUp++;
      if (answerAt > last) last = answerAt;
    }
  }
  return { writes, completionTime: last, gaveUp };
}
