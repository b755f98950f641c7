-- sliding_counter.lua: sliding window counter (two STRING counters).
--
-- KEYS[1] -> base key; window N's counter is KEYS[1]..":"..N (STRING),
--            N = floor(now / window); the estimate reads N and N-1. Both
--            share KEYS[1]'s hash tag.
-- ARGV[1] -> limit: units admitted per window (integer >= 1)
-- ARGV[2] -> window length in microseconds (integer >= 1)
-- ARGV[3] -> cost in units (integer >= 0; 0 only checks)
-- ARGV[4] -> mode: 0 charge, 1 peek (never writes), 2 refund
-- ARGV[5] -> now in microseconds, or 0 to read Redis TIME (explicit now is for tests)
-- ARGV[6] -> refund only: the window number the charge was made in
--
-- Output: {allowed (1|0), remaining units, retry_after_us, reset_after_us, window number}
--
-- estimate = prev * (1 - elapsed/window) + cur. The comparison is done
-- multiplied through by the window, in integers:
--   prev*(window-elapsed) + (cur+cost)*window <= limit*window
-- The decision is made before incrementing: a rejected request writes
-- nothing. Window N's counter lives 2 windows (it is "previous" in N+1).
--
-- internal/lua prepends prelude_clock.lua and prelude_admission.lua: cost,
-- mode, now, MARGIN_MS, int() and the helpers used below come from there.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])

if mode == 2 then
  refund_counter(KEYS[1] .. ':' .. ARGV[6])
  return {1, 0, 0, 0, tonumber(ARGV[6])}
end

local n = math.floor(now / window)
local elapsed = now - n * window
local cur = tonumber(redis.call('GET', KEYS[1] .. ':' .. int(n)) or '0')
local prev = tonumber(redis.call('GET', KEYS[1] .. ':' .. int(n - 1)) or '0')
local weighted = prev * (window - elapsed)

local function reset_after(c)
  if c > 0 then return 2 * window - elapsed end
  if prev > 0 then return window - elapsed end
  return 0
end

if weighted + (cur + cost) * window > limit * window then
  local retry
  local room = limit - cur - cost
  if room >= 0 and prev > 0 then
    -- fits later in this window, once prev's weight has decayed enough
    retry = math.ceil(window - room * window / prev) - elapsed
  else
    -- next window: cur becomes the previous window
    retry = window - elapsed
    if cur > 0 then
      retry = retry + math.max(0, math.ceil(window - (limit - cost) * window / cur))
    end
  end
  if retry < 1 then retry = 1 end
  local rem = math.floor((limit * window - weighted - cur * window) / window)
  return {0, math.max(rem, 0), retry, reset_after(cur), n}
end

if mode == 1 or cost == 0 then
  local rem = math.floor((limit * window - weighted - (cur + cost) * window) / window)
  return {1, math.max(rem, 0), 0, reset_after(cur), n}
end

local key = KEYS[1] .. ':' .. int(n)
local c = redis.call('INCRBY', key, cost)
if c == cost or redis.call('PTTL', key) == -1 then
  redis.call('PEXPIRE', key, math.ceil(2 * window / 1000) + MARGIN_MS)
end
local rem = math.floor((limit * window - weighted - c * window) / window)
return {1, math.max(rem, 0), 0, reset_after(c), n}
