package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/check"
)

// writeJSON answers v as JSON with code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client went away: nothing to tell
}

// WriteStatus answers an error as a metav1.Status, which client-go and
// kubectl render.
func WriteStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	writeJSON(w, code, metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: message, Reason: reason, Code: int32(code), //nolint:gosec // an HTTP status
	})
}

func badRequest(w http.ResponseWriter, format string, args ...any) {
	WriteStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf(format, args...))
}

func notFound(w http.ResponseWriter, format string, args ...any) {
	WriteStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf(format, args...))
}

// errBadRequest marks an error of the caller's arguments.
var errBadRequest = errors.New("bad request")

// writeError answers an error: a bad argument is a bad request, what names
// nothing in force is not found, a store that cannot is not implemented,
// and a store that failed is unavailable.
func writeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errBadRequest):
		badRequest(w, "%s", strings.TrimPrefix(err.Error(), errBadRequest.Error()+": "))
	case errors.Is(err, check.ErrUnknownPolicy), errors.Is(err, check.ErrUnknownLimit):
		notFound(w, "%s", err)
	case errors.Is(err, check.ErrUnsupported):
		WriteStatus(w, http.StatusNotImplemented, metav1.StatusReason("NotImplemented"), err.Error())
	default:
		WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, err.Error())
	}
}
