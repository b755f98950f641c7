-- sliding_subwindows.lua: sliding window counter over N sub-windows (one HASH).
--
-- KEYS[1] -> HASH; field <j> holds the units admitted in sub-window j, the
--            global sub-window number floor(now * N / window).
-- ARGV[1] -> limit: units admitted per window (integer >= 1)
-- ARGV[2] -> window length in microseconds (integer >= N)
-- ARGV[3] -> cost in units (integer >= 0; 0 only checks)
-- ARGV[4] -> mode: 0 charge, 1 peek (never writes), 2 refund
-- ARGV[5] -> now in microseconds, or 0 to read Redis TIME (explicit now is for tests)
-- ARGV[6] -> refund only: the sub-window number the charge was made in
-- ARGV[7] -> N: sub-windows per window (integer >= 1)
--
-- Output: {allowed (1|0), remaining units, retry_after_us, reset_after_us, sub-window number}
--
-- The window (now - window, now] holds the current sub-window g, the N-1
-- before it in full and a part of sub-window g-N, which is weighted by the
-- part of it still inside (N = 1 is the two-window counter):
--   estimate = c[g-N] * (1 - elapsed/sub) + c[g-N+1] + ... + c[g]
-- Time is counted in units of 1/N µs, in which a sub-window is exactly
-- `window` long, so sub-window edges need not fall on whole microseconds and
-- the test is exact in integers:
--   c[g-N]*(window-elapsed) + (sum+cost)*window <= limit*window
-- Fields from the future (a clock stepped back) are not counted now but are
-- when their sub-window comes. The decision is made before writing: a
-- rejected request writes nothing. A charge deletes the fields that have
-- slid out, so the HASH holds at most N+1 live fields, and sets the TTL to
-- the end of the newest field's last use (window + one sub-window) plus a
-- margin.
-- floor(a/b) exactly for integers below 2^53, b > 0 (a double quotient can
-- round up to the next integer).
--
-- internal/lua prepends prelude_clock.lua and prelude_admission.lua: cost,
-- mode, now, MARGIN_MS, int() and the helpers used below come from there.
local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end
local function cdiv(a, b) return -fdiv(-a, b) end

local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local N = tonumber(ARGV[7]) or 1

if mode == 2 then
  local c = tonumber(redis.call('HGET', KEYS[1], ARGV[6]) or '0')
  if c > 0 then
    if c <= cost then
      redis.call('HDEL', KEYS[1], ARGV[6]) -- an empty field is no field
    else
      redis.call('HINCRBY', KEYS[1], ARGV[6], -cost) -- keeps the TTL
    end
  end
  return {1, 0, 0, 0, tonumber(ARGV[6])}
end

-- now*N = g*window + elapsed, 0 <= elapsed < window (scaled units)
local q = fdiv(now, window)
local i = fdiv((now - q * window) * N, window)
local elapsed = (now - q * window) * N - i * window
local g = q * N + i

-- cnt[d] is field g-N+d (d = 0 the weighted one, d = N the current one,
-- d > N the future); top is the highest d with a count.
local cnt, top, stale = {}, -1, {}
local flat = redis.call('HGETALL', KEYS[1])
for k = 1, #flat, 2 do
  local d = tonumber(flat[k]) - g + N
  local v = tonumber(flat[k + 1])
  if d < 0 then
    stale[#stale + 1] = flat[k]
  elseif v > 0 then
    cnt[d] = v
    if d > top then top = d end
  end
end
local old = cnt[0] or 0
local sum = 0
for d = 1, N do sum = sum + (cnt[d] or 0) end
local weighted = old * (window - elapsed)

-- until the newest field with a count (at d = top) has slid out
local function reset_after(t)
  if t < 0 then return 0 end
  return cdiv((t + 1) * window - elapsed, N)
end

if weighted + (sum + cost) * window > limit * window then
  -- Walk forward one sub-window at a time: in sub-window g+k the weighted
  -- field is d = k and the counted ones d = k+1 .. k+N. Find the first
  -- position where the estimate leaves room for cost.
  local retry = (top + 2) * window - elapsed -- fallback: everything gone
  local o, s = old, sum
  for k = 0, top + 1 do
    local room = limit - cost - s
    if room >= 0 then
      local x = 0
      if o > room then x = math.ceil(window - room * window / o) end
      if x < window and (k > 0 or x > elapsed) then
        retry = k * window + x - elapsed
        break
      end
    end
    o = cnt[k + 1] or 0
    s = s - o + (cnt[k + N + 1] or 0)
  end
  retry = math.max(cdiv(retry, N), 1)
  local rem = fdiv(limit * window - weighted - sum * window, window)
  return {0, math.max(rem, 0), retry, reset_after(top), g}
end

if mode == 1 or cost == 0 then
  local rem = fdiv(limit * window - weighted - (sum + cost) * window, window)
  return {1, math.max(rem, 0), 0, reset_after(top), g}
end

for _, f in ipairs(stale) do redis.call('HDEL', KEYS[1], f) end
redis.call('HINCRBY', KEYS[1], int(g), cost)
local reset = reset_after(math.max(top, N))
redis.call('PEXPIRE', KEYS[1], math.ceil(reset / 1000) + MARGIN_MS)
local rem = fdiv(limit * window - weighted - (sum + cost) * window, window)
return {1, math.max(rem, 0), 0, reset, g}
