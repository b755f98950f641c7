-- token_bucket.lua: token bucket (HASH of tokens and last refill).
--
-- Amounts are fixed-point integers, so a refill never drifts across a
-- decision boundary: the client normalises the rate to n units per p µs
-- (gcd-reduced) and counts one token as p "scaled units"; a refill of
-- elapsed µs then adds exactly elapsed*n scaled units.
--
-- KEYS[1] -> HASH {t: tokens (scaled), ts: last refill (µs)}; missing = full
-- ARGV[1] -> capacity (scaled: burst*p)
-- ARGV[2] -> refill: scaled units per µs (n)
-- ARGV[3] -> cost (scaled: cost*p; 0 only checks)
-- ARGV[4] -> mode: 0 charge, 1 peek (never writes), 2 refund
-- ARGV[5] -> now in microseconds, or 0 to read Redis TIME (explicit now is for tests)
--
-- Output: {allowed (1|0), tokens after (scaled), retry_after_us, reset_after_us, 0}
--   retry_after_us: until enough tokens for cost (0 when allowed);
--   reset_after_us: until the bucket is full again.
-- Rejected requests write nothing. The TTL is the time to refill to full
-- plus a margin: a full bucket carries no state.
--
-- internal/lua prepends prelude_clock.lua and prelude_admission.lua: cost,
-- mode, now, MARGIN_MS, int() and the helpers used below come from there.
local key = KEYS[1]
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])

local tokens, elapsed
tokens, elapsed, now = bucket_state(key, 't', cap) -- missing = full
-- cap elapsed first so elapsed*rate stays far below 2^53
local fill = math.ceil((cap - tokens) / rate)
if elapsed >= fill then tokens = cap else tokens = tokens + elapsed * rate end
if tokens > cap then tokens = cap end

local function save()
  if tokens >= cap then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 't', tokens, 'ts', now)
  redis.call('PEXPIRE', key, math.ceil((cap - tokens) / rate / 1000) + MARGIN_MS)
end

if mode == 2 then
  tokens = math.min(cap, tokens + cost)
  save()
  return {1, tokens, 0, math.ceil((cap - tokens) / rate), 0}
end

if tokens < cost then
  return {0, tokens, math.ceil((cost - tokens) / rate), math.ceil((cap - tokens) / rate), 0}
end
if mode == 1 or cost == 0 then
  return {1, tokens - cost, 0, math.ceil((cap - tokens) / rate), 0}
end
tokens = tokens - cost
save()
return {1, tokens, 0, math.ceil((cap - tokens) / rate), 0}
