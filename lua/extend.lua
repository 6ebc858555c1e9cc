-- extend: renew the leases of running attempts (the heartbeat).
--
-- KEYS[i]  record key
-- ARGV[1]  lease in ms
-- ARGV[2]  for each key: 1 owner length, owner
--
-- The TTL becomes lease + the retention recorded in the record.
-- Returns one code per key: 1 OK, 2 LEASE_LOST, 8 CORRUPT.
local lease = tonumber(ARGV[1])
local blob = ARGV[2]
local out = {}
local pos = 1

for i, key in ipairs(KEYS) do
  local olen = string.byte(blob, pos)
  local owner = string.sub(blob, pos + 1, pos + olen)
  pos = pos + 1 + olen
  local v = redis.pcall('GET', key)
  if owner_is(v, owner) then
    local r = parse(v)
    redis.call('PEXPIRE', key, lease + r.ret)
    out[i] = 1
  elseif type(v) == 'table' or (v and not parse(v)) then
    out[i] = 8
  else
    out[i] = 2
  end
end
return out
