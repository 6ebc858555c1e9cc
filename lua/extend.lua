-- extend: renew the leases of running attempts (the heartbeat).
--
-- KEYS[i]    record key
-- ARGV[1]    lease in milliseconds
-- ARGV[2]    retention in milliseconds
-- ARGV[2+i]  owner token for KEYS[i]
--
-- Returns one code per key: 1 OK, 2 LEASE_LOST, 8 CORRUPT.
local lease = tonumber(ARGV[1])
local retention = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}

for i, key in ipairs(KEYS) do
  local rec = redis.pcall('HMGET', key, 's', 'o')
  if rec.err then
    out[i] = 8
  elseif rec[1] == 'started' and rec[2] == ARGV[2 + i] then
    redis.call('HSET', key, 'l', now + lease)
    redis.call('PEXPIRE', key, lease + retention)
    out[i] = 1
  else
    out[i] = 2
  end
end
return out
