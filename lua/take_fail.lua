-- take_fail.lua: finish a task taken by take.lua that failed, as asynq
-- v0.26's retryCmd (mode 0) or archiveCmd (mode 1) does: the message,
-- rewritten by the caller with error_msg, last_failed_at and (retry of a
-- failure) retried+1, replaces the hash's msg, and the task moves to the
-- retry ZSET at its retry time or to the archived ZSET, trimmed as asynq
-- trims it (older than 90 days, or past the newest 10000, deleted).
--
-- KEYS[1] -> asynq:{<q>}:t:<id>                 HASH
-- KEYS[2] -> asynq:{<q>}:active                 LIST
-- KEYS[3] -> asynq:{<q>}:lease                  ZSET
-- KEYS[4] -> asynq:{<q>}:retry or :archived     ZSET
-- KEYS[5] -> asynq:{<q>}:processed:<yyyy-mm-dd> STRING
-- KEYS[6] -> asynq:{<q>}:failed:<yyyy-mm-dd>    STRING
-- KEYS[7] -> asynq:{<q>}:processed              STRING
-- KEYS[8] -> asynq:{<q>}:failed                 STRING
-- KEYS[9] -> asynq:{<q>}:t:                     task key prefix (archive)
-- ARGV[1] -> task id
-- ARGV[2] -> the rewritten message
-- ARGV[3] -> mode: 0 retry, 1 archive
-- ARGV[4] -> retry: seconds from now until the next attempt
-- ARGV[5] -> 1: count a failure (archive always counts); 0: do not
--            (asynq's isFailure)
-- ARGV[6] -> max int64 (asynq wraps the total counters to 1 there)
-- ARGV[7] -> now in Unix seconds, the finishing process's clock (asynq's
--            rule: it names the day counters too); 0 or absent reads Redis
--            TIME
--
-- Output: 1 finished; 0 the task is not active any more: nothing written.
-- TTL: day counters expire 90 days after their first count, as asynq's.
local STATS_TTL_S = 90 * 24 * 3600
local MAX_ARCHIVED = 10000
local ARCHIVED_TTL_S = 90 * 24 * 3600
if redis.call('LREM', KEYS[2], 0, ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[3], ARGV[1])
local now_s = tonumber(ARGV[7] or '0') or 0
if now_s <= 0 then now_s = tonumber(redis.call('TIME')[1]) end
local archive = ARGV[3] == '1'
if archive then
  redis.call('ZADD', KEYS[4], now_s, ARGV[1])
  local old = redis.call('ZRANGE', KEYS[4], '-inf', now_s - ARCHIVED_TTL_S, 'BYSCORE')
  local extra = redis.call('ZRANGE', KEYS[4], 0, -MAX_ARCHIVED)
  for _, set in ipairs({old, extra}) do
    if #set > 0 then
      for _, id in ipairs(set) do redis.call('DEL', KEYS[9] .. id) end
      redis.call('ZREM', KEYS[4], unpack(set))
    end
  end
  redis.call('HSET', KEYS[1], 'msg', ARGV[2], 'state', 'archived')
else
  redis.call('ZADD', KEYS[4], now_s + (tonumber(ARGV[4]) or 0), ARGV[1])
  redis.call('HSET', KEYS[1], 'msg', ARGV[2], 'state', 'retry')
end
if archive or ARGV[5] == '1' then
  for _, k in ipairs({KEYS[5], KEYS[6]}) do
    if redis.call('INCR', k) == 1 then redis.call('EXPIREAT', k, now_s + STATS_TTL_S) end
  end
  local total = redis.call('GET', KEYS[7])
  if tonumber(total) == tonumber(ARGV[6]) then
    redis.call('SET', KEYS[7], 1)
    redis.call('SET', KEYS[8], 1)
  else
    redis.call('INCR', KEYS[7])
    redis.call('INCR', KEYS[8])
  end
end
return 1
