// The Lua scripts relent/fleet runs in Redis. Each runs atomically and reads Redis's own
// clock (TIME), so every process refills and times out on one clock. Every reply starts
// with that clock's ms, from which a process maps shared times onto its own.
//
// Arithmetic: the budget script is core/fleet.ts's takeFromSharedBucket() and share.ts's
// visitMembers(); the breaker's closed → open rule is core/breaker.ts's windowTrips().
// test/fleet/scripts.test.ts runs them against the TypeScript on random inputs.
//
// Every key a script touches carries the dependency's hash tag (`{name}`), so that in a
// Redis Cluster they live in one slot, as a script needs.

/** Effects replication (needed before Redis 5 for a script that calls TIME and then writes). */
const PRELUDE = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(us / 1000)
local function fmt(x) return string.format('%.0f', x) end
`;

/**
 * The shared bucket of a ratio budget: refill, add deposits (negative: a debt), grant up
 * to `want` tokens; and the processes drawing on it (share.ts's visitMembers()).
 * KEYS[1] the bucket (hash: tokens, at, prune, refilled), KEYS[2] the members (hash:
 * process id → expiry, Redis ms). ARGV: maxTokens, minPerSecond, deposit, want, ttlMs, id,
 * memberTtlMs. Reply: { Redis µs, granted, tokens (string, exact), processes, refilled
 * (string: every token the floor ever added, share.ts's refillOf(); a process that ran
 * alone repays its part of what was added meanwhile) }.
 * Members are counted with HLEN; expired ones are removed at most twice per memberTtlMs
 * (so a count may include processes that left less than memberTtlMs / 2 ago: a share
 * computed from it is smaller, never larger).
 */
export const BUDGET_SCRIPT = `${PRELUDE}
local max = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local deposit = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local mttl = tonumber(ARGV[7])
local v = redis.call('HMGET', KEYS[1], 'tokens', 'at', 'prune', 'refilled')
local tokens = tonumber(v[1])
local at = tonumber(v[2])
local prune = tonumber(v[3]) or 0
local refilled = tonumber(v[4]) or 0
if tokens == nil or at == nil then tokens = max; at = now end
if now > at then
  if rate > 0 then
    local before = tokens
    tokens = math.min(max, tokens + (now - at) / 1000 * rate)
    if tokens > before then refilled = refilled + (tokens - before) end
  end
  at = now
end
if deposit ~= 0 then tokens = math.min(max, tokens + deposit) end
local granted = math.min(math.floor(want), math.floor(tokens))
if granted < 0 then granted = 0 end
tokens = tokens - granted
redis.call('HSET', KEYS[2], ARGV[6], fmt(now + mttl))
if now >= prune then
  local m = redis.call('HGETALL', KEYS[2])
  for i = 1, #m, 2 do
    if (tonumber(m[i + 1]) or 0) <= now then redis.call('HDEL', KEYS[2], m[i]) end
  end
  prune = now + math.floor(mttl / 2)
end
local n = redis.call('HLEN', KEYS[2])
redis.call('PEXPIRE', KEYS[2], mttl)
local s = string.format('%.17g', tokens)
local r = string.format('%.17g', refilled)
redis.call('HSET', KEYS[1], 'tokens', s, 'at', at, 'prune', fmt(prune), 'refilled', r)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return { us, granted, s, n, r }
`;

/** Breaker reply codes (the second element of every breaker reply). */
export const BreakerCode = Object.freeze({
  /** Closed. */
  Closed: 0,
  /** Open, openUntil not reached. */
  Open: 1,
  /** Half-open: openUntil passed; the trial is someone else's (or none was asked for). */
  HalfOpen: 2,
  /** Half-open, and the one trial call of this period is this process's. */
  Granted: 3,
});

/**
 * Hands in one process's counts of the closed breaker and reads the fleet's state.
 * KEYS[1] the state (hash: openedAt, openUntil, trials), KEYS[2] the window (hash:
 * s<bucket>/f<bucket> → count), KEYS[3] the trial holder.
 * ARGV: successes, failures, announce (1: this process opened on its own evidence),
 * windowMs, buckets, failureRatio, minimumThroughput, openMs, channel, dependency, ttlMs.
 * Reply: { Redis µs, code, openedAt, openUntil (ms), windowSuccesses, windowFailures, opened }.
 * Counts that arrive while the circuit is open or half-open are dropped (as the
 * in-process breaker ignores results that arrive while open).
 */
export const BREAKER_SYNC_SCRIPT = `${PRELUDE}
local s = tonumber(ARGV[1])
local f = tonumber(ARGV[2])
local announce = tonumber(ARGV[3])
local windowMs = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local openMs = tonumber(ARGV[8])
local ttl = tonumber(ARGV[11])
local st = redis.call('HMGET', KEYS[1], 'openedAt', 'openUntil')
local openedAt = tonumber(st[1])
local openUntil = tonumber(st[2])
if openUntil ~= nil then
  local code = 1
  if now >= openUntil then code = 2 end
  return { us, code, openedAt, openUntil, 0, 0, 0 }
end
local bucketMs = windowMs / n
local cur = math.floor(now / bucketMs)
if s > 0 then redis.call('HINCRBY', KEYS[2], 's' .. cur, s) end
if f > 0 then redis.call('HINCRBY', KEYS[2], 'f' .. cur, f) end
local ws = 0
local wf = 0
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  local b = tonumber(string.sub(all[i], 2))
  if b == nil or b <= cur - n then
    redis.call('HDEL', KEYS[2], all[i])
  elseif b <= cur then
    if string.sub(all[i], 1, 1) == 's' then ws = ws + tonumber(all[i + 1]) else wf = wf + tonumber(all[i + 1]) end
  end
end
if s + f > 0 then redis.call('PEXPIRE', KEYS[2], math.ceil(windowMs + bucketMs)) end
local calls = ws + wf
local trips = f > 0 and calls >= tonumber(ARGV[7]) and wf / calls >= tonumber(ARGV[6])
if announce == 1 or trips then
  openedAt = now
  openUntil = now + openMs
  redis.call('HSET', KEYS[1], 'openedAt', openedAt, 'openUntil', openUntil, 'trials', 0)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('DEL', KEYS[3])
  redis.call('PUBLISH', ARGV[9], cjson.encode({ d = ARGV[10], s = 'open', a = fmt(openedAt), u = fmt(openUntil), n = fmt(us), r = 'failure_ratio' }))
  return { us, 1, openedAt, openUntil, ws, wf, 1 }
end
return { us, 0, 0, 0, ws, wf, 0 }
`;

/**
 * The half-open trial: ask for it (one per half-open period in the whole fleet: SET NX
 * PX; the holder's claim expires after claimMs, when the trial is presumed lost and the
 * next process may try), or report its outcome. A holder that asks again keeps its claim.
 * KEYS as BREAKER_SYNC_SCRIPT. ARGV: op (probe | success | failure | ignored), holder id,
 * openMs, successThreshold, channel, dependency, ttlMs, claimMs.
 * Reply: { Redis µs, code, openedAt, openUntil (ms) }.
 */
export const BREAKER_TRIAL_SCRIPT = `${PRELUDE}
local op = ARGV[1]
local openMs = tonumber(ARGV[3])
local st = redis.call('HMGET', KEYS[1], 'openedAt', 'openUntil')
local openedAt = tonumber(st[1])
local openUntil = tonumber(st[2])
if openUntil == nil then return { us, 0, 0, 0 } end
if op == 'probe' then
  if now < openUntil then return { us, 1, openedAt, openUntil } end
  if redis.call('SET', KEYS[3], ARGV[2], 'NX', 'PX', tonumber(ARGV[8])) or redis.call('GET', KEYS[3]) == ARGV[2] then
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]))
    return { us, 3, openedAt, openUntil }
  end
  return { us, 2, openedAt, openUntil }
end
if redis.call('GET', KEYS[3]) ~= ARGV[2] then
  local code = 1
  if now >= openUntil then code = 2 end
  return { us, code, openedAt, openUntil }
end
redis.call('DEL', KEYS[3])
if op == 'failure' then
  openedAt = now
  openUntil = now + openMs
  redis.call('HSET', KEYS[1], 'openedAt', openedAt, 'openUntil', openUntil, 'trials', 0)
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]))
  redis.call('PUBLISH', ARGV[5], cjson.encode({ d = ARGV[6], s = 'open', a = fmt(openedAt), u = fmt(openUntil), n = fmt(us), r = 'trial_failure' }))
  return { us, 1, openedAt, openUntil }
end
if op == 'success' then
  local trials = redis.call('HINCRBY', KEYS[1], 'trials', 1)
  if trials >= tonumber(ARGV[4]) then
    redis.call('DEL', KEYS[1], KEYS[2])
    redis.call('PUBLISH', ARGV[5], cjson.encode({ d = ARGV[6], s = 'closed', n = fmt(us), r = 'trial_success' }))
    return { us, 0, 0, 0 }
  end
end
return { us, 2, openedAt, openUntil }
`;

/**
 * A member's visit to a shared rate limit: hands in its demand (calls/s; an entry expires
 * unless renewed), reports a throttling answer (`wait` ≥ 0: lowers the fleet's rate once
 * a second and pauses every member until the server's wait is over; -1: none), and takes
 * its grant: core/fleet.ts's stepSharedRate(), then fleetRateGrant() over the live
 * members (its fair share within what the others hold).
 * KEYS[1] the members (hash: id → "demand grant expiresAt"), KEYS[2] the state (hash:
 * pausedUntil, factor, factorAt, lastDecrease).
 * ARGV: id, demand, memberTtlMs, rate, decrease, recoverMs, minFactor, wait, ttlMs, channel, dependency.
 * Reply: { Redis µs, grant (string, exact), pausedUntil (ms), members, factor (string) }.
 * A member granted less than half its fair share (a newcomer to a busy fleet) is
 * announced on the channel, so that the members holding more visit at once.
 */
export const RATE_SCRIPT = `${PRELUDE}
local id = ARGV[1]
local demand = tonumber(ARGV[2])
local rate = tonumber(ARGV[4])
local decrease = tonumber(ARGV[5])
local recover = tonumber(ARGV[6])
local minFactor = tonumber(ARGV[7])
local wait = tonumber(ARGV[8])
local ttl = tonumber(ARGV[9])
local mine = demand
if not (mine > 0) then mine = 0 end
local all = redis.call('HGETALL', KEYS[1])
local ds = { mine }
local others = 0
for i = 1, #all, 2 do
  if all[i] ~= id then
    local v = all[i + 1]
    local a = string.find(v, ' ', 1, true)
    local b = a and string.find(v, ' ', a + 1, true)
    local d = nil
    local g = nil
    local exp = nil
    if b then
      d = tonumber(string.sub(v, 1, a - 1))
      g = tonumber(string.sub(v, a + 1, b - 1))
      exp = tonumber(string.sub(v, b + 1))
    end
    if d == nil or g == nil or exp == nil or exp <= now then
      redis.call('HDEL', KEYS[1], all[i])
    else
      if not (d > 0) then d = 0 end
      ds[#ds + 1] = d
      if g > 0 then others = others + g end
    end
  end
end
local st = redis.call('HMGET', KEYS[2], 'pausedUntil', 'factor', 'factorAt', 'lastDecrease')
local paused = tonumber(st[1]) or 0
local factor = tonumber(st[2]) or 1
local factorAt = tonumber(st[3]) or now
local lastDecrease = tonumber(st[4]) or -1e15
local f = 1
if factor < 1 then f = math.min(1, factor + (now - factorAt) / recover) end
if wait >= 0 then
  if wait > 0 and now + wait > paused then paused = now + wait end
  if decrease < 1 and now - lastDecrease >= 1000 then
    f = math.max(math.min(1, minFactor), f * decrease)
    factor = f
    factorAt = now
    lastDecrease = now
  end
  redis.call('HSET', KEYS[2], 'pausedUntil', fmt(paused), 'factor', string.format('%.17g', factor), 'factorAt', fmt(factorAt), 'lastDecrease', fmt(lastDecrease))
end
table.sort(ds)
local n = #ds
local total = rate * f
local left = total
local own = 0
local found = false
for k = 1, n do
  local give = math.min(ds[k], left / (n - k + 1))
  left = left - give
  if not found and ds[k] == mine then
    own = give
    found = true
  end
end
own = own + left / n
local fair = own
local free = total - others
if own > free then own = free end
if own < 0 then own = 0 end
if own < fair / 2 then
  redis.call('PUBLISH', ARGV[10], cjson.encode({ rate = ARGV[11], n = fmt(us) }))
end
local g = string.format('%.17g', own)
redis.call('HSET', KEYS[1], id, string.format('%.17g', mine) .. ' ' .. g .. ' ' .. fmt(now + tonumber(ARGV[3])))
redis.call('PEXPIRE', KEYS[1], ttl)
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ttl) end
return { us, g, fmt(paused), n, string.format('%.17g', f) }
`;
