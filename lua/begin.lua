-- begin: claim one or more idempotency records (DESIGN section 3).
--
-- KEYS[i]  record key (a hash); on Redis Cluster every key of one call shares a slot.
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  retention in milliseconds (TTL of finished records)
-- ARGV[3]  max attempts
-- ARGV[2+2i] owner token of the new attempt for KEYS[i]
-- ARGV[3+2i] payload fingerprint for KEYS[i] ('' when fingerprinting is off)
--
-- Returns one reply per key: {code, fence, attempts, millis, data, flag}
--   1 ACQUIRED     fence, attempt, lease millis
--   2 TAKEN_OVER   fence, attempt, lease millis
--   3 IN_PROGRESS  fence, attempts, lease millis left to the other owner
--   4 DUPLICATE    fence, attempts, 0, encoded result, dropped flag ('' or original size)
--   5 FAILED       fence, attempts, 0, stored error text, error kind ('p' permanent, 'x' exhausted)
--   6 EXHAUSTED    fence, attempts, 0, last error text
--   7 CONFLICT     fence, attempts
--   8 CORRUPT      0, 0, 0, reason
local lease = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local maxAttempts = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}

for i, key in ipairs(KEYS) do
  local owner = ARGV[2 + 2 * i]
  local fp = ARGV[3 + 2 * i]
  local rec = redis.pcall('HMGET', key, 's', 'o', 'f', 'a', 'p', 'l')
  if rec.err then
    out[i] = {8, 0, 0, 0, 'key holds a value that is not an idemkit record'}
  elseif not rec[1] then
    if redis.call('EXISTS', key) == 1 then
      out[i] = {8, 0, 0, 0, 'hash at key has no state field'}
    else
      redis.call('HSET', key, 's', 'started', 'o', owner, 'f', 1, 'a', 1, 'p', fp,
        'l', now + lease, 'c', now, 'u', now)
      redis.call('PEXPIRE', key, lease + retention)
      out[i] = {1, 1, 1, lease}
    end
  else
    local state = rec[1]
    local fence = tonumber(rec[3])
    local attempts = tonumber(rec[4])
    local stored = rec[5]
    if not fence or not attempts then
      out[i] = {8, 0, 0, 0, 'record has no numeric fence or attempts'}
    elseif fp ~= '' and stored and stored ~= '' and stored ~= fp then
      out[i] = {7, fence, attempts, 0}
    elseif state == 'completed' then
      local d = redis.call('HMGET', key, 'r', 'd')
      out[i] = {4, fence, attempts, 0, d[1] or '', d[2] or ''}
    elseif state == 'failed' then
      local d = redis.call('HMGET', key, 'e', 'k')
      out[i] = {5, fence, attempts, 0, d[1] or '', d[2] or 'p'}
    elseif state == 'retry' then
      if attempts >= maxAttempts then
        local e = redis.call('HGET', key, 'e') or ''
        redis.call('HSET', key, 's', 'failed', 'k', 'x', 'u', now)
        redis.call('PEXPIRE', key, retention)
        out[i] = {6, fence, attempts, 0, e}
      else
        fence = fence + 1
        attempts = attempts + 1
        redis.call('HSET', key, 's', 'started', 'o', owner, 'f', fence, 'a', attempts,
          'l', now + lease, 'u', now)
        redis.call('PEXPIRE', key, lease + retention)
        out[i] = {1, fence, attempts, lease}
      end
    elseif state == 'started' then
      local deadline = tonumber(rec[6])
      if not deadline then
        out[i] = {8, 0, 0, 0, 'started record has no lease deadline'}
      elseif deadline > now then
        out[i] = {3, fence, attempts, deadline - now}
      elseif attempts >= maxAttempts then
        -- The last allowed attempt died holding the lease: a message that
        -- crashes its worker every time must not be taken over forever.
        local e = 'lease expired during the last allowed attempt'
        redis.call('HSET', key, 's', 'failed', 'k', 'x', 'e', e, 'u', now)
        redis.call('PEXPIRE', key, retention)
        out[i] = {6, fence, attempts, 0, e}
      else
        fence = fence + 1
        attempts = attempts + 1
        redis.call('HSET', key, 'o', owner, 'f', fence, 'a', attempts, 'l', now + lease, 'u', now)
        redis.call('PEXPIRE', key, lease + retention)
        out[i] = {2, fence, attempts, lease}
      end
    else
      out[i] = {8, 0, 0, 0, 'unknown state'}
    end
  end
end
return out
