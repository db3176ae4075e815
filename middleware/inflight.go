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

// release frees what holder holds in the limits of req. It runs after the
// handler, whatever became of the client, so it does not end with the
// request's context; the checker's store timeout bounds it. A release that
// fails leaves the units to their lease timeout.
func (l *Limiter) release(ctx context.Context, req *policy.Request, holder string) {
	out, err := l.stack.Checker.Check(context.WithoutCancel(ctx), check.Input{Namespace: l.namespace, Request: req, Holder: holder, Action: ratelimit.Release})
	if err == nil && out.Degraded {
		err = out.StoreErr
	}
	if err != nil {
		l.logFailure("release of a request's units in flight failed; they come back at their lease timeout", false, err)
	}
}
