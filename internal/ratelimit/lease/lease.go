// Package lease answers hot buckets from memory: a Store wraps another
// ratelimit.Store and, for entries whose policy asks for it
// (ratelimit.Entry.Lease), takes Units of the bucket in one call and
// decides further requests from those units until they are used up or the
// lease's TTL passes. Units not used by then are given back to the bucket
// (a refund, ratelimit.Request's Refund), in the background: when the
// lease expires, when a request needs more than it holds and a new lease
// replaces it, when the policy changes, and when the Store is closed (a
// rolling restart returns what its processes held).
//
// The bound. Every unit a process admits was taken from the bucket with
// the algorithm's own semantics, so the units taken in any window are at
// most what the limit admits exactly in it. A process holds at most Units
// of a bucket at any moment (a new lease tops the held units up to Units,
// never beyond). Units taken in one window and spent in the next are the
// only excess: with P processes, a bucket admits at most its limit plus
// P × Units in any window. Units given back were not admitted, and a
// refund raises a limit's room by at most the units it returns, so the
// bound holds with refunds too: what a window admits is at most its
// limit, plus the units refunds gave back in it, plus those held when it
// began, minus the units given back unspent. A refund that cannot be made
// (the queue is full, the store fails) drops its units: admissions lost,
// at most Units per process and lease, never an excess.
//
// What goes to the wrapped store exactly, as without leases: refunds,
// releases, settlements, dry runs, requests with an entry that is not
// leased (another policy without a lease, shadow, charge Always, a
// reservation: its holder's record lives in the bucket), costs of 0 (a
// peek) and costs above Units. A request of several leased buckets (several leased policies, or
// descriptors) is decided from each one's lease, all or nothing: units
// reserved from one bucket are put back when another denies.
package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// DefaultMaxBuckets bounds the buckets a Store holds leases of.
const DefaultMaxBuckets = 10_000

// Refunds wait in a queue of refundQueue for one goroutine that sends them
// (a check never waits for one), each bounded by refundTimeout; Close
// waits closeTimeout at most for those still queued.
const (
	refundQueue   = 1024
	refundTimeout = time.Second
	closeTimeout  = 2 * time.Second
)

// Options configure a Store.
type Options struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// MaxBuckets bounds the buckets held (default DefaultMaxBuckets); a
	// bucket beyond it is decided by the wrapped store, exactly.
	MaxBuckets int
}

// Store is a ratelimit.Store that answers leased entries from memory.
type Store struct {
	inner ratelimit.Store
	// backend is what inner can do besides checking (Backend).
	backend    ratelimit.Backend
	now        func() time.Time
	maxBuckets int

	mu      sync.RWMutex
	buckets map[string]*bucket

	takes    atomic.Int64
	leased   atomic.Int64
	exact    atomic.Int64
	dropped  atomic.Int64
	refunded atomic.Int64

	// refunds is the queue of unused units to give back (see giveBack);
	// closing holds back senders while Close closes it.
	closing  sync.RWMutex
	closed   bool
	refunds  chan []ratelimit.Entry
	sentBack chan struct{} // closed when the queue is drained after Close

	// notify is told the keys of every refund sent (NotifyRefunds).
	notify atomic.Pointer[func(keys []string)]
	// forgotAll is the last moment every bucket's denial was forgotten
	// (ForgetAllDenials): a take sent before it keeps no denial.
	forgotAll atomic.Int64
}

// New wraps inner's store. Closing the Store does not close inner.
func New(inner ratelimit.Backend, o Options) *Store {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = DefaultMaxBuckets
	}
	s := &Store{inner: inner.Store, backend: inner, now: o.Now, maxBuckets: o.MaxBuckets, buckets: make(map[string]*bucket),
		refunds: make(chan []ratelimit.Entry, refundQueue), sentBack: make(chan struct{})}
	go s.sendRefunds()
	return s
}

// Stats are counts since the Store was made.
type Stats struct {
	// Takes is the store calls made to take leases (a denied take that
	// retried with what was left counts twice).
	Takes int64
	// Leased is the requests decided from leases, Exact those passed on.
	Leased, Exact int64
	// Refunded is the units of leases given back to the wrapped store
	// unused; Dropped those that could not be (the queue was full, the
	// refund failed, or the Store was closed).
	Refunded, Dropped int64
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	return Stats{Takes: s.takes.Load(), Leased: s.leased.Load(), Exact: s.exact.Load(),
		Refunded: s.refunded.Load(), Dropped: s.dropped.Load()}
}

// Close gives back the units of every lease and waits (2s at most) for
// the refunds to be sent; checks after Close are decided exactly as
// before, but their leases' units are dropped. It does not close the
// wrapped store: close that after.
func (s *Store) Close() error {
	s.mu.Lock()
	for _, b := range s.buckets {
		b.mu.Lock()
		s.giveBack(b.sig, b.left)
		b.left = 0
		b.mu.Unlock()
	}
	clear(s.buckets)
	s.mu.Unlock()
	s.closing.Lock()
	if !s.closed {
		s.closed = true
		close(s.refunds)
	}
	s.closing.Unlock()
	select {
	case <-s.sentBack:
	case <-time.After(closeTimeout):
	}
	return nil
}

// giveBack queues a refund of units to each limit of sig (a lease's
// entries), or drops them when the queue is full or closed. It copies
// sig, so the caller may change it afterwards.
func (s *Store) giveBack(sig []ratelimit.Entry, units int64) {
	if units <= 0 || len(sig) == 0 {
		return
	}
	entries := make([]ratelimit.Entry, len(sig))
	for i, e := range sig {
		e.Cost, e.Lease, e.Shadow, e.ChargeAlways = units, ratelimit.Lease{}, false, false
		entries[i] = e
	}
	s.closing.RLock()
	defer s.closing.RUnlock()
	if !s.closed {
		select {
		case s.refunds <- entries:
			return
		default:
		}
	}
	s.dropped.Add(units)
}

// sendRefunds sends the queued refunds one at a time until Close.
func (s *Store) sendRefunds() {
	defer close(s.sentBack)
	var dec ratelimit.Decision
	var keys []string
	for entries := range s.refunds {
		units := entries[0].Cost
		req := ratelimit.Request{Entries: entries, Action: ratelimit.Refund}
		err := s.inner.Check(context.Background(), refundTimeout, &req, &dec)
		if err != nil {
			s.dropped.Add(units) // unknown whether it was applied: never sent twice
		} else {
			s.refunded.Add(units)
		}
		// Applied, or perhaps applied: the bucket may have room that a
		// remembered denial (here or in the caller's cache) says it lacks.
		keys = keys[:0]
		for _, e := range entries {
			keys = append(keys, e.Key)
		}
		s.ForgetDenials(keys)
		if f := s.notify.Load(); f != nil {
			(*f)(keys)
		}
	}
}

// NotifyRefunds has f told the keys of every refund the Store sends (the
// units of its leases it gives back), once sent; keys is valid only during
// the call. The checker forgets its denials of them.
func (s *Store) NotifyRefunds(f func(keys []string)) { s.notify.Store(&f) }

// ForgetDenials drops the denials remembered of the buckets of keys (their
// last failed take): they were refunded, so the next check takes anew.
func (s *Store) ForgetDenials(keys []string) {
	now := s.now()
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, key := range keys {
		name, _ := ratelimit.SplitKey(key)
		if b := s.buckets[name]; b != nil {
			b.mu.Lock()
			b.forget(now)
			b.mu.Unlock()
		}
	}
}

// ForgetAllDenials is ForgetDenials for every bucket.
func (s *Store) ForgetAllDenials() {
	now := s.now()
	for {
		old := s.forgotAll.Load()
		if old >= now.UnixNano() || s.forgotAll.CompareAndSwap(old, now.UnixNano()) {
			break
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, b := range s.buckets {
		b.mu.Lock()
		b.forget(now)
		b.mu.Unlock()
	}
}

// group is the entries of one leased bucket in a request.
type group struct {
	bucket string
	from   int // index of the first entry; a group's entries are adjacent
	n      int
	cost   int64
}

// Check decides req from leases when it can (see the package comment),
// else by the wrapped store.
func (s *Store) Check(ctx context.Context, timeout time.Duration, req *ratelimit.Request, dec *ratelimit.Decision) error {
	var buf [4]group
	groups, ok := s.groups(req, buf[:0])
	if !ok {
		s.exact.Add(1)
		return s.inner.Check(ctx, timeout, req, dec)
	}
	if err := req.Validate(); err != nil {
		return err
	}
	dec.Results = resize(dec.Results, len(req.Entries))
	dec.Allowed = true
	var buf2 [4]reservation
	held := buf2[:0]
	for gi := range groups {
		g := &groups[gi]
		entries := req.Entries[g.from : g.from+g.n]
		b, ok := s.bucket(g.bucket, entries)
		if !ok { // too many buckets held: this request is decided exactly
			s.putBack(held)
			s.exact.Add(1)
			return s.inner.Check(ctx, timeout, req, dec)
		}
		gen, allowed, err := s.reserve(ctx, timeout, b, entries, g.cost, dec.Results[g.from:g.from+g.n])
		if err != nil {
			s.putBack(held)
			return err
		}
		if !allowed {
			dec.Allowed = false
			break
		}
		held = append(held, reservation{b: b, gen: gen, cost: g.cost, entries: entries})
	}
	if !dec.Allowed {
		// All or nothing: units reserved from other buckets go back, and
		// the figures of every entry are those of a denied request.
		s.putBack(held)
		s.deniedFigures(groups, len(held), req, dec)
	}
	s.leased.Add(1)
	return nil
}

// reservation is cost taken from one bucket's lease of generation gen,
// for entries.
type reservation struct {
	b       *bucket
	gen     uint64
	cost    int64
	entries []ratelimit.Entry
}

// groups splits req into leased buckets, or reports that req must go to
// the wrapped store.
func (s *Store) groups(req *ratelimit.Request, gs []group) ([]group, bool) {
	if req.Action != ratelimit.Consume || len(req.Entries) == 0 {
		return nil, false
	}
	for i := range req.Entries {
		e := &req.Entries[i]
		if !e.Lease.Enabled() || e.Shadow || e.ChargeAlways || e.Reserve > 0 || e.Cost < 1 || e.Cost > e.Lease.Units {
			return nil, false
		}
		bucket, _ := ratelimit.SplitKey(e.Key)
		if n := len(gs); n > 0 && gs[n-1].bucket == bucket {
			g := &gs[n-1]
			if e.Cost != g.cost || e.Lease != req.Entries[g.from].Lease {
				return nil, false
			}
			g.n++
			continue
		}
		for j := range gs {
			if gs[j].bucket == bucket {
				return nil, false // entries of one bucket apart: not a policy's
			}
		}
		gs = append(gs, group{bucket: bucket, from: i, n: 1, cost: e.Cost})
	}
	return gs, true
}

// putBack returns reserved units to their leases. Units of a lease that
// was replaced meanwhile go back to the bucket: the new lease holds Units
// already, and a process never holds more.
func (s *Store) putBack(held []reservation) {
	for _, r := range held {
		r.b.mu.Lock()
		if r.b.gen == r.gen {
			r.b.left += r.cost
		} else {
			s.giveBack(r.entries, r.cost)
		}
		r.b.mu.Unlock()
	}
}

// deniedFigures makes the results of the entries whose bucket was not
// the one that denied read as unconsumed: what is left, as a denied
// request reports it (nothing was taken). Entries after the denying
// bucket were not evaluated: they read what their lease holds, if any.
func (s *Store) deniedFigures(groups []group, denier int, req *ratelimit.Request, dec *ratelimit.Decision) {
	now := s.now()
	for gi := range groups {
		g := &groups[gi]
		if gi == denier {
			continue // its results are filled
		}
		s.mu.RLock()
		b := s.buckets[g.bucket]
		s.mu.RUnlock()
		for i := 0; i < g.n; i++ {
			r := &dec.Results[g.from+i]
			*r = ratelimit.Result{Allowed: true}
			if b != nil {
				b.mu.Lock()
				if b.matches(req.Entries[g.from : g.from+g.n]) {
					b.figures(i, now, r)
				}
				b.mu.Unlock()
			}
		}
	}
}

// bucket returns the lease state of a bucket for entries, made afresh
// when the entries' limits or lease changed. ok is false when the Store
// holds MaxBuckets others that are all in use.
func (s *Store) bucket(name string, entries []ratelimit.Entry) (*bucket, bool) {
	s.mu.RLock()
	b := s.buckets[name]
	s.mu.RUnlock()
	if b != nil {
		return b, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b = s.buckets[name]; b != nil {
		return b, true
	}
	if len(s.buckets) >= s.maxBuckets && s.sweepLocked() == 0 {
		return nil, false
	}
	b = &bucket{}
	b.adopt(entries)
	s.buckets[name] = b
	return b, true
}

// sweepLocked forgets buckets with nothing held, no denial to remember and
// no take under way. It is called when the map is full, so its cost is
// spread over many inserts.
func (s *Store) sweepLocked() int {
	now := s.now()
	n := 0
	for name, b := range s.buckets {
		if b.mu.TryLock() {
			if b.idle(now) {
				s.expire(b, now)
				delete(s.buckets, name)
				n++
			}
			b.mu.Unlock()
		}
	}
	return n
}

func resize(r []ratelimit.Result, n int) []ratelimit.Result {
	if cap(r) < n {
		return make([]ratelimit.Result, n)
	}
	return r[:n]
}
