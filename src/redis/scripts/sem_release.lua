-- Semaphore (RSemaphore): give permits back and tell waiters the new count
-- (a waiter client wakes that many of its waiters).
-- KEYS[1] semaphore name; KEYS[2] channel redisson_sc:{name}.
-- ARGV[1] permits (>= 1); ARGV[2] publish command.
-- Returns the new count.
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], value)
return value
