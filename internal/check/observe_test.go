package check

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

// recording is an Observer that keeps what it is told.
type recording struct {
	checks            []observed
	refunded, lifted  [][]string
	inputsWhileTold   []string
	outcomesWhileTold []bool
}

type observed struct {
	action  ratelimit.Action
	decides bool
	err     error
}

func (r *recording) Checked(_ context.Context, ob *Observation) {
	r.checks = append(r.checks, observed{action: ob.Input.Action, decides: ob.Decides(), err: ob.Err})
	r.inputsWhileTold = append(r.inputsWhileTold, ob.Input.Holder)
	r.outcomesWhileTold = append(r.outcomesWhileTold, ob.Outcome.Allowed)
}
func (r *recording) Refunded(keys []string) { r.refunded = append(r.refunded, slices.Clone(keys)) }
func (r *recording) Lifted(keys []string)   { r.lifted = append(r.lifted, slices.Clone(keys)) }

// TestObserverToldOncePerCheck: the observer hears of each check once,
// decided (its input and outcome readable while it is told), a dry run
// excepted; refunds and releases are told as checks that are no
// decisions, and the refund's buckets as refunded; a check refused
// (ErrNoRelease) is told with its error; Observers tells each observer
// the same.
func TestObserverToldOncePerCheck(t *testing.T) {
	a, b := &recording{}, &recording{}
	c := newChecker(t, Options{Observer: Observers{a, b}},
		policytest.Compile(t, "ns", "p", "key: global\nlimits: [{name: l, fixedWindow: {limit: 1, window: 1h}}]"),
		policytest.Compile(t, "ns", "inflight", "key: global\nlimits: [{name: c, concurrency: {limit: 5}}]"))
	ctx := context.Background()
	for _, in := range []Input{
		{Policy: "p"},
		{Policy: "p"}, // denied
		{Policy: "p", Action: ratelimit.DryRun},
		{Policy: "p", Action: ratelimit.Refund},
		{Policy: "inflight", Holder: "r1"},
		{Policy: "inflight", Holder: "r1", Action: ratelimit.Release},
	} {
		in.Namespace, in.Request = "ns", request()
		if _, err := c.Check(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Check(ctx, Input{Namespace: "ns", Policy: "inflight", Request: request()}); !errors.Is(err, ErrNoRelease) {
		t.Fatalf("a concurrency limit without a holder: %v, want ErrNoRelease", err)
	}
	want := []observed{
		{action: ratelimit.Consume, decides: true},
		{action: ratelimit.Consume, decides: true},
		{action: ratelimit.Refund},
		{action: ratelimit.Consume, decides: true},
		{action: ratelimit.Release},
	}
	for _, r := range []*recording{a, b} {
		if len(r.checks) != len(want)+1 || !slices.Equal(r.checks[:len(want)], want) || !errors.Is(r.checks[len(want)].err, ErrNoRelease) {
			t.Fatalf("told of %+v, want %+v and the refusal", r.checks, want)
		}
		if !slices.Equal(r.inputsWhileTold, []string{"", "", "", "r1", "r1", ""}) || !slices.Equal(r.outcomesWhileTold[:4], []bool{true, false, true, true}) {
			t.Fatalf("inputs %q, outcomes %v while told", r.inputsWhileTold, r.outcomesWhileTold)
		}
		if len(r.refunded) != 2 || len(r.refunded[0]) != 1 || r.refunded[0][0] != ratelimit.Key("ns", "p", "global", "l") {
			t.Fatalf("refunded %q, want the refund's key, then the release's", r.refunded)
		}
		if len(r.lifted) != 0 {
			t.Fatalf("lifted %q, want none", r.lifted)
		}
	}
}
