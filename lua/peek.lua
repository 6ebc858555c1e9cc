-- peek: read one record without changing it.
--
-- KEYS[1]  record key
--
-- Returns {value or false, PTTL in ms, Redis server time in ms}; a value that is not
-- a string is answered with the value false and PTTL -3. Any other error of the GET
-- is the call's error.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.pcall('GET', KEYS[1])
if refused(v) then
  return v
elseif type(v) == 'table' then
  return {false, -3, now}
end
return {v, redis.call('PTTL', KEYS[1]), now}
