"""The Redis store's Lua scripts (serving/gateway/state.py `RedisState`): each check-and-change of a key's counts
and holds runs as one script, atomic on the server, so every gateway process sharing the Redis sees one order.

Keys are computed by the caller (`prefix` + kind + key id + day): one Redis, not Redis Cluster.
"""

ADMIT = """
local now, rpm, lim = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local spent = tonumber(redis.call('HGET', KEYS[2], 'spent') or '0')
local reserved = math.max(0, tonumber(redis.call('HGET', KEYS[2], 'reserved') or '0'))
if lim >= 0 and spent + reserved >= lim then
  return {'budget', '0', tostring(spent), tostring(reserved)}
end
if rpm >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60)
  if redis.call('ZCARD', KEYS[1]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {'rate_limit', tostring(60 - (now - tonumber(oldest[2]))), tostring(spent), tostring(reserved)}
  end
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('EXPIRE', KEYS[1], 120)
end
return {'ok', '0', tostring(spent), tostring(reserved)}
"""

RESERVE = """
local lim = tonumber(ARGV[1])
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
local reserved = math.max(0, tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0'))
if lim >= 0 and spent + reserved >= lim then
  return {0, tostring(spent), tostring(reserved)}
end
redis.call('HINCRBYFLOAT', KEYS[1], 'reserved', ARGV[2])
redis.call('EXPIRE', KEYS[1], 3456000)
redis.call('HSET', KEYS[2], 'key', ARGV[5], 'day', ARGV[6], 'usd', ARGV[2], 'rid', ARGV[7])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
return {1, tostring(spent), tostring(reserved)}
"""

# KEYS: budget hash, reservation hash. ARGV: limit, usd more. {0, spent, reserved} over the limit; {2, …} when the
# hold is gone (charged as expired).
EXTEND = """
local lim = tonumber(ARGV[1])
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
local reserved = math.max(0, tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0'))
if lim >= 0 and spent + reserved >= lim then
  return {0, tostring(spent), tostring(reserved)}
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {2, tostring(spent), tostring(reserved)}
end
redis.call('HINCRBYFLOAT', KEYS[2], 'usd', ARGV[2])
redis.call('HINCRBYFLOAT', KEYS[1], 'reserved', ARGV[2])
return {1, tostring(spent), tostring(reserved)}
"""

# KEYS: budget hash, reservation hash, open reservations, ledger stream.
# ARGV: reservation id, reserved usd, now, day, key id, request id, then (model, kind, usd) per charge.
SETTLE = """
local held = redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
if held == 1 then
  redis.call('HINCRBYFLOAT', KEYS[1], 'reserved', -tonumber(ARGV[2]))
end
local total = 0
for i = 7, #ARGV, 3 do
  total = total + tonumber(ARGV[i + 2])
  redis.call('XADD', KEYS[4], '*', 'ts', ARGV[3], 'day', ARGV[4], 'key', ARGV[5], 'model', ARGV[i],
             'kind', ARGV[i + 1], 'usd', ARGV[i + 2], 'rid', ARGV[6])
end
redis.call('HINCRBYFLOAT', KEYS[1], 'spent', total)
redis.call('EXPIRE', KEYS[1], 3456000)
return held
"""

# Reservations whose process never settled them: charged at their reserved amount as `expired`.
# KEYS: open reservations, ledger stream. ARGV: now, key prefix.
SWEEP = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 64)
for _, id in ipairs(ids) do
  local r = redis.call('HMGET', ARGV[2] .. 'res:' .. id, 'key', 'day', 'usd', 'rid')
  redis.call('ZREM', KEYS[1], id)
  if r[1] then
    local budget = ARGV[2] .. 'budget:' .. r[1] .. ':' .. r[2]
    redis.call('HINCRBYFLOAT', budget, 'reserved', -tonumber(r[3]))
    redis.call('HINCRBYFLOAT', budget, 'spent', tonumber(r[3]))
    redis.call('XADD', KEYS[2], '*', 'ts', ARGV[1], 'day', r[2], 'key', r[1], 'model', '*', 'kind', 'expired',
               'usd', r[3], 'rid', r[4])
    redis.call('DEL', ARGV[2] .. 'res:' .. id)
  end
end
return #ids
"""
