package topkeys

import (
	"context"
	"fmt"
	"time"
)

// Source answers which key values a policy denied and admitted most over
// the last window: a Recorder (this process alone) or a Reader (every
// process, through Redis).
type Source interface {
	Top(ctx context.Context, namespace, policy string, window time.Duration) (*Answer, error)
}

// Answer is the top of one policy over a window.
type Answer struct {
	Namespace, Policy string
	// Window is how far back the lists reach: every minute that
	// overlaps the last Window of time (Window/time.Minute + 1 minutes
	// at most, so up to a minute more than Window).
	Window time.Duration
	// Denied and Admitted are the key values the policy denied and
	// admitted most (at most Capacity each), by count. A shadow policy's
	// denials are in Denied: what it would have denied.
	Denied, Admitted List
}

func newAnswer(namespace, policy string, window time.Duration, denied, admitted List) *Answer {
	return &Answer{Namespace: namespace, Policy: policy, Window: window, Denied: denied, Admitted: admitted}
}

// ErrorBound says in words how far the counts may be from the truth.
func (a *Answer) ErrorBound() string {
	return fmt.Sprintf("each count exceeds the true number of decisions by at most its overestimate; "+
		"overestimates are at most 1/%d of the list's decisions in the window (denied: %d of %d, admitted: %d of %d), "+
		"and a key value decided more often than that is always listed",
		Capacity, a.Denied.Bound(), a.Denied.Total, a.Admitted.Bound(), a.Admitted.Total)
}
