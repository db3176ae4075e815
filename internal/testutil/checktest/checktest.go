// Package checktest builds the checker that tests of the endpoints, the
// middleware and the stores start from: the policies a test gives, in
// force over a store, with the check options it varies (timeout, breaker
// cooldown, metrics, clock). Package check's own tests cannot import it
// and have the same in check_test.go.
package checktest

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/storetest"
)

// New returns a checker made with o, whose unset parts New fills in:
// Backend, when it has no store, is an in-memory store on o.Now, closed
// when the test ends (storetest.Redis gives the Redis store); Source, when
// nil, holds policies (check.NewStaticSource, when the test replaces
// them); Observer, when nil, is what checkstack always gives a checker: a
// tally of its decisions (in o.Metrics too) and, when the store keeps an
// index of bans, the bans recorded there. A test gives either a Source or
// policies, not both.
func New(t testing.TB, o check.Options, policies ...*policy.Policy) *check.Checker {
	t.Helper()
	if o.Backend.Store == nil {
		o.Backend = storetest.Memory(t, o.Now).Backend()
	}
	if o.Observer == nil {
		obs := check.Observers{check.NewTally(o.Metrics)}
		if o.Backend.BanIndex != nil {
			obs = append(obs, check.RecordBans(o.Backend.BanIndex, nil))
		}
		o.Observer = obs
	}
	switch {
	case o.Source == nil:
		o.Source = check.NewStaticSource(policies...)
	case len(policies) > 0:
		t.Fatal("checktest.New: both a Source and policies given")
	}
	return check.New(o)
}
