package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

var errWait = errors.New("lease: deadline passed waiting for another check's lease")

// reserve takes cost from b's lease for entries (one bucket), taking a new
// lease through the wrapped store when the held units do not suffice.
// Only one caller takes at a time; the others wait for its outcome. It
// fills results and reports the lease's generation and whether the
// bucket admits the request.
func (s *Store) reserve(ctx context.Context, timeout time.Duration, b *bucket, entries []ratelimit.Entry, cost int64, results []ratelimit.Result) (uint64, bool, error) {
	b.mu.Lock()
	if !b.matches(entries) {
		// The policy changed: what was held was taken for the old limits,
		// and goes back to them.
		s.giveBack(b.sig, b.left)
		b.adopt(entries)
	}
	for {
		now := s.now()
		s.expire(b, now)
		if b.left >= cost {
			b.left -= cost
			for i := range results {
				b.figures(i, now, &results[i])
			}
			gen := b.gen
			b.mu.Unlock()
			return gen, true, nil
		}
		if now.Before(b.deniedUntil) {
			b.recallDenial(now, results)
			b.mu.Unlock()
			return 0, false, nil
		}
		if t := b.taking; t != nil {
			b.mu.Unlock()
			if err := wait(ctx, timeout, t.done); err != nil {
				return 0, false, err
			}
			if t.err != nil {
				return 0, false, t.err
			}
			b.mu.Lock()
			continue
		}
		renewed, err := s.renew(ctx, timeout, b, entries, cost, results)
		if err != nil || !renewed {
			b.mu.Unlock()
			return 0, false, err
		}
	}
}

// renew replaces b's lease with a new one from the wrapped store. It is
// called with b.mu held and returns with it held; meanwhile it releases it,
// with b.taking set, for the store to answer. The units held cannot serve
// cost: they go back and a whole new lease is taken, so a process never
// holds more than Units and a denial's retry time is exactly the bucket's
// for cost. renewed is false when the store denied: results are its
// answer, remembered for the checks that come meanwhile.
func (s *Store) renew(ctx context.Context, timeout time.Duration, b *bucket, entries []ratelimit.Entry, cost int64, results []ratelimit.Result) (renewed bool, err error) {
	s.giveBack(b.sig, b.left)
	b.left = 0
	b.gen++
	t := &take{done: make(chan struct{})}
	b.taking = t
	b.mu.Unlock()
	got, sent, recv, dec, err := s.take(ctx, timeout, entries, entries[0].Lease.Units, cost)
	b.mu.Lock()
	b.taking, t.err = nil, err
	close(t.done)
	if err != nil {
		return false, err
	}
	if !b.matches(entries) {
		// The entries' policy changed while the store answered: the
		// units were taken for these entries and are used for them.
		b.adopt(entries)
	}
	if got > 0 {
		b.left += got
		b.expires = sent.Add(entries[0].Lease.TTL) // counted from before the take: never kept longer
		b.takenAt = recv
		copy(b.atTake, dec.Results)
		return true, nil
	}
	copy(results, dec.Results)
	if d := deniedFor(dec.Results); d > 0 && sent.After(b.forgotAt) && sent.UnixNano() > s.forgotAll.Load() {
		// Kept for the checks that wait or arrive meanwhile, so a
		// denied bucket costs one store call per retry time, not one
		// per check. Until counts from before the call: it can end
		// early (one more take), never late. Not after a refund that
		// came while the take was under way: it may predate the room.
		b.deniedAt, b.deniedUntil = recv, sent.Add(d)
		copy(b.denied, dec.Results)
	}
	return false, nil
}

// expire gives b's units back when its lease has passed its TTL.
func (s *Store) expire(b *bucket, now time.Time) {
	if b.left > 0 && !now.Before(b.expires) {
		s.giveBack(b.sig, b.left)
		b.left = 0
	}
}

// take debits want units (or, when fewer are left, as many as are left
// down to cost) from every limit of entries in the wrapped store, with the
// algorithms' own semantics. It returns the units granted (0 when the
// bucket cannot give even cost), the times around the call and the
// store's decision.
func (s *Store) take(ctx context.Context, timeout time.Duration, entries []ratelimit.Entry, want, cost int64) (int64, time.Time, time.Time, *ratelimit.Decision, error) {
	// Allocated per take, once per Units checks at most.
	req := &ratelimit.Request{Entries: make([]ratelimit.Entry, len(entries))}
	copy(req.Entries, entries)
	dec := &ratelimit.Decision{}
	for attempt := 0; ; attempt++ {
		for i := range req.Entries {
			req.Entries[i].Cost = want
		}
		sent := s.now()
		s.takes.Add(1)
		if err := s.inner.Check(ctx, timeout, req, dec); err != nil {
			return 0, sent, s.now(), nil, fmt.Errorf("take a lease of %d: %w", want, err)
		}
		recv := s.now()
		if dec.Allowed {
			return want, sent, recv, dec, nil
		}
		// Fewer than want are left: a second call takes what is left (at
		// least cost), or with cost itself learns when cost will fit,
		// since the retry time of a larger take would keep this process
		// denying longer than the bucket does. Two calls at most, and
		// only when the bucket is nearly empty.
		rest := want
		for _, r := range dec.Results {
			rest = min(rest, r.Remaining)
		}
		rest = max(rest, cost)
		if attempt > 0 || rest >= want {
			return 0, sent, recv, dec, nil
		}
		want = rest
	}
}

// deniedFor is how long the denial of results stands: the longest of its
// denying results' (ratelimit.Result.DeniedFor: a ban until its end, a
// limit until its retry); 0 when one never admits, so such a denial is
// not kept.
func deniedFor(results []ratelimit.Result) time.Duration {
	var d time.Duration
	for _, r := range results {
		if !r.Allowed {
			if r.RetryAfter == ratelimit.Never {
				return 0
			}
			d = max(d, r.DeniedFor())
		}
	}
	return d
}

// left is what remains of d, measured from at, at now.
func left(d time.Duration, at, now time.Time) time.Duration {
	return max(d-now.Sub(at), 0)
}

// wait waits for done, the context or the timeout.
func wait(ctx context.Context, timeout time.Duration, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	default:
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return errWait
	}
}
