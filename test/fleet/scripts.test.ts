// The Lua scripts against the TypeScript rules they implement, on the real Redis: each
// reply carries the Redis time the script used, and the TypeScript replays the step at
// that time.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { normalizeBreakerSpec, windowTrips } from '../../src/core/breaker.js';
import { normalizeBudget, type RatioBudgetSpec } from '../../src/core/budget.js';
import { fleetRateGrant, stepSharedRate, takeFromSharedBucket, type SharedBucket, type SharedRateState } from '../../src/core/fleet.js';
import { BREAKER_SYNC_SCRIPT, BREAKER_TRIAL_SCRIPT, BUDGET_SCRIPT, RATE_SCRIPT } from '../../src/fleet/scripts.js';
import { refillOf, visitMembers, type Members } from '../../src/fleet/share.js';
import { dropPrefix, REDIS_URL, redisEnabled, uniquePrefix } from './support.js';

const enabled = await redisEnabled();
const prefix = uniquePrefix('scripts');
let redis: Redis;

beforeAll(() => {
  if (!enabled) return;
  redis = new Redis(REDIS_URL);
});
afterAll(async () => {
  if (!enabled) return;
  await dropPrefix(prefix);
  redis.disconnect();
});

describe.skipIf(!enabled)('Lua scripts (real Redis)', () => {
  it("the budget script is takeFromSharedBucket() at Redis time, with exact tokens, and keeps the floor's running total (refillOf())", async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.record({ ratio: fc.constantFrom(0.1, 0.5), minPerSecond: fc.constantFrom(0, 1, 1000, 1e6), maxTokens: fc.constantFrom(1, 10, 33.3) }),
        fc.array(fc.tuple(fc.oneof(fc.double({ min: 0, max: 20, noNaN: true }), fc.constantFrom(-1, -2, -3.5)), fc.integer({ min: 0, max: 12 })), {
          minLength: 1,
          maxLength: 12,
        }),
        async (over, visits) => {
          const spec = normalizeBudget({ kind: 'ratio', ...over }) as RatioBudgetSpec;
          const key = `${prefix}{b${n++}}:budget`;
          let model: SharedBucket | null = null;
          let floor = 0;
          for (const [deposit, want] of visits) {
            const r = (await redis.eval(BUDGET_SCRIPT, 2, key, `${key}:members`, spec.maxTokens, spec.minPerSecond, deposit, want, 60_000, 'me', 60_000)) as [
              number,
              number,
              string,
              number,
              string,
            ];
            const now = Math.floor(Number(r[0]) / 1000);
            floor += refillOf(model, now, spec);
            const step = takeFromSharedBucket(model, now, spec, deposit, want);
            expect(Number(r[1])).toBe(step.granted);
            expect(Number(r[2])).toBe(step.bucket.tokens);
            expect(Number(r[4])).toBeCloseTo(floor, 9);
            model = step.bucket;
          }
          const ttl = await redis.pttl(key);
          expect(ttl).toBeGreaterThan(0);
          expect(ttl).toBeLessThanOrEqual(60_000);
        },
      ),
      { numRuns: 60, seed: 3 },
    );
  });

  it('the budget script counts the processes drawing on the bucket as visitMembers() does', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        // One time-to-live per fleet (as its processes share their settings); visits of
        // processes p0…p4, some after a pause longer than it (so that entries expire).
        fc.constantFrom(100, 60_000),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 4 }), fc.constantFrom(0, 0, 0, 0, 150)), { minLength: 1, maxLength: 10 }),
        async (ttl, visits) => {
          const key = `${prefix}{m${n++}}:budget`;
          let model: Members | null = null;
          let keyUntil = Infinity; // the members hash expires ttl after the last visit
          for (const [who, pause] of visits) {
            if (pause > 0) await new Promise((r) => setTimeout(r, pause));
            const r = (await redis.eval(BUDGET_SCRIPT, 2, key, `${key}:members`, 10, 0, 0, 0, 60_000, `p${who}`, ttl)) as [number, number, string, number];
            const now = Math.floor(Number(r[0]) / 1000);
            const stored = new Map(Object.entries(await redis.hgetall(`${key}:members`)).map(([k, v]) => [k, Number(v)]));
            // Redis expires the hash on its clock at the start of the script, TIME is read a
            // moment later: within 2 ms of the hash's expiry either may be seen. The model
            // takes what Redis stored then (the rule is checked on the other visits).
            if (Math.abs(now - keyUntil) <= 2) {
              model = { expiry: stored, pruneAt: (model as Members | null)?.pruneAt ?? 0 };
              keyUntil = now + ttl;
              continue;
            }
            const step = visitMembers(now > keyUntil && model !== null ? { expiry: new Map(), pruneAt: model.pruneAt } : model, `p${who}`, now, ttl);
            expect(Number(r[3])).toBe(step.count);
            expect(stored).toEqual(step.members.expiry);
            model = step.members;
            keyUntil = now + ttl;
          }
        },
      ),
      { numRuns: 20, seed: 5 },
    );
  });

  it('the breaker opens on the fleet window exactly when windowTrips() says so', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.record({ failureRatio: fc.constantFrom(0.2, 0.5, 1), minimumThroughput: fc.integer({ min: 1, max: 20 }) }),
        fc.array(fc.tuple(fc.nat(8), fc.nat(8)), { minLength: 1, maxLength: 8 }),
        async (over, counts) => {
          const spec = normalizeBreakerSpec({ ...over, windowMs: 60_000, buckets: 6, openMs: 5000 });
          const tag = `c${n++}`;
          const keys = [`${prefix}{${tag}}:breaker`, `${prefix}{${tag}}:window`, `${prefix}{${tag}}:trial`];
          let s = 0;
          let f = 0;
          for (const [ds, df] of counts) {
            const r = (await redis.eval(
              BREAKER_SYNC_SCRIPT,
              3,
              ...keys,
              ds,
              df,
              0,
              spec.windowMs,
              spec.buckets,
              spec.failureRatio,
              spec.minimumThroughput,
              spec.openMs,
              `${prefix}breaker`,
              tag,
              60_000,
            )) as number[];
            s += ds;
            f += df;
            const trips = df > 0 && windowTrips(spec, s, f);
            expect(r[1]).toBe(trips ? 1 : 0);
            expect([r[4], r[5]]).toEqual([s, f]);
            if (trips) {
              expect(r[3]! - r[2]!).toBe(spec.openMs);
              // Counts that arrive while open are dropped.
              const again = (await redis.eval(
                BREAKER_SYNC_SCRIPT,
                3,
                ...keys,
                5,
                5,
                0,
                spec.windowMs,
                spec.buckets,
                spec.failureRatio,
                spec.minimumThroughput,
                spec.openMs,
                `${prefix}breaker`,
                tag,
                60_000,
              )) as number[];
              expect(again[1]).toBe(1);
              const w = Object.entries(await redis.hgetall(keys[1]!));
              const sum = (c: string) => w.filter(([k]) => k.startsWith(c)).reduce((x, [, v]) => x + Number(v), 0);
              expect([sum('s'), sum('f')]).toEqual([s, f]);
              break;
            }
          }
        },
      ),
      { numRuns: 60, seed: 5 },
    );
  });

  it('one trial per half-open period: SET NX PX among many asking', async () => {
    const keys = [`${prefix}{t}:breaker`, `${prefix}{t}:window`, `${prefix}{t}:trial`];
    const openMs = 40;
    const sync = (announce: number) =>
      redis.eval(BREAKER_SYNC_SCRIPT, 3, ...keys, 0, 0, announce, 60_000, 10, 0.5, 10, openMs, `${prefix}breaker`, 't', 60_000) as Promise<number[]>;
    const trial = (op: string, id: string) =>
      redis.eval(BREAKER_TRIAL_SCRIPT, 3, ...keys, op, id, openMs, 1, `${prefix}breaker`, 't', 60_000, 10_000) as Promise<number[]>;
    expect((await trial('probe', 'p0'))[1]).toBe(0); // closed: no trial to hand out
    expect((await sync(1))[1]).toBe(1); // announced open
    expect((await trial('probe', 'p0'))[1]).toBe(1); // open, not yet elapsed
    await new Promise((r) => setTimeout(r, openMs + 5));
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => trial('probe', `p${i}`)));
    const granted = answers.map((a, i) => [a[1], i] as const).filter(([c]) => c === 3);
    expect(granted).toHaveLength(1);
    const holder = `p${granted[0]![1]}`;
    expect((await trial('probe', holder))[1]).toBe(3); // the holder asking again keeps its claim
    expect(await redis.pttl(keys[2]!)).toBeGreaterThan(9000); // claimed for 10 s, not openMs: a slow trial is not presumed lost
    // Somebody else's result does not count; the holder's failure reopens for another period.
    expect((await trial('failure', holder === 'p0' ? 'p1' : 'p0'))[1]).toBe(2);
    const reopened = await trial('failure', holder);
    expect(reopened[1]).toBe(1);
    expect((await trial('probe', 'p5'))[1]).toBe(1);
    await new Promise((r) => setTimeout(r, openMs + 5));
    expect((await trial('probe', 'p7'))[1]).toBe(3);
    expect((await trial('probe', 'p8'))[1]).toBe(2);
    expect((await trial('success', 'p7'))[1]).toBe(0); // closed for everyone
    expect(await redis.exists(keys[0]!, keys[2]!)).toBe(0);
  });

  it('the rate script is stepSharedRate() and fleetRateGrant() over the live members, at Redis time', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          rate: fc.constantFrom(1, 100, 2000),
          decrease: fc.constantFrom(0.5, 1),
          recoverMs: fc.constantFrom(10, 30_000),
          minFactor: fc.constantFrom(0.01, 0.4),
        }),
        fc.array(
          fc.tuple(fc.integer({ min: 0, max: 5 }), fc.oneof(fc.constant(0), fc.double({ min: 0, max: 5000, noNaN: true })), fc.constantFrom(-1, -1, 0, 1500)),
          { minLength: 1, maxLength: 12 },
        ),
        async (spec, visits) => {
          const tag = `r${n++}`;
          const keys = [`${prefix}{${tag}}:rate-members`, `${prefix}{${tag}}:rate`];
          const demands = new Map<number, number>();
          const grants = new Map<number, number>();
          let model: SharedRateState | null = null;
          for (const [member, demand, wait] of visits) {
            const r = (await redis.eval(
              RATE_SCRIPT,
              2,
              ...keys,
              `m${member}`,
              demand,
              60_000,
              spec.rate,
              spec.decrease,
              spec.recoverMs,
              spec.minFactor,
              wait,
              60_000,
              `${prefix}breaker`,
              tag,
            )) as [number, string, string, number, string];
            const now = Math.floor(Number(r[0]) / 1000);
            demands.set(member, demand);
            const step = stepSharedRate(model, now, spec, wait);
            model = step.state;
            const all = [...demands.entries()];
            const others = [...grants.entries()].filter(([m]) => m !== member).reduce((x, [, g]) => x + g, 0);
            const grant = fleetRateGrant(
              all.map(([, d]) => d),
              all.findIndex(([m]) => m === member),
              spec.rate * step.factor,
              others,
            );
            expect(Number(r[1])).toBeCloseTo(grant, 9);
            grants.set(member, Number(r[1]));
            expect(Number(r[4])).toBeCloseTo(step.factor, 12);
            expect(Number(r[2])).toBe(model.pausedUntil);
            expect(Number(r[3])).toBe(demands.size);
          }
        },
      ),
      { numRuns: 60, seed: 7 },
    );
  });

  it('a member that stops visiting is forgotten once its entry expires: its share goes to the others', async () => {
    const keys = [`${prefix}{gone}:rate-members`, `${prefix}{gone}:rate`];
    const visit = (id: string, demand: number, ttl: number) =>
      redis.eval(RATE_SCRIPT, 2, ...keys, id, demand, ttl, 100, 0.5, 1000, 0.01, -1, 60_000, `${prefix}breaker`, 'gone') as Promise<
        [number, string, string, number]
      >;
    await visit('a', 1000, 30);
    expect(Number((await visit('b', 1000, 60_000))[1])).toBe(0); // a holds all of it until it visits again
    expect(Number((await visit('a', 1000, 30))[1])).toBeCloseTo(50, 9);
    const both = await visit('b', 1000, 60_000);
    expect(Number(both[1])).toBeCloseTo(50, 9);
    await new Promise((r) => setTimeout(r, 40));
    const alone = await visit('b', 1000, 60_000);
    expect([Number(alone[1]), alone[3]]).toEqual([100, 1]);
  });
});
