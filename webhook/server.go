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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-dev/sluice/internal/check"
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
	opts Options
	mux  *http.ServeMux
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
	s.mux.HandleFunc("/check/{namespace}", s.handleCheck)
	s.mux.HandleFunc("/check/{namespace}/{policy}", s.handleCheck)
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

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func ok(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	profile, err := detectProfile(s.opts.Profile, r)
	if err != nil {
		s.badRequest(w, err)
		return
	}
	s.decide(w, r, profile, "", r.PathValue("namespace"), r.PathValue("policy"))
}

func (s *Server) handleEnvoy(w http.ResponseWriter, r *http.Request) {
	s.decide(w, r, ProfileEnvoy, "/"+r.PathValue("path"), r.PathValue("namespace"), "")
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request, profile Profile, envoyPath, namespace, policyName string) {
	req, err := originalRequest(profile, r, envoyPath, s.opts.TrustedProxies)
	if err != nil {
		s.badRequest(w, err)
		return
	}
	out, err := s.opts.Checker.Check(r.Context(), check.Input{Namespace: namespace, Policy: policyName, Request: req})
	if err != nil {
		s.checkError(w, err)
		return
	}
	now := s.opts.Now()
	setRateLimitHeaders(w.Header(), out, now)
	if out.Allowed {
		w.WriteHeader(http.StatusOK)
		return
	}
	writeDenial(w, out, denyStatus(profile, out))
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

func writeDenial(w http.ResponseWriter, out *check.Outcome, status int) {
	p := problem{Status: status}
	if out.Decider != nil {
		p.Policy = out.Decider.String()
	}
	if out.RetryAfter > 0 && out.RetryAfter != ratelimit.Never {
		secs := ceilSeconds(out.RetryAfter)
		p.RetryAfter = &secs
	}
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
		if p.RetryAfter != nil {
			p.Detail = fmt.Sprintf("limit %q of policy %s is exhausted; retry in %ds", p.Limit, p.Policy, *p.RetryAfter)
		} else {
			p.Detail = fmt.Sprintf("limit %q of policy %s can never admit this request", p.Limit, p.Policy)
		}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

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
