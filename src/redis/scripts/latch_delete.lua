-- Count-down latch: delete it. An absent latch counts as zero, so its
-- waiters are released ("0" published) when there was one.
-- KEYS[1] latch name; KEYS[2] channel redisson_countdownlatch__channel__{name}.
-- ARGV[1] publish command.
-- Returns 1 when it existed, else 0.
if redis.call('del', KEYS[1]) == 1 then
  redis.call(ARGV[1], KEYS[2], '0')
  return 1
end
return 0
