package topkeys

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// streamCase is one randomized run: n decisions over distinct key values,
// skewed as traffic is (Zipf) or flat, so some runs have heavy key values
// and some none.
type streamCase struct {
	n        int
	distinct uint64
	skew     float64
}

func (c streamCase) String() string {
	return fmt.Sprintf("%d decisions over %d values, skew %v", c.n, c.distinct, c.skew)
}

func drawCase(rng *rand.Rand, run int) streamCase {
	return streamCase{n: 1 + rng.IntN(20_000), distinct: uint64(2 + rng.IntN(5_000)), skew: []float64{0, 1.05, 1.3, 2}[run%4]}
}

// stream draws c's decisions.
func stream(rng *rand.Rand, c streamCase) []string {
	n, distinct, skew := c.n, c.distinct, c.skew
	keys := make([]string, n)
	var zipf *rand.Zipf
	if skew > 1 {
		zipf = rand.NewZipf(rng, skew, 1, distinct-1)
	}
	for i := range keys {
		var k uint64
		if zipf != nil {
			k = zipf.Uint64()
		} else {
			k = rng.Uint64N(distinct)
		}
		keys[i] = fmt.Sprint("key-", k)
	}
	return keys
}

// checkGuarantees holds a list to the stated bound against the exact
// counts: every key value above Total/Capacity is listed; each count is
// an upper bound, count minus overestimate a lower one, and the
// overestimate at most Total/Capacity.
func checkGuarantees(t *testing.T, list List, exact map[string]int64) {
	t.Helper()
	var total int64
	for _, n := range exact {
		total += n
	}
	if list.Total != total {
		t.Fatalf("total %d, want %d", list.Total, total)
	}
	if len(list.Entries) > Capacity {
		t.Fatalf("%d entries, more than %d", len(list.Entries), Capacity)
	}
	listed := map[string]bool{}
	for _, e := range list.Entries {
		listed[e.Key] = true
		truth := exact[e.Key]
		if e.Count < truth || e.Count-e.Overestimate > truth {
			t.Errorf("%s: count %d, overestimate %d, true %d", e.Key, e.Count, e.Overestimate, truth)
		}
		if e.Overestimate < 0 || e.Overestimate > list.Bound() {
			t.Errorf("%s: overestimate %d beyond the bound %d", e.Key, e.Overestimate, list.Bound())
		}
	}
	for k, n := range exact {
		if n > list.Bound() && !listed[k] {
			t.Errorf("%s decided %d times, above the bound %d (total %d), is not listed", k, n, list.Bound(), total)
		}
	}
}

func TestSketchGuarantees(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		c := drawCase(rng, run)
		var s sketch
		exact := map[string]int64{}
		for _, k := range stream(rng, c) {
			s.add(k)
			exact[k]++
		}
		checkGuarantees(t, Merge(s.summary()), exact)
		if t.Failed() {
			t.Fatalf("run %d: %s", run, c)
		}
	}
}

// TestMergeGuarantees: a stream split at random between parts (the
// processes and minutes of a window), each sketched on its own, merges
// into a list that keeps the bound of the whole stream.
func TestMergeGuarantees(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for run := range 200 {
		c := drawCase(rng, run)
		parts := make([]sketch, 1+rng.IntN(8))
		exact := map[string]int64{}
		for _, k := range stream(rng, c) {
			// Some parts see a key value more than others, as a
			// process behind a sticky balancer does.
			p := rng.IntN(len(parts))
			if len(k)%3 == 0 {
				p = 0
			}
			parts[p].add(k)
			exact[k]++
		}
		summaries := make([]Summary, len(parts))
		for i := range parts {
			summaries[i] = parts[i].summary()
		}
		checkGuarantees(t, Merge(summaries...), exact)
		if t.Failed() {
			t.Fatalf("run %d: %s, in %d parts", run, c, len(parts))
		}
	}
}

// Below Capacity distinct key values, the counts are exact.
func TestFewKeysAreExact(t *testing.T) {
	var s sketch
	for i := range Capacity {
		for range i + 1 {
			s.add(fmt.Sprint(i))
		}
	}
	list := Merge(s.summary())
	for i, e := range list.Entries {
		if want := int64(Capacity - i); e.Count != want || e.Overestimate != 0 || e.Key != fmt.Sprint(want-1) {
			t.Fatalf("entry %d: %+v, want %d exact", i, e, want)
		}
	}
}
