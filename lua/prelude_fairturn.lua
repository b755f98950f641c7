-- prelude_fairturn.lua: a fair task's turn (start-time fair queueing), for
-- fair.lua (a park, a due move) and take.lua (a retry forwarded back to
-- fair order), so the rule lives once.
--
-- Defines:
--   fairWeight(ctl, hasctl, key, w): key's weight, the operator's
--     ("w:<key>" in the controls HASH ctl, read when hasctl) else w; as a
--     number and as the string a member carries
--   fairTurn(tags, key, cost, w, v): the start tag of key's next task,
--     max(its last finish tag in the HASH tags, the virtual time v); its
--     finish (start + cost / w) is recorded. Also whether the key starts
--     at v (it had no turn at or past v: it arrives, or returns idle).
--   fairInTurn(m, fresh): member m as parked: a key that starts at v goes
--     before the tasks tied with it ("!" sorts before a digit), so a key
--     that arrives is not passed by a round of keys whose turns are all v
--   fairDec(m): member m's task id, key, cost (a number) and weight (as
--     written); a member is "<cost>|<weight>|<len(key)>|<key><id>",
--     after a "!" when parked by a key that started at v
--   fairCtlPer(ctl, hasctl, key): the µs per unit of cost of the
--     operator's ceiling for key ("r:<key>" = "<rate>/<period µs>" in the
--     controls HASH ctl, read when hasctl), or nil

local function fairWeight(ctl, hasctl, key, w)
  if hasctl then
    local o = redis.call('HGET', ctl, 'w:' .. key)
    if o and tonumber(o) and tonumber(o) > 0 then return tonumber(o), o end
  end
  return tonumber(w), w
end

local function fairTurn(tags, key, cost, w, v)
  local f = tonumber(redis.call('HGET', tags, key) or '')
  local s = math.max(f or 0, v)
  redis.call('HSET', tags, key, string.format('%.17g', s + cost / w))
  return s, f == nil or f < v
end

local function fairInTurn(m, fresh)
  if fresh then return '!' .. m end
  return m
end

local function fairDec(m)
  local c, w, n, rest = string.match(m, '^!?([^|]+)|([^|]+)|(%d+)|(.*)$')
  n = tonumber(n)
  return string.sub(rest, n + 1), string.sub(rest, 1, n), tonumber(c), w
end

local function fairCtlPer(ctl, hasctl, key)
  if not hasctl then return nil end
  local rr, pp = string.match(redis.call('HGET', ctl, 'r:' .. key) or '', '^(%d+)/(%d+)$')
  if rr and tonumber(rr) > 0 then return tonumber(pp) / tonumber(rr) end
  return nil
end
