-- Sluice rate-limit library: six algorithms and one entry point, check(),
-- that evaluates every limit of a request atomically. It mirrors the Go
-- reference in internal/ratelimit/model exactly; read that package's docs
-- for the semantics and the arithmetic rules. In short: all values are
-- integers in microseconds below 2^53 (exact in doubles), except the
-- sliding window counter's weight, computed as floor((n*(w-e))/w) in the
-- same operation order as Go.
--
-- check(keys, args)
--   keys: one key per entry (all in one Cluster slot, distinct).
--   args: dryRun ('0'|'1'), then per entry six values:
--         algorithm (1..6), capacity, rate, interval (µs), cost, shadow ('0'|'1'),
--         then optionally the time in µs (tests only; production omits it
--         and the library reads TIME). An explicit time must not be behind
--         the server clock: expiry deadlines are absolute.
--   reply: a flat array of integers:
--         decision (1 allowed, 0 denied), then per entry six values:
--         allowed, remaining, reset µs, retry-after µs (-1 never, 0 when
--         allowed), remaining after consuming, reset after consuming.
-- A denied or dry-run call writes nothing. Every key written gets an
-- absolute expiry (PEXPIREAT, rounded up to the ms) at the moment its state
-- equals untouched. A key holding another algorithm's state, or anything
-- unreadable, counts as untouched and is replaced on write.

local NEVER = -1
local MAXU = 4503599627370496      -- 2^52: bound of stored values and times
local MAXCOUNT = 1000000000
local LOGMOD = 1125899906842624    -- 2^50: sliding log cumulative counters wrap here
local MAXENTRIES = 256

local function fmt(n)
  return string.format('%d', n)
end

-- toint parses an integer in [lo, hi]; nil otherwise.
local function toint(s, lo, hi)
  local n = tonumber(s)
  if n == nil or n ~= math.floor(n) or n < lo or n > hi then
    return nil
  end
  return n
end

-- expire_at sets key to expire at time t µs (rounded up to the ms).
local function expire_at(key, t)
  redis.call('PEXPIREAT', key, fmt(math.ceil(t / 1000)))
end

-- A verdict: {allowed, remaining, reset, retry, remainingAfter, resetAfter}.
local function verdict(remaining, reset)
  return {false, remaining, reset, 0, remaining, reset}
end

local function allow(v, remaining_after, reset_after)
  v[1] = true
  v[5] = remaining_after
  v[6] = reset_after
end

local function deny(v, retry)
  v[4] = retry
end

-- Hash-backed state: field 'a' tags the algorithm; the named fields hold
-- integers in [0, 2^52]. Returns the values (nil: untouched) and whether
-- the key holds something else that a write must delete first.
local function read_hash(key, tag, names)
  local r = redis.pcall('HMGET', key, 'a', unpack(names))
  if type(r) ~= 'table' or r.err then
    return nil, true
  end
  if not r[1] then
    return nil, false
  end
  if r[1] ~= tag then
    return nil, true
  end
  local vals = {}
  for i = 1, #names do
    local n = toint(r[i + 1], 0, MAXU)
    if n == nil then
      return nil, true
    end
    vals[i] = n
  end
  return vals, false
end

local function write_hash(key, foreign, tag, expire, ...)
  if foreign then
    redis.call('DEL', key)
  end
  redis.call('HSET', key, 'a', tag, ...)
  expire_at(key, expire)
end

-- Each algorithm: (key, capacity, rate, interval, now, cost) -> verdict,
-- write function (called only when the entry is consumed).

local function token_bucket(key, cap, rate, iv, now, cost)
  local st, foreign = read_hash(key, '1', {'t', 'l'})
  local tokens, last = cap, now
  if st then
    tokens, last = math.min(st[1], cap), st[2]
    if tokens < cap and now > last then
      local steps = math.floor((now - last) / iv)
      if steps > 0 then
        if steps >= math.ceil((cap - tokens) / rate) then
          tokens = cap
        else
          tokens = tokens + steps * rate
          last = last + steps * iv
        end
      end
    end
    if tokens >= cap then
      last = now
    end
  end
  local function full_in(t)
    if t >= cap then
      return 0
    end
    return last + math.ceil((cap - t) / rate) * iv - now
  end
  local v = verdict(tokens, full_in(tokens))
  if cost > cap then
    deny(v, NEVER)
  elseif cost <= tokens then
    local left = tokens - cost
    allow(v, left, full_in(left))
    return v, function()
      write_hash(key, foreign, '1', now + v[6], 't', fmt(left), 'l', fmt(last))
    end
  else
    deny(v, last + math.ceil((cost - tokens) / rate) * iv - now)
  end
  return v, nil
end

local function fixed_window(key, limit, _, window, now, cost)
  local st, foreign = read_hash(key, '2', {'n', 's'})
  local count, start = 0, now
  if st and st[1] > 0 and now < st[2] + window then
    count, start = st[1], st[2]
  end
  local function ends_in(c)
    if c == 0 then
      return 0
    end
    return start + window - now
  end
  local v = verdict(math.max(limit - count, 0), ends_in(count))
  if cost > limit then
    deny(v, NEVER)
  elseif count + cost <= limit then
    allow(v, limit - count - cost, ends_in(count + cost))
    return v, function()
      write_hash(key, foreign, '2', start + window, 'n', fmt(count + cost), 's', fmt(start))
    end
  else
    deny(v, start + window - now)
  end
  return v, nil
end

-- Sliding window log: a sorted set scored by admission time; the member is
-- "<cumulative cost mod 2^50>:<cost>", so the cost in the window is the
-- difference of two cumulative counters and the retry search is a binary
-- search by rank. Requests admitted in the same µs share one member
-- (scores stay unique, so rank order is time order).
local function parse_member(m)
  if type(m) ~= 'string' then
    return nil
  end
  local c, n = string.match(m, '^(%d+):(%d+)$')
  c, n = toint(c, 0, LOGMOD - 1), toint(n, 1, MAXU)
  if c == nil or n == nil then
    return nil
  end
  return c, n
end

local function sliding_log(key, limit, _, window, now, cost)
  local cut = now - window
  local first = redis.pcall('ZRANGEBYSCORE', key, string.format('(%d', cut), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local foreign, live = false, false
  local total, base, last_at, last_cum, last_cost, last_member = 0, 0, 0, nil, 0, nil
  if type(first) ~= 'table' or first.err then
    foreign = true
  else
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if #last > 0 then
      local lc, ln = parse_member(last[1])
      local lat = toint(last[2], 0, MAXU)
      if lc == nil or lat == nil then
        foreign = true
      else
        last_cum = lc
        if #first > 0 then
          local fc, fn = parse_member(first[1])
          if fc == nil or toint(first[2], 0, MAXU) == nil then
            foreign = true
            last_cum = nil
          else
            live = true
            base = (fc - fn) % LOGMOD
            total = (lc - base) % LOGMOD
            last_at, last_cost, last_member = lat, ln, last[1]
          end
        end
      end
    end
  end
  local reset = 0
  if live then
    reset = last_at + window - now
  end
  local v = verdict(math.max(limit - total, 0), reset)
  if cost > limit then
    deny(v, NEVER)
  elseif total + cost <= limit then
    local at = math.max(now, last_at)
    allow(v, limit - total - cost, at + window - now)
    return v, function()
      if foreign then
        redis.call('DEL', key)
      else
        redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(cut))
      end
      local cum, n = cost, cost
      if last_cum then
        cum = (last_cum + cost) % LOGMOD
      end
      if live and at == last_at then
        redis.call('ZREM', key, last_member)
        n = last_cost + cost
      end
      redis.call('ZADD', key, fmt(at), fmt(cum) .. ':' .. fmt(n))
      expire_at(key, at + window)
    end
  else
    -- The oldest entries must leave until total-left+cost <= limit: find
    -- the first whose cumulative cost since base reaches need.
    local need = total + cost - limit
    local lo = redis.call('ZCOUNT', key, '-inf', fmt(cut))
    local hi = redis.call('ZCARD', key) - 1
    local ok = true
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local c = parse_member(redis.call('ZRANGE', key, mid, mid)[1])
      if c == nil then
        ok = false
        break
      end
      if (c - base) % LOGMOD >= need then
        hi = mid
      else
        lo = mid + 1
      end
    end
    local at = nil
    if ok then
      at = toint(redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')[2], 0, MAXU)
    end
    if at == nil then
      at = last_at -- unreadable entry: fall back to when the log empties (never early)
    end
    deny(v, at + window - now)
  end
  return v, nil
end

-- Sliding window counter: floor(prev*(window-elapsed)/window) in doubles.
local function weighted(n, window, elapsed)
  if n == 0 then
    return 0
  end
  return math.floor((n * (window - elapsed)) / window)
end

-- first_at_most: smallest e in [lo, hi] with weighted(n, window, e) <= room,
-- given that it holds at hi (weighted is non-increasing in e).
local function first_at_most(lo, hi, room, n, window)
  while lo < hi do
    local mid = lo + math.floor((hi - lo) / 2)
    if weighted(n, window, mid) <= room then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

local function sliding_counter(key, limit, _, window, now, cost)
  local st, foreign = read_hash(key, '4', {'k', 'c', 'p'})
  local k = math.floor(now / window)
  local curr, prev = 0, 0
  if st then
    local sk = st[1]
    if k == sk then
      curr, prev = st[2], st[3]
    elseif k == sk + 1 then
      prev = st[2]
    elseif k < sk then
      k, curr, prev = sk, st[2], st[3]
    end
  end
  local start = k * window
  local elapsed = math.max(now - start, 0)
  local est = weighted(prev, window, elapsed) + curr
  local function reset_of(c)
    if c > 0 then
      return start + 2 * window - now
    elseif prev > 0 then
      return start + window - now
    end
    return 0
  end
  local v = verdict(math.max(limit - est, 0), reset_of(curr))
  if cost > limit then
    deny(v, NEVER)
  elseif est + cost <= limit then
    allow(v, math.max(limit - est - cost, 0), reset_of(curr + cost))
    return v, function()
      write_hash(key, foreign, '4', start + 2 * window, 'k', fmt(k), 'c', fmt(curr + cost), 'p', fmt(prev))
    end
  else
    local at
    local room = limit - curr - cost
    if room >= 0 and weighted(prev, window, window - 1) <= room then
      at = start + first_at_most(elapsed + 1, window - 1, room, prev, window)
    elseif weighted(curr, window, window - 1) <= limit - cost then
      at = start + window + first_at_most(0, window - 1, limit - cost, curr, window)
    else
      at = start + 2 * window
    end
    deny(v, at - now)
  end
  return v, nil
end

-- Leaky bucket (policing) and GCRA: one meter. The level is in scaled
-- units: a unit of cost is `iv` of them and `rate` drain per µs (rate and
-- iv are already divided by their gcd). GCRA's TAT is time + level/rate.
local function meter(tag)
  return function(key, cap, rate, iv, now, cost)
    local st, foreign = read_hash(key, tag, {'v', 't'})
    local level, at = 0, now
    if st then
      level, at = st[1], st[2]
      if now > at then
        local elapsed = now - at
        if elapsed >= math.ceil(level / rate) then
          level = 0
        else
          level = level - elapsed * rate
        end
        at = now
      end
    end
    local full = cap * iv
    local function drained_in(l)
      if l == 0 then
        return 0
      end
      return at + math.ceil(l / rate) - now
    end
    local v = verdict(math.floor(math.max(full - level, 0) / iv), drained_in(level))
    if cost > cap then
      deny(v, NEVER)
    elseif level + cost * iv <= full then
      local after = level + cost * iv
      allow(v, math.floor((full - after) / iv), drained_in(after))
      return v, function()
        write_hash(key, foreign, tag, now + v[6], 'v', fmt(after), 't', fmt(at))
      end
    else
      deny(v, at + math.ceil((level - (cap - cost) * iv) / rate) - now)
    end
    return v, nil
  end
end

local ALGORITHMS = {token_bucket, fixed_window, sliding_log, sliding_counter, meter('5'), meter('6')}

local function sluice_check(keys, args)
  local n = #keys
  if n < 1 or n > MAXENTRIES then
    return redis.error_reply('ERR sluice: want 1..' .. MAXENTRIES .. ' keys, got ' .. n)
  end
  if #args ~= 1 + 6 * n and #args ~= 2 + 6 * n then
    return redis.error_reply('ERR sluice: want ' .. (1 + 6 * n) .. ' or ' .. (2 + 6 * n) .. ' arguments, got ' .. #args)
  end
  if args[1] ~= '0' and args[1] ~= '1' then
    return redis.error_reply('ERR sluice: bad dry-run flag')
  end
  local dry = args[1] == '1'
  local now
  if #args == 2 + 6 * n then
    now = toint(args[#args], 0, MAXU - 1)
    if now == nil then
      return redis.error_reply('ERR sluice: bad time')
    end
  else
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end

  local seen, verdicts, writes, costs = {}, {}, {}, {}
  local allowed = true
  for i = 1, n do
    local b = 1 + (i - 1) * 6
    local alg = toint(args[b + 1], 1, #ALGORITHMS)
    local cap = toint(args[b + 2], 1, MAXCOUNT)
    local rate = toint(args[b + 3], 0, MAXCOUNT)
    local iv = toint(args[b + 4], 1, MAXU)
    local cost = toint(args[b + 5], 0, MAXCOUNT)
    local shadow = args[b + 6]
    if alg == nil or cap == nil or rate == nil or iv == nil or cost == nil or (shadow ~= '0' and shadow ~= '1')
      or ((alg == 1 or alg >= 5) and rate < 1) then
      return redis.error_reply('ERR sluice: bad arguments for entry ' .. i)
    end
    if seen[keys[i]] then
      return redis.error_reply('ERR sluice: duplicate key in entry ' .. i)
    end
    seen[keys[i]] = true
    local v, w = ALGORITHMS[alg](keys[i], cap, rate, iv, now, cost)
    verdicts[i], writes[i], costs[i] = v, w, cost
    if not v[1] and shadow == '0' then
      allowed = false
    end
  end

  if allowed and not dry then
    for i = 1, n do
      if writes[i] and costs[i] > 0 then
        writes[i]()
      end
    end
  end

  local out = {allowed and 1 or 0}
  for i = 1, n do
    local v = verdicts[i]
    out[#out + 1] = v[1] and 1 or 0
    for j = 2, 6 do
      out[#out + 1] = v[j]
    end
  end
  return out
end
