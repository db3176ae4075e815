// Package topkeys finds the key values a policy admits and denies most, in
// bounded memory whatever the number of distinct values: a space-saving
// sketch (Metwally, Agrawal and El Abbadi, 2005) of Capacity counters per
// policy, outcome and minute, kept by each check process (Recorder),
// published to Redis and merged there with every other process's
// (Publisher, Reader).
//
// The error bound, for the N decisions of one policy and outcome in a
// window: a listed count is at least the true count and exceeds it by at
// most the overestimate it carries, which is at most N/Capacity; every key
// value decided more than N/Capacity times is listed. Merging keeps both
// (see Merge), so the bound is the same for one process and for many.
package topkeys

import (
	"cmp"
	"slices"
)

// Capacity is the number of counters of one sketch (k): the most key
// values a list holds, and what bounds its error (N/Capacity).
const Capacity = 32

// Entry is one key value of a list.
type Entry struct {
	Key string `json:"key"`
	// Count is at least the number of decisions of Key, and at most
	// Overestimate above it.
	Count        int64 `json:"count"`
	Overestimate int64 `json:"overestimate"`
}

// Summary is a sketch's content, as published and merged.
type Summary struct {
	// Total is the number of decisions the sketch counted.
	Total int64 `json:"t"`
	// Floor bounds the count of a key value the sketch does not hold: its
	// smallest count once every counter is taken, else 0.
	Floor   int64   `json:"f"`
	Entries []Entry `json:"e"`
}

// sketch is a space-saving sketch: up to Capacity counters, a min-heap on
// their counts. A key value it holds is counted exactly from then on; a new
// one takes the smallest counter and inherits its count as overestimate.
// Counts sum to total, so the smallest is at most total/Capacity.
type sketch struct {
	total int64
	held  map[string]*counter
	heap  []*counter
}

type counter struct {
	Entry
	pos int
}

func (s *sketch) add(key string) {
	s.total++
	if c, ok := s.held[key]; ok {
		c.Count++
		s.down(c.pos)
		return
	}
	if s.held == nil {
		s.held = make(map[string]*counter, Capacity)
	}
	if len(s.heap) < Capacity {
		c := &counter{Entry: Entry{Key: key, Count: 1}, pos: len(s.heap)}
		s.heap = append(s.heap, c)
		s.held[key] = c
		s.up(c.pos)
		return
	}
	c := s.heap[0]
	delete(s.held, c.Key)
	c.Key, c.Overestimate = key, c.Count
	c.Count++
	s.held[key] = c
	s.down(0)
}

// reset empties s, keeping its storage.
func (s *sketch) reset() {
	s.total = 0
	clear(s.held)
	clear(s.heap)
	s.heap = s.heap[:0]
}

func (s *sketch) summary() Summary {
	sum := Summary{Total: s.total, Entries: make([]Entry, len(s.heap))}
	for i, c := range s.heap {
		sum.Entries[i] = c.Entry
	}
	if len(s.heap) == Capacity {
		sum.Floor = s.heap[0].Count
	}
	return sum
}

func (s *sketch) less(i, j int) bool { return s.heap[i].Count < s.heap[j].Count }

func (s *sketch) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.heap[i].pos, s.heap[j].pos = i, j
}

func (s *sketch) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			return
		}
		s.swap(i, parent)
		i = parent
	}
}

func (s *sketch) down(i int) {
	for {
		smallest, l, r := i, 2*i+1, 2*i+2
		if l < len(s.heap) && s.less(l, smallest) {
			smallest = l
		}
		if r < len(s.heap) && s.less(r, smallest) {
			smallest = r
		}
		if smallest == i {
			return
		}
		s.swap(i, smallest)
		i = smallest
	}
}

// List is the merge of summaries: the key values decided most, by count,
// and the total they were drawn from.
type List struct {
	Entries []Entry
	Total   int64
}

// Bound is the most any listed count exceeds the truth by: Total/Capacity.
// A key value decided more than Bound times is listed.
func (l List) Bound() int64 { return l.Total / Capacity }

// Merge combines summaries of parts of one stream (the minutes of a
// window, the sketches of several processes) into the Capacity key values
// with the highest counts. A key value a part does not hold may have been
// decided up to that part's Floor times there, so it is counted as Floor
// in that part, overestimate included: each count stays an upper bound,
// and count minus overestimate a lower one. The overestimates are at most
// the sum F of the floors, each at most its part's total/Capacity, so at
// most Total/Capacity. Keeping the Capacity highest counts is the merge of
// Misra-Gries summaries (Agarwal et al., "Mergeable summaries", 2012; a
// space-saving sketch is one, shifted by its floor): what it drops counts
// at most F plus (Total - Capacity*F)/(Capacity+1), which is at most
// Total/Capacity, so no key value above that is dropped.
func Merge(parts ...Summary) List {
	var list List
	var floors int64
	above := map[string]*Entry{} // each key's counts above the floors
	for _, p := range parts {
		list.Total += p.Total
		floors += p.Floor
		for _, e := range p.Entries {
			a := above[e.Key]
			if a == nil {
				a = &Entry{Key: e.Key}
				above[e.Key] = a
			}
			a.Count += e.Count - p.Floor
			a.Overestimate += e.Overestimate - p.Floor
		}
	}
	list.Entries = make([]Entry, 0, len(above))
	for _, a := range above {
		list.Entries = append(list.Entries, Entry{Key: a.Key, Count: a.Count + floors, Overestimate: a.Overestimate + floors})
	}
	slices.SortFunc(list.Entries, func(a, b Entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if len(list.Entries) > Capacity {
		list.Entries = list.Entries[:Capacity]
	}
	return list
}
