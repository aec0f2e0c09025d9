#!lua name=idem
-- idem's function library on Redis (docs/redis.md). idem-core decides every write in
-- the engine; these functions read what it decides on and apply its writes after
-- re-checking what was read, so that a write lands only on the record it was decided
-- on (compare-and-set on the record's bytes).
--
-- Every key carries one hash tag, so that a record, its indexes and the generation
-- counter are in one hash slot:
--   {idem}:r:<id>      a record: idem-core's encoding of it (string)
--   {idem}:ids         every record's id, score 0: the ids in the order of their bytes
--   {idem}:s:<state>   the ids of one state (pending, unknown: scored by created_at;
--                      succeeded, failed, forgotten: scored by expires_at)
--   {idem}:generation  the last generation handed out
--   {idem}:floor       the latest time a record was written at: the clock never goes
--                      below it (a server clock stepped back, a restart)
--   {idem}:sizes       each record's size in bytes, by id
--   {idem}:bytes       the sizes' sum: what the records take
--   {idem}:e:<id>      an entity: idem-core's encoding of it; <id> its address's key bytes
--   {idem}:entities    every entity's <id>, score 0, in the order of their bytes
--   {idem}:ek:<kind>   the entities of a kind: <len state><state><id>, score 0
--   {idem}:u:<id>      a claimed value's holder; <id> the key bytes of (tenant, scope, value)
--   {idem}:unique      every claimed value's <id>, score 0
--   {idem}:t:<id>      an issued token's entry; <id> the key bytes of (tenant, operation,
--                      token)
--   {idem}:tokens      every issued token's <id>, scored by the time it expires
--   {idem}:ti:<id>     an intent's entry: the token issued for it last; <id> the key bytes
--                      of (tenant, operation, intent id)
-- An <id> is idem-core's key bytes of the record id.

local VERSION = 1

-- The fleet's clock: the server's, in ms since the epoch.
local CLOCK_OFFSET_MS = 0

local FLOOR = '{idem}:floor'

local function now_ms()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + CLOCK_OFFSET_MS
  return math.max(now, tonumber(redis.call('GET', FLOOR) or '0'))
end

-- Raises the floor to `at` (ms), never lowers it.
local function raise_floor(at)
  if at > tonumber(redis.call('GET', FLOOR) or '0') then
    redis.call('SET', FLOOR, string.format('%.0f', at))
  end
end

-- Keeps the size of `member`'s record (0: none) and the sum of all sizes.
local function resize(member, size)
  local old = tonumber(redis.call('HGET', '{idem}:sizes', member) or '0')
  if size > 0 then
    redis.call('HSET', '{idem}:sizes', member, size)
  else
    redis.call('HDEL', '{idem}:sizes', member)
  end
  if size ~= old then
    redis.call('INCRBY', '{idem}:bytes', size - old)
  end
end

-- keys: the record. args: 'claim' to draw a generation when the record is absent.
-- Returns {the record's bytes or '', the clock, the generation drawn or 0}.
local function read(keys, args)
  local value = redis.call('GET', keys[1])
  local now = now_ms()
  local generation = 0
  if not value then
    value = ''
    if args[1] == 'claim' then
      generation = redis.call('INCR', '{idem}:generation')
    end
  end
  return {value, now, generation}
end

-- keys: any key of the library (a cluster routes the call by it). Returns the clock.
local function now(keys, args)
  return now_ms()
end

-- keys: the generation counter. Returns a generation drawn for a claim over a record
-- that is there.
local function next_generation(keys, args)
  return redis.call('INCR', keys[1])
end

-- Drops `member` from the index of every state.
local STATES = {'pending', 'unknown', 'succeeded', 'failed', 'forgotten'}
local function unindex(member)
  for _, state in ipairs(STATES) do
    redis.call('ZREM', '{idem}:s:' .. state, member)
  end
end

-- keys: the record. args: the id, the bytes read ('' for absent), the bytes to write
-- ('' to delete), the state of the bytes written, its index score, the time the record
-- may be dropped (ms since the epoch, 0 for never), the time it was written at (0 for a
-- delete).
-- Returns 1 when written, 0 when the record is no longer the one read.
local function write(keys, args)
  local current = redis.call('GET', keys[1])
  if not current then current = '' end
  if current ~= args[2] then
    return 0
  end
  local member = args[1]
  unindex(member)
  resize(member, #args[3])
  raise_floor(tonumber(args[7]))
  if args[3] == '' then
    redis.call('DEL', keys[1])
    redis.call('ZREM', '{idem}:ids', member)
  else
    redis.call('SET', keys[1], args[3])
    local drop_at = tonumber(args[6])
    if drop_at > 0 then
      redis.call('PEXPIREAT', keys[1], drop_at)
    end
    redis.call('ZADD', '{idem}:ids', 0, member)
    redis.call('ZADD', '{idem}:s:' .. args[4], tonumber(args[5]), member)
  end
  return 1
end

-- keys: the record. args: the id. Drops the id from the indexes when its record is
-- gone (dropped by its time). Returns 1 when it did.
local function forget(keys, args)
  if redis.call('EXISTS', keys[1]) == 1 then
    return 0
  end
  unindex(args[1])
  redis.call('ZREM', '{idem}:ids', args[1])
  resize(args[1], 0)
  return 1
end

-- keys: the records. args: the highest generation of the input, the latest time it was
-- written at, then for each record five: its id, its bytes, its state, its index
-- score, its drop time. Writes each
-- record that is absent; a record that is there with other bytes refuses the whole
-- call before anything is written. Returns {0, the index of the first one refused}
-- or {1, how many were written}.
local function import(keys, args)
  for i, key in ipairs(keys) do
    local current = redis.call('GET', key)
    if current and current ~= args[3 + (i - 1) * 5 + 1] then
      return {0, i}
    end
  end
  local written = 0
  for i, key in ipairs(keys) do
    local base = 3 + (i - 1) * 5
    if not redis.call('GET', key) then
      redis.call('SET', key, args[base + 1])
      local drop_at = tonumber(args[base + 4])
      if drop_at > 0 then
        redis.call('PEXPIREAT', key, drop_at)
      end
      redis.call('ZADD', '{idem}:ids', 0, args[base])
      redis.call('ZADD', '{idem}:s:' .. args[base + 2], tonumber(args[base + 3]), args[base])
      resize(args[base], #args[base + 1])
      written = written + 1
    end
  end
  local highest = tonumber(args[1])
  local counter = tonumber(redis.call('GET', '{idem}:generation') or '0')
  if highest > counter then
    redis.call('SET', '{idem}:generation', args[1])
  end
  raise_floor(tonumber(args[2]))
  return {1, written}
end

-- keys: a value (an entity, a claimed value). args: the bytes read ('' for absent), the
-- bytes to write ('' to delete), then triples: an index (a sorted set of its own keys'
-- members, score 0), a member to take out of it ('' none), a member to put in ('' none).
-- Returns 1 when written, 0 when the value is no longer the one read.
local function swap(keys, args)
  local current = redis.call('GET', keys[1])
  if not current then current = '' end
  if current ~= args[1] then
    return 0
  end
  if args[2] == '' then
    redis.call('DEL', keys[1])
  else
    redis.call('SET', keys[1], args[2])
  end
  local i = 3
  while i + 2 <= #args do
    if args[i + 1] ~= '' then
      redis.call('ZREM', args[i], args[i + 1])
    end
    if args[i + 2] ~= '' then
      redis.call('ZADD', args[i], 0, args[i + 2])
    end
    i = i + 3
  end
  return 1
end

-- keys: any. Returns {their values ('' for absent ones), the clock}: read together.
local function read_many(keys, args)
  local values = {}
  for i, key in ipairs(keys) do
    values[i] = redis.call('GET', key) or ''
  end
  return {values, now_ms()}
end

-- keys: a new token's entry. args: the entry's bytes, the time it expires (ms), the
-- token's id, its intent's entry key ('' for none), that entry as read ('' for absent),
-- the token's bytes (the intent's entry's new value). Returns 1 when written, 0 when the
-- intent's entry changed since it was read, -1 when the token is there already.
local function issue(keys, args)
  if redis.call('EXISTS', keys[1]) == 1 then
    return -1
  end
  if args[4] ~= '' then
    local current = redis.call('GET', args[4]) or ''
    if current ~= args[5] then
      return 0
    end
    redis.call('SET', args[4], args[6])
  end
  redis.call('SET', keys[1], args[1])
  redis.call('ZADD', '{idem}:tokens', tonumber(args[2]), args[3])
  return 1
end

-- keys: a token's entry. args: the token's id, its intent's entry key ('' for none), the
-- token's bytes. Deletes the entry, and the intent's entry where it names this token.
-- Returns how many entries of tokens it deleted (0 or 1).
local function drop_token(keys, args)
  local dropped = redis.call('DEL', keys[1])
  redis.call('ZREM', '{idem}:tokens', args[1])
  if args[2] ~= '' and redis.call('GET', args[2]) == args[3] then
    redis.call('DEL', args[2])
  end
  return dropped
end

-- keys: the generation counter. args: a generation, a time (ms). Raises the counter to
-- the generation and the floor to the time, never lowers either (an import without
-- records). Returns 1.
local function raise(keys, args)
  if tonumber(args[1]) > tonumber(redis.call('GET', keys[1]) or '0') then
    redis.call('SET', keys[1], args[1])
  end
  raise_floor(tonumber(args[2]))
  return 1
end

-- keys: none. Returns the library's version.
local function version(keys, args)
  return VERSION
end

redis.register_function('idem_read', read)
redis.register_function('idem_now', now)
redis.register_function('idem_next_generation', next_generation)
redis.register_function('idem_write', write)
redis.register_function('idem_forget', forget)
redis.register_function('idem_import', import)
redis.register_function('idem_swap', swap)
redis.register_function('idem_raise', raise)
redis.register_function('idem_read_many', read_many)
redis.register_function('idem_issue', issue)
redis.register_function('idem_drop_token', drop_token)
redis.register_function{function_name = 'idem_version', callback = version, flags = {'no-writes'}}
