-- take_extend.lua: extend the leases of tasks a process holds, on the Redis
-- clock (asynq's ExtendLease does ZADD XX on the client's clock).
--
-- KEYS[1] -> asynq:{<q>}:lease ZSET
-- ARGV[1] -> lease duration in seconds, >= 1
-- ARGV[2..] -> task ids
--
-- Redis 6.2 or later (ZMSCORE).
--
-- Output: {expiry in Unix seconds, then one flag per id: 1 leased, 0 the
-- lease is gone (recovered or finished elsewhere)}.
-- TTL: none written (the lease ZSET is asynq's).
local t = redis.call('TIME')
local exp = tonumber(t[1]) + (tonumber(ARGV[1]) or 30)
local out = {exp}
if #ARGV < 2 then return out end
local zs, ids = {}, {}
for i = 2, #ARGV do
  zs[#zs + 1] = exp
  zs[#zs + 1] = ARGV[i]
  ids[#ids + 1] = ARGV[i]
end
redis.call('ZADD', KEYS[1], 'XX', unpack(zs))
for _, sc in ipairs(redis.call('ZMSCORE', KEYS[1], unpack(ids))) do
  if sc then out[#out + 1] = 1 else out[#out + 1] = 0 end
end
return out
