package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

func TestPenaltyCompiles(t *testing.T) {
	p := mustCompile(t, "penalty: {denials: 5, within: 1m, ban: 1m, maxBan: 1h}\n"+oneLimit)
	want := ratelimit.Penalty{Denials: 5, Within: time.Minute, Ban: time.Minute, MaxBan: time.Hour}
	if p.Penalty != want {
		t.Fatalf("penalty = %+v, want %+v", p.Penalty, want)
	}
	for _, e := range p.AppendEntries(nil, "k", p.Cost) {
		if e.Penalty != want {
			t.Fatalf("entry %s penalty = %+v, want %+v", e.Key, e.Penalty, want)
		}
	}
	if q := mustCompile(t, oneLimit); q.Penalty.Enabled() {
		t.Fatalf("a policy without spec.penalty has a penalty box: %+v", q.Penalty)
	}
}

// TestPenaltyErrors: what the schema's rules refuse, Compile refuses too,
// for local mode's files that no API server saw.
func TestPenaltyErrors(t *testing.T) {
	for _, tc := range []struct{ name, spec, field, msg string }{
		{"ban above maxBan", "penalty: {denials: 5, within: 1m, ban: 2h, maxBan: 1h}\n" + oneLimit, "spec.penalty.ban", "ban must not exceed maxBan"},
		{"zero denials", "penalty: {denials: 0, within: 1m, ban: 1m, maxBan: 1h}\n" + oneLimit, "spec.penalty.denials", "must be from 1"},
		{"no maxBan", "penalty: {denials: 5, within: 1m, ban: 1m}\n" + oneLimit, "spec.penalty.maxBan", "must be a duration"},
		{"a year and more", "penalty: {denials: 5, within: 1m, ban: 1m, maxBan: 9000h}\n" + oneLimit, "spec.penalty.maxBan", "between 1ms and 8784h"},
		{"with a lease", "lease: {units: 2}\npenalty: {denials: 5, within: 1m, ban: 1m, maxBan: 1h}\n" + oneLimit, "spec.penalty", "a lease cannot serve a penalty box"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileYAML(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.field+":") || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %s: ...%s", err, tc.field, tc.msg)
			}
		})
	}
}
