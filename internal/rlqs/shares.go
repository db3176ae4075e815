package rlqs

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Share is what one Envoy holds of one policy's bucket (a key value):
// its last report and its assignment. The admin API's inspect shows them.
type Share struct {
	// Envoy names the client: its address and the stream's number in
	// this process.
	Envoy string
	// Action is the assignment sent: token_bucket, allow_all, deny_all.
	Action string
	// Tokens is the token bucket's tokens_per_fill per Interval and
	// Burst its max_tokens (0 for a blanket rule); Reserved, their sum,
	// is what the assignment took from the limits.
	Tokens, Burst, Reserved int64
	Interval                time.Duration
	// Want is the units the Envoy's demand asked for one interval.
	Want int64
	// Reported is when its last report came; Allowed and Denied are that
	// report's counts.
	Reported        time.Time
	Allowed, Denied uint64
}

// bucketRef names one policy's bucket.
type bucketRef struct{ namespace, policy, keyValue string }

// shares are the assignments of this process's streams, by the policy
// bucket they count in: the weights of fair shares, and what inspect
// shows. Streams of other check processes are not here; their
// reservations reach each assignment through the store.
type shares struct {
	mu sync.Mutex
	by map[bucketRef]map[*stream]Share
}

func newShares() *shares { return &shares{by: map[bucketRef]map[*stream]Share{}} }

// set records st's share of ref.
func (s *shares) set(ref bucketRef, st *stream, sh Share) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.by[ref]
	if m == nil {
		m = map[*stream]Share{}
		s.by[ref] = m
	}
	m[st] = sh
}

// others sums the wants and the reservations of ref's shares but st's.
func (s *shares) others(ref bucketRef, st *stream) (wants, reserved int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for other, sh := range s.by[ref] {
		if other != st {
			wants += sh.Want
			reserved += sh.Reserved
		}
	}
	return wants, reserved
}

// drop removes st's shares of refs.
func (s *shares) drop(st *stream, refs []bucketRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ref := range refs {
		if m := s.by[ref]; m != nil {
			delete(m, st)
			if len(m) == 0 {
				delete(s.by, ref)
			}
		}
	}
}

// of lists the shares of one policy's bucket, by Envoy.
func (s *shares) of(namespace, policy, keyValue string) []Share {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.by[bucketRef{namespace, policy, keyValue}]
	out := make([]Share, 0, len(m))
	for _, sh := range m {
		out = append(out, sh)
	}
	slices.SortFunc(out, func(a, b Share) int { return strings.Compare(a.Envoy, b.Envoy) })
	return out
}
