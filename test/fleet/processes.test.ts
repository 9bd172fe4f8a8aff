// The fleet's acceptance figures on real processes: ten child processes (child.mjs, on
// dist/), each a createClient({ fleet }) calling one loopback node:http dependency at a
// steady offered load, against the shared Redis (a unique prefix per run) — or, for the
// kill test, a redis-server of the test's own. Scaled down from the issue's 20 s to a
// few seconds (the properties hold at this scale; `npm run bench -- fleet` has the
// full-size figure). Each test prints its figures.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { fileURLToPath } from 'node:url';
import { dropPrefix, ownRedisEnabled, ownRedis, REDIS_URL, redisEnabled, uniquePrefix } from './support.js';

const enabled = await redisEnabled();
const canSpawn = enabled && (await ownRedisEnabled());
const CHILD = fileURLToPath(new URL('./child.mjs', import.meta.url));
const DIST = fileURLToPath(new URL('../../dist/fleet/index.js', import.meta.url));
const P = 10;
/**
 * timeoutMs for the children. The default (10 ms) is for a production host; this machine
 * runs eleven Node processes and Redis on two shared cores, where a scheduler hiccup
 * alone can exceed 10 ms. Each test reports how often its processes fell back anyway.
 */
const TIMEOUT_MS = 1000;

interface Summary {
  index: number;
  sent: number[];
  statuses: Record<string, number>;
  rejections: Record<string, number>;
  breakerChanges: { to: string; reason: string; t: number }[];
  announcements: { t: number; s: string }[];
  fleetEvents: { type: string; ts: number; mode?: string; reason?: string | null }[];
  stats: { fallbacks: number; roundTrips: number; syncFailures: number; rttMs: { avg: number | null } } | null;
  problems: string[];
}

/** The dependency: answers by `answer(n)` (n counts requests), records every arrival. */
interface Arrival {
  /** When it arrived, and when its operation was started (the child's clock: same machine). */
  t: number;
  sent: number;
  attempt: number;
  child: number;
}

function dependency(): { server: Server; url: () => string; arrivals: Arrival[]; answer: { fn: (n: number) => number } } {
  const arrivals: Arrival[] = [];
  const answer = { fn: (_n: number) => 503 };
  const server = createServer((req, res) => {
    arrivals.push({
      t: Date.now(),
      sent: Number(req.headers['x-sent']),
      child: Number(req.headers['x-child']),
      attempt: Number(req.headers['x-relent-attempt'] ?? /attempt-(\d+)$/.exec(String(req.headers['x-request-id']))?.[1] ?? 0),
    });
    res.statusCode = answer.fn(arrivals.length);
    res.end('x');
  });
  return { server, arrivals, answer, url: () => `http://127.0.0.1:${(server.address() as { port: number }).port}/work` };
}

/** What a run's controller sees while the children run: their breaker and fleet events as they happen. */
interface Live {
  readonly startedAt: number;
  readonly events: { child: number; event: 'breaker' | 'fleet'; to?: string; mode?: string | null; t: number }[];
  /** Waits until `check()` holds (or fails after `ms`). */
  until(check: () => boolean, ms: number, what: string): Promise<void>;
  /** Ends the children's calls now. */
  stop(): void;
}

/** Starts P children, waits until all are ready (joined), lets them go at once, collects their summaries. */
async function fleetRun(base: Record<string, unknown>, during?: (live: Live) => Promise<void>): Promise<{ summaries: Summary[]; startedAt: number }> {
  const children: ChildProcess[] = [];
  const outputs: Promise<Summary>[] = [];
  const ready: Promise<{ joined: boolean }>[] = [];
  const events: Live['events'] = [];
  for (let i = 0; i < P; i++) {
    const child = spawn(process.execPath, [CHILD, JSON.stringify({ ...base, index: i })], { stdio: ['pipe', 'pipe', 'pipe'] });
    children.push(child);
    child.stdin!.on('error', () => {}); // a child that has ended already
    let out = '';
    let err = '';
    child.stderr!.on('data', (d) => (err += d));
    let onReady: (v: { joined: boolean }) => void;
    ready.push(new Promise((r) => (onReady = r)));
    outputs.push(
      new Promise((resolve, reject) => {
        child.stdout!.on('data', (d) => {
          out += d;
          const lines = out.split('\n');
          out = lines.pop()!;
          for (const l of lines) {
            const m = JSON.parse(l) as {
              ready?: boolean;
              joined?: boolean;
              event?: 'breaker' | 'fleet';
              to?: string;
              mode?: string | null;
              t: number;
            } & Summary;
            if (m.ready) onReady({ joined: m.joined === true });
            else if (m.event) events.push({ child: i, event: m.event, to: m.to, mode: m.mode, t: m.t });
            else resolve(m);
          }
        });
        child.on('exit', (code) => {
          if (code !== 0 || err !== '') reject(new Error(`child ${i} exited with ${code}: ${err.slice(0, 2000)}`));
        });
      }),
    );
  }
  const joined = await Promise.all(ready);
  if (base.redisUrl)
    expect(
      joined.every((j) => j.joined),
      'every child joined the fleet',
    ).toBe(true);
  const startedAt = Date.now();
  for (const c of children) c.stdin!.write('go\n');
  const stop = (): void => {
    for (const c of children) if (c.exitCode === null) c.stdin!.write('stop\n');
  };
  if (during) {
    try {
      await during({
        startedAt,
        events,
        stop,
        until: async (check, ms, what) => {
          const end = Date.now() + ms;
          while (!check()) {
            if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
            await new Promise((r) => setTimeout(r, 5));
          }
        },
      });
    } finally {
      stop();
    }
  }
  const summaries = await Promise.all(outputs);
  return { summaries, startedAt };
}

/** Whether every child's latest event of a kind says `value`. */
function all(live: Live, event: 'breaker' | 'fleet', value: string, since = 0): boolean {
  for (let i = 0; i < P; i++) {
    const last = live.events.filter((e) => e.child === i && e.event === event && e.t >= since).at(-1);
    if ((event === 'breaker' ? last?.to : last?.mode) !== value) return false;
  }
  return true;
}

const sum = (xs: number[]): number => xs.reduce((a, b) => a + b, 0);

describe.skipIf(!enabled)(`${P} processes, one dependency, one Redis`, () => {
  const dep = dependency();
  const prefixes: string[] = [];
  beforeAll(async () => {
    if (!existsSync(DIST)) throw new Error('dist/ is missing: run `npm run build` first (CI builds before testing)');
    await new Promise<void>((r) => dep.server.listen(0, '127.0.0.1', r));
  });
  afterAll(async () => {
    dep.server.close();
    for (const p of prefixes) await dropPrefix(p);
  });

  it('a dependency failing 100 %: at most (1 + ratio) x first attempts + one floor + P leases; separate budgets would give P floors', async () => {
    // relent's default budget; a long deadline, so that a busy machine cannot end a call before its answer
    const policy = { deadlineMs: 60_000, budget: { kind: 'ratio', ratio: 0.1, minPerSecond: 1, maxTokens: 10 } };
    const durationMs = 3000;
    const rate = 20;
    const figures: Record<string, { first: number; calls: number; retries: number; seconds: number; bound: number; fallbacks: number }> = {};
    for (const variant of ['fleet', 'separate'] as const) {
      dep.answer.fn = () => 503;
      dep.arrivals.length = 0;
      const prefix = uniquePrefix('p-budget');
      prefixes.push(prefix);
      const { summaries } = await fleetRun({
        url: dep.url(),
        rate,
        durationMs,
        policy,
        prefix,
        timeoutMs: TIMEOUT_MS,
        syncMs: 100,
        syncEvery: 10,
        redisUrl: variant === 'fleet' ? REDIS_URL : null,
      });
      for (const s of summaries) {
        expect(s.problems).toEqual([]);
        expect(s.rejections).toEqual({}); // every call ends with the dependency's own answer (its last 503)
      }
      const first = dep.arrivals.filter((a) => a.attempt === 1).length;
      const calls = dep.arrivals.length;
      const seconds = (Math.max(...dep.arrivals.map((a) => a.t)) - Math.min(...dep.arrivals.map((a) => a.t))) / 1000;
      const floor = policy.budget.maxTokens + policy.budget.minPerSecond * seconds;
      const lease = 1; // a tenth of maxTokens
      figures[variant] = {
        first,
        calls,
        retries: calls - first,
        seconds,
        bound: (1 + policy.budget.ratio) * first + floor + P * lease,
        fallbacks: sum(summaries.map((s) => s.stats?.fallbacks ?? 0)),
      };
      expect(first).toBe(sum(summaries.map((s) => s.sent.length)));
    }
    const f = figures.fleet!;
    const s = figures.separate!;
    process.stdout.write(
      `\n[fleet] ${P} processes x ${rate} ops/s for ${durationMs / 1000} s, dependency failing 100 %:\n` +
        `  shared budget (fleet): ${f.first} first attempts, ${f.retries} retries, ${f.calls} calls (bound ${f.bound.toFixed(1)} = 1.1 x first + floor ${(10 + f.seconds).toFixed(1)} + ${P} leases; fallbacks ${f.fallbacks})\n` +
        `  separate budgets:      ${s.first} first attempts, ${s.retries} retries, ${s.calls} calls (${P} floors = ${(P * (10 + s.seconds)).toFixed(1)})\n`,
    );
    expect(f.fallbacks).toBe(0);
    expect(f.calls).toBeLessThanOrEqual(f.bound);
    // No answer, no deposit: the retries are the floor and the leases alone.
    expect(f.retries).toBeLessThanOrEqual(10 + f.seconds + P);
    // Separate budgets spend a floor each.
    expect(s.retries).toBeGreaterThan(P * 10);
    expect(s.retries).toBeGreaterThan(3 * f.retries);
  }, 120_000);

  it('a breaker opened by one process is open in all before their next call; one trial per half-open period fleet-wide', async () => {
    const openMs = 400;
    // 40 failures in the window: no process (25 calls/s) trips on its own evidence for 1.6 s;
    // the fleet (250 calls/s) gathers them in a fraction of that.
    const breaker = { failureRatio: 0.5, minimumThroughput: 40, windowMs: 10_000, openMs };
    const base = {
      url: dep.url(),
      rate: 25,
      durationMs: 60_000,
      timeoutMs: TIMEOUT_MS,
      syncMs: 100,
      syncEvery: 5,
      policy: { maxAttempts: 1, deadlineMs: 60_000 },
      breaker,
      watch: true,
    };
    /** Calls each process made after the first open anywhere, before it had opened itself (from the dependency's records). */
    const lateCalls = (summaries: Summary[], until: number) => {
      const opens = summaries.map((s) => s.breakerChanges.find((c) => c.to === 'open')?.t ?? Number.POSITIVE_INFINITY);
      const firstOpen = Math.min(...opens);
      const late = summaries.map((_, i) => dep.arrivals.filter((a) => a.sent < until && a.child === i && a.sent > firstOpen && a.sent < opens[i]!).length);
      return { opens, firstOpen, lastOpen: Math.max(...opens), late };
    };

    // Without a fleet: every process learns the outage by failing.
    dep.answer.fn = () => 503;
    dep.arrivals.length = 0;
    const alone = await fleetRun({ ...base, redisUrl: null }, async (live) => {
      await live.until(() => all(live, 'breaker', 'open'), 30_000, 'every process to open');
    });
    const separate = lateCalls(alone.summaries, Number.POSITIVE_INFINITY);

    const prefix = uniquePrefix('p-breaker');
    prefixes.push(prefix);
    dep.arrivals.length = 0;
    let healthyFrom = Number.POSITIVE_INFINITY;
    dep.answer.fn = () => (Date.now() >= healthyFrom ? 200 : 503);
    const { summaries, startedAt } = await fleetRun({ ...base, prefix, redisUrl: REDIS_URL }, async (live) => {
      // Failing until every process is open, then for five more half-open periods; then healthy until every process has closed.
      await live.until(() => all(live, 'breaker', 'open') || all(live, 'breaker', 'half_open'), 30_000, 'every process to open');
      await new Promise((r) => setTimeout(r, 5 * openMs));
      healthyFrom = Date.now();
      await live.until(() => all(live, 'breaker', 'closed'), 30_000, 'every process to close again');
      await new Promise((r) => setTimeout(r, 300));
    });
    for (const s of [...summaries, ...alone.summaries]) expect(s.problems).toEqual([]);
    const { opens, firstOpen, lastOpen, late } = lateCalls(summaries, healthyFrom);
    // When each process could first read the announcement of the open (its own subscriber).
    const readable = summaries.map((s) => s.announcements.find((a) => a.s === 'open')?.t ?? Number.POSITIVE_INFINITY);
    // Nothing goes out while a process is open, but the one trial per half-open period.
    const failing = dep.arrivals.filter((a) => a.sent < healthyFrom);
    const trials = failing
      .filter((a) => a.sent > lastOpen)
      .map((a) => a.sent)
      .sort((x, y) => x - y);
    const gaps = trials.slice(1).map((t, k) => t - trials[k]!);
    const openFor = healthyFrom - lastOpen;
    const rtt = summaries.map((s) => s.stats?.rttMs.avg ?? 0).sort((x, y) => x - y)[P >> 1]!;
    const announced = Math.min(...readable);
    process.stdout.write(
      `\n[fleet] breaker (minimumThroughput 40, ${P} x 25 calls/s, dependency failing 100 %):\n` +
        `  fleet: first open ${firstOpen - startedAt} ms after the start, every process open ${lastOpen - firstOpen} ms later (median sync round trip ${rtt.toFixed(1)} ms, fallbacks to local ${sum(summaries.map((x) => x.stats?.fallbacks ?? 0))});\n` +
        `    the announcement readable in each process after: ${readable.map((t) => `${t - announced}`).join(' ')} ms; each opened ${summaries.map((_, i) => `${opens[i]! - readable[i]!}`).join(' ')} ms after it could read it\n` +
        `    calls made after the first open by processes not yet open: ${sum(late)} (${late.join(' ')})\n` +
        `  separate breakers: first open ${separate.firstOpen - alone.startedAt} ms after the start, every process open ${separate.lastOpen - separate.firstOpen} ms later;\n` +
        `    calls made after the first open by processes not yet open: ${sum(separate.late)} (${separate.late.join(' ')})\n` +
        `  trials while failing: ${trials.length} in ${openFor} ms (openMs ${openMs}), gaps ${gaps.join(', ')} ms\n`,
    );
    // Once the announcement can be read in a process (its own subscriber has it), the process
    // makes no more calls: the one round trip of pub/sub is all it takes. (How long Redis and
    // the OS take to deliver it is this machine's; the calls made meanwhile are printed above.
    // 300 ms of slack: Redis writes the announcement to the two connections one after the
    // other, and on this loaded 2-core machine they were seen up to 150 ms apart.)
    for (let i = 0; i < P; i++) {
      const after = dep.arrivals.filter((a) => a.child === i && a.sent > readable[i]! + 300 && a.sent < opens[i]!).length;
      expect(after, `calls process ${i} made after it could read the announcement`).toBe(0);
    }
    // One trial per half-open period: never two within openMs (a failed trial reopens the
    // circuit for openMs), and with calls coming in every few ms, one soon after each period
    // ends (the slack is this busy machine's: the trial's own answer, a round trip to ask for it).
    expect(trials.length).toBeGreaterThanOrEqual(3);
    for (const g of gaps) expect(g).toBeGreaterThanOrEqual(openMs - 30);
    for (const g of gaps) expect(g).toBeLessThan(openMs + 1500);
    // After the recovery one trial succeeds and every process closes and gets answers again.
    for (const s of summaries) {
      expect(s.breakerChanges.at(-1)?.to).toBe('closed');
      expect(s.statuses['200'] ?? 0).toBeGreaterThan(0);
    }
  }, 180_000);
});

describe.skipIf(!canSpawn)(`${P} processes, Redis killed mid-run (own redis-server)`, () => {
  it("every call ends with the dependency's answer, no error from relent; the fleet rejoins within a second", async () => {
    const redis = await ownRedis();
    const dep = dependency();
    await new Promise<void>((r) => dep.server.listen(0, '127.0.0.1', r));
    dep.answer.fn = (n) => (n % 3 === 0 ? 503 : 200);
    let restartingAt = 0; // redis-server started again…
    let restartedAt = 0; // …and answering
    let killedAt = 0;
    try {
      const { summaries } = await fleetRun(
        {
          url: dep.url(),
          rate: 20,
          durationMs: 60_000,
          prefix: 'kill:',
          timeoutMs: TIMEOUT_MS,
          syncMs: 100,
          syncEvery: 10,
          redisUrl: redis.url,
          policy: { deadlineMs: 60_000 },
          breaker: { failureRatio: 0.9, minimumThroughput: 50 },
        },
        async (live) => {
          await new Promise((r) => setTimeout(r, 1000));
          killedAt = Date.now();
          await redis.stop();
          await live.until(() => all(live, 'fleet', 'local', killedAt), 10_000, 'every process to fall back');
          await new Promise((r) => setTimeout(r, 1000));
          restartingAt = Date.now();
          await redis.start();
          restartedAt = Date.now();
          await live.until(() => all(live, 'fleet', 'fleet', restartingAt), 10_000, 'every process to rejoin');
          await new Promise((r) => setTimeout(r, 500));
        },
      );
      const rejoin: number[] = [];
      let others = 0;
      for (const s of summaries) {
        expect(s.problems).toEqual([]);
        expect(s.rejections).toEqual({}); // no call failed by relent: each resolved with the dependency's answer
        expect(sum(Object.values(s.statuses))).toBe(s.sent.length);
        const modes = s.fleetEvents.filter((e) => e.type === 'fleet_mode');
        // joined; fell back when Redis died (said once however many reconnection attempts failed); joined again
        expect(modes[0]!.mode).toBe('fleet');
        const fell = modes.find((e) => e.mode === 'local' && e.ts >= killedAt - 5);
        expect(fell, `child ${s.index} fell back`).toBeDefined();
        expect(modes.filter((e) => e.mode === 'local' && e.ts >= killedAt - 5 && e.ts < restartingAt)).toHaveLength(1);
        const back = modes.find((e) => e.mode === 'fleet' && e.ts >= restartingAt);
        expect(back, `child ${s.index} rejoined`).toBeDefined();
        // From the moment Redis answered the test's own ping (a child may even be first).
        rejoin.push(Math.max(0, back!.ts - restartedAt));
        others += modes.filter((e) => e.mode === 'local' && (e.ts < killedAt - 5 || e.ts > restartingAt) && e.reason !== 'the fleet was closed').length;
      }
      process.stdout.write(
        `\n[fleet] Redis killed for 1 s: rejoin after restart ${rejoin.map((r) => `${r} ms`).join(', ')}; calls ${sum(summaries.map((s) => s.sent.length))}, all answered; other fallbacks (slow syncs) ${others}\n`,
      );
      for (const r of rejoin) expect(r).toBeLessThan(1000);
    } finally {
      dep.server.close();
      await redis.stop();
    }
  }, 120_000);
});
