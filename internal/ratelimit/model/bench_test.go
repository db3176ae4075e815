package model_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// BenchmarkCheck: one algorithm step on a live state (a mix of admitted and
// denied calls), committing the new state when admitted.
func BenchmarkCheck(b *testing.B) {
	for _, l := range []ratelimit.Limit{
		{Algorithm: ratelimit.TokenBucket, Capacity: 100, Rate: 10, Interval: time.Second},
		{Algorithm: ratelimit.FixedWindow, Capacity: 100, Interval: time.Second},
		{Algorithm: ratelimit.SlidingWindowLog, Capacity: 100, Interval: time.Second},
		{Algorithm: ratelimit.SlidingWindowCounter, Capacity: 100, Interval: time.Second},
		{Algorithm: ratelimit.LeakyBucket, Capacity: 100, Rate: 10, Interval: time.Second},
		{Algorithm: ratelimit.GCRA, Capacity: 100, Rate: 10, Interval: time.Second},
		{Algorithm: ratelimit.FixedWindowClock, Capacity: 100, Interval: time.Second},
	} {
		b.Run(l.Algorithm.String(), func(b *testing.B) {
			p, err := model.Compile(l)
			if err != nil {
				b.Fatal(err)
			}
			var st model.State
			now := int64(1_700_000_000_000_000)
			allowed := 0
			for b.Loop() {
				now += 5_000 // 200 calls/s against 10/s: mostly denied once full
				v, next := model.Check(p, &st, now, 1)
				if v.Allowed {
					st = next
					allowed++
				}
			}
			b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
		})
	}
}
