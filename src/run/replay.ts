import { createRetryBudget } from '../core/budget.js';
import { RelentError, describe } from '../core/errors.js';
import { pickHintHeaders } from '../core/hints.js';
import { parseHttpDate } from '../core/http-date.js';
import { ERROR_CLASSES, type Policy, type PolicySpec, type PresetName } from '../core/policy.js';
import { createSeededRandom } from '../core/random.js';
import type { ErrorClass, SendState } from '../core/types.js';
import { withOverrides, resolvePolicyInput } from '../presets/index.js';
import { createTestClock } from '../shared/test-clock.js';
import { execute, type AttemptContext, type Classified, type RelentEvent, type RunResult } from './run.js';

/** One recorded or hand-written attempt outcome. */
export interface TimelineObservation {
  readonly status?: number;
  readonly errorClass?: ErrorClass;
  readonly elapsedMs: number;
  readonly headers?: Readonly<Record<string, string>>;
  readonly nbr?: number;
  readonly sent?: SendState;
}

/** A timeline: a policy, a seed and the observations to replay in virtual time. */
export interface Timeline {
  readonly operationId: string;
  readonly method: string;
  readonly idempotencyKey?: string;
  readonly idempotent?: boolean;
  readonly endpoint?: string;
  readonly policy?: PresetName | PolicySpec;
  readonly seed: number | string;
  readonly observations: readonly TimelineObservation[];
  readonly stateCheck?: { readonly status?: number; readonly errorClass?: ErrorClass; readonly elapsedMs?: number };
  /** Wall clock at the start (HTTP-date or epoch ms), for Retry-After dates without a Date header. */
  readonly wallClock?: string | number;
  readonly name?: string;
  readonly description?: string;
  /** What the example expects (checked by `relent demo`). */
  readonly expect?: { readonly reason?: string; readonly attempts?: number; readonly status?: number | null };
}

const TIMELINE_KEYS = new Set([
  'operationId',
  'method',
  'idempotencyKey',
  'idempotent',
  'endpoint',
  'policy',
  'seed',
  'observations',
  'stateCheck',
  'wallClock',
  'name',
  'description',
  'expect',
]);
const OBSERVATION_KEYS = new Set(['status', 'errorClass', 'elapsedMs', 'headers', 'nbr', 'sent', 'note']);

/** The default wall clock of a replay: 2026-01-01T00:00:00Z. */
export const REPLAY_WALL_START = Date.UTC(2026, 0, 1);

function bad(where: string, message: string): RelentError {
  return new RelentError('ERR_INVALID_INPUT', `${where}: ${message}`, { field: where });
}

function checkStatusOrError(o: Record<string, unknown>, where: string): void {
  const hasStatus = o.status !== undefined && o.status !== null;
  const hasError = o.errorClass !== undefined && o.errorClass !== null;
  if (hasStatus === hasError) throw bad(where, 'needs exactly one of `status` and `errorClass`');
  if (hasStatus && (typeof o.status !== 'number' || !Number.isInteger(o.status) || o.status < 100 || o.status > 999)) {
    throw bad(`${where}.status`, `expected an HTTP status 100-999, got ${describe(o.status)}`);
  }
  if (hasError && (typeof o.errorClass !== 'string' || !(o.errorClass in ERROR_CLASSES))) {
    throw bad(`${where}.errorClass`, `expected one of ${Object.keys(ERROR_CLASSES).join(', ')}, got ${describe(o.errorClass)}`);
  }
}

/**
 * Checks a parsed timeline and returns it typed, with warnings for fields it ignores.
 * Errors are RelentErrors (`ERR_INVALID_INPUT`) whose message starts with where the
 * problem is, e.g. `observations[2].elapsedMs: expected …`.
 */
export function parseTimeline(input: unknown, where = 'timeline'): { timeline: Timeline; warnings: string[] } {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw bad(where, `expected a JSON object, got ${describe(input)}`);
  const t = input as Record<string, unknown>;
  const warnings: string[] = [];
  for (const k of Object.keys(t)) if (!TIMELINE_KEYS.has(k)) warnings.push(`${where}.${k}: unknown field ignored`);
  if (typeof t.operationId !== 'string' || t.operationId.length === 0 || t.operationId.length > 200) {
    throw bad(`${where}.operationId`, `expected a non-empty string, got ${describe(t.operationId)}`);
  }
  const method = t.method ?? 'GET';
  if (typeof method !== 'string' || !/^[A-Za-z]{1,20}$/.test(method)) throw bad(`${where}.method`, `expected an HTTP method, got ${describe(t.method)}`);
  if (t.idempotencyKey !== undefined && t.idempotencyKey !== null && typeof t.idempotencyKey !== 'string') {
    throw bad(`${where}.idempotencyKey`, `expected a string, got ${describe(t.idempotencyKey)}`);
  }
  if (t.idempotent !== undefined && typeof t.idempotent !== 'boolean') throw bad(`${where}.idempotent`, `expected a boolean, got ${describe(t.idempotent)}`);
  if (t.endpoint !== undefined && typeof t.endpoint !== 'string') throw bad(`${where}.endpoint`, `expected a string, got ${describe(t.endpoint)}`);
  const seed = t.seed ?? 1;
  if (!(typeof seed === 'string' || (typeof seed === 'number' && Number.isFinite(seed))))
    throw bad(`${where}.seed`, `expected a number or a string, got ${describe(seed)}`);
  if (t.policy !== undefined && typeof t.policy !== 'string' && (typeof t.policy !== 'object' || t.policy === null || Array.isArray(t.policy))) {
    throw bad(`${where}.policy`, `expected a preset name or a policy object, got ${describe(t.policy)}`);
  }
  try {
    resolvePolicyInput(t.policy ?? null);
  } catch (e) {
    if (RelentError.is(e))
      throw new RelentError('ERR_INVALID_INPUT', `${where}.policy: ${e.message}`, { field: `${where}.policy${e.field ? '.' + e.field : ''}`, cause: e });
    throw e;
  }
  if (!Array.isArray(t.observations) || t.observations.length === 0) throw bad(`${where}.observations`, 'expected a non-empty array');
  if (t.observations.length > 10_000) throw bad(`${where}.observations`, 'at most 10000 observations');
  t.observations.forEach((o: unknown, i: number) => {
    const w = `${where}.observations[${i}]`;
    if (typeof o !== 'object' || o === null || Array.isArray(o)) throw bad(w, `expected an object, got ${describe(o)}`);
    const r = o as Record<string, unknown>;
    for (const k of Object.keys(r)) if (!OBSERVATION_KEYS.has(k)) warnings.push(`${w}.${k}: unknown field ignored`);
    checkStatusOrError(r, w);
    if (typeof r.elapsedMs !== 'number' || !Number.isFinite(r.elapsedMs) || r.elapsedMs < 0 || r.elapsedMs > 2 ** 31 - 1) {
      throw bad(`${w}.elapsedMs`, `expected a number of ms >= 0, got ${describe(r.elapsedMs)}`);
    }
    if (r.headers !== undefined) {
      if (typeof r.headers !== 'object' || r.headers === null || Array.isArray(r.headers))
        throw bad(`${w}.headers`, 'expected an object of header names to string values');
      for (const [k, v] of Object.entries(r.headers)) if (typeof v !== 'string') throw bad(`${w}.headers.${k}`, `expected a string, got ${describe(v)}`);
    }
    if (r.nbr !== undefined && r.nbr !== null && (typeof r.nbr !== 'number' || !Number.isInteger(r.nbr) || r.nbr < 0)) {
      throw bad(`${w}.nbr`, `expected a non-negative integer no-bid reason, got ${describe(r.nbr)}`);
    }
    if (r.sent !== undefined && r.sent !== 'not_sent' && r.sent !== 'sent' && r.sent !== 'unknown')
      throw bad(`${w}.sent`, `expected not_sent, sent or unknown, got ${describe(r.sent)}`);
  });
  if (t.stateCheck !== undefined && t.stateCheck !== null) {
    if (typeof t.stateCheck !== 'object' || Array.isArray(t.stateCheck)) throw bad(`${where}.stateCheck`, 'expected an object');
    checkStatusOrError(t.stateCheck as Record<string, unknown>, `${where}.stateCheck`);
  }
  if (t.wallClock !== undefined) {
    if (parseWallClock(t.wallClock) === undefined)
      throw bad(`${where}.wallClock`, `expected an HTTP-date, an ISO date or epoch ms, got ${describe(t.wallClock)}`);
  }
  return { timeline: { ...(t as unknown as Timeline), method: method.toUpperCase(), seed }, warnings };
}

/** A timeline's wall clock (an HTTP-date, an ISO date or epoch ms) as epoch ms; undefined if it is none of those. */
function parseWallClock(v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isFinite(v) ? v : undefined;
  if (typeof v !== 'string') return undefined;
  const ms = parseHttpDate(v, REPLAY_WALL_START) ?? Date.parse(v);
  return Number.isNaN(ms) ? undefined : ms;
}

function wallStart(t: Timeline): number {
  return parseWallClock(t.wallClock) ?? REPLAY_WALL_START;
}

export interface ReplayOutput {
  readonly events: readonly RelentEvent[];
  readonly result: RunResult<Classified>;
  readonly policy: Policy;
}

/**
 * Replays a timeline in virtual time through the real executor (`run()` on a test
 * clock): call k takes observation k (with chaos, an injected fault or outcome makes no
 * call and takes none); one that takes longer than its attempt was
 * allowed becomes a `timeout` at that bound. The timeline ends the operation: its
 * last observation is the last attempt the policy may make. Same input, same output.
 */
export async function replay(t: Timeline): Promise<ReplayOutput> {
  let policy = resolvePolicyInput(t.policy ?? null);
  if (t.observations.length < policy.maxAttempts) policy = withOverrides(policy, { maxAttempts: t.observations.length });
  const clock = createTestClock({ now: 0, wallNow: wallStart(t) });
  const events: RelentEvent[] = [];

  const scripted =
    (o: { status?: number; errorClass?: ErrorClass; elapsedMs?: number; headers?: Readonly<Record<string, string>>; nbr?: number; sent?: SendState }) =>
    (ctx: AttemptContext): Promise<Classified> =>
      new Promise<Classified>((resolve, reject) => {
        const cancel = clock.setTimer(() => {
          if (o.status !== undefined && o.status !== null) {
            const headers = pickHintHeaders(o.headers);
            resolve({ status: o.status, ...(headers ? { headers } : {}), ...(o.nbr !== undefined && o.nbr !== null ? { nbr: o.nbr } : {}) });
          } else {
            reject({ errorClass: o.errorClass, ...(o.sent ? { sent: o.sent } : {}) });
          }
        }, o.elapsedMs ?? 0);
        ctx.signal.addEventListener(
          'abort',
          () => {
            cancel();
            reject(ctx.signal.reason);
          },
          { once: true },
        );
      });

  const attempts = t.observations.map(scripted);
  // The k-th call takes observation k: an attempt the policy's chaos answered made no call.
  let calls = 0;
  const p = execute<Classified>((ctx) => attempts[calls++]!(ctx), {
    policy,
    clock,
    random: createSeededRandom(t.seed),
    operationId: t.operationId,
    method: t.method,
    ...(t.endpoint !== undefined ? { endpoint: t.endpoint } : {}),
    ...(t.idempotencyKey ? { idempotencyKey: t.idempotencyKey } : {}),
    ...(t.idempotent !== undefined ? { idempotent: t.idempotent } : {}),
    budget: policy.budget ? createRetryBudget(policy.budget) : null,
    classifyValue: (v) => v,
    onEvent: (e) => events.push(e),
    ...(t.stateCheck ? { stateCheck: scripted(t.stateCheck) } : {}),
  });
  let settled = false;
  let result: RunResult<Classified> | undefined;
  let failure: unknown;
  p.then(
    (r) => {
      settled = true;
      result = r;
    },
    (e: unknown) => {
      settled = true;
      failure = e;
    },
  );
  for (let idle = 0; !settled;) {
    if (await clock.next()) idle = 0;
    else if (++idle > 100) throw new RelentError('ERR_INVALID_INPUT', 'replay stalled: no timer pending and the operation did not end (internal error)');
  }
  if (failure !== undefined) throw failure;
  return { events, result: result!, policy };
}
