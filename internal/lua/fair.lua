-- fair.lua: weighted fair share of one downstream's queue among admission
-- keys (start-time fair queueing), in front of asynq's pending list.
--
-- A task of a fair downstream is enqueued into asynq as *scheduled* far
-- ahead (the horizon), so asynq leaves it alone, and parked here with a
-- virtual start tag: S = max(V, F[key]), F[key] = S + cost / weight, where
-- V is the tag of the last task promoted. Promotion pops the lowest tags
-- and moves those tasks from asynq's scheduled set to its pending list, as
-- asynq's own forwarder does, keeping pending at most `target` long. A key
-- with a backlog thus takes its weight's share of the downstream's slots;
-- a key arriving late starts at V and is promoted within a round; its
-- task, when none other of its key waits here and its finish tag is not
-- ahead of V, is promoted at once to the front of pending, so a key below
-- its share never queues. A task
-- not yet due (a future ProcessAt, or a per-key ceiling) waits in Later
-- and gets its tag when it becomes due. Should no process promote for the
-- horizon, asynq's forwarder releases the tasks in FIFO order: nothing is
-- lost, only fairness.
--
-- KEYS[1] -> parked    ZSET id → start tag
-- KEYS[2] -> tags      HASH key → finish tag of its last parked task
-- KEYS[3] -> state     HASH v (virtual time), tc/nc (HSCAN cursors)
-- KEYS[4] -> later     ZSET id → due time (ms)
-- KEYS[5] -> meta      HASH id → "cost|weight|key" (parked and later)
-- KEYS[6] -> counts    HASH key → tasks parked or later
-- KEYS[7] -> nb        HASH key → earliest promotion of its next task (ms)
-- KEYS[8] -> asynq:{q}:scheduled  ZSET
-- KEYS[9] -> asynq:{q}:pending    LIST (asynq dequeues from the right)
-- KEYS[10] -> asynq:{q}:active    LIST (read only: its length)
-- ARGV[1] -> op: "park" | "feed"
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
--
-- Reply: {promoted, parked, later, pending, active, keys, ahead}
--   promoted: tasks moved to pending by this call; parked/later: tasks
--   waiting here after it; pending/active: asynq's list lengths; keys:
--   admission keys with tasks here; ahead (park): tasks that go before
--   this one (in pending, and parked with lower tags; 0 when it went to
--   the front of pending), or -1 when it waits in later.
--   A feed that finds nothing parked or later replies all zeros (ahead -1)
--   after two reads.
-- TTL: every key here is refreshed to ARGV[5] by a call that writes; when
-- nothing is parked or later, meta and counts are empty (gone) and the
-- tags and state expire within 60s. A call with nothing to do writes
-- nothing.
if redis.replicate_commands then redis.replicate_commands() end

local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = tonumber(ARGV[6])
if now == nil or now <= 0 then now = math.floor(nowus / 1000) else nowus = now * 1000 end
local prefix, target, maxp, ttl = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local idle = math.min(ttl, 60000)

local function fmt(x) return string.format('%.17g', x) end

-- an idle queue costs two reads
if ARGV[1] == 'feed' and redis.call('ZCARD', KEYS[1]) == 0 and redis.call('ZCARD', KEYS[4]) == 0 then
  return {0, 0, 0, 0, 0, 0, -1}
end

local v = tonumber(redis.call('HGET', KEYS[3], 'v') or '0') or 0

-- tag parks a due task: its start tag follows its key's last finish.
local function tag(id, key, cost, w)
  local f = tonumber(redis.call('HGET', KEYS[2], key) or '0') or 0
  local s = math.max(v, f)
  redis.call('HSET', KEYS[2], key, fmt(s + cost / w))
  redis.call('ZADD', KEYS[1], fmt(s), id)
  return s
end

local function meta(id)
  local m = redis.call('HGET', KEYS[5], id)
  if not m then return nil end
  local c, w, k = string.match(m, '^([^|]+)|([^|]+)|(.*)$')
  return tonumber(c), tonumber(w), k
end

local function uncount(key)
  if redis.call('HINCRBY', KEYS[6], key, -1) <= 0 then redis.call('HDEL', KEYS[6], key) end
end

local pending = redis.call('LLEN', KEYS[9])
local promoted = 0

-- promote moves a parked task to pending: at the back (its turn), or at
-- the front (a key's first task: it goes before the tasks promoted ahead
-- of it, which all have tags at most its own).
local function promote(id, s, front)
  if s > v then v = s end
  local _, _, k = meta(id)
  redis.call('HDEL', KEYS[5], id)
  if k then uncount(k) end
  -- gone from scheduled: deleted, or run by hand, or forwarded by asynq
  if redis.call('ZREM', KEYS[8], id) == 0 then return end
  local tk = prefix .. id
  if redis.call('EXISTS', tk) == 0 then return end
  if front then redis.call('RPUSH', KEYS[9], id) else redis.call('LPUSH', KEYS[9], id) end
  redis.call('HSET', tk, 'state', 'pending', 'pending_since', string.format('%.0f', nowus * 1000))
  pending = pending + 1
  promoted = promoted + 1
end

local reply_ahead = -1
if ARGV[1] == 'park' then
  local id, key, cost, w = ARGV[7], ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10])
  local due, per = tonumber(ARGV[11]), tonumber(ARGV[12])
  if due < now then due = now end
  if per > 0 then
    local nb = tonumber(redis.call('HGET', KEYS[7], key) or '0') or 0
    if nb > due then due = nb end
    redis.call('HSET', KEYS[7], key, fmt(due + cost * per))
  end
  redis.call('HSET', KEYS[5], id, ARGV[9] .. '|' .. ARGV[10] .. '|' .. key)
  local alone = redis.call('HINCRBY', KEYS[6], key, 1) == 1
  local f = tonumber(redis.call('HGET', KEYS[2], key) or '0') or 0
  if due > now then
    redis.call('ZADD', KEYS[4], due, id)
  elseif alone and f <= v then
    -- nothing else of this key waits here and it has had no more than
    -- its share lately (its finish tag is not ahead of V): it starts at
    -- once, whatever the others' backlogs, so a key below its share
    -- never queues
    redis.call('HSET', KEYS[2], key, fmt(v + cost / w))
    promote(id, v, true)
    reply_ahead = 0
  else
    local s = tag(id, key, cost, w)
    reply_ahead = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. fmt(s)) + pending
  end
end

-- due tasks of later get their tags now
local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, maxp)
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[4], id)
  local c, w, k = meta(id)
  if c then tag(id, k, c, w) end
end

-- promote while pending is short: lowest tags first
local budget = maxp
while pending < target and budget > 0 do
  local popped = redis.call('ZPOPMIN', KEYS[1], math.min(target - pending, budget))
  if #popped == 0 then break end
  for i = 1, #popped, 2 do
    budget = budget - 1
    promote(popped[i], tonumber(popped[i + 1]), false)
    if popped[i] == ARGV[7] then reply_ahead = pending - 1 end
  end
end

local parked = redis.call('ZCARD', KEYS[1])
local later = redis.call('ZCARD', KEYS[4])
local wrote = promoted > 0 or ARGV[1] == 'park' or #due > 0
if parked + later == 0 then
  -- V and the finish tags still say who was served lately (a key that
  -- just had its share is not new); they last a short while
  if wrote then
    redis.call('HSET', KEYS[3], 'v', fmt(v))
    for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], idle) end
  end
elseif wrote then
  redis.call('HSET', KEYS[3], 'v', fmt(v))
  -- forget finish tags the virtual time has passed, a few per call
  local sc = redis.call('HSCAN', KEYS[2], redis.call('HGET', KEYS[3], 'tc') or '0', 'COUNT', 16)
  redis.call('HSET', KEYS[3], 'tc', sc[1])
  local f = sc[2]
  for i = 1, #f, 2 do
    if tonumber(f[i + 1]) <= v then redis.call('HDEL', KEYS[2], f[i]) end
  end
  for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ttl) end
end
if wrote and redis.call('EXISTS', KEYS[7]) == 1 then
  local sc = redis.call('HSCAN', KEYS[7], redis.call('HGET', KEYS[3], 'nc') or '0', 'COUNT', 16)
  if parked + later > 0 then redis.call('HSET', KEYS[3], 'nc', sc[1]) end
  local f = sc[2]
  for i = 1, #f, 2 do
    if tonumber(f[i + 1]) <= now then redis.call('HDEL', KEYS[7], f[i]) end
  end
  redis.call('PEXPIRE', KEYS[7], ttl)
end
return {promoted, parked, later, pending, redis.call('LLEN', KEYS[10]), redis.call('HLEN', KEYS[6]), reply_ahead}
