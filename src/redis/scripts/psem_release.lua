-- Permit semaphore (RPermitExpirableSemaphore): give back the permit `id`.
-- KEYS[1] semaphore name; KEYS[2] {name}:timeout; KEYS[3] channel
-- redisson_sc:{name}.
-- ARGV[1] permit id (32 hex digits); ARGV[2] publish command; ARGV[3]
-- (only from a client with holder info) the permit's holder-info key
-- dlock_holder:{name}:<id>, deleted (a client without info leaves it to
-- expire with the permit's lease).
-- Returns 1 when released; 0 when the id is not in use (never issued or
-- released already), and 0 too when it had expired but was not reclaimed
-- yet: it goes back to the count then, once (ZREM decides), as Redisson's
-- release(permitId) does. Nothing else is reclaimed here (Redisson's
-- release does not either, so both leave the same state).
-- #include permit_id.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] and ARGV[3] ~= '' then
  redis.call('del', ARGV[3])
end
local member = permit_member(KEYS[2], ARGV[1])
if member == nil then
  return 0
end
local expiry = tonumber(redis.call('zscore', KEYS[2], member))
redis.call('zrem', KEYS[2], member)
local value = redis.call('incrby', KEYS[1], 1)
redis.call(ARGV[2], KEYS[3], value)
if expiry <= now then
  return 0
end
return 1
