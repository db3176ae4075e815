package admin

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/adminapi"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// TestInspectInFlightBan: inspect of a full concurrency limit says the
// next request would be denied, and of a ban says how long the ban
// lasts, not how long the limit that issued it would wait (its lease
// timeout).
func TestInspectInFlightBan(t *testing.T) {
	stores(t, func(t *testing.T, store ratelimit.Backend) {
		f := inFlightFixture(t, store)
		f.hold("acme", "a")
		var ks adminapi.KeyState
		f.call("GET", "/namespaces/shop/ratelimitpolicies/in-flight/keys?key=acme", "", &ks)
		if l := ks.Limits[0]; l.Allowed || l.Remaining != 0 || l.RetryAfter != "1h0m0s" || ks.Ban != nil {
			t.Fatalf("inspect of a full limit: %+v, ban %+v; want denied, retry after the lease timeout, no ban", l, ks.Ban)
		}
		if out := f.hold("acme", "b"); out.Allowed || out.Policies[0].Ban == 0 {
			t.Fatalf("the second holder: %+v; want denied and banned", out.Limits[0])
		}
		ks = adminapi.KeyState{}
		f.call("GET", "/namespaces/shop/ratelimitpolicies/in-flight/keys?key=acme", "", &ks)
		if ks.Ban == nil || ks.Ban.Remaining != "1m0s" || ks.Limits[0].Allowed {
			t.Fatalf("inspect during the ban: %+v, ban %+v; want denied, the ban's 1m left", ks.Limits, ks.Ban)
		}
	})
}
