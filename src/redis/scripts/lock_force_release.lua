-- Force release: delete whoever holds it and wake the waiters.
-- KEYS[1] lock name; KEYS[2] wake channel; ARGV[1] message; ARGV[2] publish.
if redis.call('del', KEYS[1]) == 1 then
  redis.pcall(ARGV[2], KEYS[2], ARGV[1]) -- best effort (ACL may refuse)
  return 1
end
return 0
