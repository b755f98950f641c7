-- sliding_log.lua: sliding window log (ZSET of admitted units).
--
-- KEYS[1] -> ZSET: one member per admitted unit, scored by admission time (µs)
-- ARGV[1] -> limit: units admitted in any window (integer >= 1)
-- ARGV[2] -> window length in microseconds (integer >= 1)
-- ARGV[3] -> cost in units (integer >= 0; 0 only checks)
-- ARGV[4] -> mode: 0 charge, 1 peek (never writes), 2 refund
-- ARGV[5] -> now in microseconds, or 0 to read Redis TIME (explicit now is for tests)
-- ARGV[6] -> refund only: the admission time (score) the charge was made at
--
-- Output: {allowed (1|0), remaining units, retry_after_us, reset_after_us, admission time}
--   retry_after_us: when enough of the oldest counted entries leave the
--   window for this cost to fit (0 when allowed); reset_after_us: when the
--   newest entry leaves (the log is empty).
--
-- An entry scored s counts while now < s + window. Members are unique
-- ("<time>-<seq>", added with NX) so equal timestamps never collapse into
-- one member and under-count. Entries are added only when allowed.
--
-- internal/lua prepends prelude_clock.lua and prelude_admission.lua: cost,
-- mode, now, MARGIN_MS, int() and the helpers used below come from there.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])

if mode == 2 then
  -- Entries with one score are interchangeable for every decision, so a
  -- refund removes `cost` entries carrying the charge's score.
  local s = ARGV[6]
  local ms = redis.call('ZRANGEBYSCORE', key, s, s, 'LIMIT', 0, cost)
  if #ms > 0 then redis.call('ZREM', key, unpack(ms)) end
  return {1, 0, 0, 0, tonumber(s)}
end

local count
if mode == 1 then
  count = redis.call('ZCOUNT', key, '(' .. int(now - window), '+inf')
else
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  count = redis.call('ZCARD', key)
end

local function reset_after(extra)
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local r = 0
  if #newest > 0 then r = tonumber(newest[2]) + window - now end
  if extra and window > r then r = window end
  if r < 0 then r = 0 end
  return r
end

if count + cost > limit then
  local need = count + cost - limit -- oldest entries that must leave first
  local e = redis.call('ZRANGEBYSCORE', key, '(' .. int(now - window), '+inf', 'WITHSCORES', 'LIMIT', need - 1, 1)
  local retry = window
  if #e > 0 then retry = tonumber(e[2]) + window - now end
  if retry < 1 then retry = 1 end
  return {0, math.max(limit - count, 0), retry, reset_after(false), now}
end
if mode == 1 or cost == 0 then
  return {1, limit - count - cost, 0, reset_after(false), now}
end

local seq = count
local added = 0
while added < cost do
  if redis.call('ZADD', key, 'NX', now, now .. '-' .. seq) == 1 then
    added = added + 1
  end
  seq = seq + 1
end
redis.call('PEXPIRE', key, math.ceil(window / 1000) + MARGIN_MS)
return {1, limit - count - cost, 0, reset_after(true), now}
