-- Write side of the read-write lock (Redisson RReadWriteLock layout) with
-- dlock's writer queue (docs/LAYOUT.md, "Read-write locks").
-- KEYS[1] lock name; KEYS[2] this owner's read-hold key prefix
-- {name}:<owner>:rwlock_timeout; KEYS[3] own(dlock_lock_rw_queue) (member
-- -> first enqueue time); KEYS[4] own(dlock_lock_rw_queue_timeout) (member
-- -> expiry); KEYS[5] own(dlock_lock_rw_readers) (waiting readers: member
-- -> expiry); KEYS[6] own(dlock_lock_rw_readturn) (set by a write release
-- that woke waiting readers).
-- ARGV[1] lease ms; ARGV[2] owner .. ':write'; ARGV[3] owner (its read
-- holds, to refuse an upgrade); ARGV[4] queue member
-- "<client-id>:<tid>:<seq>:<lease>" or '' (no queue); ARGV[5] entry
-- lifetime ms; ARGV[6] '1' when this wait may have queued; ARGV[7] (only
-- from a client with holder info) its key dlock_holder:{name}:<owner>:write
-- and ARGV[8] the info, written with the lease when granted (and beside a
-- queue entry, for the entry's lifetime: a hand-off finds it).
-- 'OTHERKIND' when the key is a lock of another kind.
-- Returns nil when acquired (or re-entered, or handed over while queued),
-- the PTTL when held by others (or, during the readers' turn, how long it
-- lasts), or the string 'DEADLOCK' when this owner holds a live read hold:
-- it would wait for itself (Redisson has no upgrade; dlock says so at
-- once). A read hold whose lease ran out (its newest key is gone) is not in
-- the way. With ARGV[4] = '' and no readers' turn this is exactly the
-- Redisson acquire.
local member = ARGV[4]
local function granted()
  if ARGV[7] and ARGV[7] ~= '' then
    redis.call('set', ARGV[7], ARGV[8], 'px', ARGV[1])
  end
  return nil
end
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function enqueue()
  if member == '' then
    return
  end
  local now = now_ms()
  local ttl = tonumber(ARGV[5])
  redis.call('zadd', KEYS[3], 'NX', now, member)
  redis.call('zadd', KEYS[4], now + ttl, member)
  -- the two keys hold the same members and get their expiry together,
  -- so one of them tells for both
  if redis.call('pttl', KEYS[4]) < ttl then
    redis.call('pexpire', KEYS[3], ttl)
    redis.call('pexpire', KEYS[4], ttl)
  end
  -- the info waits with the entry, so that a hand-off finds it
  if ARGV[7] and ARGV[7] ~= '' then
    redis.call('set', ARGV[7], ARGV[8], 'px', ttl)
  end
end
local function dequeue()
  if member ~= '' then
    redis.call('zrem', KEYS[3], member)
    redis.call('zrem', KEYS[4], member)
  end
end
if member ~= '' and ARGV[6] == '1'
    and redis.call('zscore', KEYS[3], member) == false
    and redis.call('hget', KEYS[1], 'mode') == 'write'
    and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  -- a release took our entry off the queue and made us the writer: claim
  -- it (count stays 1) and start the lease now, whenever the grant was
  redis.call('zrem', KEYS[4], member)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return granted()
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and redis.call('exists', KEYS[1]) == 1 then
  -- a hash without a mode is another kind of lock (reentrant, fair):
  -- taking it as free would break that lock
  return 'OTHERKIND'
end
if mode == false then
  -- the readers' turn: a write release woke waiting readers; writers let
  -- the live ones in first (bounded by the turn's short expiry)
  local turn = redis.call('pttl', KEYS[6])
  if turn > 0 and redis.call('zcount', KEYS[5], now_ms(), '+inf') > 0 then
    enqueue()
    return turn
  end
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  dequeue()
  return granted()
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  local ttl = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(ttl, 0) + tonumber(ARGV[1]))
  dequeue()
  return granted()
end
if mode == 'read' then
  local mine = tonumber(redis.call('hget', KEYS[1], ARGV[3]) or '0')
  if mine and mine > 0 and redis.call('exists', KEYS[2] .. ':' .. mine) == 1 then
    return 'DEADLOCK'
  end
end
enqueue()
return redis.call('pttl', KEYS[1])
