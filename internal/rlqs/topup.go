package rlqs

import (
	"context"
	"math"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Top-ups: a refilling limit (a token bucket, GCRA, a leaky bucket)
// holds at most its capacity at a report, while it refills all through
// the interval; a reservation at each report alone would serve it at most
// its capacity per interval. So every topUpEvery, a bucket whose Envoy was
// denied with less than it asked takes what the limits have refilled
// since, for the rest of its interval, and Envoy is sent its token bucket
// with the higher rate (Envoy keeps the tokens it holds when only the
// rate changes). The reservation grows by what the new rate admits until
// the next report is due, so the bound is unchanged.

const (
	// topUpEvery is how often the hungry buckets are topped up: a period
	// that does not divide a second, so that a limit refilled by the
	// second is seen soon after, whatever the phase of its refills.
	topUpEvery = 300 * time.Millisecond
	// maxTopUps bounds the buckets one tick tops up: two store calls each.
	maxTopUps = 128
)

// topUp tops up the hungry buckets of st that are served by token
// buckets, and returns their new assignments.
func (st *stream) topUp(ctx context.Context) *rlqsv3.RateLimitQuotaResponse {
	resp := &rlqsv3.RateLimitQuotaResponse{}
	done := 0
	for _, b := range st.buckets {
		if !b.hungry {
			continue
		}
		if done++; done > maxTopUps {
			break
		}
		if a := st.s.topUpBucket(ctx, st, b); a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
		}
	}
	return resp
}

// grow is what a top-up of extra units over secs adds: to a token
// bucket, a rate (its tokens are kept); to a bucket denied all, a fresh
// token bucket, which starts full.
func (b *bucket) grow(extra, secs int64) bucketShape {
	if b.starved {
		return shape(extra, secs)
	}
	rate := extra / secs
	if rate < 1 {
		return bucketShape{}
	}
	return bucketShape{burst: b.share.Burst, rate: rate, reserved: rate * secs}
}

// topUpBucket reserves what b's limits hold now, up to what its Envoy
// asked beyond its reservation, spread over the whole seconds left until
// its next report; nil when there is nothing to add.
func (s *Service) topUpBucket(ctx context.Context, st *stream, b *bucket) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	now := s.opts.Now()
	// The whole seconds the new rate runs until the next report is due.
	secs := int64((b.reported.Add(b.interval).Sub(now) + time.Second - 1) / time.Second)
	if secs < 1 {
		return nil
	}
	servable, unservable := s.matching(st.namespace, b.req)
	if len(servable) == 0 || failureAction(nil, unservable) == actionDenyAll {
		return nil
	}
	part := []check.Part{{Request: b.req, Policies: servable, CostSet: true, Limits: check.EnforcedLimits}}
	out, err := s.opts.Checker.Check(ctx, check.Input{Namespace: st.namespace, Parts: part, Action: ratelimit.DryRun})
	if err != nil || out.Degraded {
		return nil
	}
	left, enforced, _ := room(out)
	if !enforced {
		return nil
	}
	add := b.grow(min(b.share.Want-b.share.Reserved, left), secs)
	if add.reserved == 0 {
		return nil
	}
	part[0].Cost = add.reserved
	out, err = s.opts.Checker.Check(ctx, check.Input{Namespace: st.namespace, Parts: part})
	if err != nil || out.Degraded || !out.Allowed {
		return nil
	}
	b.hold(add.reserved, out, now)
	b.share.Action, b.share.Burst = actionTokenBucket, add.burst
	b.share.Reserved += add.reserved
	b.share.Tokens = min(b.share.Tokens+add.rate, math.MaxUint32)
	b.starved, b.hungry = false, b.share.Reserved < b.share.Want
	s.setShares(st, b, b.share)
	return s.tokenBucket(b.id, b.share, time.Duration(ttlIntervals*b.seconds())*time.Second)
}
