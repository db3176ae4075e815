package check

import (
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Options configure a Checker.
type Options struct {
	// Backend is the store the checks call and what it can do besides
	// (its nodes, resets, index of bans, refunds and denials of its own,
	// evictions), built once where the stack is assembled: wrappers such
	// as the tracing of store calls replace only what they change.
	Backend ratelimit.Backend
	Source  Source
	// Overrides, when set, give the overrides of key values (other
	// numbers for a policy's limits); nil: every key has its policy's.
	Overrides Overrides
	// Timeout bounds each store call; when it passes, the failure mode
	// answers. Default 50ms.
	Timeout time.Duration
	// BreakerThreshold consecutive store failures open the circuit
	// breaker (default 5); while open, one probe per BreakerCooldown
	// (default 1s) goes to the store.
	BreakerThreshold int
	BreakerCooldown  time.Duration
	// DenyCacheSize bounds the cache of denials (default 100,000);
	// negative disables it.
	DenyCacheSize int
	// Metrics, when set, receive the checker's own figures: how long
	// checks and store calls take, store errors, the breakers, the policy
	// revision, the store's evictions. What was decided is counted by an
	// observer (NewTally).
	Metrics *Metrics
	// Observer, when set, is told of every check but dry runs, of the
	// buckets given units back, and of the bans lifted (Observers tells
	// several). It must not block.
	Observer Observer
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives when the store becomes full and when it decides
	// again, once each per episode (default slog.Default()).
	Logger *slog.Logger
}

// New returns a Checker.
func New(o Options) *Checker {
	o = o.withDefaults()
	b := o.Backend
	c := &Checker{store: b.Store, keeper: b.Denials, source: o.Source, overrides: o.Overrides, timeout: o.Timeout, metrics: o.Metrics,
		observer: o.Observer, now: o.Now, full: fullLog{log: o.Logger, full: map[string]bool{}}}
	if b.Evictions != nil && o.Metrics != nil {
		o.Metrics.evictions.Store(&b.Evictions)
	}
	c.breaker = newBreakers(o.BreakerThreshold, o.BreakerCooldown, o.Now, o.Metrics, b.Nodes)
	if o.DenyCacheSize > 0 {
		c.denials = newDenyCache(o.DenyCacheSize)
	}
	c.buckets = &Buckets{checker: c, resetter: b.Resetter, bans: b.BanIndex}
	if b.Refunds != nil {
		b.Refunds.NotifyRefunds(c.refunded)
	}
	c.scratch.New = func() any { return &scratch{} }
	return c
}

// withDefaults is o with its unset fields' defaults.
func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.BreakerThreshold <= 0 {
		o.BreakerThreshold = 5
	}
	if o.BreakerCooldown <= 0 {
		o.BreakerCooldown = time.Second
	}
	if o.DenyCacheSize == 0 {
		o.DenyCacheSize = 100_000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}
