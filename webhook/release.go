package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sluice-dev/sluice/internal/check"
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
}

// ReleaseResponse is the answer of POST /v1/release.
type ReleaseResponse struct {
	// Released is true when the handle's units were held and are now
	// freed; false when they were not (released already, their lease
	// timed out, or the handle was never issued).
	Released bool `json:"released"`
	// Policies are the matching policies' figures after the release.
	Policies []PolicyReport `json:"policies"`
}

type releaseHandle struct {
	Namespace string          `json:"ns"`
	Policy    string          `json:"p,omitempty"`
	Request   OriginalRequest `json:"r"`
	Holder    string          `json:"h"`
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
	out, err := s.opts.Checker.Check(r.Context(), check.Input{
		Namespace: h.Namespace, Policy: h.Policy, Request: req, Holder: h.Holder, Action: ratelimit.Release,
	})
	if err != nil {
		s.checkError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ReleaseResponse{Released: out.Allowed, Policies: report(out).Policies})
}
