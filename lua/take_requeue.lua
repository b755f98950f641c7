-- take_requeue.lua: give back tasks that take.lua took but whose call never
-- started (shutdown, a slot given up), as asynq v0.26's requeueCmd does:
-- each goes to the head of pending in state "pending", no attempt consumed.
-- The reserved slots are not given back (a wasted slot dips the output;
-- returning it could let two processes release in one slot).
--
-- KEYS[1] -> asynq:{<q>}:active  LIST
-- KEYS[2] -> asynq:{<q>}:lease   ZSET
-- KEYS[3] -> asynq:{<q>}:pending LIST
-- KEYS[4] -> asynq:{<q>}:t:      task key prefix
-- ARGV[1..] -> task ids, the one to run last first (each is pushed to the
--              head, so the last id given is the next one taken)
--
-- Output: how many were requeued (an id no longer active is skipped).
-- TTL: none written (asynq's keys follow asynq).
local n = 0
for _, id in ipairs(ARGV) do
  if redis.call('LREM', KEYS[1], 0, id) > 0 then
    redis.call('ZREM', KEYS[2], id)
    redis.call('RPUSH', KEYS[3], id)
    redis.call('HSET', KEYS[4] .. id, 'state', 'pending')
    n = n + 1
  end
end
return n
