package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

func TestLeaseCompiles(t *testing.T) {
	p := mustCompile(t, "lease: {units: 5}\nlimits: [{name: l, fixedWindow: {limit: 10, window: 1m}}, {name: b, tokenBucket: {capacity: 5, refillRate: 1, refillInterval: 1s}}]\n")
	want := ratelimit.Lease{Units: 5, TTL: time.Second} // the schema's default ttl, also for files
	if p.Lease != want {
		t.Fatalf("lease = %+v, want %+v", p.Lease, want)
	}
	for _, e := range p.AppendEntries(nil, "k", p.Cost) {
		if e.Lease != want {
			t.Fatalf("entry %s lease = %+v, want %+v", e.Key, e.Lease, want)
		}
	}
	if q := mustCompile(t, oneLimit); q.Lease.Enabled() {
		t.Fatalf("a policy without spec.lease is leased: %+v", q.Lease)
	}
}

// TestLeaseErrors: what the schema's rules refuse, Compile refuses too, for
// local mode's files that no API server saw.
func TestLeaseErrors(t *testing.T) {
	expectCompileErrors(t, []compileErrorCase{
		{"units above a capacity", "lease: {units: 11}\n" + oneLimit, "spec.lease.units", "must not exceed any limit's capacity: limit l holds 10"},
		{"units below the cost", "cost: 3\nlease: {units: 2}\n" + oneLimit, "spec.lease.units", "must be at least cost"},
		{"zero units", "lease: {units: 0}\n" + oneLimit, "spec.lease.units", "must be from 1"},
		{"a long ttl", "lease: {units: 2, ttl: 2m}\n" + oneLimit, "spec.lease.ttl", "at most 1m"},
		{"a ttl in words", "lease: {units: 2, ttl: soon}\n" + oneLimit, "spec.lease.ttl", "must be a duration"},
		{"charge Always", "charge: Always\nlease: {units: 2}\n" + oneLimit, "spec.lease", "cannot serve charge Always"},
		{"mode Shadow", "mode: Shadow\nlease: {units: 2}\n" + oneLimit, "spec.lease", "cannot serve mode Shadow"},
	})
}

// compileErrorCase is a spec that does not compile, and the field and
// message its error names.
type compileErrorCase struct{ name, spec, field, msg string }

func expectCompileErrors(t *testing.T, cases []compileErrorCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileYAML(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.field+":") || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %s: ...%s", err, tc.field, tc.msg)
			}
		})
	}
}
