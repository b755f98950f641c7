-- take_requeue.lua: give back tasks that take.lua took but whose call never
-- started (shutdown, a slot given up), as asynq v0.26's requeueCmd does:
-- each goes to the head of pending (or of its priority list) in state
-- "pending", no attempt consumed. The reserved slots are not given back (a
-- wasted slot dips the output; returning it could let two processes
-- release in one slot).
--
-- KEYS[1] -> asynq:{<q>}:active  LIST
-- KEYS[2] -> asynq:{<q>}:lease   ZSET
-- KEYS[3] -> asynq:{<q>}:pending LIST
-- KEYS[4] -> asynq:{<q>}:t:      task key prefix
-- KEYS[5..8] -> <prefix>:take:{<q>}:priority:1, :2, :4, :5 (optional, all
--            four or none): a task whose hash field "shaper_priority"
--            names one of these levels goes back to that list
-- ARGV[1..] -> task ids, the one to run last first (each is pushed to the
--              head, so the last id given is the next one taken)
--
-- Output: how many were requeued (an id no longer active is skipped).
-- TTL: none written (asynq's keys follow asynq).
local listOf = {}
if KEYS[8] then
  listOf = {['1'] = KEYS[5], ['2'] = KEYS[6], ['4'] = KEYS[7], ['5'] = KEYS[8]}
end
local n = 0
for _, id in ipairs(ARGV) do
  if redis.call('LREM', KEYS[1], 0, id) > 0 then
    redis.call('ZREM', KEYS[2], id)
    local home = KEYS[3]
    if KEYS[8] then home = listOf[redis.call('HGET', KEYS[4] .. id, 'shaper_priority') or ''] or KEYS[3] end
    redis.call('RPUSH', home, id)
    redis.call('HSET', KEYS[4] .. id, 'state', 'pending')
    n = n + 1
  end
end
return n
