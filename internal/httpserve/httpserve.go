// Package httpserve runs an HTTP server until its context ends and then
// drains it, with the settings every Sluice listener shares.
//
// The server is fasthttp, not net/http: the check endpoint answers a
// proxy's auth hook for every request a cluster serves, and net/http's
// per-request allocations, header maps and background-read goroutine cost
// about as much CPU as the decision itself. A handler that implements
// Native serves its hot routes on fasthttp directly (the check routes);
// every other route is a net/http handler's, through fasthttp's adaptor
// (front.go).
//
// What clients may hold is bounded (Config): connections per process and
// per peer address, the time an idle keep-alive connection stays open;
// and running out of file descriptors pauses accepting instead of ending
// the server (internal/connlimit, which the gRPC endpoint shares).
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluice-dev/sluice/internal/connlimit"
)

// MaxHeaderBytes bounds a request's header section; larger ones get 431.
// Proxies forward the original request's headers to the check endpoint:
// nginx accepts up to 4 × 8 KiB by default, Envoy 60 KiB.
const MaxHeaderBytes = 64 << 10

// Serve serves h on ln with the default Config until ctx ends, then drains
// and shuts down gracefully (Config.Serve). When h implements Native, its
// native routes answer the requests they take.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	return Config{}.Serve(ctx, ln, h)
}

// Serve serves h on ln within c's bounds until ctx ends. Then it drains
// (up to c.DrainTimeout: every answer closes its connection, so clients
// move to another replica between requests rather than lose one to a
// closing connection; drain.go) and shuts down gracefully (up to 10 s for
// requests in flight). Accept errors that a pause may cure (out of file
// descriptors) are retried, never returned.
func (c Config) Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	lim := c.resolve(connlimit.OpenFileLimit())
	lln := connlimit.NewListener(ln, lim.caps, connlimit.NewMetrics(c.Registerer, connlimit.HTTP), c.logger())
	var d drainer
	srv := newServer(d.wrap(newFront(h).serve), lim.idle)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if lim.drain > 0 {
		d.drain(srv.GetOpenConnectionsCount, lim.drain)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.ShutdownWithContext(shutdownCtx)
	// Serve may not have taken the listener yet when ctx ended, and then
	// Shutdown found nothing to close: closing it here ends Serve either way.
	_ = lln.Close()
	if serveErr := <-errc; serveErr != nil { // after a shutdown it says only that Serve stopped
		c.logger().Debug("http server stopped", "err", serveErr)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil // past the deadline, the connections still open end with the process
}

// newServer is the fasthttp server Serve runs.
func newServer(h fasthttp.RequestHandler, idle time.Duration) *fasthttp.Server {
	return &fasthttp.Server{
		Handler: h,
		// A slow client cannot hold a connection with a half-sent request
		// (nor a new one without a request); an idle keep-alive connection
		// is closed after idle (DefaultIdleTimeout says why 2 min).
		ReadTimeout:  10 * time.Second,
		IdleTimeout:  idle,
		WriteTimeout: 10 * time.Second,
		// The connection caps are the listener's (connlimit.Listener); the
		// worker pool's own (Concurrency, 256 Ki) stays above them.
		// The read buffer is the header limit. Idle connections hand their
		// buffers back, so thousands of pooled proxy connections do not each
		// hold 64 KiB.
		ReadBufferSize:    MaxHeaderBytes,
		ReduceMemoryUsage: true,
		// Request header names are read as sent (the adaptor and the
		// native routes canonicalize them as net/http does), and response
		// names are sent as the handler spells them: the drafts'
		// "RateLimit", not "Ratelimit".
		DisableHeaderNamesNormalizing: true,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		// Past the drain, answers still say Connection: close, so a proxy
		// does not send its next request on a connection about to close.
		CloseOnShutdown: true,
		Logger:          debugLogger{},
	}
}

// debugLogger routes fasthttp's connection errors (clients that hang up,
// malformed requests, already answered with 400) to debug level.
type debugLogger struct{}

func (debugLogger) Printf(format string, args ...any) {
	if log := slog.Default(); log.Enabled(context.Background(), slog.LevelDebug) {
		log.Debug("http server", "msg", fmt.Sprintf(format, args...))
	}
}
