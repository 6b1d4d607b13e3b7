-- Permit semaphore (RPermitExpirableSemaphore): give back the permit `id`.
-- KEYS[1] semaphore name; KEYS[2] {name}:timeout; KEYS[3] channel
-- redisson_sc:{name}.
-- ARGV[1] permit id; ARGV[2] publish command.
-- Returns 1 when released, 0 when the id is not in use (never issued,
-- released already, or expired: expired permits are returned to the count
-- first, as acquire does, so a late release cannot count one twice).
-- #include psem_reclaim.lua
reclaim(ARGV[2])
if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then
  return 0
end
local value = redis.call('incrby', KEYS[1], 1)
redis.call(ARGV[2], KEYS[3], value)
return 1
