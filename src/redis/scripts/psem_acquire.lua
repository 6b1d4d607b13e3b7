-- Permit semaphore (RPermitExpirableSemaphore): take one leased permit.
-- KEYS[1] semaphore name (available count); KEYS[2] {name}:timeout (ZSET
-- permit id -> expiry, server ms); KEYS[3] channel redisson_sc:{name}.
-- ARGV[1] permit id (32 hex digits); ARGV[2] lease ms; ARGV[3] publish
-- command.
-- Returns {1, 0} when taken; {0, ms until the earliest expiry among the
-- permits in use} when none is free; {0, -1} when none is in use.
--
-- Expired permits (expiry <= now, the renewer's rule too) go back to the
-- count first, and the new count is announced so that other waiters try.
-- #include psem_reclaim.lua
reclaim(ARGV[3])
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= 1 then
  redis.call('decrby', KEYS[1], 1)
  redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
  return {1, 0}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if #first == 0 then
  return {0, -1}
end
local left = tonumber(first[2]) - now
if left ~= left or left > 9007199254740991 then
  return {0, -1}
end
return {0, left}
