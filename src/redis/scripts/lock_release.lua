-- Reentrant lock release: Redisson's idempotent release plus dlock's
-- hand-off to the oldest queued dlock waiter.
-- KEYS[1] lock name; KEYS[2] wake channel redisson_lock__channel:{name};
-- KEYS[3] latch redisson_unlock_latch:{name}:<request-id>;
-- KEYS[4] dlock_lock_queue:{name}; KEYS[5] dlock_lock_queue_timeout:{name};
-- KEYS[6] dlock_lock_yield:{name} (when the last release yielded);
-- KEYS[7] redisson_lock_token:{name} (the fenced lock's token).
-- ARGV[1] message ("0"); ARGV[2] lease ms; ARGV[3] owner;
-- ARGV[4] publish command; ARGV[5] latch lifetime ms;
-- ARGV[6] grant channel prefix dlock_lock_grant:{name} (":<client-id>" is
-- appended per waiter); ARGV[7] yield period ms; ARGV[8] '1' when the
-- releasing client is itself subscribed to Redisson's channel; ARGV[9]
-- (only from a client with holder info) the owner's holder-info key
-- dlock_holder:{name}:<owner>, deleted at the full release.
-- Returns nil (not the owner), 0 (count went down) or 1 (released).
-- One HGET reads the owner's count (Redisson: HEXISTS, then HINCRBY -1):
-- the last count is deleted without counting it down first.
--
-- The latch is written only when the count went down: a retried partial
-- release must not count down twice. A full release writes none (a key per
-- release would pile up at high rates); its retry finds the owner's field
-- gone, which the client, knowing it retries, takes as released.
--
-- Hand-off: on a full release, expired queue entries are dropped and the
-- oldest live waiter is made the owner (field = 1, its lease), then told on
-- its client's grant channel with "<tid>:<seq>". A fenced waiter (member
-- ending ":f") gets the next token: "<tid>:<seq>:<token>". A client with
-- no subscriber on its grant channel (PUBSUB NUMSUB: pattern subscribers
-- do not count) is gone, and PUBLISH counting 0 receivers says the same
-- when the client left meanwhile: its entry is dropped (a grant undone) and
-- the next waiter tried. With no waiter to hand to, "0" goes to Redisson's channel as
-- Redisson itself does.
--
-- Yielding: Redisson clients (and anything else) waiting on the lock are
-- not in dlock's queue. At most once per yield period a release looks
-- (dlock_lock_yield records when): when Redisson's channel has more
-- subscribers than the dlock clients known to be subscribed (those queued,
-- and the releaser when it says it is), someone else may be waiting, and
-- that release publishes "0" for everyone to race instead of handing over,
-- so a stream of hand-offs cannot starve them (an outsider waits at most
-- about two periods for its chance).
-- #include grant.lua
local done = redis.call('get', KEYS[3])
if done ~= false then
  return tonumber(done)
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if count == nil then
  return nil
end
if count > 1 then
  redis.call('hincrby', KEYS[1], ARGV[3], -1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
if ARGV[9] and ARGV[9] ~= '' then
  redis.call('del', ARGV[9])
end
if redis.call('exists', KEYS[4]) == 1 then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local expired = redis.call('zrangebyscore', KEYS[5], '-inf', now,
                             'LIMIT', 0, 100)
  for _, m in ipairs(expired) do
    redis.call('zrem', KEYS[4], m)
    redis.call('zrem', KEYS[5], m)
  end
  local yield = false
  local last = tonumber(redis.call('get', KEYS[6]) or '0')
  if now - last >= tonumber(ARGV[7]) then
    -- one look per period, whatever it finds: the other releases of the
    -- period pay a GET instead of PUBSUB NUMSUB and a ZRANGE
    redis.call('set', KEYS[6], now, 'px', ARGV[7])
    local subs = subscribers(ARGV[4], KEYS[2])
    local seen, clients = {}, 0
    if ARGV[8] == '1' then
      local me = string.match(ARGV[3], '^([^:]+):')
      if me then
        seen[me] = true
        clients = 1
      end
    end
    for _, m in ipairs(redis.call('zrange', KEYS[4], 0, 99)) do
      local cid = string.match(m, '^([^:]+):')
      if cid and not seen[cid] then
        seen[cid] = true
        clients = clients + 1
      end
    end
    yield = subs > clients
  end
  for _ = 1, (yield and 0 or 10) do
    local head = redis.call('zrange', KEYS[4], 0, 0)[1]
    if not head then
      break
    end
    -- every expired entry is gone unless the purge hit its bound
    local expiry = #expired < 100 and now + 1 or
                       tonumber(redis.call('zscore', KEYS[5], head) or '0')
    redis.call('zrem', KEYS[4], head)
    redis.call('zrem', KEYS[5], head)
    local cid, tid, seq, lease, flag =
        string.match(head, '^([^:]+):(%d+):(%d+):(%d+)(.*)$')
    if cid and expiry > now and (flag == '' or flag == ':f') and
        grant_listened(ARGV[4], ARGV[6] .. ':' .. cid) then
      redis.call('hset', KEYS[1], cid .. ':' .. tid, 1)
      redis.call('pexpire', KEYS[1], lease)
      local msg = tid .. ':' .. seq
      if flag == ':f' then
        msg = msg .. ':' .. redis.call('incr', KEYS[7])
      end
      local heard = redis.pcall(ARGV[4], ARGV[6] .. ':' .. cid, msg)
      if type(heard) == 'number' and heard > 0 then
        return 1
      end
      redis.call('del', KEYS[1])
    end
  end
end
-- best effort: a publish the ACL refuses must not fail a release that has
-- already happened (waiters then fall back to the lease bound)
redis.pcall(ARGV[4], KEYS[2], ARGV[1])
return 1
