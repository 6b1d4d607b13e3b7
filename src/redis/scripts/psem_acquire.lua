-- Permit semaphore (RPermitExpirableSemaphore): take one leased permit.
-- KEYS[1] semaphore name (available count); KEYS[2] {name}:timeout (ZSET
-- permit id -> expiry, server ms); KEYS[3] channel redisson_sc:{name}.
-- ARGV[1] permit id (32 hex digits; the member is the 16 bytes they spell,
-- as Redisson stores it); ARGV[2] lease ms; ARGV[3] publish command;
-- ARGV[4] (only from a client with holder info) the permit's key
-- dlock_holder:{name}:<id>, ARGV[5] the info: written with the lease.
-- Returns {1, 0} when taken; {0, ms until the earliest expiry among the
-- permits in use} when none is free; {0, -1} when none is in use or the
-- earliest has no lease (Redisson's no-expiry score).
--
-- As Redisson's tryAcquire: at most one expired permit (expiry <= now, the
-- renewer's rule too; one per permit asked) goes back to the count first,
-- the new count is announced so that other waiters try, and a TTL on the
-- count is copied to the ZSET.
-- #include psem_reclaim.lua
-- #include permit_id.lua
reclaim(ARGV[3], 1)
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= 1 then
  redis.call('decrby', KEYS[1], 1)
  redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), raw_id(ARGV[1]))
  if ARGV[4] and ARGV[4] ~= '' then
    redis.call('set', ARGV[4], ARGV[5], 'px', ARGV[2])
  end
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  return {1, 0}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if #first == 0 then
  return {0, -1}
end
local score = tonumber(first[2])
if score ~= score or score >= no_lease then
  return {0, -1}
end
local left = score - now
if left > 9007199254740991 then
  return {0, -1}
end
return {0, left}
