package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/adminapi"
	"github.com/sluice-dev/sluice/internal/overrides"
)

// maxOverrideBody bounds a set's body: a few limits' numbers.
const maxOverrideBody = 64 << 10

func (h *Handler) listOverrides(w http.ResponseWriter, r *http.Request) {
	p, _ := h.target(w, r, false)
	if p == nil {
		return
	}
	entries, err := h.overrides.List(r.Context(), overrides.PolicyID{Namespace: p.Namespace, Name: p.Name})
	if err != nil {
		writeOverrideError(w, err)
		return
	}
	list := adminapi.OverrideList{Namespace: p.Namespace, Policy: p.Name, Overrides: make([]adminapi.OverrideEntry, len(entries))}
	for i := range entries {
		list.Overrides[i] = wireEntry(&entries[i])
	}
	writeJSON(w, http.StatusOK, list)
}

func (h *Handler) setOverride(w http.ResponseWriter, r *http.Request) {
	p, key := h.target(w, r, true)
	if p == nil {
		return
	}
	var body adminapi.SetOverride
	dec := json.NewDecoder(io.LimitReader(r.Body, maxOverrideBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		badRequest(w, "body: %v (want {\"limits\": {\"<limit>\": <number>}, \"expiresIn\": \"48h\"})", err)
		return
	}
	if len(body.Limits) == 0 {
		badRequest(w, `body: "limits" is required: the numbers by limit name, such as {"per-minute": 1000}`)
		return
	}
	expires := body.Expires
	if body.ExpiresIn != "" {
		if expires != nil {
			badRequest(w, `body: give "expiresIn" or "expires", not both`)
			return
		}
		d, err := time.ParseDuration(body.ExpiresIn)
		if err != nil || d <= 0 {
			badRequest(w, `body: "expiresIn" %q is not a positive duration such as "48h"`, body.ExpiresIn)
			return
		}
		at := h.now().Add(d)
		expires = &at
	}
	entry, err := h.overrides.Set(r.Context(), overrides.PolicyID{Namespace: p.Namespace, Name: p.Name}, key, body.Limits, expires, CallerFrom(r.Context()))
	if err != nil {
		writeOverrideError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireEntry(&entry))
}

// wireEntry is an override as the admin API lists it.
func wireEntry(e *overrides.Entry) adminapi.OverrideEntry {
	return adminapi.OverrideEntry{Key: e.Key, Limits: e.Limits, Source: string(e.Source), Expires: e.Expires, SetBy: e.SetBy, SetAt: e.SetAt, Object: e.Object}
}

func (h *Handler) deleteOverride(w http.ResponseWriter, r *http.Request) {
	p, key := h.target(w, r, true)
	if p == nil {
		return
	}
	if err := h.overrides.Delete(r.Context(), overrides.PolicyID{Namespace: p.Namespace, Name: p.Name}, key, CallerFrom(r.Context())); err != nil {
		writeOverrideError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, adminapi.LiftAnswer{Namespace: p.Namespace, Policy: p.Name, Key: key})
}

// writeOverrideError answers an error of the overrides: their message
// names the argument; a bad one is a bad request, what names nothing is
// not found, and the store failing is unavailable.
func writeOverrideError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, overrides.ErrNotFound):
		notFound(w, "%s", err)
	case errors.Is(err, overrides.ErrInvalid), errors.Is(err, overrides.ErrTooMany):
		badRequest(w, "%s", err)
	default:
		WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, err.Error())
	}
}
