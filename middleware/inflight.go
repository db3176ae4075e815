package middleware

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// A request the middleware admits holds the units of its concurrency
// limits until its handler returns: normally, by a panic, or because the
// client went away and the handler returned on its context. Each request
// is its own holder, named within the process by a random prefix and a
// counter (the name never leaves the process, so it needs to be unique,
// not unguessable).
var (
	holderPrefix = func() string {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:]) + "-"
	}()
	holderCount atomic.Uint64
)

func nextHolder() string { return holderPrefix + strconv.FormatUint(holderCount.Add(1), 36) }

// admitted is req as it was admitted, for its release: the header map is
// the one the handler receives, and a handler that deletes or rewrites a
// header the key or match reads would otherwise have the release render
// another key (or match nothing) and free nothing, leaving the units to
// their lease timeout. Everything else in a policy.Request is a value.
func admitted(req *policy.Request) *policy.Request {
	c := *req
	c.Header = req.Header.Clone()
	return &c
}

// release frees what holder holds in the limits of req, the request as
// admitted. It runs after the handler, whatever became of the client, so
// ctx does not end with the request's; the checker's store timeout bounds
// it. A release that fails leaves the units to their lease timeout.
func (l *Limiter) release(ctx context.Context, req *policy.Request, holder string) {
	out, err := l.stack.Checker.Check(ctx, check.Input{Namespace: l.namespace, Request: req, Holder: holder, Action: ratelimit.Release})
	if err == nil && out.Degraded {
		err = out.StoreErr
	}
	if err != nil {
		l.logFailure("release of a request's units in flight failed; they come back at their lease timeout", false, err)
	}
}
