-- fair.lua: weighted fair share of one downstream's queue among admission
-- keys (start-time fair queueing): the index take.lua picks from.
--
-- A task of a fair downstream waits in asynq's pending list as any task
-- does, numbered in pos (prelude_fairpos.lua) so a take can move it out
-- of the middle, and is parked here with a virtual start tag: S = max(V,
-- F[key]), F[key] = S + cost / weight, where V is the tag of the last
-- task taken. take.lua takes the parked task with the least tag when a
-- slot is near, moving it from pending to active and V to its tag, so the
-- order is decided at the take: a key with a backlog takes its weight's
-- share of the slots, and a key that arrives (or restarts: its F is
-- behind V) starts at V, so its first task is the next taken whatever
-- the others' backlogs.
-- A task not yet due waits in Later and gets its tag when it becomes due
-- (a feed): one with a future ProcessAt waits in asynq's scheduled set
-- until then (the feed moves it to pending, unless asynq's forward did),
-- one held back by a per-key ceiling waits in pending, numbered.
-- KEYS[1] -> parked    ZSET member → start tag
-- KEYS[2] -> tags      HASH key → finish tag of its last parked task
-- KEYS[3] -> state     HASH v (virtual time; take.lua moves it), x (last
--                      TTL refresh, ms), cx (last cleanup, ms), tc/nc
--                      (HSCAN cursors of tags and nb)
-- KEYS[4] -> later     ZSET member → due time (ms)
-- KEYS[5] -> counts    HASH key → tasks parked or later
-- KEYS[6] -> nb        HASH key → earliest turn of its next task (ms)
-- KEYS[7] -> asynq:{q}:pending    LIST (a due task moves in; numbered)
-- KEYS[8] -> controls    HASH: the operator's settings per key
--                      (shaper ctl key): "p:<key>" paused, "w:<key>" its
--                      weight, "r:<key>" its ceiling as "<rate>/<period µs>"
-- KEYS[9] -> held      ZSET: a paused key's tasks, all
--                      scored 0, member "<len(key)>|<key>|<tag>|<member>",
--                      so one key's tasks are one lexicographic range
--                      (take.lua puts them there when it meets them); and
--                      a key's tasks at its cap on calls in flight, after
--                      a "~" (prelude_capheld.lua)
-- KEYS[10] -> pos      HASH task id -> its number in pending
--                      (prelude_fairpos.lua)
-- KEYS[11] -> asynq:{q}:scheduled  ZSET (a due task leaves it)
-- A member is "<cost>|<weight>|<len(key)>|<key><id>": the task carries
-- what a take and a due move need, so no per-task hash is kept. Parked,
-- it starts with "!" when its key started at V (a key that arrives): tied
-- turns go in member order, and "!" sorts first.
-- ARGV[1] -> op: "park" | "feed" | "tend" | "resume" (tend: a feed
--            when later or held has tasks; else it reads only how many
--            keys have tasks waiting, and replies {0, -1, -1, keys, -1})
-- ARGV[2] -> at most this many due moves (and held tasks back) per call
-- ARGV[3] -> TTL of every key here, ms (the horizon plus a margin)
-- ARGV[4] -> now in ms, or 0 to read Redis TIME (tests only)
-- ARGV[5] -> asynq's task key prefix, asynq:{q}:t:
-- park only:
-- ARGV[6] -> task id (just enqueued by asynq: in pending, or in scheduled
--            with a ProcessAt)
-- ARGV[7] -> admission key
-- ARGV[8] -> cost (> 0)
-- ARGV[9] -> weight (> 0)
-- ARGV[10] -> due time in ms (0: now)
-- ARGV[11] -> per-key ceiling: ms per unit of cost (0: none)
-- resume only (a key no longer paused, or whose ceiling changed: its held
-- tasks go back to parked, at their tags, and its tasks a ceiling spaced
-- in later are due now):
-- ARGV[6] -> admission key
-- ARGV[7] -> move at most this many tasks
--
-- Controls: the controls HASH's weight replaces the task's weight and its
-- ceiling the task's ceiling for tasks parked (or made due) from then on.
-- A paused key's task is never taken: take.lua moves it to held; resume,
-- or a feed that finds the key of one of the first held tasks no longer
-- paused, moves it back.
--
-- Reply: {moved, parked, later, keys, ahead}
--   moved: tasks this call made ready to take (due moves, held tasks
--   back; park: 1 when the task is parked, ready). A due task that left
--   pending meanwhile (taken, deleted) is dropped. Feed: parked/later are
--   the tasks waiting here, keys the admission keys with tasks here;
--   ahead is -1. Park: parked is 1 (the task waits here, in fair order
--   or later); later and keys are -1 (not read); ahead is how many tasks go
--   before this one (parked with lower tags, and the tasks in pending not
--   in fair order), or -1 when it waits in later or its key is paused;
--   park replies {0, 0, -1, -1, 0} when the task is in neither pending nor
--   scheduled (taken already, or deleted). Resume: parked is how
--   many tasks it moved back; later, keys and ahead are -1. A
--   feed that finds nothing parked, later or held replies zeros after one
--   read.
-- TTL: every key here gets ARGV[3] on the first write and again at most
-- hourly (state.x); when a take leaves nothing parked, later or held,
-- take.lua lets the tags, state and nb expire within 60s, and counts is
-- empty (gone). A call with nothing to do writes nothing.
if redis.replicate_commands then redis.replicate_commands() end

local op = ARGV[1]
local ctl, held = KEYS[8], KEYS[9]
local pending, pos, sched, tprefix = KEYS[7], KEYS[10], KEYS[11], ARGV[5]
-- an idle feed: parked, later and held are empty ZSETs, which Redis
-- does not keep, so one EXISTS over the three tells
if op == 'feed' and redis.call('EXISTS', KEYS[1], KEYS[4], held) == 0 then
  return {0, 0, 0, 0, -1}
end
-- a tend between feeds: only due and held tasks need a call this often
if op == 'tend' then
  if redis.call('EXISTS', KEYS[4], held) == 0 then
    return {0, -1, -1, redis.call('HLEN', KEYS[5]), -1}
  end
  op = 'feed'
end

local now = tonumber(ARGV[4])
if now == nil or now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local maxp, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])

local function fmt(x) return string.format('%.17g', x) end

-- the operator's controls (one EXISTS per call when there are none)
local hasctl = redis.call('EXISTS', ctl) == 1
local function paused(key) return hasctl and redis.call('HEXISTS', ctl, 'p:' .. key) == 1 end
local function weightOf(key, w) return fairWeight(ctl, hasctl, key, w) end
local function perOf(key, per)
  local us = fairCtlPer(ctl, hasctl, key)
  if us then return us / 1000 end
  return per
end
local function heldPrefix(key) return #key .. '|' .. key .. '|' end

local st = redis.call('HMGET', KEYS[3], 'v', 'x', 'cx')
local v = tonumber(st[1]) or 0
local refreshed = tonumber(st[2]) or 0

local function enc(id, key, cost, w) return cost .. '|' .. w .. '|' .. #key .. '|' .. key .. id end


-- turn: the start tag of key's next task at weight w (prelude_fairturn.lua)
local function turn(key, cost, w) return fairTurn(KEYS[2], key, cost, w, v) end

local ahead, moved = -1, 0
-- arrived numbers due task id in pending: moved there from scheduled,
-- or found where asynq's forward put it; false when it left (taken as
-- not in fair order, or deleted)
local function arrived(id)
  if redis.call('HEXISTS', pos, id) == 1 then return true end
  if redis.call('ZREM', sched, id) == 1 then
    redis.call('LPUSH', pending, id)
    redis.call('HSET', tprefix .. id, 'state', 'pending', 'pending_since', string.format('%d', now * 1000000))
    fpPlace(pending, pos, id, 0)
    return true
  end
  if redis.call('HGET', tprefix .. id, 'state') ~= 'pending' then return false end
  local i = redis.call('LPOS', pending, id, 'MAXLEN', 1024) or redis.call('LPOS', pending, id)
  if not i then return false end
  fpPlace(pending, pos, id, i)
  return true
end

local ahead, moved = -1, 0
if op == 'park' then
  local id, key, cost = ARGV[6], ARGV[7], tonumber(ARGV[8])
  local w, ws = weightOf(key, ARGV[9])
  local due, per = tonumber(ARGV[10]), perOf(key, tonumber(ARGV[11]))
  -- where asynq's enqueue put it: at the head of pending (due now) or in
  -- scheduled (a ProcessAt: a feed moves it when due)
  local at = false
  if due <= now then at = redis.call('LPOS', pending, id, 'MAXLEN', 256) end
  if not at and not redis.call('ZSCORE', sched, id) then
    at = redis.call('LPOS', pending, id)
    if not at then return {0, 0, -1, -1, 0} end
  end
  if at then fpPlace(pending, pos, id, at) end
  if due < now then due = now end
  if per > 0 then
    local nb = tonumber(redis.call('HGET', KEYS[6], key) or '0') or 0
    if nb > due then due = nb end
    redis.call('HSET', KEYS[6], key, fmt(due + cost * per))
  end
  local member = enc(id, key, ARGV[8], ws)
  redis.call('HINCRBY', KEYS[5], key, 1)
  if due > now or not at then
    redis.call('ZADD', KEYS[4], due, member)
  else
    local s, fresh = turn(key, cost, w)
    redis.call('ZADD', KEYS[1], fmt(s), fairInTurn(member, fresh))
    moved = 1
    -- before it: the parked tasks with earlier turns, and the tasks in
    -- pending not in fair order (given back or recovered: a take serves
    -- them first)
    if not paused(key) then
      ahead = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. fmt(s)) +
        math.max(redis.call('LLEN', pending) - redis.call('HLEN', pos), 0)
    end
  end
elseif op == 'resume' then
  -- the key's held tasks go back to parked at their tags
  local p = heldPrefix(ARGV[6])
  local ms = redis.call('ZRANGEBYLEX', held, '[' .. p, '[' .. p .. '\255', 'LIMIT', 0, tonumber(ARGV[7]))
  for _, hm in ipairs(ms) do
    local tag, m = string.match(string.sub(hm, #p + 1), '^([^|]+)|(.*)$')
    redis.call('ZADD', KEYS[1], tag, m)
    redis.call('ZREM', held, hm)
  end
  moved = #ms
  -- its tasks a ceiling spaced out in later (numbered: waiting in
  -- pending, unlike one with a ProcessAt) are due now, and its spacing
  -- starts afresh: a ceiling changed or cleared holds from its next task
  -- on (the take spaces them again), not from the last one it spaced
  local pat = '*|' .. #ARGV[6] .. '|' .. string.gsub(ARGV[6], '[%*%?%[%]\\]', '\\%0') .. '*'
  local cur = '0'
  repeat
    local r = redis.call('ZSCAN', KEYS[4], cur, 'MATCH', pat, 'COUNT', 1000)
    cur = r[1]
    for i = 1, #r[2], 2 do
      local m = r[2][i]
      if tonumber(r[2][i + 1]) > now and redis.call('HEXISTS', pos, (fairDec(m))) == 1 then
        redis.call('ZADD', KEYS[4], now, m)
      end
    end
  until cur == '0'
  redis.call('HDEL', KEYS[6], ARGV[6])
else
  -- held tasks whose key is no longer paused (a resume that did not
  -- finish) go back, a few per call (a key's tasks held at its cap on
  -- calls in flight, "~...", sort after them: a call's end releases them)
  if redis.call('ZCARD', held) > 0 then
    for _, hm in ipairs(redis.call('ZRANGEBYLEX', held, '-', '(~', 'LIMIT', 0, 16)) do
      local n, rest = string.match(hm, '^(%d+)|(.*)$')
      local key = string.sub(rest, 1, tonumber(n))
      if not paused(key) then
        local tag, m = string.match(string.sub(rest, tonumber(n) + 2), '^([^|]+)|(.*)$')
        redis.call('ZADD', KEYS[1], tag, m)
        redis.call('ZREM', held, hm)
        moved = moved + 1
      end
    end
  end
  -- due tasks of later get their turn now
  local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, maxp)
  for _, m in ipairs(due) do
    redis.call('ZREM', KEYS[4], m)
    local id, key, cost, w = fairDec(m)
    if arrived(id) then
      local s, fresh = turn(key, cost, weightOf(key, w))
      redis.call('ZADD', KEYS[1], fmt(s), fairInTurn(m, fresh))
      moved = moved + 1
    elseif redis.call('HINCRBY', KEYS[5], key, -1) <= 0 then
      redis.call('HDEL', KEYS[5], key)
    end
  end
end

if moved > 0 or op == 'park' then
  if now - refreshed > 3600000 then
    redis.call('HSET', KEYS[3], 'x', now)
    for _, k in ipairs({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], held, pos}) do redis.call('PEXPIRE', k, ttl) end
  end
end
if op == 'park' then return {moved, 1, -1, -1, ahead} end
if op == 'resume' then return {moved, moved, -1, -1, -1} end

-- a feed forgets, at most once a second and 16 entries each, the finish
-- tags the virtual time has passed and the ceilings that are over
if now - (tonumber(st[3]) or 0) >= 1000 then
  redis.call('HSET', KEYS[3], 'cx', now)
  for _, h in ipairs({{KEYS[2], 'tc', v}, {KEYS[6], 'nc', now}}) do
    if redis.call('EXISTS', h[1]) == 1 then
      local sc = redis.call('HSCAN', h[1], redis.call('HGET', KEYS[3], h[2]) or '0', 'COUNT', 16)
      redis.call('HSET', KEYS[3], h[2], sc[1])
      local f = sc[2]
      for i = 1, #f, 2 do
        if tonumber(f[i + 1]) <= h[3] then redis.call('HDEL', h[1], f[i]) end
      end
    end
  end
end
return {moved, redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[4]), redis.call('HLEN', KEYS[5]), -1}
