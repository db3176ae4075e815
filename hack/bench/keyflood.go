package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/topkeys"
)

// The key flood's policies: allowOne with each key value allowed once and
// never again within the hour (so an answer other than 200 shows a key
// seen before), kept that long in the store, so every key sent is live
// when the memory is read; and with two fixed windows beside.
var (
	floodOne = strings.NewReplacer("{name: allow,", "{name: flood,",
		"capacity: 1000000000, refillRate: 1000000, refillInterval: 1s", "capacity: 1, refillRate: 1, refillInterval: 1h").Replace(allowOne)
	floodThree = floodOne + `  - name: hour
    fixedWindow: {limit: 1, window: 1h}
  - name: day
    fixedWindow: {limit: 1, window: 24h}
`
)

// floodPoint is what one configuration holds after some distinct keys.
type floodPoint struct {
	keys int
	// rss is the check process's resident memory; redisUsed Redis's
	// used_memory; topBytes and topHashes the policy's top key values
	// in Redis (sluice:top:*, a hash a minute), topLargest the largest
	// of those hashes.
	rss, redisUsed, topBytes, topLargest int64
	topHashes                            int
	// rate is the flood's throughput from the last point to this one.
	rate float64
}

type floodResult struct {
	c      *config
	points []floodPoint // the start (one key), then a tenth of the keys, then all
}

// perMillion is how much f grows per million distinct keys between the
// two steps, so the process's fixed costs (pools,
// buffers, the first policy table) stay out.
func (r floodResult) perMillion(f func(floodPoint) int64) float64 {
	a, b := r.points[1], r.points[2]
	return float64(f(b)-f(a)) / float64(b.keys-a.keys) * 1e6
}

// runKeyFlood is the memory part: each configuration's check process is
// sent o.floodKeys distinct client IPs, one request each, and its
// resident memory, Redis's used_memory and the bytes of its top key
// values in Redis are read after one, a tenth of them and all.
func runKeyFlood(ps *processes, o options, redisAddr string, rdb *redis.Client) (string, error) {
	configs := []*config{
		{name: "Sluice on Redis, one token bucket", path: "/check/bench", policies: floodOne},
		{name: "Sluice on Redis, three limits (token bucket, two fixed windows)", path: "/check/bench", policies: floodThree},
		{name: "Sluice on its memory store, one token bucket", path: "/check/bench", policies: floodOne, memoryStore: true},
	}
	if err := ps.startServers(configs, o.manager, redisAddr); err != nil {
		return "", err
	}
	var results []floodResult
	for _, c := range configs {
		r, err := flood(c, rdb, o.floodKeys)
		if err != nil {
			return "", fmt.Errorf("%s: %w", c.name, err)
		}
		results = append(results, r)
		// Its buckets would weigh on the next one's memory (and each
		// process but the running one is idle).
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			return "", err
		}
	}
	return renderKeyFlood(results, o.floodKeys), nil
}

// flood sends c one, a tenth of keys and keys distinct keys, and reads
// the memory at each step.
func flood(c *config, rdb *redis.Client, keys int) (floodResult, error) {
	res := floodResult{c: c}
	u, err := url.Parse(c.url)
	if err != nil {
		return res, err
	}
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		return res, err
	}
	sent := 0
	for _, n := range []int{1, keys / 10, keys} {
		fmt.Fprintf(os.Stderr, "bench: %s, %d distinct keys\n", c.name, n)
		start := time.Now()
		if err := exchangeAll(u.Host, sent, n, authURL(u), http.StatusOK); err != nil {
			return res, err
		}
		p := floodPoint{keys: n, rate: float64(n-sent) / time.Since(start).Seconds()}
		sent = n
		if !c.memoryStore {
			// Let the process publish its top key values of the flood.
			time.Sleep(topkeys.PublishInterval + 500*time.Millisecond)
		}
		if p.rss, err = residentMemory(c.pid); err != nil {
			return res, err
		}
		if p.redisUsed, err = usedMemory(rdb); err != nil {
			return res, err
		}
		if p.topBytes, p.topLargest, p.topHashes, err = topKeysInRedis(rdb); err != nil {
			return res, err
		}
		res.points = append(res.points, p)
	}
	return res, nil
}

// topKeysInRedis sums the memory of the top key values' hashes in Redis
// and finds the largest.
func topKeysInRedis(rdb *redis.Client) (bytes, largest int64, hashes int, err error) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, "sluice:top:*", 1000).Iterator()
	for iter.Next(ctx) {
		n, err := rdb.MemoryUsage(ctx, iter.Val(), 0).Result()
		if err != nil {
			return 0, 0, 0, err
		}
		bytes, largest = bytes+n, max(largest, n)
		hashes++
	}
	return bytes, largest, hashes, iter.Err()
}

func renderKeyFlood(results []floodResult, keys int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Memory under a flood of distinct keys\n\nEach check process (`manager local`, one policy keyed by `{client_ip}`, every key allowed once an hour so each request is a new live key) "+
		"is sent one auth-url request per distinct client IP from a lean generator (16 connections); memory is read at 1 key, then at each step. "+
		"Per million keys: the growth from %s to %s keys, scaled; the process's fixed costs stay out.\n\n", thousands(keys/10), thousands(keys))
	fmt.Fprintln(&b, "| configuration | keys | req/s | check process RSS | Redis used_memory | `sluice:top:*` in Redis (hashes, one a minute; the largest) |")
	fmt.Fprintln(&b, "| --- | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range results {
		for i, p := range r.points {
			rate := "" // of one request: says nothing
			if i > 0 {
				rate = fmt.Sprintf("%.0f", p.rate)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d B (%d; %d B) |\n", r.c.name, thousands(p.keys), rate, mib(p.rss), mib(p.redisUsed), p.topBytes, p.topHashes, p.topLargest)
		}
	}
	fmt.Fprintln(&b, "\nPer million distinct keys (the top key values' hashes grow with the minutes the flood spans, not with its keys):")
	for _, r := range results {
		fmt.Fprintf(&b, "- %s: check process %+.0f MiB, Redis %+.0f MiB\n", r.c.name,
			r.perMillion(func(p floodPoint) int64 { return p.rss })/(1<<20),
			r.perMillion(func(p floodPoint) int64 { return p.redisUsed })/(1<<20))
	}
	return b.String()
}
