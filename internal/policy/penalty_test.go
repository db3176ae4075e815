package policy

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// TestPenaltyCompiles: spec.penalty reaches the policy and every entry
// it makes; without it, no entry has a penalty box.
func TestPenaltyCompiles(t *testing.T) {
	for spec, want := range map[string]ratelimit.Penalty{
		"penalty: {denials: 5, within: 1m, ban: 1m, maxBan: 1h}\n" + oneLimit: {Denials: 5, Within: time.Minute, Ban: time.Minute, MaxBan: time.Hour},
		oneLimit: {},
	} {
		p := mustCompile(t, spec)
		for _, e := range p.AppendEntries(nil, "k", p.Cost) {
			if p.Penalty != want || e.Penalty != want {
				t.Errorf("%s: policy penalty %+v, entry %s %+v; want %+v", spec, p.Penalty, e.Key, e.Penalty, want)
			}
		}
	}
}

// TestPenaltyErrors: what the schema's rules refuse, Compile refuses too,
// for local mode's files that no API server saw.
func TestPenaltyErrors(t *testing.T) {
	expectCompileErrors(t, []compileErrorCase{
		{"ban above maxBan", "penalty: {denials: 5, within: 1m, ban: 2h, maxBan: 1h}\n" + oneLimit, "spec.penalty.ban", "ban must not exceed maxBan"},
		{"zero denials", "penalty: {denials: 0, within: 1m, ban: 1m, maxBan: 1h}\n" + oneLimit, "spec.penalty.denials", "must be from 1"},
		{"no maxBan", "penalty: {denials: 5, within: 1m, ban: 1m}\n" + oneLimit, "spec.penalty.maxBan", "must be a duration"},
		{"a year and more", "penalty: {denials: 5, within: 1m, ban: 1m, maxBan: 9000h}\n" + oneLimit, "spec.penalty.maxBan", "between 1ms and 8784h"},
		{"with a lease", "lease: {units: 2}\npenalty: {denials: 5, within: 1m, ban: 1m, maxBan: 1h}\n" + oneLimit, "spec.penalty", "a lease cannot serve a penalty box"},
	})
}
