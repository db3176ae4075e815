package httpserve

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Native is implemented by a handler that serves some of its routes on
// fasthttp directly (the check endpoint's check routes).
type Native interface {
	// ServeFastHTTP answers the request in ctx and reports true, or
	// reports false, having touched nothing, for a request that the
	// handler's ServeHTTP is to answer. It must not keep ctx, nor use it
	// as a context: ctx is done as soon as the server begins to shut down,
	// and requests in flight then still finish.
	ServeFastHTTP(ctx *fasthttp.RequestCtx) bool
}

// front serves a handler from fasthttp: its native routes first, when it
// has them, and everything else through fasthttpadaptor, which handles
// all of HTTP's cases for a net/http handler.
type front struct {
	native  Native // nil: none
	adapted fasthttp.RequestHandler
}

func newFront(h http.Handler) *front {
	f := &front{adapted: fasthttpadaptor.NewFastHTTPHandler(netHTTPShape(h))}
	f.native, _ = h.(Native)
	return f
}

func (f *front) serve(ctx *fasthttp.RequestCtx) {
	if f.native != nil && f.serveNative(ctx) {
		return
	}
	f.serveAdapted(ctx)
}

// serveNative is the native route. A panic answers 500 and closes the
// connection, as net/http would close it; http.ErrAbortHandler is
// net/http's quiet way to give up.
func (f *front) serveNative(ctx *fasthttp.RequestCtx) (served bool) {
	defer func() {
		if rec := recover(); rec != nil {
			logPanic(ctx, rec)
			failed(ctx)
			served = true
		}
	}()
	return f.native.ServeFastHTTP(ctx)
}

// serveAdapted is the net/http route. The adaptor re-raises a handler's
// panic, which netHTTPShape has logged with its stack, as one of its own.
func (f *front) serveAdapted(ctx *fasthttp.RequestCtx) {
	defer func() {
		if recover() != nil {
			failed(ctx)
		}
	}()
	f.adapted(ctx)
}

func logPanic(ctx *fasthttp.RequestCtx, rec any) {
	if rec != http.ErrAbortHandler {
		slog.Error("panic serving request", "uri", string(ctx.RequestURI()), "panic", fmt.Sprint(rec), "stack", string(debug.Stack()))
	}
}

// failed answers 500 and closes the connection.
func failed(ctx *fasthttp.RequestCtx) {
	ctx.Response.Reset()
	ctx.SetStatusCode(http.StatusInternalServerError)
	ctx.SetConnectionClose()
}

// netHTTPShape makes fasthttpadaptor's request read as net/http's: Host
// out of the header map, an unknown length for a chunked body, strings of
// its own (the adaptor's point into fasthttp's buffers, reused after the
// request), and a context that server shutdown does not cancel (the
// adaptor's is the RequestCtx, done as soon as shutdown begins), so a
// request in flight finishes while the server drains. A panic is logged
// here, where its stack is the handler's. These are the routes off the
// hot path: the copies cost little.
func netHTTPShape(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if rec := recover(); rec != nil {
				if rec != http.ErrAbortHandler {
					slog.Error("panic serving request", "uri", r.RequestURI, "panic", fmt.Sprint(rec), "stack", string(debug.Stack()))
				}
				panic(rec)
			}
		}()
		own := r.WithContext(context.WithoutCancel(r.Context()))
		own.Method = strings.Clone(r.Method)
		own.Host = strings.Clone(r.Host)
		own.RequestURI = strings.Clone(r.RequestURI)
		if u, err := url.ParseRequestURI(own.RequestURI); err == nil {
			own.URL = u
		}
		own.Header = make(http.Header, len(r.Header))
		for k, vs := range r.Header {
			if k == "Host" {
				continue
			}
			c := make([]string, len(vs))
			for i, v := range vs {
				c[i] = strings.Clone(v)
			}
			own.Header[strings.Clone(k)] = c
		}
		if slices.Contains(r.TransferEncoding, "chunked") {
			own.ContentLength = -1
		}
		h.ServeHTTP(w, own)
	})
}
