// Package webhook is Sluice's HTTP check endpoint: a proxy's auth hook
// (ingress-nginx auth-url, Traefik or Caddy ForwardAuth, Envoy ext_authz)
// asks about the request it is about to serve, and gets allow (200) or
// deny (403/429 with problem+json) with rate-limit headers. It turns HTTP
// into a check.Input and a check.Outcome back into HTTP; the decision
// itself is the check package's.
package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// Options configure the check endpoint.
type Options struct {
	Checker *check.Checker
	// Profile fixes the proxy profile; ProfileAuto (default) detects it.
	Profile Profile
	// TrustedProxies are the peers whose forwarded headers are believed
	// (default DefaultTrustedProxies).
	TrustedProxies *TrustedProxies
	// Gatherer serves /metrics (nil: no metrics endpoint).
	Gatherer prometheus.Gatherer
	Logger   *slog.Logger
	Now      func() time.Time
}

// Server is the check endpoint's http.Handler.
type Server struct {
	opts  Options
	mux   *http.ServeMux
	state sync.Pool // *requestState
}

// requestState is the per-request memory of a check, pooled.
type requestState struct {
	req policy.Request
	out check.Outcome
	buf []byte
}

// New builds the endpoint. Routes:
//
//	/check/{namespace}            the namespace's matching policies (nginx, ForwardAuth)
//	/check/{namespace}/{policy}   one policy
//	/envoy/{namespace}/{path...}  Envoy ext_authz HTTP with path_prefix /envoy/{namespace}
//	POST /v1/check                JSON for programmatic callers (dryRun supported)
//	/healthz, /readyz             probes; never tied to Redis
//	/metrics                      Prometheus
func New(o Options) (*Server, error) {
	if o.Checker == nil {
		return nil, errors.New("webhook: a Checker is required")
	}
	if o.Profile == "" {
		o.Profile = ProfileAuto
	}
	if o.TrustedProxies == nil {
		t, err := ParseTrustedProxies(DefaultTrustedProxies)
		if err != nil {
			return nil, err
		}
		o.TrustedProxies = t
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{opts: o, mux: http.NewServeMux()}
	s.state.New = func() any { return &requestState{buf: make([]byte, 0, 256)} }
	// /check/{namespace}[/{policy}], parsed by hand: the mux's path
	// wildcards allocate on every request.
	s.mux.HandleFunc("/check/", s.handleCheck)
	s.mux.HandleFunc("/envoy/{namespace}/{path...}", s.handleEnvoy)
	s.mux.HandleFunc("/envoy/{namespace}", s.handleEnvoy)
	s.mux.HandleFunc("POST /v1/check", s.handleJSON)
	s.mux.HandleFunc("GET /healthz", ok)
	s.mux.HandleFunc("GET /readyz", ok)
	if o.Gatherer != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	}
	return s, nil
}

// Handle adds a route (the dashboard, in local mode and the check process).
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// ServeHTTP implements http.Handler. Checks, nearly every request this
// server sees, skip the mux's pattern matching.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/check/") {
		s.handleCheck(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

func ok(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/check/")
	namespace, policyName, _ := strings.Cut(rest, "/")
	if namespace == "" || strings.Contains(policyName, "/") {
		http.NotFound(w, r)
		return
	}
	profile, err := detectProfile(s.opts.Profile, r)
	if err != nil {
		s.badRequest(w, err)
		return
	}
	s.decide(w, r, profile, "", namespace, policyName)
}

func (s *Server) handleEnvoy(w http.ResponseWriter, r *http.Request) {
	s.decide(w, r, ProfileEnvoy, "/"+r.PathValue("path"), r.PathValue("namespace"), "")
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request, profile Profile, envoyPath, namespace, policyName string) {
	st := s.state.Get().(*requestState)
	defer s.state.Put(st)
	if err := originalRequest(profile, r, envoyPath, s.opts.TrustedProxies, &st.req); err != nil {
		s.badRequest(w, err)
		return
	}
	err := s.opts.Checker.CheckInto(r.Context(), check.Input{Namespace: namespace, Policy: policyName, Request: &st.req}, &st.out)
	st.req.Header = nil // do not keep the request's headers alive in the pool
	if err != nil {
		s.checkError(w, err)
		return
	}
	out := &st.out
	st.buf = setRateLimitHeaders(w.Header(), out, s.opts.Now(), st.buf)
	if out.Allowed {
		w.WriteHeader(http.StatusOK)
		return
	}
	st.buf = writeDenial(w, out, denyStatus(profile, out), st.buf)
}

// denyStatus is the policy's deny status, else 403 for nginx (nginx turns
// any auth_request status other than 2xx, 401 and 403 into 500), else 429.
func denyStatus(profile Profile, out *check.Outcome) int {
	if out.Decider != nil && out.Decider.DenyStatus != 0 {
		return out.Decider.DenyStatus
	}
	if profile == ProfileNginx {
		return http.StatusForbidden
	}
	return http.StatusTooManyRequests
}

// problem is an RFC 9457 problem details body.
type problem struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Status     int    `json:"status"`
	Detail     string `json:"detail"`
	Policy     string `json:"policy,omitempty"`
	Limit      string `json:"limit,omitempty"`
	RetryAfter *int64 `json:"retryAfter,omitempty"`
}

// problemContentType is shared by every denial (capacity 1: see policy.Limit).
var problemContentType = []string{"application/problem+json"}

// writeDenial answers a denial with an RFC 9457 problem, written by hand
// into buf: the JSON encoder's reflection costs more than the check.
func writeDenial(w http.ResponseWriter, out *check.Outcome, status int, buf []byte) []byte {
	p := problem{Status: status}
	if out.Decider != nil {
		p.Policy = out.Decider.String()
	}
	var retry int64 = -1
	if out.RetryAfter > 0 && out.RetryAfter != ratelimit.Never {
		retry = ceilSeconds(out.RetryAfter)
	}
	buf = buf[:0]
	switch out.Reason {
	case check.ReasonMissingKey:
		p.Type, p.Title = "https://sluice.dev/problems/missing-key", "Request lacks the rate-limit key"
		p.Detail = fmt.Sprintf("policy %s keys requests by %q and denies requests without it", p.Policy, out.Decider.KeyTemplate())
	case check.ReasonStoreUnavailable:
		p.Type, p.Title = "https://sluice.dev/problems/limiter-unavailable", "Rate limiter unavailable"
		p.Detail = fmt.Sprintf("policy %s fails closed and its limits cannot be checked right now", p.Policy)
	default:
		p.Type, p.Title = "https://sluice.dev/problems/rate-limited", "Rate limit exceeded"
		if out.Tightest >= 0 {
			p.Limit = out.Limits[out.Tightest].Limit.Name
		}
	}
	buf = append(buf, `{"type":`...)
	buf = strconv.AppendQuote(buf, p.Type)
	buf = append(buf, `,"title":`...)
	buf = strconv.AppendQuote(buf, p.Title)
	buf = append(buf, `,"status":`...)
	buf = strconv.AppendInt(buf, int64(status), 10)
	buf = append(buf, `,"detail":"`...)
	if p.Detail != "" {
		buf = appendJSONText(buf, p.Detail)
	} else if retry >= 0 {
		buf = append(buf, `limit \"`...)
		buf = appendJSONText(buf, p.Limit)
		buf = append(buf, `\" of policy `...)
		buf = appendJSONText(buf, p.Policy)
		buf = append(buf, " is exhausted; retry in "...)
		buf = strconv.AppendInt(buf, retry, 10)
		buf = append(buf, 's')
	} else {
		buf = append(buf, `limit \"`...)
		buf = appendJSONText(buf, p.Limit)
		buf = append(buf, `\" of policy `...)
		buf = appendJSONText(buf, p.Policy)
		buf = append(buf, " can never admit this request"...)
	}
	buf = append(buf, '"')
	if p.Policy != "" {
		buf = append(buf, `,"policy":"`...)
		buf = appendJSONText(buf, p.Policy)
		buf = append(buf, '"')
	}
	if p.Limit != "" {
		buf = append(buf, `,"limit":"`...)
		buf = appendJSONText(buf, p.Limit)
		buf = append(buf, '"')
	}
	if retry >= 0 {
		buf = append(buf, `,"retryAfter":`...)
		buf = strconv.AppendInt(buf, retry, 10)
	}
	buf = append(buf, "}\n"...)
	w.Header()["Content-Type"] = problemContentType
	w.WriteHeader(status)
	_, _ = w.Write(buf)
	return buf
}

// appendJSONText appends s escaped for the inside of a JSON string. Names
// here are DNS labels and fixed texts; anything else is escaped safely.
func appendJSONText(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			buf = append(buf, '\\', c)
		case c < 0x20:
			buf = append(buf, `\u00`...)
			buf = append(buf, hexDigits[c>>4], hexDigits[c&15])
		default:
			buf = append(buf, c)
		}
	}
	return buf
}

const hexDigits = "0123456789abcdef"

func (s *Server) badRequest(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(problem{
		Type: "https://sluice.dev/problems/bad-request", Title: "Bad check request",
		Status: http.StatusBadRequest, Detail: err.Error(),
	})
}

func (s *Server) checkError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	title := "Check failed"
	if errors.Is(err, check.ErrUnknownPolicy) {
		status, title = http.StatusNotFound, "No such policy"
	} else {
		s.opts.Logger.Error("check failed", "err", err)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problem{Type: "https://sluice.dev/problems/check-failed", Title: title, Status: status, Detail: err.Error()})
}
