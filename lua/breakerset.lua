-- breakerset.lua: an operator sets a downstream's circuit breaker
-- (`shaper ctl breaker NAME open|close`), for every process.
--
-- KEYS[1] -> the breaker HASH (breaker.lua)
-- ARGV[1] -> "open" (open now, for the cool-down) or "close" (closed now,
--            its window's counts forgotten: the key is deleted)
-- ARGV[2] -> now in µs, or 0 to read Redis TIME (explicit now is for tests)
-- ARGV[3] -> open: the cool-down in µs
-- ARGV[4] -> open: the max cool-down in µs (for the TTL, as breaker.lua)
--
-- Output: {state before (0 closed, 1 open, 2 half-open), existed (1: the
--   key held state)}
-- TTL: open, the cool-down plus the max cool-down plus a margin (as
--   breaker.lua); close writes nothing.
-- internal/lua prepends prelude_clock.lua (now_us).
local MARGIN_MS = 1000
local key = KEYS[1]
local before = tonumber(redis.call('HGET', key, 'st')) or 0
local existed = redis.call('EXISTS', key)
if ARGV[1] == 'close' then
  redis.call('DEL', key)
  return {before, existed}
end
if ARGV[1] ~= 'open' then
  return redis.error_reply('breakerset: ARGV[1] must be open or close')
end
local now = now_us(ARGV[2])
local cd, maxcd = tonumber(ARGV[3]), tonumber(ARGV[4])
if cd == nil or cd < 1 or maxcd == nil or maxcd < cd then
  return redis.error_reply('breakerset: ARGV[3] and ARGV[4] must be a cool-down and a max cool-down in µs')
end
redis.call('DEL', key)
redis.call('HSET', key, 'st', 1, 'since', now, 'until', now + cd, 'cd', cd)
redis.call('PEXPIRE', key, math.floor((cd + maxcd) / 1000) + MARGIN_MS)
return {before, existed}
