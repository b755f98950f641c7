-- take_capline.lua: the line of a reserving take in first-in first-out
-- order under a cap per key on calls in flight: take.lua's chunk goes on
-- here (internal/lua runs take.lua, take_fairline.lua, this file and
-- take_pick.lua as one script; this part uses their locals).
--
-- KEYS[2] (pending) and ARGV[26] (the cap per key): as take.lua's header
-- gives them.

-- capLine lines up the tasks of pending from its tail, passing over a
-- task whose key (its msg's "shaper-key" header) is at its cap: it stays
-- where it is, and is first in line once its key has a place again. It
-- looks at most capDepth(n) tasks deep, as a lease lane looked at what
-- the workers held. A task whose hash is gone is lined up (the caller
-- archives it). It returns nextInLine and how many tasks are in view;
-- nextInLine gives id, msg and the entry (pickChosen's).
local function capDepth(n) return math.max(4 * n, 64) end
local function capLine(n)
  local ids = redis.call('LRANGE', KEYS[2], -capDepth(n), -1)
  local i = #ids + 1
  return function()
    while true do
      i = i - 1
      local id = ids[i]
      if not id then return nil end
      local m = redis.call('HGET', tprefix .. id, 'msg')
      local key = m and header(m, 'shaper-key')
      if not keyFull(key) then
        if key then kcapLined[key] = (kcapLined[key] or 0) + 1 end
        return id, m or '', {id = id, key = key, iv = 0, fifo = true}
      end
    end
  end, #ids
end
