package middleware_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
	"github.com/sluice-dev/sluice/middleware"
)

// TestMemoryStoreFullKeepsLimiting: with the in-memory store's cap reached
// through one policy of many key values, an unrelated per-IP policy still
// limits a client it has not seen; the least recently used buckets are
// evicted and counted.
func TestMemoryStoreFullKeepsLimiting(t *testing.T) {
	const maxKeys, ids = 10, 50
	reg := prometheus.NewRegistry()
	h := newLimiter(t, append(policyOptions(t, []named{
		{"by-id", "match: {paths: [/api]}\nkey: '{header:X-Id}'\nlimits: [{name: l, fixedWindow: {limit: 1000, window: 1h}}]"},
		{"per-ip", "match: {paths: [/login]}\nkey: '{client_ip}'\nlimits: [{name: l, fixedWindow: {limit: 2, window: 1h}}]"},
	}), middleware.WithMemoryMaxKeys(maxKeys), middleware.WithMetrics(reg))...).Handler(&app{})
	for i := range ids {
		if rec := send(h, "GET", "/api", "192.0.2.1:1234", map[string]string{"X-Id": fmt.Sprint("id-", i)}); rec.Code != 200 {
			t.Fatalf("id %d: %d", i, rec.Code)
		}
	}
	for i, want := range []int{200, 200, 429} {
		if rec := send(h, "GET", "/login", "198.51.100.7:1234", nil); rec.Code != want {
			t.Fatalf("new client's login %d with the store full: %d, want %d", i+1, rec.Code, want)
		}
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] += m.GetCounter().GetValue()
		}
	}
	if got["sluice_store_evictions_total"] != ids+1-maxKeys || got["sluice_failure_mode_decisions_total"] != 0 {
		t.Fatalf("evictions %v, failure-mode answers %v; want %d, 0", got["sluice_store_evictions_total"], got["sluice_failure_mode_decisions_total"], ids+1-maxKeys)
	}
}

// TestMemoryMaxKeysDefault: the in-memory store is capped as in local
// mode unless WithMemoryMaxKeys says otherwise (0: no cap).
func TestMemoryMaxKeysDefault(t *testing.T) {
	ok := policyOptions(t, []named{{"p", "limits: [{name: l, fixedWindow: {limit: 1, window: 1m}}]"}})
	for _, c := range []struct {
		name string
		opts []middleware.Option
		want int
	}{
		{"default", nil, memstore.DefaultMaxKeys},
		{"WithMemoryStore", []middleware.Option{middleware.WithMemoryStore()}, memstore.DefaultMaxKeys},
		{"WithMemoryMaxKeys", []middleware.Option{middleware.WithMemoryMaxKeys(5000)}, 5000},
		{"no cap", []middleware.Option{middleware.WithMemoryStore(), middleware.WithMemoryMaxKeys(0)}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := middleware.MemoryMaxKeys(newLimiter(t, append(ok, c.opts...)...)); got != c.want {
				t.Fatalf("the memory store holds at most %d buckets, want %d", got, c.want)
			}
		})
	}
}
