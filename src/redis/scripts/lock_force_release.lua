-- Force release: delete whoever holds it and wake the waiters.
-- KEYS[1] lock name; KEYS[2] wake channel; KEYS[3] a fair lock's queue
-- redisson_lock_queue:{name} (optional: then only its head is woken, on
-- KEYS[2] .. ':' .. head). ARGV[1] message; ARGV[2] publish command.
if redis.call('del', KEYS[1]) == 1 then
  local channel = KEYS[2]
  if KEYS[3] then
    local head = redis.call('lindex', KEYS[3], 0)
    channel = head and (channel .. ':' .. head) or nil
  end
  if channel then
    redis.pcall(ARGV[2], channel, ARGV[1]) -- best effort (ACL may refuse)
  end
  return 1
end
return 0
