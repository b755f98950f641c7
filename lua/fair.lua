-- fair.lua: weighted fair share of one downstream's queue among admission
-- keys (start-time fair queueing), in front of asynq's pending list.
--
-- A task of a fair downstream is enqueued into asynq as *scheduled* far
-- ahead (the horizon), so asynq leaves it alone, and parked here with a
-- virtual start tag: S = max(VT, F[key]), F[key] = S + cost / weight, where
-- V is the tag of the last task promoted. Promotion pops the lowest tags
-- and moves those tasks from asynq's scheduled set to its pending list, as
-- asynq's own forwarder does, keeping pending at most `target` long. A key
-- with a backlog thus takes its weight's share of the downstream's slots;
-- a key arriving late starts at VT (below) and is promoted within a round;
-- its task, when none other of its key waits here and its finish tag is
-- not ahead of VT, is promoted at once to the front of pending, so a key
-- below its share never queues.
-- A key behind V (one that starts, or restarts) does not start at V but
-- at VT = V - r * pending, about the turn of the oldest task in pending: r
-- is the tag advance per promoted task, its mean over the last 64
-- promotions, at most one over the keys waiting (the mean lags a change of
-- keys; 100 tenants arriving together were started too far back).
-- Pending is a list its tasks can only join at the back; starting at VT,
-- its next tasks go beside the ones promoted there before it came instead
-- of behind them, so the workers' lanes (which let a key with less
-- service pass the tasks they hold) have its tasks to serve from the
-- first round. Started at V, its tasks reached the workers at exactly its
-- share, often none was there at its turn, and the key with a backlog
-- took that slot from the tasks its workers already held: it got more
-- than its share for as long as they lasted.
-- A task not yet due (a future ProcessAt, or a per-key ceiling) waits in
-- Later and gets its tag when it becomes due. Should no process promote
-- for the horizon, asynq's forwarder releases the tasks in FIFO order:
-- nothing is lost, only fairness.
--
-- KEYS[1] -> parked    ZSET member → start tag
-- KEYS[2] -> tags      HASH key → finish tag of its last parked task
-- KEYS[3] -> state     HASH v (virtual time), r/rn (tag advance per
--                      promoted task: running mean, samples up to 64),
--                      x (last TTL refresh, ms),
--                      lj (the last lone task put at the front of
--                      pending), tc/nc (HSCAN cursors of tags and nb)
-- KEYS[4] -> later     ZSET member → due time (ms)
-- KEYS[5] -> counts    HASH key → tasks parked or later
-- KEYS[6] -> nb        HASH key → earliest promotion of its next task (ms)
-- KEYS[7] -> asynq:{q}:scheduled  ZSET
-- KEYS[8] -> asynq:{q}:pending    LIST (asynq dequeues from the right)
-- KEYS[9] -> asynq:{q}:active     LIST (read only: its length)
-- KEYS[10] -> controls  HASH, optional: the operator's settings per key
--                      (shaper ctl key): "p:<key>" paused, "w:<key>" its
--                      weight, "r:<key>" its ceiling as "<rate>/<period µs>"
-- KEYS[11] -> held      ZSET, with KEYS[10]: a paused key's tasks, all
--                      scored 0, member "<len(key)>|<key>|<tag>|<member>",
--                      so one key's tasks are one lexicographic range
-- A member is "<cost>|<weight>|<len(key)>|<key><id>": the task carries
-- what promotion and a due move need, so no per-task hash is kept.
-- ARGV[1] -> op: "park" | "feed" | "resume"
-- ARGV[2] -> task key prefix asynq:{q}:t:
-- ARGV[3] -> target: promote while pending is shorter than this
-- ARGV[4] -> at most this many promotions (and due moves) per call
-- ARGV[5] -> TTL of every key here, ms (the horizon plus a margin)
-- ARGV[6] -> now in ms, or 0 to read Redis TIME (tests only)
-- park only:
-- ARGV[7] -> task id (already in asynq's scheduled set)
-- ARGV[8] -> admission key
-- ARGV[9] -> cost (> 0)
-- ARGV[10] -> weight (> 0)
-- ARGV[11] -> due time in ms (0: now)
-- ARGV[12] -> per-key ceiling: ms per unit of cost (0: none)
-- resume only (a key no longer paused: its held tasks go back to parked,
-- at their tags, and the promotion runs as in a feed):
-- ARGV[7] -> admission key
-- ARGV[8] -> move at most this many tasks
--
-- Controls: the controls HASH's weight replaces the task's weight and its
-- ceiling the task's ceiling for tasks parked (or made due) from then on.
-- A paused key's task is never promoted: promotion moves it to held (and
-- park skips the front of pending for it); resume, or a feed that finds
-- the key of one of the first held tasks no longer paused, moves it back.
--
-- Reply: {promoted, parked, later, pending, active, keys, ahead}
--   promoted: tasks moved to pending by this call; pending: asynq's
--   pending length after it. Feed: parked/later are the tasks waiting
--   here, active asynq's active length, keys the admission keys with tasks
--   here; ahead is -1. Park: parked is 1 when the task waits here (in
--   fair order, later or held), 0 when it went to pending; later, active
--   and keys are -1 (not read); ahead is how many tasks go before this one (parked with lower
--   tags, and in pending: all of it, or for a task started at VT those
--   with earlier turns, when that is more), 0 when it went to the front
--   of pending, or -1 when it waits in later or its key is paused.
--   Resume: parked is how many tasks it moved back; later, active, keys
--   and ahead are -1. A feed that finds nothing
--   parked, later or held replies zeros after one read.
-- TTL: every key here gets ARGV[5] on the first write and again at most
-- hourly (state.x); when nothing is parked or later, counts is empty
-- (gone) and the tags, state and nb expire within 60s. A call with
-- nothing to do writes nothing.
if redis.replicate_commands then redis.replicate_commands() end

local op = ARGV[1]
local ctl, held = KEYS[10], KEYS[11]
-- an idle feed: parked, later and held are empty ZSETs, which Redis
-- does not keep, so one EXISTS over the three tells
if op == 'feed' and redis.call('EXISTS', KEYS[1], KEYS[4], held or KEYS[1]) == 0 then
  return {0, 0, 0, 0, 0, 0, -1}
end

local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = tonumber(ARGV[6])
if now == nil or now <= 0 then now = math.floor(nowus / 1000) else nowus = now * 1000 end
local prefix, target, maxp, ttl = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])

local function fmt(x) return string.format('%.17g', x) end

-- the operator's controls (one EXISTS per call when there are none)
local hasctl = ctl ~= nil and held ~= nil and redis.call('EXISTS', ctl) == 1
local function paused(key) return hasctl and redis.call('HEXISTS', ctl, 'p:' .. key) == 1 end
local function weightOf(key, w)
  if hasctl then
    local o = redis.call('HGET', ctl, 'w:' .. key)
    if o and tonumber(o) and tonumber(o) > 0 then return tonumber(o), o end
  end
  return tonumber(w), w
end
local function perOf(key, per)
  if hasctl then
    local rr, pp = string.match(redis.call('HGET', ctl, 'r:' .. key) or '', '^(%d+)/(%d+)$')
    if rr and tonumber(rr) > 0 then return tonumber(pp) / 1000 / tonumber(rr) end
  end
  return per
end
local function heldPrefix(key) return #key .. '|' .. key .. '|' end
-- hold keeps member m of a paused key, with its start tag s, in held
local function hold(m, key, s)
  redis.call('ZADD', held, 0, heldPrefix(key) .. fmt(s) .. '|' .. m)
  redis.call('PEXPIRE', held, ttl)
end

local st = redis.call('HMGET', KEYS[3], 'v', 'x', 'lj', 'r', 'rn')
local v = tonumber(st[1]) or 0
local lj = st[3] or nil -- the last lone task put at the front of pending
local lj0 = lj
local v0, refreshed = v, tonumber(st[2]) or 0
local r, rn = tonumber(st[4]) or 0, tonumber(st[5]) or 0
local r0 = r
local pending = redis.call('LLEN', KEYS[8])
local promoted = 0

-- vt: the turn of the oldest task in pending (computed on first use: only
-- a key behind V needs it)
local vt
local function oldest()
  if not vt then
    -- r lags a change of keys by up to 64 promotions: no further back than
    -- pending shared by the keys waiting
    vt = v - math.min(r, 1 / math.max(redis.call('HLEN', KEYS[5]), 1)) * pending
  end
  return vt
end

local function enc(id, key, cost, w) return cost .. '|' .. w .. '|' .. #key .. '|' .. key .. id end

local function dec(m)
  local c, w, n, rest = string.match(m, '^([^|]+)|([^|]+)|(%d+)|(.*)$')
  n = tonumber(n)
  return string.sub(rest, n + 1), string.sub(rest, 1, n), tonumber(c), tonumber(w)
end

-- turn: the start tag of key's next task, and its finish is recorded
local function turn(key, cost, w, f)
  w = weightOf(key, w)
  f = f or tonumber(redis.call('HGET', KEYS[2], key) or '0') or 0
  local s = f
  if f < v then s = math.max(oldest(), f) end
  redis.call('HSET', KEYS[2], key, fmt(s + cost / w))
  return s
end

-- promote moves a task to pending: at the back (its turn), or at the
-- front (a key's lone task: it goes before the tasks promoted ahead of
-- it, which all have tags at most its own).
local function promote(id, key, s, front)
  if s >= v then
    -- a turn in order: the mean advance per task, over the last 64 or so
    rn = math.min(rn + 1, 64)
    r = r + (s - v - r) / rn
    v = s
  end
  if redis.call('HINCRBY', KEYS[5], key, -1) <= 0 then redis.call('HDEL', KEYS[5], key) end
  -- gone from scheduled: deleted, or run by hand, or forwarded by asynq
  if redis.call('ZREM', KEYS[7], id) == 0 then return false end
  if not front then
    redis.call('LPUSH', KEYS[8], id)
  elseif not lj or redis.call('LINSERT', KEYS[8], 'BEFORE', lj, id) <= 0 then
    -- behind the last lone task still waiting there (lone tasks keep
    -- their order), else at the very front (LINSERT gives -1 when that
    -- task is gone, 0 when pending is empty: inserted nowhere)
    redis.call('RPUSH', KEYS[8], id)
  end
  if front then lj = id end
  redis.call('HSET', prefix .. id, 'state', 'pending', 'pending_since', string.format('%.0f', nowus * 1000))
  pending = pending + 1
  promoted = promoted + 1
  return true
end

local ahead, moved, waits = -1, 0, 1
if op == 'park' then
  local id, key, cost = ARGV[7], ARGV[8], tonumber(ARGV[9])
  local w, ws = weightOf(key, ARGV[10])
  local due, per = tonumber(ARGV[11]), perOf(key, tonumber(ARGV[12]))
  if due < now then due = now end
  if per > 0 then
    local nb = tonumber(redis.call('HGET', KEYS[6], key) or '0') or 0
    if nb > due then due = nb end
    redis.call('HSET', KEYS[6], key, fmt(due + cost * per))
  end
  local member = enc(id, key, ARGV[9], ws)
  local alone = redis.call('HINCRBY', KEYS[5], key, 1) == 1
  if due > now then
    redis.call('ZADD', KEYS[4], due, member)
  else
    local f = tonumber(redis.call('HGET', KEYS[2], key) or '0') or 0
    local stopped = paused(key)
    if alone and not stopped and f <= v and f <= oldest() then
      -- nothing else of this key waits here and it has had no more than
      -- its share lately (its finish tag is not ahead of VT): it starts
      -- at once, whatever the others' backlogs, so a key below its share
      -- never queues (against VT, not V: the next task of a key that
      -- starts is behind this one, in flight, and parks)
      promote(id, key, turn(key, cost, w, f), true)
      ahead, waits = 0, 0
    else
      local s = turn(key, cost, w, f)
      redis.call('ZADD', KEYS[1], fmt(s), member)
      -- before it: the parked tasks with earlier turns, and the tasks in
      -- pending whose turns came before its own (those the keys already
      -- there release beside it, at their shares), but at least all of
      -- pending (a list: it goes behind)
      local prior = pending
      if s < v and r > 0 then prior = math.floor((s - oldest()) / r) end
      ahead = math.max(pending, redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. fmt(s)) + prior)
      if stopped then ahead = -1 end
    end
  end
elseif op == 'resume' then
  -- the key's held tasks go back to parked at their tags
  local p = heldPrefix(ARGV[7])
  local ms = redis.call('ZRANGEBYLEX', held, '[' .. p, '[' .. p .. '\255', 'LIMIT', 0, tonumber(ARGV[8]))
  for _, hm in ipairs(ms) do
    local tag, m = string.match(string.sub(hm, #p + 1), '^([^|]+)|(.*)$')
    redis.call('ZADD', KEYS[1], tag, m)
    redis.call('ZREM', held, hm)
  end
  moved = #ms
else
  -- held tasks whose key is no longer paused (a resume that did not
  -- finish) go back, a few per call
  if held and redis.call('ZCARD', held) > 0 then
    for _, hm in ipairs(redis.call('ZRANGEBYLEX', held, '-', '+', 'LIMIT', 0, 16)) do
      local n, rest = string.match(hm, '^(%d+)|(.*)$')
      local key = string.sub(rest, 1, tonumber(n))
      if not paused(key) then
        local tag, m = string.match(string.sub(rest, tonumber(n) + 2), '^([^|]+)|(.*)$')
        redis.call('ZADD', KEYS[1], tag, m)
        redis.call('ZREM', held, hm)
      end
    end
  end
  -- due tasks of later get their turn now
  local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, maxp)
  for _, m in ipairs(due) do
    redis.call('ZREM', KEYS[4], m)
    local _, key, cost, w = dec(m)
    redis.call('ZADD', KEYS[1], fmt(turn(key, cost, w)), m)
  end
  moved = #due
end

-- promote while pending is short: lowest tags first
local budget = maxp
while pending < target and budget > 0 do
  local popped = redis.call('ZPOPMIN', KEYS[1], math.min(target - pending, budget))
  if #popped == 0 then break end
  for i = 1, #popped, 2 do
    budget = budget - 1
    local id, key = dec(popped[i])
    if paused(key) then
      hold(popped[i], key, tonumber(popped[i + 1]))
    elseif promote(id, key, tonumber(popped[i + 1]), false) and op == 'park' and id == ARGV[7] then
      ahead, waits = pending - 1, 0
    end
  end
end

if v ~= v0 or r ~= r0 then redis.call('HSET', KEYS[3], 'v', fmt(v), 'r', fmt(r), 'rn', rn) end
if lj ~= lj0 then redis.call('HSET', KEYS[3], 'lj', lj) end
if op == 'park' or promoted > 0 or moved > 0 then
  -- empty: one ZCARD while tasks are parked (a backlog), three at most
  local empty = redis.call('ZCARD', KEYS[1]) == 0 and redis.call('ZCARD', KEYS[4]) == 0
    and (not held or redis.call('ZCARD', held) == 0)
  if empty then
    -- V and the finish tags still say who was served lately (a key that
    -- just had its share is not new): they last a short while
    redis.call('HSET', KEYS[3], 'v', fmt(v))
    redis.call('HDEL', KEYS[3], 'x')
    for _, k in ipairs({KEYS[2], KEYS[3], KEYS[6]}) do redis.call('PEXPIRE', k, math.min(ttl, 60000)) end
  elseif now - refreshed > 3600000 then
    redis.call('HSET', KEYS[3], 'x', now)
    for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ttl) end
    if held then redis.call('PEXPIRE', held, ttl) end
  end
end
if op == 'park' then return {promoted, waits, -1, pending, -1, -1, ahead} end
if op == 'resume' then return {promoted, moved, -1, pending, -1, -1, -1} end

-- a feed that promoted forgets, a few per call, the finish tags the
-- virtual time has passed and the ceilings that are over
if promoted > 0 then
  for _, h in ipairs({{KEYS[2], 'tc', v}, {KEYS[6], 'nc', now}}) do
    local sc = redis.call('HSCAN', h[1], redis.call('HGET', KEYS[3], h[2]) or '0', 'COUNT', 16)
    redis.call('HSET', KEYS[3], h[2], sc[1])
    local f = sc[2]
    for i = 1, #f, 2 do
      if tonumber(f[i + 1]) <= h[3] then redis.call('HDEL', h[1], f[i]) end
    end
  end
end
return {promoted, redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[4]), pending,
  redis.call('LLEN', KEYS[9]), redis.call('HLEN', KEYS[5]), -1}
