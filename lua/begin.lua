-- begin: claim one or more idempotency records (DESIGN section 3).
--
-- KEYS[i]  record key (a hash); on Redis Cluster every key of one call shares a slot.
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  retention in milliseconds (TTL of finished records)
-- ARGV[3]  max attempts
-- ARGV[1+3i] owner token of the new attempt for KEYS[i]
-- ARGV[2+3i] payload fingerprint for KEYS[i] ('' when fingerprinting is off)
-- ARGV[3+3i] '1' when the caller holds the key's distributed lock: the claim is
--            marked as made under the lock (field lk), and a started record whose
--            claim was made under the lock is taken over even while its lease is live
--            (its holder lost the lock). A record claimed without the lock is never
--            forced: its owner may be alive and renewing.
--
-- A claim by the owner token that already holds the record (a call the client sent
-- again after a lost reply) answers with that same claim and changes nothing.
--
-- Returns one flat array; each key adds a row whose length its code gives:
--   1 ACQUIRED     fence, attempt, lease millis (left, for the caller's own claim)
--   2 TAKEN_OVER   fence, attempt, lease millis
--   3 IN_PROGRESS  fence, attempts, lease millis left to the other owner
--   4 DUPLICATE    fence, attempts, 0, encoded result, dropped flag ('' or why)
--   5 FAILED       fence, attempts, 0, stored error text, kind ('p' permanent, 'x' exhausted)
--   6 EXHAUSTED    fence, attempts, 0, last error text
--   7 CONFLICT     fence, attempts, 0
--   8 CORRUPT      0, 0, 0, reason
local lease = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local maxAttempts = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
local n = 0

local function row(...)
  for _, v in ipairs({...}) do
    n = n + 1
    out[n] = v
  end
end

for i, key in ipairs(KEYS) do
  local owner = ARGV[1 + 3 * i]
  local fp = ARGV[2 + 3 * i]
  local locked = ARGV[3 + 3 * i] == '1'
  local lk = locked and '1' or '0'
  local all = redis.pcall('HGETALL', key)
  if all.err then
    row(8, 0, 0, 0, 'key holds a value that is not an idemkit record')
  elseif #all == 0 then
    redis.call('HSET', key, 's', 'started', 'o', owner, 'f', 1, 'a', 1, 'p', fp, 'l', now + lease, 'lk', lk, 'c', now)
    redis.call('PEXPIRE', key, lease + retention)
    n = n + 4
    out[n - 3], out[n - 2], out[n - 1], out[n] = 1, 1, 1, lease
  else
    local rec = {}
    for j = 1, #all, 2 do
      rec[all[j]] = all[j + 1]
    end
    local state = rec.s
    local fence = tonumber(rec.f)
    local attempts = tonumber(rec.a)
    if not state then
      row(8, 0, 0, 0, 'hash at key has no state field')
    elseif not fence or not attempts then
      row(8, 0, 0, 0, 'record has no numeric fence or attempts')
    elseif fp ~= '' and rec.p and rec.p ~= '' and rec.p ~= fp then
      row(7, fence, attempts, 0)
    elseif state == 'completed' then
      row(4, fence, attempts, 0, rec.r or '', rec.d or '')
    elseif state == 'failed' then
      row(5, fence, attempts, 0, rec.e or '', rec.k or 'p')
    elseif state == 'retry' then
      if attempts >= maxAttempts then
        redis.call('HSET', key, 's', 'failed', 'k', 'x', 'u', now)
        redis.call('PEXPIRE', key, retention)
        row(6, fence, attempts, 0, rec.e or '')
      else
        fence = fence + 1
        attempts = attempts + 1
        redis.call('HSET', key, 's', 'started', 'o', owner, 'f', fence, 'a', attempts,
          'l', now + lease, 'lk', lk, 'u', now)
        redis.call('PEXPIRE', key, lease + retention)
        row(1, fence, attempts, lease)
      end
    elseif state == 'started' then
      local deadline = tonumber(rec.l)
      if not deadline then
        row(8, 0, 0, 0, 'started record has no lease deadline')
      elseif rec.o == owner then
        row(1, fence, attempts, math.max(deadline - now, 0))
      elseif deadline > now and not (locked and rec.lk == '1') then
        row(3, fence, attempts, deadline - now)
      elseif attempts >= maxAttempts then
        -- The last allowed attempt died holding the lease: a message that
        -- crashes its worker every time must not be taken over forever.
        local e = 'lease expired during the last allowed attempt'
        redis.call('HSET', key, 's', 'failed', 'k', 'x', 'e', e, 'u', now)
        redis.call('PEXPIRE', key, retention)
        row(6, fence, attempts, 0, e)
      else
        fence = fence + 1
        attempts = attempts + 1
        redis.call('HSET', key, 'o', owner, 'f', fence, 'a', attempts, 'l', now + lease, 'lk', lk, 'u', now)
        redis.call('PEXPIRE', key, lease + retention)
        row(2, fence, attempts, lease)
      end
    else
      row(8, 0, 0, 0, 'unknown state')
    end
  end
end
return out
