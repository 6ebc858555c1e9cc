-- complete: store the result of a successful attempt (compare-and-set on the owner token).
--
-- KEYS[i]    record key
-- ARGV[1]    retention in milliseconds
-- ARGV[2+3(i-1)] owner token, ARGV[3+3(i-1)] encoded result,
-- ARGV[4+3(i-1)] dropped flag ('' or the size of a result too large to keep)
--
-- The record keeps the TTL that its claim or last renewal set (lease + retention
-- from then), which leaves at least the retention while the lease is live; only a
-- completion after the lease ran out sets the TTL again.
--
-- A completion the client sent again after a lost reply finds the record completed
-- under its own owner token and answers OK again.
--
-- Returns one code per key: 1 OK, 2 LEASE_LOST (another owner, or no live claim), 8 CORRUPT.
local retention = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}

for i, key in ipairs(KEYS) do
  local base = 3 * (i - 1)
  local rec = redis.pcall('HMGET', key, 's', 'o', 'l')
  if rec.err then
    out[i] = 8
  elseif rec[1] == 'started' and rec[2] == ARGV[2 + base] then
    if ARGV[4 + base] == '' then
      redis.call('HSET', key, 's', 'completed', 'r', ARGV[3 + base], 'u', now)
    else
      redis.call('HSET', key, 's', 'completed', 'r', '', 'd', ARGV[4 + base], 'u', now)
    end
    if (tonumber(rec[3]) or 0) <= now then
      redis.call('PEXPIRE', key, retention)
    end
    out[i] = 1
  elseif rec[1] == 'completed' and rec[2] == ARGV[2 + base] then
    out[i] = 1
  else
    out[i] = 2
  end
end
return out
