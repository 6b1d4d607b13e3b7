-- A fair-lock waiter gives up (deadline, error, shutdown): it leaves the
-- queue, everyone behind it moves up by thread-wait (Redisson's
-- accounting), and if it was the head of a free lock the new head is woken
-- at once, so that giving up never delays those behind.
-- KEYS[1] lock name; KEYS[2] redisson_lock_queue:{name};
-- KEYS[3] redisson_lock_timeout:{name};
-- KEYS[4] redisson_lock__channel:{name} (":<owner>" is appended per waiter).
-- ARGV[1] owner; ARGV[2] thread-wait ms; ARGV[3] publish command.
-- Returns 0 (a fair lock is never handed over while its waiter is away).
local queue = redis.call('lrange', KEYS[2], 0, -1)
local at = nil
for i, w in ipairs(queue) do
  if w == ARGV[1] then
    at = i
    break
  end
end
if at == nil then
  redis.call('zrem', KEYS[3], ARGV[1])
  return 0
end
for i = at + 1, #queue do
  redis.call('zincrby', KEYS[3], -tonumber(ARGV[2]), queue[i])
end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('lrem', KEYS[2], 0, ARGV[1])
if at == 1 and redis.call('exists', KEYS[1]) == 0 then
  local head = redis.call('lindex', KEYS[2], 0)
  if head ~= false then
    redis.pcall(ARGV[3], KEYS[4] .. ':' .. head, '0')
  end
end
return 0
