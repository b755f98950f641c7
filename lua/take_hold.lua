-- take_hold.lua: give back a task of a fair downstream that take.lua took
-- but whose call never started, to fair order, waiting in asynq's pending
-- list, numbered (prelude_fairpos.lua), no attempt consumed:
-- * its admission key was paused (shaper ctl key NAME KEY pause): where
--   take.lua puts a paused key's task that it meets in fair order, the
--   held set, at the virtual time V (among the first of its key's tasks
--   once the key resumes; fair.lua's resume brings it back to parked);
-- * its slot was wasted (a late wake-up, a gate that shut): parked at V,
--   first in fair order, so the next take reserves its next slot (its
--   key's ceiling and cap hold there, as for any parked task).
--
-- KEYS[1] -> asynq:{<q>}:active         LIST
-- KEYS[2] -> asynq:{<q>}:lease          ZSET
-- KEYS[3] -> asynq:{<q>}:pending        LIST
-- KEYS[4] -> asynq:{<q>}:t:<id>         HASH
-- KEYS[5] -> <prefix>:fair:{<q>}:state  HASH (v: the virtual time)
-- KEYS[6] -> <prefix>:fair:{<q>}:counts HASH key -> tasks parked or later
-- KEYS[7] -> <prefix>:fair:{<q>}:held   ZSET (fair.lua's KEYS[9]), or
--            :parked ZSET (fair.lua's KEYS[1]) with ARGV[6]
-- KEYS[8] -> <prefix>:fair:{<q>}:pos    HASH (fair.lua's KEYS[10])
-- ARGV[1] -> task id
-- ARGV[2] -> its admission key
-- ARGV[3] -> its cost (> 0)
-- ARGV[4] -> its key's weight (> 0)
-- ARGV[5] -> TTL of the fair keys, ms
-- ARGV[6] -> "parked": KEYS[7] is parked (a wasted slot); else held
--
-- Output: 1 held; 0 the task is not active any more (its lease was
-- recovered and it belongs to whoever took it next): nothing written.
-- TTL: KEYS[7], counts, state and pos get ARGV[5] (fair.lua's TTL). asynq's
-- keys follow asynq: no TTL.
if redis.call('LREM', KEYS[1], 0, ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('LPUSH', KEYS[3], ARGV[1])
local t = redis.call('TIME')
redis.call('HSET', KEYS[4], 'state', 'pending', 'pending_since', t[1] .. string.format('%06d', tonumber(t[2])) .. '000')
fpPlace(KEYS[3], KEYS[8], ARGV[1], 0)
local key = ARGV[2]
local v = redis.call('HGET', KEYS[5], 'v') or '0'
-- a member of parked is "<cost>|<weight>|<len(key)>|<key><id>"; of held,
-- "<len(key)>|<key>|<tag>|<member>" (fair.lua)
local m = ARGV[3] .. '|' .. ARGV[4] .. '|' .. #key .. '|' .. key .. ARGV[1]
if ARGV[6] == 'parked' then
  -- at V, and before the tasks of its tag as a key that starts is ("!")
  redis.call('ZADD', KEYS[7], v, '!' .. m)
else
  redis.call('ZADD', KEYS[7], 0, #key .. '|' .. key .. '|' .. v .. '|' .. m)
end
-- take.lua counted it out when it took it
redis.call('HINCRBY', KEYS[6], key, 1)
for i = 5, 8 do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
return 1
