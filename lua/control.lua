-- control.lua: runtime control of a downstream (pause, rate override).
--
-- KEYS[1] -> HASH of the downstream's runtime state (see keys.DownstreamState):
--            paused ("1"/"0"), override (a rate such as "20/s", "" = none),
--            and the adaptive fields written by adaptive.lua
-- ARGV[1] -> TTL in milliseconds: the state outlives every process by this
-- ARGV[2..] -> field, value pairs to set (value "" deletes the field)
--
-- Output: the number of fields now in the hash.
-- The hash is control state with no natural end, so it gets a long TTL
-- (refreshed on every change) rather than none: invariant 7.
if redis.replicate_commands then redis.replicate_commands() end

local key = KEYS[1]
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', key, ARGV[i])
  else
    redis.call('HSET', key, ARGV[i], ARGV[i + 1])
  end
end
local n = redis.call('HLEN', key)
if n > 0 then redis.call('PEXPIRE', key, tonumber(ARGV[1])) end
return n
