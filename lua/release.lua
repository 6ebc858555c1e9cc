-- release: give a claim back without a result, so the next delivery may claim it at
-- once. The abandoned attempt is not counted (attempts -1; the fence is kept and the
-- next claim raises it).
--
-- KEYS[i]    record key
-- ARGV[1]    retention in milliseconds
-- ARGV[1+i]  owner token for KEYS[i]
--
-- Returns one code per key: 1 OK, 2 LEASE_LOST, 8 CORRUPT.
local retention = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}

for i, key in ipairs(KEYS) do
  local rec = redis.pcall('HMGET', key, 's', 'o', 'a')
  if rec.err then
    out[i] = 8
  elseif rec[1] == 'started' and rec[2] == ARGV[1 + i] then
    local attempts = tonumber(rec[3]) or 1
    if attempts > 0 then attempts = attempts - 1 end
    redis.call('HSET', key, 's', 'retry', 'a', attempts, 'l', 0, 'u', now)
    redis.call('PEXPIRE', key, retention)
    out[i] = 1
  elseif rec[1] == 'retry' and rec[2] == ARGV[1 + i] then
    out[i] = 1 -- sent again after a lost reply: already released
  else
    out[i] = 2
  end
end
return out
