-- Read-side release (Redisson RReadWriteLock layout) with dlock's hand-off
-- to queued writers.
-- KEYS[1] lock name; KEYS[2] channel redisson_rwlock:{name};
-- KEYS[3] this owner's timeout-key prefix {name}:<owner>:rwlock_timeout;
-- KEYS[4] the lock's key base for every owner's timeout keys ("{name}");
-- KEYS[5] latch redisson_unlock_latch:{name}:<request-id>;
-- KEYS[6] own(dlock_lock_rw_queue); KEYS[7] own(dlock_lock_rw_queue_timeout);
-- KEYS[8] own(dlock_lock_rw_yield); KEYS[9] own(dlock_lock_rw_readers).
-- ARGV[1] message ("0"); ARGV[2] owner; ARGV[3] publish command;
-- ARGV[4] latch lifetime ms; ARGV[5] grant channel prefix
-- own(dlock_lock_rw_grant); ARGV[6] yield period ms; ARGV[7] '1' when the
-- releasing client is itself subscribed to Redisson's channel; ARGV[8]
-- (only from a client with holder info) the owner's read key
-- dlock_holder:{name}:<owner>, deleted with its last read hold.
-- Returns nil (this owner holds no live read hold: none, or its newest
-- hold's lease ran out), else this owner's read holds left (0: its last
-- one is gone).
-- The lock lives on as long as the longest lease among the holds left
-- (each hold's own key): one reader's lease never keeps another's alive.
-- As with the other releases, a retry is answered by the latch while the
-- owner's count is above zero, and finds the field gone after its last.
-- The latch is written whenever holds remain, also when the hold released
-- was lost (its key expired): it then stores -1 and a retry answers nil,
-- as the first run did. Without it, the retry would find the next hold's
-- key alive and release that hold as well.
-- A release that frees the lock hands it to the oldest live queued writer
-- (as a write release does), else publishes "0" as Redisson does ("1" when
-- live readers are registered as waiting, so that all of them get in).
-- #include grant.lua
-- #include rw_handoff.lua
local alive = true
local function result(mine)
  if not alive then
    return nil
  end
  return math.max(mine, 0)
end
local done = redis.call('get', KEYS[5])
if done ~= false then
  done = tonumber(done)
  if done < 0 then
    return nil
  end
  return done
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
-- a hold whose own key expired was lost: it is cleaned up all the same,
-- and the caller is told (nil), as for a hold that is gone altogether
local n = tonumber(redis.call('hget', KEYS[1], ARGV[2])) or 0
alive = redis.call('exists', KEYS[3] .. ':' .. n) == 1
local mine = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if mine <= 0 then
  redis.call('hdel', KEYS[1], ARGV[2])
  if ARGV[8] and ARGV[8] ~= '' then
    redis.call('del', ARGV[8])
  end
else
  redis.call('set', KEYS[5], alive and mine or -1, 'px', ARGV[4])
end
redis.call('del', KEYS[3] .. ':' .. (mine + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local longest = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local n = tonumber(redis.call('hget', KEYS[1], field))
    if type(n) == 'number' then
      for i = n, 1, -1 do
        local ttl = redis.call('pttl',
                               KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
        longest = math.max(ttl, longest)
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return result(mine)
  end
  if mode == 'write' then
    return result(mine)
  end
end
redis.call('del', KEYS[1])
local k = {name = KEYS[1], channel = KEYS[2], queue = KEYS[6],
           timeouts = KEYS[7], yield = KEYS[8], readers = KEYS[9],
           grant = ARGV[5], period = ARGV[6], publish = ARGV[3]}
local now = now_ms()
local acc = releaser_acc(ARGV[7], ARGV[2])
local readers = live_readers(k, now, acc)
if handoff(k, now, acc) then
  return result(mine)
end
-- no writer took it: with readers waiting (some may have held back for a
-- writer that is gone), "1" lets all of them in, not one per client
redis.pcall(ARGV[3], KEYS[2], readers > 0 and '1' or ARGV[1])
return result(mine)
