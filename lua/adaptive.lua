-- adaptive.lua: additive increase / multiplicative decrease of a
-- downstream's rate, shared by every process.
--
-- KEYS[1] -> HASH of the downstream's runtime state; fields written here:
--            ar (adaptive rate, milli-units per second), ad (last decrease,
--            µs), ai (last increase, µs)
-- ARGV[1] -> event: "dec" (429/503/timeout), "inc" (a run of successes), "get"
-- ARGV[2] -> starting rate (milli-units/s) when the hash has none
-- ARGV[3] -> floor (milli-units/s)
-- ARGV[4] -> ceiling (milli-units/s); never exceeded
-- ARGV[5] -> decrease factor in permille (e.g. 750 = ×0.75)
-- ARGV[6] -> increase step (milli-units/s)
-- ARGV[7] -> interval in µs: at most one decrease per interval (a burst of
--            429s from many workers is one signal), and increases only once
--            an interval has passed since the last change
-- ARGV[8] -> TTL in milliseconds
-- ARGV[9] -> now in microseconds, or 0 to read Redis TIME (explicit now is for tests)
--
-- Output: the adaptive rate after the event (milli-units/s).
--
-- internal/lua prepends prelude_clock.lua (now_us).

local key, event = KEYS[1], ARGV[1]
local floor, ceil = tonumber(ARGV[3]), tonumber(ARGV[4])
local factor, step, interval = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local now = now_us(ARGV[9])

local st = redis.call('HMGET', key, 'ar', 'ad', 'ai')
local ar = tonumber(st[1]) or tonumber(ARGV[2])
local ad = tonumber(st[2]) or 0
local ai = tonumber(st[3]) or 0
if ar > ceil then ar = ceil end
if ar < floor then ar = floor end

if event == 'get' then return ar end

if event == 'dec' then
  if now - ad < interval then return ar end
  ar = math.max(floor, math.floor(ar * factor / 1000))
  ad = now
elseif event == 'inc' then
  if now - ad < interval or now - ai < interval then return ar end
  ar = math.min(ceil, ar + step)
  ai = now
else
  return redis.error_reply('adaptive.lua: unknown event ' .. event)
end
redis.call('HSET', key, 'ar', ar, 'ad', ad, 'ai', ai)
redis.call('PEXPIRE', key, tonumber(ARGV[8]))
return ar
