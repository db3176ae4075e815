package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/check"
)

// writeJSON answers v as JSON with code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client went away: nothing to tell
}

// writeStatus answers an error as a metav1.Status.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	writeJSON(w, code, metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: message, Reason: reason, Code: int32(code), //nolint:gosec // an HTTP status
	})
}

func badRequest(w http.ResponseWriter, format string, args ...any) {
	writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf(format, args...))
}

func notFound(w http.ResponseWriter, format string, args ...any) {
	writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf(format, args...))
}

// writeError answers an error of the checker: what names nothing in force
// is not found, a store that cannot is not implemented, and a store that
// failed is unavailable.
func writeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, check.ErrUnknownPolicy), errors.Is(err, check.ErrUnknownLimit):
		notFound(w, "%s", err)
	case errors.Is(err, check.ErrUnsupported):
		writeStatus(w, http.StatusNotImplemented, metav1.StatusReason("NotImplemented"), err.Error())
	default:
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, err.Error())
	}
}
