-- priority.lua: a task's place by its priority (shaping/take serves the
-- lists in priority order; see take.lua).
--
-- op "place": task ARGV[2], just enqueued by asynq's Client (pending, or
-- scheduled for later), gets priority ARGV[3] (1, 2, 4 or 5): its hash
-- records it (field "shaper_priority", which take.lua reads when it
-- forwards, recovers or requeues the task), and a task still in pending
-- moves from there to the head of its priority list. A task already taken
-- is left alone (it goes at its place in pending's order).
-- op "cancel": task ARGV[2], waiting in its priority list, is deleted as
-- asynq's Inspector deletes a pending task (its unique lock released),
-- which asynq's own DeleteTask cannot do (it looks in pending only).
--
-- KEYS[1] -> asynq:{<q>}:pending   LIST
-- KEYS[2] -> asynq:{<q>}:t:<id>    HASH (the task)
-- KEYS[3] -> <prefix>:take:{<q>}:priority:<level>  LIST (the task's list)
-- ARGV[1] -> op: "place" | "cancel"
-- ARGV[2] -> task id
-- ARGV[3] -> place: the priority, 1, 2, 4 or 5
--
-- Output: place: 1 moved to its list, 2 recorded only (not pending: it
--   joins its list when it is forwarded), 0 no such task or already
--   taken. cancel: 1 deleted, 0 not in the list.
-- TTL: none (asynq's keys follow asynq; the lists hold only waiting ids).
local op, id = ARGV[1], ARGV[2]
if op == 'place' then
  local state = redis.call('HGET', KEYS[2], 'state')
  if not state or state == 'active' or state == 'completed' then return 0 end
  redis.call('HSET', KEYS[2], 'shaper_priority', ARGV[3])
  if state ~= 'pending' then return 2 end
  if redis.call('LREM', KEYS[1], 1, id) == 0 then return 0 end
  redis.call('LPUSH', KEYS[3], id)
  return 1
elseif op == 'cancel' then
  if redis.call('LREM', KEYS[3], 0, id) == 0 then return 0 end
  local unique = redis.call('HGET', KEYS[2], 'unique_key')
  if unique and unique ~= '' and redis.call('GET', unique) == id then redis.call('DEL', unique) end
  redis.call('DEL', KEYS[2])
  return 1
end
return redis.error_reply('priority: op must be place or cancel')
