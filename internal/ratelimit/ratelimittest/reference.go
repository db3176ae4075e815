package ratelimittest

import (
	"context"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/model"
)

// Reference is the model applied directly, one call at a time, with no
// expiry of its own: the plainest reading of the algorithms, which the
// stores are compared against. It also tells which Redis keys a Redis
// store holds after the same calls, and when each expires (Keys,
// ExpiresAt). Not safe for concurrent use.
type Reference struct {
	Clock  *Clock
	states map[string]model.State
	// res is each limit's reservations.
	res map[string][]model.Reservation
	// penalties is each bucket's penalty box state.
	penalties map[string]model.PenaltyState
	// redis is, per Redis key written, its kind and the µs at which its
	// TTL ends.
	redis map[string]redisKey
}

type redisKey struct {
	log bool // a sorted set (a log); else a hash (a bucket)
	exp int64
}

// NewReference returns an empty Reference reading clock.
func NewReference(clock *Clock) *Reference {
	return &Reference{Clock: clock, states: map[string]model.State{}, res: map[string][]model.Reservation{}, penalties: map[string]model.PenaltyState{}, redis: map[string]redisKey{}}
}

// Check implements ratelimit.Store.
func (r *Reference) Check(_ context.Context, _ time.Duration, req *ratelimit.Request, dec *ratelimit.Decision) error {
	if err := req.Validate(); err != nil {
		return err
	}
	now := r.Clock.Micros()
	verdicts := make([]model.Verdict, len(req.Entries))
	nexts := make([]model.State, len(req.Entries))
	res := make([][]model.Reservation, len(req.Entries))
	for i, e := range req.Entries {
		p, err := model.Compile(e.Limit)
		if err != nil {
			return err
		}
		st := r.states[e.Key]
		if model.Reserves(&e, req.Action) {
			verdicts[i], nexts[i], res[i] = model.ApplyReserved(p, &st, r.res[e.Key], now, &e, req.Action)
		} else {
			verdicts[i], nexts[i] = model.Apply(p, &st, now, &e, req.Action)
		}
	}
	var buckets []string
	var boxes []model.Box
	bucketOf := make([]int, len(req.Entries))
	if req.Action.Decides() {
		for i := range req.Entries {
			bucket, _ := ratelimit.SplitKey(req.Entries[i].Key)
			g := slices.Index(buckets, bucket)
			if g < 0 {
				g = len(buckets)
				buckets, boxes = append(buckets, bucket), append(boxes, model.Box{})
			}
			bucketOf[i] = g
			if boxes[g].Open(&req.Entries[i]) {
				boxes[g].State = r.penalties[bucket]
			}
		}
		model.ApplyBans(bucketOf, boxes, verdicts, nexts, now)
	}
	dec.Allowed = model.Decide(req, verdicts)
	if req.Action.Decides() {
		model.CountDenials(req.Entries, bucketOf, boxes, verdicts, now)
	}
	dec.Results = dec.Results[:0]
	for i, e := range req.Entries {
		v := &verdicts[i]
		dec.Results = append(dec.Results, v.Result(model.Consumed(dec.Allowed, &e)))
		if model.Reserves(&e, req.Action) && model.StoresReserved(dec.Allowed, v, req.Action, res[i]) {
			r.res[e.Key] = res[i]
			bucket, _ := ratelimit.SplitKey(e.Key)
			r.writtenBucket(bucket, model.ReservationsEnd(res[i]))
		}
		if req.Action == ratelimit.Settle && nexts[i].Alg != 0 {
			r.states[e.Key] = nexts[i]
			r.settled(e, v, &nexts[i], now)
			continue
		}
		if !req.Action.Decides() { // a refund, a release, a settlement that moved nothing
			if nexts[i].Alg != 0 {
				r.states[e.Key] = nexts[i]
				r.refunded(e, &nexts[i])
			}
			continue
		}
		if req.Action != ratelimit.DryRun && model.Writes(dec.Allowed, &e, v, &nexts[i]) {
			r.states[e.Key] = nexts[i]
			r.written(e, now+v.ResetAfter)
		}
	}
	if req.Action == ratelimit.Consume {
		for g, b := range boxes {
			if b.Write {
				r.penalties[buckets[g]] = b.Next
				r.writtenBucket(buckets[g], b.Next.Expiry(b.Params))
			}
		}
	}
	return nil
}

// written records what a Redis store writes for entry e's new state,
// which is untouched again at exp (µs): the bucket's expiry moves to exp
// if that is later, and a log's key expires at exp. A key of the other
// kind is replaced (deleted first), so its expiry starts over.
func (r *Reference) written(e ratelimit.Entry, exp int64) {
	bucket, field := ratelimit.SplitKey(e.Key)
	log := e.Limit.Algorithm == ratelimit.SlidingWindowLog
	if log {
		r.redis[e.Key] = redisKey{log: true, exp: exp}
		if field == "" {
			return // a log that is its own bucket: the sorted set alone
		}
	}
	r.writtenBucket(bucket, exp)
}

// writtenBucket records a write to bucket whose state is untouched again
// at exp: the bucket's expiry moves to exp if that is later.
func (r *Reference) writtenBucket(bucket string, exp int64) {
	if k, ok := r.redis[bucket]; ok && !k.log {
		exp = max(exp, k.exp)
	}
	r.redis[bucket] = redisKey{exp: exp}
}

// refunded records what a Redis store writes for a refund that left
// entry e's state next: expiries never move (a refund only brings a state
// closer to untouched), and a log left without entries in its window is
// deleted.
func (r *Reference) refunded(e ratelimit.Entry, next *model.State) {
	if next.Alg == ratelimit.SlidingWindowLog && len(next.Log) == 0 {
		delete(r.redis, e.Key)
	}
}

// settled records what a Redis store writes for a settlement that left
// entry e's state next (v its verdict): a refund's writes when it gave
// back, a charge's when it took.
func (r *Reference) settled(e ratelimit.Entry, v *model.Verdict, next *model.State, now int64) {
	if e.Cost < v.Settled {
		r.refunded(e, next)
		return
	}
	r.written(e, now+v.ResetAfter)
}

// ExpiresAt returns when a Redis store's key (a bucket or a log, see Keys)
// expires after the calls so far, in µs.
func (r *Reference) ExpiresAt(redisKey string) (int64, bool) {
	k, ok := r.redis[redisKey]
	return k.exp, ok
}

// Keys returns the Redis keys a Redis store holds after the calls so far
// (if none has expired): every bucket and log ever written.
func (r *Reference) Keys() []string {
	keys := make([]string, 0, len(r.redis))
	for k := range r.redis {
		keys = append(keys, k)
	}
	return keys
}

// Close implements ratelimit.Store.
func (r *Reference) Close() error { return nil }
