package redisstore_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
	"github.com/sluice-dev/sluice/internal/testutil/redistest"
)

// TestCalendarWindows runs the calendar's windows through the Lua library
// in both invocation modes, from tomorrow on (expiry deadlines are
// absolute: a simulated clock behind the server's would expire what it
// writes at once).
func TestCalendarWindows(t *testing.T) {
	srv := redistest.Start(t)
	from := time.Now().Add(24 * time.Hour)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			ratelimittest.RunCalendar(t, from, func(t *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
				return newStore(t, srv, simOpts(clock, mode))
			})
		})
	}
}
