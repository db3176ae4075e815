-- Sluice rate-limit library: the algorithms of internal/ratelimit (their ids
-- below), a bucket's penalty box, and one entry point, check(),
-- that evaluates one or more requests, each of them all of its limits
-- atomically. It mirrors the Go reference in internal/ratelimit/model
-- exactly; read that package's docs for the semantics and the arithmetic
-- rules. In short: all values are integers in microseconds below 2^53
-- (exact in doubles), except the sliding window counter's weight, computed
-- as floor((n*(w-e))/w) in the same operation order as Go.
--
-- Layout (v2; ratelimit.Key and ratelimit.SplitKey build the names): the
-- limits of one bucket (a policy and a key value) share one hash. Each
-- limit's state is one field, named after the limit, holding its algorithm
-- id as a byte, then its values as little-endian doubles (struct.pack
-- '<Bdd', exact: every value is an integer in [0, 2^52], tokens in
-- [-2^52, 2^52]):
--   TokenBucket          1, tokens (below 0: in debt), time of the last refill step
--   FixedWindow          2, count, window start
--   SlidingWindowCounter 4, window index, current count, previous ('<Bddd')
--   LeakyBucket, GCRA    5 or 6, level, time
--   FixedWindowClock     7, count, window start
--   Calendar             8, count, window end
--   Concurrency          9, held, since, first, last ('<Bdddd'); each hold
--                        a field of its own (see the Concurrency section)
-- (Binary, not decimal text: struct.unpack and struct.pack cost a fraction
-- of string.match, tonumber and string.format, and this runs per limit on
-- every request.) A field holding anything else (another algorithm's
-- state: the limit was edited) is untouched, and replaced on write. The
-- field ':ban' holds the bucket's penalty box state (see its section).
-- The field ':exp' holds the bucket's expiry in ms ('<d'): the latest moment
-- at which a state written to the bucket is untouched again. The key
-- expires exactly then (PEXPIREAT), so a state never expires before its
-- time whichever limits a request names, and a bucket's expiry never moves
-- earlier while it lives.
-- A sliding window log keeps its own sorted set, scored by admission time.
-- Its limit's field in the bucket holds the byte 3 while the log is the
-- limit's state: a log whose field holds anything else, or nothing, is
-- untouched (another algorithm wrote the limit since), and the bucket's
-- expiry covers the log's. A log whose key is its own bucket (a key not of
-- Key's shape, as tests use) is just the sorted set.
--
-- check(keys, args)
--   Several independent requests share one call to amortize the cost of
--   entering a script; each keeps its own all-or-nothing semantics and gets
--   exactly the result it would get as a call of its own, the requests
--   taken in order (a later request sees what an earlier one consumed).
--   keys: per request, per entry: its bucket, then for a sliding window
--         log its log's key; all in one Cluster slot. The entries of one
--         request that name one bucket must be adjacent and have distinct
--         fields.
--   args: per request, a header "n:mode:time" (n in 1..256 entries,
--         mode 0 a check, 1 a dry run, 2 a refund, 3 a release, 4 a
--         reset, 5 a lift (see forget; every figure of the reply 0), 6 a
--         settlement (see Reservations); time in
--         µs or '-' for the server's TIME), then n
--         entries "algorithm:capacity:rate:interval:cost:flags:field"
--         (algorithm 1..7, interval in µs, all in decimal; flags 0..3:
--         1 shadow, 2 charge always, 3 both; field: the limit's field in
--         its bucket, without ':'); a calendar quota's entry is
--         "8:capacity:w0:w1:w2:w3:cost:flags:field", w0 < w1 < w2 < w3
--         the starts of four consecutive windows in µs (see Calendar below;
--         a request's time outside [w0, w3) is an error reply). A bucket's
--         penalty box is one more entry, "10:denials:within:ban:maxban:flags"
--         (µs; flags 1 shadow), first of the bucket's entries; not in a refund. A concurrency
--         entry (algorithm 9, rate 0, flags 0..1) is followed by one more
--         argument, its holder (1..256 bytes of any kind), so that the entry
--         itself is the same string for every request (memoized). An
--         entry that reserves (a check's or a dry run's, flags 0..1, any
--         algorithm but 9) ends in ":r<ttl>" (µs), one of a settlement
--         (every entry of mode 6 but a concurrency limit's) in ":s"; both
--         are followed by their reservation's field, ':h<field>:<holder>'
--         (a dry run's holder may be empty).
--         An explicit time is for tests (a simulated clock); it must not
--         be behind the server clock: expiry deadlines are absolute.
--         Requests that read TIME share one reading: they are evaluated as
--         if they arrived in the same microsecond, in order.
--   reply: a flat array of integers, per request:
--           its ordinal (1, 2, ...: the caller checks the layout with it),
--           decision (1 allowed, 0 denied), then per entry four values:
--           retry-after µs (0: the entry allows; -1: never), remaining,
--           reset µs, and reset after consuming (µs; the reset when the
--           entry denies, unless it charges always). Remaining after
--           consuming is remaining minus the cost for an entry that
--           allows, for every algorithm (0 for one charged all the same).
--           A penalty box's four: the ban left at the call's start, the
--           ban the call issued (µs, 0: none), the denials counted, the
--           time until its state is untouched (µs). After the entries',
--           two values per reserving or settling entry (see Reservations).
--   Arguments are all checked before anything is evaluated: a malformed
--   call is an error reply and writes nothing.
-- A settlement replaces each entry's reservation by its actual cost (see
-- settle_group): allowed when an entry settled (retry-after 0; -1 when it
-- settled nothing), figures after it in all four values.
-- A refund gives each entry's cost back to its limit (see refund_group):
-- it is allowed, and its figures are those after the refund, in all four
-- values (remaining is not reduced by the cost); a concurrency entry's
-- refund releases its holder. A release frees what each concurrency
-- entry's holder holds, unless a denied duplicate of it is pending (see
-- Concurrency) (an entry that freed something has retry-after 0,
-- one that freed nothing -1) and refunds the other entries; it is allowed
-- when a concurrency entry freed something; the figures are those after.
-- A denied or dry-run request writes nothing, except that a denied one
-- writes the duplicates its concurrency entries remember, and its entries
-- that charge always: those are charged whatever the
-- decision, and when the cost does not fit the limit goes over (into debt,
-- up to twice the limit; a token bucket down to -capacity tokens), as
-- the Go model's CheckAlways documents. Per request, each bucket is
-- read once (HMGET of its limits' fields and ':exp') and written at most
-- once (HSET of the fields that changed, plus PEXPIREAT when the expiry
-- moves later), whatever the number of its limits. A key holding anything
-- but a hash (a bucket) or a sorted set (a log) is untouched and replaced
-- on write.
--
-- Cost per call matters (this runs for every request a cluster serves):
-- the hot path creates no closures and no tables (scratch arrays, the
-- groups' records and the reply table are reused from call to call; every
-- slot read is written earlier in the same call), parsed arguments are memoized, globals are
-- looked up once, and it makes few Lua calls (each costs about as much as
-- ten comparisons). Besides the Lua work, what remains is the redis.call
-- round trips: TIME once per call, then per bucket a read, a write and
-- (when it moves) the expiry.

local NEVER = -1
local MAXU = 4503599627370496      -- 2^52: bound of stored values and times
local MAXCOUNT = 1000000000
local LOGMOD = 1125899906842624    -- 2^50: sliding log cumulative counters wrap here
local MAXENTRIES = 256             -- per request
local MAXKEYS = 8192               -- per call
local EXPIRY = ':exp'              -- a bucket's field holding its expiry (ms)
local LOGMARK = '\3'               -- a log's field in its bucket
local BAN = ':ban'                 -- a bucket's field holding its penalty box
-- The algorithms' ids (ratelimit.Algorithm), in the arguments and as the
-- first byte of a stored state.
local TOKEN_BUCKET, FIXED_WINDOW, SLIDING_LOG, SLIDING_COUNTER = 1, 2, 3, 4
local LEAKY_BUCKET, GCRA, FIXED_WINDOW_CLOCK, CALENDAR, CONCURRENCY = 5, 6, 7, 8, 9
local PENALTY = 10                 -- the penalty box's id in the arguments
local MAXPENALTY = 31622400000000  -- µs: bound of a penalty's durations (366 days)

-- Functions see the standard library and the redis API only when called,
-- not while the library loads: init() binds them on the first call.
local call, pcall_, floor, ceil, tonum, format, match, find, typeof, unpack_, spack, sunpack

local function init()
  call, pcall_ = redis.call, redis.pcall
  floor, ceil = math.floor, math.ceil
  tonum, format, match, find, typeof, unpack_ = tonumber, string.format, string.match, string.find, type, unpack
  spack, sunpack = struct.pack, struct.unpack
end

-- Scratch, reused by every call. Requests r, entries j (in argument order
-- across the call) and groups g (the adjacent entries of one bucket in a
-- request, across the call):
--   R_HDR[r]: request r's parsed header; R_G[r]: the groups before its
--   first; R_NG[r]: its groups.
--   E_REC[j]: entry j's parsed arguments (shared, read-only records: see
--   entry); for a log also E_LK[j], its key, E_LW[j], whether a write
--   to it is pending, and LOG_WRITES[j], that write (see log_entry).
--   E_HF[j]: a concurrency entry's hold field (its holder's), E_DF[j] its
--   duplicates' field; E_HI[j]: the hold's index in its bucket's read (the
--   duplicates' is the next). A reserving or settling entry's: its
--   reservation's field (E_DF[j] the same), then the limit's reservations.
--   GROUPS[g]: group g's record (see group).
local R_HDR, R_G, R_NG = {}, {}, {}
local E_REC, E_LW, E_LK, E_HI, E_HF, E_DF = {}, {}, {}, {}, {}, {}
local GROUPS, LOG_WRITES = {}, {}
-- E_AG[j]: a reserving entry's new reservations' record (see Reservations);
-- E_RS[j], E_ST[j]: its reply's reserved units and the reservation settled.
-- R_NX[r]: whether request r has reserving or settling entries.
local E_AG, E_RS, E_ST, R_NX = {}, {}, {}, {}

-- group returns group g's record, cleared of its bucket: key, the bucket;
-- first..last, its entries; holds, whether it has a concurrency entry;
-- own, whether it is one log whose key is its own bucket (no hash). Then
-- evaluate (or refund_group) sets what the bucket read: foreign, the key
-- holds no hash; stored_exp, its stored expiry (ms, 0 when none); and
-- what to write, should the request be allowed: log, a log to write;
-- writes[1..nwrites], the bucket's fields and values to set; writes_exp,
-- the latest expiry (µs) of the states written (0: nothing to write);
-- those of entries that charge always, written whatever the decision:
-- always_writes[1..always_nwrites] and always_exp (a concurrency limit's
-- duplicates too, gathered in dups); and deletes[1..ndeletes], the hold
-- fields to delete. box is its penalty box's state, as penalty_read reads
-- it. The record and its
-- lists are kept from call to call: the hot path creates no tables.
local function group(g, key, first, own)
  local grp = GROUPS[g]
  if not grp then
    grp = {writes = {}, always_writes = {}, deletes = {}, dups = {}, box = {}}
    GROUPS[g] = grp
  end
  grp.key, grp.first, grp.last, grp.own, grp.holds = key, first, first, own, false
  return grp
end

-- ARGS: the arguments of one HMGET or HSET; OUT: the reply.
local ARGS = {}
local OUT = {}

-- Numbers go to redis.call formatted as integers by format('%d'): exact
-- whatever the server's own conversion (Lua's %.14g loses digits above
-- 1e14), and cheaper than Redis' %.17g conversion of a Lua number.

-- toint parses an integer in [lo, hi]; nil otherwise.
local function toint(s, lo, hi)
  local n = tonum(s)
  if n == nil or n ~= floor(n) or n < lo or n > hi then
    return nil
  end
  return n
end

-- limit_entry is the record of a limit's entry, shared by every call that
-- sends the same argument (see entry): the algorithm's id, its parameters
-- (capacity, rate, interval in µs), the cost, whether it is shadow or
-- charges always (flags), and its field in the bucket; plain, whether it
-- is one field's state and nothing else (parse has nothing to check but
-- its field: not a log, a calendar quota nor a concurrency limit). A
-- calendar's adds its window starts w0..w3, a penalty box's has a shape of
-- its own (see penalty_entry).
local function limit_entry(alg, cap, rate, iv, cost, flags, field)
  return {alg = alg, cap = cap, rate = rate, iv = iv, cost = cost, shadow = flags == '1' or flags == '3', field = field,
    always = flags == '2' or flags == '3', plain = alg ~= SLIDING_LOG and alg ~= CALENDAR and alg ~= CONCURRENCY, res = false, settle = false,
    held = alg == CONCURRENCY}
end

-- A verdict occupies OUT[o+1..o+4]: retry-after (0: allowed), remaining,
-- reset, reset after consuming. (What remains after consuming is remaining
-- minus the cost for every algorithm: the caller works it out.)
local function allow(o, remaining, reset, reset_after)
  OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = 0, remaining, reset, reset_after
  return true
end

local function deny(o, remaining, reset, retry)
  OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = retry, remaining, reset, reset
  return false
end

-- over is a count n charged cost all the same (an entry that charges
-- always): up to twice the limit, never down.
local function over(n, cost, limit)
  local c = n + cost
  if c > 2 * limit then
    c = 2 * limit
  end
  if c < n then
    c = n
  end
  return c
end

-- Each algorithm takes one record, its arguments (CHECK_ARGS: evaluate and
-- refund_group fill it for each entry in turn, so the hot path creates no
-- tables): e, the entry's record (its parameters e.cap, e.rate, e.iv in
-- µs, its cost and whether it charges always: see limit_entry; a refund's
-- figures pass zero_cost's twin); v, its stored field (a string, or
-- false); now (µs); o, where its verdict goes in OUT; and for the algorithms
-- that read more of the bucket, j (the entry's index), grp (its group) and
-- r (the bucket's read, see read_bucket). Each hash algorithm fills the
-- verdict at o and returns whether it allows; when it allows a cost, also
-- the field's new value and when that state is untouched again (µs). A
-- field that is not
-- this algorithm's state (its size and first byte), or holds a value out
-- of range, is untouched. Stored values are checked inline, not by a
-- helper: a Lua call costs more than the comparisons (as floor(n) == n
-- would; n % 1 == 0 is the same test).

local CHECK_ARGS = {}

local function token_bucket(a)
  local e = a.e
  local v, cap, rate, iv, now, cost, o, always = a.v, e.cap, e.rate, e.iv, a.now, e.cost, a.o, e.always
  local tokens, last = cap, now
  local id, t, l
  if v and #v == 17 then
    id, t, l = sunpack('<Bdd', v)
  end
  if id == TOKEN_BUCKET and t >= -MAXU and t <= MAXU and t % 1 == 0 and l >= 0 and l <= MAXU and l % 1 == 0 then
    tokens, last = t, l
    if tokens > cap then
      tokens = cap
    elseif tokens < -cap then
      tokens = -cap
    end
    if tokens < cap and now > last then
      local steps = floor((now - last) / iv)
      if steps > 0 then
        if steps >= ceil((cap - tokens) / rate) then
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
  local reset, remaining = 0, tokens
  if tokens < cap then
    reset = last + ceil((cap - tokens) / rate) * iv - now
  end
  if remaining < 0 then
    remaining = 0
  end
  if cost > cap then
    deny(o, remaining, reset, NEVER)
  elseif cost <= tokens then
    local left = tokens - cost
    local reset_after = 0
    if left < cap then
      reset_after = last + ceil((cap - left) / rate) * iv - now
    end
    OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = 0, tokens, reset, reset_after
    if cost > 0 then
      return true, spack('<Bdd', TOKEN_BUCKET, left, last), now + reset_after
    end
    return true
  else
    deny(o, remaining, reset, last + ceil((cost - tokens) / rate) * iv - now)
  end
  if always and cost > 0 then -- charged all the same: down to -cap tokens
    local left = tokens - cost
    if left < -cap then
      left = -cap
    end
    if cost <= cap then -- the retry counts the charge
      OUT[o + 1] = last + ceil((cost - left) / rate) * iv - now
    end
    OUT[o + 4] = last + ceil((cap - left) / rate) * iv - now
    return false, spack('<Bdd', TOKEN_BUCKET, left, last), now + OUT[o + 4]
  end
  return false
end

local function fixed_window(a)
  local e = a.e
  local v, limit, window, now, cost, o, always = a.v, e.cap, e.iv, a.now, e.cost, a.o, e.always
  local count, start = 0, now
  local id, n, s
  if v and #v == 17 then
    id, n, s = sunpack('<Bdd', v)
  end
  if id == FIXED_WINDOW and n > 0 and n <= MAXU and n % 1 == 0 and s >= 0 and s <= MAXU and s % 1 == 0 and now < s + window then
    count, start = n, s
  end
  local remaining, reset = limit - count, 0
  if remaining < 0 then
    remaining = 0
  end
  if count > 0 then
    reset = start + window - now
  end
  if cost > limit then
    deny(o, remaining, reset, NEVER)
  elseif count + cost <= limit then
    local reset_after = 0
    if count + cost > 0 then
      reset_after = start + window - now
    end
    OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = 0, remaining, reset, reset_after
    if cost > 0 then
      return true, spack('<Bdd', FIXED_WINDOW, count + cost, start), start + window
    end
    return true
  else
    deny(o, remaining, reset, start + window - now)
  end
  if always and cost > 0 then -- charged all the same: up to twice the limit
    OUT[o + 4] = start + window - now
    return false, spack('<Bdd', FIXED_WINDOW, over(count, cost, limit), start), start + window
  end
  return false
end

-- clock_window decides a window on the clock, the same for every key
-- (FixedWindowClock 7, Calendar 8), for the entry of arguments a: one that
-- ends at finish and holds count units; the state written is the entry's
-- algorithm's (count, mark), mark being what it keeps to find the window
-- again (7 its start, 8 its end).
local function clock_window(a, mark, finish, count)
  local e = a.e
  local alg, limit, now, cost, o, always = e.alg, e.cap, a.now, e.cost, a.o, e.always
  local remaining, reset = limit - count, 0
  if remaining < 0 then
    remaining = 0
  end
  if count > 0 then
    reset = finish - now
  end
  if cost > limit then
    deny(o, remaining, reset, NEVER)
  elseif count + cost <= limit then
    local reset_after = reset
    if count + cost > 0 then
      reset_after = finish - now
    end
    OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = 0, remaining, reset, reset_after
    if cost > 0 then
      return true, spack('<Bdd', alg, count + cost, mark), finish
    end
    return true
  else
    deny(o, remaining, reset, finish - now)
  end
  if always and cost > 0 then -- charged all the same: up to twice the limit
    OUT[o + 4] = finish - now
    return false, spack('<Bdd', alg, over(count, cost, limit), mark), finish
  end
  return false
end

-- Clock-aligned fixed window: windows are the multiples of the window
-- since the epoch, k = floor(now/window); state: the count and the start
-- of the window counted. A stored window later than now's (the clock
-- stepped back) stays the window; the stored start is read through its
-- window index, so a state written under another window length still ends
-- on a boundary of this one.
local function fixed_window_clock(a)
  local v, window, now = a.v, a.e.iv, a.now
  local k, count = floor(now / window), 0
  local id, n, s
  if v and #v == 17 then
    id, n, s = sunpack('<Bdd', v)
  end
  if id == FIXED_WINDOW_CLOCK and n > 0 and n <= MAXU and n % 1 == 0 and s >= 0 and s <= MAXU and s % 1 == 0 then
    local sk = floor(s / window)
    if sk >= k then
      k, count = sk, n
    end
  end
  local start = k * window
  return clock_window(a, start, start + window, count)
end

-- Calendar ----------------------------------------------------------------
-- A calendar quota (model/calendar.go): the windows are the periods of a
-- calendar in an IANA zone. The zone's rules are applied by the caller
-- (ratelimit.CalendarWindows, in Go), who passes the starts w0..w3 of four
-- consecutive windows around its own clock (its entry's w0..w3); now's window is
-- the one among them that holds this call's time (calendar_clock checks
-- that one does before anything is evaluated). State: the count and the
-- end of the window it counts, which counts until that end.

-- calendar_end is the end of the window that holds now, for entry e.
local function calendar_end(e, now)
  if now < e.w1 then
    return e.w1
  elseif now < e.w2 then
    return e.w2
  end
  return e.w3
end

local function calendar(a)
  local v, now = a.v, a.now
  local finish, count = calendar_end(a.e, now), 0
  local id, n, s
  if v and #v == 17 then
    id, n, s = sunpack('<Bdd', v)
  end
  if id == CALENDAR and n > 0 and n <= MAXU and n % 1 == 0 and s >= 0 and s <= MAXU and s % 1 == 0 and now < s then
    count, finish = n, s
  end
  return clock_window(a, finish, finish, count)
end

-- calendar_clock checks each request's time against the windows its
-- calendar entries were given: a time outside them (a server clock more
-- than a period away from the caller's) is an error, not a guessed window.
-- It returns an error message, or nil.
local function calendar_clock(nreq, server_now)
  local j0 = 0
  for r = 1, nreq do
    local h = R_HDR[r]
    local now = h.time or server_now
    for j = j0 + 1, j0 + h.n do
      local e = E_REC[j]
      if e.alg == CALENDAR and (now < e.w0 or now >= e.w3) then
        return 'request ' .. r .. ' entry ' .. (j - j0) .. ': time ' .. format('%d', now) ..
          ' is outside the calendar windows given (' .. format('%d', e.w0) .. '..' .. format('%d', e.w3) .. ')'
      end
    end
    j0 = j0 + h.n
  end
end

-- calendar_entry parses "8:capacity:w0:w1:w2:w3:cost:flags:field" into
-- entry()'s record, with the window starts w0..w3; nil if malformed.
local function calendar_entry(s)
  local cap, w0, w1, w2, w3, cost, flags, field = match(s, '^8:(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):([0-3]):([^:]*)$')
  cap, cost = toint(cap, 1, MAXCOUNT), toint(cost, 0, MAXCOUNT)
  w0, w1, w2, w3 = toint(w0, 0, MAXU), toint(w1, 0, MAXU), toint(w2, 0, MAXU), toint(w3, 0, MAXU)
  if cap == nil or cost == nil or w0 == nil or w1 == nil or w2 == nil or w3 == nil or not (w0 < w1 and w1 < w2 and w2 < w3) then
    return nil
  end
  local e = limit_entry(CALENDAR, cap, 0, 0, cost, flags, field)
  e.w0, e.w1, e.w2, e.w3 = w0, w1, w2, w3
  return e
end

-- Sliding window log: a sorted set scored by admission time; the member is
-- "<cumulative cost mod 2^50>:<cost>", so the cost in the window is the
-- difference of two cumulative counters and the retry search is a binary
-- search by rank. Requests admitted in the same µs share one member
-- (scores stay unique, so rank order is time order).
local function parse_member(m)
  if typeof(m) ~= 'string' then
    return nil
  end
  local c, n = match(m, '^(%d+):(%d+)$')
  c, n = toint(c, 0, LOGMOD - 1), toint(n, 1, MAXU)
  if c == nil or n == nil then
    return nil
  end
  return c, n
end

-- log_entry records entry j's pending write to its log: cost logged at
-- now, or at the time of the log's last entry if that is later (times never
-- decrease), sharing that entry's member when it is of the same µs. The
-- record LOG_WRITES[j] holds how (replace: the key is deleted first), the
-- log's expiry (µs), the score below which members go (cut), the new
-- member's time, cumulative cost and cost, and the member it replaces
-- (drop).
local function log_entry(j, foreign, live, cut, now, cost, window, last_at, last_cum, last_cost, last_member)
  local at = now
  if last_at > at then
    at = last_at
  end
  local cum, n, drop = cost, cost, false
  if last_cum then
    cum = (last_cum + cost) % LOGMOD
  end
  if live and at == last_at then
    drop, n = last_member, last_cost + cost
  end
  local lw = LOG_WRITES[j]
  if not lw then
    lw = {}
    LOG_WRITES[j] = lw
  end
  lw.replace, lw.expires, lw.cut, lw.at, lw.cum, lw.cost, lw.drop = foreign, at + window, cut, at, cum, n, drop
  return at + window - now
end

-- log_charge is how much of cost an entry that charges always logs when
-- it does not fit: what keeps the window within twice the limit (0 for any
-- other entry).
local function log_charge(always, cost, limit, total)
  if not always then
    return 0
  end
  local room = 2 * limit - total
  if cost < room then
    return cost
  end
  return room
end

-- sliding_log: the log at the entry's key E_LK[j] is the limit's state
-- when its field in the bucket says so, or the key is its own bucket;
-- otherwise it is untouched without being read, and replaced on write. It
-- returns whether the entry allows, and whether it has a write pending
-- (see log_entry).
local function sliding_log(a)
  local e, j = a.e, a.j
  local key, current, limit, window = E_LK[j], a.grp.own or a.v == LOGMARK, e.cap, e.iv
  local now, cost, o, always = a.now, e.cost, a.o, e.always
  local cut = now - window
  local foreign, live = not current, false
  local total, base, last_at, last_cum, last_cost, last_member = 0, 0, 0, nil, 0, nil
  if current then
    local first = pcall_('ZRANGEBYSCORE', key, format('(%d', cut), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if typeof(first) ~= 'table' or first.err then
      foreign = true
    else
      local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
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
  end
  local reset = 0
  if live then
    reset = last_at + window - now
  end
  local remaining = limit - total
  if remaining < 0 then
    remaining = 0
  end
  local charge = 0
  if cost > limit then
    deny(o, remaining, reset, NEVER)
    charge = log_charge(always, cost, limit, total)
  elseif cost == 0 and total <= limit then
    return allow(o, remaining, reset, reset), false -- logs nothing
  elseif total + cost <= limit then
    return allow(o, remaining, reset, log_entry(j, foreign, live, cut, now, cost, window, last_at, last_cum, last_cost, last_member)), true
  else
    -- The oldest entries must leave until total-left+cost <= limit: find
    -- the first whose cumulative cost since base reaches need, counting
    -- what is charged all the same (a new last entry). (Only a live log
    -- denies a cost within the limit, so the key holds a readable log.)
    charge = log_charge(always, cost, limit, total)
    local need = total + charge + cost - limit
    local at = nil
    if need > total then
      at = now -- the charged entry itself must leave
      if last_at > at then
        at = last_at
      end
    else
      local lo = call('ZCOUNT', key, '-inf', format('%d', cut))
      local hi = call('ZCARD', key) - 1
      local ok = true
      while lo < hi do
        local mid = floor((lo + hi) / 2)
        local c = parse_member(call('ZRANGE', key, mid, mid)[1])
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
      if ok then
        at = toint(call('ZRANGE', key, lo, lo, 'WITHSCORES')[2], 0, MAXU)
      end
      if at == nil then
        at = last_at -- unreadable entry: fall back to when the log empties (never early)
      end
    end
    deny(o, remaining, reset, at + window - now)
  end
  if charge > 0 then
    OUT[o + 4] = log_entry(j, foreign, live, cut, now, charge, window, last_at, last_cum, last_cost, last_member)
    return false, true
  end
  return false, false
end

-- write_log writes entry j's pending log entry to key, and its expiry (ms).
local function write_log(j, key, ms)
  local lw = LOG_WRITES[j]
  if lw.replace then
    call('DEL', key)
  else
    call('ZREMRANGEBYSCORE', key, '-inf', format('%d', lw.cut))
    if lw.drop then
      call('ZREM', key, lw.drop)
    end
  end
  call('ZADD', key, format('%d', lw.at), format('%d:%d', lw.cum, lw.cost))
  call('PEXPIREAT', key, format('%d', ms))
end

-- Sliding window counter: floor(prev*(window-elapsed)/window) in doubles.
local function weighted(n, window, elapsed)
  if n == 0 then
    return 0
  end
  return floor((n * (window - elapsed)) / window)
end

-- first_at_most: smallest e in [lo, hi] with weighted(n, window, e) <= room,
-- given that it holds at hi (weighted is non-increasing in e).
local function first_at_most(lo, hi, room, n, window)
  while lo < hi do
    local mid = lo + floor((hi - lo) / 2)
    if weighted(n, window, mid) <= room then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

-- swc_retry_at is the earliest time a denied cost fits: later in the
-- current window (as prev's weight decays), in the next window (where
-- curr becomes prev), or at the start of the one after.
local function swc_retry_at(limit, window, start, elapsed, curr, prev, cost)
  local room = limit - curr - cost
  if room >= 0 and weighted(prev, window, window - 1) <= room then
    return start + first_at_most(elapsed + 1, window - 1, room, prev, window)
  elseif weighted(curr, window, window - 1) <= limit - cost then
    return start + window + first_at_most(0, window - 1, limit - cost, curr, window)
  end
  return start + 2 * window
end

-- sliding_counter_over denies, and for an entry that charges always
-- charges the current window all the same (up to twice the limit), the
-- retry counting that; the state is untouched at the end of the next
-- window.
local function sliding_counter_over(a, remaining, reset, retry, k, curr, prev, start, elapsed)
  local e = a.e
  local limit, window, now, cost, o, always = e.cap, e.iv, a.now, e.cost, a.o, e.always
  deny(o, remaining, reset, retry)
  if always and cost > 0 then
    local c = over(curr, cost, limit)
    if cost <= limit then
      OUT[o + 1] = swc_retry_at(limit, window, start, elapsed, c, prev, cost) - now
    end
    OUT[o + 4] = start + 2 * window - now
    return false, spack('<Bddd', SLIDING_COUNTER, k, c, prev), start + 2 * window
  end
  return false
end

local function sliding_counter(a)
  local e = a.e
  local v, limit, window, now, cost, o = a.v, e.cap, e.iv, a.now, e.cost, a.o
  local k = floor(now / window)
  local curr, prev = 0, 0
  local id, sk, sc, sp
  if v and #v == 25 then
    id, sk, sc, sp = sunpack('<Bddd', v)
  end
  if id == SLIDING_COUNTER and sk >= 0 and sk <= MAXU and sk % 1 == 0 and sc >= 0 and sc <= MAXU and sc % 1 == 0 and
    sp >= 0 and sp <= MAXU and sp % 1 == 0 then
    if k == sk then
      curr, prev = sc, sp
    elseif k == sk + 1 then
      prev = sc
    elseif k < sk then
      k, curr, prev = sk, sc, sp
    end
  end
  local start = k * window
  local elapsed = now - start
  if elapsed < 0 then
    elapsed = 0
  end
  local est = weighted(prev, window, elapsed) + curr
  local remaining, reset = limit - est, 0
  if remaining < 0 then
    remaining = 0
  end
  if curr > 0 then
    reset = start + 2 * window - now
  elseif prev > 0 then
    reset = start + window - now
  end
  if cost > limit then
    return sliding_counter_over(a, remaining, reset, NEVER, k, curr, prev, start, elapsed)
  elseif est + cost <= limit then
    local reset_after = 0
    if curr + cost > 0 then
      reset_after = start + 2 * window - now
    elseif prev > 0 then
      reset_after = start + window - now
    end
    OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = 0, remaining, reset, reset_after
    if cost > 0 then
      return true, spack('<Bddd', SLIDING_COUNTER, k, curr + cost, prev), start + 2 * window
    end
    return true
  end
  return sliding_counter_over(a, remaining, reset, swc_retry_at(limit, window, start, elapsed, curr, prev, cost) - now,
    k, curr, prev, start, elapsed)
end

-- Leaky bucket (policing) and GCRA: one meter, told apart by the state's
-- algorithm, the entry's alg. The level is in scaled units: a unit of cost is
-- `iv` of them and `rate` drain per µs (rate and iv are already divided by
-- their gcd). GCRA's TAT is time + level/rate.
local function meter(a)
  local e = a.e
  local alg, v, cap, rate, iv, now, cost, o, always = e.alg, a.v, e.cap, e.rate, e.iv, a.now, e.cost, a.o, e.always
  local level, at = 0, now
  local id, sv, st
  if v and #v == 17 then
    id, sv, st = sunpack('<Bdd', v)
  end
  if id == alg and sv >= 0 and sv <= MAXU and sv % 1 == 0 and st >= 0 and st <= MAXU and st % 1 == 0 then
    level, at = sv, st
    if now > at then
      local elapsed = now - at
      if elapsed >= ceil(level / rate) then
        level = 0
      else
        level = level - elapsed * rate
      end
      at = now
    end
  end
  local full = cap * iv
  local room, reset = full - level, 0
  if room < 0 then
    room = 0
  end
  if level ~= 0 then
    reset = at + ceil(level / rate) - now
  end
  local remaining = floor(room / iv)
  if cost > cap then
    deny(o, remaining, reset, NEVER)
  elseif level + cost * iv <= full then
    local after = level + cost * iv
    local reset_after = 0
    if after ~= 0 then
      reset_after = at + ceil(after / rate) - now
    end
    OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = 0, remaining, reset, reset_after
    if cost > 0 then
      return true, spack('<Bdd', alg, after, at), now + reset_after
    end
    return true
  else
    deny(o, remaining, reset, at + ceil((level - (cap - cost) * iv) / rate) - now)
  end
  if always and cost > 0 then
    -- Charged all the same: up to twice the bucket, never down. At most
    -- cap is added, so the sum is exact up to that bound (2*full < 2^53
    -- for a limit charged always) and rounds above it only where the
    -- bound applies anyway.
    local add = cost
    if add > cap then
      add = cap
    end
    local after = level + add * iv
    if after > 2 * full then
      after = 2 * full
    end
    if after < level then
      after = level
    end
    if cost <= cap then -- the retry counts the charge
      OUT[o + 1] = at + ceil((after - (cap - cost) * iv) / rate) - now
    end
    OUT[o + 4] = at + ceil(after / rate) - now
    return false, spack('<Bdd', alg, after, at), now + OUT[o + 4]
  end
  return false
end

-- Penalty box (the argument of algorithm id 10, leading its bucket's
-- entries): a bucket whose own limits deny `denials` requests within
-- `within` is banned for `ban`; banned again less than `maxban` after its
-- last ban ended, for twice the last ban, at most `maxban`. While banned
-- (and not shadow) its entries are denied without being evaluated, and
-- nothing of the bucket is written. The model's penalty.go is the
-- reference. State, the field ':ban' ('<Bdddd'): 10, the denials counted,
-- the start of their count, the last ban's end and its length.

-- penalty_read reads the stored ':ban' v into box, a group's record of
-- its penalty box (the model's PenaltyState): count denials counted since
-- start, the last ban's end ban_end and its length ban_len (µs); all 0,
-- untouched, when v is no penalty box's state.
local function penalty_read(box, v)
  local id, count, start, ban_end, ban_len
  if v and #v == 33 then
    id, count, start, ban_end, ban_len = sunpack('<Bdddd', v)
  end
  if id == PENALTY and count >= 0 and count <= MAXCOUNT and count % 1 == 0 and start >= 0 and start <= MAXU and
    start % 1 == 0 and ban_end >= 0 and ban_end <= MAXU and ban_end % 1 == 0 and ban_len >= 0 and ban_len <= MAXU and
    ban_len % 1 == 0 then
    box.count, box.start, box.ban_end, box.ban_len = count, start, ban_end, ban_len
  else
    box.count, box.start, box.ban_end, box.ban_len = 0, 0, 0, 0
  end
end

-- penalty_slot fills the penalty's reply values at o, for entry e and its
-- state box: the ban left at the call's start, the ban the call issued,
-- the denials counted and the time until the state is untouched (all µs
-- but the count), which it returns.
local function penalty_slot(o, e, box, left, issued, now)
  local exp = 0
  if box.count > 0 then
    exp = box.start + e.within
  end
  if box.ban_len > 0 and box.ban_end + e.maxban > exp then
    exp = box.ban_end + e.maxban
  end
  if exp > now then
    exp = exp - now
  else
    exp = 0
  end
  OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = left, issued, box.count, exp
  return exp
end

-- penalty_count counts a denial at now in box, the state of entry e's
-- box, as the model's Penalize does, and returns the ban it issues (µs, 0:
-- none).
local function penalty_count(e, box, now)
  if box.count > 0 and now < box.start + e.within then
    box.count = box.count + 1
  else
    box.count, box.start = 1, now
  end
  if box.count < e.denials then
    return 0
  end
  local issued = e.ban
  if box.ban_len > 0 and now < box.ban_end + e.maxban then
    issued = 2 * box.ban_len
    if issued > e.maxban then
      issued = e.maxban
    end
  end
  box.count, box.start, box.ban_end, box.ban_len = 0, 0, now + issued, issued
  return issued
end

-- penalty_hold puts the verdicts of group grp's limits (after its box, at
-- base + 4*j) under a ban of hold µs: left, the ban in force at the
-- call's start (0: the ban was just issued, and holds only its denied
-- entries).
local function penalty_hold(grp, base, left, hold)
  for j = grp.first + 1, grp.last do
    local o = base + 4 * j
    local retry = OUT[o + 1]
    if (left > 0 or retry ~= 0) and retry ~= NEVER and retry < hold then
      OUT[o + 1] = hold
    end
    if left > 0 then
      if OUT[o + 3] < left then
        OUT[o + 3] = left
      end
      OUT[o + 2], OUT[o + 4] = 0, OUT[o + 3]
    elseif retry ~= 0 and retry ~= NEVER then
      -- a denied entry of the ban just issued: not untouched before its end
      if OUT[o + 3] < hold then
        OUT[o + 3] = hold
      end
      if OUT[o + 4] < hold then
        OUT[o + 4] = hold
      end
    end
  end
end

-- penalty_box applies group grp's penalty box (v: the stored ':ban') once
-- its limits are evaluated, as the model's ApplyBans and CountDenials do,
-- and fills its reply values; denied says whether the group's own limits
-- denied. A ban in force (not shadow) denies every entry, retry at the
-- ban's end at the earliest, nothing remaining, and leaves the group
-- nothing to write: penalty_box then returns true. Otherwise a denial is
-- counted, and a ban it issues (not shadow) puts the denied entries'
-- retries and resets at its end at the earliest; the new state is written
-- whatever the request's decision: it goes to both of the group's pending
-- writes (writes and always_writes).
local function penalty_box(grp, v, denied, now, base)
  local e, box = E_REC[grp.first], grp.box
  penalty_read(box, v)
  local left, issued, hold = 0, 0, 0
  if now < box.ban_end then
    left, hold = box.ban_end - now, box.ban_end - now
  elseif denied then
    issued = penalty_count(e, box, now)
    hold = issued
  end
  local exp = penalty_slot(base + 4 * grp.first, e, box, left, issued, now)
  if e.shadow then
    hold = 0 -- a shadow box denies nothing
  end
  if hold > 0 then
    penalty_hold(grp, base, left, hold)
  end
  if left > 0 then
    if hold > 0 then
      grp.nwrites, grp.writes_exp, grp.log, grp.always_nwrites, grp.always_exp = 0, 0, false, 0, 0
      return true
    end
  elseif denied then
    local val, m, ma = spack('<Bdddd', PENALTY, box.count, box.start, box.ban_end, box.ban_len), grp.nwrites, grp.always_nwrites
    grp.writes[m + 1], grp.writes[m + 2], grp.always_writes[ma + 1], grp.always_writes[ma + 2] = BAN, val, BAN, val
    grp.nwrites, grp.always_nwrites = m + 2, ma + 2
    exp = now + exp
    if exp > grp.writes_exp then
      grp.writes_exp = exp
    end
    if exp > grp.always_exp then
      grp.always_exp = exp
    end
  end
  return false
end

-- penalty_entry parses "10:denials:within:ban:maxban:flags" (flags 0..1:
-- 1 shadow) into an entry record of its own shape: {alg = PENALTY,
-- denials, within, ban, maxban, shadow, field = ':ban', always = false};
-- nil if malformed.
local function penalty_entry(s)
  local d, wi, b, mb, flags = match(s, '^10:(%d+):(%d+):(%d+):(%d+):([01])$')
  d, wi, b, mb = toint(d, 1, MAXCOUNT), toint(wi, 1, MAXPENALTY), toint(b, 1, MAXPENALTY), toint(mb, 1, MAXPENALTY)
  if d == nil or wi == nil or b == nil or mb == nil or b > mb then
    return nil
  end
  return {alg = PENALTY, denials = d, within = wi, ban = b, maxban = mb, shadow = flags == '1', field = BAN, always = false, res = false, settle = false, held = false}
end

-- Concurrency (algorithm 9): units held in flight, each hold named by its
-- holder. The limit's field holds '<Bdddd' 9, held, since, first, last:
-- the units held, when the state began (its first admission), a time at
-- or before the earliest admission still held, and the latest admission.
-- Each hold is a field of the same bucket, ':h<field>:<holder>', holding
-- '<dd' cost, admission time: no key of its own, so an admission reads
-- and writes nothing a token bucket does not (its hold's field rides on
-- the bucket's HMGET and HSET). A hold ends at its admission plus the
-- interval (the lease timeout); ended holds are swept (HGETALL) only when
-- first says one may have ended, and a denial reads them all to find its
-- retry. A hold admitted before since belongs to an earlier state of the
-- field (the limit was edited away and back) and counts for nothing.
-- The admissions of a holder denied while it holds (its duplicates) are
-- counted in ':d<field>:<holder>', '<dd' count, the hold's admission time
-- (a count of another hold's counts for nothing), whatever the request's
-- decision: a release of the holder then counts one off and frees
-- nothing, since it is a duplicate's (Envoy releases denied requests too);
-- only the last frees the hold. The count goes with its hold (released,
-- swept, reset), and a library that predates it leaves it be.
local C_LIVE = {} -- scratch of conc_scan: per live hold {at, cost, mine}
local C_NLIVE = 0

local function by_at(x, y)
  return x.at < y.at
end

-- conc_state reads a concurrency field: held, since, first, last, and
-- whether it is this algorithm's state (else untouched: a state that
-- would begin now).
local function conc_state(v, now)
  local a, held, since, first, last
  if v and #v == 33 then
    a, held, since, first, last = sunpack('<Bdddd', v)
  end
  if a == CONCURRENCY and held >= 0 and held <= MAXU and held % 1 == 0 and since >= 0 and since <= MAXU and since % 1 == 0 and
    first >= 0 and first <= MAXU and first % 1 == 0 and last >= 0 and last <= MAXU and last % 1 == 0 then
    return held, since, first, last, true
  end
  return 0, now, 0, 0, false
end

-- conc_hold reads a hold's field: its cost and admission time when it is
-- live (of the state begun at since, not ended at now), else nil.
local function conc_hold(hv, since, iv, now)
  local c, at
  if hv and #hv == 16 then
    c, at = sunpack('<dd', hv)
  end
  if c and c >= 1 and c <= MAXCOUNT and c % 1 == 0 and at >= since and at <= MAXU and at % 1 == 0 and at + iv > now then
    return c, at
  end
  return nil
end

-- conc_pending reads a hold's count of duplicates (pv, its field): the
-- count when it is the hold's admitted at at, else 0.
local function conc_pending(pv, at)
  local c, t
  if pv and #pv == 16 then
    c, t = sunpack('<dd', pv)
  end
  if c and t == at and c >= 0 and c <= MAXCOUNT and c % 1 == 0 then
    return c
  end
  return 0
end

-- conc_scan reads every hold of field in group grp's bucket: the live ones
-- go to C_LIVE (mine: the hold of holdfield), the others to the group's
-- deletions, with their counts of duplicates. It returns what the live ones hold and the earliest of their
-- admissions (nil when none).
local function conc_scan(grp, field, holdfield, since, iv, now)
  local all = call('HGETALL', grp.key)
  local prefix = ':h' .. field .. ':'
  local np = #prefix
  local held, first = 0, nil
  C_NLIVE = 0
  for i = 1, #all, 2 do
    local f = all[i]
    if string.sub(f, 1, np) == prefix then
      local c, at = conc_hold(all[i + 1], since, iv, now)
      if c then
        C_NLIVE = C_NLIVE + 1
        local rec = C_LIVE[C_NLIVE]
        if not rec then
          rec = {}
          C_LIVE[C_NLIVE] = rec
        end
        rec.at, rec.cost, rec.mine = at, c, f == holdfield
        held = held + c
        if first == nil or at < first then
          first = at
        end
      else
        grp.ndeletes = grp.ndeletes + 2
        grp.deletes[grp.ndeletes - 1], grp.deletes[grp.ndeletes] = f, ':d' .. string.sub(f, 3)
      end
    end
  end
  return held, first
end

-- conc_retry_at: the earliest time cost fits if nothing else arrives,
-- from the live holds in C_LIVE: when enough of them have ended, the
-- holder's own among them (dup: it holds); at the latest, when the last
-- admission's hold ends.
local function conc_retry_at(held, cost, cap, iv, dup, last)
  for i = C_NLIVE + 1, #C_LIVE do
    C_LIVE[i] = nil -- so the sort sees this scan's holds alone
  end
  table.sort(C_LIVE, by_at)
  local i, n = 1, C_NLIVE
  while i <= n do
    local ends = C_LIVE[i].at + iv
    while i <= n and C_LIVE[i].at + iv <= ends do
      held = held - C_LIVE[i].cost
      if C_LIVE[i].mine then
        dup = false
      end
      i = i + 1
    end
    if not dup and held + cost <= cap then
      return ends
    end
  end
  return last + iv
end

-- conc_figures: what a concurrency limit holding held may still admit,
-- and how long until it is untouched (the latest admission's lease end
-- while anything is held).
local function conc_figures(cap, held, last, iv, now)
  local remaining, reset = cap - held, 0
  if remaining < 0 then
    remaining = 0
  end
  if held > 0 then
    reset = last + iv - now
  end
  return remaining, reset
end

-- concurrency evaluates an entry (record e, hold field hf) of group grp: v
-- is its field, hv its holder's hold, pv the hold's count of duplicates. Like the other algorithms it fills the verdict at
-- o and returns whether it allows; when it holds a cost, also the field's
-- new value, the state's end (µs) and the hold's value; when it denies a
-- duplicate, three nils, then the hold's new count of duplicates (written
-- whatever the decision) and the hold's end (µs).
local function concurrency(grp, e, hf, v, hv, pv, now, o)
  local cap, iv, cost = e.cap, e.iv, e.cost
  local held, since, first, last, current = conc_state(v, now)
  local scanned = false
  if current and held > 0 and first + iv <= now then -- a hold may have ended: sweep
    local f
    held, f = conc_scan(grp, e.field, hf, since, iv, now)
    first, scanned = f or 0, true
  end
  local remaining, reset = conc_figures(cap, held, last, iv, now)
  local dupc, dupat
  if cost > 0 and current then
    dupc, dupat = conc_hold(hv, since, iv, now)
  end
  local dup = dupc ~= nil
  if dup then -- denied below, and remembered
    local n = conc_pending(pv, dupat) + 1
    if n > MAXCOUNT then
      n = MAXCOUNT
    end
    pv = spack('<dd', n, dupat)
  end
  if cost > cap then
    if dup then
      return deny(o, remaining, reset, NEVER), nil, nil, nil, pv, dupat + iv
    end
    return deny(o, remaining, reset, NEVER)
  elseif not dup and held + cost <= cap then
    if cost == 0 then
      return allow(o, remaining, reset, reset)
    end
    local at = now
    if last > at then
      at = last
    end
    if held == 0 then
      first = at
    end
    allow(o, remaining, reset, at + iv - now)
    return true, spack('<Bdddd', CONCURRENCY, held + cost, since, first, at), at + iv, spack('<dd', cost, at)
  end
  if not scanned then
    held = conc_scan(grp, e.field, hf, since, iv, now)
  end
  deny(o, remaining, reset, conc_retry_at(held, cost, cap, iv, dup, last) - now)
  if dup then
    return false, nil, nil, nil, pv, dupat + iv
  end
  return false
end

-- conc_release frees the hold hf of entry e in group grp (v its field, hv
-- the hold, pv its count of duplicates, df that count's field): it fills
-- the figures after at o, retry 0 when it freed something, else never,
-- and returns the field's new value (nil when nothing was freed); the
-- hold's fields go to the group's deletions. A hold with duplicates
-- pending frees nothing: the release counts one off, and returns nil and
-- the new count.
local function conc_release(grp, e, hf, df, v, hv, pv, now, o)
  local iv = e.iv
  local held, since, first, last, current = conc_state(v, now)
  local c, at = false, nil
  if current then
    c, at = conc_hold(hv, since, iv, now)
  end
  local val, pending = nil, nil
  if c and conc_pending(pv, at) > 0 then -- a duplicate's release: it held nothing
    pending = spack('<dd', conc_pending(pv, at) - 1, at)
    c = false
    if first + iv <= now then
      held = conc_scan(grp, e.field, hf, since, iv, now) -- exact figures, as below
    end
  elseif c then
    if first + iv <= now then -- a hold may have ended: sweep (this one is live)
      local f
      held, f = conc_scan(grp, e.field, hf, since, iv, now)
      first = f
    end
    held = held - c
    grp.ndeletes = grp.ndeletes + 2
    grp.deletes[grp.ndeletes - 1], grp.deletes[grp.ndeletes] = hf, df
    val = spack('<Bdddd', CONCURRENCY, held, since, first, last)
  elseif current and held > 0 and first + iv <= now then
    held = conc_scan(grp, e.field, hf, since, iv, now) -- exact figures (its deletions go with the group's write, if any)
  end
  local remaining, reset = conc_figures(e.cap, held, last, iv, now)
  OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = NEVER, remaining, reset, reset
  if c then
    OUT[o + 1] = 0
  end
  return val, pending
end

-- read_bucket reads group grp's bucket once (HMGET of its entries' fields
-- and ':exp'; a key that is not a hash counts as empty: foreign). It
-- returns the fields (false when none were read), whether the key is
-- foreign, and the bucket's stored expiry (ms, 0 when none).
local function read_bucket(grp)
  local first, last = grp.first, grp.last
  local r, foreign, stored = false, false, 0
  if not grp.own then
    local n = last - first + 1
    if n == 1 and not grp.holds then
      r = pcall_('HMGET', grp.key, E_REC[first].field, EXPIRY)
    elseif n == 2 and not grp.holds then -- a limit and its penalty box, or two limits
      r = pcall_('HMGET', grp.key, E_REC[first].field, E_REC[first + 1].field, EXPIRY)
    elseif n == 3 and not grp.holds then
      r = pcall_('HMGET', grp.key, E_REC[first].field, E_REC[first + 1].field, E_REC[first + 2].field, EXPIRY)
    else
      for x = 1, n do
        ARGS[x] = E_REC[first + x - 1].field
      end
      ARGS[n + 1] = EXPIRY
      local m = n + 1
      if grp.holds then -- each concurrency entry's hold and its duplicates, after the expiry
        for j = first, last do
          local e = E_REC[j]
          if e.alg == CONCURRENCY then
            ARGS[m + 1], ARGS[m + 2], E_HI[j] = E_HF[j], E_DF[j], m + 1
            m = m + 2
          elseif e.res or e.settle then -- its holder's reservation, the limit's reservations
            ARGS[m + 1], ARGS[m + 2], E_HI[j] = E_HF[j], e.agg, m + 1
            m = m + 2
          end
        end
      end
      r = pcall_('HMGET', grp.key, unpack_(ARGS, 1, m))
    end
    if r.err then
      r, foreign = false, true
    else
      local e = r[n + 1]
      if e and #e == 8 then
        e = sunpack('<d', e)
        if e >= 0 and e <= MAXU and e % 1 == 0 then
          stored = e
        end
      end
    end
  end
  return r, foreign, stored
end

-- concurrency_check runs a concurrency entry (see concurrency) with its
-- hold and its duplicates' count as the bucket's read holds them.
local function concurrency_check(a)
  local j, r = a.j, a.r
  local hi = E_HI[j]
  return concurrency(a.grp, a.e, E_HF[j], a.v, r and r[hi], r and r[hi + 1], a.now, a.o)
end

-- log_check runs a sliding window log's entry as the hash algorithms run:
-- a write pending to its log (E_LW[j]) marks the group's log to write, and
-- the limit's field in the bucket, if it does not yet, to hold the log's
-- mark.
local function log_check(a)
  local j = a.j
  local ok, pending = sliding_log(a)
  E_LW[j] = pending
  if not pending then
    return ok
  end
  a.grp.log = true
  if a.v ~= LOGMARK then
    return ok, LOGMARK, LOG_WRITES[j].expires
  end
  return ok, false, LOG_WRITES[j].expires
end

-- penalty_first: a penalty box leads its bucket's entries but is applied
-- after its limits (penalty_box), its reply values too.
local function penalty_first()
  return true
end

-- CHECK is each algorithm's check by its id. Each takes its arguments
-- (CHECK_ARGS) and returns whether the entry allows, then what the entry
-- has to write: the field's new value (false or nil: none), when that
-- state is untouched again (µs; nil: nothing to write), a concurrency
-- entry's hold value, and a duplicate's new count with its end (µs).
local CHECK = {
  [TOKEN_BUCKET] = token_bucket,
  [FIXED_WINDOW] = fixed_window,
  [SLIDING_LOG] = log_check,
  [SLIDING_COUNTER] = sliding_counter,
  [LEAKY_BUCKET] = meter,
  [GCRA] = meter,
  [FIXED_WINDOW_CLOCK] = fixed_window_clock,
  [CALENDAR] = calendar,
  [CONCURRENCY] = concurrency_check,
  [PENALTY] = penalty_first,
}

-- Reservations (a token budget's estimates, ratelimit.Entry.Reserve) of a
-- limit of any algorithm but Concurrency: its cost is taken as the
-- algorithm takes it, and recorded as its holder's reservation with the
-- concurrency holds' machinery: a field of the bucket per holder,
-- ':h<field>:<holder>', holding '<ddd' cost, the count of its duplicates,
-- end (24 bytes: a concurrency hold's 16 never reads as one, nor the
-- reverse). As for a concurrency hold, a duplicate admission is denied
-- and counted whatever the decision, its settlement counts one off; the
-- count rides in the reservation's own field (one field to read, write
-- and delete: a reservation is new, no older library reads it). The
-- limit's reservations are summed in ':r<field>', '<dd' units, and a time
-- at or before the end of the earliest one counted: a call scans the
-- holds (HGETALL, as conc_scan) only when one may have ended, and the
-- ended ones go (their units stay charged). The reply carries, after a
-- request's verdicts, two values per reserving or settling entry: the
-- units reserved (before consuming; after a settlement), the reservation
-- settled.
local function res_state(v)
  local n, first
  if v and #v == 16 then
    n, first = sunpack('<dd', v)
  end
  if n and n >= 0 and n <= MAXU and n % 1 == 0 and first >= 0 and first <= MAXU and first % 1 == 0 then
    return n, first
  end
  return 0, 0
end

-- res_hold reads a reservation's field: its cost, end and count of
-- duplicates when live at now, else nil.
local function res_hold(hv, now)
  local c, dups, ends
  if hv and #hv == 24 then
    c, dups, ends = sunpack('<ddd', hv)
  end
  if c and c >= 1 and c <= MAXCOUNT and c % 1 == 0 and ends > now and ends <= MAXU and ends % 1 == 0 and
    dups >= 0 and dups <= MAXCOUNT and dups % 1 == 0 then
    return c, ends, dups
  end
  return nil
end

-- res_scan sums the live reservations of field in group grp's bucket,
-- and sends the others (ended, or not reservations) to the group's
-- deletions with their duplicates' counts. It returns the units and the
-- earliest end (0 when none).
local function res_scan(grp, field, now)
  local all = call('HGETALL', grp.key)
  local prefix = ':h' .. field .. ':'
  local np = #prefix
  local sum, first = 0, 0
  for i = 1, #all, 2 do
    local f = all[i]
    if string.sub(f, 1, np) == prefix then
      local c, ends = res_hold(all[i + 1], now)
      if c then
        sum = sum + c
        if first == 0 or ends < first then
          first = ends
        end
      else
        grp.ndeletes = grp.ndeletes + 2
        grp.deletes[grp.ndeletes - 1], grp.deletes[grp.ndeletes] = f, ':d' .. string.sub(f, 3)
      end
    end
  end
  return sum, first
end

-- res_live is entry j's limit's reservations at now (see res_state),
-- swept when one may have ended; r is the bucket's read.
local function res_live(grp, e, r, j, now)
  local sum, first = res_state(r and r[E_HI[j] + 1])
  if sum > 0 and first <= now then
    sum, first = res_scan(grp, e.field, now)
  end
  return sum, first
end

-- reserve_check runs a reserving entry (see CHECK): its algorithm, then
-- its holder's reservation. A holder that holds one is a duplicate:
-- denied (at the earliest when its reservation ends), counted, and it
-- takes nothing (a log's pending write is dropped).
local function reserve_check(a)
  local e, j, r, now, o = a.e, a.j, a.r, a.now, a.o
  local hi = E_HI[j]
  local sum, first = res_live(a.grp, e, r, j, now)
  local c, ends, dups
  if e.cost > 0 then
    c, ends, dups = res_hold(r and r[hi], now)
  end
  local ok, val, exp = CHECK[e.alg](a)
  E_RS[j], E_ST[j] = sum, 0
  if c then
    E_LW[j] = false
    local left, retry = ends - now, OUT[o + 1]
    if retry == 0 or retry ~= NEVER and retry < left then
      OUT[o + 1] = left
    end
    OUT[o + 4] = OUT[o + 3]
    if dups < MAXCOUNT then
      dups = dups + 1
    end
    return false, nil, nil, nil, spack('<ddd', c, dups, ends), ends
  end
  if not ok or e.cost == 0 then
    return ok, val, exp
  end
  ends = now + e.ttl
  if sum == 0 or ends < first then
    first = ends
  end
  E_AG[j] = spack('<dd', sum + e.cost, first)
  if exp == nil or ends > exp then
    exp = ends
  end
  return ok, val or false, exp, spack('<ddd', e.cost, 0, ends)
end

-- evaluate reads group grp's bucket (read_bucket), runs the algorithm of
-- each of its entries, whose verdicts go to OUT at base + 4*j, and
-- gathers the group's pending writes. It returns false when a non-shadow
-- entry denies.
local function evaluate(grp, now, base)
  local first, last = grp.first, grp.last
  local r, foreign, stored = read_bucket(grp)
  local w, wa = grp.writes, grp.always_writes
  local allowed, denied, m, wexp, ma, wexpa = true, false, 0, 0, 0, 0
  local dups, nd, dexp = grp.dups, 0, 0
  -- An enforcing box counts the denials of the entries that are not
  -- shadow; a shadow box counts every entry's (the model's CountDenials).
  local box_all = E_REC[first].alg == PENALTY and E_REC[first].shadow
  -- A ban denies the request through the group's enforced entries only
  -- (the model's Decide): a bucket met by shadow entries alone goes on.
  local enforced = false
  local a = CHECK_ARGS
  a.grp, a.r, a.now = grp, r, now
  grp.ndeletes, grp.log = 0, false
  for j = first, last do
    local e = E_REC[j]
    a.e, a.j, a.v, a.o = e, j, r and r[j - first + 1], base + 4 * j
    local ok, val, exp, hold, dup, dupexp = e.check(a)
    if e.alg ~= PENALTY and not e.shadow then
      enforced = true
    end
    if not ok then
      if not e.shadow then
        allowed, denied = false, true
      elseif box_all then
        denied = true
      end
    end
    -- A pending write (exp) comes from an entry that allows, or from one
    -- that charges always; the latter is also written when the request
    -- is denied.
    if exp then
      if val then
        w[m + 1], w[m + 2] = e.field, val
        m = m + 2
      end
      if hold then
        w[m + 1], w[m + 2] = E_HF[j], hold
        m = m + 2
        if e.res then -- and the limit's reservations
          w[m + 1], w[m + 2] = e.agg, E_AG[j]
          m = m + 2
        end
      end
      if exp > wexp then
        wexp = exp
      end
      if e.always then
        if val then
          wa[ma + 1], wa[ma + 2] = e.field, val
          ma = ma + 2
        end
        if exp > wexpa then
          wexpa = exp
        end
      end
    end
    if dup then
      dups[nd + 1], dups[nd + 2], nd = E_DF[j], dup, nd + 2
      if dupexp > dexp then
        dexp = dupexp
      end
    end
  end
  grp.foreign, grp.stored_exp, grp.nwrites, grp.writes_exp = foreign, stored, m, wexp
  grp.always_nwrites, grp.always_exp = ma, wexpa
  if E_REC[first].alg == PENALTY then
    local v = r and r[1]
    if v or denied then
      if penalty_box(grp, v, denied, now, base) and enforced then
        allowed = false
      end
    else -- never banned nor counting, and nothing to count: the common case
      local o = base + 4 * first
      OUT[o + 1], OUT[o + 2], OUT[o + 3], OUT[o + 4] = 0, 0, 0, 0
    end
  end
  if nd > 0 then -- duplicates remembered: written whatever the decision, under a ban too
    m, ma = grp.nwrites, grp.always_nwrites
    for x = 1, nd, 2 do
      w[m + 1], w[m + 2], wa[ma + 1], wa[ma + 2] = dups[x], dups[x + 1], dups[x], dups[x + 1]
      m, ma = m + 2, ma + 2
    end
    grp.nwrites, grp.always_nwrites = m, ma
    if dexp > grp.writes_exp then
      grp.writes_exp = dexp
    end
    if dexp > grp.always_exp then
      grp.always_exp = dexp
    end
  end
  return allowed
end

-- Refunds (a request whose header's mode is 2) give each entry's cost
-- back to its limit, as model.Refund does: the state is brought to now as
-- a check would, then loses the units it holds, never below untouched.
-- Each refund_* takes the entry's check arguments (CHECK_ARGS: the
-- entry's cost is what goes back) and returns the field's new value, or nil when
-- nothing changes (an untouched state, another algorithm's, a value out of
-- range).
-- Each repeats its algorithm's read and catch-up to now inline, as the Go
-- model shares them in helpers: the check functions are the hot path,
-- where a Lua call costs more than the lines it would save.

local function refund_tokens(a)
  local e = a.e
  local v, cap, rate, iv, now, n = a.v, e.cap, e.rate, e.iv, a.now, e.cost
  local id, t, l
  if v and #v == 17 then
    id, t, l = sunpack('<Bdd', v)
  end
  if not (id == TOKEN_BUCKET and t >= -MAXU and t <= MAXU and t % 1 == 0 and l >= 0 and l <= MAXU and l % 1 == 0) then
    return nil
  end
  local tokens, last = t, l
  if tokens > cap then
    tokens = cap
  elseif tokens < -cap then
    tokens = -cap
  end
  if tokens < cap and now > last then
    local steps = floor((now - last) / iv)
    if steps > 0 then
      if steps >= ceil((cap - tokens) / rate) then
        return nil -- full again
      end
      tokens = tokens + steps * rate
      last = last + steps * iv
    end
  end
  if tokens >= cap then
    return nil
  end
  tokens = tokens + n
  if tokens > cap then
    tokens = cap
  end
  return spack('<Bdd', TOKEN_BUCKET, tokens, last)
end

-- refund_window serves the fixed windows (alg 2, 7 aligned to the clock)
-- and calendar quotas (8, whose state holds its window's end): the count
-- goes down while its window lasts.
local function refund_window(a)
  local e = a.e
  local alg, v, window, now, n = e.alg, a.v, e.iv, a.now, e.cost
  local id, c, s
  if v and #v == 17 then
    id, c, s = sunpack('<Bdd', v)
  end
  if not (id == alg and c > 0 and c <= MAXU and c % 1 == 0 and s >= 0 and s <= MAXU and s % 1 == 0) then
    return nil
  end
  if alg == FIXED_WINDOW then
    if now >= s + window then
      return nil
    end
  elseif alg == CALENDAR then
    if now >= s then
      return nil
    end
  else
    local sk = floor(s / window)
    if sk < floor(now / window) then
      return nil
    end
    s = sk * window
  end
  c = c - n
  if c < 0 then
    c = 0
  end
  return spack('<Bdd', alg, c, s)
end

local function refund_counter(a)
  local v, window, now, n = a.v, a.e.iv, a.now, a.e.cost
  local id, sk, sc, sp
  if v and #v == 25 then
    id, sk, sc, sp = sunpack('<Bddd', v)
  end
  if not (id == SLIDING_COUNTER and sk >= 0 and sk <= MAXU and sk % 1 == 0 and sc >= 0 and sc <= MAXU and sc % 1 == 0 and
    sp >= 0 and sp <= MAXU and sp % 1 == 0) then
    return nil
  end
  local k = floor(now / window)
  local curr, prev = 0, 0
  if k == sk then
    curr, prev = sc, sp
  elseif k == sk + 1 then
    prev = sc
  elseif k < sk then
    k, curr, prev = sk, sc, sp
  end
  if curr <= 0 and prev <= 0 then
    return nil
  end
  local from = curr
  if n < from then
    from = n
  end
  curr, prev = curr - from, prev - (n - from)
  if prev < 0 then
    prev = 0
  end
  if curr == 0 and prev == 0 then
    k = floor(now / window) -- empty: now's window, as untouched
  end
  return spack('<Bddd', SLIDING_COUNTER, k, curr, prev)
end

local function refund_meter(a)
  local e = a.e
  local alg, v, rate, iv, now, n = e.alg, a.v, e.rate, e.iv, a.now, e.cost
  local id, sv, st
  if v and #v == 17 then
    id, sv, st = sunpack('<Bdd', v)
  end
  if not (id == alg and sv >= 0 and sv <= MAXU and sv % 1 == 0 and st >= 0 and st <= MAXU and st % 1 == 0) then
    return nil
  end
  local level, at = sv, st
  if now > at then
    local elapsed = now - at
    if elapsed >= ceil(level / rate) then
      level = 0
    else
      level = level - elapsed * rate
    end
    at = now
  end
  if level == 0 then
    return nil
  end
  if n >= ceil(level / iv) then -- compared in units: n*iv may not be exact
    level, at = 0, now -- drained: at now, as untouched
  else
    level = level - n * iv
  end
  return spack('<Bdd', alg, level, at)
end

-- refund_log takes n units off the newest members in the window of the
-- log at key (current: see sliding_log), writing at once: a refund always
-- goes through. Members out of the window go first, so that the key is
-- gone exactly when no member is left in the window.
local function refund_log(key, current, window, now, n)
  if not current or n <= 0 then
    return
  end
  local cut = now - window
  local last = pcall_('ZRANGE', key, -1, -1, 'WITHSCORES')
  if typeof(last) ~= 'table' or last.err or #last == 0 then
    return
  end
  local at = toint(last[2], 0, MAXU)
  if at == nil or at <= cut or parse_member(last[1]) == nil then
    return
  end
  call('ZREMRANGEBYSCORE', key, '-inf', format('%d', cut))
  while true do
    local c, m = parse_member(last[1])
    at = toint(last[2], 0, MAXU)
    if c == nil or at == nil then
      return -- an unreadable member keeps the rest
    end
    if m > n then -- the new member first: a log left empty for a moment would lose its TTL
      call('ZADD', key, format('%d', at), format('%d:%d', (c - n) % LOGMOD, m - n))
      call('ZREM', key, last[1])
      return
    end
    call('ZREM', key, last[1])
    n = n - m
    if n == 0 then
      return
    end
    last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if #last == 0 then
      return
    end
  end
end

-- REFUND is each algorithm's refund by its id, for those that keep their
-- state in their field (see refund_group for the others).
local REFUND = {
  [TOKEN_BUCKET] = refund_tokens,
  [FIXED_WINDOW] = refund_window,
  [SLIDING_COUNTER] = refund_counter,
  [LEAKY_BUCKET] = refund_meter,
  [GCRA] = refund_meter,
  [FIXED_WINDOW_CLOCK] = refund_window,
  [CALENDAR] = refund_window,
}

-- zero_cost is entry e's twin of cost 0 that does not charge always (kept
-- with e, as e is): a refund's figures are those of such a check.
local function zero_cost(e)
  local z = e.zero
  if not z then
    z = {alg = e.alg, cap = e.cap, rate = e.rate, iv = e.iv, cost = 0, shadow = e.shadow, field = e.field, always = false,
      plain = e.plain, w0 = e.w0, w1 = e.w1, w2 = e.w2, w3 = e.w3}
    e.zero = z
  end
  return z
end

-- refund_entry gives back the cost of the entry of arguments a and fills
-- its figures at a.o: the field's new value (nil: unchanged), and for a
-- concurrency entry's release of a duplicate, its new count.
local function refund_entry(a)
  local e = a.e
  local alg = e.alg
  if alg == CONCURRENCY then
    local j, r = a.j, a.r
    local hi = E_HI[j]
    return conc_release(a.grp, e, E_HF[j], E_DF[j], a.v, r and r[hi], r and r[hi + 1], a.now, a.o)
  end
  local give = e.cost > 0
  if alg == SLIDING_LOG then
    refund_log(E_LK[a.j], a.grp.own or a.v == LOGMARK, e.iv, a.now, e.cost)
    a.e = zero_cost(e)
    sliding_log(a)
    return nil
  end
  -- A cost of 0 gives nothing back: the state stays as stored, not
  -- brought to now (a later check at an earlier time reads it as stored).
  local val = give and REFUND[alg](a)
  a.v, a.e = val or a.v, zero_cost(e)
  CHECK[alg](a)
  return val or nil
end

-- SETTLE_REC: the record of a settlement's difference (cost), refunded or
-- charged always, filled by settle_diff from the entry's.
local SETTLE_REC = {}

-- settle_diff moves the state of the entry of arguments a (its record e,
-- holding the actual cost) by the difference from its reservation c, as
-- model.Settle does, and fills the figures after at a.o, allowed. It
-- returns the field's new value (nil: unchanged) and, for a charge, when
-- the state is untouched again (µs).
local function settle_diff(a, e, c)
  local x, actual, alg = SETTLE_REC, e.cost, e.alg
  x.alg, x.cap, x.rate, x.iv, x.shadow, x.field, x.plain = alg, e.cap, e.rate, e.iv, false, e.field, e.plain
  x.w0, x.w1, x.w2, x.w3 = e.w0, e.w1, e.w2, e.w3
  local o, val, exp = a.o, nil, nil
  if actual > c then -- taken whatever the limit says
    x.cost, x.always = actual - c, true
    a.e = x
    local ok, v2, e2 = CHECK[alg](a)
    val, exp = v2 or nil, e2
    if ok then
      OUT[o + 2] = OUT[o + 2] - x.cost
    else
      OUT[o + 2] = 0
    end
    OUT[o + 1], OUT[o + 3] = 0, OUT[o + 4]
    return val, exp
  end
  if actual < c then -- given back
    x.cost, x.always = c - actual, false
    a.e = x
    if alg == SLIDING_LOG then
      refund_log(E_LK[a.j], a.grp.own or a.v == LOGMARK, e.iv, a.now, x.cost)
    else
      val = REFUND[alg](a)
      a.v = val or a.v
    end
  end
  a.e = zero_cost(e)
  CHECK[alg](a)
  OUT[o + 1], OUT[o + 4] = 0, OUT[o + 3]
  return val, nil
end

-- settle_entry settles the reservation of the entry of arguments a (see
-- Reservations): the holder's live one, unless duplicates of it are
-- pending (one is counted off); else nothing changes (retry never). It
-- appends its writes to w from m, and returns m and the latest expiry
-- of the states written (µs, from wexp).
local function settle_entry(a, w, m, wexp)
  local e, j, r, now, o, grp = a.e, a.j, a.r, a.now, a.o, a.grp
  local hi = E_HI[j]
  local sum, first = res_live(grp, e, r, j, now)
  local c, ends, dups = res_hold(r and r[hi], now)
  E_LW[j] = false
  if c and dups > 0 then -- a duplicate's settlement: it reserved nothing
    w[m + 1], w[m + 2], m = E_HF[j], spack('<ddd', c, dups - 1, ends), m + 2
    c = nil
  end
  E_RS[j], E_ST[j] = sum, 0
  if not c then
    a.e = zero_cost(e)
    CHECK[e.alg](a)
    OUT[o + 1], OUT[o + 4] = NEVER, OUT[o + 3]
    return m, wexp
  end
  grp.ndeletes = grp.ndeletes + 1
  grp.deletes[grp.ndeletes] = E_HF[j]
  E_RS[j], E_ST[j] = sum - c, c
  w[m + 1], w[m + 2], m = e.agg, spack('<dd', sum - c, first), m + 2
  local val, exp = settle_diff(a, e, c)
  if val then
    w[m + 1], w[m + 2], m = e.field, val, m + 2
    exp = exp or now + OUT[o + 3]
  end
  if exp and exp > wexp then
    wexp = exp
  end
  return m, wexp
end

-- settle_group settles group grp's entries (a request whose header's
-- mode is 6): each reservation is replaced by its actual cost, each
-- concurrency entry released; it gathers the pending writes (a log's
-- given back at once, a log's charge with the group's).
local function settle_group(grp, now, base)
  local r, foreign, stored = read_bucket(grp)
  grp.ndeletes, grp.log = 0, false
  local w, m, wexp = grp.writes, 0, 0
  local a = CHECK_ARGS
  a.grp, a.r, a.now = grp, r, now
  for j = grp.first, grp.last do
    local e = E_REC[j]
    local o = base + 4 * j
    a.e, a.j, a.v, a.o = e, j, r and r[j - grp.first + 1], o
    if e.alg == CONCURRENCY then
      local val, pending = refund_entry(a)
      if val or pending then
        if val then
          w[m + 1], w[m + 2] = e.field, val
        else
          w[m + 1], w[m + 2] = E_DF[j], pending
        end
        m = m + 2
        if now + OUT[o + 3] > wexp then
          wexp = now + OUT[o + 3]
        end
      end
    else
      m, wexp = settle_entry(a, w, m, wexp)
    end
  end
  if m > 0 and wexp < 1 then
    wexp = 1 -- something to write (at time 0 of a test clock)
  end
  grp.foreign, grp.stored_exp, grp.nwrites, grp.writes_exp = foreign, stored, m, wexp
  grp.always_nwrites, grp.always_exp = 0, 0
end

-- refund_group gives back the costs of group grp's entries and gathers its
-- pending writes (a log's are made at once). Each entry's figures are
-- those of a check of cost 0 after the refund, allowed.
local function refund_group(grp, now, base, release)
  local first, last = grp.first, grp.last
  local r, foreign, stored = read_bucket(grp)
  grp.ndeletes = 0
  local w = grp.writes
  local m, wexp = 0, 0
  local a = CHECK_ARGS
  a.grp, a.r, a.now = grp, r, now
  for j = first, last do
    local e = E_REC[j]
    local o = base + 4 * j
    a.e, a.j, a.v, a.o = e, j, r and r[j - first + 1], o
    local val, pending = refund_entry(a)
    if not release or e.alg ~= CONCURRENCY then -- a release refunds the other algorithms
      OUT[o + 1], OUT[o + 4] = 0, OUT[o + 3]
    end
    if val or pending then
      if val then
        w[m + 1], w[m + 2] = e.field, val
      else -- a duplicate's release, counted off
        w[m + 1], w[m + 2] = E_DF[j], pending
      end
      m = m + 2
      local exp = now + OUT[o + 3]
      if exp > wexp then
        wexp = exp
      end
    end
  end
  if m > 0 and wexp < 1 then
    wexp = 1 -- something to write (at time 0 of a test clock)
  end
  grp.foreign, grp.stored_exp, grp.nwrites, grp.writes_exp, grp.log = foreign, stored, m, wexp, false
  grp.always_nwrites, grp.always_exp = 0, 0
end

-- commit writes group grp's pending writes (only those of entries that
-- charge always, for a denied request: always): each log's entry and
-- expiry, then one HSET of the bucket's changed fields (a log's field only
-- when it did not hold the log's mark yet) and, when the bucket's expiry
-- moves later, the new expiry in ':exp' and PEXPIREAT. A foreign key is
-- deleted first.
local function commit(grp, always)
  if grp.log then
    for j = grp.first, grp.last do
      local e = E_REC[j]
      if e.alg == SLIDING_LOG and E_LW[j] and (e.always or not always) then
        write_log(j, E_LK[j], ceil(LOG_WRITES[j].expires / 1000))
      end
    end
  end
  local exp, w, m = grp.writes_exp, grp.writes, grp.nwrites
  if always then
    exp, w, m = grp.always_exp, grp.always_writes, grp.always_nwrites
  end
  if exp == 0 or grp.own then
    return -- nothing written, or a log that is its own bucket
  end
  exp = ceil(exp / 1000)
  local later = exp > grp.stored_exp
  if later then
    w[m + 1], w[m + 2] = EXPIRY, spack('<d', exp)
    m = m + 2
  elseif m == 0 then
    return -- logs whose field holds their mark, within the bucket's expiry
  end
  if grp.foreign then
    call('DEL', grp.key)
  elseif grp.ndeletes > 0 and not always then -- ended and released holds
    call('HDEL', grp.key, unpack_(grp.deletes, 1, grp.ndeletes))
  end
  if m == 2 then
    call('HSET', grp.key, w[1], w[2])
  else
    call('HSET', grp.key, unpack_(w, 1, m))
  end
  if later then
    call('PEXPIREAT', grp.key, format('%d', exp))
  end
end

local function fail(msg)
  return redis.error_reply('ERR sluice: ' .. msg)
end

-- Parsed arguments are memoized: the same few strings (one per limit of a
-- policy, one header per request size) come with almost every call, and a
-- table lookup of an interned string costs far less than parsing it. Only
-- valid arguments are remembered, headers and entries apart; MEMOMAX
-- bounds the memory.
local MEMOMAX = 4096
local hmemo, ememo, hmemo_n, ememo_n = {}, {}, 0, 0

-- header parses "n:mode:time" into {n, dry, time (false: the server's),
-- refund, release, reset, lift, settle}; nil if malformed. Mode: 0 a check, 1 a dry run, 2
-- a refund, 3 a release, 6 a settlement (refund is set too: all give
-- back, without deciding), 4 a reset, 5 a lift (see forget).
local function request_header(n, mode, time)
  return {n = n, dry = mode == '1', time = time, refund = mode == '2' or mode == '3' or mode == '6', release = mode == '3', reset = mode == '4', lift = mode == '5',
    settle = mode == '6'}
end

local function header(s)
  local rec = hmemo[s]
  if rec then
    return rec
  end
  if typeof(s) ~= 'string' then
    return nil
  end
  local n, mode, t = match(s, '^(%d+):([0-6]):([%d%-]+)$')
  n = toint(n, 1, MAXENTRIES)
  if n == nil then
    return nil
  end
  if t == '-' then
    rec = request_header(n, mode, false)
    if hmemo_n >= MEMOMAX then
      hmemo, hmemo_n = {}, 0
    end
    hmemo[s], hmemo_n = rec, hmemo_n + 1
    return rec
  end
  t = toint(t, 0, MAXU - 1)
  if t == nil then
    return nil
  end
  return request_header(n, mode, t) -- an explicit time: not worth remembering
end

-- limit parses "algorithm:capacity:rate:interval:cost:flags:field" into
-- a limit_entry record; nil if malformed.
local function limit(s)
  local alg, cap, rate, iv, cost, flags, field = match(s, '^(%d+):(%d+):(%d+):(%d+):(%d+):([0-3]):([^:]*)$')
  if alg == nil then
    return nil
  end
  alg, cap, rate = toint(alg, TOKEN_BUCKET, CONCURRENCY), toint(cap, 1, MAXCOUNT), toint(rate, 0, MAXCOUNT)
  iv, cost = toint(iv, 1, MAXU), toint(cost, 0, MAXCOUNT)
  if alg == nil or alg == CALENDAR or cap == nil or rate == nil or iv == nil or cost == nil or ((alg == TOKEN_BUCKET or alg == LEAKY_BUCKET or alg == GCRA) and rate < 1) or
    (alg == CONCURRENCY and (rate ~= 0 or flags == '2' or flags == '3')) then
    return nil
  end
  return limit_entry(alg, cap, rate, iv, cost, flags, field)
end

-- reserving parses a limit's or a calendar quota's entry followed by
-- ':r<ttl>' (a reservation live for ttl µs, see Reservations) or ':s' (a
-- settlement): a record of its own, not plain (parse reads its holder);
-- nil if malformed, of a concurrency limit, or charged always.
local function reserving(s)
  local base, kind, ttl = match(s, '^(.+):([rs])(%d*)$')
  if base == nil then
    return nil
  end
  local rec = limit(base) or calendar_entry(base)
  if rec == nil or rec.alg == CONCURRENCY or rec.always then
    return nil
  end
  if kind == 's' then
    if ttl ~= '' then
      return nil
    end
    rec.settle = true
  else
    rec.ttl = toint(ttl, 1, MAXPENALTY)
    if rec.ttl == nil then
      return nil
    end
    rec.res = true
  end
  rec.plain, rec.held, rec.agg, rec.hpre = false, true, ':r' .. rec.field, ':h' .. rec.field .. ':'
  return rec
end

-- entry parses an entry argument into its record (see limit,
-- calendar_entry, penalty_entry, reserving); nil if malformed.
-- (A concurrency entry's holder, and a reserving one's, is an argument of
-- its own: see parse.)
local function entry(s)
  local rec = ememo[s]
  if rec then
    return rec
  end
  if typeof(s) ~= 'string' then
    return nil
  end
  rec = limit(s) or calendar_entry(s) or penalty_entry(s) or reserving(s)
  if rec == nil then
    return nil
  end
  rec.check = rec.res and reserve_check or CHECK[rec.alg] -- what evaluate runs
  if ememo_n >= MEMOMAX then
    ememo, ememo_n = {}, 0
  end
  ememo[s], ememo_n = rec, ememo_n + 1
  return rec
end

-- parse checks every request's arguments and keys into the scratch arrays
-- and groups each request's entries by bucket: the entries of one bucket
-- must be adjacent. It returns the number of requests and whether an entry
-- is a calendar quota's, or nil and an error message.
local function parse(keys, args)
  local nk, na = #keys, #args
  if nk < 1 or nk > MAXKEYS then
    return nil, 'want 1..' .. MAXKEYS .. ' keys, got ' .. nk
  end
  local p, j0, k, r, ng, cal = 1, 0, 0, 0, 0, false
  local grp = nil -- group ng
  while p <= na do
    r = r + 1
    local h = hmemo[args[p]] or header(args[p])
    if h == nil then
      return nil, 'bad header for request ' .. r
    end
    local n = h.n
    if p + n > na then
      return nil, 'request ' .. r .. ' wants ' .. n .. ' entries: too few arguments'
    end
    R_HDR[r], R_G[r], R_NX[r] = h, ng, false
    local g0, bucket, logs = ng + 1, nil, false
    local a = p + 1 -- the next argument
    for j = j0 + 1, j0 + n do
      local s = args[a]
      local e = ememo[s] or entry(s)
      if e == nil then
        return nil, 'bad arguments for request ' .. r .. ' entry ' .. (j - j0)
      end
      a, k = a + 1, k + 1
      local b = keys[k]
      local same = bucket ~= nil and b == bucket and not grp.own
      -- The common case, a plain limit of the bucket before it, has nothing
      -- to check but its field (a penalty box's record is not plain).
      if not (same and e.plain) then
        local alg, own = e.alg, false
        if e.held then -- its holder, as its hold's field
          if e.settle and not h.settle or e.res and (h.refund or h.reset or h.lift) then
            return nil, 'request ' .. r .. ' entry ' .. (j - j0) .. ': only a settlement settles, only a check reserves'
          end
          local holder = args[a]
          if alg == CONCURRENCY then
            if typeof(holder) ~= 'string' or #holder < 1 or #holder > 256 then
              return nil, 'request ' .. r .. ' entry ' .. (j - j0) .. ': a concurrency entry needs its holder (1..256 bytes)'
            end
            E_HF[j], E_DF[j] = ':h' .. e.field .. ':' .. holder, ':d' .. e.field .. ':' .. holder
          else -- its reservation's field itself (no string to build), which counts its duplicates too
            local np = #e.hpre
            if typeof(holder) ~= 'string' or #holder > np + 256 or #holder < np + 1 and not (e.res and h.dry) or find(holder, e.hpre, 1, true) ~= 1 then
              return nil, 'request ' .. r .. ' entry ' .. (j - j0) .. ': a reserving or settling entry needs its reservation\'s field (\'' ..
                e.hpre .. '\' and 1..256 bytes of holder)'
            end
            E_HF[j], E_DF[j], R_NX[r] = holder, holder, true
          end
          a = a + 1
        end
        if alg == SLIDING_LOG then
          k = k + 1
          own, logs = keys[k] == b, true
          E_LK[j] = keys[k]
        elseif alg == CALENDAR then
          cal = true
        end
        if k > nk then
          return nil, 'request ' .. r .. ' entry ' .. (j - j0) .. ': too few keys'
        end
        if not same or own then
          for g = g0, ng do
            if GROUPS[g].key == b then
              return nil, 'request ' .. r .. ' entry ' .. (j - j0) .. ': the entries of a bucket are not adjacent, or a log and a bucket share a key'
            end
          end
          ng, bucket = ng + 1, b
          grp = group(ng, b, j, own)
          same = false
        end
        if alg == PENALTY and (grp.first ~= j or h.refund) then
          return nil, 'request ' .. r .. ' entry ' .. (j - j0) .. ': a penalty box must lead its bucket\'s entries, and a refund takes none'
        end
        if e.held then
          grp.holds = true
        end
      end
      if same then
        local f = e.field
        for x = grp.first, j - 1 do
          if E_REC[x].field == f then
            return nil, 'duplicate key in request ' .. r .. ' entry ' .. (j - j0)
          end
        end
      end
      grp.last, E_REC[j] = j, e
    end
    if logs then -- a log's key is no bucket of the same request
      for j = j0 + 1, j0 + n do
        if E_REC[j].alg == SLIDING_LOG then
          for g = g0, ng do
            if GROUPS[g].key == E_LK[j] and not GROUPS[g].own then
              return nil, 'request ' .. r .. ' entry ' .. (j - j0) .. ': a log and a bucket share a key'
            end
          end
        end
      end
    end
    if h.settle then -- every entry settles, but a concurrency limit's (released)
      for j = j0 + 1, j0 + n do
        if not E_REC[j].settle and E_REC[j].alg ~= CONCURRENCY then
          return nil, 'request ' .. r .. ' entry ' .. (j - j0) .. ': a settlement settles every entry but a concurrency limit\'s'
        end
      end
    end
    R_NG[r] = ng - R_G[r]
    j0, p = j0 + n, a
  end
  if r == 0 or k ~= nk then
    return nil, 'want arguments for ' .. nk .. ' keys'
  end
  return r, cal
end

-- forget carries out an operator's reset or lift of group grp. A reset
-- deletes each entry's state: its field, a log's sorted set, a
-- concurrency limit's holds; the penalty box stays. A lift deletes the
-- penalty box (the ban and its count of denials). The bucket's expiry
-- stays: it only ever covers more than what is left.
local function forget(grp, lift)
  local key = grp.key
  if lift then
    pcall_('HDEL', key, BAN) -- a key that is no bucket (an error) holds no ban
    return
  end
  for j = grp.first, grp.last do
    if E_REC[j].alg == SLIDING_LOG then
      call('DEL', E_LK[j])
    end
  end
  if grp.own then
    return -- a log that is its own bucket: gone
  end
  for j = grp.first, grp.last do
    local e = E_REC[j]
    local f = e.field
    local r = pcall_('HDEL', key, f)
    if typeof(r) == 'table' and r.err then
      return -- a key that is no bucket: nothing to reset
    end
    if e.alg == CONCURRENCY then -- its holds and their duplicates
      local holds, dups = ':h' .. f .. ':', ':d' .. f .. ':'
      local all = call('HGETALL', key)
      for x = 1, #all, 2 do
        local p = string.sub(all[x], 1, #holds)
        if p == holds or p == dups then
          call('HDEL', key, all[x])
        end
      end
    end
  end
end

-- settle_request settles the groups g1..g2 of a request (its entries
-- j0+1..j0+n, its decision at OUT[d]): allowed when an entry settled (or
-- freed) something.
local function settle_request(d, base, g1, g2, j0, n, now)
  OUT[d] = 0
  for g = g1, g2 do
    settle_group(GROUPS[g], now, base)
    commit(GROUPS[g], false)
  end
  for j = j0 + 1, j0 + n do
    if OUT[base + 4 * j + 1] == 0 then
      OUT[d] = 1
    end
  end
end

-- refund_request gives back (or settles: settle_request) the groups
-- g1..g2 of a request with header h (see sluice_check).
local function refund_request(h, d, base, g1, g2, j0, n, now)
  if h.settle then
    settle_request(d, base, g1, g2, j0, n, now)
    return
  end
  OUT[d] = 1
  for g = g1, g2 do
    refund_group(GROUPS[g], now, base, h.release)
    commit(GROUPS[g], false)
  end
  if h.release then -- a release: allowed when a concurrency entry freed something
    OUT[d] = 0
    for j = j0 + 1, j0 + n do
      if E_REC[j].alg == CONCURRENCY and OUT[base + 4 * j + 1] == 0 then
        OUT[d] = 1
      end
    end
  end
end

-- server_time is the server's clock in µs.
local function server_time()
  local t = call('TIME')
  return tonum(t[1]) * 1000000 + tonum(t[2])
end

local function sluice_check(keys, args)
  if not call then
    init()
  end
  local nreq, cal = parse(keys, args)
  if not nreq then
    return fail(cal)
  end
  local server_now = nil
  if cal then
    server_now = server_time()
    local err = calendar_clock(nreq, server_now)
    if err then
      return fail(err)
    end
  end
  local o, j0 = 0, 0
  for r = 1, nreq do
    local h = R_HDR[r]
    local n, now = h.n, h.time
    if not now then
      if not server_now then
        server_now = server_time()
      end
      now = server_now
    end
    OUT[o + 1] = r
    local d = o + 2
    -- entry j's verdict is at d + 4*(j-j0-1): base + 4*j
    local base = d - 4 * (j0 + 1)
    local g1, g2 = R_G[r] + 1, R_G[r] + R_NG[r]
    if h.reset or h.lift then -- a reset or a lift: allowed, every figure 0
      OUT[d] = 1
      for g = g1, g2 do
        forget(GROUPS[g], h.lift)
      end
      for j = j0 + 1, j0 + n do
        local b = base + 4 * j
        OUT[b + 1], OUT[b + 2], OUT[b + 3], OUT[b + 4] = 0, 0, 0, 0
      end
    elseif h.refund then -- a refund (always allowed), a release or a settlement (allowed when it freed or settled something): always written
      refund_request(h, d, base, g1, g2, j0, n, now)
    else
      local allowed = true
      for g = g1, g2 do
        if not evaluate(GROUPS[g], now, base) then
          allowed = false
        end
      end
      if allowed then
        OUT[d] = 1
        if not h.dry then
          for g = g1, g2 do
            commit(GROUPS[g], false)
          end
        end
      else
        OUT[d] = 0
        if not h.dry then
          for g = g1, g2 do
            if GROUPS[g].always_exp > 0 then
              commit(GROUPS[g], true)
            end
          end
        end
      end
    end
    o = d + 4 * n
    if R_NX[r] then -- each reserving or settling entry's reserved units and settled reservation
      for j = j0 + 1, j0 + n do
        local e = E_REC[j]
        if e.res or e.settle then
          OUT[o + 1], OUT[o + 2], o = E_RS[j], E_ST[j], o + 2
        end
      end
    end
    j0 = j0 + n
  end
  OUT[o + 1] = nil -- the reply ends here (OUT may be longer from an earlier call)
  return OUT
end
