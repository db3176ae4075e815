package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// A descriptor's own limit is a clock-aligned fixed window of its unit,
// matches every descriptor and no HTTP request, and keys its bucket by
// domain, entries and unit, not by the number the request carries.
func TestDescriptorLimit(t *testing.T) {
	p, err := DescriptorLimit("ns", "minute", time.Minute, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := ratelimit.Limit{Algorithm: ratelimit.FixedWindowClock, Capacity: 2, Interval: time.Minute}
	if len(p.Limits) != 1 || p.Limits[0].Limit != want || p.Limits[0].Name != "minute" || p.Limits[0].Window != time.Minute {
		t.Fatalf("limits %+v, want minute=%+v", p.Limits, want)
	}
	if p.Name != DescriptorLimitPolicy || p.Namespace != "ns" || p.Shadow || p.Cost != 1 {
		t.Errorf("policy %s/%s shadow %v cost %d", p.Namespace, p.Name, p.Shadow, p.Cost)
	}
	keyOf := func(p *Policy, r *Request) string {
		t.Helper()
		var e Eval
		e.Reset(r)
		if ok, err := e.Match(p); !ok || err != nil {
			t.Fatalf("%v does not match: %v", r, err)
		}
		v, ok := e.KeyValue(p)
		if !ok {
			t.Fatalf("no key value for %v", r)
		}
		return p.AppendEntries(nil, v, 1)[0].Key
	}
	base := keyOf(p, desc("edge", "a", "1", "b", "2"))
	if !strings.Contains(base, "{ns/@descriptor-limit/") || !strings.HasSuffix(base, "}:minute") {
		t.Errorf("key %q", base)
	}
	hundred, err := DescriptorLimit("ns", "minute", time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	if k := keyOf(hundred, desc("edge", "a", "1", "b", "2")); k != base {
		t.Errorf("another requests_per_unit keys another bucket: %q, %q", k, base)
	}
	hour, err := DescriptorLimit("ns", "hour", time.Hour, 2)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{base: "base"}
	for name, k := range map[string]string{
		"another unit":      keyOf(hour, desc("edge", "a", "1", "b", "2")),
		"another domain":    keyOf(p, desc("edge2", "a", "1", "b", "2")),
		"domain into entry": keyOf(p, desc("edge\x1fa=1", "b", "2")),
		"another value":     keyOf(p, desc("edge", "a", "1", "b", "3")),
		"fewer entries":     keyOf(p, desc("edge", "a", "1")),
	} {
		if prev, dup := seen[k]; dup {
			t.Errorf("%s keys the bucket of %s: %q", name, prev, k)
		}
		seen[k] = name
	}
	var e Eval
	e.Reset(req("GET", "h", "/"))
	if ok, _ := e.Match(p); ok {
		t.Error("a descriptor limit matches an HTTP request")
	}
	// 0 requests per unit: a limit that admits nothing, in the same
	// bucket as any other number.
	zero, err := DescriptorLimit("ns", "minute", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := &zero.Limits[0]; !l.AdmitsNothing() || l.Limit.Capacity != 0 || l.Limit.Interval != time.Minute || l.Window != time.Minute || zero.Summary != "minute=fixedWindow(0/1m0s,clock)" {
		t.Errorf("0 a minute: %+v, summary %q", zero.Limits, zero.Summary)
	}
	if p.Limits[0].AdmitsNothing() {
		t.Error("2 a minute admits nothing")
	}
	if k := keyOf(zero, desc("edge", "a", "1", "b", "2")); k != base {
		t.Errorf("0 requests per unit keys another bucket: %q, %q", k, base)
	}
}
