-- peek: read one record without changing it.
--
-- KEYS[1]  record key
--
-- Returns {code, now_ms, ttl_ms, field, value, ...}: code 1 found, 0 missing, 8 not a hash.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.pcall('HGETALL', KEYS[1])
if rec.err then
  return {8, now, 0}
end
if #rec == 0 then
  return {0, now, 0}
end
local out = {1, now, redis.call('PTTL', KEYS[1])}
for _, v in ipairs(rec) do
  out[#out + 1] = v
end
return out
