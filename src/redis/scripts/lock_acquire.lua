-- Reentrant lock acquire (Redisson RLock layout) with dlock's wait queue.
-- KEYS[1] lock name; KEYS[2] queue   dlock_lock_queue:{name}   (member ->
--   first enqueue time); KEYS[3] timeouts dlock_lock_queue_timeout:{name}
--   (member -> expiry). Both are dlock's own keys; Redisson ignores them.
-- ARGV[1] lease ms; ARGV[2] owner "<client-id>:<tid>";
-- ARGV[3] queue member "<client-id>:<tid>:<seq>:<lease>" or '' (no queue);
-- ARGV[4] entry lifetime ms; ARGV[5] '1' when this wait may have queued;
-- ARGV[6] fenced lock: its token key redisson_lock_token:{name}, else ''.
-- ARGV[7] (only from a client with holder info) its key
-- dlock_holder:{name}:<owner>, ARGV[8] the info: written with the lease
-- when granted, and beside a queue entry for as long as the entry lives.
-- Returns nil when acquired (or handed over while queued), else the PTTL;
-- a fenced lock returns {-1, token} when acquired (Redisson RFencedLock).
-- The token grows with every grant: here, or in the release that hands
-- the lock to a queued fenced waiter.
-- With ARGV[3] = '' this is exactly Redisson's acquire.
local token_key = ARGV[6] or ''
local info_key = ARGV[7] or ''
local function note(ttl)
  if info_key ~= '' then
    redis.call('set', info_key, ARGV[8], 'px', ttl)
  end
end
local function granted(claimed)
  note(ARGV[1])
  if token_key == '' then
    return nil
  end
  if claimed then
    return {-1, tonumber(redis.call('get', token_key) or '0')}
  end
  return {-1, redis.call('incr', token_key)}
end
local member = ARGV[3]
if member ~= '' and ARGV[5] == '1'
    and redis.call('zscore', KEYS[2], member) == false
    and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  -- a release took our entry off the queue and made us the owner: claim
  -- it (count stays 1) and start the lease now, whenever the grant was
  redis.call('zrem', KEYS[3], member)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return granted(true)
end
if (redis.call('exists', KEYS[1]) == 0)
    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  if member ~= '' then
    redis.call('zrem', KEYS[2], member)
    redis.call('zrem', KEYS[3], member)
  end
  return granted(false)
end
if member ~= '' then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ttl = tonumber(ARGV[4])
  redis.call('zadd', KEYS[2], 'NX', now, member)
  redis.call('zadd', KEYS[3], now + ttl, member)
  -- the two keys hold the same members and get their expiry together,
  -- so one of them tells for both
  if redis.call('pttl', KEYS[3]) < ttl then
    redis.call('pexpire', KEYS[2], ttl)
    redis.call('pexpire', KEYS[3], ttl)
  end
  note(ttl)
end
return redis.call('pttl', KEYS[1])
