package middleware

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
)

// DefaultRemoteTimeout bounds a remote check unless RemoteOptions.Timeout
// says otherwise: the endpoint's own Redis deadline (50ms) plus a network
// round trip with room to spare.
const DefaultRemoteTimeout = 250 * time.Millisecond

// maxRemoteBody bounds the answer read from the check endpoint.
const maxRemoteBody = 64 << 10

type remote struct {
	url        string
	timeout    time.Duration
	failClosed bool
	client     *http.Client
	ownClient  bool
	headers    map[string]bool // nil: all
	breaker    *check.Breaker
}

func newRemote(o *RemoteOptions, namespace string) (*remote, error) {
	if o.URL == "" {
		return nil, errors.New("middleware: WithRemote: URL: required")
	}
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("middleware: WithRemote: URL %q: want http://host[:port] or https://host[:port]", o.URL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("middleware: WithRemote: URL %q: want no query or fragment", o.URL)
	}
	rm := &remote{timeout: o.Timeout, client: o.Client}
	rm.url = strings.TrimSuffix(u.String(), "/") + "/check/" + url.PathEscape(namespace)
	if o.Policy != "" {
		rm.url += "/" + url.PathEscape(o.Policy)
	}
	switch o.FailureMode {
	case "", ratelimitv1alpha1.FailureModeOpen:
	case ratelimitv1alpha1.FailureModeClosed:
		rm.failClosed = true
	default:
		return nil, fmt.Errorf("middleware: WithRemote: FailureMode %q: want Open or Closed", o.FailureMode)
	}
	if rm.timeout <= 0 {
		rm.timeout = DefaultRemoteTimeout
	}
	if rm.client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64 // the default 2 would open a connection per concurrent request
		rm.client, rm.ownClient = &http.Client{Transport: t}, true
	}
	if o.Headers != nil {
		rm.headers = map[string]bool{}
		for _, h := range o.Headers {
			rm.headers[http.CanonicalHeaderKey(h)] = true
		}
	}
	rm.breaker = check.NewBreaker(5, time.Second, time.Now, nil)
	return rm, nil
}

func (rm *remote) close() error {
	if rm.ownClient {
		rm.client.CloseIdleConnections()
	}
	return nil
}

// notForwarded are headers that describe the request to the endpoint, or
// belong to one connection: the middleware sets or drops them so a client
// cannot choose them.
var notForwarded = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true, "Expect": true, "Host": true,
	"Forwarded": true, "X-Real-Ip": true, "X-Original-Url": true, "X-Original-Method": true,
}

func forwardable(name string) bool {
	return !notForwarded[name] && !strings.HasPrefix(name, "X-Forwarded-")
}

// w3c reads and writes the W3C trace context headers.
var w3c propagation.TraceContext

// joinTrace makes the check a part of r's trace: the service's span, when
// it traces its requests (r's context carries the span), else the
// client's traceparent, sent even when RemoteOptions.Headers leaves it
// out (it names a trace, and decides nothing). The endpoint's check span
// is then its child.
func joinTrace(r *http.Request, h http.Header) {
	ctx := r.Context()
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = w3c.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	w3c.Inject(ctx, propagation.HeaderCarrier(h))
}

// answer is the endpoint's decision.
type answer struct {
	allowed bool
	status  int
	header  http.Header // the rate-limit headers to relay
	body    []byte      // a denial's problem body, relayed with contentType
	ctype   string
	problem checkhttp.Problem
	refused bool   // a problem of refusalTypes, not a denial
	over    string // OverLimitHeader's value on an allowed answer
}

// denialTypes are the problem types of a decision to deny; any other
// answer but 2xx means the endpoint could not decide.
var denialTypes = map[string]Reason{
	checkhttp.ProblemRateLimited: ReasonRateLimited,
	checkhttp.ProblemMissingKey:  ReasonMissingKey,
	checkhttp.ProblemUnavailable: ReasonUnavailable,
}

// refusalTypes are the problem types of an endpoint that cannot check
// the request as it is (a concurrency limit it cannot release, more limits
// than one check evaluates): an answer about the request, as the in-process
// mode gives it, relayed as it is; neither the failure mode's to answer
// nor a failure of the endpoint for the breaker.
var refusalTypes = map[string]bool{checkhttp.ProblemNoRelease: true, checkhttp.ProblemTooManyLimits: true}

// ask describes r to the endpoint. The call does not end when the client
// goes away (only at the timeout), so every call reports to the breaker.
func (rm *remote) ask(r *http.Request, l *Limiter) (*answer, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), rm.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rm.url, nil)
	if err != nil {
		return nil, err
	}
	for name, values := range r.Header {
		if forwardable(name) && (rm.headers == nil || rm.headers[name]) {
			req.Header[name] = values
		}
	}
	joinTrace(r, req.Header)
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	req.Header.Set("X-Forwarded-Method", r.Method)
	req.Header.Set("X-Forwarded-Proto", proto)
	req.Header.Set("X-Forwarded-Host", host)
	req.Header.Set("X-Forwarded-Uri", requestTarget(r))
	if ip := l.trusted.FromRequest(r); ip.IsValid() {
		req.Header.Set("X-Forwarded-For", ip.String())
	}
	resp, err := rm.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRemoteBody))
	if err != nil {
		return nil, fmt.Errorf("reading the check endpoint's answer: %w", err)
	}
	a := &answer{status: resp.StatusCode, header: http.Header{}, body: body}
	for _, name := range checkhttp.HeaderNames {
		if v := resp.Header.Values(name); len(v) > 0 {
			a.header[name] = v // the draft's spelling, not Go's canonical "Ratelimit"
		}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		a.allowed, a.over = true, resp.Header.Get(checkhttp.OverLimitHeader)
		return a, nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == checkhttp.ProblemContentType && json.Unmarshal(body, &a.problem) == nil {
		_, denial := denialTypes[a.problem.Type]
		if a.refused = refusalTypes[a.problem.Type]; denial || a.refused {
			a.ctype = resp.Header.Get("Content-Type")
			return a, nil
		}
	}
	detail := a.problem.Detail
	if detail == "" {
		detail = strings.TrimSpace(string(body[:min(len(body), 200)]))
	}
	return nil, fmt.Errorf("check endpoint %s answered %d: %s", rm.url, resp.StatusCode, detail)
}

func (l *Limiter) serveRemote(w http.ResponseWriter, r *http.Request, next http.Handler) {
	// Read here as in the process: what the endpoint would refuse is
	// refused before asking, so that a client's unreadable request is
	// its own 400, never the endpoint failing (which would answer by the
	// failure mode and count toward the breaker, for every client).
	if _, err := l.policyRequest(r); err != nil {
		badRequest(w, err)
		return
	}
	rm := l.remote
	var a *answer
	err := errors.New("circuit breaker open: the check endpoint failed repeatedly")
	if rm.breaker.Allow() {
		a, err = rm.ask(r, l)
		if err != nil {
			rm.breaker.Failure()
		} else {
			rm.breaker.Success()
		}
	}
	if err != nil {
		l.remoteFailure(w, r, next, err)
		return
	}
	h := w.Header()
	for name, v := range a.header {
		h[name] = v
	}
	if a.allowed {
		next.ServeHTTP(w, passOn(r, a.over))
		return
	}
	if l.deny != nil && !a.refused {
		d := Decision{Reason: denialTypes[a.problem.Type], Status: a.status, Policy: a.problem.Policy, Limit: a.problem.Limit}
		if a.problem.RetryAfter != nil {
			d.RetryAfter = time.Duration(*a.problem.RetryAfter) * time.Second
		} else if s, err := strconv.ParseInt(a.header.Get("Retry-After"), 10, 64); err == nil {
			d.RetryAfter = time.Duration(s) * time.Second
		}
		l.deny(w, r, d)
		return
	}
	h.Set("Content-Type", a.ctype)
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// remoteFailure answers by the remote failure mode.
func (l *Limiter) remoteFailure(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	l.logFailure("rate-limit check endpoint unavailable; the failure mode answered", !l.remote.failClosed, err)
	if !l.remote.failClosed {
		next.ServeHTTP(w, passOn(r, ""))
		return
	}
	w.Header().Set("Retry-After", "1")
	status := http.StatusTooManyRequests
	if l.deny != nil {
		l.deny(w, r, Decision{Reason: ReasonUnavailable, Status: status, RetryAfter: time.Second, Err: err})
		return
	}
	one := int64(1)
	checkhttp.WriteProblem(w, checkhttp.Problem{
		Type: checkhttp.ProblemUnavailable, Title: "Rate limiter unavailable", Status: status,
		Detail: "the rate-limit check endpoint cannot answer right now and this service fails closed", RetryAfter: &one,
	})
}
