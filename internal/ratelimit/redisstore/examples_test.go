package redisstore_test

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestDocumentedExamples runs each algorithm's documented behavior through the Lua
// library on a simulated clock, in both invocation modes.
func TestDocumentedExamples(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			ratelimittest.RunExamples(t, func(t *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
				return newStore(t, srv, simOpts(clock, mode))
			})
		})
	}
}
