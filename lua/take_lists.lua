-- take_lists.lua: the lines of a reserving take over asynq's lists:
-- pending in first-in first-out order under a cap per key (listLine), and
-- the priority lists with fair order or a cap per key (levelsLine).
-- take.lua's chunk goes on here (internal/lua runs take.lua,
-- take_fairline.lua, this file and take_pick.lua as one script; this part
-- uses their locals).
--
-- KEYS[2] (pending), KEYS[10..14] (the priority lists, the weighted
-- levels' turns), ARGV[13] (the weights) and ARGV[26] (the cap per key):
-- as take.lua's header gives them.

-- listDepth is how deep a line looks into a list for n tasks: past the
-- tasks of keys at their cap (a lease lane looked at what the workers
-- held), or n when no key has a cap
local function listDepth(n)
  if kcap <= 0 then return n end
  return math.max(4 * n, 64)
end

-- admit says whether a task of key may have slot j: true (and its key's
-- ceiling interval), false to pass over it (its key is at its cap: it
-- stays where it is, and the line goes on in its list), or 'stop' (its
-- key is at its ceiling: it stays its list's tail, and the line goes on
-- with the next list). ceilinged is fairLine's, nil without fair order.
local function admit(key, j, ceilinged)
  if keyFull(key) then return false end
  local iv = 0
  if ceilinged and key then
    local ok
    iv, ok = ceilinged(key, j)
    if not ok then return 'stop' end
  end
  kcapLine(key)
  return true, iv
end

-- listLine lines up list k's tasks from its tail (at most listDepth(n)
-- deep, and no more than listPass past the last it lined up) as admit
-- lets them, its key being its msg's "shaper-key" header.
-- A task whose hash is gone is lined up from pending (the caller archives
-- it) and dropped from a priority list (deleted behind shaper's back). It
-- returns nextInLine and how many tasks are in view; nextInLine(j) gives
-- id, msg and the entry (pickChosen's), nil when none is left.
local listPass = 32
local function listLine(k, n, ceilinged)
  local ids = redis.call('LRANGE', k, -listDepth(n), -1)
  local i, stopped, passed = #ids + 1, false, 0
  return function(j)
    while not stopped and passed < listPass do
      i = i - 1
      local id = ids[i]
      if not id then return nil end
      local m = redis.call('HGET', tprefix .. id, 'msg')
      if m or k == KEYS[2] then
        local key = m and header(m, 'shaper-key')
        local ok, iv = admit(key, j, ceilinged)
        if ok == true then
          passed = 0
          return id, m or '', {id = id, from = k, key = key, iv = iv}
        end
        stopped, passed = ok == 'stop', passed + 1
      else
        redis.call('LREM', k, -1, id)
      end
    end
    return nil
  end, #ids
end

-- levelsLine lines up the tasks of the priority lists in the order the
-- take serves them: strict (levels 1 and 2, pending, 4 and 5) or weighted
-- (the level with the least tag among those with tasks in line: KEYS[14]'s
-- turns, played on a copy; each entry carries the tags after it, and the
-- pick keeps those of the last task it takes). Pending's tasks come from
-- pendingLine (fair order, or listLine), each other list's from listLine.
-- It returns nextInLine and how many entries may be in view.
local function levelsLine(n, pendingLine, pendingView, ceilinged)
  local lines, view = {}, pendingView
  for l, k in ipairs(serve) do
    if k == KEYS[2] then
      lines[l] = pendingLine
    else
      local inView
      lines[l], inView = listLine(k, n, ceilinged)
      view = view + inView
    end
  end
  local done, t = {}, weights and turnsNow()
  return function(j)
    while true do
      local best
      for l = 1, #serve do
        if not done[l] and (best == nil or t and t[l] < t[best]) then best = l end
      end
      if not best then return nil end
      local id, m, e = lines[best](j)
      if not id then
        done[best] = true
      else
        if t then
          local v = t[best]
          t[best] = v + 1 / weights[best]
          local after = {}
          for l = 1, 5 do
            t[l] = math.max(t[l] - v, 0)
            after[l] = t[l]
          end
          e.t = after
        end
        return id, m, e
      end
    end
  end, view
end
