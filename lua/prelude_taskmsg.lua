-- prelude_taskmsg.lua: what a take reads in a task's message (asynq's
-- encoded TaskMessage) without decoding it: shaper's headers (take.lua).
--
-- Defines (m: the msg field of a task hash):
--   header(m, name): the value of header name, or nil
--   cost(m): the units the task costs ("shaper-cost", 1 when absent)
--   deadline(m): its "shaper-deadline" in µs since the epoch, or nil
-- header is the value of header name in a task's msg (asynq's
-- TaskMessage: a headers map entry is key field 1, value field 2; the last
-- such entry, as the headers come last), or nil. The Go side checks what
-- the take made of it against the task's decoded headers.
local function header(m, name)
  local entry = '\10' .. string.char(#name) .. name .. '\18'
  local at, from = nil, 1
  while true do
    local i = string.find(m, entry, from, true)
    if not i then break end
    at, from = i + #entry, i + 1
  end
  if not at then return nil end
  -- the value's length, a varint (an admission key may be 128 bytes or
  -- more)
  local len, shift = 0, 1
  while true do
    local b = string.byte(m, at)
    if not b then return nil end
    at = at + 1
    if b < 128 then
      len = len + b * shift
      break
    end
    len, shift = len + (b - 128) * shift, shift * 128
  end
  return string.sub(m, at, at + len - 1)
end

-- cost is the units a task costs ("shaper-cost", 1 when absent; one
-- unreadable counts as 1, and the caller's check of the headers finds it)
local function cost(m)
  local c = header(m, 'shaper-cost')
  return c and tonumber(c) or 1
end

-- deadline is the task's "shaper-deadline" (RFC 3339 in UTC, as the
-- producer writes it) in µs since the epoch, or nil
local function deadline(m)
  local v = header(m, 'shaper-deadline')
  if not v then return nil end
  local y, mo, d, h, mi, sec, frac = string.match(v, '^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)%.?(%d*)Z$')
  if not y then return nil end
  y, mo = tonumber(y), tonumber(mo)
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((mo + 9) % 12) + 2) / 5) + tonumber(d) - 1
  local days = era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
  local us = tonumber(string.sub(frac .. '000000', 1, 6))
  return ((days * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60000000 + tonumber(sec) * 1000000 + us
end
