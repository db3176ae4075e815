package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

// serveBare answers 200 and does nothing else: the ceiling of any checker
// written with net/http on this machine.
func serveBare(args []string) error {
	fs := flag.NewFlagSet("serve-bare", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return http.ListenAndServe(*listen, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
}

// serveBareFastHTTP answers 200 and does nothing else on fasthttp with its
// default options: the ceiling of any checker written with fasthttp, as
// Sluice's check routes are, beside serveBare's net/http one.
func serveBareFastHTTP(args []string) error {
	fs := flag.NewFlagSet("serve-bare-fasthttp", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return fasthttp.ListenAndServe(*listen, func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(fasthttp.StatusOK)
	})
}

// naiveTokenBucket is the token bucket script of the common Redis Lua
// recipe, as a user would paste it: the caller's clock, no TTL.
const naiveTokenBucket = `
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local refill_rate = tonumber(ARGV[2])
local refill_interval = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local bucket = redis.call('HMGET', key, 'tokens', 'last_refill')
local tokens = tonumber(bucket[1])
local last_refill = tonumber(bucket[2])
if tokens == nil then
    tokens = capacity
    last_refill = now
end
local time_passed = now - last_refill
local refills = math.floor(time_passed / refill_interval)
if refills > 0 then
    tokens = math.min(capacity, tokens + (refills * refill_rate))
    last_refill = last_refill + (refills * refill_interval)
end
local allowed = 0
if tokens >= 1 then
    tokens = tokens - 1
    allowed = 1
end
redis.call('HMSET', key, 'tokens', tokens, 'last_refill', last_refill)
return {allowed, tokens}
`

// serveNaive is the baseline a user could write in an afternoon: net/http
// and go-redis with pool defaults, one EVALSHA of that script per
// request, keyed by the client IP the proxy reports.
func serveNaive(args []string) error {
	fs := flag.NewFlagSet("serve-naive", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	addr := fs.String("redis", "127.0.0.1:6379", "Redis address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	script := redis.NewScript(naiveTokenBucket)
	if err := script.Load(context.Background(), rdb).Err(); err != nil {
		return fmt.Errorf("load script: %w", err)
	}
	return http.ListenAndServe(*listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := float64(time.Now().UnixNano()) / 1e9
		res, err := script.Run(r.Context(), rdb, []string{"ip:" + r.Header.Get("X-Real-IP")},
			1_000_000_000, 1_000_000, 1.0, now).Int64Slice()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-RateLimit-Remaining", strconv.FormatInt(res[1], 10))
		if res[0] == 1 {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusForbidden)
	}))
}
