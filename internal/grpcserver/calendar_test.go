package grpcserver

import (
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
)

// TestRLSCalendarQuota: a calendar month is Envoy's MONTH unit, and
// duration_until_reset is the time to the 1st at midnight in its zone.
func TestRLSCalendarQuota(t *testing.T) {
	berlin, err := ratelimit.LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 10, 31, 22, 30, 0, 0, berlin) // 90 minutes before November, summer time over
	e := start(t, memstore.New(memstore.WithClock(func() time.Time { return now })).Backend(), Options{Domains: DomainBindings{"edge": "ns"}}, nil,
		compile(t, "ns", "quota", "match: {domain: edge, descriptor: [{key: api_key}]}\nkey: '{descriptor:api_key}'\nlimits: [{name: month, calendar: {limit: 5, period: Month, timeZone: Europe/Berlin}}]"))
	resp := e.shouldRateLimit(t, &ratelimitv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{rlsDescriptor("api_key", "k1")}})
	st := resp.GetStatuses()[0]
	if resp.GetOverallCode() != rlsOK || st.GetLimitRemaining() != 4 {
		t.Fatalf("%v, remaining %d", codesOf(resp), st.GetLimitRemaining())
	}
	if cl := st.GetCurrentLimit(); cl.GetRequestsPerUnit() != 5 || cl.GetUnit() != ratelimitv3.RateLimitResponse_RateLimit_MONTH {
		t.Errorf("current_limit %v, want 5 per MONTH", cl)
	}
	if d := st.GetDurationUntilReset().AsDuration(); d != 90*time.Minute {
		t.Errorf("duration_until_reset %v, want 1h30m", d)
	}
}
