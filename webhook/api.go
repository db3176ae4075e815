package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
	"github.com/sluice-dev/sluice/internal/intake"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/tracing"
)

// maxJSONBody bounds a POST /v1/check body.
const maxJSONBody = 1 << 20

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	// Namespace is the namespace whose policies decide; required.
	Namespace string `json:"namespace"`
	// Policy, when set, checks only that policy.
	Policy string `json:"policy,omitempty"`
	// Request is the request to decide.
	Request OriginalRequest `json:"request"`
	// Cost overrides the policies' cost when above 0: for a policy with
	// charge Reserve, the estimate to reserve (clamped to reserve.max).
	Cost int64 `json:"cost,omitempty"`
	// DryRun evaluates without consuming.
	DryRun bool `json:"dryRun,omitempty"`
}

// OriginalRequest describes the request to decide. The path may carry a
// query ("/search?q=x").
type OriginalRequest struct {
	// Method is the request's method; empty: GET.
	Method string `json:"method"`
	// Host is the request's host; empty: none (a policy's hosts then
	// match nothing).
	Host string `json:"host"`
	// Path is the request's path, with its query if any; empty: "/".
	Path string `json:"path"`
	// Headers are the request's headers by name, one value each.
	Headers map[string]string `json:"headers,omitempty"`
	// ClientIP is the client's address, for {client_ip} keys and
	// exemptClients; empty: none.
	ClientIP string `json:"clientIP,omitempty"`
}

// CheckResponse is the answer of POST /v1/check.
type CheckResponse struct {
	// Allowed is the decision.
	Allowed bool `json:"allowed"`
	// Reason says why (check.Reason).
	Reason string `json:"reason"`
	// RetryAfterSeconds is set on a denial that a later retry can pass.
	RetryAfterSeconds *int64 `json:"retryAfterSeconds,omitempty"`
	// Degraded is set when a policy's failureMode answered because the
	// store could not.
	Degraded bool `json:"degraded,omitempty"`
	// Error is the store's error when Degraded.
	Error string `json:"error,omitempty"`
	// Policies are the matching policies' parts in the decision.
	Policies []PolicyReport `json:"policies"`
	// OverLimit names the soft limits the request, allowed, is over, as
	// the X-Sluice-Over-Limit header does (also set on this answer).
	OverLimit string `json:"overLimit,omitempty"`
	// Release is set when the request holds units of a concurrency limit,
	// or a reservation of a policy with charge Reserve: an opaque handle
	// to POST to /v1/release when the request ends (with the actual cost
	// or usage, which settles the reservation). Until then (or until the
	// limits' lease timeout, the reservation's ttl) they stay held.
	Release string `json:"release,omitempty"`
}

// PolicyReport is one matching policy's part in the decision.
type PolicyReport struct {
	// Namespace is the policy's namespace.
	Namespace string `json:"namespace"`
	// Name is the policy's name.
	Name string `json:"name"`
	// Mode is the policy's mode: Enforce or Shadow.
	Mode string `json:"mode"`
	// Key is the key value the policy's template rendered for the
	// request: its bucket.
	Key string `json:"key,omitempty"`
	// MissingKey is set when a placeholder of the key had no value; the
	// policy's onMissingKey then decided.
	MissingKey bool `json:"missingKey,omitempty"`
	// WhenError is the error of the policy's `when` expression on this
	// request.
	WhenError string `json:"whenError,omitempty"`
	// BanSeconds is the ban this check issued the policy's bucket (its
	// penalty box), in seconds rounded up; in mode Shadow, the ban it
	// would have issued.
	BanSeconds int64 `json:"banSeconds,omitempty"`
	// Reservation is what the check did to the policy's reservation
	// (charge Reserve): reserved, settled_below, settled_exact,
	// settled_above or nothing_reserved.
	Reservation string `json:"reservation,omitempty"`
	// Reserved is the units the request reserved, or the reservation a
	// settlement replaced.
	Reserved int64 `json:"reserved,omitempty"`
	// Settled is a settlement's actual cost.
	Settled *int64 `json:"settled,omitempty"`
	// Limits are the figures of the policy's limits.
	Limits []LimitReport `json:"limits,omitempty"`
}

// LimitReport is one limit's figures.
type LimitReport struct {
	// Name is the limit's name in the policy.
	Name string `json:"name"`
	// Mode is the limit's mode in force: Enforce, Shadow (never denies)
	// or Soft (never denies; a request over it goes on, flagged).
	Mode string `json:"mode"`
	// Hidden is set for a limit whose state the client is never shown.
	Hidden bool `json:"hidden,omitempty"`
	// Algorithm is the limit's algorithm (TokenBucket, FixedWindow, ...).
	Algorithm string `json:"algorithm"`
	// RedisKey is the Redis key that holds the limit's state: its
	// bucket's hash, whose field RedisField is the limit's, or a sliding
	// window log's own sorted set (no field).
	RedisKey string `json:"redisKey"`
	// RedisField is the limit's field in RedisKey's hash; empty for a
	// sliding window log.
	RedisField string `json:"redisField,omitempty"`
	// Allowed is the limit's own verdict.
	Allowed bool `json:"allowed"`
	// Limit is the limit's quota: a window's limit, a bucket's capacity,
	// GCRA's burst, a concurrency limit's limit (an override's number when
	// one applies).
	Limit int64 `json:"limit"`
	// Remaining is how many requests of cost 1 the limit admits now, after
	// this one was counted if it was.
	Remaining int64 `json:"remaining"`
	// ResetSeconds is the time until the limit is back to untouched,
	// rounded up.
	ResetSeconds int64 `json:"resetSeconds"`
	// RetryAfterSeconds is set when the limit denies and a later retry
	// can pass: the seconds until it would, rounded up.
	RetryAfterSeconds *int64 `json:"retryAfterSeconds,omitempty"`
	// Cached is set when the denial came from the in-process cache of
	// denials, without Redis.
	Cached bool `json:"cached,omitempty"`
	// Banned: denied because the bucket is banned (its policy's penalty
	// box), until retryAfterSeconds.
	Banned bool `json:"banned,omitempty"`
	// Reserved is the units of the limit's live reservations (charge
	// Reserve), counted as spent in remaining until they are settled.
	Reserved int64 `json:"reserved,omitempty"`
}

// readJSON decodes r's body, declared JSON and at most maxJSONBody bytes,
// into v; otherwise it answers the problem and returns false.
func (s *CheckEndpoint) readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if !checkhttp.RequireJSON(w, r) {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody+1))
	if err != nil {
		s.badRequest(w, fmt.Errorf("body: %w", err))
		return false
	}
	if len(body) > maxJSONBody {
		s.badRequest(w, fmt.Errorf("body: larger than %d bytes", maxJSONBody))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		s.badRequest(w, fmt.Errorf("body: %w", err))
		return false
	}
	return true
}

func (s *CheckEndpoint) handleJSON(w http.ResponseWriter, r *http.Request) {
	var in CheckRequest
	if !s.readJSON(w, r, &in) {
		return
	}
	req, err := in.toPolicyRequest()
	if err != nil {
		s.badRequest(w, err)
		return
	}
	if in.Namespace == "" {
		s.badRequest(w, fmt.Errorf("namespace: required"))
		return
	}
	if in.Cost < 0 || in.Cost > ratelimit.MaxCount {
		s.badRequest(w, fmt.Errorf("cost: must be from 0 to %d", ratelimit.MaxCount))
		return
	}
	holder := newHolder()
	ctx, span := s.opts.Tracer.StartHTTP(r.Context(), tracing.IntakeAPI, in.Namespace, r.Header)
	out, err := s.opts.Checker.Check(ctx, check.Input{
		Namespace: in.Namespace, Policy: in.Policy, Request: req, Cost: in.Cost, Action: in.action(), Holder: holder,
	})
	span.End(out, err)
	if err != nil {
		s.checkError(w, err)
		return
	}
	resp := report(out)
	if out.Holds() {
		resp.Release = releaseHandle{Namespace: in.Namespace, Policy: in.Policy, Request: in.Request, Holder: holder, Cost: in.Cost}.encode()
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverLimit != "" {
		w.Header().Set(checkhttp.OverLimitHeader, resp.OverLimit)
	}
	_ = json.NewEncoder(w).Encode(resp)
}

// action is the check's action: a dry run or a real one.
func (in *CheckRequest) action() ratelimit.Action {
	if in.DryRun {
		return ratelimit.DryRun
	}
	return ratelimit.Consume
}

// requestFields names each field Read may refuse as the body spells it.
var requestFields = map[intake.Field]string{
	intake.FieldMethod: "request.method", intake.FieldHost: "request.host", intake.FieldTarget: "request.path",
	intake.FieldHeaders: "request.headers", intake.FieldClientAddress: "request.clientIP",
}

// toPolicyRequest maps the body's request onto the intake: the method
// defaults to GET, the path to "/", the host is optional, and the client
// is the address the caller names (forwarded headers are the caller's to
// have resolved).
func (in *CheckRequest) toPolicyRequest() (*policy.Request, error) {
	req, err := in.Request.read()
	if err != nil {
		f, _ := intake.FieldOf(err)
		return nil, fmt.Errorf("%s: %w", requestFields[f], err)
	}
	return req, nil
}

func (o *OriginalRequest) read() (*policy.Request, error) {
	in := intake.Original{Method: o.Method, Authority: o.Host, HostOptional: true, Target: o.Path}
	if in.Method == "" {
		in.Method = http.MethodGet
	}
	if in.Target == "" {
		in.Target = "/"
	}
	headers := intake.HeaderSection{Header: make(http.Header, len(o.Headers))}
	for k, v := range o.Headers {
		if err := headers.Add(k, v); err != nil {
			return nil, err
		}
	}
	in.Header = headers.Header
	if o.ClientIP != "" {
		var err error
		if in.Peer, err = intake.ReadAddress(o.ClientIP); err != nil {
			return nil, err
		}
	}
	req := &policy.Request{}
	if err := intake.Read(&in, nil, req); err != nil {
		return nil, err
	}
	return req, nil
}

func report(out *check.Outcome) CheckResponse {
	resp := CheckResponse{Allowed: out.Allowed, Reason: string(out.Reason), Degraded: out.Degraded, Policies: []PolicyReport{},
		OverLimit: checkhttp.OverLimit(out)}
	if out.StoreErr != nil {
		resp.Error = out.StoreErr.Error()
	}
	if !out.Allowed && out.RetryAfter > 0 && out.RetryAfter != ratelimit.Never {
		secs := checkhttp.CeilSeconds(out.RetryAfter)
		resp.RetryAfterSeconds = &secs
	}
	index := map[*policy.Policy]int{}
	for _, pr := range out.Policies {
		mode := "Enforce"
		if pr.Policy.Shadow {
			mode = "Shadow"
		}
		rep := PolicyReport{Namespace: pr.Policy.Namespace, Name: pr.Policy.Name, Mode: mode, Key: printableKey(pr.KeyValue), MissingKey: pr.MissingKey,
			BanSeconds: checkhttp.CeilSeconds(pr.Ban)}
		if pr.WhenError != nil {
			rep.WhenError = pr.WhenError.Error()
		}
		reportReservation(&rep, &pr)
		index[pr.Policy] = len(resp.Policies)
		resp.Policies = append(resp.Policies, rep)
	}
	for _, lr := range out.Limits {
		key, field := ratelimit.RedisKey(lr.Key, lr.Limit.Limit.Algorithm)
		l := LimitReport{
			Name: lr.Limit.Name, Mode: string(lr.Limit.Mode), Hidden: lr.Limit.Hidden,
			Algorithm: lr.Limit.Limit.Algorithm.String(), RedisKey: key, RedisField: field,
			Allowed: lr.Allowed, Limit: lr.Limit.Limit.Capacity, Remaining: lr.Remaining,
			ResetSeconds: checkhttp.CeilSeconds(lr.Reset), Cached: lr.Cached, Banned: lr.Banned, Reserved: lr.Reserved,
		}
		if !lr.Allowed && lr.RetryAfter > 0 && lr.RetryAfter != ratelimit.Never {
			secs := checkhttp.CeilSeconds(lr.RetryAfter)
			l.RetryAfterSeconds = &secs
		}
		i := index[lr.Policy]
		resp.Policies[i].Limits = append(resp.Policies[i].Limits, l)
	}
	return resp
}

// printableKey shows a key value for people: the shared bucket of
// requests without a key by name, control bytes escaped.
func printableKey(v string) string {
	if strings.HasPrefix(v, "\x00") {
		return "(shared bucket of requests without a key)"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 {
			return '|'
		}
		return r
	}, v)
}
