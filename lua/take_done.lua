-- take_done.lua: finish a task taken by take.lua that succeeded, as asynq
-- v0.26's doneCmd (no retention) or markAsCompleteCmd (a retention) does,
-- and release its uniqueness lock as the *Unique variants do.
--
-- KEYS[1] -> asynq:{<q>}:active                 LIST
-- KEYS[2] -> asynq:{<q>}:lease                  ZSET
-- KEYS[3] -> asynq:{<q>}:t:<id>                 HASH
-- KEYS[4] -> asynq:{<q>}:processed:<yyyy-mm-dd> STRING
-- KEYS[5] -> asynq:{<q>}:processed              STRING
-- KEYS[6] -> asynq:{<q>}:completed              ZSET
-- KEYS[7] -> the task's unique key (optional)   STRING
-- ARGV[1] -> task id
-- ARGV[2] -> retention in seconds: 0 deletes the task hash; more keeps it
--            in completed until now + retention
-- ARGV[3] -> retention only: the message with completed_at set
-- ARGV[4] -> max int64 (asynq wraps the total counter to 1 there)
-- ARGV[5] -> now in Unix seconds, the finishing process's clock (asynq's
--            rule: it names the day counter too); 0 or absent reads Redis
--            TIME
--
-- Output: 1 finished; 0 the task is not active any more (its lease was
-- recovered and it belongs to whoever took it next): nothing written.
-- TTL: the day counter expires 90 days after its first count, as asynq's
-- (statsTTL). asynq's other keys follow asynq: no TTL.
local STATS_TTL_S = 90 * 24 * 3600
if redis.call('LREM', KEYS[1], 0, ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
local now_s = tonumber(ARGV[5] or '0') or 0
if now_s <= 0 then now_s = tonumber(redis.call('TIME')[1]) end
local retention = tonumber(ARGV[2]) or 0
if retention > 0 then
  redis.call('ZADD', KEYS[6], now_s + retention, ARGV[1])
  redis.call('HSET', KEYS[3], 'msg', ARGV[3], 'state', 'completed')
else
  redis.call('DEL', KEYS[3])
end
if redis.call('INCR', KEYS[4]) == 1 then
  redis.call('EXPIREAT', KEYS[4], now_s + STATS_TTL_S)
end
local total = redis.call('GET', KEYS[5])
if tonumber(total) == tonumber(ARGV[4]) then
  redis.call('SET', KEYS[5], 1)
else
  redis.call('INCR', KEYS[5])
end
if KEYS[7] and redis.call('GET', KEYS[7]) == ARGV[1] then
  redis.call('DEL', KEYS[7])
end
return 1
