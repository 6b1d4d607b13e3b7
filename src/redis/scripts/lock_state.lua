-- Lock state snapshot, any kind. KEYS[1] lock name; KEYS[2] the waiters:
-- dlock_lock_queue:{name} (ZSET, reentrant and fenced) or, for a fair lock,
-- redisson_lock_queue:{name} (LIST); KEYS[3] a fair lock's
-- redisson_lock_timeout:{name}, or a fenced lock's redisson_lock_token:{name}.
-- ARGV[1] kind: 'lock', 'fair', 'fenced' or 'rw'; ARGV[2] the holder-info
-- keys' prefix dlock_holder:{name} (":<owner>" appended); ARGV[3] the
-- queue's deadlines (dlock_lock_queue_timeout:{name} or the read-write
-- lock's), '' for a fair lock; ARGV[4] the grant channels' prefix
-- (dlock_lock_grant:{name}, or the read-write lock's; ":<client-id>" is
-- appended) and ARGV[5] the publish command, '' for a fair lock.
-- Returns {type, pttl, {field1, value1, ...}, {waiter, ...},
-- {ms until each waiter's deadline, ...}, token, {info per field pair},
-- {info per waiter}} (fields only for a hash; waiters oldest first, at
-- most 100, a queue entry left out when its waiter went away without
-- leaving: past its deadline, or its client has no subscriber on its grant
-- channel (a process that died: the hand-off would drop it too); deadlines
-- for a fair lock only; an info is false (nil) where none is recorded).
-- #include grant.lua
local t = redis.call('type', KEYS[1]).ok
local ttl = redis.call('pttl', KEYS[1])
local fields = {}
if t == 'hash' then
  fields = redis.call('hgetall', KEYS[1])
end
local queue, deadlines, token = {}, {}, 0
if ARGV[1] == 'fair' then
  if redis.call('type', KEYS[2]).ok == 'list' then
    local now = redis.call('time')
    now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    queue = redis.call('lrange', KEYS[2], 0, 99)
    for i, w in ipairs(queue) do
      local s = redis.pcall('zscore', KEYS[3], w)
      deadlines[i] = type(s) == 'string' and (tonumber(s) - now) or 0
    end
  end
elseif KEYS[2] and redis.call('type', KEYS[2]).ok == 'zset' then
  local all = redis.call('zrange', KEYS[2], 0, 99)
  local live = ARGV[3] and ARGV[3] ~= '' and
                   redis.call('type', ARGV[3]).ok == 'zset'
  local now = redis.call('time')
  now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  for _, m in ipairs(all) do
    local d = live and tonumber(redis.call('zscore', ARGV[3], m) or '0')
    local cid = string.match(m, '^([^:]+):')
    local heard = not ARGV[4] or ARGV[4] == '' or not cid or
                      grant_listened(ARGV[5], ARGV[4] .. ':' .. cid)
    if (not live or d > now) and heard then
      queue[#queue + 1] = m
    end
  end
end
local hinfos, winfos = {}, {}
local function info(owner)
  if not ARGV[2] or ARGV[2] == '' or not owner then
    return false
  end
  local v = redis.pcall('get', ARGV[2] .. ':' .. owner)
  if type(v) ~= 'string' then
    return false
  end
  return v
end
for i = 1, #fields, 2 do
  local f = fields[i]
  if f ~= 'mode' then
    -- a write hold's text is under its field's name, <owner>:write
    hinfos[(i + 1) / 2] = info(f)
  else
    hinfos[(i + 1) / 2] = false
  end
end
for i, w in ipairs(queue) do
  if ARGV[1] == 'fair' then
    winfos[i] = info(w)
  else
    local owner = string.match(w, '^([^:]*:[^:]*)')
    if owner and ARGV[1] == 'rw' then
      owner = owner .. ':write' -- a queued writer's
    end
    winfos[i] = info(owner)
  end
end
if ARGV[1] == 'fenced' then
  token = tonumber(redis.pcall('get', KEYS[3])) or 0
end
return {t, ttl, fields, queue, deadlines, token, hinfos, winfos}
