package checkhttp

import (
	"fmt"
	"mime"
	"net/http"

	"github.com/sluice-dev/sluice/internal/intake"
)

// RequireJSON answers 415 unless r declares a JSON body (Content-Type
// application/json; parameters such as charset are allowed), and reports
// whether r may go on. Every route that changes or spends something asks
// it: a browser sends another site's page's cross-site request without
// asking first only with a form's content types (text/plain, urlencoded,
// multipart), while application/json needs a CORS preflight, which Sluice
// never grants. A body-less change (the dashboard's revert) declares it
// too, so that the rule has no exception to get wrong.
func RequireJSON(w http.ResponseWriter, r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return true
	}
	detail := "Content-Type: missing; this route reads only JSON (Content-Type: application/json)"
	if ct != "" {
		detail = fmt.Sprintf("Content-Type: %q is not application/json; this route reads only JSON (Content-Type: application/json)", intake.Excerpt(ct))
	}
	WriteProblem(w, Problem{Type: ProblemAboutBlank, Title: "Unsupported Media Type", Status: http.StatusUnsupportedMediaType, Detail: detail})
	return false
}
