package ratelimit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

func TestValidateReserve(t *testing.T) {
	window := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Capacity: 10, Interval: time.Minute}
	conc := ratelimit.Limit{Algorithm: ratelimit.Concurrency, Capacity: 10, Interval: time.Minute}
	entry := func(mod func(e *ratelimit.Entry)) []ratelimit.Entry {
		e := ratelimit.Entry{Key: "k", Limit: window, Cost: 1, Holder: "h", Reserve: time.Minute}
		mod(&e)
		return []ratelimit.Entry{e}
	}
	cases := []struct {
		name   string
		action ratelimit.Action
		mod    func(e *ratelimit.Entry)
		err    string // "" when valid
	}{
		{"reserve", ratelimit.Consume, func(*ratelimit.Entry) {}, ""},
		{"no holder", ratelimit.Consume, func(e *ratelimit.Entry) { e.Holder = "" }, "holder of 0 bytes"},
		{"dry run without a holder", ratelimit.DryRun, func(e *ratelimit.Entry) { e.Holder = "" }, ""},
		{"holder too long", ratelimit.DryRun, func(e *ratelimit.Entry) { e.Holder = strings.Repeat("h", ratelimit.MaxHolderLen+1) }, "holder of 257 bytes"},
		{"negative", ratelimit.Consume, func(e *ratelimit.Entry) { e.Reserve = -time.Second }, "reserve -1s"},
		{"too long", ratelimit.Consume, func(e *ratelimit.Entry) { e.Reserve = ratelimit.MaxReserve + 1 }, "reserve 8784h0m0.000000001s"},
		{"below a µs", ratelimit.Consume, func(e *ratelimit.Entry) { e.Reserve = time.Nanosecond }, "below 1µs"},
		{"concurrency", ratelimit.Consume, func(e *ratelimit.Entry) { e.Limit = conc }, "takes no reservation"},
		{"charged always", ratelimit.Consume, func(e *ratelimit.Entry) { e.ChargeAlways = true }, "not charged always"},
		{"ignored by a refund", ratelimit.Refund, func(e *ratelimit.Entry) { e.Reserve, e.Holder = -1, "" }, ""},
		{"settle", ratelimit.Settle, func(e *ratelimit.Entry) { e.Reserve = 0 }, ""},
		{"settle a concurrency limit", ratelimit.Settle, func(e *ratelimit.Entry) { e.Limit = conc }, ""},
		{"settle without a holder", ratelimit.Settle, func(e *ratelimit.Entry) { e.Holder = "" }, "settlement has a holder of 0 bytes"},
		{"settle more than MaxCount", ratelimit.Settle, func(e *ratelimit.Entry) { e.Cost = ratelimit.MaxCount + 1 }, "cost 1000000001 outside"},
		{"settle a limit that cannot go into debt", ratelimit.Settle, func(e *ratelimit.Entry) {
			e.Limit = ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Capacity: 1000, Rate: 1, Interval: 4_000_000 * time.Second}
		}, "charged always refills"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := ratelimit.Request{Action: c.action, Entries: entry(c.mod)}
			err := req.Validate()
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ratelimit.ErrInvalidRequest)):
				t.Fatalf("got %v, want an invalid request naming %q", err, c.err)
			}
		})
	}
}

func TestSettleAction(t *testing.T) {
	if ratelimit.Settle.String() != "settle" || ratelimit.Settle.Decides() {
		t.Fatalf("Settle: %q, decides %v", ratelimit.Settle.String(), ratelimit.Settle.Decides())
	}
}
