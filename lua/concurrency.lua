-- concurrency.lua: leases for calls in flight to one downstream, across
-- every process (a concurrency cap, and optionally one per admission key).
--
-- A lease is a member "<token>|<key>" of a ZSET scored by its expiry; the
-- holder renews it while its call runs, so a crashed process's leases
-- expire within the lease time and free their places. Per-key counts live
-- in a HASH so a per-key cap is one HGET.
--
-- KEYS[1] -> ZSET leases: member "<token>|<key>", score expiry (µs)
-- KEYS[2] -> HASH in-flight count per key (only with a per-key cap)
-- KEYS[3], KEYS[4] -> optional, with ARGV[6] > 0: a fair downstream's held
--            and parked ZSETs (fair.lua's KEYS[9] and KEYS[1]) whose take
--            holds a key's tasks at its cap (prelude_capheld.lua): each
--            lease that goes (released or expired) brings back as many
--            of its key's held tasks as its key has places (ARGV[5])
-- ARGV[1] -> op: "acquire", "renew" or "release"
-- ARGV[2] -> now in µs, or 0 to read Redis TIME (explicit now is for tests)
-- ARGV[3] -> lease time in µs (acquire, renew)
-- ARGV[4] -> cap on leases in all (acquire; 0: none)
-- ARGV[5] -> cap on leases per key (0: none; acquire, and with KEYS[3]
--            every op)
-- ARGV[6] -> with KEYS[3..4]: the TTL of fair.lua's keys, ms; else 0
-- ARGV[7..] -> members "<token>|<key>", in the order they asked (acquire:
--              granted in that order as long as there is room; a member
--              whose key is at its cap is passed over, not a stop)
--
-- Output: acquire: {granted flags (1|0) per member..., wait_us}: wait_us
--   is how long until the earliest lease expires (-1: none held);
--   renew: the number renewed (leases that expired meanwhile are not
--   revived); release: the number released.
-- TTL: both keys live until the last lease's expiry plus a margin.
if redis.replicate_commands then redis.replicate_commands() end

local leases, counts = KEYS[1], KEYS[2]
local op = ARGV[1]
local now = tonumber(ARGV[2])
if now == nil or now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local ttl = tonumber(ARGV[3]) or 0
local MARGIN_MS = 1000
local keycap = tonumber(ARGV[5]) or 0
-- held: a fair take holds a key's tasks at its cap here (KEYS[3..4])
local held, parked, fttl = KEYS[3], KEYS[4], tonumber(ARGV[6]) or 0
if fttl <= 0 or keycap <= 0 then held = nil end

local function keyOf(member)
  local i = string.find(member, '|', 1, true)
  return string.sub(member, i + 1)
end

local function drop(member) return leaseGone(leases, counts, member, held, parked, keycap, fttl) end

local function expire()
  local gone = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
  for _, m in ipairs(gone) do drop(m) end
end

local function keep()
  local last = redis.call('ZRANGE', leases, -1, -1, 'WITHSCORES')
  if last[2] then
    local ms = math.ceil((tonumber(last[2]) - now) / 1000) + MARGIN_MS
    redis.call('PEXPIRE', leases, ms)
    if redis.call('EXISTS', counts) == 1 then redis.call('PEXPIRE', counts, ms) end
  else
    redis.call('DEL', counts)
  end
end

if op == 'release' then
  local n = 0
  for i = 7, #ARGV do n = n + drop(ARGV[i]) end
  keep()
  return n
end

expire()
if op == 'renew' then
  local n = 0
  for i = 7, #ARGV do
    if redis.call('ZSCORE', leases, ARGV[i]) then
      redis.call('ZADD', leases, now + ttl, ARGV[i])
      n = n + 1
    end
  end
  keep()
  return n
end

local cap = tonumber(ARGV[4])
local total = redis.call('ZCARD', leases)
local out = {}
for i = 7, #ARGV do
  local m = ARGV[i]
  local k = keyOf(m)
  local ok = (cap == 0 or total < cap)
  if ok and keycap > 0 then
    ok = tonumber(redis.call('HGET', counts, k) or '0') < keycap
  end
  if ok then
    redis.call('ZADD', leases, now + ttl, m)
    redis.call('HINCRBY', counts, k, 1)
    total = total + 1
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
keep()
local first = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
if first[2] then
  out[#out + 1] = tonumber(first[2]) - now
else
  out[#out + 1] = -1
end
return out
