-- Read side of the read-write lock (Redisson RReadWriteLock layout).
-- KEYS[1] lock name (HASH: mode = read|write, "<owner>" -> read holds,
-- "<owner>:write" -> write holds); KEYS[2] this owner's timeout-key prefix
-- {name}:<owner>:rwlock_timeout (hold n has key prefix:n with its own
-- lease); KEYS[3] own(dlock_lock_rw_readers) (waiting readers: member ->
-- expiry, so that write releases know readers wait);
-- KEYS[4] own(dlock_lock_rw_queue) (queued writers: member -> first enqueue
-- time); KEYS[5] own(dlock_lock_rw_queue_timeout) (member -> expiry);
-- KEYS[6] own(dlock_lock_rw_readturn).
-- ARGV[1] lease ms; ARGV[2] owner; ARGV[3] owner .. ':write';
-- ARGV[4] the waiter's member "<client-id>:<tid>:<seq>:<lease>" or '' (not
-- registered); ARGV[5] registration lifetime ms; ARGV[6] grant channel
-- prefix own(dlock_lock_rw_grant) (":<client-id>" appended); ARGV[7] the
-- longest a reader held back for a writer sleeps before it looks again, ms;
-- ARGV[8] the publish command ('spublish': a cluster's sharded channels,
-- counted by PUBSUB SHARDNUMSUB); ARGV[9] (only from a client with holder
-- info) its key dlock_holder:{name}:<owner> and ARGV[10] the info, written
-- with the lease when granted.
-- 'OTHERKIND' when the key is a lock of another kind.
-- Returns nil when acquired, else the PTTL of the lock, at most ARGV[7] for
-- a reader held back for a writer (and the waiter is registered, or its
-- registration refreshed).
-- A writer may take the read side (downgrade), and a reader re-enters
-- freely. A new reader does not join readers who hold the lock while a
-- live dlock writer is queued (one of the three oldest entries, unexpired,
-- whose client is still subscribed to its grant channel), except during
-- the readers' turn: so a stream of overlapping readers cannot starve
-- writers, and a write release lets the readers waiting behind it in
-- first. Redisson's writers never queue, so
-- with no dlock writer waiting this is exactly Redisson's acquire.
local function registered()
  if ARGV[4] ~= '' then
    redis.call('zrem', KEYS[3], ARGV[4])
  end
  if ARGV[9] and ARGV[9] ~= '' then
    redis.call('set', ARGV[9], ARGV[10], 'px', ARGV[1])
  end
  return nil
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and redis.call('exists', KEYS[1]) == 1 then
  -- a hash without a mode is another kind of lock (reentrant, fair):
  -- taking it as free would break that lock
  return 'OTHERKIND'
end
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return registered()
end
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- true when a live writer is queued and it is not the readers' turn: one of
-- the three oldest entries, unexpired, whose client still has a grant
-- subscription (a crashed writer's client has none). A refused PUBSUB
-- counts nobody: Redisson's rule then applies. The readers' turn lasts
-- while its key lives and readers it was started for are still registered
-- (each one's registration goes when it gets in), as writers see it too.
local function writer_waits()
  if redis.call('exists', KEYS[4]) == 0 then
    return false
  end
  local now = now_ms()
  if redis.call('pttl', KEYS[6]) > 0 and
      redis.call('zcount', KEYS[3], now, '+inf') > 0 then
    return false
  end
  for _, m in ipairs(redis.call('zrange', KEYS[4], 0, 2)) do
    local expiry = tonumber(redis.call('zscore', KEYS[5], m) or '0')
    local cid = string.match(m, '^([^:]+):')
    if cid and expiry > now then
      local r = redis.pcall('pubsub',
                            ARGV[8] == 'spublish' and 'shardnumsub' or
                                'numsub', ARGV[6] .. ':' .. cid)
      local subs = type(r) == 'table' and tonumber(r[2])
      if subs and subs > 0 then
        return true
      end
    end
  end
  return false
end
local held_back = false
if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  held_back = writer_waits()
end
if (mode == 'read' and not held_back) or
    (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1])
  local ttl = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(ttl, tonumber(ARGV[1])))
  return registered()
end
if ARGV[4] ~= '' then
  local now = now_ms()
  local ttl = tonumber(ARGV[5])
  redis.call('zadd', KEYS[3], now + ttl, ARGV[4])
  if redis.call('pttl', KEYS[3]) < ttl then
    redis.call('pexpire', KEYS[3], ttl)
  end
end
local pttl = redis.call('pttl', KEYS[1])
if held_back then
  -- nothing is published when the writer dies while queued: look again
  -- soon, so such a writer holds readers back only that long
  pttl = math.min(pttl, tonumber(ARGV[7]))
end
return pttl
