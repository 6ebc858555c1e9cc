-- fail: record failed attempts (compare-and-set on the owner).
--
-- KEYS[i]  record key
-- ARGV[1]  now, unix seconds
-- ARGV[2]  max attempts
-- ARGV[3]  for each key: 4 fence, 1 'p' permanent or 'r' retryable, 1 owner length,
--          owner, 2 error length, error text (at most 8 KiB)
--
-- A retryable failure moves the record to retry, or to failed (exhausted) on the
-- last allowed attempt; a permanent one to failed. The error goes first in the
-- record's history. The TTL is left as the claim set it unless the lease has run
-- out, when the retention starts afresh. A call sent again after a lost reply finds
-- the record moved on at its fence and answers as the first call did. The
-- record's operator notes are kept.
--
-- When Redis is full it refuses the call's first SET (OOM) before anything
-- changed, and the call answers that error whole.
--
-- Returns one code per key: 1 OK (retry), 2 LEASE_LOST, 3 FAILED (terminal), 8 CORRUPT.
local now = tonumber(ARGV[1])
local maxAttempts = tonumber(ARGV[2])
local blob = ARGV[3]
local out = {}
local pos = 1

for i, key in ipairs(KEYS) do
  local fence = u32(blob, pos)
  local permanent = string.sub(blob, pos + 4, pos + 4) == 'p'
  local olen = string.byte(blob, pos + 5)
  local owner = string.sub(blob, pos + 6, pos + 5 + olen)
  local mlen = u16(blob, pos + 6 + olen)
  local msg = string.sub(blob, pos + 8 + olen, pos + 7 + olen + mlen)
  pos = pos + 8 + olen + mlen
  local v = redis.pcall('GET', key)
  if refused(v) then
    return v
  end
  local r = parse(v)
  if type(v) == 'table' or (v and not r) then
    out[i] = 8
  elseif r and r.state == 1 and r.owner == owner then
    local terminal = permanent or r.attempts >= maxAttempts
    local state, flags = 4, 16 + kept_flags(r)
    if terminal then
      state = 3
    end
    if permanent then
      flags = flags + 2
    end
    local val = header(state, flags, r.fence, r.attempts, r.created, now) .. kept(r) .. push_error(r.hist, now, msg)
    if redis.call('PTTL', key) < r.ret then
      redis.call('SET', key, val, 'PX', r.ret) -- the claim's TTL no longer covers the retention
    else
      redis.call('SET', key, val, 'KEEPTTL')
    end
    if terminal then
      out[i] = 3
    else
      out[i] = 1
    end
  elseif r and r.state == 4 and r.fence == fence then
    out[i] = 1
  elseif r and r.state == 3 and r.fence == fence then
    out[i] = 3
  else
    out[i] = 2
  end
end
return out
