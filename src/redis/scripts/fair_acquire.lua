-- Fair lock acquire (Redisson RFairLock layout).
-- KEYS[1] lock name; KEYS[2] redisson_lock_queue:{name} (LIST of waiting
-- owners, FIFO); KEYS[3] redisson_lock_timeout:{name} (ZSET owner ->
-- deadline ms: the waiter loses its place if it has not come back by then).
-- ARGV[1] lease ms; ARGV[2] owner; ARGV[3] thread-wait ms; ARGV[4] '1' when
-- this waiter is alive and wants its place kept (dlock's refresh);
-- ARGV[5] '1' to try once without queuing; ARGV[6] (only from a client
-- with holder info) its key dlock_holder:{name}:<owner>, ARGV[7] the info:
-- written at every attempt, living for the longer of the lease and the
-- thread-wait (the holder's renewals and the waiter's refreshes keep it).
-- Returns nil when acquired (or re-entered), else ms to wait before trying
-- again: the holder's lease when this waiter is the head, else its
-- estimated turn (never 0 for a live waiter behind others: it sleeps until
-- woken on its own channel).
--
-- Deadlines follow Redisson's accounting: a waiter's score is when its turn
-- is expected plus thread-wait, and every grant to the head moves the rest
-- up by thread-wait. dlock's refresh raises (never lowers) a live waiter's
-- score to now + thread-wait x (its position + 1), so a waiter that waits
-- longer than Redisson's estimate keeps its place; a dead one stops
-- refreshing and is dropped thread-wait after it reaches the head.
-- Time is the server's (TIME), so clients' clocks do not matter.
-- #include fair_purge.lua
local tw = tonumber(ARGV[3])
if ARGV[6] and ARGV[6] ~= '' then
  redis.call('set', ARGV[6], ARGV[7], 'px', math.max(tonumber(ARGV[1]), tw))
end
-- A waiter behind others sleeps until woken on its own channel, its
-- estimated turn, the head's deadline (a dead head is dropped then, and
-- nobody would tell this waiter), or the holder's lease (a holder that
-- dies is not followed by a message either: the head takes the lock when
-- the lease runs out, and this waiter, maybe the head by then, must come
-- back to learn it), whichever comes first.
local function until_news(estimate)
  local head = redis.call('lindex', KEYS[2], 0)
  local hd = head and tonumber(redis.call('zscore', KEYS[3], head) or '0')
  if hd and hd - now < estimate then
    estimate = hd - now
  end
  local pttl = redis.call('pttl', KEYS[1])
  if pttl == 0 then
    pttl = 1 -- expires this very millisecond
  elseif pttl == -2 then
    -- free, and the head is about to take it: nobody will say when it did,
    -- so come back after about a lease (this waiter's, standing in for the
    -- head's) to sleep on the new holder's PTTL from then on
    pttl = tonumber(ARGV[1])
  end
  if pttl > 0 and pttl < estimate then
    estimate = pttl
  end
  if estimate < 1 then
    estimate = 1
  end
  return estimate
end
if redis.call('exists', KEYS[1]) == 0 then
  local head = redis.call('lindex', KEYS[2], 0)
  if head == false or head == ARGV[2] then
    if head ~= false then
      redis.call('lpop', KEYS[2])
      redis.call('zrem', KEYS[3], ARGV[2])
      for _, w in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
        redis.call('zincrby', KEYS[3], -tw, w)
      end
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
  end
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
local score = redis.call('zscore', KEYS[3], ARGV[2])
if score ~= false then
  score = tonumber(score)
  if ARGV[4] == '1' then
    local pos = 0
    for i, w in ipairs(redis.call('lrange', KEYS[2], 0, -1)) do
      if w == ARGV[2] then
        pos = i - 1
        break
      end
    end
    local want = now + tw * (pos + 1)
    if want > score then
      redis.call('zadd', KEYS[3], want, ARGV[2])
      score = want
    end
  end
  if redis.call('lindex', KEYS[2], 0) == ARGV[2] then
    return redis.call('pttl', KEYS[1])
  end
  return until_news(score - tw - now)
end
if ARGV[5] == '1' then
  return redis.call('pttl', KEYS[1])
end
local last = redis.call('lindex', KEYS[2], -1)
local ttl
if last ~= false and last ~= ARGV[2] then
  ttl = tonumber(redis.call('zscore', KEYS[3], last) or now) - now
else
  ttl = redis.call('pttl', KEYS[1])
end
if ttl < 0 then
  ttl = 0
end
if redis.call('zadd', KEYS[3], ttl + tw + now, ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2])
end
if redis.call('lindex', KEYS[2], 0) == ARGV[2] then
  return ttl
end
return until_news(ttl)
