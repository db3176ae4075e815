package httpserve

import (
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// DefaultDrainTimeout bounds the drain before a shutdown (Config.DrainTimeout).
// With the manifests' preStop pause (5 s) and the shutdown's 10 s for
// requests in flight, it fits the pods' 30 s grace period.
const DefaultDrainTimeout = 10 * time.Second

// drainQuiet ends a drain early: a second without a request means the
// clients have moved on (or were idle all along).
const drainQuiet = time.Second

// drainer moves keep-alive clients off a server that is about to stop.
//
// Closing an idle keep-alive connection races with the client, which may
// be sending its next request on it at that moment: the request is lost
// (the client reads an EOF or a reset) unless the client retries. So
// before it closes anything, the server answers every request with
// "Connection: close": each client finishes the request it sent, reads
// the answer, and opens its next connection, which reaches another
// replica once the endpoint is removed. Only connections that sent nothing
// for the whole drain are closed under their clients, as any idle timeout
// would.
type drainer struct {
	draining    atomic.Bool
	lastRequest atomic.Int64 // UnixNano of the last answer while draining
}

// wrap answers with next, closing the connection after the answer while
// draining.
func (d *drainer) wrap(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		next(ctx)
		if d.draining.Load() {
			ctx.SetConnectionClose()
			d.lastRequest.Store(time.Now().UnixNano())
		}
	}
}

// drain closes every connection after its next answer and returns when
// none is open, when none has sent a request for drainQuiet, or after
// timeout, whichever comes first. open counts the open connections.
func (d *drainer) drain(open func() int32, timeout time.Duration) {
	start := time.Now()
	d.lastRequest.Store(start.UnixNano())
	d.draining.Store(true)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for now := range tick.C {
		if open() == 0 || now.Sub(start) >= timeout || now.Sub(time.Unix(0, d.lastRequest.Load())) >= drainQuiet {
			return
		}
	}
}
