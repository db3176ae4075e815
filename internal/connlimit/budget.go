package connlimit

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
)

// The listeners of a check process; each names its metrics
// (sluice_<listener>_open_connections and the rest) and its share of the
// Budget.
const (
	HTTP = "http" // the check endpoint (--listen)
	GRPC = "grpc" // the gRPC endpoint (--grpc-listen)
)

// endpoints says what each listener serves, in the metrics' help.
var endpoints = map[string]string{
	HTTP: "the check endpoint (HTTP)",
	GRPC: "the gRPC endpoint",
}

// Caps are one listener's connection caps in force; 0 is no cap.
type Caps struct {
	// Listener is HTTP or GRPC.
	Listener string
	// MaxConns caps the listener's connections open at once.
	MaxConns int
	// PerPeer caps the connections of one peer address.
	PerPeer int
}

// Budget is one process's file descriptors as its listeners share them.
//
// Each listener's process cap must fit the open-file limit, and so must
// their total, or a flood of one listener takes the descriptors the
// other, Redis and the policy files need. Together the caps hold at most
// three quarters of the limit: the rest stays free to accept and close
// what is over a cap, to reach Redis and to read files. When the caps
// asked exceed that, the budget is shared max-min fairly: a listener that
// asks less than an equal share keeps what it asks, and the others share
// what it leaves equally. So a flood of one listener never takes the
// other's share, and a small cap asked for one is kept as asked.
type Budget struct {
	caps map[string]Caps
}

// NewBudget fits the caps asked for a process's listeners to its
// open-file limit nofile (0: unknown, nothing lowered), logging each
// lowered cap. A listener asked without a process cap (0: the operator
// turned it off) takes no share and is not capped.
func NewBudget(nofile uint64, log *slog.Logger, asked ...Caps) *Budget {
	b := &Budget{caps: make(map[string]Caps, len(asked))}
	var capped []Caps
	for _, c := range asked {
		if c.MaxConns > 0 {
			capped = append(capped, c)
		} else {
			b.caps[c.Listener] = c
		}
	}
	free := int(min(nofile/4*3, math.MaxInt)) //nolint:gosec // bounded by MaxInt
	if nofile == 0 || fits(capped, free) {
		for _, c := range capped {
			b.caps[c.Listener] = c
		}
		return b
	}
	// Smallest asks first: each gets at most an equal share of what is
	// left, and what it does not take goes to those after it.
	slices.SortStableFunc(capped, func(x, y Caps) int { return cmp.Compare(x.MaxConns, y.MaxConns) })
	for i, c := range capped {
		share := max(free/(len(capped)-i), 1)
		if c.MaxConns > share {
			log.Info("connection cap lowered to fit the open-file limit", "listener", c.Listener,
				"max_connections", share, "asked", c.MaxConns, "open_file_limit", nofile, "listeners", len(capped))
			c.MaxConns = share
		}
		free -= min(free, c.MaxConns)
		b.caps[c.Listener] = c
	}
	return b
}

// fits reports whether the caps together are within free.
func fits(caps []Caps, free int) bool {
	for _, c := range caps {
		if c.MaxConns > free {
			return false
		}
		free -= c.MaxConns
	}
	return true
}

// Caps are the caps in force of listener, and whether it was asked for.
func (b *Budget) Caps(listener string) (Caps, bool) {
	c, ok := b.caps[listener]
	return c, ok
}

// CapFlag parses a cap flag where 0 means none, into *p as a listener's
// Config keeps it (negative: none).
func CapFlag(p *int) func(string) error {
	return func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		if n < 0 {
			return fmt.Errorf("must be 0 (no cap) or more, got %d", n)
		}
		if n == 0 {
			n = -1
		}
		*p = n
		return nil
	}
}

// Resolve is the caps in force of listener asked as a Config keeps them:
// maxConns and perPeer 0 take the defaults, negative ones are no cap.
func Resolve(listener string, maxConns, perPeer, defaultMaxConns, defaultPerPeer int) Caps {
	pick := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return Caps{Listener: listener, MaxConns: pick(maxConns, defaultMaxConns), PerPeer: pick(perPeer, defaultPerPeer)}
}
