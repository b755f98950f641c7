-- prelude_fairpos.lua: where a fair downstream's waiting task sits in
-- asynq's pending LIST, so that a take can move it out of the middle of
-- the list without scanning it (fair.lua, take.lua, take_hold.lua).
--
-- A fair downstream's tasks wait in asynq's pending list, as any task
-- does (asynq's Inspector shows them pending), and the fair index picks
-- them out of that order. The pos HASH (task id -> number) numbers the
-- tasks the index knows so that the difference between two tasks'
-- numbers is the difference between their distances from the tail. A
-- push or pop at either end keeps that true (asynq's enqueue and forward
-- push at the head; a give-back or recovery pushes at the tail; a take
-- pops there), and so does a take from the middle: the tail task moves
-- into the place left and the tail is popped. A task's place is then
-- found from any numbered task's, the tail's first. Only a removal from
-- the middle by someone else (asynq's DeleteTask or ArchiveTask, the
-- quarantine) shifts the tasks on one side of it: a take that does not
-- find its task at its place looks in a window around it, then along the
-- list. A task not in pos (given back, recovered, forwarded, enqueued by
-- asynq's own Client) is not in fair order: take.lua serves it once it
-- is at the tail.
--
-- Defines (pending, pos: key names; id: a task id):
--   fpPlace(pending, pos, id, i): number id, which is at index i from the
--     head
--   fpTake(pending, pos, tprefix, id): remove numbered id from pending;
--     true if it was there (tprefix: asynq's task key prefix, to tell a
--     task deleted or moved by someone else without a scan)

local FP_WINDOW = 32

-- fpRef: a numbered task at or near the tail: its distance from the tail
-- (1: the tail) and its number; nil when none of the last FP_WINDOW is
-- numbered
local function fpRef(pending, pos)
  local a = redis.call('HGET', pos, redis.call('LINDEX', pending, -1) or '')
  if a then return 1, tonumber(a) end
  local ids = redis.call('LRANGE', pending, -FP_WINDOW, -2)
  for j = #ids, 1, -1 do
    a = redis.call('HGET', pos, ids[j])
    if a then return #ids - j + 2, tonumber(a) end
  end
  return nil
end

local function fpPlace(pending, pos, id, i)
  -- the task just behind it, toward the tail, is numbered (the common
  -- case): one more
  local o = redis.call('LINDEX', pending, i + 1)
  local a = o and redis.call('HGET', pos, o)
  if a then
    redis.call('HSET', pos, id, tonumber(a) + 1)
    return
  end
  local n = redis.call('LLEN', pending)
  local m = n - i
  -- a numbered task a little further behind it (j places behind)
  local ids = redis.call('LRANGE', pending, i + 2, i + FP_WINDOW)
  for j, o in ipairs(ids) do
    a = redis.call('HGET', pos, o)
    if a then
      redis.call('HSET', pos, id, tonumber(a) + j + 1)
      return
    end
  end
  local rm, ra = fpRef(pending, pos)
  if rm then
    redis.call('HSET', pos, id, ra + m - rm)
    return
  end
  -- none near it or the tail: the first numbered one between, if any
  if redis.call('HLEN', pos) > 0 then
    local from = i + FP_WINDOW + 1
    while from < n - FP_WINDOW do
      for j, o in ipairs(redis.call('LRANGE', pending, from, from + 511)) do
        a = redis.call('HGET', pos, o)
        if a then
          redis.call('HSET', pos, id, tonumber(a) + from + j - 1 - i)
          return
        end
      end
      from = from + 512
    end
  end
  redis.call('HSET', pos, id, m)
end

-- fpFind: where numbered task id (number a) is: its distance from the
-- tail and the reference it was found from (distance, number), or nil
-- when id is not in pending. ra, when given, is the tail's number.
local function fpFind(pending, pos, tprefix, id, a, ra)
  local rm = 1
  if not ra then rm, ra = fpRef(pending, pos) end
  if rm then
    local m = a - ra + rm
    if m >= 1 and redis.call('LINDEX', pending, -m) == id then return m, rm, ra end
    -- someone removed a task from the middle: look around its place
    if redis.call('HGET', tprefix .. id, 'state') ~= 'pending' then return nil end
    local n = redis.call('LLEN', pending)
    local lo, hi = math.max(m - FP_WINDOW, 1), math.min(m + FP_WINDOW, n)
    if lo <= hi then
      for j, o in ipairs(redis.call('LRANGE', pending, -hi, -lo)) do
        if o == id then return hi - j + 1, rm, ra end
      end
    end
  elseif redis.call('HGET', tprefix .. id, 'state') ~= 'pending' then
    return nil
  end
  local i = redis.call('LPOS', pending, id, 'RANK', -1)
  if not i then return nil end
  return redis.call('LLEN', pending) - i, rm, ra
end

-- fpTake: tail and ta, when given, are the tail task and its number
local function fpTake(pending, pos, tprefix, id, tail, ta)
  local a = tonumber(redis.call('HGET', pos, id))
  if not a then return false end
  local m, rm, ra = fpFind(pending, pos, tprefix, id, a, ta)
  redis.call('HDEL', pos, id)
  if not m then return false end
  if m > 1 then
    if rm ~= 1 then
      -- the tail is served first (not in fair order): it stays there
      redis.call('LREM', pending, -1, id)
      return true
    end
    local t = tail or redis.call('LINDEX', pending, -1)
    redis.call('LSET', pending, -m, t)
    redis.call('HSET', pos, t, ra + m - 1)
  end
  redis.call('RPOP', pending)
  return true
end
