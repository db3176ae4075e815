package memstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/memstore"
)

var benchLimits = []ratelimit.Limit{
	{Algorithm: ratelimit.TokenBucket, Capacity: 1000, Rate: 100, Interval: time.Second},
	{Algorithm: ratelimit.SlidingWindowCounter, Capacity: 100000, Interval: time.Hour},
	{Algorithm: ratelimit.GCRA, Capacity: 50, Rate: 100, Interval: time.Second},
}

// BenchmarkCheck: one request of one limit, and of three limits on one key
// value (a burst, a quota, a smoother), sequential and from all CPUs over
// 10,000 key values.
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			s := memstore.New()
			b.Cleanup(func() { _ = s.Close() })
			req := request("bench", n)
			var dec ratelimit.Decision
			for b.Loop() {
				if err := s.Check(context.Background(), 0, req, &dec); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("entries=%d/parallel", n), func(b *testing.B) {
			s := memstore.New()
			b.Cleanup(func() { _ = s.Close() })
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				reqs := make([]*ratelimit.Request, 100)
				base := next.Add(1) * 100
				for i := range reqs {
					reqs[i] = request(fmt.Sprint(base+int64(i)), n)
				}
				var dec ratelimit.Decision
				for i := 0; pb.Next(); i++ {
					if err := s.Check(context.Background(), 0, reqs[i%len(reqs)], &dec); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkCheckEvicting: every request brings a key the full store does
// not hold, so each one evicts the least recently used bucket.
func BenchmarkCheckEvicting(b *testing.B) {
	const maxKeys, keys = 10_000, 100_000
	s := memstore.New(memstore.WithMaxKeys(maxKeys))
	b.Cleanup(func() { _ = s.Close() })
	reqs := make([]*ratelimit.Request, keys)
	for i := range reqs {
		reqs[i] = request(fmt.Sprint(i), 1)
	}
	var dec ratelimit.Decision
	i := 0
	for b.Loop() {
		if err := s.Check(context.Background(), 0, reqs[i%keys], &dec); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if s.Evictions() == 0 && i > maxKeys {
		b.Fatal("nothing evicted")
	}
}

func request(value string, n int) *ratelimit.Request {
	req := &ratelimit.Request{}
	for i := range n {
		l := benchLimits[i]
		req.Entries = append(req.Entries, ratelimit.Entry{Key: ratelimit.Key("bench", "p", value, l.Algorithm.String()), Limit: l, Cost: 1})
	}
	return req
}
