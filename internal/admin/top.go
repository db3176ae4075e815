package admin

import (
	"net/http"

	"github.com/sluice-dev/sluice/internal/topkeys"
)

func (h *Handler) top(w http.ResponseWriter, r *http.Request) {
	p, _ := h.target(w, r, false)
	if p == nil {
		return
	}
	window, err := topkeys.ParseWindow(r.URL.Query().Get("window"))
	if err != nil {
		badRequest(w, "query parameter \"window\": %v", err)
		return
	}
	answer, err := h.topKeys.Top(r.Context(), p.Namespace, p.Name, window)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, answer)
}
