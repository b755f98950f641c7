-- leaky_bucket.lua: leaky bucket in policing mode (HASH of level and last leak).
--
-- A full bucket rejects at once (no queueing; the shaping bucket in
-- shaping.lua is the queueing form). Amounts are fixed-point integers as in
-- token_bucket.lua: one unit is p scaled units, the bucket leaks n scaled
-- units per µs.
--
-- KEYS[1] -> HASH {l: level (scaled), ts: last leak (µs)}; missing = empty
-- ARGV[1] -> capacity (scaled: capacity*p)
-- ARGV[2] -> leak: scaled units per µs (n)
-- ARGV[3] -> cost (scaled: cost*p; 0 only checks)
-- ARGV[4] -> mode: 0 charge, 1 peek (never writes), 2 refund
-- ARGV[5] -> now in microseconds, or 0 to read Redis TIME (explicit now is for tests)
--
-- Output: {allowed (1|0), level after (scaled), retry_after_us, reset_after_us, 0}
--   reset_after_us: until the bucket is empty.
-- Allowed when level + cost <= capacity (not level < capacity, which would
-- overfill by cost-1 and refuse a request that exactly fits).
--
-- internal/lua prepends prelude_clock.lua and prelude_admission.lua: cost,
-- mode, now, MARGIN_MS, int() and the helpers used below come from there.
local key = KEYS[1]
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])

local level, elapsed
level, elapsed, now = bucket_state(key, 'l', 0) -- missing = empty
local drain = math.ceil(level / rate)
if elapsed >= drain then level = 0 else level = level - elapsed * rate end
if level < 0 then level = 0 end

local function save()
  if level <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'l', level, 'ts', now)
  redis.call('PEXPIRE', key, math.ceil(level / rate / 1000) + MARGIN_MS)
end

if mode == 2 then
  level = math.max(0, level - cost)
  save()
  return {1, level, 0, math.ceil(level / rate), 0}
end

if level + cost > cap then
  return {0, level, math.ceil((level + cost - cap) / rate), math.ceil(level / rate), 0}
end
if mode == 1 or cost == 0 then
  return {1, level + cost, 0, math.ceil((level + cost) / rate), 0}
end
level = level + cost
save()
return {1, level, 0, math.ceil(level / rate), 0}
