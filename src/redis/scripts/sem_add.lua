-- Semaphore: add permits (a negative number removes them; the count may go
-- below zero).
-- KEYS[1] semaphore name; KEYS[2] channel redisson_sc:{name}.
-- ARGV[1] permits to add; ARGV[2] publish command.
-- Returns the new count. Waiters are told the new count when permits were
-- added and some are available.
local value = redis.call('incrby', KEYS[1], ARGV[1])
if tonumber(ARGV[1]) > 0 and value > 0 then
  redis.call(ARGV[2], KEYS[2], value)
end
return value
