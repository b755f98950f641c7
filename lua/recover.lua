-- recover.lua: return the tasks of a dead worker process to the front of
-- their asynq queue, fast and without consuming a retry.
--
-- asynq keeps a held task in the queue's `active` LIST with a lease in the
-- `lease` ZSET (score: expiry, unix seconds), extended every 5 s by the
-- holding process's heartbeat to now + lease duration. A lease that has
-- not been extended for `stale` seconds belongs to a process that is gone
-- (or cut off); asynq's own recoverer waits for expiry + 30 s and counts a
-- retry. This moves such tasks back at once. Every move is guarded by LREM
-- on `active`, as asynq's own scripts are. asynq's recoverer lists expired
-- leases first and moves them one by one later, so a lease it may already
-- have listed (expired more than lease - skew seconds ago) is left to it:
-- otherwise its late move could take the task again after a worker here
-- re-dequeued it, and deliver it twice. The two recoverers' sets are
-- disjoint as long as clocks agree within skew seconds.
--
-- KEYS[1] -> asynq:{<qname>}:lease   (ZSET)
-- KEYS[2] -> asynq:{<qname>}:active  (LIST)
-- KEYS[3] -> asynq:{<qname>}:pending (LIST; asynq dequeues from the right)
-- KEYS[4..7] -> <prefix>:take:{<qname>}:priority:1, :2, :4, :5 (optional,
--             all four or none): a task whose hash field "shaper_priority"
--             names one of these goes back to the front of that list
-- ARGV[1] -> task key prefix, asynq:{<qname>}:t:
-- ARGV[2] -> lease duration in seconds (asynq's: 30)
-- ARGV[3] -> stale after this many seconds without an extension
-- ARGV[4] -> at most this many tasks per call
-- ARGV[5] -> now in unix seconds, or 0 to read Redis TIME (tests only)
-- ARGV[6] -> skew in seconds: leases that expired more than
--            (lease duration - skew) ago are asynq's recoverer's
--
-- Output: {moved, dropped}: moved went back to the front of pending;
--   dropped were in active with no task hash (nothing to deliver; their
--   entries are removed so asynq's recoverer does not stall on them).
-- TTL: writes only asynq's own keys, which asynq manages (no new key).
if redis.replicate_commands then redis.replicate_commands() end

local now = tonumber(ARGV[5])
local nowus
local t = redis.call('TIME')
nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
if now == nil or now <= 0 then now = tonumber(t[1]) end
local cutoff = now + tonumber(ARGV[2]) - tonumber(ARGV[3])
local floor = now - (tonumber(ARGV[2]) - tonumber(ARGV[6]))
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], floor, '(' .. cutoff, 'LIMIT', 0, tonumber(ARGV[4]))
local moved, dropped = 0, 0
for _, id in ipairs(ids) do
  if redis.call('LREM', KEYS[2], 1, id) > 0 then
    redis.call('ZREM', KEYS[1], id)
    local key = ARGV[1] .. id
    if redis.call('EXISTS', key) == 1 then
      redis.call('HSET', key, 'state', 'pending', 'pending_since', string.format('%.0f', nowus * 1000))
      local home = KEYS[3]
      if KEYS[7] then
        local p = redis.call('HGET', key, 'shaper_priority')
        local lists = {['1'] = KEYS[4], ['2'] = KEYS[5], ['4'] = KEYS[6], ['5'] = KEYS[7]}
        home = lists[p or ''] or KEYS[3]
      end
      redis.call('RPUSH', home, id)
      moved = moved + 1
    else
      dropped = dropped + 1
    end
  else
    -- not active any more (done, or moved by asynq): a stale lease entry
    redis.call('ZREM', KEYS[1], id)
  end
end
return {moved, dropped}
