-- Semaphore (RSemaphore): take permits if enough are available.
-- KEYS[1] semaphore name. ARGV[1] permits wanted (>= 1).
-- Returns 1 when taken, 0 when fewer are available (or no semaphore).
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return 1
end
return 0
