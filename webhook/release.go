package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/policy"
	"github.com/sluice-dev/sluice/internal/ratelimit"
)

// A /v1/check answer that admits a request into a concurrency limit
// carries a release handle; POST /v1/release takes it back when the
// request ends. The handle is the check it releases (namespace, policy,
// request) and the request's holder, a random 128-bit name: it is opaque
// to callers, and unguessable, so no one frees units another caller
// holds. A handle made up or altered names a holder that holds nothing,
// and frees nothing.

// ReleaseRequest is the body of POST /v1/release.
type ReleaseRequest struct {
	// Release is the handle a /v1/check answer carried.
	Release string `json:"release"`
	// Cost is the request's actual cost, which settles the reservations
	// of policies with charge Reserve (0 gives every reserved unit back).
	// Without it or usage, a reservation stays charged as estimated.
	Cost *int64 `json:"cost,omitempty"`
	// Usage is what the request used, which each policy with charge
	// Reserve prices (reserve.pricing) into its actual cost. Not with
	// cost.
	Usage *UsageReport `json:"usage,omitempty"`
}

// UsageReport is the usage of an LLM call: inputTokens (cached ones
// included, as OpenAI's prompt_tokens) and outputTokens required,
// cachedInputTokens 0 when absent.
type UsageReport struct {
	// InputTokens are the input tokens, the cached ones included.
	// Required.
	InputTokens *int64 `json:"inputTokens"`
	// OutputTokens are the output tokens. Required.
	OutputTokens *int64 `json:"outputTokens"`
	// CachedInputTokens are the input tokens read from cache, at most
	// inputTokens; 0 when absent.
	CachedInputTokens *int64 `json:"cachedInputTokens,omitempty"`
}

// settlement reads in's cost or usage, refusing bad values with the field
// named: at most one of them, counts 0..ratelimit.MaxCount, usage's
// required counts present.
func (in *ReleaseRequest) settlement() (cost int64, usage *policy.Usage, err error) {
	switch {
	case in.Cost != nil && in.Usage != nil:
		return 0, nil, fmt.Errorf("cost, usage: give one of them, not both")
	case in.Cost != nil:
		if c := *in.Cost; c < 0 || c > ratelimit.MaxCount {
			return 0, nil, fmt.Errorf("cost: %d, want 0 to %d", c, ratelimit.MaxCount)
		}
		return *in.Cost, nil, nil
	case in.Usage == nil:
		return 0, nil, nil
	case in.Usage.InputTokens == nil:
		return 0, nil, fmt.Errorf("usage.inputTokens: required")
	case in.Usage.OutputTokens == nil:
		return 0, nil, fmt.Errorf("usage.outputTokens: required")
	}
	u := policy.Usage{InputTokens: *in.Usage.InputTokens, OutputTokens: *in.Usage.OutputTokens}
	if in.Usage.CachedInputTokens != nil {
		u.CachedInputTokens = *in.Usage.CachedInputTokens
	}
	if err := u.Validate("usage"); err != nil {
		return 0, nil, err
	}
	return 0, &u, nil
}

// ReleaseResponse is the answer of POST /v1/release.
type ReleaseResponse struct {
	// Released is true when the handle's units were held and are now
	// freed, or its reservations settled; false when they were not
	// (released already, their lease or ttl ran out, or the handle was
	// never issued).
	Released bool `json:"released"`
	// Policies are the matching policies' figures after the release.
	Policies []PolicyReport `json:"policies"`
}

type releaseHandle struct {
	Namespace string          `json:"ns"`
	Policy    string          `json:"p,omitempty"`
	Request   OriginalRequest `json:"r"`
	Holder    string          `json:"h"`
	// Cost is the check's cost (0: the policies' own), the estimate a
	// release without cost or usage settles at.
	Cost int64 `json:"c,omitempty"`
}

// newHolder names one checked request: 128 random bits.
func newHolder() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (h releaseHandle) encode() string {
	b, _ := json.Marshal(h) // plain strings and maps: never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeHandle(s string) (releaseHandle, error) {
	var h releaseHandle
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &h)
	}
	if err != nil || h.Namespace == "" || h.Holder == "" || len(h.Holder) > ratelimit.MaxHolderLen {
		return h, fmt.Errorf("release: not a release handle of POST /v1/check")
	}
	return h, nil
}

func (s *CheckEndpoint) handleRelease(w http.ResponseWriter, r *http.Request) {
	var in ReleaseRequest
	if !s.readJSON(w, r, &in) {
		return
	}
	h, err := decodeHandle(in.Release)
	if err != nil {
		s.badRequest(w, err)
		return
	}
	req, err := h.Request.read()
	if err != nil {
		s.badRequest(w, fmt.Errorf("release: %w", err))
		return
	}
	cost, usage, err := in.settlement()
	if err != nil {
		s.badRequest(w, err)
		return
	}
	released, err := s.opts.Checker.Check(r.Context(), check.Input{
		Namespace: h.Namespace, Policy: h.Policy, Request: req, Holder: h.Holder, Action: ratelimit.Release,
	})
	if err != nil {
		s.checkError(w, err)
		return
	}
	// The reservations are settled by a call of their own: a release
	// leaves them alone, and a settlement units in flight.
	settle := check.Input{Namespace: h.Namespace, Policy: h.Policy, Holder: h.Holder, Action: ratelimit.Settle,
		Parts: []check.Part{{Request: req, Cost: cost, CostSet: in.Cost != nil, Usage: usage}}}
	if in.Cost == nil && usage == nil { // no actual: settled at the check's estimate
		settle.Parts[0] = check.Part{Request: req, Cost: h.Cost, CostSet: h.Cost > 0, Estimated: true}
	}
	settled, err := s.opts.Checker.Check(r.Context(), settle)
	if err != nil {
		s.checkError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ReleaseResponse{Released: released.Allowed || settled.Allowed, Policies: mergeReports(report(released).Policies, report(settled).Policies)})
}

// mergeReports joins the reports of a release and a settlement of one
// request, whose policies are the same, in the same order: each policy's
// from the call that reached its limits.
func mergeReports(released, settled []PolicyReport) []PolicyReport {
	for i := range released {
		if i < len(settled) && len(released[i].Limits) == 0 && (len(settled[i].Limits) > 0 || settled[i].Reservation != "") {
			released[i] = settled[i]
		}
	}
	return released
}

// reportReservation copies what the check did to pr's reservation into
// rep.
func reportReservation(rep *PolicyReport, pr *check.PolicyResult) {
	outcome, reserved, actual := pr.Reservation()
	if outcome == "" {
		return
	}
	rep.Reservation, rep.Reserved = string(outcome), reserved
	switch outcome {
	case check.ReservationSettledBelow, check.ReservationSettledExact, check.ReservationSettledAbove:
		rep.Settled = &actual
	}
}
