-- Write-side release (Redisson RReadWriteLock layout) with Redisson's
-- idempotent release latch and dlock's hand-off to queued writers.
-- KEYS[1] lock name; KEYS[2] channel redisson_rwlock:{name};
-- KEYS[3] latch redisson_unlock_latch:{name}:<request-id>;
-- KEYS[4] own(dlock_lock_rw_queue); KEYS[5] own(dlock_lock_rw_queue_timeout);
-- KEYS[6] own(dlock_lock_rw_yield); KEYS[7] own(dlock_lock_rw_readers);
-- KEYS[8] own(dlock_lock_rw_readturn).
-- ARGV[1] message ("1": wake every waiter, readers all go); ARGV[2] lease;
-- ARGV[3] owner .. ':write'; ARGV[4] publish command; ARGV[5] latch ms;
-- ARGV[6] grant channel prefix own(dlock_lock_rw_grant) (":<client-id>"
-- appended); ARGV[7] yield period ms; ARGV[8] '1' when the releasing client
-- is itself subscribed to Redisson's channel; ARGV[9] readers' turn ms.
-- Returns nil (not the writer), 0 (count went down) or 1 (released).
-- When the writer's own read holds remain (downgrade) the mode becomes
-- read and waiting readers are woken too (Redisson leaves them to their
-- lease bound). When the lock is freed: if live readers are registered as
-- waiting, "1" wakes everyone and the readers' turn starts (dlock writers
-- let them in first), so a stream of writer hand-offs cannot starve
-- readers; else the oldest live queued writer is handed the lock; else
-- "1" as Redisson does.
-- ---- hand-off to queued writers (the same block in rw_read_release.lua
-- and rw_write_release.lua; docs/LAYOUT.md, "Read-write locks") ----
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
        local r = redis.pcall('pubsub', 'numsub', k.grant .. ':' .. cid)
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
-- on its client's grant channel; a grant nobody hears is undone and the
-- next one tried (at most 10). At most once per yield period, when
-- Redisson's channel has subscribers dlock cannot account for, nobody is
-- handed the lock (everyone races). True when a writer took it.
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
    local numsub = redis.pcall('pubsub', 'numsub', k.channel)
    local subs = type(numsub) == 'table' and numsub[2] or 0
    for _, m in ipairs(redis.call('zrange', k.queue, 0, 99)) do
      note(acc, string.match(m, '^([^:]+):'))
    end
    if subs > acc.clients then
      redis.call('set', k.yield, now, 'px', k.period)
      return false
    end
  end
  for _ = 1, 10 do
    local head = redis.call('zrange', k.queue, 0, 0)[1]
    if not head then
      break
    end
    local expiry = tonumber(redis.call('zscore', k.timeouts, head) or '0')
    redis.call('zrem', k.queue, head)
    redis.call('zrem', k.timeouts, head)
    local cid, tid, seq, lease, flag =
        string.match(head, '^([^:]+):(%d+):(%d+):(%d+)(.*)$')
    if cid and expiry > now and flag == '' then
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
-- ---- end of the hand-off block ----
local done = redis.call('get', KEYS[3])
if done ~= false then
  return tonumber(done)
end
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or
    redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if left > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) ~= 1 then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.pcall(ARGV[4], KEYS[2], ARGV[1])
  return 1
end
redis.call('del', KEYS[1])
local k = {name = KEYS[1], channel = KEYS[2], queue = KEYS[4],
           timeouts = KEYS[5], yield = KEYS[6], readers = KEYS[7],
           grant = ARGV[6], period = ARGV[7], publish = ARGV[4]}
local now = now_ms()
local acc = {seen = {}, clients = 0}
if ARGV[8] == '1' then
  note(acc, string.match(ARGV[3], '^([^:]+):'))
end
if live_readers(k, now, acc) > 0 then
  redis.call('set', KEYS[8], now, 'px', ARGV[9])
elseif handoff(k, now, acc) then
  return 1
end
-- best effort: a publish the ACL refuses must not fail a release that has
-- already happened (waiters then fall back to the lease bound)
redis.pcall(ARGV[4], KEYS[2], ARGV[1])
return 1
