-- quarantine.lua: move one corrupt task out of an asynq queue, atomically.
--
-- A task asynq cannot decode (or that points at no task hash) stops asynq's
-- crash recovery for its whole queue, so shaper judges each entry in Go and
-- moves the bad ones aside here. The script re-checks the judgement first:
-- an entry that changed since it was read (completed, re-enqueued) is left
-- alone, so nothing races with asynq's own scripts.
--
-- KEYS[1] -> asynq:{<q>}:t:<id>        task HASH
-- KEYS[2] -> asynq:{<q>}:pending       LIST
-- KEYS[3] -> asynq:{<q>}:active        LIST
-- KEYS[4] -> asynq:{<q>}:scheduled     ZSET
-- KEYS[5] -> asynq:{<q>}:retry         ZSET
-- KEYS[6] -> asynq:{<q>}:archived      ZSET
-- KEYS[7] -> asynq:{<q>}:lease         ZSET
-- KEYS[8] -> asynq:{<q>}:completed     ZSET
-- KEYS[9] -> <prefix>:quarantine:{<q>} LIST of JSON entries, newest first
-- ARGV[1] -> task id
-- ARGV[2] -> reason: no_task_hash | no_msg | empty_msg | undecodable_msg | id_mismatch
-- ARGV[3] -> the msg that was judged (undecodable_msg, id_mismatch): the
--            entry moves only while its msg is still exactly this
-- ARGV[4] -> entries the quarantine keeps (older ones are dropped)
-- ARGV[5] -> TTL of the quarantine in milliseconds (refreshed per entry)
-- ARGV[6] -> msg bytes kept per entry (hex-encoded in the entry)
--
-- Output: 0 when the entry no longer matches the reason (nothing written),
-- else the number of asynq structures the id was removed from (>= 1).
-- Entry: {"id", "reason", "at_ms", "in": [structure names], "state",
-- "msg_bytes", "msg_hex"} (msg_hex holds at most ARGV[6] bytes).
-- asynq's structures carry no TTL by design; the script only removes from
-- them. The quarantine list it writes gets a TTL (invariant 7).
if redis.replicate_commands then redis.replicate_commands() end

local task, id, reason = KEYS[1], ARGV[1], ARGV[2]
local msg = redis.call('HGET', task, 'msg')
local exists = redis.call('EXISTS', task) == 1
local still
if reason == 'no_task_hash' then
  still = not exists
elseif reason == 'no_msg' then
  still = exists and not msg
elseif reason == 'empty_msg' then
  still = msg == ''
else
  still = msg == ARGV[3]
end
if not still then return 0 end

local names = {'pending', 'active', 'scheduled', 'retry', 'archived', 'lease', 'completed'}
local from = {}
for i = 2, 3 do
  if redis.call('LREM', KEYS[i], 0, id) > 0 then table.insert(from, names[i - 1]) end
end
for i = 4, 8 do
  if redis.call('ZREM', KEYS[i], id) > 0 then table.insert(from, names[i - 1]) end
end
-- A hash no structure refers to is not what stops asynq; leave it.
if #from == 0 then return 0 end

local state = redis.call('HGET', task, 'state') or ''
local raw = msg or ''
local keep = string.sub(raw, 1, tonumber(ARGV[6]))
local hex = string.gsub(keep, '.', function(c) return string.format('%02x', string.byte(c)) end)
local t = redis.call('TIME')
local entry = cjson.encode({id = id, reason = reason, at_ms = t[1] * 1000 + math.floor(t[2] / 1000),
  ['in'] = from, state = state, msg_bytes = #raw, msg_hex = hex})
redis.call('DEL', task)
redis.call('LPUSH', KEYS[9], entry)
redis.call('LTRIM', KEYS[9], 0, tonumber(ARGV[4]) - 1)
redis.call('PEXPIRE', KEYS[9], tonumber(ARGV[5]))
return #from
