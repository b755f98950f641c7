-- keyrates.lua: a fair downstream's key_rates map, where its takes read
-- it (take_fairline.lua): one HASH per downstream, written whole and
-- atomically, so that a take sees the old map or the new one.
--
-- KEYS[1] -> <prefix>:fair:{<q>}:keyrates  HASH: "v" -> the map's version,
--            "k:<key>" -> the key's interval in µs for one unit of cost
-- ARGV[1] -> the version of the map the caller holds (a digest of it)
-- ARGV[2] -> TTL in ms
-- ARGV[3..] -> pairs key, µs: the whole map (none: only check)
--
-- Reply: 1 when the HASH holds the caller's version after the call (its
-- TTL renewed; written when pairs came and it held another or none), 0
-- when it does not (a check of a missing or other version: send the map).
-- TTL: ARGV[2], renewed by every call that finds or writes the version.
if redis.replicate_commands then redis.replicate_commands() end

local ttl = tonumber(ARGV[2])
if ttl == nil or ttl < 1 then return redis.error_reply('keyrates: TTL must be at least 1 ms') end
if redis.call('HGET', KEYS[1], 'v') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ttl)
  return 1
end
if #ARGV < 3 then return 0 end
redis.call('DEL', KEYS[1])
local batch = {'v', ARGV[1]}
for i = 3, #ARGV - 1, 2 do
  batch[#batch + 1] = 'k:' .. ARGV[i]
  batch[#batch + 1] = ARGV[i + 1]
  if #batch >= 1000 then
    redis.call('HSET', KEYS[1], unpack(batch))
    batch = {}
  end
end
if #batch > 0 then redis.call('HSET', KEYS[1], unpack(batch)) end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
