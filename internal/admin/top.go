package admin

import (
	"net/http"

	"github.com/sluice-dev/sluice/internal/adminapi"
	"github.com/sluice-dev/sluice/internal/topkeys"
)

func (h *Handler) top(w http.ResponseWriter, r *http.Request) {
	p, _ := h.target(w, r, false)
	if p == nil {
		return
	}
	window, err := adminapi.ParseTopWindow(r.URL.Query().Get("window"))
	if err != nil {
		badRequest(w, "query parameter \"window\": %v", err)
		return
	}
	answer, err := h.topKeys.Top(r.Context(), p.Namespace, p.Name, window)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wireTop(answer))
}

// wireTop is a top answer as the admin API writes it.
func wireTop(a *topkeys.Answer) adminapi.TopAnswer {
	return adminapi.TopAnswer{
		Namespace: a.Namespace, Policy: a.Policy, Window: adminapi.FormatTopWindow(a.Window),
		Denied: wireTopKeys(a.Denied.Entries), Admitted: wireTopKeys(a.Admitted.Entries),
		ErrorBound: a.ErrorBound(),
	}
}

func wireTopKeys(entries []topkeys.Entry) []adminapi.TopKey {
	keys := make([]adminapi.TopKey, len(entries))
	for i, e := range entries {
		keys[i] = adminapi.TopKey{Key: e.Key, Count: e.Count, Overestimate: e.Overestimate}
	}
	return keys
}
