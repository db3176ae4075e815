package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/webhook"
)

const (
	// overriddenQuota is every override's number for the burst limit:
	// half the policy's capacity (and so half its refill rate), still
	// allowing under any load this machine makes, and told apart from the
	// policy's own quota in a dry run's answer.
	overriddenQuota = 500_000_000
	// overridesPerObject is the most entries a RateLimitOverrides object
	// may hold.
	overridesPerObject = 10_000
)

// overrideKey is the client IP of the i-th override: every other client
// IP of the loads, so half of wrk's 10,000 clients have one and the rest
// of the overrides lie beyond them.
func overrideKey(i int) string { return clientIP(2 * i) }

// overridesObject is the YAML of the k-th RateLimitOverrides object of
// policy bench/name, entries k×overridesPerObject on.
func overridesObject(name string, k int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "apiVersion: ratelimit.sluice.dev/v1alpha1\nkind: RateLimitOverrides\nmetadata: {name: %s-%d, namespace: bench}\nspec:\n  policyName: %s\n  overrides:\n", name, k, name)
	for i := k * overridesPerObject; i < (k+1)*overridesPerObject; i++ {
		fmt.Fprintf(&b, "  - {key: %q, limits: [{name: burst, limit: %d}]}\n", overrideKey(i), overriddenQuota)
	}
	return b.Bytes()
}

// overridesCost is what declaring overrides.MaxPerPolicy overrides of a
// policy costs its check process, idle and under load.
type overridesCost struct {
	// rssBefore is the process's resident memory with its policy alone,
	// after a warm-up load; rssLoaded right after the overrides are in
	// force; rssAfter after the rounds that loaded it with them.
	rssBefore, rssLoaded, rssAfter int64
	// applied is the time from writing the files to a dry run answering
	// the overridden quota.
	applied time.Duration
	// redisBytes is the declared overrides' hash in Redis.
	redisBytes int64
	// redisLongest is the longest command Redis ran while they were
	// written and read (its slow log): the time it answered no one else.
	redisLongest time.Duration
}

// declareOverrides warms c (a Sluice configuration with policy name and
// its limit "burst", on the Redis at redisAddr) up with wrk, reads its
// resident memory, then writes overrides.MaxPerPolicy overrides of the
// policy into its policies folder and waits until a dry run answers the
// overridden quota for a key with an override and the policy's own for a
// key without.
func declareOverrides(dir string, c *config, name, redisAddr string, warm time.Duration) (overridesCost, error) {
	var cost overridesCost
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, DB: c.redisDB})
	defer rdb.Close()
	if _, err := runWrk(dir, c.url, 2, 50, warm); err != nil {
		return cost, err
	}
	var err error
	if cost.rssBefore, err = residentMemory(c.pid); err != nil {
		return cost, err
	}
	ctx := context.Background()
	if err := rdb.SlowLogReset(ctx).Err(); err != nil {
		return cost, err
	}
	start := time.Now()
	for k := range overrides.MaxPerPolicy / overridesPerObject {
		if err := writeAtomically(filepath.Join(c.policiesDir, fmt.Sprintf("overrides-%d.yaml", k)), overridesObject(name, k)); err != nil {
			return cost, err
		}
	}
	fmt.Fprintf(os.Stderr, "bench: %d overrides of bench/%s written, waiting for them to apply\n", overrides.MaxPerPolicy, name)
	want := []struct {
		ip    string
		quota int64
	}{{overrideKey(0), overriddenQuota}, {overrideKey(overrides.MaxPerPolicy - 1), overriddenQuota}, {clientIP(1), 1_000_000_000}}
	// A loaded machine (other work beside the run) slows each step: the
	// folder's settle time, the writes and every process's reload.
	deadline := start.Add(3 * time.Minute)
	for _, w := range want {
		for {
			q, err := dryRunQuota(c.url, name, w.ip)
			if err == nil && q == w.quota {
				break
			}
			if time.Now().After(deadline) {
				return cost, fmt.Errorf("key %s: quota %d (%v), want %d, %s after the overrides were written", w.ip, q, err, w.quota, round(time.Since(start)))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	cost.applied = time.Since(start)
	// Each poll of the folder that saw some of the files wrote the
	// overrides anew, in a script call of up to 100,000 entries that
	// holds Redis meanwhile, and every process reloads them after: wait
	// for the last write, so that none falls into the warm-up or the
	// rounds.
	if err := waitQuiet(rdb, overrides.RedisRevisionKey, 3*time.Second, deadline); err != nil {
		return cost, err
	}
	if cost.rssLoaded, err = residentMemory(c.pid); err != nil {
		return cost, err
	}
	slow, err := rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		return cost, err
	}
	for _, l := range slow {
		cost.redisLongest = max(cost.redisLongest, l.Duration)
	}
	_, declared := overrides.RedisHashKeys(overrides.PolicyID{Namespace: "bench", Name: name})
	cost.redisBytes, err = rdb.MemoryUsage(ctx, declared, 0).Result()
	return cost, err
}

// waitQuiet waits until the value of key (or the error reading it) has
// stayed the same for quiet, or fails at deadline.
func waitQuiet(rdb *redis.Client, key string, quiet time.Duration, deadline time.Time) error {
	read := func() string {
		v, err := rdb.Get(context.Background(), key).Result()
		if err != nil {
			return "error: " + err.Error()
		}
		return v
	}
	last, since := read(), time.Now()
	for time.Since(since) < quiet {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still changing (%s) at the deadline", key, last)
		}
		time.Sleep(250 * time.Millisecond)
		if v := read(); v != last {
			last, since = v, time.Now()
		}
	}
	return nil
}

// writeAtomically writes data to a hidden file beside name and renames it
// to name, so the policies folder never shows part of it.
func writeAtomically(name string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(name), "."+filepath.Base(name))
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// dryRunQuota asks the Sluice check endpoint at checkURL, in dry run,
// about a request from ip, and returns the quota its policy name answers
// with for its first limit.
func dryRunQuota(checkURL, name, ip string) (int64, error) {
	u, err := url.Parse(checkURL)
	if err != nil {
		return 0, err
	}
	body, err := json.Marshal(webhook.CheckRequest{
		Namespace: "bench", Policy: name, DryRun: true,
		Request: webhook.OriginalRequest{Method: "GET", Host: "shop.example.com", Path: "/api/items", ClientIP: ip},
	})
	if err != nil {
		return 0, err
	}
	resp, err := http.Post("http://"+u.Host+"/v1/check", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var answer webhook.CheckResponse
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return 0, fmt.Errorf("/v1/check: %s: %w", resp.Status, err)
	}
	for _, p := range answer.Policies {
		if p.Name == name && len(p.Limits) > 0 {
			return p.Limits[0].Limit, nil
		}
	}
	return 0, fmt.Errorf("/v1/check: no limit of policy %s in the answer (reason %s, degraded %t, error %q)", name, answer.Reason, answer.Degraded, answer.Error)
}

// residentMemory is a process's resident set size in bytes (VmRSS).
func residentMemory(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
