// Package admin is the admin API: explain a request, inspect and reset a
// key value's limits, list and lift bans, all through the checker of the
// process and the store it runs on, at the paths of the API group
// admin.ratelimit.sluice.dev/v1alpha1 (the same in local mode and behind
// the API server in a cluster). Errors are metav1.Status objects, so
// client-go and kubectl render them; every change is logged with its
// caller (CallerFrom).
package admin

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/overrides"
	"github.com/sluice-dev/sluice/internal/rlqs"
	"github.com/sluice-dev/sluice/internal/topkeys"
)

// Group and Version of the admin API; Base is the path its routes are under.
const (
	Group   = "admin.ratelimit.sluice.dev"
	Version = "v1alpha1"
	Base    = "/apis/" + Group + "/" + Version
)

// Options configure a Handler.
type Options struct {
	Checker *check.Checker
	// Overrides, when set, serves the overrides routes (run-time ones set
	// and deleted, both sources listed).
	Overrides *overrides.Runtime
	// Top, when set, serves the top key values route.
	Top topkeys.Source
	// Quota, when set, adds to inspect what each Envoy holds of the
	// bucket through this process's rate limit quota service.
	Quota QuotaShares
	// Logger receives every change (reset, lift) with its caller.
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// ShowQuota adds q's assignments to inspect, as Options.Quota does, for
// a process whose quota service is made after its admin API; call it
// before serving.
func (h *Handler) ShowQuota(q QuotaShares) { h.quota = q }

// QuotaShares are the rate limit quota service's assignments of a
// bucket (rlqs.Service).
type QuotaShares interface {
	Shares(namespace, name, keyValue string) []rlqs.Share
}

// Handler serves the admin API. Who calls is the request context's
// (WithCaller): the server in front of it says.
type Handler struct {
	checker *check.Checker
	// buckets are the checker's operations on buckets (inspect, reset,
	// bans, lift).
	buckets   *check.Buckets
	overrides *overrides.Runtime
	topKeys   topkeys.Source
	quota     QuotaShares
	log       *slog.Logger
	now       func() time.Time
	// handlers serve the calls (by their index in calls); nil: a call
	// this Handler does not serve.
	handlers [numCalls]http.HandlerFunc
}

// New returns a Handler serving explain, keys (inspect, reset) and bans
// (list, lift), and top key values and overrides when Options has them.
func New(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	h := &Handler{checker: o.Checker, buckets: o.Checker.Buckets(), overrides: o.Overrides, topKeys: o.Top, quota: o.Quota, log: o.Logger, now: o.Now}
	h.handlers[callExplain] = h.explain
	h.handlers[callInspect] = h.inspect
	h.handlers[callReset] = h.reset
	h.handlers[callBans] = h.bans
	h.handlers[callLift] = h.lift
	if o.Top != nil {
		h.handlers[callTop] = h.top
	}
	if o.Overrides != nil {
		h.handlers[callOverrides] = h.listOverrides
		h.handlers[callSetOverride] = h.setOverride
		h.handlers[callDeleteOverride] = h.deleteOverride
	}
	return h
}

func (h *Handler) serves(i int) bool { return h.handlers[i] != nil }

// ServeHTTP implements http.Handler: the call of r's path and method,
// discovery at Base, 404 for an unknown path and 405 for a known path
// with another method.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), Base)
	if !ok || rest != "" && rest[0] != '/' {
		WriteStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no such path: the admin API is under "+Base)
		return
	}
	i, segs, m, allowed := route(r.Method, rest, h.serves)
	switch m {
	case MatchDiscovery:
		writeJSON(w, http.StatusOK, discoveryOf(h.serves))
	case MatchNotFound:
		WriteStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "no such path: "+strconv.Quote(r.URL.Path))
	case MatchMethodNotAllowed:
		WriteMethodNotAllowed(w, allowed)
	default:
		calls[i].setPathValues(r, segs)
		h.handlers[i](w, r)
	}
}

// WriteMethodNotAllowed answers 405 with the methods allowed.
func WriteMethodNotAllowed(w http.ResponseWriter, allowed []string) {
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	WriteStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "method not allowed here; allowed: "+strings.Join(allowed, ", "))
}
