-- fixed_window.lua: fixed window counter (STRING per window).
--
-- KEYS[1] -> base key; the counter of window N is KEYS[1]..":"..N (STRING),
--            N = floor(now / window). It shares KEYS[1]'s hash tag.
-- ARGV[1] -> limit: units admitted per window (integer >= 1)
-- ARGV[2] -> window length in microseconds (integer >= 1)
-- ARGV[3] -> cost in units (integer >= 0; 0 only checks)
-- ARGV[4] -> mode: 0 charge, 1 peek (never writes), 2 refund
-- ARGV[5] -> now in microseconds, or 0 to read Redis TIME (explicit now is for tests)
-- ARGV[6] -> refund only: the window number the charge was made in
--
-- Output: {allowed (1|0), remaining units, retry_after_us, reset_after_us, window number, pttl_ms}
--   retry_after_us is 0 when allowed; reset_after_us is the time to the
--   window's end; pttl_ms is the counter's PTTL after the call (-2: no key).
--
-- The counter is incremented only when the request is allowed, so rejected
-- requests do not inflate the count; PEXPIRE runs in this script when the
-- key is created, so a crash can never leave a counter without a TTL.
--
-- internal/lua prepends prelude_clock.lua and prelude_admission.lua: cost,
-- mode, now, MARGIN_MS, int() and the helpers used below come from there.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])

if mode == 2 then
  local k = KEYS[1] .. ':' .. ARGV[6]
  refund_counter(k)
  return {1, 0, 0, 0, tonumber(ARGV[6]), redis.call('PTTL', k)}
end

local n = math.floor(now / window)
local key = KEYS[1] .. ':' .. int(n)
local count = tonumber(redis.call('GET', key) or '0')
local reset = (n + 1) * window - now

if count + cost > limit then
  -- Nothing is written on reject. Retry at the next window; a cost above
  -- the limit is refused by the client before it gets here.
  return {0, math.max(limit - count, 0), reset, reset, n, redis.call('PTTL', key)}
end
if mode == 1 or cost == 0 then
  return {1, limit - count - cost, 0, reset, n, redis.call('PTTL', key)}
end

local c = redis.call('INCRBY', key, cost)
local pttl = redis.call('PTTL', key)
if c == cost or pttl == -1 then
  pttl = math.ceil(reset / 1000) + MARGIN_MS
  redis.call('PEXPIRE', key, pttl)
end
return {1, limit - c, 0, reset, n, pttl}
