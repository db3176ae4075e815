package httpserve

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// front serves a net/http handler from fasthttp. A request on a hot
// prefix with no body and a plain request target (the check endpoint's
// requests) goes through a pooled exchange: a reused http.Request, header
// map and ResponseWriter, every string of the request cut from one
// allocation. The handler sees what net/http would give it: canonical
// header names, trimmed values, Host out of the map, the peer as
// RemoteAddr. Anything else (bodies, escaped paths, other routes) goes
// through fasthttpadaptor, which handles all of HTTP's cases.
type front struct {
	h    http.Handler
	cold fasthttp.RequestHandler
	pool sync.Pool // *exchange
}

// hotPrefixes are the check endpoint's routes, served by the pooled path.
var hotPrefixes = []string{"/check/", "/envoy/"}

func newFront(h http.Handler) *front {
	f := &front{h: h, cold: fasthttpadaptor.NewFastHTTPHandler(netHTTPShape(h))}
	f.pool.New = func() any {
		x := &exchange{hdr: make(http.Header, 16), names: make(map[string]string, 16), vals: make([]string, 0, 32)}
		x.w.hdr = make(http.Header, 8)
		return x
	}
	return f
}

func (f *front) serve(ctx *fasthttp.RequestCtx) {
	method, ok := f.pooledMethod(ctx)
	if !ok {
		f.cold(ctx)
		return
	}
	x := f.pool.Get().(*exchange)
	defer f.pool.Put(x)
	defer f.recoverPanic(ctx)
	x.load(ctx, method)
	f.h.ServeHTTP(&x.w, &x.req)
	x.w.finish()
	x.req = http.Request{} // the pool keeps the last request's text (in x.url, x.hdr) until reused, nothing more
}

// recoverPanic answers 500 and closes the connection when the handler
// panics, as net/http would close it; http.ErrAbortHandler is net/http's
// quiet way to give up.
func (f *front) recoverPanic(ctx *fasthttp.RequestCtx) {
	rec := recover()
	if rec == nil {
		return
	}
	if rec != http.ErrAbortHandler {
		slog.Error("panic serving request", "uri", string(ctx.RequestURI()), "panic", fmt.Sprint(rec), "stack", string(debug.Stack()))
	}
	ctx.Response.Reset()
	ctx.SetStatusCode(http.StatusInternalServerError)
	ctx.SetConnectionClose()
}

// netHTTPShape makes fasthttpadaptor's request read as net/http's: Host
// out of the header map, an unknown length for a chunked body, strings of
// its own (the adaptor's point into fasthttp's buffers, reused after the
// request), and a context that server shutdown does not cancel (the
// adaptor's is the RequestCtx, done as soon as shutdown begins), so a
// request in flight finishes while the server drains. These are the
// routes off the hot path: the copies cost little.
func netHTTPShape(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

// pooledMethod reports whether the request takes the pooled path, and its
// method as an interned string.
func (f *front) pooledMethod(ctx *fasthttp.RequestCtx) (string, bool) {
	// fasthttp has read any body by now (a chunked one becomes a
	// Content-Length); -2 is its "no Content-Length": no body.
	if cl := ctx.Request.Header.ContentLength(); (cl != 0 && cl != -2) || len(ctx.Request.Body()) > 0 {
		return "", false
	}
	method := internedMethod(ctx.Request.Header.Method())
	if method == "" {
		return "", false
	}
	target := ctx.Request.Header.RequestURI()
	if !plainTarget(target) {
		return "", false
	}
	for _, p := range hotPrefixes {
		if len(target) >= len(p) && string(target[:len(p)]) == p {
			return method, true
		}
	}
	return "", false
}

func internedMethod(m []byte) string {
	switch string(m) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodOptions:
		return http.MethodOptions
	}
	return ""
}

// plainTarget reports whether a request target is an absolute path (and
// query) that net/http's URL parser would take as it is: no escapes, no
// fragment, and no byte its path encoder would escape, so that URL.Path is
// the text before '?' and RawPath is empty.
func plainTarget(t []byte) bool {
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	for _, c := range t {
		if !plainByte[c] {
			return false
		}
	}
	return true
}

var plainByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~$&+,/:;=@?" {
		t[c] = true
	}
	return t
}()

// exchange is one pooled request and its response writer.
type exchange struct {
	req   http.Request
	url   url.URL
	hdr   http.Header
	names map[string]string // raw header name -> canonical, learned per exchange
	vals  []string          // backing for hdr's single values
	spans []span
	text  []byte // the request's strings, before they become one string
	w     responseWriter
}

// span is one header value's place in exchange.text.
type span struct {
	name     string
	from, to int
}

// maxNames and maxNameLen bound the header names an exchange remembers,
// so a client sending many or long names cannot grow it.
const (
	maxNames   = 128
	maxNameLen = 64
)

func (x *exchange) load(ctx *fasthttp.RequestCtx, method string) {
	rh := &ctx.Request.Header
	// AllInOrder below joins folded header lines in place: it is run once
	// per request.
	x.text = append(x.text[:0], rh.RequestURI()...)
	uriEnd := len(x.text)
	x.text = append(x.text, rh.Host()...)
	hostEnd := len(x.text)
	x.text = appendAddr(x.text, ctx.RemoteAddr())
	addrEnd := len(x.text)
	x.spans = x.spans[:0]
	for k, v := range rh.AllInOrder() {
		name := x.canonical(k)
		if name == "Host" || name == "Transfer-Encoding" { // net/http moves them out of the map
			continue
		}
		from := len(x.text)
		x.text = append(x.text, textproto.TrimBytes(v)...)
		x.spans = append(x.spans, span{name, from, len(x.text)})
	}
	all := string(x.text) // the one allocation: every string below is cut from it

	clear(x.hdr)
	x.vals = x.vals[:0]
	for _, s := range x.spans {
		v := all[s.from:s.to]
		if vs, ok := x.hdr[s.name]; ok {
			x.hdr[s.name] = append(vs, v) // a repeated header: rare, allocates
			continue
		}
		x.vals = append(x.vals, v)
		n := len(x.vals)
		x.hdr[s.name] = x.vals[n-1 : n : n] // capacity 1: an append cannot overwrite a neighbor
	}

	uri := all[:uriEnd]
	path, query, hasQuery := strings.Cut(uri, "?")
	x.url = url.URL{Path: path, RawQuery: query, ForceQuery: hasQuery && query == ""}
	x.req = http.Request{
		Method:     method,
		URL:        &x.url,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     x.hdr,
		Body:       http.NoBody,
		Close:      rh.ConnectionClose(),
		Host:       all[uriEnd:hostEnd],
		RemoteAddr: all[hostEnd:addrEnd],
		RequestURI: uri,
	}
	if !rh.IsHTTP11() {
		x.req.Proto, x.req.ProtoMinor = "HTTP/1.0", 0
	}
	x.w.reset(ctx)
}

// canonical is textproto.CanonicalMIMEHeaderKey, remembered per raw
// spelling so that known names cost a map lookup and no allocation.
func (x *exchange) canonical(raw []byte) string {
	if c, ok := x.names[string(raw)]; ok {
		return c
	}
	c := textproto.CanonicalMIMEHeaderKey(string(raw))
	if len(x.names) < maxNames && len(raw) <= maxNameLen {
		x.names[string(raw)] = c
	}
	return c
}

// appendAddr appends the peer address as net/http's RemoteAddr spells it.
func appendAddr(b []byte, a net.Addr) []byte {
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).AppendTo(b)
	}
	return append(b, a.String()...)
}

// responseWriter is the pooled http.ResponseWriter. As in net/http, the
// header map is sent as it is at WriteHeader (or the first Write); later
// changes are ignored.
type responseWriter struct {
	ctx   *fasthttp.RequestCtx
	hdr   http.Header
	keys  []string
	wrote bool
}

func (w *responseWriter) reset(ctx *fasthttp.RequestCtx) {
	w.ctx = ctx
	clear(w.hdr)
	w.wrote = false
}

func (w *responseWriter) Header() http.Header { return w.hdr }

func (w *responseWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http
	}
	if code < 200 {
		return // an informational answer: not sent on this path (no handler here sends one)
	}
	w.wrote = true
	w.ctx.SetStatusCode(code)
	// Sorted, as net/http writes them: answers read the same every time.
	w.keys = w.keys[:0]
	for k := range w.hdr {
		w.keys = append(w.keys, k)
	}
	slices.Sort(w.keys)
	for _, k := range w.keys {
		for _, v := range w.hdr[k] {
			if strings.ContainsAny(v, "\r\n") { // as net/http: a value cannot start a header of its own
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			w.ctx.Response.Header.Add(k, v)
		}
	}
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ctx.Write(b)
}

// finish completes the response as net/http would: 200 when the handler
// wrote nothing, and a sniffed Content-Type for a body without one.
func (w *responseWriter) finish() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if body := w.ctx.Response.Body(); len(body) > 0 && len(w.ctx.Response.Header.ContentType()) == 0 {
		w.ctx.Response.Header.SetContentType(http.DetectContentType(body))
	}
	w.ctx = nil
}
