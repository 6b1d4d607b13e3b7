-- Count-down latch (RCountDownLatch): set the count if the latch does not
-- exist (a latch at zero is deleted, so that counts as not existing).
-- KEYS[1] latch name; KEYS[2] channel redisson_countdownlatch__channel__{name}.
-- ARGV[1] count (>= 1); ARGV[2] publish command.
-- Returns 1 when set (and "1", Redisson's new-count message, published),
-- else 0.
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[1])
  redis.call(ARGV[2], KEYS[2], '1')
  return 1
end
return 0
