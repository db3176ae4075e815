package check

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/testutil/policytest"
)

// BenchmarkMatching: an allowing check on the memory store in a namespace
// of one policy, and of the same policy among 999 that do not match the
// request (each its own host, or its own path prefix on the request's
// host). Compare the two: the namespace's index leaves the check to the
// policies the request can match.
func BenchmarkMatching(b *testing.B) {
	const limit = "limits: [{name: l, fixedWindow: {limit: 1000000000, window: 1h}}]"
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("policies=%d", n), func(b *testing.B) {
			ps := []*policy.Policy{policytest.Compile(b, "ns", "match", "match: {hosts: [h], paths: ['/*']}\nkey: '{client_ip}'\n"+limit)}
			for i := 1; i < n; i++ {
				match := fmt.Sprintf("{hosts: [h], paths: ['/svc%d/*']}", i)
				if i%2 == 0 {
					match = fmt.Sprintf("{hosts: [t%d.example.com], paths: ['/*']}", i)
				}
				ps = append(ps, policytest.Compile(b, "ns", fmt.Sprintf("p%04d", i), "match: "+match+"\nkey: '{client_ip}'\n"+limit))
			}
			checker := newChecker(b, Options{}, ps...)
			in, out := Input{Namespace: "ns", Request: request()}, &Outcome{}
			for b.Loop() {
				if err := checker.CheckInto(context.Background(), in, out); err != nil || !out.Allowed || len(out.Policies) != 1 {
					b.Fatalf("allowed %v, policies %d, err %v", out.Allowed, len(out.Policies), err)
				}
			}
		})
	}
}
