package middleware

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Usage is what an LLM call used, as its response reports it: input
// tokens (the cached ones included, as OpenAI's prompt_tokens), output
// tokens, and the input tokens read from cache.
type Usage struct {
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
}

// A request admitted by a policy with charge Reserve holds a reservation
// of its estimate (the policy's cost) until its handler returns, when the
// middleware settles it with what the handler reported (ReportUsage or
// ReportCost): the difference is given back or taken. A handler that
// reports nothing (it panicked, the client went away before the usage was
// read, or it does not report) leaves the reservation charged as
// estimated: the call was likely spent.

// usageSlot is where a handler's report waits for the settlement.
type usageSlot struct {
	mu       sync.Mutex
	usage    *policy.Usage
	cost     int64
	reported bool
}

type usageKey struct{}

// ReportUsage tells the middleware what the request's LLM call used, for
// the settlement of its reservations (each policy prices it by its
// reserve.pricing). A later report replaces an earlier one. It returns an
// error for usage no response reports (a negative count, one above a
// billion, more cached than input tokens), which is then not kept, and
// for a request the middleware holds no reservation of (ctx is not the
// request's context, or no policy with charge Reserve admitted it).
func ReportUsage(ctx context.Context, u Usage) error {
	pu := policy.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedInputTokens: u.CachedInputTokens}
	if err := pu.Validate("usage"); err != nil {
		return err
	}
	return report(ctx, func(s *usageSlot) { s.usage, s.cost = &pu, 0 })
}

// ReportCost is ReportUsage with the actual cost itself (0 to a billion),
// the same for every policy with charge Reserve the request met.
func ReportCost(ctx context.Context, cost int64) error {
	if cost < 0 || cost > ratelimit.MaxCount {
		return fmt.Errorf("cost: %d, want 0 to %d", cost, ratelimit.MaxCount)
	}
	return report(ctx, func(s *usageSlot) { s.usage, s.cost = nil, cost })
}

func report(ctx context.Context, set func(*usageSlot)) error {
	s, _ := ctx.Value(usageKey{}).(*usageSlot)
	if s == nil {
		return fmt.Errorf("no reservation to settle: the request was not admitted by a policy with charge Reserve of this middleware")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	set(s)
	s.reported = true
	return nil
}

// settlement is the check that settles the reservations of holder for
// req, from what the handler reported into s.
func (s *usageSlot) settlement(namespace string, req *policy.Request, holder string) check.Input {
	s.mu.Lock()
	defer s.mu.Unlock()
	part := check.Part{Request: req, Usage: s.usage}
	if s.reported && s.usage == nil {
		part.Cost, part.CostSet = s.cost, true
	}
	return check.Input{Namespace: namespace, Parts: []check.Part{part}, Holder: holder, Action: ratelimit.Settle}
}

// settle settles what holder reserved for req, the request as admitted,
// with what the handler reported into s. Like a release, it runs after
// the handler whatever became of the client; one that fails leaves the
// reservation charged as estimated.
func (l *Limiter) settle(ctx context.Context, req *policy.Request, holder string, s *usageSlot) {
	out, err := l.stack.Checker.Check(ctx, s.settlement(l.namespace, req, holder))
	if err == nil && out.Degraded {
		err = out.StoreErr
	}
	if err != nil {
		l.logFailure("settlement of a request's reservation failed; it stays charged as estimated", false, err)
	}
}
