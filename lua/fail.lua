-- fail: record a failed attempt (compare-and-set on the owner token).
--
-- KEYS[i]    record key
-- ARGV[1]    retention in milliseconds
-- ARGV[2]    max attempts
-- ARGV[3+3(i-1)] owner token, ARGV[4+3(i-1)] mode ('p' permanent, 'r' retryable),
-- ARGV[5+3(i-1)] error text
--
-- The TTL is left as the claim set it unless the lease has run out (see complete.lua).
-- A retryable failure moves the record to 'retry', or to 'failed' (kind 'x') when
-- it was the last allowed attempt; a permanent one moves it to 'failed' (kind 'p').
-- A call the client sent again after a lost reply finds the record already moved on
-- under its own owner token and answers as the first call did.
-- Returns one code per key: 1 OK (retry), 2 LEASE_LOST, 3 FAILED (terminal), 8 CORRUPT.
local retention = tonumber(ARGV[1])
local maxAttempts = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}

for i, key in ipairs(KEYS) do
  local base = 3 * (i - 1)
  local rec = redis.pcall('HMGET', key, 's', 'o', 'a', 'l')
  if rec.err then
    out[i] = 8
  elseif rec[1] == 'started' and rec[2] == ARGV[3 + base] then
    local attempts = tonumber(rec[3]) or maxAttempts
    if ARGV[4 + base] == 'p' then
      redis.call('HSET', key, 's', 'failed', 'k', 'p', 'e', ARGV[5 + base], 'u', now)
      out[i] = 3
    elseif attempts >= maxAttempts then
      redis.call('HSET', key, 's', 'failed', 'k', 'x', 'e', ARGV[5 + base], 'u', now)
      out[i] = 3
    else
      redis.call('HSET', key, 's', 'retry', 'e', ARGV[5 + base], 'u', now)
      out[i] = 1
    end
    if (tonumber(rec[4]) or 0) <= now then
      redis.call('PEXPIRE', key, retention) -- the claim's TTL no longer covers the retention
    end
  elseif rec[1] == 'retry' and rec[2] == ARGV[3 + base] then
    out[i] = 1
  elseif rec[1] == 'failed' and rec[2] == ARGV[3 + base] then
    out[i] = 3
  else
    out[i] = 2
  end
end
return out
