-- prelude_admission.lua: prepended by internal/lua, after prelude_clock.lua,
-- to the six admission scripts. It reads the arguments they share (ARGV[3]
-- cost, ARGV[4] mode: 0 charge, 1 peek, 2 refund, ARGV[5] now; each
-- script's header has the whole contract) and defines what several of
-- them use. It writes nothing.
local MARGIN_MS = 1000 -- TTL margin past the time a key carries state
local cost = tonumber(ARGV[3])
local mode = tonumber(ARGV[4])
local now = now_us(ARGV[5])

-- Lua 5.1 turns a number into a string with "%.14g", which rounds away
-- the digits past the 14th: a 16-digit µs time (a score bound) or the
-- 15-digit window number of a window under ~20µs (a key name) would be
-- off. Key names, fields and score bounds format integers exactly.
local function int(x) return string.format('%.0f', x) end

-- bucket_state reads a bucket HASH {field, ts} (token and leaky bucket):
-- its amount (initial when the key is missing or incomplete), the time
-- elapsed since ts, never negative (a clock step back moves nothing), and
-- the time to decide at, never before ts.
local function bucket_state(key, field, initial)
  local st = redis.call('HMGET', key, field, 'ts')
  local v, ts = tonumber(st[1]), tonumber(st[2])
  if v == nil or ts == nil then return initial, 0, now end
  if ts > now then return v, 0, ts end
  return v, now - ts, now
end

-- refund_counter gives cost units back to the window counter k (fixed
-- window, sliding counter), never below 0; DECRBY keeps the key's TTL.
local function refund_counter(k)
  local c = tonumber(redis.call('GET', k) or '0')
  if c > 0 then redis.call('DECRBY', k, math.min(c, cost)) end
end
