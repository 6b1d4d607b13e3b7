-- Semaphore (RSemaphore and permit semaphore): set the permits if the
-- semaphore does not exist yet.
-- KEYS[1] semaphore name; KEYS[2] channel redisson_sc:{name}.
-- ARGV[1] permits; ARGV[2] publish command.
-- Returns 1 when this call created it (and announced the count), else 0.
if redis.call('set', KEYS[1], ARGV[1], 'NX') then
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  return 1
end
return 0
