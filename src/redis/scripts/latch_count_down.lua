-- Count-down latch (RCountDownLatch): count down by one.
-- KEYS[1] latch name; KEYS[2] channel redisson_countdownlatch__channel__{name}.
-- ARGV[1] publish command.
-- Returns the new count. At zero or below the key is deleted; exactly at
-- zero "0" is published, which releases every waiter. Counting down an
-- absent latch leaves nothing behind and publishes nothing.
local value = redis.call('decr', KEYS[1])
if value <= 0 then
  redis.call('del', KEYS[1])
end
if value == 0 then
  redis.call(ARGV[1], KEYS[2], '0')
end
return value
