-- fairsvc.lua: the attained service of a fair downstream's admission keys
-- across every process: the units each key was served per unit of its
-- weight, fading with time constant tau. Each process's lane orders its
-- waiting workers by least attained service; with only its own count, a
-- process that holds the last tasks of a light key serves them at that
-- key's share of its own slots while other processes serve the heavy key
-- with theirs. Adding the others' service, the light key's tasks go first
-- wherever they are held.
--
-- KEYS[1] -> svc   HASH admission key → "<service>|<ms>" (as of ms)
-- ARGV[1] -> tau, ms (> 0)
-- ARGV[2] -> now in ms, or 0 to read Redis TIME (tests only)
-- ARGV[3] -> n: the increments that follow
-- ARGV[4 .. 3+3n] -> key, increment, start triples: units per weight this
--                    process served the key since its last call, and the
--                    service the key starts at if the hash does not hold
--                    it (or holds it faded out): where the process's lane
--                    lifted a key new to it (0: none)
-- ARGV[4+3n ..]   -> the keys whose service to return
--
-- Reply: the service of each key asked, as of now, in thousandths of a
-- unit, in the order asked (0 for a key not served lately).
-- TTL: the hash lasts 60 s after the last increment; a call that adds
-- drops a few faded entries once the hash holds 64 more than it adds.
if redis.replicate_commands then redis.replicate_commands() end

local tau, now, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if not now or now <= 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function decayed(s)
  if not s then return 0 end
  local v, at = string.match(s, '^([^|]+)|(.+)$')
  v, at = tonumber(v), tonumber(at)
  if not v or not at then return 0 end
  return v * math.exp(-math.max(now - at, 0) / tau)
end

if n > 0 then
  local ks = {}
  for i = 1, n do ks[i] = ARGV[1 + 3 * i] end
  local cur = redis.call('HMGET', KEYS[1], unpack(ks))
  local out = {}
  for i = 1, n do
    local base = decayed(cur[i])
    if base < 1e-3 then base = tonumber(ARGV[3 + 3 * i]) or 0 end
    out[#out + 1] = ks[i]
    out[#out + 1] = string.format('%.6g|%d', base + tonumber(ARGV[2 + 3 * i]), now)
  end
  redis.call('HSET', KEYS[1], unpack(out))
  redis.call('PEXPIRE', KEYS[1], 60000)
  if redis.call('HLEN', KEYS[1]) > 64 + n then
    local f = redis.call('HRANDFIELD', KEYS[1], 16, 'WITHVALUES')
    for i = 1, #f, 2 do
      if decayed(f[i + 1]) < 1e-3 then redis.call('HDEL', KEYS[1], f[i]) end
    end
  end
end

local reply, want = {}, {}
for i = 4 + 3 * n, #ARGV do want[#want + 1] = ARGV[i] end
if #want > 0 then
  local cur = redis.call('HMGET', KEYS[1], unpack(want))
  for i = 1, #want do reply[i] = math.floor(decayed(cur[i]) * 1000 + 0.5) end
end
return reply
