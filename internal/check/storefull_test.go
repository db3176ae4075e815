package check

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
	"github.com/sluice-dev/sluice/internal/testutil/syncbuf"
)

// counters sums reg's counters by metric name.
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[mf.GetName()] += m.GetCounter().GetValue()
		}
	}
	return out
}

// TestFullMemoryStoreKeepsLimiting: with the in-memory store's cap
// reached through one policy of many key values, an unrelated per-IP
// policy still limits a client it has not seen: the store evicts the
// least recently used buckets instead of refusing new ones, and no
// failure mode answers.
func TestFullMemoryStoreKeepsLimiting(t *testing.T) {
	const maxKeys, ids = 10, 50
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	store := storetest.Memory(t, clock.Now, memstore.WithSweepInterval(0), memstore.WithMaxKeys(maxKeys))
	reg := prometheus.NewRegistry()
	c := newChecker(t, Options{Backend: store.Backend(), Now: clock.Now, Metrics: NewMetrics(reg)},
		policytest.Compile(t, "ns", "by-id", "match: {paths: [/api]}\nkey: '{header:X-Id}'\nlimits: [{name: l, fixedWindow: {limit: 1000, window: 1h}}]"),
		policytest.Compile(t, "ns", "per-ip", "match: {paths: [/login]}\nkey: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"))
	check := func(path, ip, id string) *Outcome {
		t.Helper()
		r := request()
		r.Path, r.ClientIP, r.Header = path, netip.MustParseAddr(ip), http.Header{"X-Id": {id}}
		out, err := c.Check(context.Background(), Input{Namespace: "ns", Request: r})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for i := range ids {
		if o := check("/api", "192.0.2.1", fmt.Sprint("id-", i)); !o.Allowed || o.Degraded {
			t.Fatalf("id %d: allowed %v degraded %v (%v)", i, o.Allowed, o.Degraded, o.StoreErr)
		}
	}
	for i, want := range []bool{true, true, false} {
		o := check("/login", "198.51.100.7", "")
		if o.Allowed != want || o.Degraded {
			t.Fatalf("new client's login %d with the store full: allowed %v degraded %v reason %s (%v); want allowed %v by the store", i+1, o.Allowed, o.Degraded, o.Reason, o.StoreErr, want)
		}
	}
	got := counters(t, reg)
	if got["sluice_store_evictions_total"] != ids+1-maxKeys || got["sluice_store_full_total"] != 0 || got["sluice_failure_mode_decisions_total"] != 0 {
		t.Fatalf("evictions %v, store full %v, failure-mode answers %v; want %d, 0, 0", got["sluice_store_evictions_total"],
			got["sluice_store_full_total"], got["sluice_failure_mode_decisions_total"], ids+1-maxKeys)
	}
}

// TestRedisOutOfMemoryIsStoreFull: a Redis over its maxmemory with
// noeviction refuses every call (OOM). Each check is answered by its
// policy's failure mode and counted as the store being full, not as a
// store error; the breaker stays closed (the server answers); the log
// says so once when it begins and once when the server has room again.
func TestRedisOutOfMemoryIsStoreFull(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "2mb", "--maxmemory-policy", "noeviction"))
	store := storetest.Redis(t, srv.Addr())
	ctx := context.Background()
	if err := store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	reg := prometheus.NewRegistry()
	c := newChecker(t, Options{Backend: store.Backend(), Timeout: time.Second, Metrics: NewMetrics(reg), Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		policytest.Compile(t, "open", "p", "failureMode: Open\nkey: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"),
		policytest.Compile(t, "closed", "p", "failureMode: Closed\nkey: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"))
	check := func(ns string, ip netip.Addr) *Outcome {
		t.Helper()
		r := request()
		r.ClientIP = ip
		out, err := c.Check(ctx, Input{Namespace: ns, Request: r})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	clientIP := request().ClientIP
	if o := check("open", clientIP); !o.Allowed || o.Degraded {
		t.Fatalf("before Redis is full: %+v", o)
	}

	// Fill Redis with large values until it refuses one. The refused
	// command's own argument counted, so Redis is then just under its
	// maxmemory: new clients' checks take the last bytes, as they would
	// in production, until Redis is over it and refuses them all.
	fill := srv.Client()
	value := strings.Repeat("x", 64<<10)
	filled := 0
	for ; ; filled++ {
		err := fill.Set(ctx, fmt.Sprint("filler:", filled), value, 0).Err()
		if err != nil {
			if !strings.HasPrefix(err.Error(), "OOM ") {
				t.Fatalf("filling Redis: %v", err)
			}
			break
		}
		if filled > 1000 {
			t.Fatal("Redis took 64 MB under a maxmemory of 2 MB")
		}
	}
	refused := 0
	for ip := netip.MustParseAddr("10.0.0.1"); ; ip = ip.Next() {
		o := check("open", ip)
		if o.Degraded {
			refused++
			break
		}
		if ip.As4()[1] > 0 {
			t.Fatal("65,536 new clients did not fill Redis")
		}
	}

	// Memory Redis counts moves a little (client buffers), so a server
	// that has just refused one call can accept the next. Lower its
	// maxmemory well below what it uses: from here it refuses them all.
	used, err := fill.MemoryUsage(ctx, "filler:0").Result()
	if err != nil {
		t.Fatal(err)
	}
	info, err := fill.InfoMap(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var usedMemory int64
	if _, err := fmt.Sscan(info["Memory"]["used_memory"], &usedMemory); err != nil {
		t.Fatalf("used_memory %q: %v", info["Memory"]["used_memory"], err)
	}
	if err := fill.ConfigSet(ctx, "maxmemory", fmt.Sprint(usedMemory-8*used)).Err(); err != nil {
		t.Fatal(err)
	}

	const full = 20
	for i := range full {
		o := check("open", clientIP)
		if !o.Allowed || !o.Degraded || !errors.Is(o.StoreErr, ratelimit.ErrCapacity) || o.Reason != ReasonStoreUnavailable {
			t.Fatalf("check %d, failureMode Open, Redis full: allowed %v degraded %v reason %s err %v; want allowed by the failure mode with ErrCapacity", i, o.Allowed, o.Degraded, o.Reason, o.StoreErr)
		}
		if o := check("closed", clientIP); o.Allowed || !o.Degraded || !errors.Is(o.StoreErr, ratelimit.ErrCapacity) {
			t.Fatalf("check %d, failureMode Closed, Redis full: allowed %v degraded %v err %v; want denied by the failure mode", i, o.Allowed, o.Degraded, o.StoreErr)
		}
		if s := c.Breaker().State(); s != BreakerClosed {
			t.Fatalf("breaker %s after %d checks refused for memory", s, 2*(i+1))
		}
	}
	got := counters(t, reg)
	if want := float64(refused + 2*full); got["sluice_store_full_total"] != want || got["sluice_failure_mode_decisions_total"] != want || got["sluice_redis_errors_total"] != 0 {
		t.Fatalf("store full %v, failure-mode answers %v, store errors %v; want %v, %v, 0", got["sluice_store_full_total"],
			got["sluice_failure_mode_decisions_total"], got["sluice_redis_errors_total"], want, want)
	}
	if n := strings.Count(logs.String(), `msg="store full`); n != 1 {
		t.Fatalf("%d log lines say the store is full after %d checks, want 1:\n%s", n, 2*full, logs.String())
	}

	// Room again: the store decides, and the log says so once.
	if err := fill.ConfigSet(ctx, "maxmemory", "2mb").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range filled {
		if err := fill.Del(ctx, fmt.Sprint("filler:", i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The first check before Redis was full took one of two; nothing
	// since.
	if o := check("open", clientIP); !o.Allowed || o.Degraded || o.Limits[0].Remaining != 0 {
		t.Fatalf("check with room again: allowed %v degraded %v err %v %+v; want allowed with 0 left", o.Allowed, o.Degraded, o.StoreErr, o.Limits)
	}
	if o := check("open", clientIP); o.Allowed || o.Degraded || o.Reason != ReasonLimited {
		t.Fatalf("next check: allowed %v degraded %v reason %s; want denied by its limit", o.Allowed, o.Degraded, o.Reason)
	}
	if n := strings.Count(logs.String(), `msg="store has room again`); n != 1 {
		t.Fatalf("%d log lines say the store has room again, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "\n"); n != 2 {
		t.Fatalf("%d log lines in all, want 2:\n%s", n, logs.String())
	}
}
