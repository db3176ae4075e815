package redisstore

import (
	"sort"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// compile fills cs's parameters and groups for req.
func (s *Store) compile(req *ratelimit.Request, cs *checkState) {
	n := len(req.Entries)
	cs.params, cs.verdicts = cs.paramBuf[:0], cs.verdictBuf[:0]
	if n > len(cs.paramBuf) {
		cs.params, cs.verdicts = make([]model.Params, 0, n), make([]model.Verdict, 0, n)
	}
	cs.buckets, cs.fields = cs.bucketBuf[:0], cs.fieldBuf[:0]
	if n > len(cs.bucketBuf) {
		cs.buckets, cs.fields = make([]string, 0, n), make([]string, 0, n)
	}
	for i := range req.Entries {
		cs.params = append(cs.params, model.CompileValid(req.Entries[i].Limit))
		bucket, field := ratelimit.SplitKey(req.Entries[i].Key)
		cs.buckets, cs.fields = append(cs.buckets, bucket), append(cs.fields, field)
	}
	cs.verdicts = cs.verdicts[:n]
	s.group(req, cs)
	for _, idx := range cs.groups {
		adjacentBuckets(cs.buckets, idx)
	}
	splitCalls(req, cs)
}

// splitCalls splits the groups of more than ratelimit.MaxCallEntries
// entries (penalty boxes counted: see callEntries) into calls of at most
// that many, between buckets where it can (a bucket of more limits than a
// call takes is split too: each call reads and writes its own fields).
// The request then takes several calls, decided as a request over several
// Cluster slots is (see check).
func splitCalls(req *ratelimit.Request, cs *checkState) {
	split := false
	for _, idx := range cs.groups {
		split = split || callEntries(req, cs.buckets, idx) > ratelimit.MaxCallEntries
	}
	if !split {
		return
	}
	var groups [][]int
	for _, idx := range cs.groups {
		for callEntries(req, cs.buckets, idx) > ratelimit.MaxCallEntries {
			cut := min(ratelimit.MaxCallEntries, len(idx)-1)
			for callEntries(req, cs.buckets, idx[:cut]) > ratelimit.MaxCallEntries {
				cut--
			}
			for c := cut; c > 0; c-- {
				if cs.buckets[idx[c]] != cs.buckets[idx[c-1]] {
					cut = c // idx[c] begins a bucket
					break
				}
			}
			groups = append(groups, idx[:cut:cut])
			idx = idx[cut:]
		}
		groups = append(groups, idx)
	}
	cs.groups, cs.consumed = groups, make([]bool, len(groups))
}

// adjacentBuckets reorders idx, stably, so that the entries of one bucket
// are adjacent, as the library wants them. They usually are already (a
// policy's limits come together).
func adjacentBuckets(buckets []string, idx []int) {
	if adjacent(buckets, idx) {
		return
	}
	first := make(map[string]int, len(idx)) // bucket -> position of its first entry
	for p, i := range idx {
		if _, ok := first[buckets[i]]; !ok {
			first[buckets[i]] = p
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return first[buckets[idx[a]]] < first[buckets[idx[b]]] })
}

// adjacent reports whether the entries of each bucket in idx are
// adjacent: by scanning back for a few entries, with a set of the buckets
// seen for more (a namespace of many policies gives thousands).
func adjacent(buckets []string, idx []int) bool {
	var seen map[string]struct{}
	if len(idx) > 32 {
		seen = make(map[string]struct{}, len(idx))
		seen[buckets[idx[0]]] = struct{}{}
	}
	for p := 1; p < len(idx); p++ {
		b := buckets[idx[p]]
		if b == buckets[idx[p-1]] {
			continue
		}
		if seen != nil {
			if _, ok := seen[b]; ok {
				return false
			}
			seen[b] = struct{}{}
			continue
		}
		for q := p - 2; q >= 0; q-- {
			if buckets[idx[q]] == b {
				return false
			}
		}
	}
	return true
}

// group splits the entries by Cluster slot, in order of first appearance;
// without Cluster all entries form one group. It sets cs.groups and
// cs.consumed.
func (s *Store) group(req *ratelimit.Request, cs *checkState) {
	n := len(req.Entries)
	if s.cluster == nil {
		idx := cs.idxBuf[:0]
		if n > len(cs.idxBuf) {
			idx = make([]int, 0, n)
		}
		for i := range n {
			idx = append(idx, i)
		}
		cs.groupBuf[0] = idx
		cs.groups, cs.consumed = cs.groupBuf[:], cs.boolBuf[:]
		return
	}
	var slots []uint16
	for i := range req.Entries {
		slot := ratelimit.HashSlot(req.Entries[i].Key)
		g := 0
		for g < len(slots) && slots[g] != slot {
			g++
		}
		if g == len(slots) {
			slots = append(slots, slot)
			cs.groups = append(cs.groups, nil)
		}
		cs.groups[g] = append(cs.groups[g], i)
	}
	cs.consumed = make([]bool, len(cs.groups))
}
