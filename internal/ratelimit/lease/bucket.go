package lease

import (
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// bucket is one process's lease of one bucket.
type bucket struct {
	mu sync.Mutex
	// sig is the entries the lease was taken for (keys, limits, lease):
	// units taken for other limits are not used for these.
	sig []ratelimit.Entry
	// left is the units held, in requests' cost; until expires.
	left    int64
	expires time.Time
	// gen counts the leases taken: units put back go only to the lease
	// they were reserved from.
	gen uint64
	// atTake is the store's figures when the lease was taken, at takenAt.
	atTake  []ratelimit.Result
	takenAt time.Time
	// denied is the store's answer to the last take that got nothing, at
	// deniedAt, kept until deniedUntil.
	denied      []ratelimit.Result
	deniedAt    time.Time
	deniedUntil time.Time
	// forgotAt is the last refund of the bucket (forget): a take sent
	// before it keeps no denial.
	forgotAt time.Time
	// taking is the take under way, nil when none.
	taking *take
}

// take is one call to the wrapped store under way for a bucket; done is
// closed when it returns, and err is then its error.
type take struct {
	done chan struct{}
	err  error
}

// adopt makes b a lease of entries, holding nothing. A take under way
// stays.
func (b *bucket) adopt(entries []ratelimit.Entry) {
	b.sig = append(b.sig[:0], entries...)
	for i := range b.sig {
		b.sig[i].Cost = 0
	}
	b.left, b.expires = 0, time.Time{}
	b.gen++
	b.atTake = resize(b.atTake, len(entries))
	clear(b.atTake)
	b.denied = resize(b.denied, len(entries))
	b.deniedAt, b.deniedUntil = time.Time{}, time.Time{}
}

// forget drops the remembered denial: a refund made room at now.
func (b *bucket) forget(now time.Time) {
	b.deniedUntil = time.Time{}
	if now.After(b.forgotAt) {
		b.forgotAt = now
	}
}

// matches reports whether entries are those b's lease was taken for.
func (b *bucket) matches(entries []ratelimit.Entry) bool {
	if len(entries) != len(b.sig) {
		return false
	}
	for i := range entries {
		e, s := &entries[i], &b.sig[i]
		if e.Key != s.Key || e.Limit != s.Limit || e.Lease != s.Lease {
			return false
		}
	}
	return true
}

// figures fills r with what this process knows of entry i at now: it
// admits, the units it holds plus what the bucket had left when the lease
// was taken remain (others may have taken some since: the figure is
// approximate), and the bucket's reset as the store reported it then.
func (b *bucket) figures(i int, now time.Time, r *ratelimit.Result) {
	at := &b.atTake[i]
	*r = ratelimit.Result{
		Allowed:   true,
		Remaining: min(b.left+at.Remaining, b.sig[i].Limit.Capacity),
		Reset:     left(at.Reset, b.takenAt, now),
	}
}

// idle reports whether b holds nothing worth keeping at now.
func (b *bucket) idle(now time.Time) bool {
	return b.taking == nil && (b.left == 0 || !now.Before(b.expires)) && !now.Before(b.deniedUntil)
}

// recallDenial fills results with b's remembered denial, its times counted
// down to now.
func (b *bucket) recallDenial(now time.Time, results []ratelimit.Result) {
	for i := range results {
		results[i] = b.denied[i]
		results[i].Reset = left(b.denied[i].Reset, b.deniedAt, now)
		results[i].BanLeft = left(b.denied[i].BanLeft, b.deniedAt, now)
		if !results[i].Allowed && results[i].RetryAfter != ratelimit.Never {
			results[i].RetryAfter = max(left(b.denied[i].RetryAfter, b.deniedAt, now), time.Microsecond)
		}
	}
}
