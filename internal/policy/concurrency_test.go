package policy

import (
	"strings"
	"testing"
	"time"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

const inFlightDescriptors = `match: {descriptor: [{key: tenant}, {key: request_id}]}
key: '{descriptor:tenant}'
limits:
- {name: in-flight, concurrency: {limit: 2, holder: request_id}}
- {name: minute, fixedWindow: {limit: 100, window: 1m}}
`

func TestConcurrencyCompiles(t *testing.T) {
	p := mustCompile(t, inFlightDescriptors)
	l := p.Limits[0]
	want := ratelimit.Limit{Algorithm: ratelimit.Concurrency, Capacity: 2, Interval: time.Minute} // the schema's default leaseTimeout, also for files
	if l.Limit != want || l.Holder != "request_id" || !p.HoldsInFlight() {
		t.Fatalf("limit %+v holder %q, want %+v held by request_id", l.Limit, l.Holder, want)
	}
	if p.Summary != "in-flight=concurrency(2,lease 1m0s) minute=fixedWindow(100/1m)" {
		t.Errorf("summary %q", p.Summary)
	}
	if q := mustCompile(t, oneLimit); q.HoldsInFlight() {
		t.Error("a policy without a concurrency limit holds in flight")
	}
}

// TestConcurrencyErrors: what the schema's rules refuse, Compile refuses
// too, for local mode's files that no API server saw.
func TestConcurrencyErrors(t *testing.T) {
	descriptors := func(key, holder string) string {
		return "match: {descriptor: [{key: tenant}, {key: request_id}]}\nkey: '" + key + "'\nlimits: [{name: l, concurrency: {limit: 2" + holder + "}}]\n"
	}
	for _, tc := range []struct{ name, spec, field, msg string }{
		{"no holder in a descriptor policy", descriptors("{descriptor:tenant}", ""), "spec.limits[0].concurrency.holder", "names its holder"},
		{"a holder match.descriptor lacks", descriptors("{descriptor:tenant}", ", holder: trace"), "spec.limits[0].concurrency.holder", "one of match.descriptor's keys"},
		{"the holder in the key", descriptors("{descriptor:request_id}", ", holder: request_id"), "spec.limits[0].concurrency.holder", "that the key"},
		{"the whole descriptor as the key", descriptors("{descriptor}", ", holder: request_id"), "spec.limits[0].concurrency.holder", "that the key"},
		{"a holder in an HTTP policy", "limits: [{name: l, concurrency: {limit: 2, holder: x}}]\n", "spec.limits[0].concurrency.holder", "an HTTP policy sets no holder"},
		{"a lease", "lease: {units: 1}\nlimits: [{name: l, concurrency: {limit: 2}}]\n", "spec.lease", "a concurrency limit takes no lease"},
		// Not also: lease.units above the concurrency limit's capacity.
		{"a lease larger than the limit", "lease: {units: 20}\nlimits: [{name: l, concurrency: {limit: 2}}]\n", "spec.lease", "a concurrency limit takes no lease"},
		// Not also: a debt too large for charge Always, period and capacity.
		{"charge Always", "charge: Always\nlimits: [{name: l, concurrency: {limit: 2}}]\n", "spec.charge", "must be Admitted with a concurrency limit (spec.limits[0], l)"},
		{"charge Always, beside a rate", "charge: Always\nlimits: [{name: r, tokenBucket: {capacity: 5, refillRate: 1, refillInterval: 1s}}, {name: l, concurrency: {limit: 2}}]\n", "spec.charge", "(spec.limits[1], l)"},
		{"a cost above the limit", "cost: 3\nlimits: [{name: l, concurrency: {limit: 2}}]\n", "spec.cost", "must not exceed limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileYAML(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.field+":") || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %s: ...%s", err, tc.field, tc.msg)
			}
			// One mistake, one error.
			if agg, ok := err.(utilerrors.Aggregate); ok && len(agg.Errors()) > 1 {
				t.Fatalf("%d errors for one mistake: %v", len(agg.Errors()), err)
			}
		})
	}
}
