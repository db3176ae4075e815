package webhook

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/checkhttp"
)

// ServeFastHTTP serves the check routes natively on fasthttp (the check
// process's server, internal/httpserve): the request is read from
// fasthttp's buffers into the pooled request state and the decision is
// rendered straight into fasthttp's response. It reports false, having
// touched nothing, for any other request, which is then ServeHTTP's
// through the standard adaptor: the other routes, a request target in
// absolute form or with control bytes, and a /check/ path with escapes,
// which net/http's reading decodes. Both routes give the same answer, byte
// for byte (TestRoutesAnswerAlike).
func (s *CheckEndpoint) ServeFastHTTP(ctx *fasthttp.RequestCtx) bool {
	kind := nativeRoute(ctx.Request.Header.RequestURI())
	if kind == notNative {
		return false
	}
	st := s.state.Get().(*requestState)
	defer s.state.Put(st)
	in, target := st.load(ctx)
	path, query, _ := strings.Cut(target, "?")
	var rt route
	var found bool
	if kind == nativeCheck {
		rt, found = checkRoute(path)
	} else {
		rt, found = envoyRoute(path)
	}
	if !found {
		notFound(ctx)
		return true
	}
	var envoyRest string
	if rt.envoy {
		envoyRest = rt.envoyPath
		if query != "" {
			// The original path and query, as sent, are the rest of the
			// target, unless nothing but a query follows the namespace.
			if envoyRest = target[len(envoyPrefix)+len(rt.namespace):]; envoyRest[0] != '/' {
				envoyRest = "/" + envoyRest
			}
		}
	}
	profile, err := s.read(st, in, rt, envoyRest)
	if err != nil {
		st.writeProblem(ctx, badRequestProblem(err))
		return true
	}
	// Not ctx: it is done as soon as the server begins to shut down, and a
	// check in flight then still gets its answer. The checker bounds the
	// time a check takes.
	if err := s.check(context.Background(), st, rt); err != nil {
		st.writeProblem(ctx, s.checkProblem(err))
		return true
	}
	s.writeDecision(ctx, st, profile)
	return true
}

// Which route, if any, ServeFastHTTP serves.
const (
	notNative = iota
	nativeCheck
	nativeEnvoy
)

// nativeRoute is the route of a request target that the native route
// reads as net/http does: an origin-form target (no scheme and host) of
// printable bytes, whose path is read undecoded (Envoy's), or has nothing
// to decode.
func nativeRoute(target []byte) int {
	path := target
	for i, c := range target {
		if c <= ' ' || c == 0x7f {
			return notNative
		}
		if c == '?' && len(path) == len(target) {
			path = target[:i]
		}
	}
	switch {
	case hasPrefix(path, envoyPrefix):
		return nativeEnvoy
	case hasPrefix(path, checkPrefix):
		for _, c := range path {
			if c == '%' {
				return notNative
			}
		}
		return nativeCheck
	}
	return notNative
}

func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}

// nativeState is the request state of the native route: the request's
// text and header map, reused from one request to the next.
type nativeState struct {
	in    checkRequest
	hdr   http.Header
	names map[string]string // raw header name -> canonical, learned per state
	vals  []string          // backing for hdr's single values
	spans []span
	text  []byte // the request's strings, before they become one string
}

// span is one header value's place in nativeState.text.
type span struct {
	name     string
	from, to int
}

// maxNames and maxNameLen bound the header names a state remembers, so a
// client sending many or long names cannot grow it.
const (
	maxNames   = 128
	maxNameLen = 64
)

// load reads the check request in ctx as net/http reads one: header names
// in canonical form, values trimmed, repeated headers in order, Host and
// Transfer-Encoding out of the map. Every string is cut from one copy of
// the request's text: the one allocation. It returns the request and its
// target.
func (st *requestState) load(ctx *fasthttp.RequestCtx) (*checkRequest, string) {
	n := &st.native
	if n.hdr == nil {
		n.hdr = make(http.Header, 16)
		n.names = make(map[string]string, 16)
	}
	rh := &ctx.Request.Header
	// AllInOrder below joins folded header lines in place: it is run once
	// per request.
	n.text = append(n.text[:0], rh.RequestURI()...)
	targetEnd := len(n.text)
	n.text = append(n.text, rh.Host()...)
	hostEnd := len(n.text)
	method := knownMethod(rh.Method())
	if method == "" {
		n.text = append(n.text, rh.Method()...)
	}
	methodEnd := len(n.text)
	n.spans = n.spans[:0]
	for k, v := range rh.AllInOrder() {
		name := n.canonical(k)
		if name == "Host" || name == "Transfer-Encoding" { // net/http moves them out of the map
			continue
		}
		from := len(n.text)
		n.text = append(n.text, textproto.TrimBytes(v)...)
		n.spans = append(n.spans, span{name, from, len(n.text)})
	}
	all := string(n.text) // the one allocation: every string below is cut from it

	clear(n.hdr)
	n.vals = n.vals[:0]
	for _, s := range n.spans {
		v := all[s.from:s.to]
		if vs, ok := n.hdr[s.name]; ok {
			n.hdr[s.name] = append(vs, v) // a repeated header: rare, allocates
			continue
		}
		n.vals = append(n.vals, v)
		i := len(n.vals)
		n.hdr[s.name] = n.vals[i-1 : i : i] // capacity 1: an append cannot overwrite a neighbor
	}
	if method == "" {
		method = all[hostEnd:methodEnd]
	}
	target := all[:targetEnd]
	_, query, _ := strings.Cut(target, "?")
	n.in = checkRequest{method: method, host: all[targetEnd:hostEnd], rawQuery: query, header: n.hdr, peer: peerAddr(ctx.RemoteAddr())}
	return &n.in, target
}

// canonical is textproto.CanonicalMIMEHeaderKey, remembered per raw
// spelling so that known names cost a map lookup and no allocation.
func (n *nativeState) canonical(raw []byte) string {
	if c, ok := n.names[string(raw)]; ok {
		return c
	}
	c := textproto.CanonicalMIMEHeaderKey(string(raw))
	if len(n.names) < maxNames && len(raw) <= maxNameLen {
		n.names[string(raw)] = c
	}
	return c
}

// knownMethod is m as a constant string for the methods proxies send, ""
// for any other.
func knownMethod(m []byte) string {
	for _, k := range [...]string{http.MethodGet, http.MethodPost, http.MethodHead, http.MethodPut,
		http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		if string(m) == k {
			return k
		}
	}
	return ""
}

// peerAddr is the connection's peer as clientip.Peer reads net/http's
// RemoteAddr.
func peerAddr(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort().Addr()
	}
	if a == nil {
		return netip.Addr{}
	}
	return clientip.Peer(a.String())
}

// writeDecision renders the decision in st.out into the response: the
// rate-limit headers, and for a denial its status and problem body.
func (s *CheckEndpoint) writeDecision(ctx *fasthttp.RequestCtx, st *requestState, profile Profile) {
	out := &st.out
	st.headers.Render(out, s.opts.Now())
	h := &ctx.Response.Header
	for i, name := range checkhttp.HeaderNames {
		if v := st.headers.Value(i); v != nil {
			h.AddBytesV(name, v)
		}
	}
	if rule, ok := s.reportedRule(out); ok {
		h.Set(checkhttp.PolicyHeader, rule)
	}
	if out.Allowed {
		if st.buf = checkhttp.AppendOverLimit(st.buf[:0], out); len(st.buf) > 0 {
			h.SetBytesV(checkhttp.OverLimitHeader, st.buf)
		} else {
			noOverLimit(profile, h.Set)
		}
		return // 200, no body
	}
	var body []byte
	status := denyStatus(profile, out)
	body, st.buf = checkhttp.DenialBody(out, status, st.buf)
	writeBody(ctx, status, checkhttp.ProblemContentType, body)
}

// writeProblem answers with p, as checkhttp.WriteProblem does.
func (st *requestState) writeProblem(ctx *fasthttp.RequestCtx, p checkhttp.Problem) {
	st.buf = checkhttp.AppendProblem(st.buf[:0], &p)
	writeBody(ctx, p.Status, checkhttp.ProblemContentType, st.buf)
}

// notFound answers as http.NotFound does.
func notFound(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	writeBody(ctx, http.StatusNotFound, "text/plain; charset=utf-8", notFoundBody)
}

var notFoundBody = []byte("404 page not found\n")

// writeBody sets the status, Content-Type and body. The status line's
// text is net/http's, also for a status it has no name for (a policy's
// denyStatus may be any from 400 to 599).
func writeBody(ctx *fasthttp.RequestCtx, status int, contentType string, body []byte) {
	ctx.SetStatusCode(status)
	if http.StatusText(status) == "" {
		ctx.Response.Header.SetStatusMessage([]byte("status code " + strconv.Itoa(status)))
	}
	ctx.SetContentType(contentType)
	ctx.SetBody(body)
}
