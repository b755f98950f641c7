-- prelude_clock.lua: prepended by internal/lua to every script that reads
-- the time (the admission scripts, adaptive.lua, breaker.lua,
-- breakerset.lua, answer.lua), so the rule lives once.
--
-- now_us(arg) is the explicit now in microseconds a caller passed in arg
-- (tests and replays only), or Redis TIME when arg is 0 or missing, so
-- that workers on different hosts agree (DESIGN invariant 6).
if redis.replicate_commands then redis.replicate_commands() end

local function now_us(arg)
  local now = tonumber(arg)
  if now == nil or now <= 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now
end
