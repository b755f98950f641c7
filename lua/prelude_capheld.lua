-- prelude_capheld.lua: a fair key's tasks held back by a cap on its calls
-- in flight (key_concurrency), for take.lua (which holds them) and
-- concurrency.lua (whose release brings them back), so the rule lives once.
--
-- A held task waits in fair.lua's held ZSET (scored 0) as
-- "~<len(key)>|<key>|<tag>|<member>": one key's are one lexicographic
-- range, and all of them sort after a paused key's ("<len>|..."), which
-- fair.lua's feed looks at. The task itself stays in pending, numbered.
--
-- Defines:
--   capHold(held, parked, m, key, s, ttl): parked member m of key (start
--     tag s) waits in held until a call of key ends
--   capUnhold(held, parked, key, k, ttl): up to k of key's held tasks go
--     back to parked at their tags (they are next in fair order); returns
--     how many went. ttl: ms, the TTL fair.lua gives its keys.
--   capUnholdAll(held, parked, k, ttl): up to k held tasks of any key go
--     back (no cap per key holds them any more).
--   leaseGone(leases, counts, m, held, parked, keycap, ttl): lease m
--     ("<token>|<key>", concurrency.lua's) goes, released or expired: its
--     key counts one call fewer and, with held (a fair take's), gets back
--     as many held tasks as it has places under keycap; 1 when m was
--     there, else 0.

local function capHeldPrefix(key) return '~' .. #key .. '|' .. key .. '|' end

local function capHold(held, parked, m, key, s, ttl)
  redis.call('ZREM', parked, m)
  redis.call('ZADD', held, 0, capHeldPrefix(key) .. string.format('%.17g', s) .. '|' .. m)
  redis.call('PEXPIRE', held, ttl)
end

local function capUnhold(held, parked, key, k, ttl)
  if k < 1 then return 0 end
  local p = capHeldPrefix(key)
  local ms = redis.call('ZRANGEBYLEX', held, '[' .. p, '[' .. p .. '\255', 'LIMIT', 0, k)
  for _, hm in ipairs(ms) do
    local tag, m = string.match(string.sub(hm, #p + 1), '^([^|]+)|(.*)$')
    redis.call('ZADD', parked, tag, m)
    redis.call('ZREM', held, hm)
  end
  if #ms > 0 then redis.call('PEXPIRE', parked, ttl) end
  return #ms
end

local function capUnholdAll(held, parked, k, ttl)
  local ms = redis.call('ZRANGEBYLEX', held, '[~', '+', 'LIMIT', 0, k)
  for _, hm in ipairs(ms) do
    local n, rest = string.match(hm, '^~(%d+)|(.*)$')
    local tag, m = string.match(string.sub(rest or '', tonumber(n or '0') + 2), '^([^|]+)|(.*)$')
    if tag then redis.call('ZADD', parked, tag, m) end
    redis.call('ZREM', held, hm)
  end
  if #ms > 0 then redis.call('PEXPIRE', parked, ttl) end
  return #ms
end

local function leaseGone(leases, counts, m, held, parked, keycap, ttl)
  if redis.call('ZREM', leases, m) == 0 then return 0 end
  local key = string.sub(m, string.find(m, '|', 1, true) + 1)
  local c = redis.call('HINCRBY', counts, key, -1)
  if c <= 0 then redis.call('HDEL', counts, key) end
  if held and keycap > 0 and key ~= '' then capUnhold(held, parked, key, keycap - math.max(c, 0), ttl) end
  return 1
end
