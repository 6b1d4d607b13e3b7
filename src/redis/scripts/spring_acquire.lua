-- Spring Integration's RedisLockRegistry layout (docs/LAYOUT.md, "Spring
-- Integration's layout"): obtain. KEYS[1] <registryKey>:<lockKey>;
-- ARGV[1] this client's id (one UUID per client, as one registry
-- instance); ARGV[2] lease ms. The same writes as Spring's obtain script:
-- the key holding our id is ours (its lease restarts), an absent key is
-- set to our id with the lease. Returns nil when acquired, else the
-- holder's PTTL (Spring's script answers only false; dlock sleeps at most
-- that long without news). A key of another type fails with WRONGTYPE.
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return nil
elseif not holder then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return nil
end
return redis.call('pttl', KEYS[1])
