package check

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Buckets are an operator's operations on one policy's bucket (a key
// value): its limits' state without counting, a reset of it, a ban
// lifted, the bans listed. The admin API calls them; they name the bucket
// directly, where a check renders it from a request. What the store
// cannot do (its Backend has no Resetter, no BanIndex) is ErrUnsupported.
type Buckets struct {
	checker  *Checker
	resetter ratelimit.Resetter
	bans     ratelimit.BanIndex
}

// ErrUnknownLimit is returned when a reset names no limit of the policy.
var ErrUnknownLimit = errors.New("no such limit")

// ErrUnsupported is returned when the store cannot do what was asked
// (reset, lift, or list bans).
var ErrUnsupported = errors.New("not supported by this store")

// inspectHolder names the holder of a concurrency limit's dry run: it
// holds nothing, so the figures are the limit's.
const inspectHolder = "sluice-inspect"

// Inspect evaluates the limits of the bucket of keyValue of policy
// namespace/name without counting anything, as a check of that bucket
// would see them now: whether the next request of the policy's cost would
// be admitted (a dry run of that cost: its verdicts, retry times and the
// ban), with the bucket's figures as they are (what remains now, not what
// the next request would leave).
func (b *Buckets) Inspect(ctx context.Context, namespace, name, keyValue string) (*Outcome, error) {
	c := b.checker
	p, err := c.policyOf(namespace, name)
	if err != nil {
		return nil, err
	}
	cost := p.Cost
	if p.Reserve != nil {
		cost, _ = p.Reserve.Estimate(cost) // what the next request reserves
	}
	out, err := c.dryRunBucket(ctx, p, keyValue, cost)
	if err != nil || !out.Allowed {
		return out, err // a denial's figures are the bucket's as it is
	}
	now, err := c.dryRunBucket(ctx, p, keyValue, 0)
	if err != nil {
		return nil, err
	}
	for i := range out.Limits { // the same entries, in the same order
		lr, n := &out.Limits[i], &now.Limits[i]
		lr.Remaining, lr.Reset, lr.Reserved = n.Remaining, n.Reset, n.Reserved
	}
	return out, nil
}

// dryRunBucket evaluates the bucket of keyValue of p at cost without
// counting anything.
func (c *Checker) dryRunBucket(ctx context.Context, p *policy.Policy, keyValue string, cost int64) (*Outcome, error) {
	start := c.now()
	sc := c.scratch.Get().(*scratch)
	defer c.scratch.Put(sc)
	in := Input{Namespace: p.Namespace, Policy: p.Name, Action: ratelimit.DryRun, Holder: inspectHolder}
	sc.reset(in)
	sc.overrides, sc.now = c.overrides, start
	out := &Outcome{}
	out.reset()
	sc.addKeyed(out, PolicyResult{Policy: p, KeyValue: keyValue}, cost, &Part{}, false)
	if err := c.evaluate(ctx, sc, out, in, start); err != nil {
		return nil, err
	}
	out.judgeParts(1)
	return out, nil
}

// Reset removes the state of the bucket of keyValue of policy
// namespace/name: of the limits named, or of all when none is. Every check
// process forgets its denials of them (a refund's announcement); a ban
// stays (Lift). It returns the names of the limits reset.
func (b *Buckets) Reset(ctx context.Context, namespace, name, keyValue string, limits []string) ([]string, error) {
	c := b.checker
	p, err := c.policyOf(namespace, name)
	if err != nil {
		return nil, err
	}
	if b.resetter == nil {
		return nil, fmt.Errorf("reset: %w", ErrUnsupported)
	}
	if err := KnownLimits(p, limits); err != nil {
		return nil, err
	}
	entries := p.AppendEntries(nil, keyValue, 0)
	var names, keys []string
	kept := entries[:0]
	for i, e := range entries {
		if len(limits) == 0 || slices.Contains(limits, p.Limits[i].Name) {
			kept = append(kept, e)
			names, keys = append(names, p.Limits[i].Name), append(keys, e.Key)
		}
	}
	if err := b.resetter.Reset(ctx, kept); err != nil {
		return nil, fmt.Errorf("reset %s: %w", keyValue, err)
	}
	c.refunded(keys)
	return names, nil
}

// Lift ends the ban of the bucket of keyValue of policy namespace/name,
// drops it from the index of bans, and forgets the denials of the bucket,
// the ban's included, here and (the observer's Lifted) in the other check
// processes.
func (b *Buckets) Lift(ctx context.Context, namespace, name, keyValue string) error {
	c := b.checker
	p, err := c.policyOf(namespace, name)
	if err != nil {
		return err
	}
	if b.resetter == nil {
		return fmt.Errorf("lift: %w", ErrUnsupported)
	}
	entries := p.AppendEntries(nil, keyValue, 0)
	if err := b.resetter.Lift(ctx, entries[0].Key); err != nil {
		return fmt.Errorf("lift %s: %w", keyValue, err)
	}
	if b.bans != nil {
		if err := b.bans.ForgetBan(ctx, namespace, name, keyValue); err != nil {
			return fmt.Errorf("lift %s: %w", keyValue, err)
		}
	}
	keys := make([]string, len(entries))
	for i := range entries {
		keys[i] = entries[i].Key
	}
	c.ForgetLifted(keys)
	if c.observer != nil {
		c.observer.Lifted(keys)
	}
	return nil
}

// Bans lists the bans in force of policy namespace/name, soonest end first.
func (b *Buckets) Bans(ctx context.Context, namespace, name string) ([]ratelimit.Ban, error) {
	c := b.checker
	if _, err := c.policyOf(namespace, name); err != nil {
		return nil, err
	}
	if b.bans == nil {
		return nil, fmt.Errorf("bans: %w", ErrUnsupported)
	}
	return b.bans.Bans(ctx, namespace, name, c.now())
}

func (c *Checker) policyOf(namespace, name string) (*policy.Policy, error) {
	p := c.currentSet().Get(namespace, name)
	if p == nil {
		return nil, fmt.Errorf("%w: %s/%s", ErrUnknownPolicy, namespace, name)
	}
	return p, nil
}

// KnownLimits returns an error wrapping ErrUnknownLimit for the first of
// names that is no limit of p.
func KnownLimits(p *policy.Policy, names []string) error {
	for _, l := range names {
		if !slices.ContainsFunc(p.Limits, func(pl policy.Limit) bool { return pl.Name == l }) {
			return &unknownLimitError{limit: l, policy: p}
		}
	}
	return nil
}

// unknownLimitError is ErrUnknownLimit naming the limit and the policy's.
type unknownLimitError struct {
	limit  string
	policy *policy.Policy
}

func (e *unknownLimitError) Error() string {
	return fmt.Sprintf("limit %q is not a limit of policy %s/%s (its limits: %s)", e.limit, e.policy.Namespace, e.policy.Name, limitNames(e.policy))
}

func (e *unknownLimitError) Is(target error) bool { return target == ErrUnknownLimit }

func limitNames(p *policy.Policy) string {
	names := make([]string, len(p.Limits))
	for i := range p.Limits {
		names[i] = p.Limits[i].Name
	}
	return strings.Join(names, ", ")
}
