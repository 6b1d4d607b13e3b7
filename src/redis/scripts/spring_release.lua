-- Spring Integration's RedisLockRegistry layout: unlock. KEYS[1]
-- <registryKey>:<lockKey>; ARGV[1] this client's id; ARGV[2] the unlock
-- channel <registryKey>-channel:<registryKey>:<lockKey>; ARGV[3] publish
-- command. As Spring's PUB_SUB_LOCK unlock: UNLINK the key if it holds our
-- id and PUBLISH the key's name on the channel (Spring's waiters match the
-- message against their key; its SPIN_LOCK waiters poll and ignore it).
-- Returns 1 released, nil not ours (expired, or someone else's).
if redis.call('get', KEYS[1]) == ARGV[1] and
    redis.call('unlink', KEYS[1]) == 1 then
  redis.pcall(ARGV[3], ARGV[2], KEYS[1]) -- best effort (ACL may refuse)
  return 1
end
return nil
