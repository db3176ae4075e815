// Package adminapi holds the admin API's wire types
// (admin.ratelimit.sluice.dev/v1alpha1): the bodies its routes take and
// the answers they give. The server (internal/admin) writes them and its
// clients (kubectl sluice) read them, so the two cannot drift apart; the
// package imports nothing of Sluice's, so a client does not pull in the
// server. Durations are rendered in whole seconds ("4m10s"), as the
// rate-limit headers count them; "never" is a limit that never allows.
package adminapi

import (
	"fmt"
	"time"
)

// ExplainRequest is the request to explain.
type ExplainRequest struct {
	// URL is the request's absolute URL (required).
	URL string `json:"url"`
	// Method defaults to GET.
	Method string `json:"method,omitempty"`
	// ClientIP is the client's address, as the check endpoint would
	// have read it behind the trusted proxies; none when empty.
	ClientIP string              `json:"clientIP,omitempty"`
	Headers  map[string][]string `json:"headers,omitempty"`
	// Transport is what the request would come through, which decides
	// what a concurrency limit gets (Transports); default TransportHTTP.
	Transport string `json:"transport,omitempty"`
}

// The transports explain answers as (ExplainRequest.Transport).
const (
	// TransportHTTP is the check endpoint's auth hooks (ingress-nginx
	// auth-url, Traefik and Caddy ForwardAuth, Envoy ext_authz over
	// HTTP): no release follows, so a concurrency limit is refused.
	TransportHTTP = "http"
	// TransportExtAuthzGRPC is Envoy's ext_authz over gRPC: no release
	// either.
	TransportExtAuthzGRPC = "ext-authz-grpc"
	// TransportCheckAPI is POST /v1/check, whose answer carries the
	// release.
	TransportCheckAPI = "v1-check"
	// TransportMiddleware is the Go middleware, which releases when the
	// handler returns.
	TransportMiddleware = "middleware"
)

// Transports lists the transports explain answers as, the default first.
var Transports = []string{TransportHTTP, TransportExtAuthzGRPC, TransportCheckAPI, TransportMiddleware}

// TransportReleases reports whether a request through transport t is
// released when it ends, so that a concurrency limit can count it.
func TransportReleases(t string) bool { return t == TransportCheckAPI || t == TransportMiddleware }

// Explanation is the explain answer: every policy of the namespace
// considered, in evaluation order, and the decision.
type Explanation struct {
	Namespace string              `json:"namespace"`
	Policies  []PolicyExplanation `json:"policies"`
	Decision  Decision            `json:"decision"`
}

// PolicyExplanation is one policy of the namespace, in evaluation order.
type PolicyExplanation struct {
	Name    string `json:"name"`
	Matched bool   `json:"matched"`
	// Reason says why a policy did not match.
	Reason string `json:"reason,omitempty"`
	// WhenError is the `when` expression's error: the policy applies.
	WhenError string `json:"whenError,omitempty"`
	// Key is the key value the request has under the policy, when it
	// matched; MissingKey says its template found no value.
	Key        *string      `json:"key,omitempty"`
	MissingKey *bool        `json:"missingKey,omitempty"`
	OnMissing  string       `json:"onMissingKey,omitempty"`
	Limits     []LimitState `json:"limits,omitempty"`
	Ban        *Ban         `json:"ban,omitempty"`
}

// Decision is the checker's decision for the request, had it been checked.
type Decision struct {
	Allowed bool `json:"allowed"`
	// Reason is the check's: Allowed, NoPolicyMatched, RateLimited,
	// Banned (the policy's penalty box), MissingKey or StoreUnavailable;
	// or NoRelease: the transport refuses the request, which meets a
	// concurrency limit it cannot release (the no-release problem).
	Reason string `json:"reason"`
	Policy string `json:"policy,omitempty"`
	// Limit is the limit whose figures the answer reports; none for a ban.
	// For NoRelease, the concurrency limit refused.
	Limit      string `json:"limit,omitempty"`
	RetryAfter string `json:"retryAfter"`
	// Detail is the refusal's explanation, as the transport answers it;
	// empty for a decision.
	Detail string `json:"detail,omitempty"`
}

// LimitState is one limit's figures for one key value, as a check would
// see them now.
type LimitState struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	// Limit is the number in force (the RateLimit-Policy header's quota).
	Limit      int64     `json:"limit"`
	Remaining  int64     `json:"remaining"`
	Reset      string    `json:"reset"`
	Allowed    bool      `json:"allowed"`
	RetryAfter string    `json:"retryAfter"`
	Override   *Override `json:"override"`
	// Reserved is the units of the limit's live reservations (charge
	// Reserve): estimates of requests not yet settled, counted as spent
	// in Remaining until they are.
	Reserved int64 `json:"reserved,omitempty"`
	// Mode is the limit's mode in force: Enforce, Shadow (never denies)
	// or Soft (never denies; a request over it goes on, flagged).
	Mode string `json:"mode"`
	// Hidden is set for a limit whose state the client never sees.
	Hidden bool `json:"hidden,omitempty"`
}

// Override is the override of a limit's number in force: where it comes
// from, the number, and the policy's own.
type Override struct {
	Source      string `json:"source"`
	Limit       int64  `json:"limit"`
	PolicyLimit int64  `json:"policyLimit"`
}

// Ban is a ban in force: how long it still lasts and how long it was
// issued for ("" when the index of bans does not know).
type Ban struct {
	Remaining string `json:"remaining"`
	Length    string `json:"length"`
}

// KeyState is the inspect answer: one key value's limits and ban under a
// policy.
type KeyState struct {
	Namespace string       `json:"namespace"`
	Policy    string       `json:"policy"`
	Key       string       `json:"key"`
	Limits    []LimitState `json:"limits"`
	Ban       *Ban         `json:"ban"`
	// Quota are the assignments of the bucket that Envoys hold through the
	// rate limit quota service of the process answering (none elsewhere).
	Quota []QuotaShare `json:"quota,omitempty"`
}

// QuotaShare is what one Envoy holds of a bucket through the rate limit
// quota service, and its last usage report.
type QuotaShare struct {
	// Envoy is the client's address and its stream's number.
	Envoy string `json:"envoy"`
	// Action is the assignment: token_bucket, allow_all or deny_all.
	Action string `json:"action"`
	// MaxTokens and TokensPerFill (per FillInterval) are the token
	// bucket's; Reserved, their sum, what it took from the limits.
	MaxTokens     int64  `json:"maxTokens"`
	TokensPerFill int64  `json:"tokensPerFill"`
	Reserved      int64  `json:"reserved"`
	Interval      string `json:"interval"`
	// Want is what its demand asked for one interval.
	Want int64 `json:"want"`
	// Reported is the time of its last report (RFC 3339); Allowed and
	// Denied that report's counts.
	Reported string `json:"reported"`
	Allowed  uint64 `json:"allowed"`
	Denied   uint64 `json:"denied"`
}

// ResetAnswer names the limits a reset reset.
type ResetAnswer struct {
	Namespace string   `json:"namespace"`
	Policy    string   `json:"policy"`
	Key       string   `json:"key"`
	Limits    []string `json:"limits"`
}

// BanList is the bans answer: the bans in force under a policy.
type BanList struct {
	Namespace string     `json:"namespace"`
	Policy    string     `json:"policy"`
	Bans      []KeyedBan `json:"bans"`
}

// KeyedBan is one key value's ban.
type KeyedBan struct {
	Key       string `json:"key"`
	Remaining string `json:"remaining"`
	Length    string `json:"length"`
}

// LiftAnswer names the key value whose ban was lifted (or whose run-time
// override was deleted).
type LiftAnswer struct {
	Namespace string `json:"namespace"`
	Policy    string `json:"policy"`
	Key       string `json:"key"`
}

// TopAnswer is the top answer: the key values a policy denied and
// admitted most over the last Window.
type TopAnswer struct {
	Namespace string   `json:"namespace"`
	Policy    string   `json:"policy"`
	Window    string   `json:"window"`
	Denied    []TopKey `json:"denied"`
	Admitted  []TopKey `json:"admitted"`
	// ErrorBound says in words how far the counts may be from the truth.
	ErrorBound string `json:"errorBound"`
}

// The top call's window (the "window" query parameter): whole minutes
// from one to MaxTopWindow, the minutes each check process keeps;
// DefaultTopWindow when none is given.
const (
	DefaultTopWindow = 5 * time.Minute
	MaxTopWindow     = 15 * time.Minute
)

// ParseTopWindow reads a top window as the query gives it ("5m"); empty
// is DefaultTopWindow. Its error names the window.
func ParseTopWindow(s string) (time.Duration, error) {
	if s == "" {
		return DefaultTopWindow, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("window %q: not a duration such as 5m", s)
	}
	if CheckTopWindow(d) != nil {
		return 0, fmt.Errorf("window %q: %s", s, windowRule)
	}
	return d, nil
}

// CheckTopWindow refuses a window that is not whole minutes from one
// minute to MaxTopWindow.
func CheckTopWindow(d time.Duration) error {
	if d < time.Minute || d > MaxTopWindow || d%time.Minute != 0 {
		return fmt.Errorf("window %s: %s", d, windowRule)
	}
	return nil
}

var windowRule = fmt.Sprintf("must be whole minutes from 1m to %dm", MaxTopWindow/time.Minute)

// FormatTopWindow writes whole minutes as "5m", as ParseTopWindow reads
// them.
func FormatTopWindow(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// TopKey is one key value's count, which exceeds the true number of its
// decisions by at most Overestimate.
type TopKey struct {
	Key          string `json:"key"`
	Count        int64  `json:"count"`
	Overestimate int64  `json:"overestimate"`
}

// OverrideList is the overrides answer: a policy's overrides, run time
// and declared.
type OverrideList struct {
	Namespace string          `json:"namespace"`
	Policy    string          `json:"policy"`
	Overrides []OverrideEntry `json:"overrides"`
}

// OverrideEntry is one key value's override: other numbers for some of
// its policy's limits.
type OverrideEntry struct {
	// Key is the key value as the policy's key template renders it.
	Key string `json:"key"`
	// Limits are the numbers by limit name: each limit's quota.
	Limits map[string]int64 `json:"limits"`
	// Source is Runtime or Declared.
	Source string `json:"source"`
	// Expires is when the override stops applying; nil: never.
	Expires *time.Time `json:"expires"`
	// SetBy names who set a run-time override, and SetAt when.
	SetBy string    `json:"setBy,omitempty"`
	SetAt time.Time `json:"setAt,omitzero"`
	// Object names the RateLimitOverrides object of a declared override.
	Object string `json:"object,omitempty"`
}

// SetOverride is the body of a set: the numbers by limit name, and an
// expiry as a duration from now (ExpiresIn) or a time (Expires); neither
// is no expiry.
type SetOverride struct {
	Limits    map[string]int64 `json:"limits"`
	ExpiresIn string           `json:"expiresIn,omitempty"`
	Expires   *time.Time       `json:"expires,omitempty"`
}
