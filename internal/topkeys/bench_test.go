package topkeys

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkRecord: one decision recorded, for a key value the sketch
// holds and for a new one each time (which takes the smallest counter).
func BenchmarkRecord(b *testing.B) {
	now := time.Now()
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprint("203.0.", i/256, ".", i%256)
	}
	for _, distinct := range []int{1, len(keys)} {
		b.Run(fmt.Sprintf("distinct=%d", distinct), func(b *testing.B) {
			r := NewRecorder(nil)
			i := 0
			for b.Loop() {
				r.Record("ns", "p", keys[i%distinct], i%4 == 0, now)
				i++
			}
		})
	}
}

// BenchmarkCost reports what one policy costs at most: the memory of its
// ring with every minute's sketches full (key values of 15 bytes, an IPv4
// address), and the bytes one process publishes of a minute.
func BenchmarkCost(b *testing.B) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	start := time.Unix(1_800_000_000, 0)
	var field []byte
	for b.Loop() {
		before := heap()
		r := NewRecorder(nil)
		for m := range ringMinutes {
			at := start.Add(time.Duration(m) * time.Minute)
			for i := range 2 * Capacity {
				key := fmt.Sprintf("203.0.113.%03d", i%Capacity+m)
				r.Record("ns", "p", key, i < Capacity, at)
			}
		}
		b.ReportMetric(float64(heap()-before), "B/policy")
		v, _ := r.policies.Load(policyID{"ns", "p"})
		m := &v.(*ring).minutes[0]
		field, _ = json.Marshal(published{Denied: m.denied.summary(), Admitted: m.admitted.summary()})
		runtime.KeepAlive(r)
	}
	b.ReportMetric(float64(len(field)), "B/published-minute")
}
