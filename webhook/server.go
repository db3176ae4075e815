// Package webhook is Sluice's HTTP check endpoint (CheckEndpoint): a
// proxy's auth hook (ingress-nginx auth-url, Traefik or Caddy ForwardAuth,
// Envoy ext_authz) asks about the request it is about to serve, and gets
// allow (200) or deny (403/429 with problem+json) with rate-limit headers.
// It turns HTTP into a check.Input and a check.Outcome back into HTTP; the
// decision itself is the check package's.
//
// It is no Kubernetes admission webhook: the CRD's schema and CEL rules
// validate policies. The package keeps the name the project was laid out
// with, for the hook that proxies call.
package webhook

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// Options configure the check endpoint.
type Options struct {
	Checker *check.Checker
	// Tracer traces each check (checkstack.Stack.Tracer); nil: off.
	Tracer *tracing.Tracer
	// Profile fixes the proxy profile; ProfileAuto (default) detects it.
	Profile Profile
	// TrustedProxies are the peers whose forwarded headers are believed
	// (default clientip.DefaultTrustedProxies).
	TrustedProxies *clientip.TrustedProxies
	// ReportPolicy adds checkhttp.PolicyHeader to every answer a policy
	// decided, naming the rule for the proxy's access log.
	ReportPolicy bool
	// Gatherer serves /metrics (nil: no metrics endpoint).
	Gatherer prometheus.Gatherer
	Logger   *slog.Logger
	Now      func() time.Time
}

// CheckEndpoint is the HTTP check endpoint: an http.Handler, whose check
// routes are also served natively on fasthttp (ServeFastHTTP).
type CheckEndpoint struct {
	opts  Options
	mux   *http.ServeMux
	state sync.Pool // *requestState
}

// requestState is the per-request memory of a check, pooled.
type requestState struct {
	req     policy.Request
	out     check.Outcome
	headers checkhttp.HeaderScratch
	buf     []byte
	native  nativeState // the native route's reading of the request
}

// New builds the check endpoint. Routes:
//
//	/check/{namespace}            the namespace's matching policies (nginx, ForwardAuth)
//	/check/{namespace}/{policy}   one policy
//	/envoy/{namespace}/{path...}  Envoy ext_authz HTTP with path_prefix /envoy/{namespace}
//	POST /v1/check                JSON for programmatic callers (dryRun supported)
//	POST /v1/release              the release handle a /v1/check answer carried
//	/healthz, /readyz             probes; never tied to Redis
//	/metrics                      Prometheus
func New(o Options) (*CheckEndpoint, error) {
	if o.Checker == nil {
		return nil, errors.New("webhook: a Checker is required")
	}
	if o.Profile == "" {
		o.Profile = ProfileAuto
	}
	if o.TrustedProxies == nil {
		o.TrustedProxies = clientip.Default()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &CheckEndpoint{opts: o, mux: http.NewServeMux()}
	s.state.New = func() any { return &requestState{buf: make([]byte, 0, 256)} }
	// /check/{namespace}[/{policy}] and /envoy/{namespace}/... are parsed by
	// hand in ServeHTTP: the mux's path wildcards allocate on every request,
	// and the mux decodes and cleans the path (and redirects to the clean
	// one), while the Envoy route's path is the original request's, read
	// exactly once.
	s.mux.HandleFunc("/check/", s.handleCheck)
	s.mux.HandleFunc("POST /v1/check", s.handleJSON)
	s.mux.HandleFunc("POST /v1/release", s.handleRelease)
	s.mux.HandleFunc("GET /healthz", ok)
	s.mux.HandleFunc("GET /readyz", ok)
	if o.Gatherer != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	}
	return s, nil
}

// Handle adds a route (the dashboard, in local mode and the check process).
func (s *CheckEndpoint) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// ServeHTTP implements http.Handler. Checks, nearly every request this
// server sees, skip the mux's pattern matching. The check process serves
// the check routes natively on fasthttp (ServeFastHTTP); this is their
// net/http route, for servers of its own (tests, the middleware's remote
// mode) and the requests ServeFastHTTP leaves to it.
func (s *CheckEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, checkPrefix) {
		s.handleCheck(w, r)
		return
	}
	if target := requestTarget(r); strings.HasPrefix(target, envoyPrefix) {
		s.handleEnvoy(w, r, target)
		return
	}
	s.mux.ServeHTTP(w, r)
}

const (
	checkPrefix = "/check/"
	envoyPrefix = "/envoy/"
)

// requestTarget is the path of the request line as sent: still escaped,
// without the query.
func requestTarget(r *http.Request) string {
	if t := r.RequestURI; t != "" && t[0] == '/' {
		if i := strings.IndexByte(t, '?'); i >= 0 {
			t = t[:i]
		}
		return t
	}
	return r.URL.EscapedPath()
}

func ok(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// route is where a check request is answered: a namespace, one policy or
// all, and for Envoy the original path.
type route struct {
	namespace, policy string
	envoy             bool
	// envoyPath is the original path as Envoy sent it (Envoy only).
	envoyPath string
}

// checkRoute reads /check/{namespace}[/{policy}] from the check URL's path.
func checkRoute(path string) (route, bool) {
	rest := strings.TrimPrefix(path, checkPrefix)
	namespace, policyName, _ := strings.Cut(rest, "/")
	if namespace == "" || strings.Contains(policyName, "/") {
		return route{}, false
	}
	return route{namespace: namespace, policy: policyName}, true
}

// envoyRoute reads /envoy/{namespace}{original path}: Envoy's ext_authz
// HTTP service with path_prefix /envoy/{namespace} appends the original
// path as it received it, so it is cut from the target undecoded.
func envoyRoute(target string) (route, bool) {
	rest := target[len(envoyPrefix):]
	namespace, original := rest, "/"
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		namespace, original = rest[:i], rest[i:]
	}
	if !validNamespace(namespace) {
		return route{}, false
	}
	return route{namespace: namespace, envoy: true, envoyPath: original}, true
}

func (s *CheckEndpoint) handleCheck(w http.ResponseWriter, r *http.Request) {
	rt, found := checkRoute(r.URL.Path)
	if !found {
		http.NotFound(w, r)
		return
	}
	s.serveCheck(w, r, rt, "")
}

func (s *CheckEndpoint) handleEnvoy(w http.ResponseWriter, r *http.Request, target string) {
	rt, found := envoyRoute(target)
	if !found {
		http.NotFound(w, r)
		return
	}
	rest := rt.envoyPath
	if r.URL.RawQuery != "" {
		rest += "?" + r.URL.RawQuery
	}
	s.serveCheck(w, r, rt, rest)
}

// validNamespace reports whether s can be a namespace (a DNS label).
func validNamespace(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// serveCheck answers a check request on the net/http route; envoyRest is
// the Envoy route's original path and query.
func (s *CheckEndpoint) serveCheck(w http.ResponseWriter, r *http.Request, rt route, envoyRest string) {
	st := s.state.Get().(*requestState)
	defer s.state.Put(st)
	in := checkRequest{method: r.Method, host: r.Host, rawQuery: r.URL.RawQuery, header: r.Header, peer: clientip.Peer(r.RemoteAddr)}
	profile, err := s.read(st, &in, rt, envoyRest)
	if err != nil {
		s.badRequest(w, err)
		return
	}
	if err := s.check(r.Context(), st, rt); err != nil {
		s.checkError(w, err)
		return
	}
	out := &st.out
	checkhttp.AppendHeaders(w.Header(), out, s.opts.Now(), &st.headers)
	if rule, ok := s.reportedRule(out); ok {
		w.Header().Set(checkhttp.PolicyHeader, rule)
	}
	if out.Allowed {
		if v := checkhttp.OverLimit(out); v != "" {
			w.Header().Set(checkhttp.OverLimitHeader, v)
		} else {
			noOverLimit(profile, w.Header().Set)
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	st.buf = checkhttp.AppendDenial(w, out, denyStatus(profile, out), st.buf)
}

// envoyHeadersToRemove is the header of an ext_authz HTTP answer whose
// value lists headers Envoy removes from the request it forwards. An
// allowed answer over no soft limit names checkhttp.OverLimitHeader in
// it: Envoy passes on a header the client sent unless the answer replaces
// or removes it, and the upstream must be able to trust the header.
const envoyHeadersToRemove = "X-Envoy-Auth-Headers-To-Remove"

// overLimitName is checkhttp.OverLimitHeader as Envoy's list names it.
var overLimitName = strings.ToLower(checkhttp.OverLimitHeader)

// noOverLimit sets, on an allowed answer over no soft limit, what keeps a
// client's own checkhttp.OverLimitHeader from the upstream: Envoy's list
// of headers to remove; for ForwardAuth, the header with an empty value,
// which Traefik's authResponseHeaders copies (removing the client's) and
// Caddy's copy_headers too (a header its answer lacks is copied as the
// placeholder's own text by Caddy 2.6). nginx's auth_request_set needs
// nothing: an empty variable removes the header.
func noOverLimit(profile Profile, set func(name, value string)) {
	switch profile {
	case ProfileEnvoy:
		set(envoyHeadersToRemove, overLimitName)
	case ProfileForwardAuth:
		set(checkhttp.OverLimitHeader, "")
	}
}

// reportedRule is PolicyHeader's value for out, when ReportPolicy is set
// and a policy decided.
func (s *CheckEndpoint) reportedRule(out *check.Outcome) (string, bool) {
	if !s.opts.ReportPolicy {
		return "", false
	}
	r, ok := checkhttp.RuleOf(out)
	if !ok {
		return "", false
	}
	return r.String(), true
}

// read rebuilds the original request a check request describes into
// st.req, and says which profile read it. An error is the proxy's (400).
func (s *CheckEndpoint) read(st *requestState, in *checkRequest, rt route, envoyRest string) (Profile, error) {
	profile := ProfileEnvoy
	if !rt.envoy {
		var err error
		if profile, err = detectProfile(s.opts.Profile, in.header); err != nil {
			return "", err
		}
	}
	return profile, originalRequest(profile, in, envoyRest, s.opts.TrustedProxies, &st.req)
}

// check decides st.req into st.out.
func (s *CheckEndpoint) check(ctx context.Context, st *requestState, rt route) error {
	ctx, span := s.opts.Tracer.StartHTTP(ctx, tracing.IntakeHTTP, rt.namespace, st.req.Header)
	err := s.opts.Checker.CheckInto(ctx, check.Input{Namespace: rt.namespace, Policy: rt.policy, Request: &st.req}, &st.out)
	span.End(&st.out, err)
	st.req.Header = nil // do not keep the request's headers alive in the pool
	return err
}

// denyStatus is the policy's deny status, else 403 for nginx (nginx turns
// any auth_request status other than 2xx, 401 and 403 into 500), else 429.
func denyStatus(profile Profile, out *check.Outcome) int {
	if profile == ProfileNginx {
		return checkhttp.DenyStatus(out, http.StatusForbidden)
	}
	return checkhttp.DenyStatus(out, http.StatusTooManyRequests)
}

func (s *CheckEndpoint) badRequest(w http.ResponseWriter, err error) {
	checkhttp.WriteProblem(w, badRequestProblem(err))
}

func badRequestProblem(err error) checkhttp.Problem {
	return checkhttp.Problem{
		Type: checkhttp.ProblemBadRequest, Title: "Bad check request",
		Status: http.StatusBadRequest, Detail: err.Error(),
	}
}

func (s *CheckEndpoint) checkError(w http.ResponseWriter, err error) {
	checkhttp.WriteProblem(w, s.checkProblem(err))
}

// checkProblem is the answer to a check that failed (see
// checkhttp.CheckFailedProblem); a 500 is logged.
func (s *CheckEndpoint) checkProblem(err error) checkhttp.Problem {
	p := checkhttp.CheckFailedProblem(err)
	if p.Status == http.StatusInternalServerError {
		s.opts.Logger.Error("check failed", "err", err)
	}
	return p
}
