-- rw_handoff.lua (a fragment, included by rw_read_release.lua and
-- rw_write_release.lua after grant.lua: see cmake/embed_scripts.cmake):
-- the hand-off of a freed read-write lock to the oldest live queued
-- writer, and the live reader count. docs/LAYOUT.md, "Read-write locks",
-- is the contract.
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- acc: the dlock clients known to be subscribed to Redisson's channel
local function note(acc, cid)
  if cid and not acc.seen[cid] then
    acc.seen[cid] = true
    acc.clients = acc.clients + 1
  end
end
-- A fresh acc, counting the releasing client (its owner field "<client-id>:
-- ...") when it says it is subscribed (flag '1').
local function releaser_acc(flag, owner)
  local acc = {seen = {}, clients = 0}
  if flag == '1' then
    note(acc, string.match(owner, '^([^:]+):'))
  end
  return acc
end
-- Drops expired reader registrations, and those of clients no longer
-- subscribed to their grant channel (gone: at most 10 clients asked);
-- returns how many live ones are left.
local function live_readers(k, now, acc)
  redis.call('zremrangebyscore', k.readers, '-inf', now)
  local n, checked, asked = 0, {}, 0
  for _, m in ipairs(redis.call('zrange', k.readers, 0, 99)) do
    local cid = string.match(m, '^([^:]+):') or ''
    local alive = checked[cid]
    if alive == nil then
      alive = true
      if asked < 10 then
        asked = asked + 1
        local r = pubsub_count(k.publish, k.grant .. ':' .. cid)
        if type(r) == 'table' and tonumber(r[2]) == 0 then
          alive = false
        end
      end
      checked[cid] = alive
    end
    if alive then
      n = n + 1
      note(acc, cid)
    else
      redis.call('zrem', k.readers, m)
    end
  end
  return n
end
-- The lock (already deleted) goes to the oldest live queued writer, told
-- on its client's grant channel; a writer whose client has no subscriber
-- there (grant.lua), or a grant nobody hears, is skipped (undone) and the
-- next one tried (at most 10). At most once per yield period a release
-- looks (k.yield records when), and when Redisson's channel has
-- subscribers dlock cannot account for, nobody is handed the lock
-- (everyone races). True when a writer took it.
local function handoff(k, now, acc)
  if redis.call('exists', k.queue) == 0 then
    return false
  end
  local expired = redis.call('zrangebyscore', k.timeouts, '-inf', now,
                             'LIMIT', 0, 100)
  for _, m in ipairs(expired) do
    redis.call('zrem', k.queue, m)
    redis.call('zrem', k.timeouts, m)
  end
  local last = tonumber(redis.call('get', k.yield) or '0')
  if now - last >= tonumber(k.period) then
    -- one look per period, whatever it finds (lock_release.lua)
    redis.call('set', k.yield, now, 'px', k.period)
    local subs = subscribers(k.publish, k.channel)
    for _, m in ipairs(redis.call('zrange', k.queue, 0, 99)) do
      note(acc, string.match(m, '^([^:]+):'))
    end
    if subs > acc.clients then
      return false
    end
  end
  for _ = 1, 10 do
    local head = redis.call('zrange', k.queue, 0, 0)[1]
    if not head then
      break
    end
    -- every expired entry is gone unless the purge hit its bound
    local expiry = #expired < 100 and now + 1 or
                       tonumber(redis.call('zscore', k.timeouts, head) or '0')
    redis.call('zrem', k.queue, head)
    redis.call('zrem', k.timeouts, head)
    local cid, tid, seq, lease, flag =
        string.match(head, '^([^:]+):(%d+):(%d+):(%d+)(.*)$')
    if cid and expiry > now and flag == '' and
        grant_listened(k.publish, k.grant .. ':' .. cid) then
      redis.call('hset', k.name, 'mode', 'write')
      redis.call('hset', k.name, cid .. ':' .. tid .. ':write', 1)
      redis.call('pexpire', k.name, lease)
      local heard = redis.pcall(k.publish, k.grant .. ':' .. cid,
                                tid .. ':' .. seq)
      if type(heard) == 'number' and heard > 0 then
        return true
      end
      redis.call('del', k.name)
    end
  end
  return false
end
