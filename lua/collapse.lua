-- collapse.lua: one waiting task per collapse key (queue.Task.CollapseKey)
-- of a downstream, so redundant calls reach it as one.
--
-- op "claim": the key is claimed for task ARGV[2] about to be enqueued,
-- unless a task that holds it still waits (pending, scheduled or retry:
-- not yet taken); that task's id and message are returned instead. A key
-- whose task was taken, finished or deleted is free again. The claim
-- lasts ARGV[3] ms (the collapse window): a task waiting longer no longer
-- collapses newcomers.
-- op "replace": the waiting task ARGV[2], if it still holds the key,
-- still waits and its message is still ARGV[3], gets message ARGV[4] (the
-- newcomer's payload and headers): it keeps its id, its place and its
-- priority. Anything else changed nothing.
-- op "release": the key is freed if task ARGV[2] still holds it (its
-- enqueue failed).
--
-- KEYS[1] -> <prefix>:collapse:{<q>}:<collapse key>  STRING (task id)
-- ARGV[1] -> op: "claim" | "replace" | "release"
-- ARGV[2] -> task id
-- claim: ARGV[3] window in ms (>= 1), ARGV[4] task key prefix asynq:{<q>}:t:
-- replace: ARGV[3] the message read at the claim, ARGV[4] the new message,
--          ARGV[5] task key prefix
--
-- Output: claim: {1} claimed, or {0, id, msg} a waiting task holds it;
--   replace: 1 replaced, 0 not (the task was taken meanwhile: claim again);
--   release: 1 freed, 0 not.
-- TTL: the key lives for the window; a replace keeps its TTL.
local op, id = ARGV[1], ARGV[2]
local function waiting(st) return st == 'pending' or st == 'scheduled' or st == 'retry' end
if op == 'claim' then
  local old = redis.call('GET', KEYS[1])
  if old then
    local st = redis.call('HGET', ARGV[4] .. old, 'state')
    if waiting(st) then return {0, old, redis.call('HGET', ARGV[4] .. old, 'msg') or ''} end
  end
  local window = tonumber(ARGV[3])
  if window == nil or window < 1 then return redis.error_reply('collapse: window must be at least 1 ms') end
  redis.call('SET', KEYS[1], id, 'PX', math.floor(window))
  return {1}
elseif op == 'replace' then
  if redis.call('GET', KEYS[1]) ~= id then return 0 end
  local tk = ARGV[5] .. id
  if not waiting(redis.call('HGET', tk, 'state')) or redis.call('HGET', tk, 'msg') ~= ARGV[3] then return 0 end
  redis.call('HSET', tk, 'msg', ARGV[4])
  return 1
elseif op == 'release' then
  if redis.call('GET', KEYS[1]) ~= id then return 0 end
  redis.call('DEL', KEYS[1])
  return 1
end
return redis.error_reply('collapse: op must be claim, replace or release')
