package overrides

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/sluice-dev/sluice/internal/policy"
)

// BenchmarkIndexAt100k measures a lookup among MaxPerPolicy overrides of
// one policy, and reports the memory the index holds for them (compiled)
// as bytes/override.
func BenchmarkIndexAt100k(b *testing.B) {
	p := tenantPolicy(b)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := NewIndex(nil)
	entries := make(map[string]Entry, MaxPerPolicy)
	for i := range MaxPerPolicy {
		k := fmt.Sprintf("tenant-%06d", i)
		entries[k] = Entry{Key: k, Limits: map[string]int64{"per-minute": int64(1000 + i%1000)}, Source: policy.OverrideRuntime}
	}
	x.SetRuntime(shop, entries)
	x.Override(p, "tenant-000000") // compile
	runtime.GC()
	runtime.ReadMemStats(&after)
	keys := []string{"tenant-012345", "tenant-099999", "no-such-tenant"}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if o := x.Override(p, keys[i%3]); (o == nil) != (i%3 == 2) {
			b.Fatal("wrong lookup")
		}
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/MaxPerPolicy, "bytes/override")
	runtime.KeepAlive(x)
}

// BenchmarkIndexPolicyWithout measures the lookup for a policy without
// overrides while another policy has some: the cost every check of such a
// policy pays.
func BenchmarkIndexPolicyWithout(b *testing.B) {
	x := NewIndex(nil)
	x.SetRuntime(PolicyID{"other", "p"}, map[string]Entry{"a": {Key: "a", Limits: map[string]int64{"l": 1}}})
	p := tenantPolicy(b)
	for b.Loop() {
		if x.Override(p, "acme") != nil {
			b.Fatal("an override")
		}
	}
}
